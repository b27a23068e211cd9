"""Auto compaction of a partitioned Spark stream: files per partition and throughput.

    python benchmarks/bench_spark_partitioned.py [--batches 100] [--rows-per-batch 12]
        [--partitions 10] [--rounds 4] [--without-spark] [--output PATH]

Two streams read the same Parquet files (one file per micro-batch: ``maxFilesPerTrigger=1``,
``trigger(availableNow=True)``) into two new tables partitioned by ``part`` (``--partitions``
values, every batch touching each): ``plain`` with default properties, ``auto`` with
``property.auto_compaction=true`` (``compaction/auto.py``: default ``auto_compaction_min_files``
and ``compaction_level_threshold``). The files arrive in ``--rounds`` rounds; each round both
queries restart from their checkpoints and consume that round's files, in alternating order
(plain, auto; auto, plain; ...), so the machine's load falls on both alike. Reported: the
files per partition of each table's live segments after all batches, and rows per second of
each stream (every round's rows over every round's time, start() to the end of
awaitTermination()), with the auto/plain ratio per round and overall.

``--without-spark`` first times the same commits through the sinks' core path alone
(``plan_write``, one task's ``write_partitioned_part``, ``driver.commit_parts``), also
interleaved: milliseconds per commit with and without auto compaction, free of Spark's noise.

Written to ``benchmarks/results/spark-partitioned.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from carbonlite import open_table

RESULTS = Path(__file__).resolve().parent / "results" / "spark-partitioned.json"
DDL = "id long, part string, value double"
CASES: dict[str, dict[str, str]] = {
    "plain": {},
    "auto": {"property.auto_compaction": "true"},
}


def write_round(source: Path, first: int, files: int, rows: int, partitions: int) -> None:
    """``files`` more Parquet files of ``rows`` rows each, every partition in each file."""
    source.mkdir(parents=True, exist_ok=True)
    base = time.time() - 100_000
    for n in range(first, first + files):
        ids = list(range(n * rows, (n + 1) * rows))
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "part": [f"p{i % partitions:02d}" for i in ids],
                "value": [i * 0.5 for i in ids],
            }
        )
        path = source / f"batch-{n:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (base + n, base + n))


def run_round(spark: Any, source: Path, work: Path, case: str) -> tuple[float, int]:
    """Restart ``case``'s query on its checkpoint; (seconds, rows) of the files new to it."""
    writer = (
        spark.readStream.schema(DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.format("carbonlite")
        .option("checkpointLocation", str(work / f"ck-{case}"))
        .option("partitionBy", "part")
    )
    for key, value in CASES[case].items():
        writer = writer.option(key, value)
    start = time.perf_counter()
    query = writer.trigger(availableNow=True).start(str(work / case))
    query.awaitTermination()
    seconds = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(f"the {case} stream failed: {query.exception()}")
    return seconds, sum(p["numInputRows"] for p in query.recentProgress)


def files_per_partition(path: Path) -> dict[str, int]:
    snapshot = open_table(str(path)).snapshot()
    counts: Counter[str] = Counter()
    for seg in snapshot.live_segments():
        counts[str(seg.partition)] += len(seg.files)
    return dict(counts)


def core_round(path: Path, first: int, batches: int, rows: int, partitions: int) -> float:
    """``batches`` commits through the Spark sinks' own core path without Spark (plan on the
    driver, one task's per-partition files, ``driver.commit_parts``); seconds."""
    from carbonlite.driver import commit_parts, plan_write
    from carbonlite.metadata import TxnMarker
    from carbonlite.writer.distributed import write_partitioned_part

    table = open_table(str(path))
    start = time.perf_counter()
    for b in range(first, first + batches):
        plan = plan_write(table, overwrite=False)
        ids = list(range(b * rows, (b + 1) * rows))
        batch = pa.record_batch(
            {
                "id": pa.array(ids, pa.int64()),
                "part": [f"p{i % partitions:02d}" for i in ids],
                "value": [i * 0.5 for i in ids],
            }
        )
        files = write_partitioned_part(
            plan,
            [batch],
            tag="core",
            partition=0,
            attempt=0,
            app_id="core",
            batch_id=b,
            reuse=True,
        )
        commit_parts(
            plan,
            [None],
            txn=TxnMarker("core", b),
            operation="STREAMING UPDATE",
            parameters={},
            writer_id="core-driver",
            partitioned=files,
        )
    return time.perf_counter() - start


def without_spark(args: argparse.Namespace) -> dict[str, Any]:
    """The same comparison through the core path alone (``--without-spark``)."""
    from carbonlite import create_table

    work = Path(tempfile.mkdtemp(prefix="carbonlite-bench-partitioned-core-"))
    schema = pa.schema([("id", pa.int64()), ("part", pa.string()), ("value", pa.float64())])
    seconds = dict.fromkeys(CASES, 0.0)
    try:
        for case, options in CASES.items():
            props = {k.removeprefix("property."): v for k, v in options.items()}
            create_table(str(work / case), schema, partition_by=["part"], properties=props)
        per_round = -(-args.batches // args.rounds)
        for r in range(args.rounds):
            first = r * per_round
            n = min(per_round, args.batches - first)
            for case in list(CASES) if r % 2 == 0 else list(reversed(CASES)):
                seconds[case] += core_round(
                    work / case, first, n, args.rows_per_batch, args.partitions
                )
        out: dict[str, Any] = {}
        for case in CASES:
            counts = files_per_partition(work / case)
            out[case] = {
                "seconds": seconds[case],
                "ms_per_commit": 1000 * seconds[case] / args.batches,
                "files_per_partition_max": max(counts.values()),
            }
            print(
                f"{case:>5} (without Spark): {out[case]['ms_per_commit']:.1f} ms per commit, "
                f"files per partition max {out[case]['files_per_partition_max']}"
            )
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--rows-per-batch", type=int, default=12)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--without-spark",
        action="store_true",
        help="also time the same commits through driver.commit_parts without Spark",
    )
    args = parser.parse_args(argv)
    core = without_spark(args) if args.without_spark else None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import carbonlite.spark

    spark = carbonlite.spark.local_session(app_name="carbonlite-bench-spark-partitioned")
    work = Path(tempfile.mkdtemp(prefix="carbonlite-bench-partitioned-"))
    source = work / "source"
    seconds = dict.fromkeys(CASES, 0.0)
    rows = dict.fromkeys(CASES, 0)
    rounds: list[dict[str, Any]] = []
    try:
        write_round(source, 0, 1, args.rows_per_batch, args.partitions)  # warm-up file
        for case in CASES:
            run_round(spark, source, work, case)
        written = 1
        per_round = -(-args.batches // args.rounds)
        for r in range(args.rounds):
            files = min(per_round, args.batches - (written - 1))
            write_round(source, written, files, args.rows_per_batch, args.partitions)
            written += files
            order = list(CASES) if r % 2 == 0 else list(reversed(CASES))
            this: dict[str, Any] = {"order": order}
            for case in order:
                s, n = run_round(spark, source, work, case)
                seconds[case] += s
                rows[case] += n
                this[case] = {"seconds": s, "rows": n, "rows_per_s": n / s}
            this["ratio"] = this["auto"]["rows_per_s"] / this["plain"]["rows_per_s"]
            rounds.append(this)
            print(
                f"round {r + 1}: plain {this['plain']['seconds']:.1f} s, auto "
                f"{this['auto']['seconds']:.1f} s, auto/plain throughput {this['ratio']:.3f}",
                flush=True,
            )
        results: dict[str, Any] = {
            "command": "python benchmarks/bench_spark_partitioned.py " + " ".join(argv or []),
            "batches": args.batches,
            "rows_per_batch": args.rows_per_batch,
            "partitions": args.partitions,
            "rounds": rounds,
            "load_average_at_end": os.getloadavg(),
            "cpus": os.cpu_count(),
        }
        for case in CASES:
            t = open_table(str(work / case))
            counts = files_per_partition(work / case)
            results[case] = {
                "rows": t.count_rows(),
                "rows_per_s": rows[case] / seconds[case],
                "seconds": seconds[case],
                "files_per_partition_max": max(counts.values()),
                "files_per_partition_mean": sum(counts.values()) / len(counts),
                "operations": dict(Counter(h.operation for h in t.history())),
            }
            expected = (1 + args.batches) * args.rows_per_batch
            if results[case]["rows"] != expected:
                raise RuntimeError(f"{case}: {results[case]['rows']} rows, expected {expected}")
        results["throughput_ratio"] = results["auto"]["rows_per_s"] / results["plain"]["rows_per_s"]
        if core is not None:
            results["without_spark"] = core
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    for case in CASES:
        c = results[case]
        print(
            f"{case:>5}: files per partition max {c['files_per_partition_max']}, mean "
            f"{c['files_per_partition_mean']:.1f}; {c['rows_per_s']:.0f} rows/s"
        )
    print(f"auto/plain throughput: {results['throughput_ratio']:.3f}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
