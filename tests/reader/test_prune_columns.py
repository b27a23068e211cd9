"""Columnar pruning gives, blocklet by blocklet, exactly what the scalar ``can_match`` gives:
random statistics (missing, nulls only, NaNs, open and truncated bounds) against random
filters over every statistics domain, through the same filter translation scans use."""

from __future__ import annotations

import datetime
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from carbonlite.format.stats import ColumnStats
from carbonlite.metadata import BlockletEntry
from carbonlite.metadata.blocklet_index import entries_table
from carbonlite.reader.expression import parse_filter
from carbonlite.reader.predicate import And, Compare, IsIn, IsNan, IsNull, Not, Or, can_match
from carbonlite.reader.prune_columns import match_mask

SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("i8", pa.int8()),
        ("u", pa.uint64()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("bin", pa.binary()),
        ("ts", pa.timestamp("ms", tz="UTC")),
        ("tus", pa.timestamp("us")),
        ("dt", pa.date32()),
        ("d", pa.decimal128(9, 3)),
        ("b", pa.bool_()),
        ("h", pa.float16()),
    ]
)
TYPES = {f.name: f.type for f in SCHEMA}
BIG = 2**53 + 1

POOLS: dict[str, list[Any]] = {
    "i": [-(2**63), -BIG, -5, -1, 0, 1, 2, 5, 7, BIG, 2**63 - 1],
    "i8": [-128, -3, 0, 3, 127],
    "u": [0, 1, 5, 2**63, 2**64 - 1],
    "f": [-math.inf, -2.5, -0.0, 0.0, 0.1, 1.5, 3.0, math.inf],
    "s": ["", "a", "ab", "b", "é", "p" * 64, "日本"],
    "bin": [b"", b"\x00", b"a", b"ab", b"\xff"],
    "ts": [1_767_225_600_000 + k for k in (-2, -1, 0, 1, 86_400_000)],
    "tus": [1_767_225_600_000_000 + k for k in (-1500, -1000, 0, 999, 1000, 1001)],
    "dt": [-1, 0, 20454, 20455, 20484],
    "d": [Decimal(v) for v in ("-2.125", "0.000", "0.100", "1.500", "999999.999")],
    "b": [False, True],
}
LITERALS: dict[str, list[Any]] = {
    "i": [*POOLS["i"], 1.5, -0.5, 2.0**63, math.nan, Decimal("2.5")],
    "i8": [*POOLS["i8"], 200, -129, 2.5],
    "u": [*POOLS["u"], -1, 2**64, 0.5],
    "f": [*POOLS["f"], math.nan, 2, -7],
    "s": POOLS["s"],
    "bin": POOLS["bin"],
    "ts": [
        datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
        datetime.datetime(2026, 1, 1, 0, 0, 0, 500, tzinfo=datetime.timezone.utc),
        datetime.datetime(2025, 12, 31, 23, 59, 59, 999000, tzinfo=datetime.timezone.utc),
    ],
    "tus": [
        datetime.datetime(2026, 1, 1),
        datetime.datetime(2026, 1, 1, 0, 0, 0, 999),
        datetime.datetime(2025, 12, 31, 23, 59, 59, 999999),
    ],
    "dt": [datetime.date(2026, 1, 1), datetime.date(1969, 12, 31), datetime.date(2026, 1, 2)],
    "d": [*POOLS["d"], Decimal("0.1005")],
    "b": [True, False],
}


@st.composite
def column_stats(draw: st.DrawFn, name: str, rows: int) -> ColumnStats | None:
    if draw(st.integers(0, 9)) == 0:
        return None  # no statistics for the column in this blocklet
    nulls = draw(st.integers(0, rows))
    nans = draw(st.integers(0, rows - nulls)) if name in ("f", "h") else 0
    if name == "h" or nulls + nans == rows:
        return ColumnStats(nulls, None, None, nans)
    pool = POOLS[name]
    lo, hi = sorted(draw(st.lists(st.sampled_from(pool), min_size=2, max_size=2)))
    if draw(st.integers(0, 5)) == 0:
        lo = None  # an unknown bound (a cut string max, say)
    if draw(st.integers(0, 5)) == 0:
        hi = None
    return ColumnStats(nulls, lo, hi, nans)


@st.composite
def blocklets(draw: st.DrawFn) -> BlockletEntry:
    rows = draw(st.integers(0, 6))
    stats = {}
    for name in TYPES:
        s = draw(column_stats(name, rows)) if rows else ColumnStats(0)
        if s is not None:
            stats[name] = s
    return BlockletEntry(0, 1, rows, stats)


def comparisons(name: str) -> st.SearchStrategy[pc.Expression]:
    field = pc.field(name)
    literal = st.sampled_from(LITERALS.get(name, [1.0]))
    ops = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])

    def compare(op: str, v: Any) -> pc.Expression:
        try:
            return {
                "==": lambda: field == v,
                "!=": lambda: field != v,
                "<": lambda: field < v,
                "<=": lambda: field <= v,
                ">": lambda: field > v,
                ">=": lambda: field >= v,
            }[op]()
        except (pa.ArrowException, OverflowError):  # a literal pyarrow cannot hold
            return field.is_valid()

    def isin(values: list[Any]) -> pc.Expression:
        try:
            return field.isin(values)
        except (pa.ArrowException, OverflowError):  # members pyarrow cannot put in one array
            return field.is_null()

    members = st.lists(literal, min_size=0, max_size=4)
    return st.one_of(
        st.builds(compare, ops, literal),
        members.map(isin),
        st.just(field.is_null()),
        st.just(field.is_valid()),
        *([st.just(pc.is_nan(field))] if name in ("f",) else []),
    )


def expressions() -> st.SearchStrategy[pc.Expression]:
    leaves = st.sampled_from(sorted(POOLS)).flatmap(comparisons)
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.builds(lambda a, b: a & b, inner, inner),
            st.builds(lambda a, b: a | b, inner, inner),
            inner.map(lambda a: ~a),
        ),
        max_leaves=5,
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(blocklets(), min_size=1, max_size=12), expression=expressions())
def test_columnar_pruning_is_exactly_the_scalar_pruning(
    entries: list[BlockletEntry], expression: pc.Expression
) -> None:
    try:
        parsed = parse_filter(expression, SCHEMA, where="t")
    except Exception:  # a filter the translator refuses is not this test's concern
        return
    table = entries_table([("f", entries)], SCHEMA)
    got = match_mask(parsed.predicate, table, TYPES).to_pylist()
    want = [can_match(parsed.predicate, b.stats, b.num_rows, TYPES) for b in entries]
    assert got == want, (expression, parsed.predicate)


def test_a_predicate_tree_by_hand() -> None:
    entries = [
        BlockletEntry(0, 1, 4, {"i": ColumnStats(0, 0, 9), "f": ColumnStats(1, 0.5, 2.0, 1)}),
        BlockletEntry(0, 1, 4, {"i": ColumnStats(0, 10, 19)}),
        BlockletEntry(0, 1, 4, {"i": ColumnStats(4)}),  # nulls only
        BlockletEntry(0, 1, 0, {}),  # empty
    ]
    table = entries_table([("f", entries)], SCHEMA)

    def mask(p: Any) -> list[bool]:
        return match_mask(p, table, TYPES).to_pylist()

    assert mask(Compare("i", ">", 9)) == [False, True, False, False]
    assert mask(Not(Compare("i", "<", 10))) == [False, True, False, False]
    assert mask(IsNull("i")) == [False, False, True, False]
    assert mask(IsIn("i", (5, 15))) == [True, True, False, False]
    assert mask(IsNan("f")) == [True, True, True, False]  # no "f" stats: may match
    assert mask(Or((Compare("i", "==", 3), IsNull("i")))) == [True, False, True, False]
    assert mask(And((Compare("i", ">=", 0), Compare("i", "<=", 9)))) == [True, False, False, False]
    assert mask(None) == [True, True, True, False]
