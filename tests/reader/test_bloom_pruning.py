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
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import carbonlite as cl
from carbonlite.reader.planner import ScanPlan

_EPOCH = datetime.datetime(2026, 1, 1)
_DAY0 = datetime.date(2020, 1, 1)

# Per column type, value(i) is an injective map of integers to values: stored rows use a
# small pool of them, lookups of absent values use others.
VALUE_OF: dict[str, tuple[pa.DataType, Callable[[int], Any]]] = {
    "int32": (pa.int32(), lambda i: i * 3 - 50),
    "int64": (pa.int64(), lambda i: i * 1_000_003 - 2**40),
    "uint64": (pa.uint64(), lambda i: 2**63 - 30 + i * 5),  # crosses 2**63
    "string": (pa.string(), lambda i: f"user-{i}"),
    "binary": (pa.binary(), lambda i: f"key\x00{i}".encode()),
    "date32": (pa.date32(), lambda i: _DAY0 + datetime.timedelta(days=i)),
    "timestamp_us": (
        pa.timestamp("us"),
        lambda i: _EPOCH + datetime.timedelta(microseconds=i * 1_001),
    ),
    "timestamp_ns_utc": (pa.timestamp("ns", tz="UTC"), lambda i: 1_767_225_600 * 10**9 + i * 7),
    "decimal": (pa.decimal128(10, 2), lambda i: Decimal(i * 37 - 500).scaleb(-2)),
    "float64": (pa.float64(), lambda i: i * 0.5 - 3.0),
    # beyond the brief's list: more types filters are built for
    "float32": (pa.float32(), lambda i: i * 0.25 - 2.0),
    "fixed_binary": (pa.binary(4), lambda i: b"%04d" % i),
    "large_string": (pa.large_string(), lambda i: "é" * (i % 3) + str(i)),
    "time64": (pa.time64("us"), lambda i: datetime.time(0, i // 60 % 60, i % 60, i * 7 % 999_999)),
    "duration": (pa.duration("ms"), lambda i: datetime.timedelta(milliseconds=i * 1_001)),
    "timestamp_s_tz": (pa.timestamp("s", tz="Europe/Paris"), lambda i: 1_700_000_000 + i * 61),
}
FLOAT_SPECIALS = [-0.0, 0.0, math.nan]
POOL = range(0, 24, 2)  # stored values: value(i) for even i in here ...
ABSENT = [*range(1, 24, 2), *range(1_000, 1_400)]  # ... never these (odd, or far out)


def _pool(kind: str) -> list[Any]:
    value = VALUE_OF[kind][1]
    out = [value(i) for i in POOL]
    return out + FLOAT_SPECIALS if kind.startswith("float") else out


def _absent(kind: str) -> list[Any]:
    value = VALUE_OF[kind][1]
    return [value(i) for i in ABSENT]


def _schema(kind: str) -> pa.Schema:
    return pa.schema(
        [
            pa.field("n", pa.int64(), nullable=False),
            pa.field("k", VALUE_OF[kind][0]),
            pa.field("other", pa.int64()),
        ]
    )


def _batch(kind: str, values: list[Any], first: int) -> pa.Table:
    n = list(range(first, first + len(values)))
    return pa.table(
        {
            "n": n,
            "k": pa.array(values, VALUE_OF[kind][0]),
            "other": [(i * 7919) % 101 for i in n],
        },
        schema=_schema(kind),
    )


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows sorted by ``n`` (unique), NaN made comparable."""
    table = table.sort_by("n")
    columns = [table.column(c).to_pylist() for c in ("n", "k", "other")]
    return [
        tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)
        for row in zip(*columns, strict=True)
    ]


def check_filter(t: cl.Table, model: pa.Table, expression: pc.Expression) -> ScanPlan:
    """The table's pruned, filtered scan has exactly the rows pyarrow's filter keeps of every
    appended row; the plan's counts add up."""
    expected = model.filter(expression)
    got = t.to_arrow(filter=expression)
    assert _rows(got) == _rows(expected), f"filter {expression}"
    plan = t.plan_splits(filter=expression)
    assert plan.blocklets_selected + plan.blocklets_pruned == plan.blocklets_total
    assert (
        plan.blocklets_pruned_by_partition
        + plan.blocklets_pruned_by_stats
        + plan.blocklets_pruned_by_bloom
        + plan.blocklets_selected
        == plan.blocklets_total
    ), f"filter {expression}: {plan}"
    assert plan.num_rows >= expected.num_rows
    assert plan.blocklets_bloom_unreadable == 0
    return plan


def _new_table(root: Path, kind: str, max_rows: int, **properties: str) -> cl.Table:
    return cl.create_table(
        str(root / f"t-{uuid.uuid4().hex[:12]}"),
        _schema(kind),
        properties={
            "blocklet_max_rows": str(max_rows),
            "bloom_filter_columns": "k",
            **properties,
        },
    )


# --- the differential test -------------------------------------------------------------------


@st.composite
def lookups(draw: st.DrawFn, kind: str, stored: list[Any]) -> pc.Expression:
    """A filter a bloom filter of ``k`` can serve (or a conjunct of one)."""
    column_type = VALUE_OF[kind][0]
    present = [v for v in stored if v is not None] or _pool(kind)
    absent = _absent(kind)
    any_value = st.sampled_from(present) | st.sampled_from(absent)

    def eq(v: Any) -> pc.Expression:
        if draw(st.booleans()):
            return pc.field("k") == pa.scalar(v, column_type)
        return pc.scalar(pa.scalar(v, column_type)) == pc.field("k")  # literal first

    shape = draw(st.sampled_from(["present", "absent", "isin", "big_isin", "or", "and_range"]))
    if shape == "present":
        return eq(draw(st.sampled_from(present)))
    if shape == "absent":
        return eq(draw(st.sampled_from(absent)))
    if shape in ("isin", "big_isin"):
        size = (0, 6) if shape == "isin" else (50, 300)
        values = draw(st.lists(st.sampled_from(absent), min_size=size[0], max_size=size[1]))
        values += draw(st.lists(st.sampled_from(present), max_size=2))
        values = draw(st.permutations(values)) if len(values) < 20 else values
        if not values:
            values = [absent[0]]
        if draw(st.integers(0, 4)) == 0:
            values.append(None)  # matches null rows: the filters cannot refute it
        return pc.field("k").isin(pa.array(values, column_type))
    if shape == "or":
        return eq(draw(any_value)) | eq(draw(any_value))
    low = draw(st.integers(0, 100))
    return eq(draw(any_value)) & (pc.field("other") >= low) & (pc.field("n") < 10_000)


@st.composite
def appended(draw: st.DrawFn, kind: str) -> list[list[Any]]:
    pool = st.sampled_from(_pool(kind)) | st.none()
    return draw(st.lists(st.lists(pool, min_size=1, max_size=40), min_size=1, max_size=4))


SETTINGS = settings(
    max_examples=4,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
SLOW_SETTINGS = settings(SETTINGS, max_examples=80)


def _differential(tmp_path: Path, kind: str, data: st.DataObject) -> None:
    batches = data.draw(appended(kind), "batches")
    max_rows = data.draw(st.integers(3, 20), "blocklet_max_rows")
    t = _new_table(tmp_path, kind, max_rows)
    parts, first = [], 0
    for values in batches:
        part = _batch(kind, values, first)
        first += len(values)
        t.append(part)
        parts.append(part)
    model = pa.concat_tables(parts)
    assert _rows(t.to_arrow()) == _rows(model)
    stored = model.column("k").to_pylist()
    for _ in range(6):
        check_filter(t, model, data.draw(lookups(kind, stored), "filter"))


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


def _interleaved(n: int) -> list[int]:
    """Even numbers 0..2n-2 in an order that puts small and large ones in every blocklet."""
    return [2 * ((i * 37) % n) for i in range(n)]


def test_an_absent_value_between_bounds_is_pruned_by_bloom(tmp_path: Path) -> None:
    """Even ids stored out of order in blocklets of 8: every blocklet's min/max holds any odd
    id, so only the bloom filters can skip them."""
    t = _new_table(tmp_path, "int64", 8)
    values = _interleaved(400)  # 50 blocklets, each from below 20 to above 760
    model = pa.table(
        {"n": list(range(400)), "k": values, "other": [i % 3 for i in range(400)]},
        schema=_schema("int64"),
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
    ids = _interleaved(320)
    model = pa.table(
        {"n": list(range(320)), "k": [f"u{i}" for i in ids], "other": [0] * 320},
        schema=_schema("string"),
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
    model = _batch("float64", values, 0)
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
        assert _rows(got) == _rows(expected), f"filter {expression}"


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
    values = _interleaved(200)
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
    before = [_rows(t.to_arrow(filter=f).select(["n", "k", "other"])) for f in filters]
    for f, rows in zip(filters, before, strict=True):
        assert rows == _rows(model.filter(f).select(["n", "k", "other"]))
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
    after = [_rows(t.to_arrow(filter=f).select(["n", "k", "other"])) for f in filters]
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
