"""Every ```python and ```bash snippet of README.md and docs/*.md runs as written, from a
directory outside the repository (issue 11). New pages are picked up by themselves.

How they run:

- A page's snippets run in order, in one fresh temporary directory for the page, so a later
  snippet may use what an earlier one made, as a reader going down the page would (README's
  ``carbonlite`` commands look at the table its Python example made).
- Only the package is importable: the repository root is not on the path (nor a checkout an
  editable install put there), so a snippet that imports ``tests.`` fails, as it would for a
  user. Bash runs with this interpreter's ``bin`` first on ``PATH`` (``python``,
  ``carbonlite``), under ``set -euo pipefail``.
- Skipped, and listed in the test report: a snippet after an
  ``<!-- snippet: skip (the reason) -->`` line (the reason is required); and by rule, a bash
  snippet that installs packages (``pip install``), which a test must not do to its
  environment.
- A snippet may leave a process running in the background (INGEST.md's walkthrough starts a
  Kafka-protocol broker and a later snippet stops it); whatever a page's snippets leave is
  killed when the page's test ends, passed or failed.
- Snippets that start Spark (``carbonlite.spark``, ``carbonlite demo``) run in tests of their
  own, marked ``spark``, each in a fresh directory: they must not depend on other snippets.
- A bash snippet after an ``<!-- snippet: background -->`` line is a server the page's later
  snippets talk to (``carbonlite serve``): one command, started in the background; the page
  goes on once it printed its first line, and after the page's last snippet it gets SIGTERM
  and must exit 0.
- A page with an ``<!-- snippet: free-port 8815 -->`` line (anywhere) has that port number
  replaced in its snippets by a free one, so its server never meets another on the machine.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from subprocess import PIPE

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("docs/*.md"))]
RUN = ("python", "bash")
_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_SKIP = re.compile(r"<!--\s*snippet:\s*skip\s*(?:\((?P<reason>.*?)\))?\s*-->")
_BACKGROUND = re.compile(r"<!--\s*snippet:\s*background\s*-->")
_FREE_PORT = re.compile(r"<!--\s*snippet:\s*free-port\s+(?P<port>\d+)\s*-->")
_INSTALLS = re.compile(r"\bpip3?\s+install\b")
_SPARK = re.compile(r"\bcarbonlite\.spark\b|\bpyspark\b|\bcarbonlite\s+demo\b")
TIMEOUT = 600


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int
    lang: str
    code: str
    skip: str | None
    """Why it is not run (None: it is run)."""
    background: bool = False
    """A server the later snippets of the page use (see the module doc)."""

    @property
    def spark(self) -> bool:
        return bool(_SPARK.search(self.code))

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def snippets(page: str) -> list[Snippet]:
    """The python and bash snippets of ``page`` in order, each with why it is skipped."""
    text = (ROOT / page).read_text(encoding="utf-8")
    out = []
    previous_end = 0
    for match in _FENCE.finditer(text):
        lang, code = match.group(1), match.group(2)
        before = text[previous_end : match.start()].strip().splitlines()
        previous_end = match.end()
        if lang not in RUN:
            continue
        line = text.count("\n", 0, match.start()) + 2  # the first line of code
        skip = None
        marker = _SKIP.fullmatch(before[-1].strip()) if before else None
        if before and _BACKGROUND.fullmatch(before[-1].strip()):
            assert lang == "bash" and len(code.strip().splitlines()) == 1, (
                f"{page}:{line}: a background snippet is one bash command"
            )
            out.append(Snippet(page, line, lang, code, None, background=True))
            continue
        if marker is not None:
            skip = (marker.group("reason") or "").strip()
            assert skip, (
                f"{page}:{line}: a snippet skip needs a reason: <!-- snippet: skip (why) -->"
            )
        elif lang == "bash" and _INSTALLS.search(code):
            skip = "installs packages"
        out.append(Snippet(page, line, lang, code, skip))
    return out


def free_ports(page: str) -> dict[str, str]:
    """The port numbers ``page`` asks to have replaced, each with a free port."""
    text = (ROOT / page).read_text(encoding="utf-8")
    out = {}
    for match in _FREE_PORT.finditer(text):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            out[match.group("port")] = str(probe.getsockname()[1])
    return out


def with_ports(snippet: Snippet, ports: dict[str, str]) -> Snippet:
    code = snippet.code
    for old, new in ports.items():
        code = re.sub(rf"\b{old}\b", new, code)
    return replace(snippet, code=code)


def _package_only(tmp: Path) -> dict[str, str]:
    """An environment whose Python path holds this checkout's package and nothing else of
    the repository."""
    only = tmp / "package"
    only.mkdir()
    (only / "carbonlite").symlink_to(ROOT / "carbonlite", target_is_directory=True)
    bin_dir = os.path.dirname(sys.executable)
    return {
        **os.environ,
        "PYTHONPATH": str(only),
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "COLUMNS": "100",
    }


_RUNNER = """
import os, runpy, sys
checkouts = set(sys.argv[2].split(os.pathsep))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) not in checkouts]
script = sys.argv[1]
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
"""
"""Runs a snippet with every repository checkout (this one, and any an editable install of
carbonlite put on ``sys.path``) removed from the path."""


def _checkouts() -> str:
    found = {os.path.realpath(ROOT)}
    for entry in sys.path:
        if entry and (Path(entry) / "tests" / "__init__.py").is_file():
            found.add(os.path.realpath(entry))
    return os.pathsep.join(sorted(found))


def _left_behind(group: int) -> list[tuple[int, str]]:
    """The processes still in process group ``group`` (a snippet's background jobs, such as
    INGEST.md's broker), each as (pid, start time) from /proc (none where there is none)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group:  # fields from the state on: pgrp is the 3rd, start 20th
            found.append((int(stat.parent.name), fields[19]))
    return found


def stop_left_behind(processes: list[tuple[int, str]]) -> None:
    """SIGKILL each of ``processes`` that still runs (the same pid with the same start time)."""
    for pid, started in processes:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            if fields[19] == started:
                os.kill(pid, signal.SIGKILL)
        except (OSError, IndexError):
            continue


def run_snippet(
    snippet: Snippet, work: Path, env: dict[str, str], left: list[tuple[int, str]] | None = None
) -> None:
    """Run one snippet in a session of its own; processes it leaves running in the background
    are added to ``left``, for the caller to stop."""
    scripts = work.parent / "scripts"
    scripts.mkdir(exist_ok=True)
    script = scripts / f"line{snippet.line}.{'py' if snippet.lang == 'python' else 'sh'}"
    script.write_text(snippet.code, encoding="utf-8")
    if snippet.lang == "python":
        argv = [sys.executable, "-c", _RUNNER, str(script), _checkouts()]
    else:
        argv = ["bash", "-c", f"set -euo pipefail\n{snippet.code}"]
    with subprocess.Popen(
        argv, cwd=work, env=env, stdout=PIPE, stderr=PIPE, text=True, start_new_session=True
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT)
        finally:
            if left is not None:
                left += _left_behind(proc.pid)
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, (
        f"{snippet.name} ({snippet.lang}) failed with status {proc.returncode}:\n"
        f"{snippet.code}\n--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}"
    )


def _stderr_of(snippet: Snippet, work: Path) -> Path:
    return work.parent / f"background-line{snippet.line}.stderr"


def start_background(snippet: Snippet, work: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """Start a background snippet (its command replaces bash, so it gets the signals) and wait
    for its first line of output; its stderr goes to a file (a full pipe would stall it)."""
    with open(_stderr_of(snippet, work), "w", encoding="utf-8") as stderr:
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {snippet.code.strip()}"],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert proc.stdout is not None
    if not proc.stdout.readline():
        proc.wait(TIMEOUT)
        raise AssertionError(
            f"{snippet.name} (background) exited {proc.returncode} before it printed a line:\n"
            f"{snippet.code}\n--- stderr\n{_stderr_of(snippet, work).read_text()[-3000:]}"
        )
    return proc


def stop_background(snippet: Snippet, proc: subprocess.Popen[str], work: Path) -> None:
    """SIGTERM; the snippet must exit 0."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    assert proc.returncode == 0, (
        f"{snippet.name} (background) exited {proc.returncode} after SIGTERM:\n{snippet.code}\n"
        f"--- stdout\n{out[-3000:]}\n"
        f"--- stderr\n{_stderr_of(snippet, work).read_text()[-3000:]}"
    )


def _runs_in_page(page: str) -> list[Snippet]:
    return [s for s in snippets(page) if s.skip is None and not s.spark]


RUNNABLE_PAGES = [page for page in PAGES if _runs_in_page(page)]


HEAVY_PAGES = {"README.md", "docs/ENGINES.md", "docs/INGEST.md"}
"""Pages whose examples take 8-18 s end to end (servers, brokers, engines): the slow tier."""


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=pytest.mark.slow) if p in HEAVY_PAGES else p for p in RUNNABLE_PAGES],
)
def test_page_snippets_run(page: str, tmp_path: Path) -> None:
    ports = free_ports(page)
    runnable = [with_ports(s, ports) for s in _runs_in_page(page)]
    work = tmp_path / "work"
    work.mkdir()
    env = _package_only(tmp_path)
    background: list[tuple[Snippet, subprocess.Popen[str]]] = []
    left: list[tuple[int, str]] = []
    try:
        for snippet in runnable:
            if snippet.background:
                background.append((snippet, start_background(snippet, work, env)))
            else:
                run_snippet(snippet, work, env, left)
    finally:
        try:
            for snippet, proc in background:
                stop_background(snippet, proc, work)
        finally:
            stop_left_behind(left)


SPARK_SNIPPETS = [s for page in PAGES for s in snippets(page) if s.skip is None and s.spark]


@pytest.mark.spark
@pytest.mark.slow  # each starts a Spark of its own (30-60 s on 2 cores): the slow tier
@pytest.mark.parametrize("snippet", SPARK_SNIPPETS, ids=lambda s: s.name)
def test_spark_snippet_runs(snippet: Snippet, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    run_snippet(snippet, work, _package_only(tmp_path))


def test_skips_are_few_and_say_why() -> None:
    """Every snippet that does not run says why; installing is the only rule-based skip."""
    skipped = [s for page in PAGES for s in snippets(page) if s.skip is not None]
    assert all(s.skip for s in skipped)
    by_marker = [s for s in skipped if s.skip != "installs packages"]
    assert len(by_marker) <= 3, [f"{s.name}: {s.skip}" for s in by_marker]
    assert all(s.lang == "bash" for s in skipped if s.skip == "installs packages")
    every = [s for page in PAGES for s in snippets(page)]
    assert len(every) - len(skipped) >= 10  # the pages do hold runnable snippets


def test_snippets_are_found(tmp_path: Path) -> None:
    """The parser: languages, skip markers with reasons, and the install rule."""
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n```python\nprint(1)\n```\n\n<!-- snippet: skip (needs S3) -->\n"
        "```python\nimport boto\n```\n\n```bash\npip install x\n```\n\n```console\n$ ls\n```\n"
        "```bash\ncarbonlite demo --rows 5\n```\n"
        "<!-- snippet: free-port 8815 -->\n<!-- snippet: background -->\n"
        "```bash\ncarbonlite serve tables --port 8815\n```\n"
        "```python\nconnect('grpc://127.0.0.1:8815', 18815)\n```\n",
        encoding="utf-8",
    )
    name = os.path.relpath(page, ROOT)
    found = snippets(name)
    assert [(s.lang, s.skip, s.spark, s.background) for s in found] == [
        ("python", None, False, False),
        ("python", "needs S3", False, False),
        ("bash", "installs packages", False, False),
        ("bash", None, True, False),
        ("bash", None, False, True),
        ("python", None, False, False),
    ]
    assert found[0].line == 4 and found[0].code == "print(1)\n"
    ports = free_ports(name)
    assert list(ports) == ["8815"] and ports["8815"] != "8815"
    assert (
        with_ports(found[5], ports).code == f"connect('grpc://127.0.0.1:{ports['8815']}', 18815)\n"
    )
