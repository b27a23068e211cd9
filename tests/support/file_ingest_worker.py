"""The file ingester in a process of its own, held at a named seam: ``carbonlite ingest
files`` (the command, run in the process) for the crash and race tests.

    python -m tests.support.file_ingest_worker serve      # fork server, one JSON spec a line
    python -m tests.support.file_ingest_worker run SPEC   # one run, in this process

A spec (JSON object):

    args     the command's arguments after ``carbonlite`` (``["ingest", "files", ...]``)
    seam     hold the run the ``nth`` time any thread reaches this seam (null: never)
    nth      (default 1)
    release  after the hold, wait for a ``go`` line on stdin and go on (default false: wait
             forever, for the test's SIGKILL)

The run writes unbuffered lines to stdout:

    pid <pid>                 first line (the fork server's, or ``run``'s)
    held <seam> <n>           it is held there
    going                     it read ``go`` and goes on (``release``)
    summary <json>            the command's ``--json`` summary (when it printed one)
    exit <code>               the command returned (0) or failed (1, its error on stderr)
    error <json traceback>    an exception the command did not turn into an exit code

Importing pyarrow and carbonlite costs most of a second; the fork server pays it once and a
kill test forks a child per run (``tests.support.fork_server``).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import carbonlite.ingest  # noqa: F401 - imported once by the fork server, not by each run
from carbonlite.cli import main as carbonlite_main
from carbonlite.seams import listening
from tests.support import REPO
from tests.support.fork_server import ForkServer, out, read_line, run_child, serve


@contextlib.contextmanager
def held(seam: str | None, nth: int, release: bool) -> Iterator[None]:
    """Hold the ``nth`` reach of ``seam`` (any thread): say ``held``, then wait for the
    kill (or for ``go`` with ``release``)."""
    if seam is None:
        yield
        return
    count = itertools.count(1)
    lock = threading.Lock()

    def listener(name: str) -> None:
        if name != seam:
            return
        with lock:
            n = next(count)
        if n != nth:
            return
        out(f"held {seam} {n}")
        line = read_line()
        if release and line == "go":
            out("going")
            return
        os._exit(3)  # stdin closed without a kill: never go on past the hold

    with listening(listener):
        yield


def warm() -> None:
    """Run the command's parser once, so each forked run finds what it imports on first use
    (typer's adapters, pydantic) already imported."""
    sys.argv = ["carbonlite", "ingest", "files", "--help"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        carbonlite_main()


def run(spec: dict[str, Any]) -> None:
    args = list(spec["args"])
    captured = io.StringIO()
    code: int | str | None = 0
    with held(spec.get("seam"), int(spec.get("nth", 1)), bool(spec.get("release"))):
        sys.argv = ["carbonlite", *args]
        try:
            with contextlib.redirect_stdout(captured):
                carbonlite_main()
        except SystemExit as exc:
            code = exc.code
    text = captured.getvalue().strip()
    if text.startswith("{"):
        out("summary " + json.dumps(json.loads(text)))
    sys.stderr.flush()
    out(f"exit {0 if code is None else code}")


# --- the test side --------------------------------------------------------------------------


class IngestFailed(AssertionError):
    pass


class IngestRun:
    """One run of the ingester (a forked child, or a process of its own): what it said."""

    def __init__(self, pid: int, next_line: Callable[[float], str], send: Callable[[str], None]):
        self.pid = pid
        self._next_line = next_line
        self._send = send
        self.held: str | None = None
        """``<seam> <n>`` once it is held."""
        self.summary: dict[str, Any] | None = None
        self.code: int | None = None
        """The command's exit code."""
        self.exit_code: int | None = None
        """The process's (``-9`` after SIGKILL)."""
        self.errors: list[str] = []

    def _take(self, timeout: float) -> str:
        line = self._next_line(timeout)
        kind, _, rest = line.partition(" ")
        if kind == "held":
            self.held = rest
        elif kind == "summary":
            self.summary = json.loads(rest)
        elif kind == "exit":
            self.code = int(rest)
        elif kind == "exited":
            self.exit_code = int(rest)
        elif kind == "error":
            self.errors.append(json.loads(rest))
        return kind

    def held_or_ended(self, timeout: float = 120) -> bool:
        """Wait until it is held (True) or has ended (False)."""
        while True:
            kind = self._take(timeout)
            if kind == "held":
                return True
            if kind == "exited":
                return False

    def go(self, timeout: float = 120) -> None:
        """Let a run held with ``release`` go on."""
        self._send("go")
        while self._take(timeout) != "going":
            if self.exit_code is not None:
                raise IngestFailed(f"ingester {self.pid} ended before it read go")

    def kill(self, timeout: float = 120) -> None:
        if self.exit_code is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait(timeout)

    def wait(self, timeout: float = 120) -> int:
        while self.exit_code is None:
            self._take(timeout)
        return self.exit_code


class IngestServer(ForkServer):
    """A fork server of ingester runs (one at a time)."""

    def __init__(self) -> None:
        super().__init__("tests.support.file_ingest_worker", "file ingester", IngestFailed)

    def start(self, spec: dict[str, Any], timeout: float = 120) -> IngestRun:
        return IngestRun(self.fork(spec, timeout), self.next_line, self.send)


class IngestProcess:
    """A run in a process of its own (``run SPEC``), for ingesters that run side by side."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.file_ingest_worker", "run", json.dumps(spec)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        first = self._next_line(120)
        if not first.startswith("pid "):
            raise IngestFailed(f"expected 'pid N' from the file ingester, got {first!r}")
        self.run = IngestRun(int(first.split()[1]), self._next_line, self._send)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode().rstrip("\n"))
        self.lines.put(f"exited {self.proc.wait()}")

    def _next_line(self, timeout: float) -> str:
        try:
            return self.lines.get(timeout=timeout)  # type: ignore[return-value]
        except queue.Empty:
            raise IngestFailed(f"the file ingester said nothing for {timeout} s") from None

    def _send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((text + "\n").encode())
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        warm()
        serve(run)
    elif sys.argv[1] == "run":
        sys.exit(run_child(run, json.loads(sys.argv[2])))
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}")
