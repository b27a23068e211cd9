"""A worker process for the concurrency tests: appends, reads or changes a table, and prints
one JSON object describing what it saw.

    python -m tests.support.table_worker SPEC_JSON

SPEC keys: ``op`` and ``table``, plus

    append      batches, writer_id (default: a fresh one), start (epoch seconds to begin at),
                barrier (also wait until every named process is ready: see _sync),
                stop_file (stop early once it exists), progress_file (a "." per commit),
                txn_app (commit batch i with txn=(txn_app, txn_ids[i])), txn_ids (default:
                batches), allow_errors (record a CarbonLiteError instead of failing),
                pace_file + pace_every (before the i-th append, wait until pace_file holds
                i // pace_every characters, e.g. readers' scans: at most 60 s in all)
                -> {"results": [[batch, version, skipped, error], ...], "seconds": [...],
                    "lost_races": n, "relocated": n, "late": seconds}
    read        start, barrier, stop_file: scan again and again until stop_file exists;
                progress_file (a "." per scan)
                -> {"observations": [[version, [batch ids], problem], ...]}
    add_column  column, gate  -> {"ok": true, "version": v} or {"ok": false, "error": ...}
    overwrite   batch, gate   -> the same
    append_one  batch, gate   -> the same

``gate`` {"dir", "me", "other", "after"} holds the first log write of this process until
the other process is about to write too (so both planned their commit on the same version),
and, with ``after``, until that process's first log write is done. It waits; it changes
nothing the commit does.

``lost_races`` counts log writes that lost put-if-absent to another writer, ``relocated``
commits whose blocklets moved to another segment because theirs stopped taking appends (the
real methods are wrapped only to count).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from typing import Any

import pyarrow as pa

from carbonlite import open_table
from carbonlite.errors import CarbonLiteError, CommitConflictError
from carbonlite.metadata.log import Log
from carbonlite.writer.append import TableWriter
from tests.support import REPO
from tests.support.batches import batch_ids, diff_rows, make_batch

_lost = [0]
_relocated = [0]


def _count_races() -> None:
    """Count log writes lost to another writer, and commits whose blocklets had to move to
    another segment (the real methods run; the wrappers only count)."""
    real_try_write = Log.try_write
    real_relocate = TableWriter.relocate

    def try_write(self: Log, version: int, actions: Any, snapshot: Any) -> bool:
        won = real_try_write(self, version, actions, snapshot)
        if not won:
            _lost[0] += 1
        return won

    def relocate(self: TableWriter, snapshot: Any, pending: Any, *rest: Any) -> Any:
        _relocated[0] += 1
        return real_relocate(self, snapshot, pending, *rest)

    Log.try_write = try_write  # type: ignore[method-assign]
    TableWriter.relocate = relocate  # type: ignore[method-assign]


def _wait_for(path: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if time.time() > deadline:
            raise TimeoutError(f"gave up waiting for {path}")
        time.sleep(0.002)


def _touch(path: str) -> None:
    with open(path, "w"):
        pass


def _install_gate(gate: dict[str, str]) -> None:
    real = Log.try_write
    armed = [True]

    def try_write(self: Log, version: int, actions: Any, snapshot: Any) -> bool:
        if not armed[0]:
            return real(self, version, actions, snapshot)
        armed[0] = False
        d = gate["dir"]
        _touch(os.path.join(d, f"{gate['me']}.ready"))
        _wait_for(os.path.join(d, f"{gate['other']}.ready"))
        if gate.get("after"):
            _wait_for(os.path.join(d, f"{gate['after']}.done"))
        try:
            return real(self, version, actions, snapshot)
        finally:
            _touch(os.path.join(d, f"{gate['me']}.done"))

    Log.try_write = try_write  # type: ignore[method-assign]


def wait_until_ready(barrier: dict[str, Any], me: str) -> None:
    """Say ``me`` is ready in ``barrier`` {"dir", "all"}, then wait for everyone in "all"."""
    _touch(os.path.join(barrier["dir"], f"{me}.ready"))
    for name in barrier["all"]:
        _wait_for(os.path.join(barrier["dir"], f"{name}.ready"))


def _sync(spec: dict[str, Any]) -> float:
    """Wait for the agreed start: every process of ``spec["barrier"]`` {"dir", "me", "all"} is
    ready (imports done, table open) and ``spec["start"]`` (epoch seconds) has come. Returns
    how late the start time was, when the barrier held the process past it."""
    barrier = spec.get("barrier")
    if barrier:
        wait_until_ready(barrier, barrier["me"])
    start = spec.get("start")
    if start is None:
        return 0.0
    delay = start - time.time()
    if delay > 0:
        time.sleep(delay)
    return max(0.0, -delay)


def append(spec: dict[str, Any]) -> dict[str, Any]:
    table = open_table(spec["table"], writer_id=spec.get("writer_id"))
    batches = spec["batches"]
    app = spec.get("txn_app")
    txn_ids = spec.get("txn_ids", batches)
    late = _sync(spec)
    results: list[list[Any]] = []
    stop = spec.get("stop_file")
    seconds: list[float] = []
    pace_deadline = time.monotonic() + 60
    for i, (b, tid) in enumerate(zip(batches, txn_ids, strict=True)):
        if stop and os.path.exists(stop):
            break
        if spec.get("pace_file"):
            _await_progress(spec["pace_file"], i // spec["pace_every"], pace_deadline)
        began = time.monotonic()
        try:
            r = table.append(make_batch(b), txn=(app, tid) if app else None)
        except CarbonLiteError as exc:
            if not spec.get("allow_errors"):
                raise
            results.append([b, None, False, f"{type(exc).__name__}: {exc}"])
            continue
        finally:
            seconds.append(time.monotonic() - began)
        results.append([b, r.version, r.skipped, None])
        if spec.get("progress_file"):
            with open(spec["progress_file"], "a") as f:
                f.write(".")
    return {
        "results": results,
        "seconds": seconds,
        "lost_races": _lost[0],
        "relocated": _relocated[0],
        "late": late,
    }


def _await_progress(path: str, count: int, deadline: float) -> None:
    """Until ``path`` holds ``count`` characters (or the deadline passes)."""
    while time.monotonic() < deadline:
        try:
            if os.path.getsize(path) >= count:
                return
        except FileNotFoundError:
            if count == 0:
                return
        time.sleep(0.002)


def read(spec: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random(spec.get("seed", 0))
    table = open_table(spec["table"])
    _sync(spec)
    observations: list[list[Any]] = []
    stop = spec["stop_file"]
    last = False
    while not last:
        last = os.path.exists(stop)  # one more scan after the writers are done
        how = rng.randrange(3)
        if how == 0:
            table = open_table(spec["table"])  # from the latest checkpoint
        else:
            table.refresh()
        version = table.version
        if how == 2 and version > 0:
            version = rng.randrange(version + 1)  # time travel
        try:
            got = table.to_arrow(version=version)
            ids = batch_ids(got)
            problem = diff_rows(got, ids)
            if problem is None and table.count_rows(version=version) != got.num_rows:
                problem = f"count_rows {table.count_rows(version=version)} != {got.num_rows}"
        except Exception as exc:
            ids, problem = set(), f"{type(exc).__name__}: {exc}"
        observations.append([version, sorted(ids), problem])
        if spec.get("progress_file"):
            with open(spec["progress_file"], "a") as f:
                f.write(".")
    return {"observations": observations}


def change(spec: dict[str, Any]) -> dict[str, Any]:
    table = open_table(spec["table"])
    if spec.get("gate"):
        _install_gate(spec["gate"])
    op = spec["op"]
    try:
        if op == "add_column":
            r = table.add_columns(pa.field(spec["column"], pa.int64()))
        elif op == "overwrite":
            r = table.overwrite(make_batch(spec["batch"]))
        else:
            r = table.append(make_batch(spec["batch"]))
    except CommitConflictError as exc:
        return {
            "ok": False,
            "error": type(exc).__name__,
            "read_version": exc.read_version,
            "conflicting_version": exc.conflicting_version,
            "message": str(exc),
        }
    return {"ok": True, "version": r.version}


# --- the test side --------------------------------------------------------------------------


def spawn(spec: dict[str, Any]) -> subprocess.Popen:
    """Start a worker process running ``spec``."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.table_worker", json.dumps(spec)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 120) -> dict[str, Any]:
    """Wait for a worker and return what it printed."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err}"
    return json.loads(out)


def main() -> None:
    spec = json.loads(sys.argv[1])
    _count_races()
    op = spec["op"]
    result = append(spec) if op == "append" else read(spec) if op == "read" else change(spec)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
