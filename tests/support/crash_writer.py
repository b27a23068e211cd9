"""Crash-test writer: appends deterministic batches until it is killed with SIGKILL.

    python -m tests.support.crash_writer serve        # fork server, one JSON spec per line
    python -m tests.support.crash_writer run SPEC     # one writer, in this process

The crash tests run writers in a fork server (``tests.support.fork_server``): each writer is
a forked process, killed for real. While a writer runs it reads ``go``/``stop`` from the
server's stdin and writes unbuffered lines to its stdout:

    pid <pid>                       first line of every writer
    committed <batch> <version>     right after ``append`` returned
    replayed <batch> <version> <0|1>  the replayed batch was appended (0) or skipped (1)
    ready                           after the ``before`` appends; then waits for go/stop
    going                           it read ``go``
    done                            the loop ended without being killed
    error <json traceback>          an exception (exit code 1)

A spec (JSON object):

    table        path of an existing table (tests.support.batches.SCHEMA)
    writer_id    writer id for the appends
    first_batch  id of the first batch; each append uses the next id
    before       appends before ``ready`` (default 1)
    new_writer   after those, one append by a Table with a fresh writer id (default false)
    txn_app      append batch b with txn=(txn_app, b)
    replay       first of all append this (older) batch again, with txn=(txn_app, replay)
    wait_go      print ``ready`` and wait for ``go`` (``stop`` ends the writer) (default false)
    loop         appends after that (default 0)
    inject       arm a crash point before loop append number ``inject_at`` (default 0)

Crash points (the real code runs; the hook only adds a SIGKILL of this process at one spot):

    mid_write               half of the append's 2nd blocklet written (a torn blocklet)
    before_fsync            all blocklets written, before the stream file is fsynced
    before_log_put          stream file fsynced, before the log version is put
    torn_log_temp           half of the log version's temp file written
    after_log_link          the log version is linked into place, before put returns
    before_checkpoint_pointer  a checkpoint is written, before _last_checkpoint moves
    after_truncate          the stream file was cut to its committed length, nothing appended
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
from typing import Any

import carbonlite
from carbonlite.format import BlockletFileWriter
from carbonlite.storage.local import LocalStorage, _LocalAppender
from tests.support.batches import make_batch
from tests.support.fork_server import ForkServer, out, read_line, run_child, serve

CRASH_POINTS = (
    "mid_write",
    "before_fsync",
    "before_log_put",
    "torn_log_temp",
    "after_log_link",
    "before_checkpoint_pointer",
    "after_truncate",
)
_VERSION_FILE = re.compile(r"^\d{20}\.json$")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # pragma: no cover - SIGKILL is not delivered asynchronously late


def arm(point: str, table: str) -> None:
    """Make this process SIGKILL itself at ``point`` of the next append."""
    log_dir = os.path.join(os.path.abspath(table), "_carbonlite", "log")

    def in_log(path: str) -> bool:
        return os.path.dirname(os.path.abspath(path)) == log_dir

    if point == "mid_write":
        real_append = BlockletFileWriter._append_encoded
        started = [0]

        def append_encoded(self: Any, encoded: Any) -> Any:
            started[0] += 1
            if started[0] == 2:  # write the head and about half the pages, then die
                self._write_parts(encoded.parts[: max(1, len(encoded.parts) // 2)])
                _die()
            return real_append(self, encoded)

        BlockletFileWriter._append_encoded = append_encoded  # type: ignore[method-assign]
    elif point == "before_fsync":

        def flush(self: Any) -> None:
            _die()

        _LocalAppender.flush = flush  # type: ignore[method-assign]
    elif point == "before_log_put":
        real_put_if_absent = LocalStorage.put_if_absent

        def put_if_absent(self: Any, path: str, data: bytes) -> bool:
            if in_log(path) and _VERSION_FILE.match(os.path.basename(path)):
                _die()
            return real_put_if_absent(self, path, data)

        LocalStorage.put_if_absent = put_if_absent  # type: ignore[method-assign]
    elif point == "torn_log_temp":
        real_write = os.write

        def write(fd: int, data: Any) -> int:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if in_log(target) and os.path.basename(target).startswith(".tmp-"):
                view = memoryview(data)
                real_write(fd, view[: max(1, len(view) // 2)])
                _die()
            return real_write(fd, data)

        os.write = write
    elif point == "after_log_link":
        real_link = os.link

        def link(src: str, dst: str, *args: Any, **kwargs: Any) -> None:
            real_link(src, dst, *args, **kwargs)
            if in_log(dst) and _VERSION_FILE.match(os.path.basename(dst)):
                _die()

        os.link = link
    elif point == "before_checkpoint_pointer":
        real_put = LocalStorage.put

        def put(self: Any, path: str, data: bytes) -> None:
            if os.path.basename(path) == "_last_checkpoint":
                _die()
            real_put(self, path, data)

        LocalStorage.put = put  # type: ignore[method-assign]
    elif point == "after_truncate":
        real_truncate = LocalStorage.truncate

        def truncate(self: Any, path: str, length: int) -> None:
            real_truncate(self, path, length)
            _die()

        LocalStorage.truncate = truncate  # type: ignore[method-assign]
    else:
        raise ValueError(f"unknown crash point {point!r}")


def run(spec: dict[str, Any]) -> None:
    path = spec["table"]
    batch = spec["first_batch"]
    table = carbonlite.open_table(path, writer_id=spec["writer_id"])
    app = spec.get("txn_app")

    def append(t: carbonlite.Table) -> None:
        nonlocal batch
        result = t.append(make_batch(batch), txn=(app, batch) if app else None)
        assert not result.skipped, f"batch {batch} is new, yet it was skipped"
        out(f"committed {batch} {result.version}")
        batch += 1

    if spec.get("replay") is not None:  # a restarted stream sends its last batch again
        replay = spec["replay"]
        result = table.append(make_batch(replay), txn=(app, replay))
        out(f"replayed {replay} {result.version} {int(result.skipped)}")
    for _ in range(spec.get("before", 1)):
        append(table)
    if spec.get("new_writer"):
        append(carbonlite.open_table(path))
    if spec.get("wait_go"):
        out("ready")
        if read_line() != "go":
            return
        out("going")
    for i in range(spec.get("loop", 0)):
        if spec.get("inject") and i == spec.get("inject_at", 0):
            arm(spec["inject"], path)
        append(table)
    out("done")


# --- the test side --------------------------------------------------------------------------


class WriterFailed(AssertionError):
    pass


class WriterServer(ForkServer):
    """The test's handle on one fork server of writers."""

    def __init__(self) -> None:
        super().__init__("tests.support.crash_writer", "writer", WriterFailed)
        self.current: WriterRun | None = None

    def start(self, spec: dict[str, Any], timeout: float = 60) -> WriterRun:
        if self.current is not None and self.current.exit_code is None:
            self.current.kill()  # left running by a failed test: it would read our spec
        self.current = WriterRun(self, self.fork(spec, timeout), spec)
        return self.current


class WriterRun:
    """One forked writer: what it reported, and a way to kill it."""

    def __init__(self, server: WriterServer, pid: int, spec: dict[str, Any]) -> None:
        self.server = server
        self.pid = pid
        self.spec = spec
        self.committed: list[tuple[int, int]] = []
        """(batch, version) of every ``committed`` line, in order."""
        self.exit_code: int | None = None
        self.ready = False
        self.replay_skipped: bool | None = None
        """Whether the replayed batch was skipped (None: no replay reported)."""

    @property
    def batches(self) -> set[int]:
        return {b for b, _ in self.committed}

    @property
    def in_flight(self) -> int:
        """The batch the writer was appending (or about to append) when it stopped."""
        if self.spec.get("replay") is not None and self.replay_skipped is None:
            return self.spec["replay"]
        return self.spec["first_batch"] + len(self.committed)

    def _take(self, timeout: float) -> str:
        line = self.server.next_line(timeout)
        kind, _, rest = line.partition(" ")
        if kind == "committed":
            b, v = rest.split()
            self.committed.append((int(b), int(v)))
        elif kind == "replayed":
            self.replay_skipped = rest.split()[2] == "1"
        elif kind == "ready":
            self.ready = True
        elif kind == "exited":
            self.exit_code = int(rest)
        elif kind == "error":
            raise WriterFailed(f"writer {self.pid} failed:\n{json.loads(rest)}")
        return kind

    def wait_for(self, kind: str, timeout: float = 60) -> None:
        while self._take(timeout) != kind:
            if self.exit_code is not None:
                raise WriterFailed(
                    f"writer {self.pid} exited with {self.exit_code} before {kind!r} "
                    f"(committed {self.committed})"
                )

    def go(self) -> None:
        """Let a writer waiting after ``ready`` go on (once it has read that, the server's
        stdin holds nothing the server could mistake for a spec)."""
        self.server.send("go")
        self.wait_for("going")

    def wait_committed(self, count: int, timeout: float = 60) -> None:
        target = len(self.committed) + count
        while len(self.committed) < target:
            if self._take(timeout) == "exited":
                raise WriterFailed(f"writer {self.pid} exited with {self.exit_code}")

    def kill(self) -> None:
        """SIGKILL the writer (unless it already exited) and collect what it printed."""
        if self.exit_code is None:
            # ProcessLookupError: it ended on its own, and "exited" is on its way.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait_exit()

    def wait_exit(self, timeout: float = 60) -> int:
        while self.exit_code is None:
            self._take(timeout)
        return self.exit_code


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(run)
    elif sys.argv[1] == "run":
        sys.exit(run_child(run, json.loads(sys.argv[2])))
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}")
