"""DuckDB over CarbonLite gives DuckDB's own rows: a Table or a TableScan named in the SQL
(every query reads a fresh stream), and ``carbonlite.duckdb.source`` with DuckDB's filters
and projection pushed into the pruning."""

from __future__ import annotations

import sys

import hypothesis.strategies as st
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings

import carbonlite as cl
from tests.engines.conftest import SCHEMA, N, rows

duckdb = pytest.importorskip("duckdb")
import carbonlite.duckdb as cl_duckdb  # noqa: E402


@pytest.fixture
def con(table, everything):  # type: ignore[no-untyped-def]
    """A connection where ``events`` is the pushdown source and ``plain`` the same rows as a
    pyarrow Table: DuckDB's answer over ``plain`` is the expected one."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("events", cl_duckdb.source(table))
    con.register("plain", everything)
    yield con
    con.close()


def _arrow(relation) -> pa.Table:  # type: ignore[no-untyped-def]
    got = relation.arrow()
    return got.read_all() if isinstance(got, pa.RecordBatchReader) else got


def _same(con, query: str) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    got = rows(_arrow(con.sql(query.format("events"))))
    assert got == rows(_arrow(con.sql(query.format("plain")))), query
    return got


def test_a_table_object_is_read_by_every_query(table, everything):
    t = table  # noqa: F841 - DuckDB finds the Python variable by its name in the SQL
    for _ in range(2):  # a new stream per query
        got = duckdb.sql("SELECT k, count(*) AS n FROM t GROUP BY k ORDER BY k NULLS FIRST")
        want = everything.group_by("k").aggregate([("id", "count")]).sort_by("k")
        assert sorted(got.fetchall(), key=str) == sorted(
            zip(want.column("k").to_pylist(), want.column("id_count").to_pylist(), strict=True),
            key=str,
        )
    assert duckdb.sql("SELECT count(*) FROM t").fetchall() == [(N + 10,)]


def test_a_scan_is_read_by_every_query(table):
    scan = table.scan(columns=["id", "k"], filter=pc.field("id") < 100)  # noqa: F841
    first = duckdb.sql("SELECT count(*), sum(id) FROM scan").fetchall()
    second = duckdb.sql("SELECT count(*), sum(id) FROM scan").fetchall()
    assert first == second == [(100, sum(range(100)))]


SQL = [
    "SELECT * FROM {} ORDER BY id",
    "SELECT id, k FROM {} WHERE id BETWEEN 1000 AND 1099 ORDER BY id",
    "SELECT k, count(*) FROM {} WHERE i32 >= 0 AND k IN ('k1', 'k4') GROUP BY k ORDER BY k",
    "SELECT id FROM {} WHERE k IS NULL OR flag ORDER BY id",
    "SELECT id, x FROM {} WHERE x > 1.5 ORDER BY id",  # NaN > 1.5 in DuckDB: not pushed
    "SELECT id FROM {} WHERE NOT (x < 0) ORDER BY id",
    "SELECT id FROM {} WHERE isnan(x) ORDER BY id",
    "SELECT id FROM {} WHERE ts < TIMESTAMPTZ '2026-01-01 02:00:00+00' ORDER BY id",
    "SELECT id, d FROM {} WHERE d >= DATE '2026-02-18' ORDER BY id",
    "SELECT id FROM {} WHERE id % 7 = 0 AND lower(k) = 'k0' ORDER BY id",  # DuckDB's own
    "SELECT count(*) FROM {} WHERE id >= 5000",
    "SELECT count(*) FROM {}",
]


@pytest.mark.parametrize("query", SQL)
def test_the_source_gives_duckdbs_rows(con, query):
    assert _same(con, query)


def test_filters_and_projection_reach_the_pruning(con, table, blocklets_read):
    source = cl_duckdb.source(table)
    con.register("pruned", source)
    got = con.sql("SELECT id, k FROM pruned WHERE id BETWEEN 1000 AND 1099 ORDER BY id")
    assert [r[0] for r in got.fetchall()] == list(range(1000, 1100))
    assert len(blocklets_read) == 1  # of 11
    assert source.last_scan.plan.blocklets_selected == 1
    assert source.last_scan.schema.names == ["id", "k"]  # only the columns the query reads
    assert "1000" in str(source.pushed[0]) and "1099" in str(source.pushed[0])
    plan = con.sql("EXPLAIN SELECT id FROM pruned WHERE id >= 4000").fetchall()[0][1]
    assert "Filters" in plan and "4000" in plan


def test_a_limit_stops_reading(con, table, blocklets_read):
    t = table  # noqa: F841 - read by name in the SQL
    assert [r[0] for r in con.sql("SELECT id FROM events LIMIT 5").fetchall()] == list(range(5))
    assert len(blocklets_read) < 8  # of 11: DuckDB stops pulling, the pool reads a few ahead
    blocklets_read.clear()
    assert _arrow(duckdb.sql("SELECT * FROM t LIMIT 5")).num_rows == 5
    assert len(blocklets_read) < 8


def test_filters_nan_satisfies_are_pushed_and_keep_nan_rows(con, tmp_path, blocklets_read):
    """DuckDB orders NaN above every number; the blocklet statistics count NaN apart from
    min/max, so a blocklet of NaN alone is read for ``x > 5`` and one of small numbers not."""
    t = cl.create_table(str(tmp_path / "f"), pa.schema([("x", pa.float64())]))
    t.append(pa.table({"x": [1.0, 2.0]}))
    t.append(pa.table({"x": [float("nan"), float("nan")]}))
    t.append(pa.table({"x": [7.0, None]}))
    source = cl_duckdb.source(t)
    con.register("floats", source)
    assert con.sql("SELECT count(*) FROM floats WHERE x > 5").fetchall() == [(3,)]
    assert source.pushed  # applied by the scan
    assert len(blocklets_read) == 2  # [1, 2] pruned
    assert con.sql("SELECT count(*) FROM floats WHERE NOT (x < 5)").fetchall() == [(3,)]
    assert con.sql("SELECT count(*) FROM floats WHERE x = 'NaN'::DOUBLE").fetchall() == [(2,)]


def test_version_and_time_travel(table):
    con = duckdb.connect()
    con.register("v1", cl_duckdb.source(table, version=1))
    con.register("v0", cl_duckdb.source(table, version=0))
    oldest = table.history()[-1]  # newest first: version 0
    con.register("at_time", cl_duckdb.source(table, version=oldest.timestamp))
    assert con.sql("SELECT count(*), max(id) FROM v1").fetchall() == [(N, N - 1)]
    assert con.sql("SELECT count(*) FROM v0").fetchall() == [(0,)]
    assert con.sql("SELECT count(*) FROM at_time").fetchall() == [(0,)]


def test_an_empty_table(tmp_path):
    empty = cl.create_table(str(tmp_path / "e"), SCHEMA)
    con = duckdb.connect()
    con.register("e", cl_duckdb.source(empty))
    assert con.sql("SELECT count(*) FROM e WHERE id > 3").fetchall() == [(0,)]
    assert [c[0] for c in con.sql("SELECT * FROM e").description] == SCHEMA.names


def test_without_the_source_protocol_the_rows_are_the_same(table, everything, monkeypatch):
    def missing() -> type:
        raise ImportError("no duckdb._sources")

    monkeypatch.setattr(cl_duckdb, "_source_class", missing)
    assert not cl_duckdb.pushdown_supported()
    fallback = cl_duckdb.source(table, version=1)
    assert isinstance(fallback, cl.TableScan)
    con = duckdb.connect()
    con.register("f", fallback)
    assert con.sql("SELECT count(*) FROM f WHERE id < 10").fetchall() == [(10,)]


def test_a_missing_duckdb_says_how_to_install_it(table, monkeypatch):
    monkeypatch.setitem(sys.modules, "duckdb", None)
    with pytest.raises(cl.MissingDependencyError, match=r"pip install 'carbonlite\[duckdb\]'"):
        cl_duckdb.source(table)


_ATOMS = [
    "id < {n}",
    "id >= {n}",
    "id BETWEEN {n} AND {n} + 700",
    "i32 > {s}",
    "x > {f}",
    "x <= {f}",
    "k = 'k{s7}'",
    "k IN ('k1', 'k{s7}', 'late')",
    "k IS NULL",
    "x IS NOT NULL",
    "flag",
    "d < DATE '2026-01-01' + {s7} * 7",
    "ts >= TIMESTAMPTZ '2026-01-01 00:00:00+00' + INTERVAL ({n}) MINUTE",
    "id % 5 = {s7} % 5",  # DuckDB's own
]


@st.composite
def _where(draw: st.DrawFn, depth: int = 0) -> str:
    if depth >= 2 or draw(st.booleans()):
        atom = draw(st.sampled_from(_ATOMS))
        return atom.format(
            n=draw(st.integers(-5, N + 15)),
            s=draw(st.integers(-600, 600)),
            f=draw(st.floats(-3, 3).map(lambda v: round(v, 3))),
            s7=draw(st.integers(0, 6)),
        )
    kind = draw(st.sampled_from(["AND", "OR", "NOT"]))
    if kind == "NOT":
        return f"NOT ({draw(_where(depth + 1))})"
    return f"({draw(_where(depth + 1))}) {kind} ({draw(_where(depth + 1))})"


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=_where(), columns=st.sampled_from(["id", "id, k, x", "*"]))
def test_random_filters_give_duckdbs_rows(con, where, columns):
    _same(con, f"SELECT {columns} FROM {{}} WHERE {where} ORDER BY id")
