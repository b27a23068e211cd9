"""Spark's default read of a CarbonLite table against Spark's own Parquet read of the same rows
(issue 40 §1).

    python benchmarks/bench_spark_native.py [--rows 4000000] [--repeat 5] [--out PATH]

A table of ``--rows`` rows (``datagen.event_table``: id, ts sorted, user, kind, value, agent;
``columnar_format = parquet``, a secondary index on ``agent``) is handed off whole, so its
rows lie in its columnar Parquet files. In one ``local[2]`` session, after a warm-up, the
same queries run on ``spark.read.format("carbonlite").load(table)`` (the default: no option)
and on ``spark.read.parquet(<the table's columnar files>)``, interleaved, best of
``--repeat``, each materialized with the ``noop`` sink (or collected, for aggregates):

- 1% range: ``ts`` in the first 1% of the day, every column;
- 2-column aggregate: ``sum(value)`` grouped by ``kind``;
- full read: every column of every row;
- point lookup: ``agent = X`` (one row), every column.

Ratios are Spark Parquet's time over CarbonLite's (above 1: CarbonLite faster). "spark
parquet" reads the table's own columnar files (the same bytes, Parquet bloom filters on
``agent`` included); "spark parquet (spark's write)" reads the same rows as Spark writes
Parquet itself (``df.write.parquet`` with Spark's defaults: no bloom filters), what a Spark
user has without CarbonLite. With
``--python-source`` the same queries also run through the Python source
(``option("nativeRead", "false")``), the route every read took before.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from datagen import event_table
from report import progress, run_facts

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import carbonlite as cl  # noqa: E402
import carbonlite.spark  # noqa: E402
from carbonlite.metadata import post_commit  # noqa: E402
from carbonlite.reader.parquet_view import parquet_files  # noqa: E402

post_commit.default_mode = "inline"
DAY_START = "2026-01-01 00:00:00"
RANGE_END = "2026-01-01 00:14:24"  # 1% of the day


def build(path: str, rows: int) -> cl.Table:
    t = cl.create_table(
        path,
        event_table(1).schema,
        sort_columns=["ts"],
        properties={"columnar_format": "parquet", "secondary_index_columns": "agent"},
    )
    for start in range(0, rows, 1_000_000):
        data = event_table(min(1_000_000, rows - start), seed=start)
        data = data.set_column(0, "id", pa.array(range(start, start + data.num_rows), pa.int64()))
        t.append(data)
        progress(f"appended {start + data.num_rows:,} rows")
    t.finish_streaming()
    t.handoff()
    progress("handed off")
    return t


def best(fn: Callable[[], Any], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--python-source", action="store_true")
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/spark_native.json"))
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = carbonlite.spark.local_session("local[2]", app_name="bench-spark-native")
    with tempfile.TemporaryDirectory() as work:
        t = build(os.path.join(work, "t"), args.rows)
        files = [str(Path(t.path) / f.path) for _, f in parquet_files(t.snapshot())]
        agent = t.to_arrow(columns=["agent"], filter=[("id", "=", args.rows // 2)])
        key = agent.column("agent")[0].as_py()
        own = os.path.join(work, "spark-parquet")
        spark.read.parquet(*files).write.parquet(own)
        progress("wrote the rows with Spark's Parquet writer")
        sources: dict[str, Callable[[], Any]] = {
            "carbonlite": lambda: spark.read.format("carbonlite").load(t.path),
            "spark parquet": lambda: spark.read.parquet(*files),
            "spark parquet (spark's write)": lambda: spark.read.parquet(own),
        }
        if args.python_source:
            sources["python source"] = lambda: (
                spark.read.format("carbonlite").option("nativeRead", "false").load(t.path)
            )
        rng = f"ts >= timestamp_ntz'{DAY_START}' AND ts < timestamp_ntz'{RANGE_END}'"
        queries: dict[str, Callable[[Any], Any]] = {
            "1% range": lambda df: df.where(rng).write.format("noop").mode("overwrite").save(),
            "2-column aggregate": lambda df: df.groupBy("kind").sum("value").collect(),
            "full read": lambda df: df.write.format("noop").mode("overwrite").save(),
            "point lookup": lambda df: (
                df.where(f"agent = '{key}'").write.format("noop").mode("overwrite").save()
            ),
        }
        for q in queries.values():  # warm-up: JVM, workers, code generation
            for make in sources.values():
                q(make())
        results: dict[str, dict[str, list[float]]] = {}
        for name, q in queries.items():
            results[name] = {s: [] for s in sources}
            for _ in range(args.repeat):
                for s, make in sources.items():
                    results[name][s] += best(lambda q=q, make=make: q(make()), 1)
            summary = {s: min(ts) for s, ts in results[name].items()}
            ratio = summary["spark parquet"] / summary["carbonlite"]
            own_ratio = summary["spark parquet (spark's write)"] / summary["carbonlite"]
            progress(
                f"{name}: "
                + ", ".join(f"{s} {v:.3f}s" for s, v in summary.items())
                + f"; carbonlite {ratio:.2f}x Spark's Parquet read of its files, "
                f"{own_ratio:.2f}x of Spark's own Parquet"
            )
        out = {
            **run_facts(),
            "rows": args.rows,
            "files": len(files),
            "best_s": {n: {s: min(ts) for s, ts in r.items()} for n, r in results.items()},
            "median_s": {
                n: {s: statistics.median(ts) for s, ts in r.items()} for n, r in results.items()
            },
            "ratio_vs_spark_parquet": {
                n: min(r["spark parquet"]) / min(r["carbonlite"]) for n, r in results.items()
            },
            "ratio_vs_sparks_own_parquet": {
                n: min(r["spark parquet (spark's write)"]) / min(r["carbonlite"])
                for n, r in results.items()
            },
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2))
        print(json.dumps(out, indent=2))
    spark.stop()


if __name__ == "__main__":
    main()
