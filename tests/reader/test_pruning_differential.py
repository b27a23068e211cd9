"""Differential test of pruning: a pruned, filtered scan returns exactly the rows pyarrow's own
filter keeps on the unpruned table, for columns of many types and literals of other types.

The table is written in many small appends of tiny blocklets, each append sorted on another
column, so blocklets have narrow, distinct bounds and pruning really skips them (asserted in
the explicit cases at the end). Where pyarrow itself cannot evaluate a filter, the scan must
either raise a ``CarbonLiteError`` or return the exactly right rows: CarbonLite compares an
integer column with a literal of another numeric type exactly, where pyarrow casts the column
to a float type and fails on large values. "Exactly right" is computed by an oracle that
evaluates such comparisons in Python (exact for int, float and Decimal) and every other part of
the filter with pyarrow.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.types as pat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import carbonlite as cl
from tests.support.tables import drop_memory, memory_uri

PARIS = "Europe/Paris"
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("i64", pa.int64()),
        pa.field("i32", pa.int32()),
        pa.field("u64", pa.uint64()),
        pa.field("f64", pa.float64()),
        pa.field("f32", pa.float32()),
        pa.field("s", pa.string()),
        pa.field("ts", pa.timestamp("ms", tz=PARIS)),
        pa.field("d", pa.decimal128(9, 3)),
        pa.field("dt", pa.date32()),
        pa.field("b", pa.bool_()),
    ]
)
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
LONG = "p" * 70  # longer than the 64-byte statistics prefix
BIG = 2**53 + 1  # the first integer a float64 cannot hold

VALUES: dict[str, list[Any]] = {
    "i64": [0, 1, 2, 3, -1, -2, 5, 2**24 + 1, 2**53, BIG, -BIG, 2**62, -(2**63), 2**63 - 1],
    "i32": [0, 1, 2, -1, 7, -(2**31), 2**31 - 1, 2**24 + 1],
    "u64": [0, 1, 5, 2**53, BIG, 2**63 - 1, 2**63, 2**63 + 5, 2**64 - 1],
    "f64": [math.nan, -0.0, 0.0, math.inf, -math.inf, 1.5, 0.1, -2.5, 1e300, 2.0**53, 3.0],
    "f32": [math.nan, -0.0, 0.0, math.inf, 1.5, 0.1, -2.5, 2.0**24, 3.0, 3.4e38],
    "s": ["", "a", "ab", "b", "é", "日本", LONG + "a", LONG + "b", "p" * 64, "\U0010ffff" * 70],
    "ts": [BASE_MS + k for k in (-3_600_000, -2, -1, 0, 1, 2, 86_400_000)],
    "d": [Decimal(v) for v in ("0.000", "0.100", "1.500", "-2.125", "999999.999", "1.001")],
    "dt": [datetime.date(2026, 1, d) for d in (1, 2, 3, 31)] + [datetime.date(1969, 12, 31)],
    "b": [True, False],
}
ROWS = 96
MAX_ROWS = 4  # rows per blocklet


def _column(name: str, seed: int) -> list[Any]:
    pool = VALUES[name]
    out: list[Any] = []
    for k in range(ROWS):
        r = (k * 7 + seed * 13 + k // 5) % (len(pool) + 2)
        out.append(None if r >= len(pool) else pool[r])
    return out


def _table() -> pa.Table:
    columns: dict[str, Any] = {"id": list(range(ROWS))}
    for seed, name in enumerate(VALUES):
        values = _column(name, seed)
        if name == "ts":
            columns[name] = pa.array(values, pa.int64()).view(SCHEMA.field(name).type)
        else:
            columns[name] = pa.array(values, SCHEMA.field(name).type)
    return pa.table(columns, schema=SCHEMA)


@pytest.fixture(scope="module")
def table() -> Iterator[cl.Table]:
    uri = memory_uri("differential")
    t = cl.create_table(uri, SCHEMA, properties={"blocklet_max_rows": str(MAX_ROWS)})
    data = _table()
    sort_keys = ["id", *VALUES]
    step = 12
    for k, start in enumerate(range(0, ROWS, step)):
        part = data.slice(start, step)
        t.append(part.sort_by([(sort_keys[k % len(sort_keys)], "ascending")]))
    yield t
    drop_memory(uri)


@pytest.fixture(scope="module")
def everything(table: cl.Table) -> pa.Table:
    out = table.to_arrow()
    assert out.num_rows == ROWS
    assert table.plan_splits().blocklets_total >= ROWS // MAX_ROWS
    return out


# --- filters as trees: an Arrow expression, and an oracle ------------------------------------


class _Undefined(Exception):
    """pyarrow cannot evaluate a part that CarbonLite does not evaluate exactly either."""


def _is_number(t: pa.DataType) -> bool:
    return bool(pat.is_integer(t) or pat.is_floating(t) or pat.is_decimal(t))


def _arrow_mask(expression: pc.Expression, table: pa.Table) -> pa.Array:
    try:
        projected = ds.dataset(table).to_table(columns={"m": expression})
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise _Undefined(str(exc)) from None
    return projected.column("m").combine_chunks()


@dataclass(frozen=True)
class Leaf:
    kind: str  # "cmp", "isin", "is_null", "is_valid", "is_nan", "bool"
    column: str
    op: str = ""
    literal: Any = None
    flipped: bool = False
    skip_nulls: bool = False
    nan_is_null: bool = False

    def expression(self) -> pc.Expression:
        f = pc.field(self.column)
        if self.kind == "cmp":
            lit = pc.scalar(self.literal)
            ops = {
                "==": lambda a, b: a == b,
                "!=": lambda a, b: a != b,
                "<": lambda a, b: a < b,
                "<=": lambda a, b: a <= b,
                ">": lambda a, b: a > b,
                ">=": lambda a, b: a >= b,
            }
            if self.flipped:  # literal op column, the same condition
                flip = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
                return ops[flip[self.op]](lit, f)
            return ops[self.op](f, lit)
        if self.kind == "isin":
            return pc.is_in(f, value_set=self.literal, skip_nulls=self.skip_nulls)
        if self.kind == "is_null":
            return f.is_null(nan_is_null=self.nan_is_null)
        if self.kind == "is_valid":
            return f.is_valid()
        if self.kind == "is_nan":
            return f.is_nan()
        return f

    def oracle(self, table: pa.Table) -> pa.Array:
        column_type = table.schema.field(self.column).type
        values = table.column(self.column).to_pylist()
        if self.kind == "cmp" and pat.is_integer(column_type) and _is_number(self.literal.type):
            v = self.literal.as_py()
            compare = {
                "==": lambda x: x == v,
                "!=": lambda x: x != v,
                "<": lambda x: x < v,
                "<=": lambda x: x <= v,
                ">": lambda x: x > v,
                ">=": lambda x: x >= v,
            }[self.op]
            return pa.array([None if x is None else compare(x) for x in values], pa.bool_())
        if self.kind == "isin" and pat.is_integer(column_type) and _is_number(self.literal.type):
            members = self.literal.to_pylist()
            null_matches = None in members and not self.skip_nulls
            return pa.array(
                [null_matches if x is None else any(x == m for m in members) for x in values],
                pa.bool_(),
            )
        return _arrow_mask(self.expression(), table)


@dataclass(frozen=True)
class Node:
    op: str  # "and", "or", "not"
    parts: tuple[Any, ...]

    def expression(self) -> pc.Expression:
        exprs = [p.expression() for p in self.parts]
        if self.op == "not":
            return ~exprs[0]
        out = exprs[0]
        for e in exprs[1:]:
            out = (out & e) if self.op == "and" else (out | e)
        return out

    def oracle(self, table: pa.Table) -> pa.Array:
        masks = [p.oracle(table) for p in self.parts]
        if self.op == "not":
            return pc.invert(masks[0])
        out = masks[0]
        for m in masks[1:]:
            out = pc.and_kleene(out, m) if self.op == "and" else pc.or_kleene(out, m)
        return out


# --- literals of many types ------------------------------------------------------------------

_NUMBERS = st.sampled_from(
    [0, 1, 2, 3, -1, 5, 7, 2**24 + 1, 2**31, 2**53, BIG, 2**62, 2**63, 2**64 - 1, -(2**63)]
)
_FLOATS = st.sampled_from(
    [1.5, -1.5, 2.0, 0.5, 0.1, -0.0, 0.0, math.nan, math.inf, -math.inf, 2.0**53, 9.3e18, 1e300]
)


def _scalar(value: Any, t: pa.DataType | None = None) -> pa.Scalar | None:
    try:
        return pa.scalar(value, t) if t is not None else pa.scalar(value)
    except (pa.ArrowException, OverflowError, ValueError, TypeError):
        return None


@st.composite
def numeric_literals(draw: st.DrawFn, column: str) -> pa.Scalar:
    present = [v for v in VALUES[column] if not (isinstance(v, float) and math.isnan(v))]
    kind = draw(st.sampled_from(["present", "int", "float", "float", "typed", "decimal"]))
    if kind == "present":
        value = draw(st.sampled_from(present))
        t = SCHEMA.field(column).type if draw(st.booleans()) else None
        scalar = _scalar(value, t)
    elif kind == "int":
        scalar = _scalar(draw(_NUMBERS))
    elif kind == "float":
        value = float(draw(st.sampled_from(present)))
        nudge = draw(st.sampled_from([0.0, 0.5, -0.5]))  # between two integers, or on one
        scalar = _scalar(draw(_FLOATS) if draw(st.booleans()) else value + nudge)
    elif kind == "typed":
        t = draw(st.sampled_from([pa.int8(), pa.int32(), pa.uint64(), pa.float32(), pa.float64()]))
        value = draw(st.sampled_from([*present, 1.5, 0.1, -1, 2**63]))
        scalar = _scalar(value, t)
    else:
        scalar = _scalar(
            draw(
                st.sampled_from(
                    [
                        Decimal("1.5"),
                        Decimal("1.50"),
                        Decimal("0.10000"),
                        Decimal("-2.125"),
                        Decimal("2"),
                        Decimal("1.0015"),
                    ]
                )
            )
        )
    return scalar if scalar is not None else pa.scalar(1)


@st.composite
def ts_literals(draw: st.DrawFn) -> pa.Scalar:
    unit = draw(st.sampled_from(["s", "ms", "us", "ns"]))
    tz = draw(st.sampled_from([PARIS, PARIS, "UTC", "Asia/Tokyo"]))
    ms = draw(st.sampled_from(VALUES["ts"])) + draw(st.sampled_from([0, 0, 1, -1]))
    per_ms = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}[unit]
    if per_ms is None:
        raw = ms // 1000
    else:
        raw = ms * per_ms + draw(st.sampled_from([0, 0, 1, -1])) * (per_ms > 1)
    return pa.scalar(raw, pa.int64()).cast(pa.timestamp(unit, tz=tz))


@st.composite
def literals(draw: st.DrawFn, column: str) -> pa.Scalar:
    if column in ("i64", "i32", "u64", "f64", "f32"):
        return draw(numeric_literals(column))
    if column == "s":
        value = draw(
            st.sampled_from([*VALUES["s"], "p" * 63, "p" * 65, LONG, LONG + "c", "é" * 40, "aa"])
        )
        return pa.scalar(value, draw(st.sampled_from([pa.string(), pa.large_string()])))
    if column == "ts":
        return draw(ts_literals())
    if column == "d":
        return draw(
            st.sampled_from(
                [
                    pa.scalar(Decimal("1.5")),  # scale 1
                    pa.scalar(Decimal("1.50")),
                    pa.scalar(Decimal("0.10000")),  # scale 5
                    pa.scalar(Decimal("1.0005")),
                    pa.scalar(Decimal("-2.125"), pa.decimal128(9, 3)),
                    pa.scalar(Decimal("999999.999"), pa.decimal128(9, 3)),
                    pa.scalar(0.1),
                    pa.scalar(1.5),
                    pa.scalar(1),  # pyarrow refuses decimal128(9, 3) > int64
                ]
            )
        )
    if column == "dt":
        day = draw(st.sampled_from(VALUES["dt"]))
        return draw(
            st.sampled_from(
                [
                    pa.scalar(day, pa.date32()),
                    pa.scalar(day, pa.date64()),
                    pa.scalar(datetime.datetime(day.year, day.month, day.day), pa.timestamp("s")),
                ]
            )
        )
    return pa.scalar(draw(st.booleans()))


@st.composite
def comparisons(draw: st.DrawFn) -> Leaf:
    # integer columns twice: literals of other types are where pyarrow itself goes wrong
    column = draw(st.sampled_from([*VALUES, "i64", "i32", "u64"]))
    return Leaf(
        "cmp",
        column,
        op=draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="])),
        literal=draw(literals(column)),
        flipped=draw(st.booleans()),
    )


@st.composite
def memberships(draw: st.DrawFn) -> Leaf:
    column = draw(st.sampled_from(["i64", "i32", "u64", "f64", "f32", "s", "d", "b"]))
    column_type = SCHEMA.field(column).type
    pool: list[Any] = [v for v in VALUES[column] if not (isinstance(v, float) and math.isnan(v))]
    members = draw(st.lists(st.none() | st.sampled_from(pool), min_size=1, max_size=4))
    t: pa.DataType = column_type
    if column in ("i64", "i32", "u64") and draw(st.booleans()):
        t = pa.float64()  # pyarrow casts the column to compare: fails on large values
        members = [None if m is None else float(m) for m in members]
        members.append(draw(_FLOATS))
    value_set = pa.array(members, t)
    return Leaf("isin", column, literal=value_set, skip_nulls=draw(st.booleans()))


@st.composite
def null_checks(draw: st.DrawFn) -> Leaf:
    column = draw(st.sampled_from(list(VALUES)))
    kind = draw(st.sampled_from(["is_null", "is_null_nan", "is_valid", "is_nan"]))
    if kind == "is_nan":
        return Leaf("is_nan", draw(st.sampled_from(["f64", "f32"])))
    if kind == "is_null_nan":
        return Leaf("is_null", column, nan_is_null=True)
    return Leaf(kind, column)


def filters() -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        comparisons(),
        comparisons(),
        comparisons(),
        memberships(),
        null_checks(),
        st.just(Leaf("bool", "b")),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            inner.map(lambda e: Node("not", (e,))),
            st.tuples(inner, inner).map(lambda p: Node("and", p)),
            st.tuples(inner, inner).map(lambda p: Node("or", p)),
        ),
        max_leaves=4,
    )


# --- the property ----------------------------------------------------------------------------


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def check(
    t: cl.Table, everything: pa.Table, tree: Any, given: Any = None, *, plans: bool = True
) -> None:
    """``t.to_arrow(filter=given)`` keeps exactly the rows ``tree`` selects (``plans``: and
    the plan and a projected scan agree)."""
    expression = tree.expression()
    given = expression if given is None else given
    try:
        expected: list[int] | None = ids(everything.filter(expression))
    except (pa.ArrowException, TypeError, ValueError):
        expected = None  # pyarrow cannot evaluate it; ask the oracle
    if expected is None:
        try:
            expected = ids(everything.filter(tree.oracle(everything)))
        except _Undefined:
            expected = None
    try:
        got = t.to_arrow(filter=given)
    except cl.CarbonLiteError:
        # Only where pyarrow itself fails; never a raw Arrow error.
        assert everything_fails(everything, expression), f"filter {expression} raised"
        return
    assert expected is not None, f"filter {expression}: pyarrow fails, CarbonLite did not"
    assert got.schema.equals(SCHEMA)
    assert ids(got) == expected, f"filter {expression}"
    if not plans:
        return
    plan = t.plan_splits(filter=given)
    assert plan.blocklets_selected <= plan.blocklets_total
    assert plan.num_rows >= len(expected)
    projected = t.to_arrow(columns=["id"], filter=given)
    assert ids(projected) == expected


def everything_fails(everything: pa.Table, expression: pc.Expression) -> bool:
    try:
        everything.filter(expression)
    except (pa.ArrowException, TypeError, ValueError):
        return True
    return False


SETTINGS = settings(
    max_examples=20,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow],
)
MANY = settings(SETTINGS, max_examples=300)
"""The slow tier's run of the same properties."""


@SETTINGS
@given(tree=filters())
def test_pruned_scan_equals_pyarrow_filter(
    table: cl.Table, everything: pa.Table, tree: Any
) -> None:
    check(table, everything, tree)


@pytest.mark.slow
@MANY
@given(tree=filters())
def test_pruned_scan_equals_pyarrow_filter_many(
    table: cl.Table, everything: pa.Table, tree: Any
) -> None:
    check(table, everything, tree)


def _grid_literals(column: str) -> list[pa.Scalar]:
    """Every value of the column, nudged to either side, as literals of several types."""
    out: list[pa.Scalar] = []
    column_type = SCHEMA.field(column).type
    for v in VALUES[column]:
        candidates: list[Any] = [pa.scalar(v, column_type) if column != "ts" else None]
        if column in ("i64", "i32", "u64"):
            candidates += [v + 0.5, float(v), Decimal(v) - Decimal("0.5")]
        elif column in ("f64", "f32"):
            candidates += [v, _scalar(v, pa.float32())]
        elif column == "d":
            candidates += [v + Decimal("0.0001"), float(v)]
        for c in candidates:
            scalar = c if isinstance(c, pa.Scalar) or c is None else _scalar(c)
            if scalar is not None:
                out.append(scalar)
    return out


@pytest.mark.parametrize(
    "column",
    # one of each kind in the default tier; the other widths (4-7 s each) in the slow tier
    [
        c if c not in ("i32", "u64", "f32") else pytest.param(c, marks=pytest.mark.slow)
        for c in ["i64", "i32", "u64", "f64", "f32", "s", "d", "dt", "b"]
    ],
)
def test_every_comparison_with_every_value(
    table: cl.Table, everything: pa.Table, column: str
) -> None:
    """A grid, not a sample: each operator against each stored value and its neighbours."""
    for literal in _grid_literals(column):
        for op in ("==", "!=", "<", "<=", ">", ">="):
            check(table, everything, Leaf("cmp", column, op=op, literal=literal), plans=False)


_DNF_OPS = ["=", "==", "!=", "<", "<=", ">", ">="]


@st.composite
def dnf_terms(draw: st.DrawFn) -> tuple[tuple[str, str, Any], Leaf]:
    column = draw(st.sampled_from(["i64", "i32", "u64", "f64", "s", "d"]))
    op = draw(st.sampled_from([*_DNF_OPS, "in", "not in"]))
    if column in ("i64", "i32", "u64"):
        value: Any = draw(_NUMBERS | _FLOATS)
    elif column == "f64":
        value = draw(_FLOATS)
    elif column == "s":
        value = draw(st.sampled_from(VALUES["s"]))
    else:
        value = draw(st.sampled_from(VALUES["d"]))
    if op in ("in", "not in"):
        pool = [v for v in VALUES[column] if v == v]  # NaN left out: not a DNF value
        values = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
        value_set = pa.array(values, SCHEMA.field(column).type)
        if column in ("i64", "i32", "u64") and all(float(v) == v for v in values):
            values = [*(float(v) for v in values), draw(_FLOATS)]  # floats on an int column
            value_set = pa.array(values, pa.float64())
        leaf: Any = Leaf("isin", column, literal=value_set)
        return (column, op, values), (leaf if op == "in" else Node("not", (leaf,)))
    literal = _scalar(value) or pa.scalar(value, pa.uint64())
    return (column, op, value), Leaf("cmp", column, op="==" if op == "=" else op, literal=literal)


@SETTINGS
@given(groups=st.lists(st.lists(dnf_terms(), min_size=1, max_size=3), min_size=1, max_size=3))
def test_dnf_filters_equal_pyarrow_filter(
    table: cl.Table, everything: pa.Table, groups: list[list[tuple[Any, Leaf]]]
) -> None:
    dnf = [[term for term, _leaf in group] for group in groups]
    tree = Node("or", tuple(Node("and", tuple(leaf for _term, leaf in group)) for group in groups))
    check(table, everything, tree, dnf if len(dnf) > 1 else dnf[0])


# --- pinned cases: the int-vs-float bug, and pruning that really happens ----------------------


def test_int_column_against_a_float_literal(mem_uri: str) -> None:
    """``ts > 1.5`` on an int64 column keeps ts >= 2, also for values a float cannot hold
    (pyarrow casts the column to float32 there and raises), and prunes by the bound."""
    schema = pa.schema([("ts", pa.int64())])
    t = cl.create_table(mem_uri, schema, properties={"blocklet_max_rows": "1"})
    values = [1, 2, 3, BIG, 2**62, -5, None, 2**24 + 1]
    t.append(pa.table({"ts": values}, schema=schema))
    with pytest.raises(pa.ArrowInvalid):  # pyarrow's own filter: the bug being fixed
        t.to_arrow().filter(pc.field("ts") > 1.5)
    for expression, expected in [
        (pc.field("ts") > 1.5, [2, 3, 2**24 + 1, BIG, 2**62]),
        (pc.scalar(1.5) < pc.field("ts"), [2, 3, 2**24 + 1, BIG, 2**62]),
        (pc.field("ts") >= 2.0**53, [BIG, 2**62]),
        (pc.field("ts") == 2.5, []),
        (pc.field("ts") != 2.5, sorted(v for v in values if v is not None)),
        (pc.field("ts") < -4.5, [-5]),
        (pc.field("ts") > math.nan, []),
        (pc.field("ts") < math.inf, sorted(v for v in values if v is not None)),
        (pc.field("ts").isin([2.0, 2.5, float(BIG)]), [2]),  # float(BIG) is 2**53, not BIG
        (~(pc.field("ts") > 1.5), [-5, 1]),
        ([("ts", ">", 1.5)], [2, 3, 2**24 + 1, BIG, 2**62]),
    ]:
        got = t.to_arrow(filter=expression)
        assert sorted(got.column("ts").to_pylist()) == expected, f"filter {expression}"
    plan = t.plan_splits(filter=pc.field("ts") > 1.5)
    assert plan.blocklets_total == len(values)
    assert plan.blocklets_selected == 5  # 1, -5 and the null are skipped by their bounds
    assert t.plan_splits(filter=pc.field("ts") == 2.5).blocklets_selected == 0


def test_uint64_beyond_the_int64_range(mem_uri: str) -> None:
    schema = pa.schema([("u", pa.uint64())])
    t = cl.create_table(mem_uri, schema, properties={"blocklet_max_rows": "1"})
    t.append(pa.table({"u": [0, 5, 2**63, 2**64 - 1]}, schema=schema))
    assert sorted(t.to_arrow(filter=pc.field("u") > 5).column("u").to_pylist()) == [
        2**63,
        2**64 - 1,
    ]
    assert t.plan_splits(filter=pc.field("u") > 5).blocklets_selected == 2
    assert t.to_arrow(filter=pc.field("u") > -1).num_rows == 4
    assert t.to_arrow(filter=pc.field("u") < -1).num_rows == 0
    top = pc.field("u") >= pa.scalar(2**64 - 1, pa.uint64())
    assert t.to_arrow(filter=top).column("u").to_pylist() == [2**64 - 1]
    assert t.plan_splits(filter=top).blocklets_selected == 1


@pytest.mark.parametrize(
    ("expression", "keeps"),
    [
        (pc.field("id") < 10, lambda i: i < 10),
        (pc.field("id") < 9.5, lambda i: i < 10),  # integer column, float literal
        (pc.field("id").isin([3.0, 4.5]), lambda i: i == 3),
        (
            (pc.field("id") >= 90) | (pc.field("id") == pa.scalar(1, pa.int8())),
            lambda i: i >= 90 or i == 1,
        ),
        (~(pc.field("id") >= 10), lambda i: i < 10),
        ([("id", "<", 10.5)], lambda i: i <= 10),
        ([[("id", "in", [1, 2])], [("id", ">", 94)]], lambda i: i in (1, 2) or i > 94),
    ],
    ids=lambda v: str(v) if not callable(v) else "",
)
def test_selective_filters_skip_blocklets(table: cl.Table, expression: Any, keeps: Any) -> None:
    """The same table as the property: pruning is not vacuous."""
    plan = table.plan_splits(filter=expression)
    assert plan.blocklets_pruned > plan.blocklets_total // 2, f"filter {expression}"
    assert ids(table.to_arrow(filter=expression)) == [i for i in range(ROWS) if keeps(i)]


def test_time_zones_and_units_other_than_the_column(table: cl.Table) -> None:
    at = pa.scalar(BASE_MS * 1000 + 1, pa.int64()).cast(pa.timestamp("us", tz=PARIS))
    plan = table.plan_splits(filter=pc.field("ts") > at)
    got = table.to_arrow(filter=pc.field("ts") > at)
    expected = table.to_arrow().filter(pc.field("ts") > at)
    assert ids(got) == ids(expected)
    assert plan.blocklets_pruned > 0
    # pyarrow cannot compare timestamps of different zones and units: a clear error
    other = pa.scalar(BASE_MS * 1000, pa.int64()).cast(pa.timestamp("us", tz="Asia/Tokyo"))
    with pytest.raises(pa.ArrowNotImplementedError):
        table.to_arrow().filter(pc.field("ts") > other)
    with pytest.raises(cl.InvalidFilterError, match="ts"):
        table.to_arrow(filter=pc.field("ts") > other)


def test_errors_name_the_column_and_the_literal_type(mem_uri: str) -> None:
    schema = pa.schema([("g", pa.float32()), ("i", pa.int64()), ("f", pa.float64())])
    t = cl.create_table(mem_uri, schema)
    t.append(pa.table({"g": [1.0], "i": [BIG], "f": [1.0]}, schema=schema))
    with pytest.raises(cl.InvalidFilterError) as info:  # pyarrow refuses 2**24 + 1 as float32
        t.to_arrow(filter=pc.field("g") > 2**24 + 1)
    assert "'g' (float) with a literal of type int64" in str(info.value)
    # a filter only partly understood falls back to pyarrow for the rows, which fails here
    partly = (pc.field("i") > 1.5) & (pc.field("f") * 2 > 1)
    with pytest.raises(cl.InvalidFilterError) as info:
        t.to_arrow(filter=partly)
    assert "'i' (int64)" in str(info.value)
    assert t.plan_splits(filter=partly).blocklets_selected == 1  # no pruning, no guess
