"""``partitionBy()`` on Spark's writers (issue 40 §4): Spark ignores it for a Python sink's
stream and refuses it for a batch write; for ``format("carbonlite")`` it partitions a new
table as the option ``partitionBy`` does, and one that does not match an existing table is
refused with nothing written."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.errors import InvalidOptionError
from tests.spark.streams import finish
from tests.support.spark_data import KEYS, SOURCE_DDL, assert_same_rows, write_source_files

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.float64())])


def _rows(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": [("eu", "us", "ap")[i % 3] for i in ids],
            "v": [i / 2 for i in ids],
        },
        schema=SCHEMA,
    )


def _df(spark: Any, first: int = 0, count: int = 30) -> Any:
    return spark.createDataFrame(
        _rows(first, count).to_pylist(), "id long, region string, v double"
    )


def _partitions(path: str) -> list[tuple[Any, ...] | None]:
    t = cl.open_table(path)
    return sorted(s.partition for s in t.snapshot().live_segments() if s.partition is not None)


def test_batch_partition_by_partitions_a_new_table(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    _df(spark).write.format("carbonlite").partitionBy("region").mode("append").save(path)
    t = cl.open_table(path)
    assert t.partition_by == ("region",)
    assert _partitions(path) == [("ap",), ("eu",), ("us",)]
    assert t.to_arrow().sort_by("id").equals(_rows(0, 30))
    # the same partitioning again appends; the argument of save() works as well
    _df(spark, 30).write.format("carbonlite").mode("append").save(path, partitionBy="region")
    assert t.refresh().to_arrow().num_rows == 60


def test_stream_partition_by_partitions_a_new_table(
    spark: Any, tmp_path: Any, stop_queries: None
) -> None:
    source, sink, ck = str(tmp_path / "src"), str(tmp_path / "sink"), str(tmp_path / "ck")
    cl.create_table(source, SCHEMA).append(_rows(0, 30))
    finish(
        spark.readStream.format("carbonlite")
        .load(source)
        .writeStream.format("carbonlite")
        .partitionBy("region")
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start(sink)
    )
    t = cl.open_table(sink)
    assert t.partition_by == ("region",)
    assert _partitions(sink) == [("ap",), ("eu",), ("us",)]
    assert t.to_arrow().sort_by("id").equals(_rows(0, 30))


def test_a_partitioned_stream_adds_no_file_per_partition_and_batch(
    spark: Any, tmp_path: Any, stop_queries: None
) -> None:
    """Issue 40 §4: each micro-batch's task appends to its own file in each partition's
    STREAMING segment (``writer/partition_files.py``, ``reuse``)."""
    source, sink, ck = str(tmp_path / "src"), str(tmp_path / "sink"), str(tmp_path / "ck")
    batches = 6
    expected = pa.concat_tables(write_source_files(source, batches, 20))
    finish(
        spark.readStream.schema(SOURCE_DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(source)
        .writeStream.format("carbonlite")
        .partitionBy("k")
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start(sink)
    )
    t = cl.open_table(sink)
    assert sum(h.operation == "STREAMING UPDATE" for h in t.history()) == batches
    assert_same_rows(t.to_arrow(), expected, context="partitioned stream")
    files = {s.partition: len(s.files) for s in t.snapshot().live_segments()}
    # one task per micro-batch (one source file): its first batch's file, then its own file
    # in the partition's segment, however many batches follow
    assert len(files) == len(KEYS) and set(files.values()) == {2}, files


def test_partitioning_other_than_the_tables_is_refused(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    t = cl.create_table(path, SCHEMA)
    t.append(_rows(0, 3))
    version = t.version
    with pytest.raises(Exception, match="does not match the partitioning of table") as caught:
        _df(spark).write.format("carbonlite").partitionBy("region").mode("append").save(path)
    assert "InvalidOptionError" in type(caught.value).__name__ or "InvalidOptionError" in str(
        caught.value
    )
    assert t.refresh().version == version


def test_partition_by_and_a_different_option_are_refused(spark: Any, tmp_path: Any) -> None:
    writer = _df(spark).write.format("carbonlite").partitionBy("region")
    with pytest.raises(InvalidOptionError, match="name different partition fields"):
        writer.option("partitionBy", "id").mode("append").save(str(tmp_path / "t"))
    assert not os.path.exists(tmp_path / "t")


def test_other_formats_keep_sparks_partition_by(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "p")
    _df(spark).write.partitionBy("region").parquet(path)
    assert sorted(d for d in os.listdir(path) if d.startswith("region=")) == [
        "region=ap",
        "region=eu",
        "region=us",
    ]
