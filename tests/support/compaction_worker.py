"""Crash-test compaction: runs a handoff or compaction in a forked process that the test kills
with SIGKILL at a moment of its choosing.

    python -m tests.support.compaction_worker serve     # fork server, one JSON spec per line

Runs go through a fork server (``tests.support.fork_server``), so each trial costs
milliseconds to start and is killed for real. A spec is ``{"table": path, "kind": "handoff" | "minor" | "major" | "custom", "segments": [...]}``.
The child writes unbuffered lines to stdout:

    pid <pid>               first line
    phase reading           the first input blocklet is being read
    phase writing           the first output file (blocklet or Parquet) is being created
    phase committing        the log version is about to be put
    phase committed <0|1>   the put returned (1: the version was created)
    done <json>             the operation finished: {"versions": [...], "created": [...]}
    error <json traceback>  an exception

The phase lines come from wrappers that only print and then call the real methods; they tell
the test where in the operation a kill landed. The server reports ``exited <code>`` (``-9``
after SIGKILL) when the child is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from typing import Any

import carbonlite
from carbonlite.format import BlockletFileWriter
from carbonlite.format.parquet_file import ParquetBlockletWriter
from carbonlite.metadata.log import Log
from carbonlite.reader.scan import SplitReader
from tests.support.fork_server import ForkServer, out, serve


def _report_phases() -> None:
    real_read = SplitReader.read_blocklet
    real_writer_init = BlockletFileWriter.__init__
    real_parquet_init = ParquetBlockletWriter.__init__
    real_try_write = Log.try_write
    said: set[str] = set()
    lock = threading.Lock()

    def once(phase: str) -> None:
        with lock:
            if phase not in said:
                said.add(phase)
                out(f"phase {phase}")

    def read_blocklet(self: Any, *args: Any, **kwargs: Any) -> Any:
        once("reading")
        return real_read(self, *args, **kwargs)

    def writer_init(self: Any, *args: Any, **kwargs: Any) -> None:
        once("writing")
        real_writer_init(self, *args, **kwargs)

    def parquet_init(self: Any, *args: Any, **kwargs: Any) -> None:
        once("writing")
        real_parquet_init(self, *args, **kwargs)

    def try_write(self: Log, version: int, actions: Any, snapshot: Any) -> bool:
        out("phase committing")
        won = real_try_write(self, version, actions, snapshot)
        out(f"phase committed {int(won)}")
        return won

    SplitReader.read_blocklet = read_blocklet  # type: ignore[method-assign]
    BlockletFileWriter.__init__ = writer_init  # type: ignore[method-assign]
    ParquetBlockletWriter.__init__ = parquet_init  # type: ignore[method-assign]
    Log.try_write = try_write  # type: ignore[method-assign]


def run(spec: dict[str, Any]) -> None:
    _report_phases()
    table = carbonlite.open_table(spec["table"])
    result = table.compact(spec["kind"], segments=spec.get("segments"))
    out(
        "done "
        + json.dumps({"versions": list(result.versions), "created": list(result.segments_created)})
    )


# --- the test side --------------------------------------------------------------------------


class CompactionServer(ForkServer):
    """The test's handle on one fork server of compactions."""

    def __init__(self) -> None:
        super().__init__("tests.support.compaction_worker", "compaction worker", AssertionError)

    def start(self, spec: dict[str, Any]) -> CompactionRun:
        return CompactionRun(self, self.fork(spec))


class CompactionRun:
    """One forked compaction: what it reported, and a way to kill it."""

    def __init__(self, server: CompactionServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.started = time.monotonic()
        self.phases: list[tuple[str, float]] = []
        """(phase, seconds since start) of every phase line, in order."""
        self.done: dict[str, Any] | None = None
        self.exit_code: int | None = None

    @property
    def last_phase(self) -> str:
        return self.phases[-1][0] if self.phases else "starting"

    def _take(self, timeout: float) -> str:
        line = self.server.next_line(timeout)
        kind, _, rest = line.partition(" ")
        if kind == "phase":
            self.phases.append((rest, time.monotonic() - self.started))
        elif kind == "done":
            self.done = json.loads(rest)
        elif kind == "exited":
            self.exit_code = int(rest)
        elif kind == "error":
            raise AssertionError(f"compaction {self.pid} failed:\n{json.loads(rest)}")
        return line

    def wait_for_phase(self, phase: str, timeout: float = 60) -> bool:
        """Read lines until ``phase`` begins (True) or the run ends (False)."""
        while self.exit_code is None:
            if self._take(timeout).startswith(f"phase {phase}"):
                return True
        return False

    def kill(self) -> None:
        """SIGKILL the run (unless it already ended) and collect everything it printed."""
        if self.exit_code is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self.wait()

    def wait(self, timeout: float = 120) -> int:
        while self.exit_code is None:
            self._take(timeout)
        return self.exit_code


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(run)
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}")
