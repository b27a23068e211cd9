"""``CarbonTable``, delta-spark's ``DeltaTable`` for CarbonLite: finding a table, its rows,
history, detail, restore, optimize and vacuum (the row-level changes are in
``test_carbon_table_changes.py``)."""

from __future__ import annotations

import datetime
import time
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.errors import InvalidOptionError, TableNotFoundError
from carbonlite.spark import CarbonTable, register_table

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _rows(ids: range, tag: str) -> pa.Table:
    return pa.table({"id": list(ids), "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


def _ids(df: Any) -> list[int]:
    return sorted(r["id"] for r in df.collect())


@pytest.fixture
def table(tmp_path: Any) -> cl.Table:
    t = cl.create_table(str(tmp_path / "t"), SCHEMA, properties={"blocklet_max_rows": "4"})
    t.append(_rows(range(0, 10), "a"))
    t.append(_rows(range(10, 20), "b"))
    return t


def test_for_path_reads_the_latest_rows_and_alias_names_them(spark: Any, table: cl.Table) -> None:
    ct = CarbonTable.forPath(spark, table.path)
    assert _ids(ct.toDF()) == list(range(20))
    table.append(_rows(range(20, 25), "c"))
    assert _ids(ct.toDF()) == list(range(25))  # each toDF is the latest version
    aliased = ct.alias("t").toDF()
    assert _ids(aliased.where("t.id < 3")) == [0, 1, 2]
    assert "t" in repr(ct.alias("t"))


def test_for_path_of_no_table_and_is_carbon_table(spark: Any, tmp_path: Any) -> None:
    with pytest.raises(TableNotFoundError, match="no CarbonLite table"):
        CarbonTable.forPath(spark, str(tmp_path / "none"))
    assert CarbonTable.isCarbonTable(spark, str(tmp_path / "none")) is False
    (tmp_path / "plain").mkdir()
    assert CarbonTable.isCarbonTable(spark, str(tmp_path / "plain")) is False
    cl.create_table(str(tmp_path / "yes"), SCHEMA)
    assert CarbonTable.isCarbonTable(spark, str(tmp_path / "yes")) is True


def test_for_name_finds_a_registered_table_and_refuses_others(spark: Any, table: cl.Table) -> None:
    register_table(spark, "ct_by_name", table.path)
    ct = CarbonTable.forName(spark, "ct_by_name")
    assert _ids(ct.toDF()) == list(range(20))
    with pytest.raises(TableNotFoundError, match=r"no table .ct_missing.*register_table"):
        CarbonTable.forName(spark, "ct_missing")
    spark.sql("CREATE TABLE ct_parquet (id long) USING parquet")
    try:
        with pytest.raises(TableNotFoundError, match=r"not a CarbonLite table.*parquet"):
            CarbonTable.forName(spark, "ct_parquet")
    finally:
        spark.sql("DROP TABLE ct_parquet")
    with pytest.raises(InvalidOptionError, match="not a Spark table identifier"):
        CarbonTable.forName(spark, "a b")


def test_history_is_a_dataframe_with_deltas_columns(spark: Any, table: cl.Table) -> None:
    table.delete(pc.field("id") < 5)
    ct = CarbonTable.forPath(spark, table.path)
    history = ct.history()
    for name in ("version", "timestamp", "operation", "operationParameters", "readVersion"):
        assert name in history.columns
    rows = history.collect()
    assert [r["version"] for r in rows] == [3, 2, 1, 0]  # newest first
    assert rows[0]["operation"] == "DELETE"
    assert rows[0]["operationMetrics"]["numRemovedRows"] == "5"
    assert rows[0]["isBlindAppend"] is False
    assert rows[1]["operationMetrics"]["numOutputRows"] == "10"
    assert rows[1]["isBlindAppend"] is True
    assert [r["version"] for r in ct.history(2).collect()] == [3, 2]
    assert [r.version for r in table.history()] == [r["version"] for r in rows]


def test_detail_describes_the_table(spark: Any, tmp_path: Any) -> None:
    t = cl.create_table(
        str(tmp_path / "d"),
        pa.schema([("day", pa.string()), ("id", pa.int64())]),
        partition_by=["day"],
        sort_columns=["id"],
        properties={"blocklet_max_rows": "4"},
    )
    t.append(pa.table({"day": ["x", "x", "y"], "id": [1, 2, 3]}))
    t.delete(pc.field("id") == 2)
    (row,) = CarbonTable.forPath(spark, t.path).detail().collect()
    assert row["format"] == "carbonlite"
    assert row["id"] == t.table_id
    assert row["location"] == t.path
    assert row["partitionColumns"] == ["day"]
    assert row["clusteringColumns"] == ["id"]
    assert row["numRows"] == 2
    assert row["numDeletedRows"] == 1
    assert row["numFiles"] == 2 == sum(s.files for s in t.segments())  # one per partition
    assert row["sizeInBytes"] > 0
    assert row["version"] == t.version
    assert row["properties"]["blocklet_max_rows"] == "4"
    assert row["lastModified"] >= row["createdAt"]


def test_restore_to_version_and_to_timestamp(spark: Any, table: cl.Table) -> None:
    ct = CarbonTable.forPath(spark, table.path)
    table.delete(pc.field("id") >= 15)
    (restored,) = ct.restoreToVersion(1).collect()  # version 1: the first ten rows
    assert restored["version"] == 4
    assert _ids(ct.toDF()) == list(range(10))
    assert restored["num_of_files_after_restore"] >= 1
    assert cl.open_table(table.path).history(1)[0].operation == "RESTORE"

    at_two = table.history()[-3].timestamp  # version 2's commit time
    time.sleep(0.01)
    # a naive timestamp string is in the session's time zone (UTC in the tests' session)
    text = at_two.astimezone(datetime.timezone.utc).replace(tzinfo=None).isoformat(" ")
    ct.restoreToTimestamp(text)
    assert _ids(ct.toDF()) == list(range(20))
    with pytest.raises(InvalidOptionError, match="restoreToTimestamp"):
        ct.restoreToVersion("2")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="restoreToVersion"):
        ct.restoreToTimestamp(2)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="ISO 8601"):
        ct.restoreToTimestamp("yesterday")


def test_restore_to_timestamp_reads_a_naive_time_in_the_session_zone(
    spark: Any, table: cl.Table
) -> None:
    ct = CarbonTable.forPath(spark, table.path)
    at_one = table.history()[-2].timestamp  # version 1
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        # version 1's commit time on New York's clock, without a zone: read in the session's
        # zone it names version 1; read as UTC it would be 4-5 hours earlier, before the table
        wall = at_one.astimezone(ZoneInfo("America/New_York")).replace(tzinfo=None)
        ct.restoreToTimestamp(wall.isoformat(" "))
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert _ids(ct.toDF()) == list(range(10))


def test_optimize_compacts_on_the_executors(spark: Any, tmp_path: Any) -> None:
    t = cl.create_table(str(tmp_path / "o"), SCHEMA, properties={"blocklet_max_rows": "4"})
    for n in range(4):
        t.append(_rows(range(n * 5, n * 5 + 5), "x"))
        t.finish_streaming()
    t.append(_rows(range(20, 23), "y"))  # the open STREAMING segment is closed and handed off
    before = len(t.refresh().segments())
    ct = CarbonTable.forPath(spark, t.path)
    (row,) = ct.optimize().executeCompaction().collect()
    assert row["path"] == t.path
    assert row["metrics"]["numStreamingSegmentsClosed"] == 1
    assert row["metrics"]["numSegmentsHandedOff"] == 5
    assert row["metrics"]["numRowsRewritten"] >= 23
    live = [s for s in t.refresh().segments() if s.status in ("SUCCESS", "STREAMING")]
    assert len(live) == 1 < before
    assert _ids(ct.toDF()) == list(range(23))
    history = {r["version"]: r for r in ct.history(len(row["versions"])).collect()}
    assert sorted(history) == sorted(row["versions"])
    assert not any(r["dataChange"] for r in history.values())  # streams never see rows again


def test_optimize_merges_a_partitions_small_streaming_files(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "p")
    schema = pa.schema([("day", pa.string()), ("id", pa.int64())])
    cl.create_table(path, schema, partition_by=["day"])
    for n in range(4):  # each Spark write adds a file of its own to each partition written
        rows = [("a", 2 * n), ("b", 2 * n + 1)]
        spark.createDataFrame(rows, "day string, id long").write.format("carbonlite").mode(
            "append"
        ).save(path)
    t = cl.open_table(path)
    assert [p.files for p in t.partitions()] == [4, 4]
    CarbonTable.forPath(spark, path).optimize().executeCompaction()
    assert [p.files for p in t.refresh().partitions()] == [1, 1]
    assert sorted(t.to_arrow()["id"].to_pylist()) == list(range(8))


def test_optimize_where_compacts_only_the_partitions_it_selects(spark: Any, tmp_path: Any) -> None:
    """Delta's ``optimize().where(partition filter)``: each selected partition's segments
    become one; the others are left as they were (their streaming segments are closed, so
    writers go on into new ones)."""
    path = str(tmp_path / "p")
    schema = pa.schema([("day", pa.string()), ("id", pa.int64())])
    cl.create_table(path, schema, partition_by=["day"])
    for n in range(3):
        rows = [("a", 3 * n), ("b", 3 * n + 1), ("c", 3 * n + 2)]
        spark.createDataFrame(rows, "day string, id long").write.format("carbonlite").mode(
            "append"
        ).save(path)
    t = cl.open_table(path)
    assert [p.files for p in t.partitions()] == [3, 3, 3]
    ct = CarbonTable.forPath(spark, path)
    (row,) = ct.optimize().where("day >= 'b'").executeCompaction().collect()
    assert [p.files for p in t.refresh().partitions()] == [3, 1, 1]
    assert row["metrics"]["numSegmentsCompacted"] == 2
    assert sorted(t.to_arrow()["id"].to_pylist()) == list(range(9))
    ct.optimize().where("day = 'a'").executeCompaction()
    assert [p.files for p in t.refresh().partitions()] == [1, 1, 1]
    (again,) = ct.optimize().where("day = 'a'").executeCompaction().collect()
    assert again["metrics"]["numSegmentsCompacted"] == 0  # one columnar segment: nothing to do
    assert sorted(t.refresh().to_arrow()["id"].to_pylist()) == list(range(9))


def test_optimize_where_and_z_order_refusals(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "p")
    cl.create_table(
        path, pa.schema([("day", pa.string()), ("id", pa.int64())]), partition_by=["day"]
    )
    ct = CarbonTable.forPath(spark, path)
    with pytest.raises(cl.InvalidOptionError, match=r"\['id'\] are not partition columns"):
        ct.optimize().where("id > 5")
    with pytest.raises(cl.InvalidFilterError):
        ct.optimize().where("day = ")
    with pytest.raises(cl.UnsupportedOperationError, match=r"does not Z-order.*sort_columns"):
        ct.optimize().executeZOrderBy("id")
    flat = CarbonTable.forPath(spark, str(cl.create_table(str(tmp_path / "f"), SCHEMA).path))
    with pytest.raises(cl.InvalidOptionError, match="not partitioned"):
        flat.optimize().where("id = 1")


def test_vacuum_deletes_compacted_data_past_retention(spark: Any, tmp_path: Any) -> None:
    t = cl.create_table(str(tmp_path / "v"), SCHEMA)
    t.append(_rows(range(5), "x"))
    t.finish_streaming()
    t.handoff()
    ct = CarbonTable.forPath(spark, t.path)
    (kept,) = ct.vacuum().collect()  # the default 7 days keeps the compacted segment
    assert kept["numDeletedFiles"] == 0
    assert kept["retentionHours"] == 168
    with pytest.raises(InvalidOptionError, match=r"retentionDurationCheck\.enabled=false"):
        ct.vacuum(0)
    with pytest.raises(InvalidOptionError, match="number of hours"):
        ct.vacuum("0")  # type: ignore[arg-type]
    spark.conf.set("spark.carbonlite.retentionDurationCheck.enabled", "false")
    try:
        (gone,) = ct.vacuum(0).collect()
    finally:
        spark.conf.unset("spark.carbonlite.retentionDurationCheck.enabled")
    assert gone["numDeletedFiles"] >= 1
    assert gone["numDeletedBytes"] > 0
    assert _ids(ct.toDF()) == list(range(5))
    assert t.refresh().verify().ok
