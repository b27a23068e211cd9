"""Benchmark handoff (streaming segment -> sorted columnar segment) against baselines measured
in the same run.

    python benchmarks/bench_compaction.py [--quick] [--output PATH]

The machine this runs on is small (2 cores) and shared, so every comparison is a ratio against
a baseline timed in the same run, the two sides interleaved (A, B, A, B, ...) so that a noisy
minute disturbs both alike; throughputs are best-of-N with the median beside them, and CPU
time (all threads of the process) is recorded as a second opinion that moves less with load.

Data: ``event_table(5_000_000)`` with its rows shuffled (so ``ts``, the sort column, arrives
in random order), streamed as 1,000 appends of 5,000 rows, then ``finish_streaming``.

a. handoff: ``table.handoff()`` (untimed: a fresh copy of the streamed table for every run)
   vs rewriting the same rows as one sorted Parquet file with pyarrow: the 1,000 appends were
   also written beforehand as 1,000 Parquet files (what a Spark parquet sink leaves behind);
   timed is ``pyarrow.dataset.dataset(dir).to_table()``, ``sort_by("ts")`` and
   ``pq.write_table(..., compression="zstd")``. MB/s of the rows' Arrow size (``nbytes``).
   Target: >= 1.0x.
b. a 1% range filter on ``ts`` after the handoff: ``table.to_arrow(filter=...)`` vs
   ``pyarrow.dataset.dataset(dir_of_1000_parquet_files).to_table(filter=...)``. Target: >= 5x.
   Both results are checked to hold the same rows.
c. ``handoff_blocklet_rows`` 65,536 / 131,072 / 262,144 / 524,288: one streamed table per
   value (the property is set at creation); per value the handoff MB/s, the 1% filter time,
   blocklets selected / total, and a full scan (``to_arrow()``).

Prints markdown; writes JSON to ``benchmarks/results/compaction.json``
(``compaction-quick.json`` with ``--quick``, a small smoke-test run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from datagen import event_table
from report import progress

import carbonlite
from carbonlite import Table, create_table, open_table
from carbonlite.properties import PROPERTIES

MB = 1_000_000
RESULTS_DIR = Path(__file__).resolve().parent / "results"
HANDOFF_TARGET = 1.0
FILTER_TARGET = 5.0
DEFAULT_BLOCKLET_ROWS = int(PROPERTIES["handoff_blocklet_rows"].default)


@dataclass(frozen=True, slots=True)
class Config:
    rows: int
    appends: int
    repeat: int
    """a, c: handoff runs per case."""
    filter_repeat: int
    """b, c: filter runs per case."""
    scan_repeat: int
    blocklet_rows: tuple[int, ...]
    filter_fraction: float


FULL = Config(
    rows=5_000_000,
    appends=1_000,
    repeat=3,
    filter_repeat=7,
    scan_repeat=3,
    blocklet_rows=(65_536, 131_072, 262_144, 524_288),
    filter_fraction=0.01,
)
QUICK = Config(
    rows=200_000,
    appends=100,
    repeat=2,
    filter_repeat=3,
    scan_repeat=2,
    blocklet_rows=(8_192, 16_384, 32_768),
    filter_fraction=0.01,
)


@dataclass(frozen=True, slots=True)
class Runs:
    """Several runs of one case: wall and CPU seconds, best and median."""

    best_s: float
    median_s: float
    cpu_best_s: float
    runs: int


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def runs_of(samples: list[tuple[float, float]]) -> Runs:
    walls = [w for w, _ in samples]
    return Runs(min(walls), statistics.median(walls), min(c for _, c in samples), len(samples))


# --- the data ------------------------------------------------------------------------------


def shuffled_events(rows: int) -> pa.Table:
    table = event_table(rows)
    order = np.random.default_rng(20261122).permutation(rows)
    return table.take(pa.array(order)).combine_chunks()


def appends_of(table: pa.Table, appends: int) -> list[pa.Table]:
    per = table.num_rows // appends
    return [table.slice(i * per, per if i < appends - 1 else None) for i in range(appends)]


def write_parquet_dir(parts: list[pa.Table], directory: Path) -> None:
    directory.mkdir(parents=True)
    for i, part in enumerate(parts):
        pq.write_table(part, directory / f"part-{i:05d}.parquet", compression="zstd")


def streamed_table(path: Path, parts: list[pa.Table], blocklet_rows: int) -> float:
    """Stream ``parts`` into a new table, one append each, and close the segment; seconds."""
    started = time.perf_counter()
    t = create_table(
        path,
        parts[0].schema,
        sort_columns=["ts"],
        properties={"handoff_blocklet_rows": str(blocklet_rows)},
    )
    for part in parts:
        t.append(part)
    assert t.finish_streaming() is not None
    segments = [s for s in t.segments() if s.status == "STREAMING_FINISH"]
    assert len(segments) == 1, "the stream should fit one segment"
    return time.perf_counter() - started


def range_filter(table: pa.Table, fraction: float) -> pc.Expression:
    ts = table["ts"].cast(pa.int64())
    lo, hi = pc.min(ts).as_py(), pc.max(ts).as_py()
    start = lo + int((hi - lo) * 0.45)
    stop = start + int((hi - lo) * fraction)
    unit = table.schema.field("ts").type
    return (pc.field("ts") >= pa.scalar(start, unit)) & (pc.field("ts") < pa.scalar(stop, unit))


# --- the cases -----------------------------------------------------------------------------


def bench(cfg: Config, work: Path) -> dict[str, Any]:
    progress(f"generating {cfg.rows:,} shuffled rows")
    data = shuffled_events(cfg.rows)
    nbytes = data.nbytes
    parts = appends_of(data, cfg.appends)
    where = range_filter(data, cfg.filter_fraction)
    wanted_rows = data.filter(where).num_rows
    progress(f"{nbytes / MB:.1f} MB of Arrow data; {wanted_rows:,} rows in the filter range")

    pq_dir = work / "parquet-appends"
    progress(f"writing {cfg.appends:,} Parquet files")
    write_parquet_dir(parts, pq_dir)
    pq_bytes = sum(f.stat().st_size for f in pq_dir.iterdir())

    bases: dict[int, Path] = {}
    streaming_seconds: dict[int, float] = {}
    for rows in cfg.blocklet_rows:
        progress(f"streaming {cfg.appends:,} appends into a table (handoff_blocklet_rows={rows:,})")
        bases[rows] = work / f"streamed-{rows}"
        streaming_seconds[rows] = streamed_table(bases[rows], parts, rows)
    stream_bytes = sum(
        f.stat().st_size for f in (bases[cfg.blocklet_rows[0]] / "segments").rglob("*.cblt")
    )
    del data

    # a + c: handoff of a fresh copy per run, every blocklet size and the baseline interleaved.
    handoff: dict[int, list[tuple[float, float]]] = {rows: [] for rows in cfg.blocklet_rows}
    baseline: list[tuple[float, float]] = []
    handed: dict[int, Path] = {}
    out_file = work / "sorted.parquet"

    def rewrite_with_pyarrow() -> None:
        rows = ds.dataset(pq_dir, format="parquet").to_table()
        pq.write_table(rows.sort_by("ts"), out_file, compression="zstd")

    for r in range(cfg.repeat):
        for rows in cfg.blocklet_rows:
            copy = work / f"handoff-{rows}-{r}"
            shutil.copytree(bases[rows], copy)
            t = open_table(copy)
            progress(f"handoff run {r + 1}/{cfg.repeat}, {rows:,} rows per blocklet")
            handoff[rows].append(timed(t.handoff))
            if rows in handed:
                shutil.rmtree(handed[rows])
            handed[rows] = copy
        if out_file.exists():
            out_file.unlink()
        progress(f"pyarrow rewrite run {r + 1}/{cfg.repeat}")
        baseline.append(timed(rewrite_with_pyarrow))
    sorted_parquet_bytes = out_file.stat().st_size

    # b + c: the 1% filter on each handed-off table, interleaved with the Parquet directory.
    tables: dict[int, Table] = {rows: open_table(path) for rows, path in handed.items()}
    theirs = ds.dataset(pq_dir, format="parquet").to_table(filter=where).column("id").to_numpy()
    assert len(theirs) == wanted_rows
    for rows, t in tables.items():  # every result holds the same rows as pyarrow's
        ours = t.to_arrow(filter=where).column("id").to_numpy()
        assert np.array_equal(np.sort(theirs), np.sort(ours)), f"filter results differ ({rows})"
        assert t.count_rows() == cfg.rows
    filtering: dict[int, list[tuple[float, float]]] = {rows: [] for rows in cfg.blocklet_rows}
    parquet_filter: list[tuple[float, float]] = []
    progress("timing the 1% filter")
    for _ in range(cfg.filter_repeat):
        for rows, t in tables.items():
            filtering[rows].append(timed(lambda t=t: t.to_arrow(filter=where)))
        parquet_filter.append(
            timed(lambda: ds.dataset(pq_dir, format="parquet").to_table(filter=where))
        )
    progress("timing full scans")
    scans: dict[int, list[tuple[float, float]]] = {rows: [] for rows in cfg.blocklet_rows}
    parquet_scan: list[tuple[float, float]] = []
    for _ in range(cfg.scan_repeat):
        for rows, t in tables.items():
            scans[rows].append(timed(lambda t=t: t.to_arrow()))
        parquet_scan.append(timed(lambda: ds.dataset(pq_dir, format="parquet").to_table()))

    sweep = []
    for rows in cfg.blocklet_rows:
        plan = tables[rows].plan_splits(filter=where)
        h, f, s = runs_of(handoff[rows]), runs_of(filtering[rows]), runs_of(scans[rows])
        segment = next(x for x in tables[rows].segments() if x.status == "SUCCESS")
        sweep.append(
            {
                "handoff_blocklet_rows": rows,
                "streaming_seconds": streaming_seconds[rows],
                "handoff": asdict(h),
                "handoff_mb_s": nbytes / MB / h.best_s,
                "handoff_mb_s_median": nbytes / MB / h.median_s,
                "handed_off_bytes": segment.bytes,
                "filter": asdict(f),
                "blocklets_selected": plan.blocklets_selected,
                "blocklets_total": plan.blocklets_total,
                "bytes_selected": plan.bytes_selected,
                "bytes_total": plan.bytes_total,
                "full_scan": asdict(s),
                "full_scan_mb_s": nbytes / MB / s.best_s,
            }
        )
    default = next(
        (x for x in sweep if x["handoff_blocklet_rows"] == DEFAULT_BLOCKLET_ROWS), sweep[-1]
    )
    base = runs_of(baseline)
    pf = runs_of(parquet_filter)
    ours_handoff = Runs(**default["handoff"])
    ours_filter = Runs(**default["filter"])
    return {
        "rows": cfg.rows,
        "appends": cfg.appends,
        "arrow_mb": nbytes / MB,
        "rows_in_filter": wanted_rows,
        "parquet_appends_bytes": pq_bytes,
        "stream_files_bytes": stream_bytes,
        "sorted_parquet_bytes": sorted_parquet_bytes,
        "default_blocklet_rows": default["handoff_blocklet_rows"],
        "handoff": {
            "ours": asdict(ours_handoff),
            "pyarrow_rewrite": asdict(base),
            "ours_mb_s": nbytes / MB / ours_handoff.best_s,
            "pyarrow_mb_s": nbytes / MB / base.best_s,
            "ratio": base.best_s / ours_handoff.best_s,
            "ratio_median": base.median_s / ours_handoff.median_s,
            "ratio_cpu": base.cpu_best_s / ours_handoff.cpu_best_s,
            "target": HANDOFF_TARGET,
            "met": base.best_s / ours_handoff.best_s >= HANDOFF_TARGET,
        },
        "filter": {
            "ours": asdict(ours_filter),
            "parquet_dataset": asdict(pf),
            "ratio": pf.best_s / ours_filter.best_s,
            "ratio_median": pf.median_s / ours_filter.median_s,
            "ratio_cpu": pf.cpu_best_s / max(ours_filter.cpu_best_s, 1e-9),
            "target": FILTER_TARGET,
            "met": pf.best_s / ours_filter.best_s >= FILTER_TARGET,
        },
        "parquet_full_scan": asdict(runs_of(parquet_scan)),
        "sweep": sweep,
        "recommended_blocklet_rows": recommend(sweep),
    }


def recommend(sweep: list[dict[str, Any]]) -> int:
    """The blocklet size whose filter time is best among those that hand off and scan within
    10% of the fastest (throughput first: handoff is what runs all day)."""
    best_handoff = max(x["handoff_mb_s"] for x in sweep)
    best_scan = max(x["full_scan_mb_s"] for x in sweep)
    fine = [
        x
        for x in sweep
        if x["handoff_mb_s"] >= 0.9 * best_handoff and x["full_scan_mb_s"] >= 0.9 * best_scan
    ] or sweep
    return min(fine, key=lambda x: x["filter"]["best_s"])["handoff_blocklet_rows"]


# --- report --------------------------------------------------------------------------------


def markdown(result: dict[str, Any]) -> str:
    env = result["environment"]
    h, f = result["handoff"], result["filter"]
    yes = lambda met: "yes" if met else "**no**"  # noqa: E731
    lines = [
        f"{env['cpus']} CPUs (shared); Python {env['python']}; pyarrow {env['pyarrow']}; "
        f"carbonlite {env['carbonlite']}; {env['date']}; load average {env['load_start']:.1f} "
        f"at start, {env['load_end']:.1f} at end.",
        "",
        f"Data: {result['rows']:,} event rows ({result['arrow_mb']:.1f} MB of Arrow data) in "
        f"random `ts` order, as {result['appends']:,} appends; stream files "
        f"{result['stream_files_bytes'] / MB:.1f} MB, the {result['appends']:,} Parquet files "
        f"{result['parquet_appends_bytes'] / MB:.1f} MB.",
        "",
        f"**a. Handoff** ({result['default_blocklet_rows']:,} rows per blocklet"
        f"{', the default' if result['default_blocklet_rows'] == DEFAULT_BLOCKLET_ROWS else ''}) vs "
        "pyarrow dataset read + `sort_by` + `pq.write_table` (zstd), best of "
        f"{h['ours']['runs']}:",
        "",
        "| | CarbonLite handoff | pyarrow rewrite | ratio | target | met |",
        "|---|---:|---:|---:|---:|---|",
        f"| best wall s | {h['ours']['best_s']:.2f} | {h['pyarrow_rewrite']['best_s']:.2f} | "
        f"{h['ratio']:.2f}x | >= {h['target']:.1f}x | {yes(h['met'])} |",
        f"| MB/s | {h['ours_mb_s']:.0f} | {h['pyarrow_mb_s']:.0f} | | | |",
        f"| median wall s | {h['ours']['median_s']:.2f} | {h['pyarrow_rewrite']['median_s']:.2f} "
        f"| {h['ratio_median']:.2f}x | | |",
        f"| CPU s | {h['ours']['cpu_best_s']:.2f} | {h['pyarrow_rewrite']['cpu_best_s']:.2f} | "
        f"{h['ratio_cpu']:.2f}x | | |",
        "",
        f"**b. 1% range filter on `ts`** ({result['rows_in_filter']:,} rows) after the handoff vs "
        f"`pyarrow.dataset` over the {result['appends']:,} Parquet files, best of "
        f"{f['ours']['runs']}:",
        "",
        "| | CarbonLite `to_arrow(filter=)` | pyarrow dataset | ratio | target | met |",
        "|---|---:|---:|---:|---:|---|",
        f"| best wall ms | {f['ours']['best_s'] * 1000:.1f} | "
        f"{f['parquet_dataset']['best_s'] * 1000:.1f} | {f['ratio']:.1f}x | >= "
        f"{f['target']:.0f}x | {yes(f['met'])} |",
        f"| median wall ms | {f['ours']['median_s'] * 1000:.1f} | "
        f"{f['parquet_dataset']['median_s'] * 1000:.1f} | {f['ratio_median']:.1f}x | | |",
        f"| CPU ms | {f['ours']['cpu_best_s'] * 1000:.1f} | "
        f"{f['parquet_dataset']['cpu_best_s'] * 1000:.1f} | {f['ratio_cpu']:.1f}x | | |",
        "",
        "**c. `handoff_blocklet_rows`** (one table per value; best of "
        f"{h['ours']['runs']} handoffs, {f['ours']['runs']} filters, "
        f"{result['sweep'][0]['full_scan']['runs']} scans):",
        "",
        "| rows per blocklet | handoff MB/s | handoff s | 1% filter ms | blocklets selected / "
        "total | bytes read by the filter | full scan ms | full scan MB/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for x in result["sweep"]:
        lines.append(
            f"| {x['handoff_blocklet_rows']:,} | {x['handoff_mb_s']:.0f} | "
            f"{x['handoff']['best_s']:.2f} | {x['filter']['best_s'] * 1000:.1f} | "
            f"{x['blocklets_selected']} / {x['blocklets_total']} | "
            f"{x['bytes_selected'] / MB:.1f} MB of {x['bytes_total'] / MB:.1f} MB | "
            f"{x['full_scan']['best_s'] * 1000:.0f} | {x['full_scan_mb_s']:.0f} |"
        )
    scan = result["parquet_full_scan"]
    lines += [
        "",
        f"For context, a full scan of the {result['appends']:,} Parquet files: "
        f"{scan['best_s'] * 1000:.0f} ms. "
        f"Rule-of-thumb pick (fastest filter among sizes within 10% of the best handoff and scan "
        f"throughput): {result['recommended_blocklet_rows']:,} rows per blocklet.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke-test run")
    parser.add_argument("--output", type=Path, default=None, help="where to write the JSON")
    args = parser.parse_args()
    cfg = QUICK if args.quick else FULL
    output = args.output or RESULTS_DIR / (
        "compaction-quick.json" if args.quick else "compaction.json"
    )
    load_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="carbonlite-bench-compaction-"))
    try:
        result = bench(cfg, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["environment"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "carbonlite": carbonlite.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_start": load_start,
        "load_end": os.getloadavg()[0],
        "config": asdict(cfg),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    progress(f"wrote {output}")


if __name__ == "__main__":
    main()
