"""A driver on ``local-cluster[2,1,1024]``: separate executor JVMs, each with its own Python
workers, and the driver in another process again.

    python -m tests.support.spark_cluster_driver '{"dir": ..., "files": 3, "rows": 400}'

Writes ``files`` parquet files of ``rows`` rows into ``<dir>/source``, streams them into the
table ``<dir>/table`` (``maxFilesPerTrigger=1``, ``availableNow``), reads the table back with
``spark.read`` (all of it, with a filter, and all of it again through the same DataFrame), checks every row against the source, and prints
one JSON line with what it saw. Exit code 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import pyarrow as pa

    from tests.support.spark_data import SOURCE_DDL, assert_same_rows, write_source_files

    source = os.path.join(spec["dir"], "source")
    table = os.path.join(spec["dir"], "table")
    files = write_source_files(source, spec["files"], spec["rows"])
    expected = pa.concat_tables(files)

    spark, executors = start_cluster("carbonlite-cluster-test")
    summary: dict[str, Any] = {"executors": executors}
    query = (
        spark.readStream.schema(SOURCE_DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(source)
        .repartition(2)
        .writeStream.format("carbonlite")
        .option("checkpointLocation", os.path.join(spec["dir"], "checkpoint"))
        .trigger(availableNow=True)
        .start(table)
    )
    query.awaitTermination()
    summary["batches"] = sum(1 for p in query.recentProgress if p["numInputRows"] > 0)
    summary["query_id"] = query.id

    df = spark.read.format("carbonlite").load(table)
    got = df.toArrow()
    summary["rows"] = got.num_rows
    summary["distinct_ids"] = df.select("id").distinct().count()
    summary["sum_ids"] = int(df.agg({"id": "sum"}).collect()[0][0])
    low, high = spec["rows"] // 2, spec["rows"] + spec["rows"] // 2
    summary["filtered_rows"] = df.where(f"id >= {low} and id < {high}").count()
    # The same DataFrame again without a filter: by default it reads every row (issue 12).
    summary["rows_after_filter"] = df.count()

    # Handed off, the rows are read by Spark's own Parquet scan on the executors (issue 40)
    import carbonlite as cl

    t = cl.open_table(table)
    t.finish_streaming()
    t.handoff()
    native = spark.read.format("carbonlite").load(table)
    plan = native._jdf.queryExecution().executedPlan().toString()
    summary["native_plan"] = "FileScan parquet" in plan
    summary["native_rows"] = native.count()
    summary["native_filtered_rows"] = native.where(f"id >= {low} and id < {high}").count()
    summary["native_sum_ids"] = int(native.agg({"id": "sum"}).collect()[0][0])
    return finish(
        spark,
        summary,
        lambda: assert_same_rows(got, expected, context="spark.read on local-cluster"),
    )


def start_cluster(app_name: str) -> tuple[Any, int]:
    """A session on ``local-cluster[2,1,1024]`` once its executors are up, and how many are."""
    import carbonlite.spark
    from tests.support import REPO

    spark = carbonlite.spark.local_session(
        "local-cluster[2,1,1024]",
        app_name=app_name,
        config={
            "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
            "spark.executorEnv.PYTHONPATH": str(REPO),
        },
    )
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
    deadline = time.monotonic() + 120
    while status().size() < 3 and time.monotonic() < deadline:  # the driver and 2 executors
        time.sleep(0.5)
    return spark, status().size() - 1


def finish(spark: Any, summary: dict[str, Any], check: Callable[[], None]) -> int:
    """Record the Python workers' parents (one pyspark daemon per executor JVM) and whether
    ``check`` passed, stop Spark and print ``summary`` as one JSON line; the exit code."""
    summary["worker_parents"] = len(
        set(spark.sparkContext.parallelize(range(8), 8).map(lambda _: os.getppid()).collect())
    )
    try:
        check()
        summary["same_rows"] = True
    except AssertionError as exc:
        summary["same_rows"] = False
        summary["problem"] = str(exc)
    spark.stop()
    print(json.dumps(summary), flush=True)
    return 0 if summary["same_rows"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
