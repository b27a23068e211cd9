"""A merge from Spark on ``local-cluster[2,1,1024]``: the driver runs no tasks, so the reading,
the join and the rewrite (deletion vectors and new rows) happen in the executors' processes.

    python -m tests.support.spark_merge_cluster_driver '{"dir": ..., "rows": 2000}'

Creates ``<dir>/table`` and its twin ``<dir>/twin`` with ``rows`` rows (blocklets of 256),
merges a source of ``rows // 5`` rows (half of them matching) into the table with
``CarbonMergeBuilder`` (update matched, insert the others) and into the twin with
``Table.merge``, and prints one JSON line: the result row, whether both tables hold the same
rows, and the tasks Spark ran for the merge (all of them in executors). Exit code 0 when the
tables agree.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import pyarrow as pa

    import carbonlite as cl
    import carbonlite.spark
    from carbonlite.spark.merge_builder import CarbonMergeBuilder
    from tests.support import REPO
    from tests.support.spark_data import assert_same_rows, source_rows

    rows = spec["rows"]
    tables = {}
    for name in ("table", "twin"):
        t = cl.create_table(
            os.path.join(spec["dir"], name),
            source_rows(0, 0).schema,
            properties={"blocklet_max_rows": "256"},
        )
        t.append(source_rows(0, rows))
        tables[name] = t
    incoming = source_rows(rows - rows // 10, rows // 5)  # half match, half are new
    incoming = incoming.set_column(2, "v", pa.array([-1.0] * incoming.num_rows))

    spark = carbonlite.spark.local_session(
        "local-cluster[2,1,1024]",
        app_name="carbonlite-merge-cluster-test",
        config={
            "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
            "spark.executorEnv.PYTHONPATH": str(REPO),
        },
    )
    sc = spark.sparkContext
    status = sc._jsc.sc().getExecutorMemoryStatus
    deadline = time.monotonic() + 120
    while status().size() < 3 and time.monotonic() < deadline:  # the driver and 2 executors
        time.sleep(0.5)
    summary: dict[str, Any] = {"executors": status().size() - 1}
    source = spark.createDataFrame(incoming.to_pylist(), "id long, k string, v double")
    sc.setJobGroup("merge", "the merge under test")
    result = (
        CarbonMergeBuilder(spark, tables["table"], source.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    summary["result"] = result.collect()[0].asDict()
    tracker = sc.statusTracker()
    stages = [
        tracker.getStageInfo(stage)
        for job in tracker.getJobIdsForGroup("merge")
        for stage in tracker.getJobInfo(job).stageIds
    ]
    summary["merge_tasks"] = sum(s.numCompletedTasks for s in stages if s is not None)
    summary["worker_parents"] = len(
        set(sc.parallelize(range(8), 8).map(lambda _: os.getppid()).collect())
    )
    expected = tables["twin"].merge(incoming, ["id"])
    summary["expected"] = [expected.rows_updated, expected.rows_inserted]
    try:
        got = cl.open_table(tables["table"].path).to_arrow()
        assert_same_rows(got, tables["twin"].to_arrow(), context="Spark merge vs Table.merge")
        summary["same_rows"] = True
    except AssertionError as exc:
        summary["same_rows"] = False
        summary["problem"] = str(exc)
    spark.stop()
    print(json.dumps(summary), flush=True)
    return 0 if summary["same_rows"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
