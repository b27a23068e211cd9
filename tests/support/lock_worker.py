"""A process that appends to a table as writer ``WRITER_ID``, for tests of the writer lock
across processes (tests/test_api_doors_locks.py).

    python -m tests.support.lock_worker PATH WRITER_ID [--hold] [--fail] [--say-waiting]

appends two one-row batches (ids 0 and 1, or ``--first N``: N and N + 1) in one commit. The
batches are read while the append holds the writer's lock, so:

- ``--hold``: after the first batch it prints ``holding`` and waits for a line on stdin (the
  lock is held meanwhile), then goes on;
- ``--fail``: the source fails after the first batch (the process ends with an error);
- ``--say-waiting``: it prints ``waiting`` the first time it finds the lock held by another
  (seam ``storage.lock_busy``: it has the lock file open and waits on it).
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Iterator

import pyarrow as pa

import carbonlite as cl
from carbonlite.seams import listening

SCHEMA = pa.schema([("id", pa.int64())])


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def batches(first: int, *, hold: bool, fail: bool) -> Iterator[pa.RecordBatch]:
    yield pa.record_batch([pa.array([first], pa.int64())], schema=SCHEMA)
    if hold:
        say("holding")
        sys.stdin.readline()
    if fail:
        raise RuntimeError("the source failed")
    yield pa.record_batch([pa.array([first + 1], pa.int64())], schema=SCHEMA)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("writer_id")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--say-waiting", action="store_true")
    args = parser.parse_args()
    said = threading.Event()

    def listener(name: str) -> None:
        if name == "storage.lock_busy" and args.say_waiting and not said.is_set():
            said.set()
            say("waiting")

    table = cl.open_table(args.path, writer_id=args.writer_id)
    with listening(listener):
        table.append(
            pa.RecordBatchReader.from_batches(
                SCHEMA, batches(args.first, hold=args.hold, fail=args.fail)
            )
        )
    say("done")


if __name__ == "__main__":
    main()
