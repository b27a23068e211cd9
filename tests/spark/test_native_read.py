"""Batch reads by Spark's own Parquet reader (issue 40 §1, ``spark/native_read.py``): a
handed-off table's columnar Parquet files are scanned by Spark's vectorized reader, the
streaming tail by the Python source, and the rows are CarbonLite's own read of the same
version after renames, widenings, added columns with defaults, deletes and updates; the
DataFrame reads the same rows under every reuse the Python source's pushdown got wrong."""

from __future__ import annotations

import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("k", pa.string()),
        ("n", pa.int32()),
        ("ts", pa.timestamp("us")),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)
T0 = datetime.datetime(2026, 1, 1, 12, 0, 0)


def _rows(first: int, count: int, schema: pa.Schema = SCHEMA) -> pa.Table:
    ids = list(range(first, first + count))
    values = {
        "id": pa.array(ids, pa.int64()),
        "k": pa.array([f"k{i % 3}" for i in ids]),
        "kind": pa.array([f"k{i % 3}" for i in ids]),
        "n": pa.array([i * 10 for i in ids], schema.field("n").type),
        "ts": pa.array([T0 + datetime.timedelta(seconds=i) for i in ids], pa.timestamp("us")),
        "at": pa.array(
            [T0 + datetime.timedelta(minutes=i) for i in ids], pa.timestamp("us", tz="UTC")
        ),
        "x": pa.array([i % 5 if i % 2 else None for i in ids], pa.int64()),
    }
    return pa.table([values[f.name] for f in schema], schema=schema)


def _evolved(path: str) -> cl.Table:
    """Handed-off files of two schemas, deletes and an update on them, and a streaming tail:
    rows 0-99 (k, n int32), then k renamed to kind, n widened to int64, x added with default
    7, rows 100-149 handed off, rows 150-159 left streaming; ids divisible by 7 deleted, id 3
    updated."""
    t = cl.create_table(path, SCHEMA)
    t.append(_rows(0, 100))
    t.finish_streaming()
    t.handoff()
    t.rename_column("k", "kind")
    t.widen_column("n", pa.int64())
    t.add_columns(pa.field("x", pa.int64()), defaults={"x": 7})
    t.append(_rows(100, 50, t.schema))
    t.finish_streaming()
    t.handoff()
    t.delete(pc.field("id").isin(list(range(0, 160, 7))))
    t.update(pc.field("id") == 3, {"kind": "updated"})
    t.append(_rows(150, 10, t.schema))
    return t


def _plan(df: Any) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def _canon(rows: Any) -> list[tuple[Any, ...]]:
    out = []
    for r in rows:
        d = r.asDict() if hasattr(r, "asDict") else r
        out.append(
            tuple(
                v.replace(tzinfo=None) if isinstance(v, datetime.datetime) else v
                for v in d.values()
            )
        )
    return sorted(out, key=lambda r: r[0])


def test_the_default_read_is_sparks_parquet_scan_with_carbonlite_rows(
    spark: Any, tmp_path: Any
) -> None:
    t = _evolved(str(tmp_path / "t"))
    df = spark.read.format("carbonlite").load(t.path)
    plan = _plan(df)
    assert plan.count("FileScan parquet") == 2, plan  # two schemas of files
    assert "BatchScan carbonlite" in plan  # the streaming tail
    assert df.columns == t.schema.names
    assert _canon(df.collect()) == _canon(t.to_arrow().to_pylist())
    got = {r["id"]: r for r in df.collect()}
    assert got[3]["kind"] == "updated" and 7 not in got and got[0 + 1]["x"] == 7


def test_time_travel_reads_the_files_of_that_version(spark: Any, tmp_path: Any) -> None:
    t = _evolved(str(tmp_path / "t"))
    for version in (3, 9, t.version - 1):
        df = spark.read.format("carbonlite").option("versionAsOf", version).load(t.path)
        assert _canon(df.collect()) == _canon(t.to_arrow(version=version).to_pylist()), version
    when = t.history(1)[0].timestamp
    df = spark.read.format("carbonlite").option("timestampAsOf", when).load(t.path)
    assert df.count() == t.to_arrow().num_rows


def test_every_reuse_of_one_dataframe_reads_its_rows(spark: Any, tmp_path: Any) -> None:
    """The cases pushdown through the Python source got wrong (docs/SPARK.md, Known problems):
    the DataFrame queried again without its filter, a union and a self-join of one DataFrame
    with different filters; and rows appended after the DataFrame was made stay out."""
    t = _evolved(str(tmp_path / "t"))
    table = t.to_arrow()
    df = spark.read.format("carbonlite").load(t.path)
    assert df.where("id < 40").count() == table.filter(pc.field("id") < 40).num_rows
    assert df.count() == table.num_rows
    union = df.where("id < 20").union(df.where("id >= 140"))
    expected = table.filter((pc.field("id") < 20) | (pc.field("id") >= 140)).num_rows
    assert union.count() == expected
    a, b = df.where("n > 500").alias("a"), df.where("n <= 500").alias("b")
    joined = a.join(b, a["kind"] == b["kind"]).count()
    counts = table.group_by("kind").aggregate([("id", "count")]).to_pylist()
    big = table.filter(pc.field("n") > 500).group_by("kind").aggregate([("id", "count")])
    small = table.filter(pc.field("n") <= 500).group_by("kind").aggregate([("id", "count")])
    by_kind = {r["kind"]: r["id_count"] for r in small.to_pylist()}
    assert counts and joined == sum(
        r["id_count"] * by_kind.get(r["kind"], 0) for r in big.to_pylist()
    )
    t.append(_rows(1000, 5, t.schema))
    assert df.count() == table.num_rows


def test_filters_push_down_and_columns_prune(spark: Any, tmp_path: Any) -> None:
    t = _evolved(str(tmp_path / "t"))
    df = spark.read.format("carbonlite").load(t.path).where("id >= 120").select("id", "x")
    plan = _plan(df)
    assert "PushedFilters: [IsNotNull(id), GreaterThanOrEqual(id,120)]" in plan, plan
    assert "ReadSchema: struct<id:bigint,x:bigint" in plan, plan  # (and the row index)
    assert "ReadSchema: struct<id:bigint,kind" not in plan, plan
    expected = t.to_arrow(filter=pc.field("id") >= 120, columns=["id", "x"])
    assert _canon(df.collect()) == _canon(expected.to_pylist())


def test_a_user_schema_reads_its_columns(spark: Any, tmp_path: Any) -> None:
    t = _evolved(str(tmp_path / "t"))
    df = spark.read.format("carbonlite").schema("id bigint, x bigint").load(t.path)
    assert "FileScan parquet" in _plan(df)
    assert df.columns == ["id", "x"]
    assert _canon(df.collect()) == _canon(t.to_arrow(columns=["id", "x"]).to_pylist())


def test_reads_the_native_plan_cannot_take_go_to_the_python_source(
    spark: Any, tmp_path: Any
) -> None:
    t = _evolved(str(tmp_path / "t"))
    by_option = spark.read.format("carbonlite").option("filter", '[["id", "<", 50]]').load(t.path)
    off = spark.read.format("carbonlite").option("nativeRead", "false").load(t.path)
    for df in (by_option, off):
        assert "FileScan parquet" not in _plan(df)
    assert by_option.count() == t.to_arrow(filter=pc.field("id") < 50).num_rows
    assert _canon(off.collect()) == _canon(t.to_arrow().to_pylist())
    unsigned = cl.create_table(str(tmp_path / "u"), pa.schema([("id", pa.uint32())]))
    unsigned.append(pa.table({"id": pa.array([1, 2, 4_000_000_000], pa.uint32())}))
    unsigned.finish_streaming()
    unsigned.handoff()
    df = spark.read.format("carbonlite").load(unsigned.path)
    assert "FileScan parquet" not in _plan(df)  # Spark reads uint32 as int: the source casts
    assert sorted(r.id for r in df.collect()) == [1, 2, 4_000_000_000]


def test_carbon_table_to_df_and_sql_on_a_view_read_natively(spark: Any, tmp_path: Any) -> None:
    from carbonlite.spark import CarbonTable

    t = _evolved(str(tmp_path / "t"))
    df = CarbonTable.forPath(spark, t.path).toDF()
    assert "FileScan parquet" in _plan(df)
    df.createOrReplaceTempView("native_read_view")
    got = spark.sql("SELECT kind, count(*) AS c FROM native_read_view GROUP BY kind").collect()
    expected = t.to_arrow().group_by("kind").aggregate([("id", "count")]).to_pylist()
    assert {r["kind"]: r["c"] for r in got} == {r["kind"]: r["id_count"] for r in expected}


def _scanned_rows(df: Any) -> int:
    """The rows the Parquet scans of ``df``'s last run put out: Spark's vectorized reader
    puts out every row of each row group it reads, so this counts the row groups not skipped."""
    leaves = df._jdf.queryExecution().executedPlan().collectLeaves()
    total = 0
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        if leaf.nodeName().startswith("Scan parquet"):
            total += leaf.metrics().apply("numOutputRows").value()
    return total


@pytest.mark.parametrize("index", ["secondary_index_columns", "bloom_filter_columns"])
def test_a_point_lookup_on_an_indexed_column_skips_row_groups_in_sparks_scan(
    spark: Any, tmp_path: Any, index: str
) -> None:
    """The indexed column's Parquet bloom filters let Spark's own scan skip every row group
    but the one holding the key, though min/max cannot rule out a random string; an unindexed
    twin is read whole."""
    keys = [f"{(i * 2_654_435_761) % 1_000_003:07d}" for i in range(2_000)]
    data = pa.table({"id": pa.array(range(2_000), pa.int64()), "key": keys})
    tables = {}
    for name, props in (("indexed", {index: "key"}), ("plain", {})):
        t = cl.create_table(
            str(tmp_path / name),
            data.schema,
            sort_columns=["id"],
            properties={"columnar_format": "parquet", "handoff_blocklet_rows": "100", **props},
        )
        t.append(data)
        t.finish_streaming()
        t.handoff()
        tables[name] = t
    scanned = {}
    for name, t in tables.items():
        df = spark.read.format("carbonlite").load(t.path).where(f"key = '{keys[1234]}'")
        assert [r["id"] for r in df.collect()] == [1234]
        scanned[name] = _scanned_rows(df)
    assert scanned["plain"] == 2_000
    assert scanned["indexed"] <= 300, scanned  # the key's row group, and a false positive or two
