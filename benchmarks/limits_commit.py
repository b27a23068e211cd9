"""The commit-latency figure of ``bench_limits.py`` (issue 30): ours against its ceiling.

Ours: ``Table.append`` of 1,000 event rows to a fresh table (``sort_columns=["ts"]``), the
first ``warmup`` untimed. During every append ``os.fsync``/``os.fdatasync`` are counted by
what they sync, a file or a directory (one ``fstat`` each, about a microsecond on a
millisecond commit): ``storage/local.py`` syncs the segment file's new bytes (``fdatasync``),
the log version's temporary file (``fsync``, in ``put_if_absent``) and the log directory
once the version is linked in; the first append to a new segment file also syncs its
directory, and a checkpoint adds its own.

Ceiling: per commit, the bytes a warm-up commit of ours added to the table directory (the
median; data and log version) written with one ``os.write`` to a new file, then as many file
fsyncs of it and directory fsyncs of its directory as the most common warm-up commit of ours
made. Repeated fsyncs of a file with nothing new to write cost little, so the ceiling is the
floor of what that many syncs cost. Ours and the ceiling alternate commit by commit.
"""

from __future__ import annotations

import collections
import contextlib
import os
import stat
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from datagen import event_table

import carbonlite as cl

__all__ = ["counting_syncs", "measure_commits", "timed", "tree_bytes"]

ROWS = 1_000


@contextlib.contextmanager
def counting_syncs(counts: collections.Counter[str]) -> Iterator[None]:
    """``os.fsync``/``os.fdatasync`` counted by what they sync (``file`` or ``dir``); the
    storage layer calls them through ``os`` at call time, so it sees the counting ones."""
    saved = os.fsync, os.fdatasync

    def counted(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            counts["dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"] += 1
            real(fd)

        return sync

    os.fsync, os.fdatasync = counted(saved[0]), counted(saved[1])
    try:
        yield
    finally:
        os.fsync, os.fdatasync = saved


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _ceiling_commit(directory: Path, dir_fd: int, name: str, payload: bytes, syncs: Any) -> None:
    fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, payload)
        for _ in range(syncs[0]):
            os.fsync(fd)
    finally:
        os.close(fd)
    for _ in range(syncs[1]):
        os.fsync(dir_fd)


def measure_commits(root: Path, commits: int, warmup: int) -> dict[str, Any]:
    """``commits`` timed appends of ours and of the ceiling, alternating; their latencies."""
    data = event_table((warmup + commits) * ROWS, seed=1)
    path = root / "commits"
    table = cl.create_table(path, data.schema, sort_columns=["ts"])
    sizes: list[int] = []
    warm_syncs: list[tuple[int, int]] = []
    for i in range(warmup):  # untimed: what one commit writes and syncs
        before, counts = tree_bytes(path), collections.Counter[str]()
        with counting_syncs(counts):
            table.append(data.slice(i * ROWS, ROWS))
        sizes.append(tree_bytes(path) - before)
        warm_syncs.append((counts["file"], counts["dir"]))
    nbytes = int(statistics.median(sizes))
    syncs = collections.Counter(warm_syncs).most_common(1)[0][0]
    payload = os.urandom(nbytes)
    directory = root / "commit-ceiling"
    directory.mkdir()
    dir_fd = os.open(directory, os.O_RDONLY)
    times: dict[str, list[float]] = {"ours": [], "ceiling": []}
    ours_syncs: list[tuple[int, int]] = []
    try:
        for i in range(commits):
            batch = data.slice((warmup + i) * ROWS, ROWS)
            counts = collections.Counter[str]()

            def ours(b: Any = batch, c: Any = counts) -> None:
                with counting_syncs(c):
                    table.append(b)

            def ceiling(i: int = i) -> None:
                _ceiling_commit(directory, dir_fd, f"{i:08d}", payload, syncs)

            sides = [("ours", ours), ("ceiling", ceiling)]
            for side, fn in sides if i % 2 == 0 else sides[::-1]:
                times[side].append(timed(fn))
            ours_syncs.append((counts["file"], counts["dir"]))
    finally:
        os.close(dir_fd)
    table.close()  # its last checkpoint, if one is still being written: not in the next run
    table = cl.open_table(path)
    if table.count_rows() != (warmup + commits) * ROWS:
        raise RuntimeError("the commit table does not hold every appended row")
    ms = {side: [t * 1000 for t in ts] for side, ts in times.items()}
    extra = [t for t, s in zip(ms["ours"], ours_syncs, strict=True) if s != syncs]
    return {
        "commits": commits,
        "rows_per_commit": ROWS,
        "bytes_per_commit": nbytes,
        "warmup_bytes": sizes,
        "syncs_per_commit": {"file": syncs[0], "dir": syncs[1]},
        "p50_ms": {side: percentile(v, 50) for side, v in ms.items()},
        "p99_ms": {side: percentile(v, 99) for side, v in ms.items()},
        "mean_ms": {side: statistics.fmean(v) for side, v in ms.items()},
        "max_ms": {side: max(v) for side, v in ms.items()},
        "ours_commits_with_other_syncs": len(extra),
        "ours_other_syncs_ms": sorted(extra),
        "ours_p99_without_them_ms": percentile(
            [t for t, s in zip(ms["ours"], ours_syncs, strict=True) if s == syncs] or [0.0], 99
        ),
    }
