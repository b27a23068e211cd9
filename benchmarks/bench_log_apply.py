"""Replay costs per action: every action applies in time proportional to its own size.

    python benchmarks/bench_log_apply.py [--quick] [--output PATH]

``Snapshot.apply`` is timed on synthetic logs (no storage), each at a small and a 10x larger
size, and the cost per item is compared: linear applies keep the ratio near 1, a quadratic
one makes it near 10.

a. ``removeFiles``: one segment of N files, marked for delete, then N one-file removals
   (was O(n*m): ``set(action.files)`` rebuilt per file of the segment).
b. one new file per append into one streaming segment (what S3 writers do: one object per
   append): N appends (was quadratic: each commit copied the segment's file map and re-summed
   its sizes).
c. N appends of one blocklet each to the same file (a local streaming writer).
d. replay of N versions that each add and clean a segment: the state stays small, so the
   cost per version must not grow with the history (forgotten segments).

Results: markdown on stdout, JSON in ``benchmarks/results/log_apply.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from report import progress, yes_no

from carbonlite.format.stats import ColumnStats
from carbonlite.metadata import (
    BlockletEntry,
    BlockletsAppended,
    CommitInfo,
    FilesRemoved,
    SegmentAdded,
    SegmentStatusChanged,
    Snapshot,
    TableMetadata,
)

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64())])
INFO = CommitInfo("BENCH", 1, True)
TARGET = 2.0
"""Cost per item at 10x the size may be at most this many times the small size's."""


def _base() -> Snapshot:
    return Snapshot.from_actions("memory://bench", 0, [TableMetadata("t", SCHEMA), INFO])


def _entry(offset: int) -> BlockletEntry:
    stats = {"id": ColumnStats(0, offset, offset + 9), "ts": ColumnStats(0, offset, offset)}
    return BlockletEntry(offset, 100, 10, stats)


def removals(n: int) -> float:
    snap = _base().apply(1, [SegmentAdded("0", "STREAMING", "STREAMING"), INFO])
    for i in range(n):
        snap = snap.apply(
            snap.version + 1,
            [BlockletsAppended("0", f"segments/0/f{i}.cblt", 0, 200, (_entry(100),)), INFO],
        )
    snap = snap.apply(snap.version + 1, [SegmentStatusChanged("0", "MARKED_FOR_DELETE"), INFO])
    start = time.perf_counter()
    for i in range(n):
        snap = snap.apply(snap.version + 1, [FilesRemoved("0", (f"segments/0/f{i}.cblt",)), INFO])
    return time.perf_counter() - start


def removals_at_once(n: int) -> float:
    snap = _base().apply(1, [SegmentAdded("0", "STREAMING", "STREAMING"), INFO])
    snap = snap.apply(
        2,
        [
            *(
                BlockletsAppended("0", f"segments/0/f{i}.cblt", 0, 200, (_entry(100),))
                for i in range(n)
            ),
            SegmentStatusChanged("0", "MARKED_FOR_DELETE"),
            INFO,
        ],
    )
    files = tuple(f"segments/0/f{i}.cblt" for i in range(n))
    start = time.perf_counter()
    snap.apply(3, [FilesRemoved("0", files), INFO])
    return time.perf_counter() - start


def object_per_append(n: int) -> float:
    snap = _base().apply(1, [SegmentAdded("0", "STREAMING", "STREAMING"), INFO])
    start = time.perf_counter()
    for i in range(n):
        snap = snap.apply(
            snap.version + 1,
            [BlockletsAppended("0", f"segments/0/w-{i:012x}.cblt", 0, 200, (_entry(100),)), INFO],
        )
        snap.segments["0"].num_bytes  # noqa: B018 - what every commit asks
    return time.perf_counter() - start


def same_file(n: int) -> float:
    snap = _base().apply(1, [SegmentAdded("0", "STREAMING", "STREAMING"), INFO])
    start = time.perf_counter()
    for i in range(n):
        at = 100 + 100 * i
        start_at = 0 if i == 0 else at  # the first append creates the file (header first)
        snap = snap.apply(
            snap.version + 1,
            [
                BlockletsAppended("0", "segments/0/w-0.cblt", start_at, at + 100, (_entry(at),)),
                INFO,
            ],
        )
    return time.perf_counter() - start


def churn(n: int) -> float:
    snap = _base()
    start = time.perf_counter()
    for i in range(n):
        sid = str(i)
        snap = snap.apply(
            snap.version + 1,
            [
                SegmentAdded(sid, "STREAMING", "STREAMING"),
                BlockletsAppended(sid, f"segments/{sid}/f.cblt", 0, 200, (_entry(100),)),
                INFO,
            ],
        )
        snap = snap.apply(snap.version + 1, [SegmentStatusChanged(sid, "MARKED_FOR_DELETE"), INFO])
        snap = snap.apply(snap.version + 1, [FilesRemoved(sid, (f"segments/{sid}/f.cblt",)), INFO])
    assert len(snap.segments) == 0
    return time.perf_counter() - start


CASES: dict[str, Callable[[int], float]] = {
    "a. removeFiles, one file per action": removals,
    "a'. removeFiles, every file in one action": removals_at_once,
    "b. one new file per append (S3)": object_per_append,
    "c. appends to one file": same_file,
    "d. add + clean a segment per round": churn,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    small = 2_000 if args.quick else 20_000
    large = small * 10
    results = {}
    print(
        f"| case | N = {small:,} | N = {large:,} | µs per item, small / large | linear (<= {TARGET}x) |"
    )
    print("|---|---:|---:|---:|:--:|")
    for name, case in CASES.items():
        progress(f"{name}: {small:,}")
        t_small = min(case(small) for _ in range(2))
        progress(f"{name}: {large:,}")
        t_large = case(large)
        per_small, per_large = t_small / small * 1e6, t_large / large * 1e6
        ratio = per_large / per_small
        results[name] = {
            "small_n": small,
            "large_n": large,
            "small_s": t_small,
            "large_s": t_large,
            "us_per_item_small": per_small,
            "us_per_item_large": per_large,
            "ratio": ratio,
            "linear": ratio <= TARGET,
        }
        print(
            f"| {name} | {t_small:.2f} s | {t_large:.2f} s | {per_small:.1f} / {per_large:.1f} "
            f"({ratio:.2f}x) | {yes_no(ratio <= TARGET)} |"
        )
    out = args.output or Path(__file__).parent / "results" / (
        "log_apply-quick.json" if args.quick else "log_apply.json"
    )
    out.write_text(json.dumps({"machine": platform.platform(), "cases": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
