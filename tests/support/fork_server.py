"""The fork server behind the crash tests (``crash_writer``, ``compaction_worker``).

Importing pyarrow and carbonlite costs most of a second, so a crash test starts one server
process that imports them once and forks a fresh child for each JSON spec it reads on stdin.
Each child is a real process, killed for real; the server only waits for it and reports
``exited <code>`` (``-9`` after SIGKILL). While a child runs it owns the server's stdin and
stdout: its first line is ``pid <pid>``, then whatever its module prints, and an exception ends
it with ``error <json traceback>`` (exit code 1).

The child side is :func:`serve` (with :func:`out` and :func:`read_line`); the test side is
:class:`ForkServer`.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from carbonlite.metadata import post_commit
from tests.support import REPO

Run = Callable[[dict[str, Any]], None]


# --- the child side -------------------------------------------------------------------------


def out(line: str) -> None:
    """Write one unbuffered line to stdout (it must reach the test before a SIGKILL)."""
    os.write(1, (line + "\n").encode())


def read_line(fd: int = 0) -> str:
    """One line from ``fd``, read byte by byte so nothing past it is consumed."""
    chars = []
    while True:
        c = os.read(fd, 1)
        if not c or c == b"\n":
            return b"".join(chars).decode()
        chars.append(c)


def run_child(run: Run, spec: dict[str, Any]) -> int:
    """Run one spec in this process: ``pid`` first, ``error`` on an exception. Then what a
    process does as it exits (the child ends with ``os._exit``, which skips ``atexit``):
    finish the checkpoints its commits left to the background (``post_commit.settle_all``)."""
    out(f"pid {os.getpid()}")
    try:
        run(spec)
    except BaseException:
        out("error " + json.dumps(traceback.format_exc()))
        return 1
    finally:
        post_commit.settle_all()
    return 0


def serve(run: Run) -> None:
    """Fork a child for every spec line on stdin, wait for it, report how it exited."""
    while True:
        line = read_line()
        if not line:
            return
        spec = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os._exit(run_child(run, spec))
        _, status = os.waitpid(pid, 0)
        out(f"exited {os.waitstatus_to_exitcode(status)}")


# --- the test side --------------------------------------------------------------------------


class ForkServer:
    """The test's handle on one fork server running ``python -m <module> serve``.

    ``who`` names the children in messages; ``failure`` is the AssertionError raised when the
    server goes quiet or ends.
    """

    def __init__(self, module: str, who: str, failure: type[AssertionError]) -> None:
        self.who = who
        self.failure = failure
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "serve"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode().rstrip("\n"))
        self.lines.put(None)

    def next_line(self, timeout: float = 60) -> str:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise self.failure(f"the {self.who} said nothing for {timeout} s") from None
        if line is None:
            raise self.failure(f"the fork server ended (exit code {self.proc.poll()})")
        return line

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((text + "\n").encode())
        self.proc.stdin.flush()

    def fork(self, spec: dict[str, Any], timeout: float = 60) -> int:
        """Send ``spec``; the pid of the child that runs it."""
        self.send(json.dumps(spec))
        line = self.next_line(timeout)
        if not line.startswith("pid "):
            raise self.failure(f"expected 'pid N' from the {self.who}, got {line!r}")
        return int(line.split()[1])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
