"""Spark against S3 (the moto server on 127.0.0.1): a stream of several micro-batches, a
batch write and a batch read. Object stores cannot append, so every micro-batch's task files
are new objects (writer/distributed.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from tests.spark.streams import data_batches, finish
from tests.support.s3_server import S3Server
from tests.support.spark_data import SOURCE_DDL, assert_same_rows, write_source_files

pytestmark = [pytest.mark.spark, pytest.mark.s3]


def _options(server: S3Server) -> str:
    return json.dumps(server.storage_options)


def test_stream_several_micro_batches_into_s3(
    spark: Any, s3_server: S3Server, tmp_path: Path, stop_queries: None
) -> None:
    uri = f"s3://{s3_server.new_bucket()}/events"
    written = write_source_files(str(tmp_path / "src"), files=4, rows_per_file=50)
    query = (
        spark.readStream.schema(SOURCE_DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(tmp_path / "src"))
        .repartition(2)
        .writeStream.format("carbonlite")
        .option("storageOptions", _options(s3_server))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(uri)
    )
    finish(query)
    assert len(data_batches(query)) == 4
    t = cl.open_table(uri, storage_options=s3_server.storage_options)
    assert_same_rows(t.to_arrow(), pa.concat_tables(written))
    assert len([h for h in t.history() if h.operation == "STREAMING UPDATE"]) == 4
    files = {f.path for _, f in t.snapshot().iter_files()}
    assert len(files) == 8  # 4 batches x 2 tasks, each a new object
    assert t.verify().ok

    # a restart of the same query finds nothing new and duplicates nothing
    again = (
        spark.readStream.schema(SOURCE_DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(tmp_path / "src"))
        .writeStream.format("carbonlite")
        .option("storageOptions", _options(s3_server))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(uri)
    )
    finish(again)
    assert t.refresh().count_rows() == 200


def test_batch_write_and_read_on_s3(spark: Any, s3_server: S3Server) -> None:
    uri = f"s3://{s3_server.new_bucket()}/t"
    df = spark.createDataFrame([(i, f"k{i % 3}", i / 2) for i in range(60)], SOURCE_DDL)
    df.repartition(3).write.format("carbonlite").option("storageOptions", _options(s3_server)).mode(
        "append"
    ).save(uri)
    df.limit(10).write.format("carbonlite").option("storageOptions", _options(s3_server)).mode(
        "append"
    ).save(uri)
    t = cl.open_table(uri, storage_options=s3_server.storage_options)
    assert t.count_rows() == 70 and t.version == 2
    read = spark.read.format("carbonlite").option("storageOptions", _options(s3_server)).load(uri)
    assert read.count() == 70
    assert sorted(r.id for r in read.where("id >= 55").collect()) == [55, 56, 57, 58, 59]
    assert_same_rows(
        pa.Table.from_pylist([r.asDict() for r in read.collect()], schema=t.schema), t.to_arrow()
    )
