"""pandas, Polars and DuckDB read CarbonLite tables: same rows as pyarrow, pruned scans."""

from __future__ import annotations

import datetime

import hypothesis.strategies as st
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings

import carbonlite as cl
from carbonlite.reader.scan import SplitReader

pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")
duckdb = pytest.importorskip("duckdb")
import carbonlite.duckdb as cl_duckdb  # noqa: E402
import carbonlite.polars as cl_polars  # noqa: E402

N = 5_000
UTC = datetime.timezone.utc


def _data(n: int = N) -> pa.Table:
    rng = np.random.default_rng(7)
    x = rng.normal(size=n)
    x[::97] = np.nan
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "k": pa.array([None if i % 11 == 0 else f"k{i % 7}" for i in range(n)]),
            "x": pa.array(x),
            "ts": pa.array(
                [
                    datetime.datetime(2026, 1, 1, tzinfo=UTC) + datetime.timedelta(minutes=i)
                    for i in range(n)
                ],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("engines") / "t")
    t = cl.create_table(
        path, _data().schema, sort_columns=["id"], properties={"blocklet_max_rows": "500"}
    )
    t.append(_data())
    t.append(pa.table({"id": [N], "k": ["late"]}))  # version 2: one more row
    return t


@pytest.fixture
def blocklets_read(monkeypatch):
    seen = []
    original = SplitReader.read_blocklet

    def counting(self, split, blocklet, output, filter):
        seen.append(blocklet.offset)
        return original(self, split, blocklet, output, filter)

    monkeypatch.setattr(SplitReader, "read_blocklet", counting)
    return seen


def _sorted(t: pa.Table, by: str = "id") -> list[dict]:
    return t.sort_by(by).to_pylist()


def test_to_pandas_and_to_polars(table):
    want = table.to_arrow(columns=["id", "k"], filter=pc.field("id") < 10)
    df = table.to_pandas(columns=["id", "k"], filter=pc.field("id") < 10)
    assert isinstance(df, pd.DataFrame) and df["id"].tolist() == want["id"].to_pylist()
    frame = table.to_polars(columns=["id", "k"], filter=[("id", "<", 10)], version=1)
    assert isinstance(frame, pl.DataFrame)
    assert frame.to_arrow().to_pylist() == want.to_pylist()
    assert table.to_polars(version=1).height == N


def test_scan_is_readable_by_several_queries(table):
    scan = table.scan(filter=pc.field("id") < 100)
    first = duckdb.sql("SELECT count(*) FROM scan").fetchall()[0]
    second = duckdb.sql("SELECT count(*) FROM scan").fetchall()[0]
    assert first == second == (100,)
    assert pa.table(scan).num_rows == 100
    assert scan.read_all().num_rows == 100  # and still a RecordBatchReader to read through


def test_duckdb_reads_a_table_object(table):
    t = table  # noqa: F841 - DuckDB finds the Python variable by name
    got = duckdb.sql("SELECT k, count(*) AS n FROM t GROUP BY k ORDER BY k NULLS FIRST").fetchall()
    want = pa.table(table.to_arrow()).group_by("k").aggregate([("id", "count")]).to_pylist()
    assert sorted(got, key=str) == sorted(((r["k"], r["id_count"]) for r in want), key=str)


def test_duckdb_source_pushes_filters_and_projection(table, blocklets_read):
    events = cl_duckdb.source(table)
    assert cl_duckdb.pushdown_supported()
    got = duckdb.sql("SELECT id, k FROM events WHERE id BETWEEN 1000 AND 1099 ORDER BY id").arrow()
    if isinstance(got, pa.RecordBatchReader):
        got = got.read_all()
    want = table.to_arrow(
        columns=["id", "k"], filter=(pc.field("id") >= 1000) & (pc.field("id") <= 1099)
    )
    assert got.to_pylist() == want.sort_by("id").to_pylist()
    assert len(blocklets_read) <= 2  # of 11 blocklets: the rest pruned by min/max
    assert events.pushed and "1000" in str(events.pushed[0])
    old = cl_duckdb.source(table, version=1)  # noqa: F841 - read by name in the SQL
    assert duckdb.sql("SELECT count(*) FROM old").fetchall()[0] == (N,)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    low=st.integers(-10, N + 10),
    width=st.integers(0, 2 * N),
    key=st.sampled_from(["k1", "k3", "zz"]),
    cut=st.floats(-2, 2),
    shape=st.integers(0, 5),
)
def test_polars_scan_matches_polars_over_arrow(table, low, width, key, cut, shape):
    """Random predicates, some translatable and some not: the same rows as Polars over the
    whole table in memory."""
    col = pl.col
    predicates = [
        (col("id") >= low) & (col("id") < low + width),
        col("id").is_between(low, low + width) & (col("k") == key),
        (col("x") > cut) | (col("id") < low),
        ~(col("id") < low) & col("k").is_not_null(),
        (col("x").abs() > abs(cut)) & (col("id") <= low + width),  # abs(): not translated
        col("k").is_null() | (col("ts") < datetime.datetime(2026, 1, 2, tzinfo=UTC)),
    ]
    predicate = predicates[shape]
    everything = pl.from_arrow(table.to_arrow())
    want = everything.filter(predicate).select("id", "k").sort("id")
    got = cl_polars.scan(table.path).filter(predicate).select("id", "k").collect().sort("id")
    assert got.equals(want)


def test_polars_pushdown_prunes_projects_and_limits(table, blocklets_read):
    lf = cl_polars.scan(table.path, version=1)
    got = lf.filter((pl.col("id") >= 1000) & (pl.col("id") < 1100)).select("id").collect()
    assert got["id"].to_list() == list(range(1000, 1100))
    assert len(blocklets_read) <= 2
    blocklets_read.clear()
    assert lf.head(10).collect()["id"].to_list() == list(range(10))
    assert len(blocklets_read) < 6  # of 10: stops early (the decode pool reads a few ahead)
    assert lf.select(pl.len()).collect().item() == N
    assert cl_polars.scan(table.path).select(pl.len()).collect().item() == N + 1


def test_polars_predicate_translation_is_implied_by_the_predicate():
    col = pl.col
    assert str(cl_polars.to_arrow_filter((col("a") > 3) & (col("b").abs() > 1))) == "(a > 3)"
    assert (
        cl_polars.to_arrow_filter((col("a") > 3) & (col("b").abs() > 1) | col("c").is_null())
        is None
    )
    assert str(cl_polars.to_arrow_filter(col("a") > 3)) == "(a > 3)"


def test_polars_scan_of_an_empty_table(tmp_path):
    t = cl.create_table(str(tmp_path / "e"), pa.schema([("id", pa.int64()), ("s", pa.string())]))
    frame = cl_polars.scan(t.path).collect()
    assert frame.height == 0 and frame.columns == ["id", "s"]
