"""Pruning never changes a result: a filtered scan equals the unpruned scan filtered by pyarrow,
for any data and any filter; and on sorted data a selective filter really skips blocklets."""

from __future__ import annotations

import datetime
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import carbonlite as cl
from tests.support.tables import drop_memory, memory_uri, rows

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("i", pa.int32()),
        pa.field("f", pa.float64()),
        pa.field("s", pa.string()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("d", pa.decimal128(7, 2)),
        pa.field("b", pa.bool_()),
    ]
)
BASE_S = 1_767_225_600  # 2026-01-01T00:00:00Z
LONG = "p" * 70  # longer than the 64-byte statistics prefix
STRINGS = ["", "a", "ab", "b", "zz", "é", LONG + "a", LONG + "b", "p" * 64, "\U0010ffff" * 70]
FLOATS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5, -2.5, 3.0, 1e300]

# --- data ----------------------------------------------------------------------------------------


def _maybe(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), values, values, values)


COLUMN_VALUES = {
    "i": _maybe(st.integers(-6, 6)),
    "f": _maybe(
        st.sampled_from(FLOATS) | st.sampled_from([0.0, -0.0]) | st.floats(-10, 10, width=16)
    ),
    "s": _maybe(st.sampled_from(STRINGS)),
    "ts": _maybe(
        st.integers(-5, 5).flatmap(
            lambda k: st.sampled_from([0, 1, -1]).map(lambda us: (BASE_S + k) * 1_000_000 + us)
        )
    ),
    "d": _maybe(
        st.sampled_from([Decimal("0.10"), Decimal("0.07"), Decimal("-2.50"), Decimal("1.25")])
        | st.integers(-500, 500).map(lambda u: Decimal(u).scaleb(-2))
    ),
    "b": _maybe(st.booleans()),
}


@st.composite
def appends(draw: st.DrawFn) -> list[pa.Table]:
    """One to three appends of up to 16 rows; ids are unique across them."""
    out = []
    next_id = 0
    for _ in range(draw(st.integers(1, 3))):
        n = draw(st.integers(0, 16))
        columns: dict[str, Any] = {"id": list(range(next_id, next_id + n))}
        next_id += n
        for name, values in COLUMN_VALUES.items():
            columns[name] = draw(st.lists(values, min_size=n, max_size=n))
        columns["ts"] = pa.array(columns["ts"], pa.int64()).view(SCHEMA.field("ts").type)
        table = pa.table(columns, schema=SCHEMA)
        if draw(st.booleans()):  # sorted runs give blocklets narrow bounds
            table = table.sort_by([(draw(st.sampled_from(list(COLUMN_VALUES))), "ascending")])
        out.append(table)
    return out


# --- filters -------------------------------------------------------------------------------------

UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


@st.composite
def ts_literal(draw: st.DrawFn) -> pa.Scalar:
    unit = draw(st.sampled_from(list(UNITS)))
    seconds = BASE_S + draw(st.integers(-6, 6))
    extra = 0 if unit == "s" else draw(st.sampled_from([0, 1, -1]))
    return pa.scalar(seconds * UNITS[unit] + extra, pa.timestamp(unit, tz="UTC"))


Seen = dict[str, list[Any]]
"""Non-null values each column holds (timestamps as their stored integers)."""


def literals(column: str, seen: Seen) -> st.SearchStrategy[Any]:
    """Literals a user would compare ``column`` with: values the data holds, near misses and
    literals of other types than the column's."""
    if column in ("i", "id"):
        base = st.one_of(
            st.integers(-8, 30),
            st.integers(-8, 8).map(lambda v: pa.scalar(v, pa.int8())),
            st.integers(-8, 8).map(lambda v: pa.scalar(v, pa.int32())),
        )
    elif column == "f":
        base = st.one_of(st.sampled_from(FLOATS), st.integers(-3, 3), st.floats(-10, 10, width=16))
    elif column == "s":
        base = st.one_of(
            st.sampled_from(STRINGS),
            st.sampled_from(["p" * 63, "p" * 65, LONG, LONG + "c", "\U0010ffff" * 64, "aa"]),
        )
    elif column == "ts":
        base = ts_literal()
    elif column == "d":
        base = st.one_of(
            st.integers(-600, 600).map(lambda u: Decimal(u).scaleb(-2)),
            st.integers(-600, 600).map(lambda u: pa.scalar(Decimal(u).scaleb(-3))),
            st.sampled_from([0.1, 1.25, -2.5, 0.07]),  # Arrow compares these as float64
        )
    elif column == "b":
        base = st.booleans()
    else:
        raise AssertionError(column)
    if not seen.get(column):
        return base
    if column == "ts":
        present = [pa.scalar(v, SCHEMA.field("ts").type) for v in seen[column]]
    elif column == "d":  # the decimal itself, or the float a user would type
        present = [*seen[column], *(float(v) for v in seen[column])]
    else:
        present = seen[column]
    return st.one_of(st.sampled_from(present), base)


def _scalar(value: Any) -> pa.Scalar:
    return value if isinstance(value, pa.Scalar) else pa.scalar(value)


@st.composite
def comparisons(draw: st.DrawFn, seen: Seen) -> pc.Expression:
    column = draw(st.sampled_from(["id", *COLUMN_VALUES]))
    value = _scalar(draw(literals(column, seen)))
    op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
    field = pc.field(column)
    if draw(st.booleans()):  # literal first: 3 < a
        flipped = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
        literal = pc.scalar(value)
        return {
            "==": literal == field,
            "!=": literal != field,
            "<": literal < field,
            "<=": literal <= field,
            ">": literal > field,
            ">=": literal >= field,
        }[flipped]
    return {
        "==": field == value,
        "!=": field != value,
        "<": field < value,
        "<=": field <= value,
        ">": field > value,
        ">=": field >= value,
    }[op]


@st.composite
def membership(draw: st.DrawFn, seen: Seen) -> pc.Expression:
    column = draw(st.sampled_from(list(COLUMN_VALUES)))
    column_type = SCHEMA.field(column).type
    if column == "ts":
        member = st.integers(-6, 6).map(lambda k: (BASE_S + k) * 1_000_000)
    else:
        member = COLUMN_VALUES[column]
    if seen.get(column):
        member = st.sampled_from(seen[column]) | member
    values = draw(st.lists(st.none() | member, max_size=4))
    if column == "ts":
        value_set = pa.array(values, pa.int64()).view(column_type)
    else:
        value_set = pa.array(values, column_type)
    if draw(st.booleans()):
        return pc.field(column).isin(value_set)
    return pc.is_in(pc.field(column), value_set=value_set, skip_nulls=draw(st.booleans()))


@st.composite
def null_checks(draw: st.DrawFn) -> pc.Expression:
    column = draw(st.sampled_from(list(COLUMN_VALUES)))
    kind = draw(st.sampled_from(["is_null", "is_null_nan", "is_valid", "is_nan"]))
    if kind == "is_nan":
        return pc.field("f").is_nan()
    if kind == "is_valid":
        return pc.field(column).is_valid()
    return pc.field(column).is_null(nan_is_null=kind == "is_null_nan")


def filters(seen: Seen) -> st.SearchStrategy[pc.Expression]:
    """Any filter over ``SCHEMA``: leaves combined with ``~``, ``&`` and ``|``."""
    leaves = st.one_of(
        comparisons(seen),
        comparisons(seen),
        membership(seen),
        null_checks(),
        st.just(pc.field("i") < pc.field("id")),  # not prunable: applied exactly anyway
        st.just(pc.field("f") != pc.field("f")),  # NaN alone: pruned as is_nan (DuckDB's form)
        st.just(pc.field("f") == pc.field("f")),
        st.just(pc.field("b")),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            inner.map(lambda e: ~e),
            st.tuples(inner, inner).map(lambda p: p[0] & p[1]),
            st.tuples(inner, inner).map(lambda p: p[0] | p[1]),
        ),
        max_leaves=5,
    )


@st.composite
def dnf_terms(draw: st.DrawFn) -> tuple[str, str, Any]:
    column = draw(st.sampled_from(["i", "s", "d", "ts", "f"]))
    op = draw(st.sampled_from(["=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"]))
    if column == "ts":
        value: Any = datetime.datetime.fromtimestamp(
            BASE_S + draw(st.integers(-6, 6)), tz=datetime.timezone.utc
        )
        pool = [value]
    elif column == "d":
        value = Decimal(draw(st.integers(-600, 600))).scaleb(-2)
        pool = [value, Decimal("0.50")]
    else:
        value = draw(COLUMN_VALUES[column].filter(lambda v: v is not None))
        pool = draw(
            st.lists(COLUMN_VALUES[column].filter(lambda v: v is not None), min_size=1, max_size=3)
        )
    if op in ("in", "not in"):
        return (column, op, pool)
    return (column, op, value)


dnf_filters = st.one_of(
    st.lists(dnf_terms(), min_size=1, max_size=3),
    st.lists(st.lists(dnf_terms(), min_size=1, max_size=2), min_size=1, max_size=3),
)


# --- the property --------------------------------------------------------------------------------


def by_id(table: pa.Table) -> list[dict]:
    return sorted(rows(table), key=lambda r: r["id"])


def check(t: cl.Table, everything: pa.Table, expression: pc.Expression, given: Any) -> None:
    expected = everything.filter(expression)
    got = t.to_arrow(filter=given)
    assert got.schema.equals(SCHEMA)
    assert by_id(got) == by_id(expected), f"filter {expression}"
    plan = t.plan_splits(filter=given)
    assert plan.blocklets_selected <= plan.blocklets_total
    assert plan.num_rows >= expected.num_rows
    projected = t.to_arrow(columns=["id"], filter=given)
    assert sorted(projected.column("id").to_pylist()) == sorted(expected.column("id").to_pylist())


SETTINGS = settings(
    max_examples=40,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow],
)


def seen_values(table: pa.Table) -> Seen:
    plain = table.set_column(
        table.schema.get_field_index("ts"), "ts", table.column("ts").cast(pa.int64())
    )
    return {
        name: [v for v in plain.column(name).to_pylist() if v is not None] for name in COLUMN_VALUES
    }


@SETTINGS
@given(data=appends(), max_rows=st.integers(1, 6), draw=st.data())
def test_pruned_scans_equal_filtering_everything(
    data: list[pa.Table], max_rows: int, draw: st.DataObject
) -> None:
    uri = memory_uri("prune")
    try:
        t = cl.create_table(uri, SCHEMA, properties={"blocklet_max_rows": str(max_rows)})
        for table in data:
            t.append(table)
        everything = t.to_arrow()
        assert by_id(everything) == by_id(pa.concat_tables(data))
        seen = seen_values(everything)
        for expression in draw.draw(st.lists(filters(seen), min_size=1, max_size=6), "filters"):
            check(t, everything, expression, expression)
        for dnf in draw.draw(st.lists(dnf_filters, max_size=3), "dnf"):
            check(t, everything, pq.filters_to_expression(dnf), dnf)
    finally:
        drop_memory(uri)


# --- pruning pays off ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sorted_table() -> pa.Table:
    uri = memory_uri("sorted")
    t = cl.create_table(
        uri,
        pa.schema([("ts", pa.timestamp("ms", tz="UTC")), ("v", pa.int64())]),
        sort_columns=["ts"],
        properties={"blocklet_max_rows": "1000"},
    )
    n = 200_000
    for part in range(4):
        ms = pa.array(range(part * n // 4, (part + 1) * n // 4), pa.int64())
        t.append(pa.table({"ts": ms.view(pa.timestamp("ms", tz="UTC")), "v": pc.multiply(ms, 3)}))
    yield t
    drop_memory(uri)


@pytest.mark.parametrize("start", [0, 50_500, 123_456, 198_000])
def test_a_selective_filter_skips_blocklets(sorted_table: cl.Table, start: int) -> None:
    stop = start + 2_000  # 1% of the rows
    lo = pa.scalar(start, pa.timestamp("ms", tz="UTC"))
    hi = pa.scalar(stop, pa.timestamp("ms", tz="UTC"))
    expression = (pc.field("ts") >= lo) & (pc.field("ts") < hi)
    plan = sorted_table.plan_splits(filter=expression)
    assert plan.blocklets_total == 200
    assert plan.blocklets_selected <= 4  # at most 2% of the blocklets
    assert plan.blocklets_pruned >= 196
    assert plan.bytes_selected * 40 < plan.bytes_total
    got = sorted_table.to_arrow(filter=expression)
    assert got.column("v").to_pylist() == [3 * i for i in range(start, stop)]
    # the same range as DNF tuples, with datetimes
    as_dnf = [
        ("ts", ">=", datetime.datetime.fromtimestamp(start / 1000, tz=datetime.timezone.utc)),
        ("ts", "<", datetime.datetime.fromtimestamp(stop / 1000, tz=datetime.timezone.utc)),
    ]
    assert sorted_table.plan_splits(filter=as_dnf).blocklets_selected == plan.blocklets_selected
    assert sorted_table.to_arrow(filter=as_dnf).column("v").equals(got.column("v"))


def test_point_and_empty_lookups_on_sorted_data(sorted_table: cl.Table) -> None:
    point = pc.field("ts") == pa.scalar(77_777, pa.timestamp("ms", tz="UTC"))
    assert sorted_table.plan_splits(filter=point).blocklets_selected == 1
    assert sorted_table.to_arrow(filter=point).column("v").to_pylist() == [3 * 77_777]
    beyond = pc.field("ts") > pa.scalar(10**9, pa.timestamp("ms", tz="UTC"))
    assert sorted_table.plan_splits(filter=beyond).blocklets_selected == 0
    assert sorted_table.to_arrow(filter=beyond).num_rows == 0
    # a filter pruning cannot see into selects everything but stays exact
    opaque = (pc.field("v") * 1 == 300) | (pc.field("v") * 1 == 300_000)
    assert sorted_table.plan_splits(filter=opaque).blocklets_selected == 200
    assert sorted_table.to_arrow(filter=opaque).column("v").to_pylist() == [300, 300_000]


def test_split_reads_add_up_to_the_scan(sorted_table: cl.Table) -> None:
    expression = (pc.field("ts") < pa.scalar(1_500, pa.timestamp("ms", tz="UTC"))) | (
        pc.field("ts") >= pa.scalar(199_900, pa.timestamp("ms", tz="UTC"))
    )
    plan = sorted_table.plan_splits(columns=["v"], filter=expression)
    assert len(plan.splits) == 2 and plan.blocklets_selected == 3
    batches = [
        b
        for split in plan.splits
        for b in sorted_table.read_split(split, columns=["v"], filter=expression)
    ]
    got = pa.Table.from_batches(batches)
    assert got.schema.names == ["v"]
    expected = [3 * i for i in [*range(1_500), *range(199_900, 200_000)]]
    assert got.column("v").to_pylist() == expected
    assert (
        sorted_table.to_arrow(columns=["v"], filter=expression).column("v").to_pylist() == expected
    )


# --- pinned cases -------------------------------------------------------------------------------


def _one_blocklet_table(uri: str, schema: pa.Schema, values: dict[str, list]) -> cl.Table:
    t = cl.create_table(uri, schema)
    t.append(pa.table(values, schema=schema))
    return t


@pytest.mark.parametrize(
    ("values", "value_set"),
    [([-0.0, -0.0], [0.0]), ([0.0, 0.0], [-0.0]), ([-0.0, 0.0], [-0.0]), ([0.0, -0.0], [0.0])],
)
def test_signed_zeros_and_is_in(mem_uri: str, values: list[float], value_set: list[float]) -> None:
    """``is_in`` tells -0.0 from 0.0 (``==`` does not): bounds equal to a member of the set do
    not prove that every row is in it."""
    schema = pa.schema([("f", pa.float64())])
    t = _one_blocklet_table(mem_uri, schema, {"f": values})
    for expression in (
        pc.field("f").isin(value_set),
        ~pc.field("f").isin(value_set),
        pc.field("f") == value_set[0],
        pc.field("f") != value_set[0],
    ):
        expected = t.to_arrow().filter(expression)
        got = t.to_arrow(filter=expression)
        assert rows(got) == rows(expected), f"filter {expression}"


@pytest.mark.parametrize("literal", [0.1, 0.07, 1.1, -2.2])
def test_decimal_column_against_a_float_literal(mem_uri: str, literal: float) -> None:
    """Arrow compares a decimal column with a float literal as float64; pruning must agree."""
    schema = pa.schema([("d", pa.decimal128(9, 2))])
    value = Decimal(str(literal))
    t = _one_blocklet_table(mem_uri, schema, {"d": [value, value]})
    for expression in (
        pc.field("d") == literal,
        pc.field("d") <= literal,
        pc.field("d") >= literal,
        pc.field("d") != literal,
    ):
        expected = t.to_arrow().filter(expression)
        got = t.to_arrow(filter=expression)
        assert rows(got) == rows(expected), f"filter {expression}"
    assert t.to_arrow(filter=pc.field("d") == literal).num_rows == 2


def test_truncated_string_bounds_still_find_long_values(mem_uri: str) -> None:
    schema = pa.schema([("s", pa.string())])
    t = cl.create_table(mem_uri, schema, properties={"blocklet_max_rows": "1"})
    values = [LONG + "a", LONG + "b", "\U0010ffff" * 70, "p" * 64]
    t.append(pa.table({"s": values}, schema=schema))
    for value in values:
        assert t.to_arrow(filter=pc.field("s") == value).column("s").to_pylist() == [value]
    top = pc.field("s") >= "\U0010ffff" * 69  # only the blocklet without an upper bound
    assert t.plan_splits(filter=top).blocklets_selected == 1
    assert t.to_arrow(filter=top).column("s").to_pylist() == [values[2]]
    assert t.to_arrow(filter=pc.field("s") > "p" * 65).column("s").to_pylist() == values[:3]


# --- errors --------------------------------------------------------------------------------------


def test_filters_naming_unknown_columns_are_refused(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, SCHEMA)
    for bad in (
        pc.field("nope") > 1,
        (pc.field("i") > 1) & pc.field("other").is_null(),
        [("nope", "=", 1)],
    ):
        with pytest.raises(cl.InvalidFilterError, match=r"nope|other") as info:
            t.to_arrow(filter=bad)
        assert "its columns are" in str(info.value)
        with pytest.raises(cl.InvalidFilterError):
            t.plan_splits(filter=bad)


@pytest.mark.parametrize(
    ("dnf", "expected"),
    [
        ([("i", "~=", 1)], "unknown filter operator '~='"),
        ([("i", "like", "a%")], "unknown filter operator 'like'"),
        ([("i", ">")], "must be (column, op, value)"),
        ([("i", "in", 5)], "needs a list of values"),
        ([("i", "in", "abc")], "needs a list of values"),
        ([[("i", ">", 1)], []], "empty list of filter terms"),
        ([], "empty list of filter terms"),
    ],
)
def test_malformed_dnf_filters_are_refused(mem_uri: str, dnf: list, expected: str) -> None:
    t = cl.create_table(mem_uri, SCHEMA)
    with pytest.raises(cl.InvalidFilterError) as info:
        t.to_arrow(filter=dnf)
    assert expected in str(info.value)


@pytest.mark.parametrize("bad", [b"i > 1", 5, {"i": 1}])
def test_filters_of_the_wrong_kind_are_refused(mem_uri: str, bad: Any) -> None:
    t = cl.create_table(mem_uri, SCHEMA)
    with pytest.raises(cl.InvalidFilterError, match=r"Expression, DNF tuples .* or a string"):
        t.to_arrow(filter=bad)


@pytest.mark.parametrize(
    "bad",
    [
        [("ts", ">", datetime.datetime(2026, 1, 1))],  # naive datetime, zoned column
        pc.field("i") > "x",
        [("s", "in", [1, 2])],
        pc.field("i") + 1,  # not a condition
        pc.field(("s", "x")) > 1,  # a string has no fields
    ],
    ids=["naive-datetime", "int-vs-string", "is-in-of-ints-on-strings", "not-boolean", "nested"],
)
def test_filters_that_do_not_fit_the_column_types_are_refused(mem_uri: str, bad: Any) -> None:
    """A filter that cannot apply to the table is bad input: an InvalidFilterError naming the
    table, raised when the scan is planned, whether or not any blocklet is read."""
    t = cl.create_table(mem_uri, SCHEMA)
    with pytest.raises(cl.InvalidFilterError) as info:
        t.plan_splits(filter=bad)  # no data yet: nothing to read
    assert mem_uri in str(info.value)
    t.append(pa.table({"id": [1, 2], "i": pa.array([1, 2], pa.int32())}), schema_mode="merge")
    with pytest.raises(cl.InvalidFilterError):
        t.to_arrow(filter=bad)
    assert t.to_arrow(filter=pc.field("i") > 1).column("id").to_pylist() == [2]


def test_comparisons_with_a_nan_literal(mem_uri: str) -> None:
    """Every ordering comparison with NaN is false (so its negation is true); != NaN is true."""
    schema = pa.schema([("f", pa.float64())])
    t = cl.create_table(mem_uri, schema, properties={"blocklet_max_rows": "1"})
    values = [1.0, math.inf, -math.inf, -0.0, math.nan, None]
    t.append(pa.table({"f": values}, schema=schema))
    nan = pa.scalar(math.nan)
    field = pc.field("f")
    for expression in (
        field < nan,
        field <= nan,
        field > nan,
        field >= nan,
        field == nan,
        field != nan,
        ~(field < nan),
        ~(field <= nan),
        ~(field > nan),
        ~(field >= nan),
        ~(field == nan),
        ~(field != nan),
        ~(pc.scalar(nan) > field),
    ):
        expected = t.to_arrow().filter(expression)
        assert rows(t.to_arrow(filter=expression)) == rows(expected), f"filter {expression}"
    assert t.to_arrow(filter=~(field < nan)).num_rows == 5  # every non-null row
