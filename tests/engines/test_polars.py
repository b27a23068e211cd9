"""Polars over CarbonLite gives Polars' own rows: ``carbonlite.polars.scan`` (an IO source
with projection, predicate, limit and batch-size pushdown) and ``Table.to_polars``."""

from __future__ import annotations

import datetime
import math
import operator
import sys

import hypothesis.strategies as st
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings

import carbonlite as cl
from tests.engines.conftest import SCHEMA, START, UTC, N

pl = pytest.importorskip("polars")
from polars.testing import assert_frame_equal  # noqa: E402

import carbonlite.polars as cl_polars  # noqa: E402

col = pl.col


def _polars(table: pa.Table):  # type: ignore[no-untyped-def]
    return pl.from_arrow(table)


def _check(table: cl.Table, everything: pa.Table, predicate, columns=None) -> None:  # type: ignore[no-untyped-def]
    want = _polars(everything).filter(predicate)
    got = cl_polars.scan(table).filter(predicate)
    if columns:
        want, got = want.select(columns), got.select(columns)
    assert_frame_equal(
        got.collect().sort(columns[0] if columns else "id"),
        want.sort(columns[0] if columns else "id"),
    )


# --- exact results ------------------------------------------------------------------------------

PREDICATES = {
    "range": (col("id") >= 1000) & (col("id") < 1100),
    "between": col("id").is_between(4990, 5005, closed="left"),
    "flipped": pl.lit(20) > col("id"),
    "is_in": col("k").is_in(["k2", "late"]) & col("id").is_in([3, 9, 5003, None]),
    "is_in nulls_equal": col("k").is_in(["k1", None], nulls_equal=True),
    "not is_in": ~col("k").is_in(["k1", "k2", "k3"]),
    "nulls": col("x").is_null() | col("flag").is_null(),
    "not null": col("k").is_not_null() & (col("i32") < -450),
    "float above (NaN kept)": col("x") > 1.5,
    "float not below": ~(col("x") < 0.0),
    "float between": col("x").is_between(-0.1, 0.1),
    "timestamp": col("ts") < datetime.datetime(2026, 1, 1, 2, tzinfo=UTC),
    "date": col("d") >= datetime.date(2026, 2, 18),
    "bool column": col("flag") & (col("id") < 300),
    "int column, float literal": col("id") > 4999.5,
    "partly untranslatable": (col("x").abs() > 1) & (col("id") < 700),
    "untranslatable or": (col("x").abs() > 2) | (col("id") == 3),
    "negated and": ~((col("id") > 10) & (col("x").abs() > 1)),
    "column against column": col("i32") > col("id"),
    "strings": (col("k") >= "k5") & (col("k") != "late"),
}


@pytest.mark.parametrize("name", list(PREDICATES))
def test_scan_filters_as_polars_does(table, everything, name):
    _check(table, everything, PREDICATES[name])
    _check(table, everything, PREDICATES[name], columns=["id", "k"])


def test_to_polars_is_pyarrows_result(table, everything):
    frame = table.to_polars(columns=["id", "x"], filter=pc.field("id") < 10, version=1)
    assert isinstance(frame, pl.DataFrame)
    assert_frame_equal(frame, _polars(everything.filter(pc.field("id") < 10).select(["id", "x"])))
    assert table.to_polars(version=1).height == N
    # pl.DataFrame reads any Arrow C stream as a frame (pl.from_arrow makes it a Series)
    assert_frame_equal(pl.DataFrame(table.scan(version=1)), table.to_polars(version=1))
    assert_frame_equal(pl.DataFrame(table), _polars(everything))


def test_scan_reads_the_whole_table_with_its_types(table, everything):
    frame = cl_polars.scan(table.path).collect()
    assert_frame_equal(frame, _polars(everything))
    assert cl_polars.scan(table).collect_schema() == _polars(everything).schema


def test_version_travels_in_time(table):
    assert cl_polars.scan(table.path, version=1).select(pl.len()).collect().item() == N
    assert cl_polars.scan(table.path).select(pl.len()).collect().item() == N + 10
    assert cl_polars.scan(table.path, version=0).collect().height == 0
    late = cl_polars.scan(table, version=table.history()[0].timestamp).collect()
    assert late.height == N + 10  # a datetime: the version committed at or before it


def test_an_empty_table(tmp_path):
    t = cl.create_table(str(tmp_path / "e"), SCHEMA)
    frame = cl_polars.scan(t.path).filter(col("id") > 3).collect()
    assert frame.height == 0 and frame.columns == SCHEMA.names


# --- pushdown ----------------------------------------------------------------------------------


def test_a_predicate_prunes_blocklets(table, blocklets_read):
    lf = cl_polars.scan(table).filter((col("id") >= 1000) & (col("id") < 1100))
    assert "PYTHON[carbonlite] SCAN" in lf.explain()
    got = lf.collect()
    assert got["id"].to_list() == list(range(1000, 1100))
    assert len(blocklets_read) == 1  # of 11


def test_a_partly_translated_predicate_prunes_and_stays_exact(table, everything, blocklets_read):
    predicate = (col("x").abs() > 1) & (col("id") < 700) & (col("id") % 2 == 0)
    got = cl_polars.scan(table).filter(predicate).select("id").collect()
    want = _polars(everything).filter(predicate).select("id")
    assert_frame_equal(got, want)
    assert len(blocklets_read) == 2  # ids 0-499 and 500-999: id < 700 pruned the rest


def test_nan_rows_are_not_pruned_away(tmp_path):
    t = cl.create_table(str(tmp_path / "f"), pa.schema([("x", pa.float64())]))
    t.append(pa.table({"x": [1.0, 2.0]}))
    t.append(pa.table({"x": [float("nan")]}))  # a blocklet whose min/max leave NaN out
    got = cl_polars.scan(t).filter(col("x") > 5).collect()["x"].to_list()
    assert len(got) == 1 and math.isnan(got[0])  # Polars: NaN is above every number


def test_the_projection_decodes_only_what_the_query_reads(table, monkeypatch):
    asked = []
    original = cl.Table.scan

    def scan(self, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(kwargs["columns"])
        return original(self, **kwargs)

    monkeypatch.setattr(cl.Table, "scan", scan)
    cl_polars.scan(table).filter(col("i32") > 0).select("k").collect()
    assert sorted(asked[-1]) == ["i32", "k"]


def test_a_limit_stops_the_scan_early(table, blocklets_read):
    lf = cl_polars.scan(table.path, version=1)
    assert lf.head(10).collect()["id"].to_list() == list(range(10))
    assert len(blocklets_read) < 6  # of 10: the decode pool reads a few ahead only
    blocklets_read.clear()
    assert lf.filter(col("k") == "k3").head(3).collect()["id"].to_list() == [3, 10, 17]
    # After a filter Polars passes no limit and stops pulling batches itself, a little later.
    assert len(blocklets_read) < 10


def test_batches_respect_the_batch_size(table, everything, monkeypatch):
    import polars.io.plugins

    sources = []
    original = polars.io.plugins.register_io_source

    def register(io_source, **kwargs):  # type: ignore[no-untyped-def]
        sources.append(io_source)
        return original(io_source=io_source, **kwargs)

    monkeypatch.setattr(polars.io.plugins, "register_io_source", register)
    cl_polars.scan(table)
    frames = list(sources[-1](["id"], None, None, 128))
    assert max(f.height for f in frames) == 128
    assert pl.concat(frames)["id"].to_list() == everything.column("id").to_pylist()
    frames = list(sources[-1](["id"], col("id") >= 4000, 300, 64))
    assert [f.height for f in frames] == [64] * 4 + [44]
    assert pl.concat(frames)["id"].to_list() == list(range(4000, 4300))


def test_a_missing_polars_says_how_to_install_it(table, monkeypatch):
    monkeypatch.setitem(sys.modules, "polars", None)
    with pytest.raises(cl.MissingDependencyError, match=r"pip install 'carbonlite\[polars\]'"):
        cl_polars.scan(table)
    with pytest.raises(cl.MissingDependencyError, match="polars"):
        table.to_polars()


# --- the translation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicate", "translated"),
    [
        (col("id") > 3, "(id > 3)"),
        (pl.lit(3) < col("id"), "(id > 3)"),
        ((col("id") > 3) & (col("x").abs() > 1), "(id > 3)"),
        (((col("id") > 3) & (col("x").abs() > 1)) | col("k").is_null(), "((id > 3) or is_null("),
        (~((col("id") > 3) | (col("x").abs() > 1)), "invert((id > 3))"),
        (col("x") < 1.0, "(x < 1)"),
        (~(col("x") > 1.0), "invert((x > 1))"),
        (col("flag"), "flag"),
        (col("k").is_in(["a", None]), "is_in(k, {value_set=string:["),
        (col("d") >= datetime.date(2026, 1, 3), "(d >= 2026-01-03)"),
    ],
)
def test_what_translates(predicate, translated):
    assert str(cl_polars.to_arrow_filter(predicate, SCHEMA)).startswith(translated)


@pytest.mark.parametrize(
    "predicate",
    [
        col("x") > 1.0,  # NaN is above 1 in Polars, not in Arrow
        col("x") >= 1.0,
        col("x") == float("nan"),
        col("x").is_in([1.0]),
        col("id") > 3.5,  # Polars compares as float64, CarbonLite exactly
        ~((col("id") > 3) & (col("x").abs() > 1)),  # a dropped side under ~ is unsound
        col("ts") < datetime.datetime(2026, 1, 2),  # naive literal, zoned column
        col("k") == 3,
        col("nope") > 3,
        col("x").abs() > 1,
        col("i32") > col("id"),
    ],
)
def test_what_does_not_translate(predicate):
    assert cl_polars.to_arrow_filter(predicate, SCHEMA) is None


# --- random predicates ---------------------------------------------------------------------------

_OPS = [operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]
_op = st.sampled_from(_OPS)
_floats = st.one_of(st.floats(-3, 3), st.sampled_from([float("nan"), float("inf"), 0.0, -0.0]))
_strings = st.sampled_from(["k0", "k3", "k6", "late", "a", "zz", ""])
_closed = st.sampled_from(["both", "left", "right", "none"])
_atoms = st.one_of(
    st.builds(lambda op, v: op(col("id"), v), _op, st.integers(-10, N + 20)),
    st.builds(lambda op, v: op(col("i32"), v), _op, st.integers(-600, 600)),
    st.builds(lambda op, v: op(col("x"), v), _op, st.one_of(_floats, st.integers(-2, 2))),
    st.builds(lambda op, v: op(col("k"), v), _op, _strings),
    st.builds(
        lambda op, m: op(col("ts"), START + datetime.timedelta(minutes=m)),
        _op,
        st.integers(-5, N + 5),
    ),
    st.builds(
        lambda op, d: op(col("d"), START.date() + datetime.timedelta(days=d)),
        _op,
        st.integers(-2, 52),
    ),
    st.builds(lambda b: col("flag") == b, st.booleans()),
    st.just(col("flag")),
    st.builds(
        lambda values, eq: col("k").is_in(values, nulls_equal=eq),
        st.lists(st.one_of(_strings, st.none()), max_size=4),
        st.booleans(),
    ),
    st.builds(
        lambda values: col("id").is_in(values), st.lists(st.integers(-5, N + 15), max_size=5)
    ),
    st.builds(
        lambda name, null: col(name).is_null() if null else col(name).is_not_null(),
        st.sampled_from(SCHEMA.names),
        st.booleans(),
    ),
    st.builds(
        lambda a, w, c: col("id").is_between(a, a + w, closed=c),
        st.integers(-10, N),
        st.integers(0, 2000),
        _closed,
    ),
    st.builds(lambda a, b, c: col("x").is_between(a, b, closed=c), _floats, _floats, _closed),
    st.builds(lambda v: col("x").abs() > v, st.floats(0, 3)),  # untranslatable
    st.builds(lambda r: (col("id") % 7) == r, st.integers(0, 6)),  # untranslatable
    st.builds(lambda s: col("k").str.contains(s, literal=True), _strings),  # untranslatable
)
_predicates = st.recursive(
    _atoms,
    lambda inner: st.one_of(
        st.builds(operator.and_, inner, inner),
        st.builds(operator.or_, inner, inner),
        st.builds(operator.invert, inner),
    ),
    max_leaves=6,
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(predicate=_predicates, project=st.booleans())
def test_random_predicates_give_polars_rows(table, everything, predicate, project):
    """Polars over CarbonLite against Polars over the same rows in memory; and the pruning
    filter keeps every row the predicate keeps (it is what the scan applies to rows)."""
    frame = _polars(everything)
    want = frame.filter(predicate)
    translated = cl_polars.to_arrow_filter(predicate, SCHEMA)
    if translated is not None:
        kept = set(everything.filter(translated).column("id").to_pylist())
        assert set(want["id"].to_list()) <= kept
    _check(table, everything, predicate, columns=["id", "k"] if project else None)
