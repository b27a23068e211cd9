"""A merge from Spark (``CarbonMergeBuilder``, run on the executors) against ``Table.merge`` on
the driver, on the same rows in the same run.

    python benchmarks/bench_spark_merge.py [--rows 2000000] [--repeat 1] [--master local[2]]
        [--output PATH]

The target is ``datagen.event_table(--rows)`` (six columns, ``id`` sorted) written into two
CarbonLite tables the same way (five equal appends, blocklets of the default 65,536 rows,
left in their streaming segment). The source is ``--rows / 10`` rows written as one Parquet
file: half of them existing keys drawn at random from the whole table with ``value``
changed, half new keys. Spark reads the source with ``spark.read.parquet`` (it never
passes through the driver) and merges it with ``CarbonMergeBuilder(...,
"t.id = s.id").whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()``;
``Table.merge(source, on=["id"])`` merges the same rows (read with pyarrow, untimed) into the
twin. Each repeat uses fresh tables; the sides alternate within a repeat, after a warm-up
merge of a tiny table that pays for Spark's Python workers. Time is the one call (for Spark,
until the result row is collected). Ratio = Spark / driver (below 1: Spark is faster).

The results are checked, not only timed: both sides report the same rows updated and
inserted, and both tables end with the same row count and the same sum of ``value``.
Markdown on stdout, JSON in ``benchmarks/results/spark_merge.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from datagen import event_table

import carbonlite as cl
import carbonlite.spark
from carbonlite.spark.merge_builder import CarbonMergeBuilder

OUTPUT = Path(__file__).parent / "results" / "spark_merge.json"


def make_table(path: str, rows: pa.Table) -> cl.Table:
    table = cl.create_table(path, rows.schema)
    step = -(-rows.num_rows // 5)
    for start in range(0, rows.num_rows, step):
        table.append(rows.slice(start, step))
    return table


def make_source(rows: pa.Table, seed: int) -> pa.Table:
    """``rows / 10`` rows: half existing keys (``value`` changed), half new keys."""
    rng = np.random.default_rng(seed)
    half = rows.num_rows // 20
    picked = rows.take(pa.array(np.sort(rng.choice(rows.num_rows, half, replace=False))))
    updated = picked.set_column(
        picked.schema.get_field_index("value"), "value", pc.negate(picked.column("value"))
    )
    new = event_table(half).set_column(
        0, "id", pa.array(np.arange(rows.num_rows, rows.num_rows + half), pa.int64())
    )
    return pa.concat_tables([updated, new.cast(rows.schema)])


def spark_merge(spark: Any, table: cl.Table, source_path: str) -> tuple[float, dict[str, Any]]:
    source = spark.read.parquet(source_path)  # lazy: defines the source, as pyarrow's read does
    started = time.perf_counter()
    result = (
        CarbonMergeBuilder(spark, table, source.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
        .collect()[0]
        .asDict()
    )
    return time.perf_counter() - started, result


def driver_merge(table: cl.Table, source: pa.Table) -> tuple[float, cl.MergeResult]:
    started = time.perf_counter()
    result = table.merge(source, ["id"])
    return time.perf_counter() - started, result


def state(table: cl.Table) -> tuple[int, float]:
    values = cl.open_table(table.path).to_arrow(columns=["value"]).column("value")
    return len(values), round(pc.sum(values).as_py(), 3)


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    spark = carbonlite.spark.local_session(args.master, app_name="bench-spark-merge")
    work = Path(tempfile.mkdtemp(prefix="bench-spark-merge-"))
    rows = event_table(args.rows)
    warm = work / "warm"
    small = rows.slice(0, 1000)
    warm.mkdir()
    pq.write_table(make_source(small, 0), str(warm / "src.parquet"))
    spark_merge(spark, make_table(str(warm / "t"), small), str(warm / "src.parquet"))
    repeats = []
    for n in range(args.repeat):
        base = work / f"r{n}"
        base.mkdir()
        source = make_source(rows, n + 1)
        source_path = str(base / "source.parquet")
        pq.write_table(source, source_path)
        on_spark = make_table(str(base / "spark"), rows)
        on_driver = make_table(str(base / "driver"), rows)
        if n % 2 == 0:
            spark_s, spark_result = spark_merge(spark, on_spark, source_path)
            driver_s, driver_result = driver_merge(on_driver, source)
        else:
            driver_s, driver_result = driver_merge(on_driver, source)
            spark_s, spark_result = spark_merge(spark, on_spark, source_path)
        if (spark_result["num_updated_rows"], spark_result["num_inserted_rows"]) != (
            driver_result.rows_updated,
            driver_result.rows_inserted,
        ) or state(on_spark) != state(on_driver):
            raise AssertionError(f"the two merges differ: {spark_result} vs {driver_result}")
        repeats.append(
            {
                "spark_s": round(spark_s, 3),
                "driver_s": round(driver_s, 3),
                "updated": driver_result.rows_updated,
                "inserted": driver_result.rows_inserted,
            }
        )
        print(f"repeat {n}: spark {spark_s:.2f} s, driver {driver_s:.2f} s", file=sys.stderr)
    spark.stop()
    best_spark = min(r["spark_s"] for r in repeats)
    best_driver = min(r["driver_s"] for r in repeats)
    return {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "master": args.master,
        "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "rows": args.rows,
        "source_rows": repeats[0]["updated"] + repeats[0]["inserted"],
        "spark_s": best_spark,
        "driver_s": best_driver,
        "ratio_spark_over_driver": round(best_spark / best_driver, 2),
        "repeats": repeats,
        "delta_spark": "not run: its jar (io.delta:delta-spark_2.13) cannot be fetched here",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    report = run(args)
    print("| target rows | source rows | Spark merge (s) | Table.merge (s) | Spark / driver |")
    print("|---:|---:|---:|---:|---:|")
    print(
        f"| {report['rows']:,} | {report['source_rows']:,} | {report['spark_s']:.2f} | "
        f"{report['driver_s']:.2f} | {report['ratio_spark_over_driver']:.2f} |"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
