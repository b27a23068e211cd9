"""The streaming sink end to end: a file source streamed into a table with every trigger,
one commit per micro-batch, a query stopped and restarted, a task retried after a failure,
and complete mode.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from carbonlite import InvalidOptionError, TableNotFoundError, open_table
from tests.spark.streams import data_batches, finish, wait_until
from tests.support.spark_data import (
    SOURCE_DDL,
    assert_same_rows,
    ids_of,
    write_source_files,
)

pytestmark = pytest.mark.spark

STREAMING = "STREAMING UPDATE"


def stream_commits(path: str) -> list[Any]:
    """The table's streaming commits, oldest first (none while the table does not exist)."""
    try:
        table = open_table(path)
    except TableNotFoundError:
        return []
    return [h for h in reversed(table.history()) if h.operation == STREAMING]


def file_stream(spark: Any, source: str, max_files: int = 1) -> Any:
    return (
        spark.readStream.schema(SOURCE_DDL).option("maxFilesPerTrigger", max_files).parquet(source)
    )


@pytest.mark.parametrize(
    "trigger", ["availableNow-start-path", "availableNow-option-path", "default", "processingTime"]
)
def test_file_source_into_table(
    spark: Any, tmp_path: Any, trigger: str, stop_queries: None
) -> None:
    source, table, ck = str(tmp_path / "src"), str(tmp_path / "t"), str(tmp_path / "ck")
    files = write_source_files(source, 3, 40)
    writer = (
        file_stream(spark, source).writeStream.format("carbonlite").option("checkpointLocation", ck)
    )
    if trigger == "availableNow-start-path":
        q = finish(writer.trigger(availableNow=True).start(table))
    elif trigger == "availableNow-option-path":
        q = finish(writer.option("path", table).trigger(availableNow=True).start())
    else:
        if trigger == "processingTime":
            writer = writer.trigger(processingTime="500 milliseconds")
        q = writer.start(table)
        q.processAllAvailable()
        q.stop()
    assert q.exception() is None

    expected = pa.concat_tables(files)
    got = open_table(table).to_arrow()
    assert_same_rows(got, expected, context=trigger)
    assert ids_of(got) == sorted(set(ids_of(got))), "a row was written twice"

    batches = data_batches(q)
    assert len(batches) == 3, f"maxFilesPerTrigger=1 over 3 files gave {len(batches)} batches"
    commits = stream_commits(table)
    assert [int(c.parameters["epochId"]) for c in commits] == [b["batchId"] for b in batches]
    assert [c.rows for c in commits] == [b["numInputRows"] for b in batches]
    assert open_table(table).version == len(commits), (
        "one log version per micro-batch (plus create)"
    )
    assert {c.parameters["queryId"] for c in commits} == {q.id}


def test_stop_mid_stream_and_restart(spark: Any, tmp_path: Any, stop_queries: None) -> None:
    source, table, ck = str(tmp_path / "src"), str(tmp_path / "t"), str(tmp_path / "ck")
    files = write_source_files(source, 6, 30)
    writer = (
        file_stream(spark, source)
        .writeStream.format("carbonlite")
        .option("checkpointLocation", ck)
        .trigger(processingTime="1 second")
    )
    q = writer.start(table)
    wait_until(lambda: len(stream_commits(table)) >= 2, what="2 commits")
    q.stop()
    stopped_at = len(stream_commits(table))
    assert stopped_at < 6, "the query finished before it was stopped: nothing was tested"

    q2 = finish(
        file_stream(spark, source)
        .writeStream.format("carbonlite")
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start(table)
    )
    assert q2.id == q.id, "the restart must continue the same query"
    got = open_table(table).to_arrow()
    assert_same_rows(got, pa.concat_tables(files), context="after restart")
    epochs = [int(c.parameters["epochId"]) for c in stream_commits(table)]
    assert len(epochs) == len(set(epochs)), f"a batch was committed twice: {epochs}"


FAIL_ID = 15_000  # the row whose first task attempt fails (past Spark's 64 KB pipe buffers)


def _fail_first_attempt(i: int) -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if i == FAIL_ID and ctx is not None and ctx.attemptNumber() == 0:
        raise RuntimeError(f"injected failure of task attempt 0 at row {i}")
    return i


@pytest.mark.filterwarnings("ignore:Cannot infer the eval type")
def test_task_retry_writes_rows_once(spark: Any, tmp_path: Any, stop_queries: None) -> None:
    """The first attempt of the only task of batch 0 fails after the writer has received rows;
    Spark retries it. The retry writes its own file (``-a1``); the failed attempt's file
    (``-a0``) holds no committed bytes and is cut back before batch 1's attempt 0 writes it."""
    source, table, ck = str(tmp_path / "src"), str(tmp_path / "t"), str(tmp_path / "ck")
    flaky = F.udf(_fail_first_attempt, T.LongType(), useArrow=False)

    def run() -> Any:
        stream = file_stream(spark, source).select(flaky("id").alias("id"), "k", "v")
        return finish(
            stream.writeStream.format("carbonlite")
            .option("checkpointLocation", ck)
            .option("property.blocklet_max_rows", "1000")
            .trigger(availableNow=True)
            .start(table)
        )

    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        first = write_source_files(source, 1, 20_000)
        run()
        t = open_table(table)
        assert_same_rows(t.to_arrow(), first[0], context="after the retried batch")
        committed = {f.path: f for _, f in t.snapshot().iter_files()}
        assert len(committed) == 1
        (retry_file,) = committed
        assert re.search(r"-p00000-a1-s[0-9a-f]{8}\.cblt$", retry_file), retry_file
        failed_file = retry_file.replace("-a1-s", "-a0-s")
        on_disk = os.path.join(table, failed_file)
        assert os.path.exists(on_disk) and os.path.getsize(on_disk) > 0, (
            "the failed attempt left no file: the writer got no rows before the failure, so "
            "this test did not exercise the cut-back"
        )
        assert failed_file not in committed, "the failed attempt's bytes were committed"

        second = write_source_files(source, 1, 500, first_id=100_000, first_file=1)
        run()
        t = open_table(table)
        assert_same_rows(t.to_arrow(), pa.concat_tables(first + second), context="after batch 1")
        files = {f.path: f.committed_length for _, f in t.snapshot().iter_files()}
        assert failed_file in files, "batch 1's attempt 0 did not write the -a0 file"
        assert os.path.getsize(on_disk) == files[failed_file], (
            "the -a0 file holds bytes past its committed length"
        )
        (appended,) = [
            a
            for a in t.log.read_actions(t.version, t.snapshot())
            if getattr(a, "file", None) == failed_file
        ]
        assert appended.start == 0, "batch 1 appended after the failed attempt's garbage"
        assert files[failed_file] == appended.end
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)


def test_complete_mode_aggregation(spark: Any, tmp_path: Any, stop_queries: None) -> None:
    source, table, ck = str(tmp_path / "src"), str(tmp_path / "t"), str(tmp_path / "ck")
    files = write_source_files(source, 3, 37)
    q = finish(
        file_stream(spark, source)
        .groupBy("k")
        .count()
        .writeStream.format("carbonlite")
        .outputMode("complete")
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start(table)
    )
    assert len(data_batches(q)) == 3
    t = open_table(table)
    commits = stream_commits(table)
    assert len(commits) == 3 and t.version == 3
    for consumed, commit in enumerate(commits, start=1):
        counts = Counter(k for f in files[:consumed] for k in f.column("k").to_pylist())
        expected = pa.table(
            {"k": list(counts), "count": pa.array(list(counts.values()), pa.int64())}
        )
        got = t.to_arrow(version=commit.version)
        assert_same_rows(got, expected, key="k", context=f"version {commit.version}")
        assert commit.parameters["outputMode"] == "complete"
    assert {s.status for s in t.segments()} == {"MARKED_FOR_DELETE", "STREAMING"}


def test_update_mode_is_refused(spark: Any, tmp_path: Any, stop_queries: None) -> None:
    source = str(tmp_path / "src")
    write_source_files(source, 1, 5)
    writer = (
        file_stream(spark, source)
        .groupBy("k")
        .count()
        .writeStream.format("carbonlite")
        .outputMode("update")
        .option("checkpointLocation", str(tmp_path / "ck"))
    )
    with pytest.raises(InvalidOptionError, match="not 'update'"):
        writer.start(str(tmp_path / "t"))
    assert not spark.streams.active
    assert not os.path.exists(tmp_path / "t")
