"""Row-level changes seen from Spark: batch reads skip deleted rows on the workers, the stream
sink and batch writes upsert into primary-key tables, the stream source refuses delete
commits unless told to skip them, and foreachBatch can merge."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import carbonlite as cl
from tests.spark.streams import finish
from tests.spark.test_stream_source import read_into_memory

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])
DDL = "id long, v long"


def in_order(source: str, count: int) -> None:
    """Give ``<n>.parquet`` modification times a second apart: Spark's file source takes
    files oldest first, and files written within one millisecond tie."""
    for n in range(count):
        os.utime(f"{source}/{n}.parquet", (1_700_000_000 + n, 1_700_000_000 + n))


def by_id(table: pa.Table) -> dict[int, int]:
    return {r["id"]: r["v"] for r in table.to_pylist()}


def test_batch_read_skips_deleted_rows(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    t = cl.create_table(path, SCHEMA, properties={"blocklet_max_rows": "16"})
    t.append(pa.table({"id": list(range(100)), "v": list(range(100))}, schema=SCHEMA))
    t.delete(pc.field("id").isin(list(range(0, 100, 3))))
    t.update(pc.field("id") == 1, {"v": -1})
    got = spark.read.format("carbonlite").load(path).toArrow()
    assert by_id(got) == by_id(t.to_arrow())
    assert got.num_rows == 66 and by_id(got)[1] == -1
    old = spark.read.format("carbonlite").option("versionAsOf", 1).load(path).count()
    assert old == 100


def test_stream_sink_upserts_into_a_primary_key_table(
    spark: Any, tmp_path: Any, stop_queries: None
) -> None:
    source, path, ck = str(tmp_path / "src"), str(tmp_path / "t"), str(tmp_path / "ck")
    os.makedirs(source)
    batches = [
        pa.table({"id": list(range(10)), "v": [0] * 10}, schema=SCHEMA),
        pa.table({"id": list(range(5, 15)), "v": [1] * 10}, schema=SCHEMA),
        pa.table({"id": [3, 3, 20], "v": [2, 3, 2]}, schema=SCHEMA),  # last row of 3 wins
    ]
    for n, batch in enumerate(batches):
        pq.write_table(batch, f"{source}/{n}.parquet")
    in_order(source, len(batches))
    cl.create_table(path, SCHEMA, primary_key=["id"])
    finish(
        spark.readStream.schema(DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(source)
        .coalesce(1)  # one task: the order of a key's rows within a batch is the file's
        .writeStream.format("carbonlite")
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start(path)
    )
    t = cl.open_table(path)
    want = {i: 0 for i in range(5)} | {i: 1 for i in range(5, 15)} | {3: 3, 20: 2}
    assert by_id(t.to_arrow()) == want and t.count_rows() == len(want)
    upserts = [h for h in t.history() if h.operation == "UPSERT"]
    assert len(upserts) == 3
    assert not list((tmp_path / "t" / "segments").rglob("*-p*-a*.cblt"))  # parts removed
    # a batch write upserts too
    spark.createDataFrame([(20, 9), (21, 9)], DDL).write.format("carbonlite").mode("append").save(
        path
    )
    assert by_id(cl.open_table(path).to_arrow()) == want | {20: 9, 21: 9}


@pytest.mark.slow
def test_stream_source_refuses_delete_commits_unless_skipped(
    spark: Any, tmp_path: Any, stop_queries: None
) -> None:
    path = str(tmp_path / "t")
    t = cl.create_table(path, SCHEMA)
    t.append(pa.table({"id": [1, 2], "v": [1, 2]}, schema=SCHEMA))
    t.delete(pc.field("id") == 1)
    t.append(pa.table({"id": [3], "v": [3]}, schema=SCHEMA))
    with pytest.raises(cl.CarbonLiteError, match="skipChangeCommits=true") as info:
        read_into_memory(spark, path, startingVersion=1)
    assert "version 2" in str(info.value) and "DELETE" in str(info.value)
    _, rows = read_into_memory(spark, path, startingVersion=1, skipChangeCommits="true")
    assert sorted(rows.column("id").to_pylist()) == [1, 2, 3]  # rows as appended


def test_merge_inside_foreach_batch(spark: Any, tmp_path: Any, stop_queries: None) -> None:
    """The documented pattern: each micro-batch merged by key with ``Table.merge``."""
    source, path, ck = str(tmp_path / "src"), str(tmp_path / "t"), str(tmp_path / "ck")
    os.makedirs(source)
    pq.write_table(pa.table({"id": [1, 2], "v": [10, 20]}, schema=SCHEMA), f"{source}/0.parquet")
    pq.write_table(pa.table({"id": [2, 3], "v": [21, 30]}, schema=SCHEMA), f"{source}/1.parquet")
    in_order(source, 2)
    cl.create_table(path, SCHEMA).append(pa.table({"id": [1], "v": [0]}, schema=SCHEMA))

    def upsert(batch_df: Any, batch_id: int) -> None:
        cl.open_table(path).merge(batch_df.toArrow(), on=["id"])

    finish(
        spark.readStream.schema(DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(source)
        .writeStream.foreachBatch(upsert)
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start()
    )
    assert by_id(cl.open_table(path).to_arrow()) == {1: 10, 2: 21, 3: 30}


def test_spark_sql_does_not_route_row_level_commands_to_a_python_source(
    spark: Any, tmp_path: Any
) -> None:
    """PySpark 4.3 refuses DELETE/UPDATE/MERGE on Python data sources before they see them
    (docs/SPARK.md gives the Python forms); this tells us when Spark starts routing them."""
    import carbonlite.spark

    path = str(tmp_path / "t")
    cl.create_table(path, SCHEMA).append(pa.table({"id": [1, 2], "v": [1, 2]}, schema=SCHEMA))
    name = f"rows_{os.getpid()}"
    carbonlite.spark.register_table(spark, name, path)
    for sql in (
        f"DELETE FROM {name} WHERE id = 1",
        f"UPDATE {name} SET v = 5 WHERE id = 2",
        f"MERGE INTO {name} USING (SELECT 1 AS id) s ON {name}.id = s.id WHEN MATCHED THEN DELETE",
    ):
        with pytest.raises(Exception, match="not support") as info:
            spark.sql(sql)
        assert "carbonlite" not in type(info.value).__module__
    assert cl.open_table(path).count_rows() == 2


def test_change_feed_stream(spark: Any, tmp_path: Any, stop_queries: None) -> None:
    """readChangeFeed=true streams every commit's changes with Table.changes' columns; from
    the start, the rows at the latest version first arrive as inserts."""
    path = str(tmp_path / "t")
    t = cl.create_table(path, SCHEMA)
    t.append(pa.table({"id": [1, 2, 3], "v": [1, 2, 3]}, schema=SCHEMA))  # 1
    t.delete(pc.field("id") == 1)  # 2
    t.update(pc.field("id") == 2, {"v": 20})  # 3
    t.merge(pa.table({"id": [3, 4], "v": [30, 40]}, schema=SCHEMA), on=["id"])  # 4
    t.finish_streaming()
    t.handoff()  # no changes
    key = ["_commit_version", "_change_type", "id", "v"]

    def rows(table: pa.Table) -> list[tuple[Any, ...]]:
        return sorted(tuple(r[k] for k in key) for r in table.select(key).to_pylist())

    _, got = read_into_memory(spark, path, readChangeFeed="true", startingVersion=1)
    assert rows(got) == rows(t.changes(1))
    assert ("update_preimage" in got.column("_change_type").to_pylist()) and len(rows(got)) == 9
    _, initial = read_into_memory(spark, path, readChangeFeed="true", maxFilesPerTrigger=1)
    assert rows(initial) == [(t.version, "insert", i, v) for i, v in ((2, 20), (3, 30), (4, 40))]
