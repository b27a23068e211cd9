"""docs/CLI.md's examples as one script: every command its ``console`` blocks show, run in
order, each output compared with the one shown.

The page's examples are one session that starts in a new, empty directory (its first command
is ``cd "$(mktemp -d /tmp/clidoc-XXXXXXXX)"``) and makes everything it uses with commands
the page shows: the data files, the tables, the damage ``recover`` and ``verify`` find. A
command line starts with ``$ ``; a here-document (``cat > f <<'EOF'``) takes the lines up to
its delimiter; the lines after a command, to the next one or the end of the block, are its
output (stdout, then stderr), with ``[exit status N]`` last when the status is not 0.

A plain ``carbonlite ...`` command (no pipe, redirection or variable) runs in this process
through the CLI's entry point (``carbonlite.cli.app``, as the console script runs it); every
other command, ``carbonlite ingest`` too (it installs a SIGTERM handler), runs in ``bash``,
with this checkout's ``carbonlite`` first on ``PATH``. Every command sees ``COLUMNS=100``.

What legitimately differs from run to run is replaced, in the page's output and the real one
alike, before they are compared (:data:`VARYING`): the directory's random part, the time of
day, durations, table ids, writer ids and the random part of compacted files' names. Nothing
else: row counts, sizes, versions, data values and the layout are compared as shown. Trailing
spaces (rich pads table lines) are not part of a line.

``python -m tests.cli.doc_examples`` runs the examples and reports the differences;
``--update`` writes the real outputs into the page where they differ (after a change to a
command's output), ``--script`` prints the commands as one shell script.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.cli.conftest import invoke
from tests.support import REPO

PAGE = REPO / "docs" / "CLI.md"
COLUMNS = 100
"""The width the page's outputs have (as in a terminal that wide)."""
PROMPT = "$ "
STATUS = re.compile(r"\[exit status (\d+)\]")
HERE_DOCUMENT = re.compile(r"<<\s*'?([A-Za-z_]+)'?\s*$")
IN_PROCESS = re.compile(r"carbonlite (?!ingest )[^|<>;&$`\\\n]*")
"""A command that runs in this process: ``carbonlite`` and words, no shell syntax."""
WORK_DIR = re.compile(r"/tmp/clidoc-[A-Za-z0-9]{8}")
"""The directory the examples run in (``mktemp -d /tmp/clidoc-XXXXXXXX``)."""
REPO_VARIABLE = "CARBONLITE_REPO"
"""The variable the page names a checkout of the repository by (for its golden tables)."""

VARYING: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("the work directory", WORK_DIR, "/tmp/clidoc-XXXXXXXX"),
    # a commit's time: ISO with a T (inspect, segments, --json), or history's "date time"
    # without fraction or offset (data timestamps always have their "+00:00")
    ("time", re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00)?"), "<time>"),
    ("time", re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?![.\d+])"), "<time>"),
    # a duration, with the spaces before it: history's right-aligned column (its padding),
    # "in 0.6 s" of a line that may wrap anywhere around the number (a longer one moves it)
    ("duration", re.compile(r"\s+\d+ ms\b|\s+\d+\.\d\s+s\b"), " <duration>"),
    ("duration", re.compile(r'"(duration_ms|seconds)": [0-9.e-]+'), r'"\1": <duration>'),
    ("table id", re.compile(r"\b[0-9a-f]{32}\b"), "<table id>"),
    ("writer id", re.compile(r"\b[0-9a-f]{16}\b"), "<writer id>"),
    ("file name", re.compile(r"\bpart-[0-9a-f]{12}-[0-9a-f]{8}\b"), "part-<file id>"),
)
"""What may differ between the page and a run: (what, pattern, replacement), applied in order
to both. A writer id is also what the 16 hex digits of a partition's content hash look like."""


@dataclass(frozen=True)
class Example:
    """One command of the page and what the page shows it printing."""

    line: int
    """Where the command starts on the page (1-based)."""
    command: str
    """As shown, without the prompt (a here-document's lines included)."""
    output: tuple[str, ...]
    """The lines shown after it, without the exit status."""
    status: int
    output_lines: tuple[int, int] = (0, 0)
    """The page's lines ``[start, end)`` (0-based) the output and exit status take."""


def examples(page: str) -> list[Example]:
    """Every command of the page's ``console`` blocks, in page order."""
    lines = page.splitlines()
    found: list[Example] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            if not lines[i].startswith(PROMPT):
                raise ValueError(f"docs/CLI.md:{i + 1}: output before any command: {lines[i]!r}")
            start = i
            command = [lines[i][len(PROMPT) :]]
            here = HERE_DOCUMENT.search(command[0])
            i += 1
            if here:
                while i < len(lines) and lines[i] != here.group(1):
                    command.append(lines[i])
                    i += 1
                command.append(lines[i])
                i += 1
            out_start = i
            while i < len(lines) and lines[i].strip() != "```" and not lines[i].startswith(PROMPT):
                i += 1
            output = lines[out_start:i]
            status = 0
            if output and (shown := STATUS.fullmatch(output[-1])):
                status, output = int(shown.group(1)), output[:-1]
            found.append(
                Example(start + 1, "\n".join(command), tuple(output), status, (out_start, i))
            )
        i += 1
    return found


def normalised(lines: list[str] | tuple[str, ...]) -> list[str]:
    """``lines`` without trailing spaces, and with what may vary replaced (:data:`VARYING`,
    across line ends: a wrapped line may break inside a duration)."""
    text = "\n".join(line.rstrip() for line in lines)
    for _, pattern, replacement in VARYING:
        text = pattern.sub(replacement, text)
    return text.split("\n") if lines else []


@dataclass
class Session:
    """Runs the page's commands one after another, as a shell would: ``cd`` moves it."""

    cwd: Path
    made: list[Path] = field(default_factory=list)
    """The directories ``cd`` went into that match :data:`WORK_DIR` (to delete at the end)."""

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("COLUMNS", None)
        bin_dir = str(Path(sys.executable).parent)
        env.update(
            COLUMNS=str(COLUMNS),
            PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
            PYTHONPATH=str(REPO),
            **{REPO_VARIABLE: str(REPO)},
        )
        return env

    def run(self, command: str) -> tuple[list[str], int]:
        """The output lines (stdout, then stderr) and exit status of ``command``."""
        if command.startswith("cd "):
            done = subprocess.run(
                ["bash", "-c", f"{command} && pwd"],
                cwd=self.cwd,
                env=self.env(),
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode == 0:
                self.cwd = Path(done.stdout.strip())
                if WORK_DIR.fullmatch(str(self.cwd)):
                    self.made.append(self.cwd)
            return _lines(done.stdout if done.returncode else "", done.stderr), done.returncode
        if IN_PROCESS.fullmatch(command):
            return self._in_process(shlex.split(command)[1:])
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.cwd,
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        return _lines(done.stdout, done.stderr), done.returncode

    def _in_process(self, args: list[str]) -> tuple[list[str], int]:
        before = Path.cwd()
        os.chdir(self.cwd)
        try:
            run = invoke(*args, columns=COLUMNS)
        finally:
            os.chdir(before)
        return _lines(run.stdout, run.stderr), run.exit_code

    def close(self) -> None:
        for directory in self.made:
            shutil.rmtree(directory, ignore_errors=True)


def _lines(stdout: str, stderr: str) -> list[str]:
    return (stdout + stderr).splitlines()


@dataclass(frozen=True)
class Outcome:
    example: Example
    output: list[str]
    status: int

    @property
    def same(self) -> bool:
        return self.status == self.example.status and normalised(self.output) == normalised(
            self.example.output
        )

    def difference(self) -> str:
        """The page's output against the real one, both normalised, as a diff."""
        shown = [*normalised(self.example.output), f"[exit status {self.example.status}]"]
        real = [*normalised(self.output), f"[exit status {self.status}]"]
        diff = difflib.unified_diff(shown, real, "docs/CLI.md", "the command", lineterm="")
        return f"docs/CLI.md:{self.example.line}: $ {self.example.command}\n" + "\n".join(diff)


def run_page(page: str, cwd: Path) -> Iterator[Outcome]:
    """Run every example of ``page`` from ``cwd``, in order."""
    session = Session(cwd)
    try:
        for example in examples(page):
            output, status = session.run(example.command)
            yield Outcome(example, output, status)
    finally:
        session.close()


def updated(page: str, outcomes: list[Outcome]) -> str:
    """``page`` with the real output of every example that differs from the one shown (the
    work directory as the page names it; the rest as it came)."""
    lines = page.splitlines()
    for outcome in sorted(outcomes, key=lambda o: -o.example.output_lines[0]):
        if outcome.same:
            continue
        start, end = outcome.example.output_lines
        real = [WORK_DIR.sub("/tmp/clidoc-XXXXXXXX", line).rstrip() for line in outcome.output]
        if outcome.status:
            real.append(f"[exit status {outcome.status}]")
        lines[start:end] = real
    return "\n".join(lines) + "\n"


def script(page: str) -> str:
    """The page's commands as one shell script."""
    body = "\n".join(example.command for example in examples(page))
    return f"#!/usr/bin/env bash\n# The examples of docs/CLI.md, in order.\n{body}\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="write the real outputs in")
    parser.add_argument("--script", action="store_true", help="print the commands as a script")
    args = parser.parse_args()
    page = PAGE.read_text(encoding="utf-8")
    if args.script:
        print(script(page), end="")
        return 0
    outcomes = list(run_page(page, Path.cwd()))
    stale = [o for o in outcomes if not o.same]
    for outcome in stale:
        print(outcome.difference(), end="\n\n")
    print(f"{len(outcomes)} examples, {len(stale)} differ from docs/CLI.md")
    if args.update and stale:
        PAGE.write_text(updated(page, outcomes), encoding="utf-8")
        print("docs/CLI.md updated")
    return 1 if stale and not args.update else 0


if __name__ == "__main__":
    sys.exit(main())
