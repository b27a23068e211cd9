"""Benchmark the table layer against baselines measured in the same run.

    python benchmarks/bench_table.py [--quick] [--output PATH]

The machine this runs on is small (2 cores) and shared, so every comparison is a ratio
against a baseline timed in the same run, the two sides interleaved call by call so that a
noisy minute disturbs both alike; throughputs are best-of-N, latencies are distributions
(p50/p99) over many calls, open times are medians.

What is measured:

a. commit latency: 1,000-row ``table.append(batch)`` x 200 on a fresh table vs
   ``deltalake.write_deltalake(path, batch, mode="append")`` of the same rows on a fresh
   Delta table (a few warm-up appends left out of the statistics); p50 and p99. For context,
   a third series appends with fsync disabled: deltalake does not sync on local disk.
b. throughput of one 5,000,000-row append into a new table (``create_table`` untimed) vs
   ``pyarrow.parquet.write_table(table, path, compression="zstd")``, in MB/s of
   ``table.nbytes``.
c. a 1% range filter on the (roughly) sorted ``ts`` column of that 5M-row table:
   ``table.to_arrow(filter=...)`` vs ``pyarrow.dataset.dataset(dir).to_table(filter=...)`` on
   the same rows written by ``pq.write_table`` (zstd, default row-group size) as one file;
   times, and bytes read (ours: ``plan_splits().bytes_selected``; Parquet: compressed bytes of
   the row groups whose ``ts`` statistics overlap the range).
d. ``open_table(path).version`` at 100, 1,000 and 10,000 commits of 1-row appends (default
   checkpoint interval), both at a checkpoint and interval-1 versions past one; and the time
   to write and to read the checkpoint of each of those states.
e. checkpoint interval 10, 25, 50, 100, 200 (and never): tables built side by side with
   1,000-row appends; per interval the commit latency p50/p99/mean, the worst-case open time
   (latest version interval-1 past a checkpoint) and the cost of one checkpoint.

Results are printed as markdown and written to ``benchmarks/results/table.json``
(``table-quick.json`` with ``--quick``, a much smaller smoke-test run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from datagen import event_table
from report import progress, yes_no

import carbonlite
from carbonlite import Table, create_table, open_table
from carbonlite.metadata import Log, Snapshot
from carbonlite.metadata.serde import decode_checkpoint, encode_checkpoint
from carbonlite.properties import PROPERTIES
from carbonlite.storage import open_storage

MB = 1_000_000
RESULTS_DIR = Path(__file__).resolve().parent / "results"
LATENCY_TARGET = 5.0
THROUGHPUT_TARGET = 1.0
FILTER_TARGET = 1.0
DEFAULT_INTERVAL = int(PROPERTIES["checkpoint_interval"].default)
NEVER = 1_000_000_000
"""A checkpoint interval no table in this benchmark reaches: the no-checkpoint baseline."""


@dataclass(frozen=True, slots=True)
class Config:
    commits: int
    """a: timed appends on each side."""
    commit_rows: int
    """a, e: rows per append."""
    warmup: int
    """a, e: untimed appends before the timed ones."""
    big_rows: int
    """b, c: rows of the large table."""
    repeat: int
    """b: best of this many runs."""
    filter_repeat: int
    """c: runs per case (best and median reported)."""
    filter_fraction: float
    open_counts: tuple[int, ...]
    """d: commit counts at which opening is timed."""
    open_repeat: int
    checkpoint_state: int
    """d: one more commit count (= blocklets) at which writing a checkpoint is timed."""
    intervals: tuple[int, ...]
    interval_commits: int
    """e: at least this many commits per table."""


FULL = Config(
    commits=200,
    commit_rows=1_000,
    warmup=5,
    big_rows=5_000_000,
    repeat=5,
    filter_repeat=7,
    filter_fraction=0.01,
    open_counts=(100, 1_000, 10_000),
    open_repeat=7,
    checkpoint_state=2_000,
    intervals=(10, 25, 50, 100, 200),
    interval_commits=1_000,
)
QUICK = Config(
    commits=30,
    commit_rows=1_000,
    warmup=3,
    big_rows=300_000,
    repeat=2,
    filter_repeat=3,
    filter_fraction=0.01,
    open_counts=(20, 100, 300),
    open_repeat=3,
    checkpoint_state=200,
    intervals=(10, 25, 50),
    interval_commits=100,
)

# --- helpers ---------------------------------------------------------------------------------


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


@dataclass(frozen=True, slots=True)
class Latency:
    """A latency distribution, in milliseconds."""

    p50_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    samples: int


def latency(seconds: Sequence[float]) -> Latency:
    return Latency(
        p50_ms=percentile(seconds, 50) * 1000,
        p99_ms=percentile(seconds, 99) * 1000,
        mean_ms=statistics.fmean(seconds) * 1000,
        max_ms=max(seconds) * 1000,
        samples=len(seconds),
    )


@dataclass(frozen=True, slots=True)
class Runs:
    """Best and median of several runs of one case, in seconds."""

    best_s: float
    median_s: float


def interleaved_runs(
    cases: dict[str, Callable[[], object]],
    *,
    repeat: int,
    before: Callable[[str], None] | None = None,
) -> dict[str, Runs]:
    """Time each case ``repeat`` times, the cases interleaved in each round.

    ``before(name)`` runs untimed ahead of each timed call (to remove old output, say).
    """
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            if before is not None:
                before(name)
            times[name].append(timed(fn))
    return {n: Runs(min(t), statistics.median(t)) for n, t in times.items()}


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def reset_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


# --- a: commit latency -----------------------------------------------------------------------


@contextlib.contextmanager
def syncs_disabled() -> Iterator[None]:
    """``os.fsync``/``os.fdatasync`` as no-ops, for a context figure only: deltalake's local
    writes call neither (checked with strace), while a CarbonLite commit syncs 4 times."""
    saved = os.fsync, os.fdatasync

    def skip(fd: int) -> None:
        return None

    os.fsync = os.fdatasync = skip
    try:
        yield
    finally:
        os.fsync, os.fdatasync = saved


def bench_commit_latency(cfg: Config, tmp: Path) -> dict[str, Any]:
    """1,000-row appends on fresh tables, ours and Delta's interleaved call by call.

    A third series appends to a third table with fsync disabled: durability equal to Delta's,
    to tell the cost of syncing (which a busy disk inflates) from the rest of a commit.
    """
    n = cfg.warmup + cfg.commits
    data = event_table(n * cfg.commit_rows, seed=1)
    batches = [data.slice(i * cfg.commit_rows, cfg.commit_rows) for i in range(n)]
    delta_path = tmp / "latency-delta"
    table = create_table(tmp / "latency-carbonlite", data.schema, sort_columns=["ts"])
    unsynced = create_table(tmp / "latency-unsynced", data.schema, sort_columns=["ts"])
    times: dict[str, list[float]] = {"carbonlite": [], "deltalake": [], "carbonlite_no_fsync": []}
    checkpointed: list[bool] = []
    progress(f"a: {n} appends of {cfg.commit_rows:,} rows on each side")
    for i, batch in enumerate(batches):

        def ours(b: pa.Table = batch) -> None:
            table.append(b)

        def delta(b: pa.Table = batch) -> None:
            deltalake.write_deltalake(str(delta_path), b, mode="append")

        def ours_unsynced(b: pa.Table = batch) -> None:
            with syncs_disabled():
                unsynced.append(b)

        cases = [("carbonlite", ours), ("deltalake", delta), ("carbonlite_no_fsync", ours_unsynced)]
        # Rotate who goes first, so that no side always follows another's writes.
        for name, fn in cases[i % 3 :] + cases[: i % 3]:
            elapsed = timed(fn)
            if i >= cfg.warmup:
                times[name].append(elapsed)
        if i >= cfg.warmup:
            checkpointed.append(table.version % DEFAULT_INTERVAL == 0)
    for t in (table, unsynced):
        if t.count_rows() != n * cfg.commit_rows:
            raise AssertionError("the table does not hold every appended row")
    delta_rows = deltalake.DeltaTable(str(delta_path)).to_pyarrow_table(columns=["id"]).num_rows
    if delta_rows != n * cfg.commit_rows:
        raise AssertionError("the Delta table does not hold every appended row")
    ours_lat, delta_lat = latency(times["carbonlite"]), latency(times["deltalake"])
    unsynced_lat = latency(times["carbonlite_no_fsync"])
    p50_ratio, p99_ratio = delta_lat.p50_ms / ours_lat.p50_ms, delta_lat.p99_ms / ours_lat.p99_ms
    flagged = list(zip(times["carbonlite"], checkpointed, strict=True))
    return {
        "rows_per_append": cfg.commit_rows,
        "warmup_appends": cfg.warmup,
        "carbonlite": asdict(ours_lat),
        "deltalake": asdict(delta_lat),
        "p50_ratio": p50_ratio,
        "p99_ratio": p99_ratio,
        "target": LATENCY_TARGET,
        "met_p50": p50_ratio >= LATENCY_TARGET,
        "met_p99": p99_ratio >= LATENCY_TARGET,
        "carbonlite_checkpoint_commits": sum(checkpointed),
        "carbonlite_checkpoint_commit_ms": [t * 1000 for t, ck in flagged if ck],
        "carbonlite_without_checkpoint_commits": asdict(
            latency([t for t, ck in flagged if not ck])
        ),
        "carbonlite_no_fsync": asdict(unsynced_lat),
        "no_fsync_p50_ratio": delta_lat.p50_ms / unsynced_lat.p50_ms,
        "no_fsync_p99_ratio": delta_lat.p99_ms / unsynced_lat.p99_ms,
    }


# --- b: one large append ---------------------------------------------------------------------


def bench_append_throughput(cfg: Config, data: pa.Table, tmp: Path) -> tuple[dict[str, Any], Table]:
    """One ``big_rows`` append into a new table vs one Parquet file; returns the last table."""
    ours_path = tmp / "big-carbonlite"
    pq_path, pq_synced = tmp / "big.parquet", tmp / "big-fsync.parquet"
    tables: list[Table] = []

    def before(name: str) -> None:
        if name == "carbonlite":
            tables.clear()
            shutil.rmtree(ours_path, ignore_errors=True)
            tables.append(create_table(ours_path, data.schema, sort_columns=["ts"]))
        else:
            (pq_path if name == "parquet" else pq_synced).unlink(missing_ok=True)

    def parquet_fsync() -> None:
        pq.write_table(data, pq_synced, compression="zstd")
        fsync_file(pq_synced)

    progress(f"b: one {data.num_rows:,}-row append vs pq.write_table, best of {cfg.repeat}")
    runs = interleaved_runs(
        {
            "carbonlite": lambda: tables[0].append(data),
            "parquet": lambda: pq.write_table(data, pq_path, compression="zstd"),
            "parquet_fsync": parquet_fsync,
        },
        repeat=cfg.repeat,
        before=before,
    )
    table = tables[0]
    if table.count_rows() != data.num_rows:
        raise AssertionError("the table does not hold the rows appended")
    nbytes = data.nbytes
    ours_mb_s = nbytes / MB / runs["carbonlite"].best_s
    theirs_mb_s = nbytes / MB / runs["parquet"].best_s
    ratio = ours_mb_s / theirs_mb_s
    segment = table.segments()[0]
    result = {
        "rows": data.num_rows,
        "arrow_bytes": nbytes,
        "carbonlite_mb_s": ours_mb_s,
        "parquet_mb_s": theirs_mb_s,
        "parquet_fsync_mb_s": nbytes / MB / runs["parquet_fsync"].best_s,
        "ratio": ratio,
        "target": THROUGHPUT_TARGET,
        "met": ratio >= THROUGHPUT_TARGET,
        "seconds": {name: asdict(r) for name, r in runs.items()},
        "bytes_written": {"carbonlite": segment.bytes, "parquet": pq_path.stat().st_size},
        "blocklets": segment.blocklets,
    }
    pq_synced.unlink(missing_ok=True)
    return result, table


# --- c: a 1% range filter --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParquetSelection:
    """Row groups whose statistics overlap a range, as a reader that prunes by them sees it."""

    row_groups_selected: int
    row_groups_total: int
    rows_selected: int
    bytes_selected: int
    bytes_total: int


def parquet_selection(path: Path, column: str, lo: int, hi: int) -> ParquetSelection:
    """Row groups of ``path`` whose ``column`` min/max (raw int64) overlap ``[lo, hi)``."""
    meta = pq.ParquetFile(path).metadata
    index = meta.schema.to_arrow_schema().get_field_index(column)
    selected = rows = nbytes = total = 0
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        size = sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))
        total += size
        stats = rg.column(index).statistics
        if stats is None or not stats.has_min_max or (stats.max_raw >= lo and stats.min_raw < hi):
            selected += 1
            rows += rg.num_rows
            nbytes += size
    return ParquetSelection(selected, meta.num_row_groups, rows, nbytes, total)


def range_bounds(data: pa.Table, fraction: float) -> tuple[int, int]:
    """``[lo, hi)`` in raw ``ts`` microseconds holding ``fraction`` of the rows, mid-table."""
    ts = np.sort(data.column("ts").cast(pa.int64()).to_numpy())
    start = len(ts) // 2
    return int(ts[start]), int(ts[min(len(ts) - 1, start + int(len(ts) * fraction))])


def bench_range_filter(
    cfg: Config, data: pa.Table, table: Table, parquet_file: Path, tmp: Path
) -> dict[str, Any]:
    pq_dir, pq_small_dir = tmp / "filter-parquet", tmp / "filter-parquet-64k"
    reset_dir(pq_dir)
    reset_dir(pq_small_dir)
    shutil.copyfile(parquet_file, pq_dir / "part-0.parquet")  # pq.write_table, zstd, defaults
    small_rg = 65_536  # the blocklet size: same pruning granularity, for context only
    pq.write_table(
        data, pq_small_dir / "part-0.parquet", compression="zstd", row_group_size=small_rg
    )
    lo, hi = range_bounds(data, cfg.filter_fraction)
    ts_type = data.schema.field("ts").type
    expr = (pc.field("ts") >= pa.scalar(lo, ts_type)) & (pc.field("ts") < pa.scalar(hi, ts_type))
    raw_ts = data.column("ts").cast(pa.int64())
    expected = int(pc.sum(pc.and_(pc.greater_equal(raw_ts, lo), pc.less(raw_ts, hi))).as_py() or 0)

    def ours() -> pa.Table:
        return table.to_arrow(filter=expr)

    def ours_opened() -> pa.Table:
        return open_table(table.path).to_arrow(filter=expr)

    def parquet(directory: Path) -> pa.Table:
        return ds.dataset(directory, format="parquet").to_table(filter=expr)

    got, want = ours(), parquet(pq_dir)
    if got.num_rows != expected or want.num_rows != expected:
        raise AssertionError(f"expected {expected} rows, got {got.num_rows} and {want.num_rows}")
    if sorted(got.column("id").to_pylist()) != sorted(want.column("id").to_pylist()):
        raise AssertionError("the two scans returned different rows")
    progress(f"c: 1% range filter ({expected:,} rows), {cfg.filter_repeat} runs per case")
    runs = interleaved_runs(
        {
            "carbonlite": ours,
            "carbonlite_with_open": ours_opened,
            "parquet": lambda: parquet(pq_dir),
            "parquet_64k_row_groups": lambda: parquet(pq_small_dir),
        },
        repeat=cfg.filter_repeat,
    )
    plan = table.plan_splits(filter=expr)
    theirs = parquet_selection(pq_dir / "part-0.parquet", "ts", lo, hi)
    small = parquet_selection(pq_small_dir / "part-0.parquet", "ts", lo, hi)
    speedup = runs["parquet"].median_s / runs["carbonlite"].median_s
    return {
        "rows_matching": expected,
        "range_us": [lo, hi],
        "parquet_layout": (
            "one file written by pq.write_table(compression='zstd'), default row-group size "
            f"({theirs.rows_selected // max(theirs.row_groups_selected, 1):,} rows per group), "
            "read with pyarrow.dataset.dataset(dir).to_table(filter=...)"
        ),
        "seconds": {name: asdict(r) for name, r in runs.items()},
        "speedup_median": speedup,
        "speedup_best": runs["parquet"].best_s / runs["carbonlite"].best_s,
        "target": FILTER_TARGET,
        "met": speedup >= FILTER_TARGET,
        "carbonlite_read": {
            "blocklets_selected": plan.blocklets_selected,
            "blocklets_total": plan.blocklets_total,
            "rows_selected": plan.num_rows,
            "bytes_selected": plan.bytes_selected,
            "bytes_total": plan.bytes_total,
        },
        "parquet_read": asdict(theirs),
        "parquet_64k_row_groups_read": asdict(small),
    }


# --- d: opening a table as commits pile up ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenTiming:
    """Opening the table at one version (version N is the N-th commit after the create)."""

    version: int
    checkpoint_version: int | None
    replayed_versions: int
    blocklets: int
    checkpoint_bytes: int
    open_ms: float
    """Median of ``open_table(path).version``."""
    open_best_ms: float
    checkpoint_read_ms: float
    """Median of reading and decoding the checkpoint alone (part of ``open_ms``)."""


def time_open(path: Path, repeat: int) -> OpenTiming:
    times = [timed(lambda: open_table(path).version) for _ in range(repeat)]
    table = open_table(path)
    log = table.log
    pointer = log.last_checkpoint()
    ckpt_ms, ckpt_bytes = 0.0, 0
    if pointer is not None:
        ckpt_bytes = os.path.getsize(log.checkpoint_path(pointer))
        ckpt_ms = 1000 * statistics.median(
            timed(lambda: log.read_checkpoint(pointer)) for _ in range(repeat)
        )
    snap = table.snapshot()
    return OpenTiming(
        version=snap.version,
        checkpoint_version=pointer,
        replayed_versions=snap.version - (pointer if pointer is not None else -1),
        blocklets=sum(s.num_blocklets for s in snap.segments.values()),
        checkpoint_bytes=ckpt_bytes,
        open_ms=statistics.median(times) * 1000,
        open_best_ms=min(times) * 1000,
        checkpoint_read_ms=ckpt_ms,
    )


@dataclass(frozen=True, slots=True)
class CheckpointCost:
    """Writing (and reading back) the checkpoint of one snapshot."""

    blocklets: int
    checkpoint_bytes: int
    write_ms: float
    """``Log.write_checkpoint``: encode, put-if-absent with fsync, move the pointer (median)."""
    encode_ms: float
    decode_ms: float


def checkpoint_cost(snapshot: Snapshot, scratch: Path, repeat: int) -> CheckpointCost:
    """Time writing ``snapshot``'s checkpoint into a scratch log (the table is not touched)."""
    reset_dir(scratch)
    storage, root = open_storage(str(scratch))
    log = Log(storage, root, storage.uri(root))
    files = [Path(p) for p in log.checkpoint_files(snapshot.version)]
    pointer = scratch / "_carbonlite" / "_last_checkpoint"
    writes = []
    for _ in range(repeat):
        for f in files:
            f.unlink(missing_ok=True)
        pointer.unlink(missing_ok=True)
        writes.append(timed(lambda: log.write_checkpoint(snapshot)))
    name = files[1].name
    document, index = encode_checkpoint(snapshot, name)
    encodes = [timed(lambda: encode_checkpoint(snapshot, name)) for _ in range(repeat)]

    def decode_all() -> None:  # the document, then every blocklet entry from the index
        restored = decode_checkpoint(
            document, snapshot.table_path, where="bench", read_index=lambda _n: index
        )
        sum(len(f.blocklets) for s in restored.segments.values() for f in s.files.values())

    decodes = [timed(decode_all) for _ in range(repeat)]
    encoded = document + index
    return CheckpointCost(
        blocklets=sum(s.num_blocklets for s in snapshot.segments.values()),
        checkpoint_bytes=len(encoded),
        write_ms=statistics.median(writes) * 1000,
        encode_ms=statistics.median(encodes) * 1000,
        decode_ms=statistics.median(decodes) * 1000,
    )


def bench_open(cfg: Config, tmp: Path) -> dict[str, Any]:
    """One table, 1-row appends in a loop; open timed at each count and interval-1 past it."""
    worst = [n + DEFAULT_INTERVAL - 1 for n in cfg.open_counts]
    open_points = sorted(set(cfg.open_counts) | set(worst))
    cost_points = sorted(set(cfg.open_counts) | {cfg.checkpoint_state})
    last = max(open_points + cost_points)
    data = event_table(last, seed=2)
    path = tmp / "open"
    table = create_table(path, data.schema, sort_columns=["ts"])
    opens: list[OpenTiming] = []
    costs: list[CheckpointCost] = []
    commit_s: list[float] = []
    progress(f"d: {last:,} one-row appends, open timed at {open_points}")
    started = time.perf_counter()
    for i in range(last):
        commit_s.append(timed(lambda i=i: table.append(data.slice(i, 1))))
        version = table.version
        if version % 500 == 0:
            rate = version / (time.perf_counter() - started)
            progress(f"d: {version:,}/{last:,} commits ({rate:.0f} commits/s)")
        if version in cost_points:
            costs.append(checkpoint_cost(table.snapshot(), tmp / "scratch-checkpoint", 3))
        if version in open_points:
            opens.append(time_open(path, cfg.open_repeat))
            progress(
                f"d: open at version {version:,}: {opens[-1].open_ms:.1f} ms "
                f"({opens[-1].replayed_versions} versions replayed)"
            )
    shutil.rmtree(path, ignore_errors=True)
    at_checkpoint = [o for o in opens if o.version in cfg.open_counts]
    past = [o for o in opens if o.version in worst]
    return {
        "checkpoint_interval": DEFAULT_INTERVAL,
        "rows_per_append": 1,
        "build_commit_latency": asdict(latency(commit_s)),
        "at_checkpoint": [asdict(o) for o in at_checkpoint],
        "interval_minus_one_past_checkpoint": [asdict(o) for o in past],
        "checkpoint_cost": [asdict(c) for c in costs],
        "open_growth_at_checkpoint": at_checkpoint[-1].open_ms / at_checkpoint[0].open_ms,
        "open_growth_past_checkpoint": past[-1].open_ms / past[0].open_ms,
    }


# --- e: choosing the checkpoint interval -----------------------------------------------------


def commits_for(interval: int, base: int) -> int:
    """The smallest commit count >= ``base`` that leaves the latest version interval-1 past a
    checkpoint (version v is the v-th append; version 0 creates the table)."""
    if interval >= NEVER:
        return base
    n = base
    while n % interval != interval - 1:
        n += 1
    return n


def bench_intervals(cfg: Config, tmp: Path) -> dict[str, Any]:
    """Tables that differ only in ``checkpoint_interval``, appended to in turn."""
    intervals = [*cfg.intervals, NEVER]
    targets = {k: commits_for(k, cfg.interval_commits) for k in intervals}
    total = max(targets.values())
    data = event_table(total * cfg.commit_rows, seed=3)
    tables = {
        k: create_table(
            tmp / f"interval-{k}",
            data.schema,
            sort_columns=["ts"],
            properties={"checkpoint_interval": str(k)},
        )
        for k in intervals
    }
    latencies: dict[int, list[float]] = {k: [] for k in intervals}
    ckpt_commits: dict[int, list[float]] = {k: [] for k in intervals}
    progress(f"e: {len(intervals)} tables, {total:,} appends of {cfg.commit_rows:,} rows each")
    for i in range(total):
        batch = data.slice(i * cfg.commit_rows, cfg.commit_rows)
        order = intervals if i % 2 == 0 else intervals[::-1]
        for k in order:
            if i >= targets[k]:
                continue
            t = timed(lambda k=k, b=batch: tables[k].append(b))
            if i >= cfg.warmup:
                latencies[k].append(t)
                if tables[k].version % k == 0:
                    ckpt_commits[k].append(t)
        if (i + 1) % 200 == 0:
            progress(f"e: {i + 1:,}/{total:,} rounds")
    rows = []
    baseline = latency(latencies[NEVER])
    for k in intervals:
        lat = latency(latencies[k])
        opened = time_open(tmp / f"interval-{k}", cfg.open_repeat)
        cost = checkpoint_cost(tables[k].snapshot(), tmp / "scratch-checkpoint", 3)
        rows.append(
            {
                "interval": "never" if k == NEVER else k,
                "commits": targets[k],
                "latency": asdict(lat),
                "p50_vs_never": lat.p50_ms / baseline.p50_ms,
                "p99_vs_never": lat.p99_ms / baseline.p99_ms,
                "mean_vs_never_ms": lat.mean_ms - baseline.mean_ms,
                "checkpoint_commits": len(ckpt_commits[k]),
                "checkpoint_commit_median_ms": (
                    statistics.median(ckpt_commits[k]) * 1000 if ckpt_commits[k] else None
                ),
                "worst_open": asdict(opened),
                "checkpoint_write_ms": cost.write_ms,
                "amortized_checkpoint_ms_per_commit": cost.write_ms / k if k != NEVER else 0.0,
            }
        )
        progress(f"e: interval {rows[-1]['interval']}: open {opened.open_ms:.1f} ms")
    for k in intervals:
        shutil.rmtree(tmp / f"interval-{k}", ignore_errors=True)
    return {"rows_per_append": cfg.commit_rows, "intervals": rows}


# --- report ----------------------------------------------------------------------------------


def markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    a, b, c = results["commit_latency"], results["append_throughput"], results["range_filter"]
    d, e = results["open"], results["checkpoint_interval"]
    lines = [
        f"{env['cpu_count']} CPUs (shared); Python {env['python']}; pyarrow {env['pyarrow']}; "
        f"deltalake {env['deltalake']}; carbonlite {env['carbonlite']}; {env['date']}; "
        f"load average {env['load_average_at_start'][0]:.1f} at start, "
        f"{env['load_average_at_end'][0]:.1f} at end.",
        "",
        f"**a. Commit latency**, {a['rows_per_append']:,}-row appends, "
        f"{a['carbonlite']['samples']} timed after {a['warmup_appends']} warm-up, "
        "interleaved with Delta's:",
        "",
        "| | CarbonLite ms | deltalake ms | Delta / ours | target | met |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for q in ("p50", "p99"):
        lines.append(
            f"| {q} | {a['carbonlite'][f'{q}_ms']:.2f} | {a['deltalake'][f'{q}_ms']:.2f} | "
            f"{a[f'{q}_ratio']:.1f}x | >= {a['target']:.0f}x | {yes_no(a[f'met_{q}'])} |"
        )
    lines += [
        f"| mean | {a['carbonlite']['mean_ms']:.2f} | {a['deltalake']['mean_ms']:.2f} | "
        f"{a['deltalake']['mean_ms'] / a['carbonlite']['mean_ms']:.1f}x | | |",
        f"| max | {a['carbonlite']['max_ms']:.2f} | {a['deltalake']['max_ms']:.2f} | | | |",
        "",
        f"Context, CarbonLite with fsync disabled (deltalake does not sync on local disk): "
        f"p50 {a['carbonlite_no_fsync']['p50_ms']:.2f} ms ({a['no_fsync_p50_ratio']:.1f}x), "
        f"p99 {a['carbonlite_no_fsync']['p99_ms']:.2f} ms ({a['no_fsync_p99_ratio']:.1f}x).",
        "",
        f"{a['carbonlite_checkpoint_commits']} of our timed commits wrote a checkpoint "
        f"({', '.join(f'{t:.1f}' for t in a['carbonlite_checkpoint_commit_ms'])} ms); "
        f"without them p99 = {a['carbonlite_without_checkpoint_commits']['p99_ms']:.2f} ms.",
        "",
        f"**b. One {b['rows']:,}-row append** ({b['arrow_bytes'] / MB:.0f} MB of Arrow data, "
        "best of runs):",
        "",
        "| | CarbonLite append | pq.write_table zstd | ours / Parquet | target | met |",
        "|---|---:|---:|---:|---:|---|",
        f"| MB/s | {b['carbonlite_mb_s']:.0f} | {b['parquet_mb_s']:.0f} | {b['ratio']:.2f}x | "
        f">= {b['target']:.1f}x | {yes_no(b['met'])} |",
        "",
        f"Parquet with an fsync added: {b['parquet_fsync_mb_s']:.0f} MB/s. Bytes written: ours "
        f"{b['bytes_written']['carbonlite'] / MB:.1f} MB ({b['blocklets']} blocklets), "
        f"Parquet {b['bytes_written']['parquet'] / MB:.1f} MB.",
        "",
        f"**c. 1% range filter on ts** ({c['rows_matching']:,} rows); Parquet: "
        f"{c['parquet_layout']}:",
        "",
        "| | median ms | best ms | bytes read (MB) | units read |",
        "|---|---:|---:|---:|---|",
    ]
    ours_read, theirs_read = c["carbonlite_read"], c["parquet_read"]
    small_read = c["parquet_64k_row_groups_read"]
    reads = {
        "carbonlite": (
            ours_read["bytes_selected"],
            f"{ours_read['blocklets_selected']}/{ours_read['blocklets_total']} blocklets",
        ),
        "carbonlite_with_open": (ours_read["bytes_selected"], "same, open_table included"),
        "parquet": (
            theirs_read["bytes_selected"],
            f"{theirs_read['row_groups_selected']}/{theirs_read['row_groups_total']} row groups",
        ),
        "parquet_64k_row_groups": (
            small_read["bytes_selected"],
            f"{small_read['row_groups_selected']}/{small_read['row_groups_total']} row groups "
            "(context)",
        ),
    }
    for name, (nbytes, units) in reads.items():
        s = c["seconds"][name]
        lines.append(
            f"| {name} | {s['median_s'] * 1000:.1f} | {s['best_s'] * 1000:.1f} | "
            f"{nbytes / MB:.2f} | {units} |"
        )
    lines += [
        "",
        f"Parquet / ours (median): {c['speedup_median']:.1f}x; target >= "
        f"{c['target']:.0f}x: {yes_no(c['met'])}.",
        "",
        f"**d. Opening** (`open_table(path).version`, median of runs; 1-row appends, "
        f"checkpoint interval {d['checkpoint_interval']}):",
        "",
        "| commits | blocklets | checkpoint | versions replayed | checkpoint KB | "
        "open ms | of which checkpoint read ms |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for o in sorted(
        d["at_checkpoint"] + d["interval_minus_one_past_checkpoint"], key=lambda o: o["version"]
    ):
        lines.append(
            f"| {o['version']:,} | {o['blocklets']:,} | {o['checkpoint_version']} | "
            f"{o['replayed_versions']} | {o['checkpoint_bytes'] / 1000:.0f} | "
            f"{o['open_ms']:.1f} | {o['checkpoint_read_ms']:.1f} |"
        )
    lines += [
        "",
        "Checkpoint cost by table state:",
        "",
        "| blocklets | checkpoint KB | write ms | encode ms | decode ms |",
        "|---:|---:|---:|---:|---:|",
    ]
    for ck in d["checkpoint_cost"]:
        lines.append(
            f"| {ck['blocklets']:,} | {ck['checkpoint_bytes'] / 1000:.0f} | "
            f"{ck['write_ms']:.1f} | {ck['encode_ms']:.1f} | {ck['decode_ms']:.1f} |"
        )
    lines += [
        "",
        f"**e. Checkpoint interval** ({e['rows_per_append']:,}-row appends, tables built side "
        "by side; open = worst case, interval-1 versions past a checkpoint):",
        "",
        "| interval | commits | p50 ms | p99 ms | mean ms | p99 vs never | checkpoint commits | "
        "median checkpoint commit ms | checkpoint write ms | amortized ms/commit | "
        "worst open ms | of which checkpoint read ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in e["intervals"]:
        lat, op = r["latency"], r["worst_open"]
        ck = r["checkpoint_commit_median_ms"]
        lines.append(
            f"| {r['interval']} | {r['commits']:,} | {lat['p50_ms']:.2f} | {lat['p99_ms']:.2f} | "
            f"{lat['mean_ms']:.2f} | {r['p99_vs_never']:.2f}x | {r['checkpoint_commits']} | "
            f"{'-' if ck is None else f'{ck:.1f}'} | {r['checkpoint_write_ms']:.1f} | "
            f"{r['amortized_checkpoint_ms_per_commit']:.2f} | {op['open_ms']:.1f} | "
            f"{op['checkpoint_read_ms']:.1f} |"
        )
    return "\n".join(lines)


def environment(cfg: Config, quick: bool) -> dict[str, Any]:
    return {
        "quick": quick,
        "config": asdict(cfg),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "deltalake": deltalake.__version__,
        "carbonlite": carbonlite.__version__,
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_average_at_start": os.getloadavg(),
    }


def run(cfg: Config, quick: bool) -> dict[str, Any]:
    results: dict[str, Any] = {"environment": environment(cfg, quick)}
    with tempfile.TemporaryDirectory(prefix="carbonlite-bench-table-") as tmp_dir:
        tmp = Path(tmp_dir)
        results["commit_latency"] = bench_commit_latency(cfg, tmp)
        data = event_table(cfg.big_rows)
        results["append_throughput"], table = bench_append_throughput(cfg, data, tmp)
        results["range_filter"] = bench_range_filter(cfg, data, table, tmp / "big.parquet", tmp)
        del data, table
        results["open"] = bench_open(cfg, tmp)
        results["checkpoint_interval"] = bench_intervals(cfg, tmp)
    results["environment"]["load_average_at_end"] = os.getloadavg()
    if not math.isfinite(results["commit_latency"]["p50_ratio"]):
        raise AssertionError("commit latency ratio is not finite")
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a much smaller smoke-test run")
    parser.add_argument("--output", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    output = args.output or RESULTS_DIR / ("table-quick.json" if args.quick else "table.json")
    results = run(cfg, args.quick)
    print(markdown(results))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {output}")


if __name__ == "__main__":
    main()
