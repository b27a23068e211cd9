"""A worker for the row-change crash and concurrency tests: runs a list of operations
(delete, update, merge, append, finish_streaming, handoff, compact) on a table, saying what
each one committed.

    python -m tests.support.row_change_worker serve       # fork server (crash tests)
    python -m tests.support.row_change_worker run SPEC    # one worker in this process
    python -m tests.support.row_change_worker run @FILE   # the same, the spec in a file

Operations are JSON objects the test makes (``tests/support/row_ops.py``), so the test knows
the exact input of every operation and replays them on the pyarrow model. A spec:

    table       path of the table
    writer_id   writer id (a restarted crash worker reuses it, and so its stream file)
    ops         the operations, run in order; ``first`` is the number of the first one
    stop_file   (run mode) stop before the next operation once this file exists (a list:
                once they all exist)
    min_ops     (run mode) run at least this many operations before looking at stop_file
    quota       (run mode) {"commits": n, "file": path}: create ``file`` once n operations
                committed something (a busy machine must not end the race before every
                worker had its share)
    hold        (serve mode) {"phases": [...], "ops": [...]}: after printing one of these
                phases during one of these operations, wait for ``go`` on stdin (answered
                with ``going``), so a kill lands exactly there
    barrier     (run mode) {"dir", "me", "all"}: start together (table_worker.wait_until_ready)
    done_file   (run mode) create this file when the last operation is done
    pause       (run mode) seconds to sleep after each operation
    gate        (run mode) hold the first log write until another process is about to
                write too (``tests.support.table_worker._install_gate``)

Forked children (serve mode) write unbuffered lines to stdout:

    pid <pid>               first line
    start <i>               operation i begins
    phase dv                deletion-vector files were written (nothing committed yet)
    phase writing           a handoff or compaction created an output file
    phase committing        a log version is about to be put
    phase committed         it was put (the operation has not returned yet)
    done <i> <json>         operation i returned: {"versions": [...], "counts": [...]}
    finished                every operation ran
    error <json traceback>  an exception

In run mode it prints one JSON object at the end: {"results": [[i, result], ...],
"errors": [[i, "Type: message"], ...], "lost_races": n, "replanned": n,
"compaction_rounds_discarded": n} (an error is a CarbonLiteError the operation raised, such
as a CommitConflictError after its bounded retries; it committed nothing).
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
import carbonlite.writer.row_changes as row_changes_module
from carbonlite.errors import CarbonLiteError
from carbonlite.format import BlockletFileWriter
from carbonlite.format.parquet_file import ParquetBlockletWriter
from carbonlite.metadata.log import Log
from tests.support.fork_server import ForkServer, out, read_line, run_child, serve
from tests.support.row_ops import run_op

_now = {"op": -1}
"""The operation the forked child is running."""


_phase_lock = threading.Lock()
"""One phase at a time: threads of one operation (a compaction's writers) may reach phases
together, and two threads reading ``go`` byte by byte from stdin would split it."""


def _phase(name: str, hold: dict[str, Any]) -> None:
    """Say that phase ``name`` begins; hold there until the test says ``go`` if asked to."""
    with _phase_lock:
        out(f"phase {name}")
        if name in hold.get("phases", ()) and _now["op"] in hold.get("ops", ()):
            if read_line() != "go":
                os._exit(3)  # the test's protocol broke: end loudly, from any thread
            out("going")


def _report_phases(hold: dict[str, Any]) -> None:
    """Print a line as each phase begins (the real methods run; the wrappers only print, and
    hold where ``hold`` says)."""
    real_write_deletions = row_changes_module.write_deletions
    real_writer_init = BlockletFileWriter.__init__
    real_parquet_init = ParquetBlockletWriter.__init__
    real_try_write = Log.try_write

    def write_deletions(*args: Any, **kwargs: Any) -> Any:
        written = real_write_deletions(*args, **kwargs)
        _phase("dv", hold)
        return written

    def writer_init(self: Any, *args: Any, **kwargs: Any) -> None:
        real_writer_init(self, *args, **kwargs)
        _phase("writing", hold)  # the output file exists now

    def parquet_init(self: Any, *args: Any, **kwargs: Any) -> None:
        real_parquet_init(self, *args, **kwargs)
        _phase("writing", hold)  # a handoff's or compaction's Parquet output exists now

    def try_write(self: Log, version: int, actions: Any, snapshot: Any) -> bool:
        _phase("committing", hold)
        won = real_try_write(self, version, actions, snapshot)
        if won:
            _phase("committed", hold)
        return won

    row_changes_module.write_deletions = write_deletions
    BlockletFileWriter.__init__ = writer_init  # type: ignore[method-assign]
    ParquetBlockletWriter.__init__ = parquet_init  # type: ignore[method-assign]
    Log.try_write = try_write  # type: ignore[method-assign]


def forked(spec: dict[str, Any]) -> None:
    """One crash-test child: run the operations, saying what each committed."""
    _report_phases(spec.get("hold", {}))
    table = carbonlite.open_table(spec["table"], writer_id=spec["writer_id"])
    for i, op in enumerate(spec["ops"], start=spec.get("first", 0)):
        _now["op"] = i
        out(f"start {i}")
        result = run_op(table, op)
        out(f"done {i} {json.dumps(result)}")
    out("finished")


_counts = {"lost_races": 0, "replanned": 0, "compaction_rounds_discarded": 0}


def _count_races() -> None:
    """Count log writes lost to another process, row changes that planned again after a
    conflict (their deletion vectors discarded), and compaction rounds discarded after a
    conflict (the real functions run; the wrappers only count)."""
    import carbonlite.compaction.run as run_module

    real_try_write = Log.try_write
    real_discard = row_changes_module.discard_deletions
    real_discard_outputs = run_module._discard_outputs

    def try_write(self: Log, version: int, actions: Any, snapshot: Any) -> bool:
        won = real_try_write(self, version, actions, snapshot)
        _counts["lost_races"] += not won
        return won

    def discard_deletions(*args: Any, **kwargs: Any) -> None:
        _counts["replanned"] += 1
        real_discard(*args, **kwargs)

    def discard_outputs(*args: Any, **kwargs: Any) -> None:
        _counts["compaction_rounds_discarded"] += 1
        real_discard_outputs(*args, **kwargs)

    Log.try_write = try_write  # type: ignore[method-assign]
    row_changes_module.discard_deletions = discard_deletions
    run_module._discard_outputs = discard_outputs


def loop(spec: dict[str, Any]) -> dict[str, Any]:
    """One concurrency-test worker: the operations until the stop file appears."""
    from tests.support.table_worker import _install_gate, wait_until_ready

    _count_races()
    if spec.get("gate"):
        _install_gate(spec["gate"])
    table = carbonlite.open_table(spec["table"], writer_id=spec.get("writer_id"))
    if spec.get("barrier"):
        wait_until_ready(spec["barrier"], spec["barrier"]["me"])
    results: list[list[Any]] = []
    errors: list[list[Any]] = []
    stop = spec.get("stop_file") or []
    stop = [stop] if isinstance(stop, str) else stop
    pause = spec.get("pause", 0.0)
    quota = spec.get("quota")
    committed = 0
    for n, (i, op) in enumerate(enumerate(spec["ops"], start=spec.get("first", 0))):
        if stop and n >= spec.get("min_ops", 0) and all(os.path.exists(f) for f in stop):
            break
        try:
            results.append([i, run_op(table, op)])
            committed += bool(results[-1][1]["versions"])
        except CarbonLiteError as exc:
            errors.append([i, f"{type(exc).__name__}: {exc}"])
        if quota and committed == quota["commits"]:
            with open(quota["file"], "w"):
                pass
        if pause:
            time.sleep(pause)
    if spec.get("done_file"):
        with open(spec["done_file"], "w"):
            pass
    return {"results": results, "errors": errors, **_counts}


# --- the test side --------------------------------------------------------------------------


class RowChangeServer(ForkServer):
    """The test's handle on one fork server of row-change workers."""

    def __init__(self) -> None:
        super().__init__("tests.support.row_change_worker", "row-change worker", AssertionError)
        self.current: RowChangeRun | None = None

    def start(self, spec: dict[str, Any]) -> RowChangeRun:
        if self.current is not None and self.current.exit_code is None:
            self.current.kill()  # left running by a failed test: it would read our spec
        self.current = RowChangeRun(self, self.fork(spec), spec)
        return self.current


class RowChangeRun:
    """One forked worker: what it reported, and a way to kill it."""

    def __init__(self, server: RowChangeServer, pid: int, spec: dict[str, Any]) -> None:
        self.server = server
        self.pid = pid
        self.spec = spec
        self.done: list[tuple[int, dict[str, Any]]] = []
        """(operation number, result) of every ``done`` line, in order."""
        self.started: list[int] = []
        self.phases: list[tuple[int, str]] = []
        """(operation number, phase) of every phase line."""
        self.finished = False
        self.exit_code: int | None = None
        self.held = False
        """The worker waits for ``go`` at a phase its spec's ``hold`` names."""

    @property
    def in_flight(self) -> int | None:
        """The operation that had started and not returned when the worker stopped."""
        if self.started and (not self.done or self.done[-1][0] != self.started[-1]):
            return self.started[-1]
        return None

    def _take(self, timeout: float) -> str:
        line = self.server.next_line(timeout)
        kind, _, rest = line.partition(" ")
        if kind == "start":
            self.started.append(int(rest))
        elif kind == "phase":
            self.phases.append((self.started[-1] if self.started else -1, rest))
        elif kind == "done":
            number, _, result = rest.partition(" ")
            self.done.append((int(number), json.loads(result)))
        elif kind == "finished":
            self.finished = True
        elif kind == "going":
            self.held = False
        elif kind == "exited":
            self.exit_code = int(rest)
        elif kind == "error":
            raise AssertionError(f"worker {self.pid} failed:\n{json.loads(rest)}")
        return line

    def wait_done(self, count: int, timeout: float = 60) -> bool:
        """Read lines until ``count`` more operations are done (False if the run ended)."""
        target = len(self.done) + count
        while len(self.done) < target:
            if self.exit_code is not None or self.finished:
                return False
            self._take(timeout)
        return True

    def wait_phase(self, phases: set[str], ops: set[int] | None, timeout: float = 60) -> bool:
        """Read lines until a phase of ``phases`` begins in one of ``ops`` (any when None);
        False if the run ended first."""
        while self.exit_code is None and not self.finished:
            line = self._take(timeout)
            if line.startswith("phase "):
                op, phase = self.phases[-1]
                hold = self.spec.get("hold", {})
                self.held = phase in hold.get("phases", ()) and op in hold.get("ops", ())
                if phase in phases and (ops is None or op in ops):
                    return True
                if self.held:
                    self.go()
        return False

    def go(self) -> None:
        """Let a worker held at a phase go on (once it said ``going``, the server's stdin
        holds nothing the server could mistake for a spec)."""
        self.server.send("go")
        while self.held and self.exit_code is None:
            self._take(60)

    def kill(self) -> None:
        """SIGKILL the worker (unless it already ended) and collect everything it printed."""
        if self.exit_code is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        while self.exit_code is None:
            self._take(60)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(forked)
    elif sys.argv[1] == "run":
        if sys.argv[2].startswith("@"):  # a file holding the spec (long operation lists)
            with open(sys.argv[2][1:]) as f:
                spec = json.load(f)
        else:
            spec = json.loads(sys.argv[2])
        print(json.dumps(loop(spec)))
    elif sys.argv[1] == "once":
        sys.exit(run_child(forked, json.loads(sys.argv[2])))
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}")
