"""Running handoff and compaction with Spark: tasks execute on executors, the driver commits.

    import carbonlite.spark
    carbonlite.spark.compact(spark, "/data/events", "minor")

Each :class:`~carbonlite.compaction.CompactionTask` becomes one Spark task; results (the files
written, as plain data) come back to the driver, which commits the plan in one version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from carbonlite.compaction import (
    CompactionKind,
    CompactionResult,
    CompactionTask,
    TaskExecutor,
    TaskResult,
    execute_task,
)
from carbonlite.create import open_table

__all__ = ["compact", "spark_executor"]


def spark_executor(spark: Any) -> TaskExecutor:
    """A task executor that runs compaction tasks as one Spark job."""

    def run(
        tasks: Sequence[CompactionTask],
        uri: str,
        schema: pa.Schema,
        storage_options: Mapping[str, Any],
    ) -> list[TaskResult]:
        options = dict(storage_options)

        def execute(task: CompactionTask) -> TaskResult:
            return execute_task(task, uri, schema, options)

        rdd = spark.sparkContext.parallelize(list(tasks), numSlices=max(1, len(tasks)))
        return list(rdd.map(execute).collect())

    return run


def compact(
    spark: Any,
    path: str,
    kind: CompactionKind = "minor",
    *,
    segments: Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> CompactionResult:
    """``Table.compact`` / ``Table.handoff`` with the heavy part on Spark executors."""
    table = open_table(path, storage_options=storage_options)
    return table.compact(kind, segments=segments, executor=spark_executor(spark))
