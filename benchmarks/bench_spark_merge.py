"""A merge from Spark (``CarbonMergeBuilder``) against ``Table.merge`` on the driver, on the
same rows in the same run.

    python benchmarks/bench_spark_merge.py [--rows 2000000] [--repeat 1] [--master local[2]]
        [--driver-memory 4g] [--executors] [--output PATH]

The target is ``datagen.event_table(--rows)`` (six columns, ``id`` sorted) written into
CarbonLite tables the same way (five equal appends, blocklets of the default 65,536 rows,
left in their streaming segment). The source is ``--rows / 10`` rows written as one Parquet
file: half of them existing keys drawn at random from the whole table with ``value``
changed, half new keys. Spark defines the source with ``spark.read.parquet`` (lazy, before
the clock starts: reading it is the merge's) and merges it with ``CarbonMergeBuilder(...,
"t.id = s.id").whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()``: by default a
source this small (Spark's estimate within ``spark.carbonlite.merge.driverSourceMaxBytes``)
is collected and merged as ``Table.merge`` on the driver; ``--executors`` also runs the
merge on the executors (the setting at 0) on a third table in each repeat.
``Table.merge(source, on=["id"])`` merges the same rows (read with pyarrow, untimed) into the
twin. Each repeat uses fresh tables; the default route and ``Table.merge`` alternate within
a repeat, after a warm-up merge of a tiny table that pays for Spark's Python workers. Time is
the one call (for Spark, until the result row is collected). Ratio = Spark / driver (below
1: Spark is faster).

"Source to Python" is Spark's ``toArrow()`` of the source alone in the same repeat: the
least a merge from Spark pays on top of ``Table.merge`` when its rows are written in the
driver's Python, so ``(source to Python + Table.merge) / Table.merge`` is the floor of the
ratio on this route.

The results are checked, not only timed: every side reports the same rows updated and
inserted, and every table ends with the same row count and the same sum of ``value``.
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
from carbonlite.spark.merge_builder import DRIVER_SOURCE_CONF, CarbonMergeBuilder

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


def spark_merge(
    spark: Any, table: cl.Table, source_path: str, route: str = "default"
) -> tuple[float, dict[str, Any]]:
    """The merge from Spark; ``route="executors"`` keeps even a small source on the
    executors (``spark.carbonlite.merge.driverSourceMaxBytes=0``)."""
    if route == "executors":
        spark.conf.set(DRIVER_SOURCE_CONF, "0")
    else:
        spark.conf.unset(DRIVER_SOURCE_CONF)
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


def source_to_python(spark: Any, source_path: str) -> float:
    """Spark handing the source's rows to Python (``toArrow``), nothing else: the least any
    merge from Spark whose writing happens in Python pays on top of ``Table.merge``."""
    source = spark.read.parquet(source_path)
    started = time.perf_counter()
    source.toArrow()
    return time.perf_counter() - started


def driver_merge(table: cl.Table, source: pa.Table) -> tuple[float, cl.MergeResult]:
    started = time.perf_counter()
    result = table.merge(source, ["id"])
    return time.perf_counter() - started, result


def state(table: cl.Table) -> tuple[int, float]:
    values = cl.open_table(table.path).to_arrow(columns=["value"]).column("value")
    return len(values), round(pc.sum(values).as_py(), 3)


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    spark = carbonlite.spark.local_session(
        args.master,
        app_name="bench-spark-merge",
        config={"spark.driver.memory": args.driver_memory},
    )
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
        on_executors = make_table(str(base / "executors"), rows) if args.executors else None
        floor_s = source_to_python(spark, source_path)
        if n % 2 == 0:
            spark_s, spark_result = spark_merge(spark, on_spark, source_path)
            driver_s, driver_result = driver_merge(on_driver, source)
        else:
            driver_s, driver_result = driver_merge(on_driver, source)
            spark_s, spark_result = spark_merge(spark, on_spark, source_path)
        results = [(on_spark, spark_result)]
        executors_s = None
        if on_executors is not None:
            executors_s, executors_result = spark_merge(
                spark, on_executors, source_path, "executors"
            )
            results.append((on_executors, executors_result))
        for table, result in results:
            if (result["num_updated_rows"], result["num_inserted_rows"]) != (
                driver_result.rows_updated,
                driver_result.rows_inserted,
            ) or state(table) != state(on_driver):
                raise AssertionError(f"the merges differ: {result} vs {driver_result}")
        repeats.append(
            {
                "spark_s": round(spark_s, 3),
                "driver_s": round(driver_s, 3),
                "spark_on_executors_s": None if executors_s is None else round(executors_s, 3),
                "source_to_python_s": round(floor_s, 3),
                "updated": driver_result.rows_updated,
                "inserted": driver_result.rows_inserted,
            }
        )
        print(
            f"repeat {n}: spark {spark_s:.2f} s, driver {driver_s:.2f} s, executors "
            f"{executors_s or 0:.2f} s, source to Python {floor_s:.2f} s",
            file=sys.stderr,
        )
    spark.stop()
    best_spark = min(r["spark_s"] for r in repeats)
    best_driver = min(r["driver_s"] for r in repeats)
    best_floor = min(r["source_to_python_s"] for r in repeats)
    on_executors = [r["spark_on_executors_s"] for r in repeats if r["spark_on_executors_s"]]
    return {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "master": args.master,
        "driver_memory": args.driver_memory,
        "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "rows": args.rows,
        "source_rows": repeats[0]["updated"] + repeats[0]["inserted"],
        "spark_s": best_spark,
        "driver_s": best_driver,
        "ratio_spark_over_driver": round(best_spark / best_driver, 2),
        "source_to_python_s": best_floor,
        "floor_ratio": round((best_floor + best_driver) / best_driver, 2),
        "spark_on_executors_s": min(on_executors) if on_executors else None,
        "ratio_executors_over_driver": (
            round(min(on_executors) / best_driver, 2) if on_executors else None
        ),
        "repeats": repeats,
        "delta_spark": "not run: its jar (io.delta:delta-spark_2.13) cannot be fetched here",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument(
        "--driver-memory",
        default="4g",
        help="Spark's driver heap (local mode: the executors' too); 1g, Spark's default, "
        "leaves a 10M-row run spending seconds in garbage collection",
    )
    parser.add_argument(
        "--executors",
        action="store_true",
        help="also merge on the executors (driverSourceMaxBytes=0) in each repeat",
    )
    args = parser.parse_args()
    report = run(args)
    print(
        "| target rows | source rows | Spark merge (s) | Table.merge (s) | Spark / driver "
        "| source to Python (s) | (floor + Table.merge) / Table.merge | on the executors (s) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    executors = report["spark_on_executors_s"]
    print(
        f"| {report['rows']:,} | {report['source_rows']:,} | {report['spark_s']:.2f} | "
        f"{report['driver_s']:.2f} | {report['ratio_spark_over_driver']:.2f} | "
        f"{report['source_to_python_s']:.2f} | {report['floor_ratio']:.2f} | "
        f"{'-' if executors is None else f'{executors:.2f}'} |"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
