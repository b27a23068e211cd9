"""``df.write.format("carbonlite")``: every save mode, one atomic commit per write."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from carbonlite import open_table
from carbonlite.errors import SchemaMismatchError, TableExistsError
from tests.support.spark_data import SOURCE_SCHEMA, assert_same_rows, source_rows

pytestmark = pytest.mark.spark


def frame(spark: Any, first_id: int, count: int, partitions: int = 3) -> tuple[Any, pa.Table]:
    rows = source_rows(first_id, count)
    return spark.createDataFrame(rows).repartition(partitions), rows


def assert_one_write_commit(path: str, version: int, rows: int, files: int, mode: str) -> None:
    """``version`` is the write's only commit: all ``rows`` of its ``files`` tasks, in one."""
    t = open_table(path)
    (h,) = [h for h in t.history() if h.version == version]
    assert (h.operation, h.parameters.get("mode"), h.rows) == ("WRITE", mode, rows)
    new_files = [f for _, f in t.snapshot(version).iter_files() if f.created_version == version]
    assert len(new_files) == files, "one file per task, all committed in the same version"


def test_append_and_overwrite(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    df1, rows1 = frame(spark, 0, 90)
    df1.write.format("carbonlite").mode("append").save(path)  # creates the table
    df2, rows2 = frame(spark, 1_000, 60)
    df2.write.format("carbonlite").mode("append").save(path)
    t = open_table(path)
    assert t.version == 2
    assert_one_write_commit(path, 1, 90, 3, "append")
    assert_one_write_commit(path, 2, 60, 3, "append")
    assert_same_rows(t.to_arrow(), pa.concat_tables([rows1, rows2]))
    assert t.schema == SOURCE_SCHEMA

    df3, rows3 = frame(spark, 5_000, 45)
    df3.write.format("carbonlite").mode("overwrite").save(path)
    t = open_table(path)
    assert t.version == 3
    assert_one_write_commit(path, 3, 45, 3, "overwrite")
    assert t.history(limit=1)[0].rows_removed == 150
    assert_same_rows(t.to_arrow(), rows3)
    assert_same_rows(t.to_arrow(version=2), pa.concat_tables([rows1, rows2]), context="time travel")


@pytest.mark.parametrize("mode", [None, "error", "errorifexists"])
def test_error_mode(spark: Any, tmp_path: Any, mode: str | None) -> None:
    """The default save mode: creates a missing table, refuses an existing one."""
    path = str(tmp_path / "t")
    df, rows = frame(spark, 0, 30, partitions=2)
    writer = df.write.format("carbonlite")
    if mode is not None:
        writer = writer.mode(mode)
    writer.save(path)
    t = open_table(path)
    assert t.version == 1
    assert_same_rows(t.to_arrow(), rows)
    assert_one_write_commit(path, 1, 30, 2, mode or "errorifexists")

    again = frame(spark, 100, 10)[0].write.format("carbonlite")
    if mode is not None:
        again = again.mode(mode)
    with pytest.raises(TableExistsError, match="already exists"):
        again.save(path)
    t = open_table(path)
    assert t.version == 1
    assert_same_rows(t.to_arrow(), rows)


def test_ignore_mode(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    df, rows = frame(spark, 0, 30)
    df.write.format("carbonlite").mode("ignore").save(path)  # missing: written
    assert open_table(path).version == 1
    frame(spark, 100, 10)[0].write.format("carbonlite").mode("ignore").save(path)  # exists: no-op
    t = open_table(path)
    assert t.version == 1
    assert_same_rows(t.to_arrow(), rows)


def test_option_path_and_table_properties(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    df, rows = frame(spark, 0, 50, partitions=1)
    (
        df.write.format("carbonlite")
        .mode("append")
        .option("path", path)
        .option("sortColumns", "id")
        .option("property.blocklet_max_rows", "10")
        .save()
    )
    t = open_table(path)
    assert t.sort_columns == ("id",)
    assert t.properties["blocklet_max_rows"] == "10"
    assert t.snapshot().segments["0"].num_blocklets == 5
    assert_same_rows(t.to_arrow(), rows)


def test_schema_mismatch_is_refused(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    frame(spark, 0, 5)[0].write.format("carbonlite").mode("append").save(path)
    other = spark.createDataFrame([(1, 2)], "id long, k int")
    with pytest.raises(SchemaMismatchError, match=r"^the data written by Spark does not match"):
        other.write.format("carbonlite").mode("append").save(path)
    assert open_table(path).version == 1


def test_ignore_mode_leaves_a_table_of_another_schema_alone(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    df, rows = frame(spark, 0, 20, partitions=2)
    df.write.format("carbonlite").save(path)
    other = spark.createDataFrame([("x", 1.5)], "name string, weight double")
    other.write.format("carbonlite").mode("ignore").save(path)  # no error, nothing written
    t = open_table(path)
    assert t.version == 1 and t.schema == SOURCE_SCHEMA
    assert_same_rows(t.to_arrow(), rows)


def test_foreach_batch_with_txn_options_writes_each_batch_once(spark: Any, tmp_path: Any) -> None:
    """Delta's idempotent writes: replaying a batch id already committed writes nothing."""
    path = str(tmp_path / "t")
    batches = {b: frame(spark, b * 100, 40, partitions=2) for b in range(4)}

    def write_batch(batch_id: int) -> None:
        df, _ = batches[batch_id]
        (
            df.write.format("carbonlite")
            .mode("append")
            .option("txnAppId", "ingest-app")
            .option("txnVersion", batch_id)
            .save(path)
        )

    for b in range(4):
        write_batch(b)
    write_batch(3)  # the replay after a crash between the write and the checkpoint
    write_batch(1)  # an older one too
    t = open_table(path)
    assert t.count_rows() == 160
    assert t.transaction_version("ingest-app") == 3
    assert t.version == 4  # one commit per batch, none for the replays
    (h,) = t.history(limit=1)
    assert (h.parameters["txnAppId"], h.parameters["txnVersion"]) == ("ingest-app", "3")
    assert_same_rows(t.to_arrow(), pa.concat_tables([r for _, r in batches.values()]))


def test_txn_options_go_together(spark: Any, tmp_path: Any) -> None:
    df, _ = frame(spark, 0, 5, partitions=1)
    with pytest.raises(Exception, match="txnAppId and txnVersion go together"):
        df.write.format("carbonlite").mode("append").option("txnVersion", 1).save(
            str(tmp_path / "t")
        )
    with pytest.raises(Exception, match="txnVersion"):
        df.write.format("carbonlite").mode("append").option("txnAppId", "a").option(
            "txnVersion", "soon"
        ).save(str(tmp_path / "t"))
