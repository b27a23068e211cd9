"""Benchmark the Spark data source against Spark's built-in Parquet, in one SparkSession.

    python benchmarks/bench_spark.py [--quick] [--rows N] [--repeat R] [--output PATH]

The machine this runs on is small (2 cores) and shared, so the compared cases run in the same
session, one after the other and interleaved (A B B A ...), after a warm-up that pays for the
JVM, the Python workers and Spark's code generation; each figure is the best of the repeats,
with every repeat recorded.

What is measured:

a. streaming ingestion: ``benchmarks/datagen.py:event_table(rows)`` (id int64, ts
   timestamp[us], user int32, kind string of 8 values, value float64, agent 40-byte string)
   written as ``--files`` Parquet files, read with ``spark.readStream.schema(...)
   .option("maxFilesPerTrigger", 1).parquet(dir)`` and written with
   ``trigger(availableNow=True)`` into (1) Spark's built-in Parquet file sink and (2) a new
   CarbonLite table (``format("carbonlite")``), each to a fresh directory and checkpoint.
   Rows per second from ``start()`` to the end of ``awaitTermination()``, and Spark's
   per-batch ``durationMs`` breakdown summed over the batches. For context, (3) CarbonLite
   with ``property.stream_codec=zstd`` (streaming pages in zstd level 1, as handoff writes
   them; the default before lz4), (4) a Python
   streaming sink that drops every Arrow batch it gets, which measures what Spark's hand-off
   to a Python data source costs by itself; and one more CarbonLite stream runs under py-spy
   (``--no-profile`` skips it) to show how the writer task's time splits between waiting
   for Spark's next Arrow batch and CarbonLite's own work (and how much of the encoding is
   compression).
b. a 1% range filter on the sorted ``ts`` column (50,000 of 5,000,000 rows, mid-day):
   ``spark.read.format("carbonlite").option("filterPushdown", "true").load(table).where(f)`` vs
   ``spark.read.parquet(dir).where(f)`` on the same rows as Parquet (the source files, and
   the files Spark's sink wrote in a.), every column materialized with the ``noop`` sink.

Results are printed as markdown and written to ``benchmarks/results/spark.json``
(``spark-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from datagen import event_table
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

import carbonlite
from carbonlite import open_table

RESULTS_DIR = Path(__file__).resolve().parent / "results"
STREAM_TARGET = 1.0  # carbonlite rows/s over the built-in Parquet sink's
FILTER_TARGET = 1.0  # Parquet read time over carbonlite's
SCHEMA_DDL = "id long, ts timestamp_ntz, user int, kind string, value double, agent string"
DAY_START = datetime.datetime(2026, 1, 1)
DURATION_KEYS = (
    "latestOffset",
    "getBatch",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)


class NullArrowWriter(DataSourceStreamArrowWriter):
    """Receives Spark's Arrow batches and drops them: the cost of the hand-off alone."""

    def write(self, iterator: Any) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: list[Any], batchId: int) -> None:
        pass

    def abort(self, messages: list[Any], batchId: int) -> None:
        pass


class NullArrowSink(DataSource):
    """``format("python_noop")``: a Python streaming sink that does nothing (for context)."""

    @classmethod
    def name(cls) -> str:
        return "python_noop"

    def streamWriter(self, schema: Any, overwrite: bool) -> NullArrowWriter:
        return NullArrowWriter()


SERIES: dict[str, tuple[str, dict[str, str]]] = {
    "parquet": ("parquet", {}),
    "carbonlite": ("carbonlite", {"sortColumns": "ts"}),
    "carbonlite_zstd": ("carbonlite", {"sortColumns": "ts", "property.stream_codec": "zstd"}),
    "python_noop": ("python_noop", {}),
}
"""Each series: the format and its options. ``carbonlite`` (default table properties) is the
one the target is about; ``carbonlite_zstd`` (streaming pages in zstd, the default before
lz4) and ``python_noop`` are context."""
SINKS = tuple(SERIES)


def write_source(directory: Path, rows: int, files: int) -> None:
    """``files`` Parquet files of ``event_table(rows)`` in id order, with rising mtimes."""
    marker = directory / "_COMPLETE"
    if marker.exists():
        return
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    table = event_table(rows)
    per_file = -(-rows // files)
    base = time.time() - 100_000
    for i in range(files):
        path = directory / f"events-{i:03d}.parquet"
        pq.write_table(table.slice(i * per_file, per_file), path)
        os.utime(path, (base + i * 10, base + i * 10))
    marker.write_text(json.dumps({"rows": rows, "files": files}))


def spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Python workers import this module when it is not __main__ (for NullArrowSink).
    here = str(Path(__file__).resolve().parent)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if here not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [here, *paths] if p)
    import carbonlite.spark

    spark = carbonlite.spark.local_session(
        app_name="carbonlite-bench-spark", config={"spark.driver.memory": "2g"}
    )
    spark.dataSource.register(NullArrowSink)
    return spark


def run_stream(spark: Any, source: Path, sink: str, out: Path, checkpoint: Path) -> dict[str, Any]:
    """One ``availableNow`` stream of ``source`` into series ``sink``; timings and Spark's
    breakdown."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(checkpoint, ignore_errors=True)
    stream = (
        spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).parquet(str(source))
    )
    fmt, options = SERIES[sink]
    writer = stream.writeStream.format(fmt).option("checkpointLocation", str(checkpoint))
    for key, value in options.items():
        writer = writer.option(key, value)
    start = time.perf_counter()
    query = writer.trigger(availableNow=True).start(str(out))
    query.awaitTermination()
    seconds = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(f"the {sink} stream failed: {query.exception()}")
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in batches)
    breakdown = {k: sum(p["durationMs"].get(k, 0) for p in batches) for k in DURATION_KEYS}
    return {
        "sink": sink,
        "seconds": seconds,
        "rows": rows,
        "rows_per_s": rows / seconds,
        "batches": len(batches),
        "duration_ms": breakdown,
        "batch_ms": [p["durationMs"]["triggerExecution"] for p in batches],
    }


def output_rows(spark: Any, sink: str, out: Path, rows: int) -> int:
    if SERIES[sink][0] == "carbonlite":
        return open_table(str(out)).count_rows()
    if sink == "python_noop":
        return rows  # writes nothing
    return sum(pq.ParquetFile(p).metadata.num_rows for p in out.glob("*.parquet"))


def bench_stream(spark: Any, source: Path, work: Path, rows: int, repeat: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {sink: [] for sink in SINKS}
    orders = []
    for r in range(repeat):
        order = list(SINKS[r % len(SINKS) :] + SINKS[: r % len(SINKS)])
        if r % 2:
            order.reverse()
        orders.append(order)
        for sink in order:
            out, ck = work / f"stream-{sink}", work / f"ck-{sink}"
            result = run_stream(spark, source, sink, out, ck)
            written = output_rows(spark, sink, out, rows)
            if result["rows"] != rows or written != rows:
                raise RuntimeError(
                    f"{sink}: read {result['rows']}, wrote {written}, expected {rows}"
                )
            if SERIES[sink][0] == "carbonlite":
                t = open_table(str(out))
                result["commits"] = t.version
                result["table_bytes"] = sum(seg.num_bytes for seg in t.snapshot().live_segments())
            runs[sink].append(result)
            print(
                f"  stream into {sink:<16} run {r + 1}: {result['seconds']:6.1f} s "
                f"{result['rows_per_s']:>10,.0f} rows/s ({result['batches']} batches)",
                flush=True,
            )
    best = {sink: max(rs, key=lambda x: x["rows_per_s"]) for sink, rs in runs.items()}
    ratio = best["carbonlite"]["rows_per_s"] / best["parquet"]["rows_per_s"]
    per_run = [
        c["rows_per_s"] / p["rows_per_s"]
        for c, p in zip(runs["carbonlite"], runs["parquet"], strict=True)
    ]
    # CarbonLite's own cost over the floor of any Python sink, repeat by repeat
    over_noop = [
        c["rows_per_s"] / n["rows_per_s"]
        for c, n in zip(runs["carbonlite"], runs["python_noop"], strict=True)
    ]
    return {
        "runs": runs,
        "orders": orders,
        "best": best,
        "ratio": ratio,
        "ratio_per_repeat": per_run,
        "noop_ratio_per_repeat": [
            n["rows_per_s"] / p["rows_per_s"]
            for n, p in zip(runs["python_noop"], runs["parquet"], strict=True)
        ],
        "carbonlite_over_noop_per_repeat": over_noop,
        "noop_ratio": best["python_noop"]["rows_per_s"] / best["parquet"]["rows_per_s"],
        "zstd_ratio": best["carbonlite_zstd"]["rows_per_s"] / best["parquet"]["rows_per_s"],
        "target": STREAM_TARGET,
        "met": ratio >= STREAM_TARGET,
    }


def _compress_frames() -> tuple[str, ...]:
    """How py-spy names the lines of ``encode_page`` that call a compressor."""
    import inspect

    from carbonlite.format import pages

    lines, first = inspect.getsourcelines(pages.encode_page)
    found = [first + i for i, text in enumerate(lines) if ".compress(" in text]
    return tuple(f"encode_page (carbonlite/format/pages.py:{line})" for line in found)


def profile_stream(spark: Any, source: Path, work: Path) -> dict[str, Any]:
    """One more carbonlite stream under py-spy (all of this process's descendants, idle
    threads included): where the Python writer's time goes."""
    exe = shutil.which("py-spy")
    if exe is None:
        return {"skipped": "py-spy is not installed (pip install py-spy)"}
    raw = work / "stream.pyspy"
    rate = 50
    spy = subprocess.Popen(
        [
            exe,
            "record",
            "--subprocesses",
            "--idle",
            "--nonblocking",
            "-r",
            str(rate),
            "-f",
            "raw",
            "-o",
            str(raw),
            "-p",
            str(os.getpid()),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(2)
    result = run_stream(spark, source, "carbonlite", work / "stream-profiled", work / "ck-profiled")
    spy.send_signal(signal.SIGINT)
    spy.wait(120)
    compress_frames = _compress_frames()
    samples: dict[str, int] = {
        "writer_total": 0,
        "writer_waiting_for_spark": 0,
        "encoding_threads": 0,
    }
    writer_leaves: dict[str, int] = {}
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, count = line.rsplit(" ", 1)
        n = int(count)
        if "write_task (" in stack:
            samples["writer_total"] += n
            leaf = stack.rsplit(";", 1)[-1]
            if "load_stream" in leaf or "RecordBatchStreamReader" in leaf or "readinto" in leaf:
                samples["writer_waiting_for_spark"] += n
            writer_leaves[leaf] = writer_leaves.get(leaf, 0) + n
        elif "encode_blocklet" in stack:
            samples["encoding_threads"] += n
            if any(frame in stack for frame in compress_frames):
                samples["compression"] = samples.get("compression", 0) + n
    top = sorted(writer_leaves.items(), key=lambda kv: -kv[1])[:8]
    return {
        "stream_seconds": result["seconds"],
        "rows_per_s": result["rows_per_s"],
        "duration_ms": result["duration_ms"],
        "sample_rate_hz": rate,
        "samples": samples,
        "writer_seconds": samples["writer_total"] / rate,
        "writer_waiting_share": samples["writer_waiting_for_spark"]
        / max(1, samples["writer_total"]),
        "encoding_thread_seconds": samples["encoding_threads"] / rate,
        "compression_share_of_encoding": samples.get("compression", 0)
        / max(1, samples["encoding_threads"]),
        "writer_top_frames": top,
    }


def noop(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


def time_calls(calls: dict[str, Callable[[], None]], repeat: int) -> dict[str, list[float]]:
    """Each call ``repeat`` times, interleaved, rotating the order."""
    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeat):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - start)
    return times


def bench_filter(
    spark: Any, source: Path, table: Path, sink_parquet: Path, rows: int, repeat: int
) -> dict[str, Any]:
    low = DAY_START + datetime.timedelta(hours=12)
    high = low + datetime.timedelta(seconds=round(86_400 * 0.01))
    where = f"ts >= timestamp_ntz'{low:%Y-%m-%d %H:%M:%S}' AND ts < timestamp_ntz'{high:%Y-%m-%d %H:%M:%S}'"

    def ours() -> Any:
        return (
            spark.read.format("carbonlite")
            .option("filterPushdown", "true")
            .load(str(table))
            .where(where)
        )

    def source_parquet() -> Any:
        return spark.read.schema(SCHEMA_DDL).parquet(str(source)).where(where)

    def spark_parquet() -> Any:
        return spark.read.schema(SCHEMA_DDL).parquet(str(sink_parquet)).where(where)

    frames = {
        "carbonlite": ours,
        "parquet (source files)": source_parquet,
        "parquet (Spark sink)": spark_parquet,
    }
    counts = {name: make().count() for name, make in frames.items()}
    ids = {
        name: sorted(make().select("id").toArrow().column("id").to_pylist())
        for name, make in frames.items()
    }
    if len({tuple(v) for v in ids.values()}) != 1:
        raise RuntimeError(f"the three reads returned different rows: {counts}")
    plan_text = str(ours()._jdf.queryExecution().optimizedPlan().toString())
    plan = open_table(str(table)).plan_splits(
        filter=(pc.field("ts") >= pa.scalar(low, pa.timestamp("us")))
        & (pc.field("ts") < pa.scalar(high, pa.timestamp("us")))
    )
    for make in frames.values():  # warm each path once more before timing
        noop(make())
    times = time_calls({name: (lambda m=make: noop(m())) for name, make in frames.items()}, repeat)
    medians = {name: statistics.median(t) for name, t in times.items()}
    best = {name: min(t) for name, t in times.items()}
    baseline = min(medians[n] for n in frames if n != "carbonlite")
    return {
        "where": where,
        "rows_selected": counts["carbonlite"],
        "fraction": counts["carbonlite"] / rows,
        "filter_pushed": "Filter" not in plan_text,
        "blocklets_selected": plan.blocklets_selected,
        "blocklets_total": plan.blocklets_total,
        "bytes_selected": plan.bytes_selected,
        "bytes_total": plan.bytes_total,
        "parquet_row_groups": {
            "source files": _row_groups(source, low, high),
            "Spark sink": _row_groups(sink_parquet, low, high),
        },
        "seconds": times,
        "median_s": medians,
        "best_s": best,
        "speedup_vs_source_parquet": medians["parquet (source files)"] / medians["carbonlite"],
        "speedup_vs_spark_parquet": medians["parquet (Spark sink)"] / medians["carbonlite"],
        "speedup": baseline / medians["carbonlite"],
        "target": FILTER_TARGET,
        "met": baseline / medians["carbonlite"] > FILTER_TARGET,
    }


def _row_groups(directory: Path, low: datetime.datetime, high: datetime.datetime) -> dict[str, int]:
    """Row groups of the Parquet files in ``directory``, and how many overlap [low, high)."""
    total = overlapping = 0
    lo, hi = pa.scalar(low, pa.timestamp("us")).value, pa.scalar(high, pa.timestamp("us")).value
    for path in sorted(directory.glob("*.parquet")):
        meta = pq.ParquetFile(path).metadata
        column = meta.schema.names.index("ts")
        for g in range(meta.num_row_groups):
            total += 1
            stats = meta.row_group(g).column(column).statistics
            mn, mx = _micros(stats.min), _micros(stats.max)
            if mx >= lo and mn < hi:
                overlapping += 1
    return {"total": total, "overlapping": overlapping}


def _micros(value: Any) -> int:
    if isinstance(value, datetime.datetime):
        return pa.scalar(value.replace(tzinfo=None), pa.timestamp("us")).value
    return int(value)


def warm_up(spark: Any, work: Path) -> float:
    """A tiny stream into both sinks and a filtered read of both, before anything is timed."""
    start = time.perf_counter()
    source = work / "warmup-source"
    write_source(source, 20_000, 2)
    for sink in SINKS:
        run_stream(spark, source, sink, work / f"warmup-{sink}", work / f"warmup-ck-{sink}")
    warm = spark.read.format("carbonlite").option("filterPushdown", "true")
    noop(warm.load(str(work / "warmup-carbonlite")).where("id > 5"))
    noop(spark.read.schema(SCHEMA_DDL).parquet(str(source)).where("id > 5"))
    return time.perf_counter() - start


def environment(args: argparse.Namespace) -> dict[str, Any]:
    import pyspark

    return {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "pyarrow": pa.__version__,
        "carbonlite": carbonlite.__version__,
        "cpus": os.cpu_count(),
        "master": "local[2]",
        "rows": args.rows,
        "files": args.files,
        "repeat": args.repeat,
        "load_average_at_start": os.getloadavg(),
    }


def markdown(results: dict[str, Any]) -> str:
    env, s, f = results["environment"], results["stream"], results["range_filter"]
    bp, bc = s["best"]["parquet"], s["best"]["carbonlite"]
    lines = [
        f"## Spark: {env['rows']:,} rows, {env['files']} files, {env['master']}, "
        f"load {env['load_average_at_start'][0]:.1f} -> {env['load_average_at_end'][0]:.1f}",
        "",
        "### a. Streaming ingestion (availableNow, maxFilesPerTrigger=1)",
        "",
        "| sink | best s | rows/s | batches | all runs rows/s |",
        "|---|---:|---:|---:|---|",
    ]
    bn, bz = s["best"]["python_noop"], s["best"]["carbonlite_zstd"]
    named = (
        ("Spark parquet sink", bp),
        ("carbonlite", bc),
        ("carbonlite, stream_codec=zstd", bz),
        ("Python no-op sink", bn),
    )
    for name, best in named:
        runs = ", ".join(f"{r['rows_per_s']:,.0f}" for r in s["runs"][best["sink"]])
        lines.append(
            f"| {name} | {best['seconds']:.1f} | {best['rows_per_s']:,.0f} | {best['batches']} | {runs} |"
        )
    lines += [
        "",
        f"carbonlite / parquet: **{s['ratio']:.2f}x** (per repeat: "
        + ", ".join(f"{r:.2f}x" for r in s["ratio_per_repeat"])
        + f"); target >= {s['target']:.1f}x: **{'met' if s['met'] else 'not met'}**. "
        f"Context: carbonlite with zstd streaming pages {s['zstd_ratio']:.2f}x; a Python sink that "
        f"drops Spark's Arrow batches {s['noop_ratio']:.2f}x (per repeat: "
        + ", ".join(f"{r:.2f}x" for r in s["noop_ratio_per_repeat"])
        + "); carbonlite / that no-op sink per repeat: "
        + ", ".join(f"{r:.2f}x" for r in s["carbonlite_over_noop_per_repeat"])
        + " (what CarbonLite itself costs over the floor of any Python sink).",
        "",
        "Spark's durationMs summed over the batches of the best run (ms):",
        "",
        "| sink | " + " | ".join(DURATION_KEYS) + " |",
        "|---|" + "---:|" * len(DURATION_KEYS),
    ]
    for name, best in (
        ("parquet", bp),
        ("carbonlite", bc),
        ("carbonlite_zstd", bz),
        ("python_noop", bn),
    ):
        lines.append(
            f"| {name} | " + " | ".join(str(best["duration_ms"][k]) for k in DURATION_KEYS) + " |"
        )
    prof = results.get("profile")
    if prof and "samples" in prof:
        lines += [
            "",
            f"py-spy over one more carbonlite stream ({prof['stream_seconds']:.1f} s): the writer task "
            f"ran {prof['writer_seconds']:.1f} s, {prof['writer_waiting_share']:.0%} of it waiting for "
            f"Spark's next Arrow batch; blocklet encoding threads {prof['encoding_thread_seconds']:.1f} s, "
            f"{prof['compression_share_of_encoding']:.0%} of it compressing pages.",
        ]
    lines += [
        "",
        "### b. 1% range filter on ts (noop sink, every column)",
        "",
        f"`{f['where']}`: {f['rows_selected']:,} rows ({f['fraction']:.2%}); pushed to carbonlite: "
        f"{f['filter_pushed']}; blocklets read {f['blocklets_selected']} of {f['blocklets_total']}",
        "",
        "| read | median s | best s |",
        "|---|---:|---:|",
    ]
    for name in f["median_s"]:
        lines.append(f"| {name} | {f['median_s'][name]:.3f} | {f['best_s'][name]:.3f} |")
    lines += [
        "",
        f"carbonlite is {f['speedup_vs_source_parquet']:.2f}x the speed of the source Parquet files and "
        f"{f['speedup_vs_spark_parquet']:.2f}x that of the Parquet Spark wrote; target faster than "
        f"both: **{'met' if f['met'] else 'not met'}**",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each stream")
    parser.add_argument("--read-repeat", type=int, default=7, help="runs of each filtered read")
    parser.add_argument("--quick", action="store_true", help="200,000 rows, a smoke test")
    parser.add_argument(
        "--no-profile", action="store_true", help="skip the py-spy run of the carbonlite stream"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "carbonlite-bench-spark",
        help="where the source files are kept between runs",
    )
    parser.add_argument("--output", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.repeat, args.read_repeat = 200_000, 1, 3
    output = args.output or RESULTS_DIR / ("spark-quick.json" if args.quick else "spark.json")

    results: dict[str, Any] = {"environment": environment(args)}
    source = args.data_dir / f"events-{args.rows}-{args.files}"
    print(f"source files: {source}", flush=True)
    write_source(source, args.rows, args.files)
    work = Path(tempfile.mkdtemp(prefix="carbonlite-bench-spark-"))
    spark = spark_session()
    try:
        results["environment"]["warm_up_s"] = warm_up(spark, work)
        results["stream"] = bench_stream(spark, source, work, args.rows, args.repeat)
        if not args.no_profile:
            results["profile"] = profile_stream(spark, source, work)
        results["range_filter"] = bench_filter(
            spark,
            source,
            work / "stream-carbonlite",
            work / "stream-parquet",
            args.rows,
            args.read_repeat,
        )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    results["environment"]["load_average_at_end"] = os.getloadavg()
    print(markdown(results))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\nwritten to {output}")


if __name__ == "__main__":
    main()
