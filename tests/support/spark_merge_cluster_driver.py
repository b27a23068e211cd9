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
from typing import Any


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import pyarrow as pa

    import carbonlite as cl
    from carbonlite.spark.merge_builder import DRIVER_SOURCE_CONF, CarbonMergeBuilder
    from tests.support.spark_cluster_driver import finish, start_cluster
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

    spark, executors = start_cluster("carbonlite-merge-cluster-test")
    sc = spark.sparkContext
    summary: dict[str, Any] = {"executors": executors}
    # a source this small merges as Table.merge on the driver by default: on the executors here
    spark.conf.set(DRIVER_SOURCE_CONF, "0")
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
    expected = tables["twin"].merge(incoming, ["id"])
    summary["expected"] = [expected.rows_updated, expected.rows_inserted]
    got = cl.open_table(tables["table"].path).to_arrow()
    twin = tables["twin"].to_arrow()
    return finish(
        spark, summary, lambda: assert_same_rows(got, twin, context="Spark merge vs Table.merge")
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
