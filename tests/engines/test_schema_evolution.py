"""Schema evolution as every reader and table feature sees it: after a rename, a drop, a
widening and an added column with a default, Polars, DuckDB, pandas and plain scans read the
present names, types and defaults; a filter on a renamed column returns the same rows and
prunes the same blocklets; deletion vectors, partitions, primary keys, the change feed,
restore and maintenance go on across the change."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl

SCHEMA = pa.schema([("id", pa.int64()), ("b", pa.int32()), ("gone", pa.string())])
N = 2_000


def _data(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {"id": ids, "b": [i // 20 for i in ids], "gone": [f"g{i}" for i in ids]}, schema=SCHEMA
    )


@pytest.fixture
def evolved(tmp_path: Path) -> tuple[cl.Table, list[int]]:
    """A table of ``N`` rows in blocklets of 200 (``b`` rises with ``id``, so statistics
    prune), then: ``b`` renamed to ``c``, ``gone`` dropped, ``c`` widened to int64, ``n``
    added with default 7. Returns it with the blocklet offsets ``b < 10`` selected before."""
    t = cl.create_table(tmp_path / "t", SCHEMA, properties={"blocklet_max_rows": "200"})
    t.append(_data(0, N))
    before = _offsets(t.plan_splits(filter=pc.field("b") < 10))
    t.rename_column("b", "c")
    t.drop_columns(["gone"])
    t.widen_column("c", pa.int64())
    t.add_columns(pa.field("n", pa.int64()), defaults={"n": 7})
    return t, before


EXPECTED_SCHEMA = pa.schema([("id", pa.int64()), ("c", pa.int64()), ("n", pa.int64())])


def _offsets(plan) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(b.offset for s in plan.splits for b in s.blocklets)


def _want(where: pc.Expression | None = None) -> list[dict[str, object]]:
    rows = [{"id": i, "c": i // 20, "n": 7} for i in range(N)]
    if where is not None:
        keep = set(pa.table({"c": [r["c"] for r in rows]}).filter(where).column("c").to_pylist())
        rows = [r for r in rows if r["c"] in keep]
    return sorted(rows, key=lambda r: r["id"])  # type: ignore[arg-type, return-value]


def _small(ids: range, **names: str) -> pa.Table:
    """Rows ``ids`` with ``b == id`` (under the name ``names.get("b", "b")``)."""
    b = names.get("b", "b")
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            b: pa.array(ids, pa.int32()),
            "gone": [f"g{i}" for i in ids],
        }
    )


def _sorted(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return sorted(rows, key=lambda r: r["id"])  # type: ignore[arg-type, return-value]


def test_a_scan_reads_present_names_types_and_defaults_and_prunes_as_before(evolved) -> None:  # type: ignore[no-untyped-def]
    t, before = evolved
    got = t.to_arrow()
    assert got.schema.remove_metadata() == EXPECTED_SCHEMA
    assert _sorted(got.to_pylist()) == _want()
    # the renamed column prunes by the statistics written under its old name
    plan = t.plan_splits(filter=pc.field("c") < 10)
    assert _offsets(plan) == before and plan.blocklets_pruned > 0
    assert _sorted(t.to_arrow(filter=pc.field("c") < 10).to_pylist()) == _want(pc.field("c") < 10)
    assert _sorted(t.to_arrow(filter="c >= 95 AND n = 7").to_pylist()) == _want(pc.field("c") >= 95)
    # time travel shows the table as it was
    assert t.to_arrow(version=1).schema.names == ["id", "b", "gone"]


def test_polars_reads_the_present_schema_and_pushes_filters_on_a_renamed_column(  # type: ignore[no-untyped-def]
    evolved, blocklets_read
) -> None:
    pl = pytest.importorskip("polars")
    import carbonlite.polars as cl_polars

    t, before = evolved
    frame = t.to_polars()
    assert frame.columns == ["id", "c", "n"]
    assert frame.schema == {"id": pl.Int64, "c": pl.Int64, "n": pl.Int64}
    assert _sorted(frame.to_dicts()) == _want()
    blocklets_read.clear()
    lazy = cl_polars.scan(t.path).filter(pl.col("c") < 10).select("id", "c", "n").collect()
    assert _sorted(lazy.to_dicts()) == _want(pc.field("c") < 10)
    assert sorted(set(blocklets_read)) == before  # pushed down: only the blocklets kept
    old = cl_polars.scan(t, version=1).filter(pl.col("b") < 10).collect()  # as it was
    assert old.columns == ["id", "b", "gone"] and old.height == 200


def test_duckdb_reads_the_present_schema_and_pushes_filters_on_a_renamed_column(  # type: ignore[no-untyped-def]
    evolved, blocklets_read
) -> None:
    duckdb = pytest.importorskip("duckdb")
    import carbonlite.duckdb as cl_duckdb

    t, before = evolved
    con = duckdb.connect()
    con.register("events", cl_duckdb.source(t))
    assert [d[0] for d in con.sql("SELECT * FROM events").description] == ["id", "c", "n"]
    got = con.sql("SELECT id, c, n FROM events ORDER BY id").fetchall()
    assert got == [(r["id"], r["c"], r["n"]) for r in _want()]
    blocklets_read.clear()
    got = con.sql("SELECT id, c, n FROM events WHERE c < 10 ORDER BY id").fetchall()
    assert got == [(r["id"], r["c"], r["n"]) for r in _want(pc.field("c") < 10)]
    if cl_duckdb.pushdown_supported():
        assert sorted(set(blocklets_read)) == before
    con.close()


def test_pandas_reads_the_present_schema(evolved) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("pandas")
    t, _ = evolved
    frame = t.to_pandas()
    assert list(frame.columns) == ["id", "c", "n"]
    assert [str(d) for d in frame.dtypes] == ["int64", "int64", "int64"]
    assert _sorted(frame.to_dict("records")) == _want()


def test_row_changes_before_and_after_a_rename(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA)
    t.append(_small(range(100)))
    t.delete(pc.field("b") < 10)  # a deletion vector written under the old name
    t.rename_column("b", "c")
    assert t.count_rows() == 90 and min(t.to_arrow().column("c").to_pylist()) == 10
    t.delete(pc.field("c") >= 90)
    t.update(pc.field("c") == 50, {"gone": "updated"})
    merged = t.merge(
        pa.table({"id": [51, 1000], "c": pa.array([-1, -2], pa.int32()), "gone": ["m", "new"]}),
        on=["id"],
    )
    assert (merged.rows_updated, merged.rows_inserted) == (1, 1)
    rows = {r["id"]: r for r in t.to_arrow().to_pylist()}
    assert len(rows) == 100 - 10 - 10 + 1
    assert rows[50]["gone"] == "updated" and rows[51]["c"] == -1 and rows[1000]["c"] == -2
    assert 5 not in rows and 95 not in rows
    t.drop_columns("gone")
    t.delete(pc.field("c") == -2)
    assert t.count_rows() == 80 and t.schema.names == ["id", "c"]


def test_partitions_keep_pruning_after_their_source_column_is_renamed(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("region", pa.string())])
    t = cl.create_table(tmp_path / "t", schema, partition_by=["region"])
    t.append(pa.table({"id": range(6), "region": ["eu", "us", "asia"] * 2}, schema=schema))
    parts_before = {p.value: p.rows for p in t.partitions()}
    t.rename_column("region", "area")
    assert t.partition_by == ("area",)
    assert {p.value: p.rows for p in t.partitions()} == parts_before
    plan = t.plan_splits(filter=pc.field("area") == "eu")
    assert plan.blocklets_selected == 1 and len(plan.splits) == 1
    assert sorted(t.to_arrow(filter=pc.field("area") == "eu").column("id").to_pylist()) == [0, 3]
    # publish writes under the present name; unchanged partitions are kept
    eu = pa.table({"id": [0, 3], "area": ["eu", "eu"]})
    us = pa.table({"id": [10, 11], "area": ["us", "us"]})
    result = t.publish(pa.concat_tables([eu, us]))
    assert result.version is not None
    got = sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["area"]) for r in got] == [
        (0, "eu"),
        (2, "asia"),
        (3, "eu"),
        (5, "asia"),
        (10, "us"),
        (11, "us"),
    ]
    with pytest.raises(cl.SchemaMismatchError, match="region"):
        t.publish(pa.table({"id": [1], "region": ["us"]}))


def test_a_renamed_key_column_still_dedupes_upserts(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])
    t = cl.create_table(tmp_path / "t", schema, primary_key=["k"])
    t.append(pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}, schema=schema))
    t.rename_column("k", "key")
    assert t.primary_key == ("key",)
    t.append(pa.table({"key": [2, 4], "v": ["B", "D"]}))
    got = sorted(t.to_arrow().to_pylist(), key=lambda r: r["key"])
    assert got == [
        {"key": 1, "v": "a"},
        {"key": 2, "v": "B"},
        {"key": 3, "v": "c"},
        {"key": 4, "v": "D"},
    ]
    with pytest.raises(cl.SchemaMismatchError, match="renamed to 'key'"):
        t.append(pa.table({"k": [5], "v": ["E"]}))


def test_changes_across_a_rename_read_each_commit_under_the_present_names(
    tmp_path: Path,
) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA)
    t.append(_small(range(3)))
    renamed = t.rename_column("b", "c").version
    t.append(_small(range(3, 4), b="c"))
    feed = t.changes(0)
    assert [n for n in feed.schema.names if not n.startswith("_")] == ["id", "c", "gone"]
    inserted = [(r["id"], r["c"], r["_commit_version"]) for r in feed.to_pylist()]
    assert sorted(inserted) == [(0, 0, 1), (1, 1, 1), (2, 2, 1), (3, 3, renamed + 1)]


def test_restore_to_before_a_rename_brings_the_old_schema_back(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA)
    first = t.append(_data(0, 10)).version
    assert first is not None
    t.rename_column("b", "c")
    t.drop_columns(["gone"])
    t.add_columns(pa.field("x", pa.int64()), defaults={"x": 1})
    t.append(pa.table({"id": [10], "c": pa.array([10], pa.int32())}))
    t.restore(first)
    assert t.schema.names == ["id", "b", "gone"]
    assert t.to_arrow().equals(_data(0, 10))
    t.append(_small(range(11, 12)))
    with pytest.raises(cl.SchemaMismatchError, match="'c'"):
        t.append(_small(range(12, 13), b="c"))
    # a column added after the restore gets an id no column had before
    t.add_columns(pa.field("y", pa.int64()))
    ids = [c.id for c in t.snapshot().metadata.columns]
    assert len(set(ids)) == len(ids) and ids[-1] > 4
    assert t.to_arrow().column("y").null_count == 11


def test_clean_recover_and_verify_after_schema_changes(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA, properties={"blocklet_max_rows": "200"})
    t.append(_data(0, 500))
    t.rename_column("b", "c")
    t.append(_small(range(500, 501), b="c"))
    t.drop_columns("gone")
    t.widen_column("c", pa.int64())
    t.add_columns(pa.field("n", pa.int64()), defaults={"n": 7})
    t.append(pa.table({"id": [501], "c": [1]}))
    t.compact()
    assert t.verify().ok
    t.recover()
    t.clean(0, force=True)
    assert t.verify().ok
    got = t.to_arrow()
    assert got.schema.names == ["id", "c", "n"] and got.num_rows == 502
    assert set(got.column("n").to_pylist()) == {7}


def test_a_widening_after_a_rename_leaves_the_renames_version_in_messages(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA)
    renamed = t.rename_column("b", "c").version
    t.widen_column("c", pa.int64())  # it used to become the version the messages named
    with pytest.raises(cl.SchemaMismatchError, match=rf"renamed to 'c' at version {renamed}\b"):
        t.append(_small(range(1)))
