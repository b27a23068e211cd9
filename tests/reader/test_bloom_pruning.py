"""Bloom filter pruning never drops a matching row.

A differential test against pyarrow's own filter of every appended row, for a bloom column
of each type filters are built for (nulls, NaN and -0.0 included), many tiny blocklets of
unordered values and lookups of present and absent values: equalities, memberships of up to
a few hundred values, ORs, and an equality ANDed with a range of another column. Then
literals of other types than the column's, and ``build_index`` on a table written without
``bloom_filter_columns``. Where pruning by bloom filters must happen, a deterministic case
says so (values interleave, so min/max cannot prune them).
"""

from __future__ import annotations

import datetime
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import carbonlite as cl
from carbonlite.reader.planner import ScanPlan
from tests.support.lookups import (
    SETTINGS,
    VALUE_OF,
    append_batches,
    appended,
    batch,
    comparable_rows,
    interleaved_ids,
    kschema,
    lookups,
    new_ktable,
    plan_of,
)

SLOW_SETTINGS = settings(SETTINGS, max_examples=40)


def check_filter(t: cl.Table, model: pa.Table, expression: pc.Expression) -> ScanPlan:
    """The table's pruned, filtered scan has exactly the rows pyarrow's filter keeps of every
    appended row; the plan's counts add up (no index prunes: the table has none)."""
    expected = model.filter(expression)
    got = t.to_arrow(filter=expression)
    assert comparable_rows(got) == comparable_rows(expected), f"filter {expression}"
    plan = plan_of(t, expression)
    assert plan.blocklets_pruned_by_index == 0, f"filter {expression}: {plan}"
    assert plan.num_rows >= expected.num_rows
    assert plan.blocklets_bloom_unreadable == 0
    return plan


def _new_table(root: Path, kind: str, max_rows: int) -> cl.Table:
    return new_ktable(root, kind, {"blocklet_max_rows": str(max_rows), "bloom_filter_columns": "k"})


# --- the differential test -------------------------------------------------------------------


def _differential(tmp_path: Path, kind: str, data: st.DataObject) -> None:
    batches = data.draw(appended(kind), "batches")
    max_rows = data.draw(st.integers(3, 20), "blocklet_max_rows")
    t = _new_table(tmp_path, kind, max_rows)
    model = pa.concat_tables(append_batches(t, kind, batches))
    assert comparable_rows(t.to_arrow()) == comparable_rows(model)
    stored = model.column("k").to_pylist()
    for _ in range(6):
        filters = lookups(kind, stored, absent_far=400, big_isin=300, shuffle=True)
        check_filter(t, model, data.draw(filters, "filter"))


@SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("kind", sorted(VALUE_OF))
def test_pruned_lookups_equal_pyarrow_filter(tmp_path: Path, kind: str, data: Any) -> None:
    _differential(tmp_path, kind, data)


@pytest.mark.slow
@SLOW_SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("kind", sorted(VALUE_OF))
def test_pruned_lookups_equal_pyarrow_filter_many(tmp_path: Path, kind: str, data: Any) -> None:
    _differential(tmp_path, kind, data)


# --- pruning that must happen ----------------------------------------------------------------


def test_an_absent_value_between_bounds_is_pruned_by_bloom(tmp_path: Path) -> None:
    """Even ids stored out of order in blocklets of 8: every blocklet's min/max holds any odd
    id, so only the bloom filters can skip them."""
    t = _new_table(tmp_path, "int64", 8)
    values = interleaved_ids(400)  # 50 blocklets, each from below 20 to above 760
    model = pa.table(
        {"n": list(range(400)), "k": values, "other": [i % 3 for i in range(400)]},
        schema=kschema("int64"),
    )
    t.append(model)
    plan = check_filter(t, model, pc.field("k") == 401)
    assert plan.blocklets_total == 50
    assert plan.blocklets_pruned_by_stats == 0
    assert plan.blocklets_pruned_by_bloom >= 45  # 1% false positives
    plan = check_filter(t, model, pc.field("k").isin([101, 303, 505]))
    assert plan.blocklets_pruned_by_stats == 0 and plan.blocklets_pruned_by_bloom >= 40
    # present values: the blocklets that hold them are read, the rest skipped
    plan = check_filter(t, model, pc.field("k").isin([400, 402]))
    assert t.to_arrow(filter=pc.field("k").isin([400, 402])).num_rows == 2
    assert 2 <= plan.blocklets_selected <= 6
    plan = check_filter(t, model, (pc.field("k") == 400) | (pc.field("k") == 401))
    assert 1 <= plan.blocklets_selected <= 4
    # an equality ANDed with a range of another column: the equality still prunes
    plan = check_filter(t, model, (pc.field("k") == 401) & (pc.field("other") >= 1))
    assert plan.blocklets_pruned_by_bloom >= 45
    # an OR with a non-lookup leaves every blocklet in
    plan = check_filter(t, model, (pc.field("k") == 401) | (pc.field("other") == 1))
    assert plan.blocklets_pruned_by_bloom == 0


def test_lookups_of_many_values(tmp_path: Path) -> None:
    """A membership test of thousands of absent values still prunes and loses nothing."""
    t = _new_table(tmp_path, "string", 16)
    ids = interleaved_ids(320)
    model = pa.table(
        {"n": list(range(320)), "k": [f"u{i}" for i in ids], "other": [0] * 320},
        schema=kschema("string"),
    )
    t.append(model)
    absent = [f"u{i}" for i in range(1, 5_000, 2)]
    # 2,500 values: each blocklet's filter answers "maybe" for some of them, but not all do
    plan = check_filter(t, model, pc.field("k").isin(absent))
    assert plan.blocklets_total == 20 and plan.blocklets_pruned_by_bloom > 0
    plan = check_filter(t, model, pc.field("k").isin(absent[:40]))
    assert plan.blocklets_selected <= 6
    plan = check_filter(t, model, pc.field("k").isin([*absent, "u100", "u102"]))
    assert t.to_arrow(filter=pc.field("k").isin([*absent, "u100"])).column("k").to_pylist() == [
        "u100"
    ]


@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_float_zeros_and_nan(tmp_path: Path, zero: float) -> None:
    """-0.0 == 0.0: a lookup of either finds rows of both; NaN rows match no equality."""
    t = _new_table(tmp_path, "float64", 4)
    values = [-0.0, 1.5, math.nan, 2.5, None, 0.0, 3.5, math.nan] * 4
    model = batch("float64", values, 0)
    t.append(model)
    got = t.to_arrow(filter=pc.field("k") == zero)
    assert got.num_rows == 8
    check_filter(t, model, pc.field("k") == zero)
    check_filter(t, model, pc.field("k").isin([zero, 7.25]))
    check_filter(t, model, pc.field("k") == math.nan)
    check_filter(t, model, pc.field("k").isin(pa.array([math.nan, 1.5])))


# --- literals of other types -----------------------------------------------------------------


def _same_as_unpruned(t: cl.Table, expression: pc.Expression, expected_rows: int) -> None:
    everything = t.to_arrow()
    try:
        expected = everything.filter(expression)
    except (pa.ArrowException, TypeError, ValueError):
        expected = None
    got = t.to_arrow(filter=expression)
    assert got.num_rows == expected_rows, f"filter {expression}"
    if expected is not None:
        assert comparable_rows(got) == comparable_rows(expected), f"filter {expression}"


def test_literals_of_other_types_never_lose_rows(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("n", pa.int64(), nullable=False),
            pa.field("k", pa.float64()),
            pa.field("other", pa.int64()),
            pa.field("i", pa.int32()),
            pa.field("u", pa.uint64()),
            pa.field("ts", pa.timestamp("ns")),
            pa.field("tus", pa.timestamp("us", tz="UTC")),
            pa.field("d", pa.decimal128(10, 2)),
            pa.field("day", pa.date32()),
            pa.field("s", pa.string()),
        ]
    )
    t = cl.create_table(
        str(tmp_path / "literals"),
        schema,
        properties={
            "blocklet_max_rows": "3",
            "bloom_filter_columns": "k,i,u,ts,tus,d,day,s",
        },
    )
    rows = 60
    base = datetime.datetime(2026, 3, 1, 12, 0, 0)
    ns = [
        int(base.replace(tzinfo=datetime.timezone.utc).timestamp()) * 10**9 + (i % 12) * 1_000
        for i in range(rows)
    ]
    data = pa.table(
        {
            "n": list(range(rows)),
            "k": [float((i * 7) % 12) for i in range(rows)],
            "other": [0] * rows,
            "i": [(i * 5) % 12 for i in range(rows)],
            "u": [2**63 + (i * 5) % 12 for i in range(rows)],
            "ts": pa.array(ns, pa.int64()).view(pa.timestamp("ns")),
            "tus": pa.array([n // 1000 for n in ns], pa.int64()).view(pa.timestamp("us", tz="UTC")),
            "d": [Decimal((i * 7) % 12).scaleb(-1).quantize(Decimal("0.01")) for i in range(rows)],
            "day": [datetime.date(2026, 1, 1 + (i * 7) % 12) for i in range(rows)],
            "s": [f"s{(i * 7) % 12}" for i in range(rows)],
        },
        schema=schema,
    )
    t.append(data)
    per_value = rows // 12
    cases = [
        (pc.field("k") == 3, per_value),  # int literal, float column
        (pc.field("k") == pa.scalar(3, pa.int8()), per_value),
        (pc.field("k").isin(pa.array([3, 13], pa.int64())), per_value),
        (pc.field("k") == pa.scalar(3.0, pa.float32()), per_value),
        (pc.field("i") == 2.5, 0),  # float literal, int column
        (pc.field("i") == 2.0, per_value),
        (pc.field("i") == Decimal("2.0"), per_value),
        (pc.field("i").isin(pa.array([2.0, 2.5])), per_value),
        (pc.field("i") == pa.scalar(2, pa.uint64()), per_value),
        (pc.field("u") == pa.scalar(2**63 + 2, pa.uint64()), per_value),
        (pc.field("u") == float(2**63), rows // 12),  # 2**63 is stored for i % 12 == 0
        # a Python datetime (microseconds) against a nanosecond column
        (pc.field("ts") == base + datetime.timedelta(microseconds=3), per_value),
        (pc.field("ts") == pa.scalar(base, pa.timestamp("s")), per_value),
        (
            pc.field("ts")
            == pa.scalar(base + datetime.timedelta(milliseconds=1), pa.timestamp("ms")),
            0,
        ),
        # a nanosecond literal against a microsecond column: exact, or no row
        (pc.field("tus") == pa.scalar(ns[3], pa.timestamp("ns", tz="UTC")), 5),
        (pc.field("tus") == pa.scalar(ns[3] + 1, pa.timestamp("ns", tz="UTC")), 0),
        (
            pc.field("tus")
            == datetime.datetime(2026, 3, 1, 12, 0, 0, 3, tzinfo=datetime.timezone.utc),
            per_value,
        ),
        # more scale digits than the column
        (pc.field("d") == Decimal("0.700"), per_value),
        (pc.field("d") == Decimal("0.7000000"), per_value),
        (pc.field("d") == Decimal("0.701"), 0),
        (pc.field("d") == Decimal("1"), per_value),
        (
            pc.field("d").isin(
                pa.array([Decimal("0.7000"), Decimal("0.7001")], pa.decimal128(12, 4))
            ),
            per_value,
        ),
        (pc.field("day") == pa.scalar(datetime.date(2026, 1, 4), pa.date64()), per_value),
        (pc.field("s") == pa.scalar("s3", pa.large_string()), per_value),
        (pc.field("s").isin(pa.array(["s3", "s30"], pa.large_string())), per_value),
    ]
    for expression, expected in cases:
        _same_as_unpruned(t, expression, expected)


# --- build_index on a table written without bloom filters ------------------------------------


def test_build_index_gives_old_blocklets_filters(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("n", pa.int64(), nullable=False),
            pa.field("k", pa.int64()),
            pa.field("other", pa.int64()),
            pa.field("flag", pa.bool_()),
            pa.field("tags", pa.list_(pa.int32())),
        ]
    )
    t = cl.create_table(str(tmp_path / "later"), schema, properties={"blocklet_max_rows": "8"})
    values = interleaved_ids(200)
    model = pa.table(
        {
            "n": list(range(200)),
            "k": values,
            "other": [i % 5 for i in range(200)],
            "flag": [i % 2 == 0 for i in range(200)],
            "tags": [[i] for i in range(200)],
        },
        schema=schema,
    )
    t.append(model.slice(0, 120))
    t.append(model.slice(120))
    filters = [
        pc.field("k") == 201,
        pc.field("k") == 200,
        pc.field("k").isin([1, 3, 200, 398]),
        (pc.field("k") == 201) | (pc.field("k") == 16),
        (pc.field("k") == 16) & (pc.field("other") >= 2),
    ]
    before = [comparable_rows(t.to_arrow(filter=f).select(["n", "k", "other"])) for f in filters]
    for f, rows in zip(filters, before, strict=True):
        assert rows == comparable_rows(model.filter(f).select(["n", "k", "other"]))
    assert t.plan_splits(filter=filters[0]).blocklets_pruned_by_bloom == 0

    with pytest.raises(cl.InvalidOptionError):
        t.build_index()  # no bloom_filter_columns and no columns named
    for bad in (["nope"], ["flag"], ["tags"], ["k", "nope"]):
        version = t.version
        with pytest.raises(cl.InvalidOptionError):
            t.build_index(bad)
        assert t.refresh().version == version, bad
        assert "bloom_filter_columns" not in t.properties
        assert not list(tmp_path.rglob("*.bloom")), bad

    built = t.build_index(["k"])
    assert built.version == t.version
    assert built.columns == ("k",)
    assert built.blocklets == 25
    assert built.rows_read == 200
    assert t.properties["bloom_filter_columns"] == "k"
    assert built.files == len(list(tmp_path.rglob("*.bloom")))
    after = [comparable_rows(t.to_arrow(filter=f).select(["n", "k", "other"])) for f in filters]
    assert after == before
    plan = t.plan_splits(filter=filters[0])
    assert plan.blocklets_pruned_by_stats == 0 and plan.blocklets_pruned_by_bloom >= 20

    again = t.build_index()
    assert again.version is None and again.blocklets == 0
    assert t.build_index(["k"]).version is None
    # blocklets appended afterwards get filters from the property
    t.append(
        pa.table(
            {"n": [500], "k": [999], "other": [0], "flag": [True], "tags": [[1]]}, schema=schema
        )
    )
    assert t.build_index().version is None
    assert t.to_arrow(filter=pc.field("k") == 999).column("n").to_pylist() == [500]
