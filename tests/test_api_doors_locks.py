"""Lock files and processes (issue 38 §3): a process that ends, normally or by an error, leaves
no ``*.lock`` under ``_carbonlite/``; one killed while it holds a lock leaves its file until
``recover``; and deleting lock files does not weaken the lock: two processes with the same
writer id still exclude each other, also when one waited on the file the other deleted.

The processes are real (``tests/support/lock_worker.py``, the ``carbonlite`` command); a
process waiting for a lock says so at the seam ``storage.lock_busy``, so no test sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.errors import WriterConflictError
from carbonlite.storage.local import LocalStorage
from tests.support import REPO

SCHEMA = pa.schema([("id", pa.int64())])
HOURS_AGO = 1_000_000_000.0  # a modification time far in the past (2001)


def lock_files(table: Path) -> list[str]:
    return sorted(str(p.relative_to(table)) for p in (table / "_carbonlite").rglob("*.lock"))


def worker(table: Path, writer_id: str, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.lock_worker", str(table), writer_id, *flags],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate("\n", timeout=120)
    return proc.returncode, out, err


def carbonlite(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "carbonlite", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "t"
    # a checkpoint at every commit: each commit also swaps _last_checkpoint under its lock
    cl.create_table(path, SCHEMA, properties={"checkpoint_interval": "1"})
    return path


def ids(table: Path) -> list[int]:
    return sorted(cl.open_table(table).to_arrow().column("id").to_pylist())


def refused(lock: Path) -> bool:
    """Whether another process holds ``lock`` now (a lock attempt that does not wait)."""
    try:
        with LocalStorage().lock(str(lock), timeout=0):
            return False
    except WriterConflictError:
        return True


@pytest.mark.slow
def test_a_process_that_ends_normally_leaves_no_lock_file(table: Path) -> None:
    code, out, err = finish(worker(table, "w"))
    assert (code, out) == (0, "done\n"), err
    assert ids(table) == [0, 1]
    for args in (
        ("handoff", table, "--finish"),
        ("compact", table, "--type", "major"),
        ("recover", table, "--min-age", "0s"),
        ("clean", table, "--retention", "0s", "--force"),
    ):
        run = carbonlite(*args)
        assert run.returncode == 0, run.stderr
    assert ids(table) == [0, 1]
    assert cl.open_table(table).history()[0].version >= 3  # the commands committed
    assert lock_files(table) == []


def test_a_process_that_fails_leaves_no_lock_file(table: Path) -> None:
    code, out, err = finish(worker(table, "w", "--fail"))
    assert code == 1 and out == "", (code, out)
    assert "DataSourceError" in err and "the source failed" in err, err
    assert ids(table) == []  # nothing committed
    run = carbonlite("compact", table, "--type", "custom", "--segments", "0")
    assert run.returncode == 1 and "error:" in run.stderr, run.stderr
    assert lock_files(table) == []


def test_a_killed_process_leaves_its_lock_file_until_recover(table: Path) -> None:
    holder = worker(table, "w", "--hold")
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    finally:
        holder.kill()
    assert lock_files(table) == ["_carbonlite/locks/w.lock"]
    swap_lock = table / "_carbonlite" / "_last_checkpoint.lock"  # a swapper killed in its swap
    swap_lock.write_bytes(b"")
    for name in lock_files(table):
        os.utime(table / name, (HOURS_AGO, HOURS_AGO))
    cl.open_table(table).recover()
    assert lock_files(table) == []
    code, out, err = finish(worker(table, "w"))  # the writer id is free again
    assert (code, out) == (0, "done\n"), err
    assert ids(table) == [0, 1]


def test_two_processes_still_exclude_each_other(table: Path) -> None:
    """The first holds writer w's lock; the second waits on the same lock file; the first ends
    and deletes the file; the second then holds the lock on the file the path names now (the
    one it had open is gone), and a third is refused while it does."""
    lock = table / "_carbonlite" / "locks" / "w.lock"
    first = worker(table, "w", "--hold")
    second = None
    try:
        assert first.stdout is not None and first.stdout.readline() == "holding\n"
        assert refused(lock)
        second = worker(table, "w", "--hold", "--say-waiting", "--first", "10")
        assert second.stdout is not None and second.stdout.readline() == "waiting\n"
        code, out, err = finish(first)
        assert (code, out) == (0, "done\n"), err
        assert second.stdout.readline() == "holding\n"
        assert refused(lock), "a lock was taken while another process held it"
        assert ids(table) == [0, 1]  # the second's rows wait for its commit
        code, out, err = finish(second)
        assert (code, out) == (0, "done\n"), err
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert ids(table) == [0, 1, 10, 11]
    assert lock_files(table) == []
    assert not refused(lock)
