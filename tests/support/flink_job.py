"""The Flink job of docs/ENGINES.md as the test runs it: the script taken from the page, its
output directory read as the ingester reads it, its checkpoints, and process groups killed
whole (the PyFlink driver, its JVM and the Python workers the JVM starts).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.support import REPO

PAGE = REPO / "docs" / "ENGINES.md"
MARKER = "<!-- flink-job -->"
"""The line before the job's fence (and its snippet-skip line) in docs/ENGINES.md."""
_TEMP_SUFFIXES = (".tmp", ".inprogress", "._COPYING_")
_FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


def job_script() -> str:
    """The PyFlink job exactly as docs/ENGINES.md shows it: the first python fence after
    the ``<!-- flink-job -->`` line."""
    text = PAGE.read_text(encoding="utf-8")
    at = text.find(MARKER)
    assert at >= 0, f"{PAGE}: no {MARKER} line before the Flink job"
    match = _FENCE.search(text, at)
    assert match is not None, f"{PAGE}: no python fence after {MARKER}"
    return match.group(1)


def final_files(out: Path) -> list[Path]:
    """The files under ``out`` the ingester takes (``carbonlite/ingest/file_source.py``): none
    whose name, or a directory on whose path, starts with ``.`` or ``_`` (Flink's in-progress
    files), nor one ending in ``.tmp``, ``.inprogress`` or ``._COPYING_``."""
    found = []
    for path in out.rglob("*"):
        parts = path.relative_to(out).parts
        hidden = any(part.startswith((".", "_")) for part in parts)
        if path.is_file() and not hidden and not path.name.endswith(_TEMP_SUFFIXES):
            found.append(path)
    return sorted(found)


def ids_in_files(out: Path) -> Counter[int]:
    """How often each id is in the final files (each line a JSON object with ``id``)."""
    counts: Counter[int] = Counter()
    for path in final_files(out):
        for line in path.read_text(encoding="utf-8").splitlines():
            counts[json.loads(line)["id"]] += 1
    return counts


def newest_checkpoint(checkpoints: Path) -> Path | None:
    """The newest complete checkpoint: ``<job id>/chk-<n>`` with a ``_metadata`` file, largest
    ``n`` (a restored job numbers its checkpoints on from the one it restored)."""
    done = [meta.parent for meta in checkpoints.glob("*/chk-*/_metadata")]
    return max(done, key=lambda chk: int(chk.name.split("-")[1]), default=None)


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


class ProcessGroup:
    """A command started in a session of its own, so one SIGKILL to its process group takes
    every process it started (a PyFlink driver's JVM and Python workers too). Output goes to
    ``log``. With ``temp``, its temporary files go there, Python's (``TMPDIR``) and every
    JVM's it starts (``java.io.tmpdir``: Flink's dist cache, RPC jar, io and shuffle
    directories), not into the machine's ``/tmp``, where a killed job would leave them."""

    def __init__(
        self, command: Sequence[str | os.PathLike[str]], log: Path, temp: Path | None = None
    ) -> None:
        self.command = [os.fspath(part) for part in command]
        self.log = log
        env = None
        if temp is not None:
            temp.mkdir(parents=True, exist_ok=True)
            java_options = f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} -Djava.io.tmpdir={temp}"
            env = {**os.environ, "TMPDIR": str(temp), "JAVA_TOOL_OPTIONS": java_options.strip()}
        with open(log, "ab") as sink:
            self.proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=REPO,
                env=env,
            )

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self, *, timeout: float = 60) -> None:
        """SIGKILL the whole group and wait until none of its processes is left."""
        with contextlib.suppress(ProcessLookupError):  # every process of it ended
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=timeout)
        wait_for(
            lambda: not live_members(self.proc.pid),
            timeout=timeout,
            what=f"the processes of group {self.proc.pid} to end: {live_members(self.proc.pid)}",
        )

    def wait(self, *, timeout: float) -> int:
        """Wait for the command to exit; kill the group and fail after ``timeout`` seconds."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"still running after {timeout:.0f} s: {self.tail()}") from None

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]


def live_members(pgid: int) -> list[str]:
    """The processes of group ``pgid`` that are not zombies, as ``ps`` shows them."""
    listing = subprocess.run(
        ["ps", "-eo", "pgid=,stat=,pid=,args="], capture_output=True, text=True, check=True
    ).stdout
    live = []
    for line in listing.splitlines():
        fields = line.split(None, 3)
        if len(fields) >= 3 and fields[0] == str(pgid) and not fields[1].startswith("Z"):
            live.append(" ".join(fields[2:])[:120])
    return live
