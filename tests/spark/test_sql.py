"""CarbonLite tables by name in Spark SQL and the catalog: register_table, every route Spark
resolves by name, and the forms Spark 4.3 cannot route to a Python source refused without a
catalog entry left behind."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.errors import InvalidOptionError, TableExistsError, TableNotFoundError
from carbonlite.spark import register_table
from carbonlite.spark.catalog import bound_source_name

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("i", pa.int64()), ("s", pa.string())])


def _name() -> str:
    return f"t_{uuid.uuid4().hex[:8]}"


def _table(path: Path, rows: int = 3) -> cl.Table:
    t = cl.create_table(path, SCHEMA)
    t.append(pa.table({"i": list(range(rows)), "s": [f"r{i}" for i in range(rows)]}, SCHEMA))
    return t


def _ids(t: cl.Table) -> list[int]:
    return sorted(t.refresh().to_arrow().column("i").to_pylist())


def test_select_insert_and_write_to_by_name(spark: Any, tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    name = _name()
    provider = register_table(spark, name, str(tmp_path / "t"))
    assert provider == bound_source_name(t.path)
    assert sorted(r.i for r in spark.table(name).collect()) == [0, 1, 2]
    assert [r.s for r in spark.sql(f"SELECT s FROM {name} WHERE i = 1").collect()] == ["r1"]
    spark.sql(f"INSERT INTO {name} VALUES (10, 'x'), (11, 'y')")
    assert _ids(t) == [0, 1, 2, 10, 11]
    spark.createDataFrame([(20, "z")], "i long, s string").writeTo(name).append()
    assert _ids(t) == [0, 1, 2, 10, 11, 20]
    assert t.history(1)[0].operation == "WRITE"
    spark.sql(f"INSERT OVERWRITE {name} VALUES (7, 'o')")
    assert _ids(t) == [7]
    assert spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0].n == 1


def test_registering_again_reuses_the_entry_and_follows_schema_changes(
    spark: Any, tmp_path: Path
) -> None:
    t = _table(tmp_path / "t")
    name = _name()
    register_table(spark, name, tmp_path / "t")
    register_table(spark, name, f"file:{tmp_path / 't'}")  # same table, another spelling
    t.add_columns(pa.field("extra", pa.float64()))
    register_table(spark, name, tmp_path / "t")
    assert spark.table(name).columns == ["i", "s", "extra"]
    assert spark.table(name).count() == 3


def test_register_creates_a_missing_table_given_a_schema(spark: Any, tmp_path: Path) -> None:
    name = _name()
    with pytest.raises(TableNotFoundError, match="pass schema="):
        register_table(spark, name, tmp_path / "new")
    assert not spark.catalog.tableExists(name)
    register_table(spark, name, tmp_path / "new", schema=SCHEMA, sort_columns=["i"])
    spark.sql(f"INSERT INTO {name} VALUES (3, 'c')")
    t = cl.open_table(tmp_path / "new")
    assert t.sort_columns == ("i",)
    assert _ids(t) == [3]


def test_a_name_taken_by_another_table_is_refused(spark: Any, tmp_path: Path) -> None:
    _table(tmp_path / "a")
    _table(tmp_path / "b")
    name = _name()
    register_table(spark, name, tmp_path / "a")
    with pytest.raises(TableExistsError, match="not the CarbonLite table at"):
        register_table(spark, name, tmp_path / "b")
    with pytest.raises(InvalidOptionError, match="not a Spark table identifier"):
        register_table(spark, "bad name; DROP", tmp_path / "a")


@pytest.mark.slow
def test_stream_to_table_and_read_stream_table(
    spark: Any, tmp_path: Path, stop_queries: None
) -> None:
    t = _table(tmp_path / "t", rows=0)
    name = _name()
    register_table(spark, name, tmp_path / "t")
    source = _table(tmp_path / "src", rows=5)
    query = (
        spark.readStream.format("carbonlite")
        .load(source.path)
        .writeStream.option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .toTable(name)
    )
    query.awaitTermination(120)
    assert _ids(t) == [0, 1, 2, 3, 4]
    out = tmp_path / "copy"
    copy = (
        spark.readStream.table(name)
        .writeStream.format("carbonlite")
        .option("checkpointLocation", str(tmp_path / "ck2"))
        .trigger(availableNow=True)
        .start(str(out))
    )
    copy.awaitTermination(120)
    assert _ids(cl.open_table(out)) == [0, 1, 2, 3, 4]


def test_create_table_using_carbonlite_is_refused_and_leaves_no_entry(
    spark: Any, tmp_path: Path
) -> None:
    _table(tmp_path / "t")
    name = _name()
    with pytest.raises(Exception, match="register_table") as raised:
        spark.sql(f"CREATE TABLE {name} USING carbonlite LOCATION '{tmp_path / 't'}'")
    assert "CREATE TABLE ... USING carbonlite is not supported" in str(raised.value)
    assert not spark.catalog.tableExists(name)
    assert _ids(cl.open_table(tmp_path / "t")) == [0, 1, 2]


def test_a_temporary_view_reads_and_inserts(spark: Any, tmp_path: Path) -> None:
    t = _table(tmp_path / "t")
    view = _name()
    spark.sql(f"CREATE TEMPORARY VIEW {view} USING carbonlite OPTIONS (path 'file:{t.path}')")
    assert spark.sql(f"SELECT count(*) AS n FROM {view}").collect()[0].n == 3
    spark.sql(f"INSERT INTO {view} VALUES (5, 'e')")
    assert _ids(t) == [0, 1, 2, 5]


def test_names_spark_creates_without_asking_the_source_say_how_to_fix(
    spark: Any, tmp_path: Path
) -> None:
    """saveAsTable on a new name: Spark creates the entry before the source runs, and then
    gives the source no path; the error says what to do instead."""
    name = _name()
    df = spark.createDataFrame([(1, "a")], "i long, s string")
    with pytest.raises(Exception, match="register_table"):
        df.write.format("carbonlite").saveAsTable(name)
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    register_table(spark, name, tmp_path / "t", schema=SCHEMA)
    df.writeTo(name).append()
    assert _ids(cl.open_table(tmp_path / "t")) == [1]


@pytest.mark.parametrize(
    "statement",
    [
        "ALTER TABLE {name} ADD COLUMNS (extra int)",
        "alter table {name} RENAME COLUMN i TO key",
        "ALTER TABLE default.{name} DROP COLUMN s",
        "ALTER TABLE `{name}` SET TBLPROPERTIES ('compression_level' = '3')",
    ],
)
def test_alter_table_on_a_carbonlite_table_is_refused_before_spark_splits_them(
    spark: Any, tmp_path: Path, statement: str
) -> None:
    """Issue 40 §3: Spark's ALTER TABLE would change only its catalog entry (reads and inserts
    by name then fail until register_table runs again): refused, naming the Python call, and
    the table and its entry stay as they were."""
    from carbonlite.errors import UnsupportedStatementError

    t = _table(tmp_path / "t")
    name = _name()
    register_table(spark, name, str(tmp_path / "t"))
    version = t.version
    with pytest.raises(UnsupportedStatementError, match="register_table"):
        spark.sql(statement.format(name=name))
    assert t.refresh().version == version
    assert spark.table(name).columns == t.schema.names
    assert sorted(r[0] for r in spark.sql(f"SELECT i FROM {name}").collect()) == _ids(t)


def test_alter_table_on_other_tables_is_sparks(spark: Any) -> None:
    name = _name()
    spark.sql(f"CREATE TABLE {name} (id int) USING parquet")
    try:
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS (extra int)")
        assert spark.table(name).columns == ["id", "extra"]
    finally:
        spark.sql(f"DROP TABLE {name}")


def test_spark_table_reads_natively_with_the_readers_options(spark: Any, tmp_path: Path) -> None:
    """``spark.table(name)`` and ``spark.read.table(name)`` of a registered table are Spark's
    Parquet scan over its handed-off files plus the tail, at the version a ``versionAsOf``
    option gives; a table of another source is read as Spark reads it."""
    t = _table(tmp_path / "t", rows=5)
    t.finish_streaming()
    t.handoff()
    handed_off = t.version
    t.append(pa.table({"i": [100], "s": ["tail"]}, SCHEMA))
    name = _name()
    register_table(spark, name, tmp_path / "t")
    for df in (spark.table(name), spark.read.table(name)):
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert "FileScan parquet" in plan and "BatchScan carbonlite" in plan, plan
        assert sorted(r.i for r in df.collect()) == [0, 1, 2, 3, 4, 100]
    old = spark.read.option("versionAsOf", handed_off).table(name)
    assert sorted(r.i for r in old.collect()) == [0, 1, 2, 3, 4]
    other = _name()
    spark.createDataFrame([(1, "a")], "i long, s string").write.saveAsTable(other)
    assert "FileScan parquet" in spark.table(other)._jdf.queryExecution().toString()
    assert [r.s for r in spark.read.table(other).collect()] == ["a"]
    spark.sql(f"DROP TABLE {other}")
