"""Predicates over columns, and what blocklet statistics say about them.

Pruning asks of each predicate two questions about a blocklet: *can* it be true for some row,
and *can* it be false for some row (null rows are neither: a filter drops them). A blocklet is
skipped only when the whole filter cannot be true. Anything not understood is
:class:`Unknown` (can be both), so pruning is always conservative: it may read a blocklet it
did not need, never skip one it did.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

import pyarrow as pa
import pyarrow.types as pat

from carbonlite.format.stats import ColumnStats
from carbonlite.format.types import stat_kind

__all__ = [
    "And",
    "Compare",
    "IsIn",
    "IsNan",
    "IsNull",
    "Not",
    "Or",
    "Predicate",
    "Unknown",
    "can_match",
    "comparable_literal",
    "integer_comparison",
]

CompareOp = Literal["==", "!=", "<", "<=", ">", ">="]
_FLIP: dict[str, CompareOp] = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True, slots=True)
class Compare:
    column: str
    op: CompareOp
    value: Any
    """The literal in the column's comparable domain (see :func:`comparable_literal`)."""

    def flipped(self) -> Compare:
        return Compare(self.column, _FLIP[self.op], self.value)


@dataclass(frozen=True, slots=True)
class IsIn:
    column: str
    values: tuple[Any, ...]
    """Non-null, non-NaN members in the comparable domain."""
    nulls_may_match: bool = False
    nans_may_match: bool = False


@dataclass(frozen=True, slots=True)
class IsNull:
    column: str
    nan_is_null: bool = False


@dataclass(frozen=True, slots=True)
class IsNan:
    column: str


@dataclass(frozen=True, slots=True)
class And:
    parts: tuple[Predicate, ...]


@dataclass(frozen=True, slots=True)
class Or:
    parts: tuple[Predicate, ...]


@dataclass(frozen=True, slots=True)
class Not:
    part: Predicate


@dataclass(frozen=True, slots=True)
class Unknown:
    """Something pruning does not understand: it may be true or false anywhere."""


Predicate = Compare | IsIn | IsNull | IsNan | And | Or | Not | Unknown


def renamed(p: Predicate, names: Mapping[str, str]) -> Predicate:
    """``p`` over the columns ``names`` maps its columns to (logical names to the physical
    names statistics are kept under); columns not in ``names`` keep theirs."""
    if isinstance(p, (And, Or)):
        return type(p)(tuple(renamed(q, names) for q in p.parts))
    if isinstance(p, Not):
        return Not(renamed(p.part, names))
    if isinstance(p, Unknown):
        return p
    return dataclasses.replace(p, column=names.get(p.column, p.column))


# --- literals in a column's comparable domain --------------------------------------------------

_NS_PER = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}


class _NoLiteral(Exception):
    pass


def _temporal_class(t: pa.DataType) -> str | None:
    if pat.is_timestamp(t):
        return f"timestamp:{t.tz is not None}"
    if pat.is_date32(t) or pat.is_date64(t):
        return "date"
    if pat.is_time(t):
        return "time"
    if pat.is_duration(t):
        return "duration"
    return None


def _temporal_value(raw: int, t: pa.DataType) -> int:
    """A stored temporal integer as an exact comparable integer (ns, or ms for dates)."""
    if pat.is_date32(t):
        return raw * 86_400_000
    if pat.is_date64(t):
        return raw
    return raw * _NS_PER[t.unit]


def comparable_literal(column_type: pa.DataType, scalar: pa.Scalar) -> Any:
    """``scalar`` in the domain the column's bounds are compared in; raises ``_NoLiteral``.

    Temporal values become exact integers (nanoseconds; milliseconds for dates) so literals and
    bounds of different units compare exactly, never after a rounding cast.
    """
    if not scalar.is_valid:
        raise _NoLiteral
    t = scalar.type
    column_class = _temporal_class(column_type)
    if column_class is not None:
        if _temporal_class(t) != column_class:
            raise _NoLiteral
        raw = scalar.cast(pa.int32() if t.bit_width == 32 else pa.int64()).as_py()
        return _temporal_value(raw, t)
    kind = stat_kind(column_type)
    value = scalar.as_py()
    if isinstance(value, bool) or pat.is_boolean(t):
        if kind == "bool":
            return value
        raise _NoLiteral
    # Numbers compare exactly only within a family; mixed families go through float64 in
    # Arrow (rounding), so they are left unpruned, except an integer literal against a float
    # column, which Arrow turns into the same float64 as here.
    if kind in ("int", "uint") and isinstance(value, int):
        return value
    if kind == "float" and isinstance(value, (int, float)):
        return float(value)
    if kind == "decimal" and isinstance(value, (int, Decimal)):
        return Decimal(value)
    if kind in ("int", "uint", "float", "decimal"):
        raise _NoLiteral
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "binary" and isinstance(value, bytes):
        return value
    raise _NoLiteral


def integer_comparison(
    column_type: pa.DataType, op: CompareOp, value: Any
) -> tuple[CompareOp, int]:
    """``column op value`` for an integer column and any real ``value`` (int, float, Decimal),
    as the same condition with an integer inside the column's range: exact, never rounded.

    ``i > 1.5`` is ``i > 1``; ``i == 1.5`` holds for no row (``i < MIN``); ``u8 > -1`` for every
    non-null row (``u8 >= 0``); a NaN compares false to every number (``!=``: true). Null rows
    stay null, so the result is also right under ``not``. Raises ``_NoLiteral`` for a value
    that is not a real number.
    """
    info = _INTEGER_RANGES.get(column_type.id)
    if info is None or isinstance(value, bool):
        raise _NoLiteral
    lo, hi = info
    always: CompareOp = ">="  # (always, lo): true for every row; ("<", lo): for none
    if isinstance(value, float) and math.isnan(value):
        return (always, lo) if op == "!=" else ("<", lo)
    if isinstance(value, (float, Decimal)) and math.isinf(value):
        value = hi + 1 if value > 0 else lo - 1  # beyond the range: compares the same
    if not isinstance(value, (int, float, Decimal)):
        raise _NoLiteral
    try:
        q = Fraction(value)
    except (ValueError, TypeError, OverflowError):
        raise _NoLiteral from None
    floor, ceil = math.floor(q), math.ceil(q)
    if op in ("==", "!="):
        if floor != ceil or not lo <= floor <= hi:  # no row can equal it
            return ("<", lo) if op == "==" else (always, lo)
        return op, floor
    n = {">": floor, ">=": ceil, "<": ceil, "<=": floor}[op]
    never = {">": n >= hi, ">=": n > hi, "<": n <= lo, "<=": n < lo}[op]
    every = {">": n < lo, ">=": n <= lo, "<": n > hi, "<=": n >= hi}[op]
    if never:
        return "<", lo
    if every:
        return always, lo
    return op, n


_INTEGER_TYPES = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_UNSIGNED_TYPES = (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())
_INTEGER_RANGES = {
    **{t.id: (-(1 << (t.bit_width - 1)), (1 << (t.bit_width - 1)) - 1) for t in _INTEGER_TYPES},
    **{t.id: (0, (1 << t.bit_width) - 1) for t in _UNSIGNED_TYPES},
}


def _bounds(stats: ColumnStats, column_type: pa.DataType) -> tuple[Any, Any]:
    lo, hi = stats.min, stats.max
    if _temporal_class(column_type) is not None:
        lo = _temporal_value(lo, column_type) if lo is not None else None
        hi = _temporal_value(hi, column_type) if hi is not None else None
    return lo, hi


# --- evaluation against statistics ----------------------------------------------------------


def _compare(op: str, lo: Any, hi: Any, v: Any) -> tuple[bool, bool]:
    """(can be true, can be false) for ``value op v`` with value in [lo, hi] (None: open)."""
    if isinstance(v, float) and math.isnan(v):  # x op NaN is false for every x, except !=
        return op == "!=", op != "!="
    below = lo is None or lo < v  # some value may be < v
    above = hi is None or hi > v  # some value may be > v
    reach = (lo is None or lo <= v) and (hi is None or hi >= v)  # v may be a value
    only_v = lo is not None and hi is not None and lo == hi == v
    if op == "==":
        return reach, not only_v
    if op == "!=":
        return not only_v, reach
    if op == "<":
        return below, hi is None or hi >= v
    if op == "<=":
        return lo is None or lo <= v, above
    if op == ">":
        return above, lo is None or lo <= v
    return hi is None or hi >= v, below  # ">="


def _evaluate(
    p: Predicate, stats: Mapping[str, ColumnStats], rows: int, types: Mapping[str, pa.DataType]
) -> tuple[bool, bool]:
    if isinstance(p, And):
        results = [_evaluate(q, stats, rows, types) for q in p.parts]
        return all(r[0] for r in results), any(r[1] for r in results)
    if isinstance(p, Or):
        results = [_evaluate(q, stats, rows, types) for q in p.parts]
        return any(r[0] for r in results), all(r[1] for r in results)
    if isinstance(p, Not):
        can_true, can_false = _evaluate(p.part, stats, rows, types)
        return can_false, can_true
    if isinstance(p, Unknown):
        return True, True
    s = stats.get(p.column)
    column_type = types.get(p.column)
    if s is None or column_type is None:
        return True, True
    nulls, nans = s.null_count, s.nan_count
    regular = rows - nulls - nans  # rows that are neither null nor NaN
    if isinstance(p, IsNull):
        hits = nulls + (nans if p.nan_is_null else 0)
        return hits > 0, hits < rows
    if isinstance(p, IsNan):
        return nans > 0, regular > 0
    lo, hi = _bounds(s, column_type)
    if isinstance(p, Compare):
        can_true = can_false = False
        if regular > 0:
            can_true, can_false = _compare(p.op, lo, hi, p.value)
        if nans > 0:  # NaN compares false to everything, except that it is != everything
            can_true = can_true or p.op == "!="
            can_false = can_false or p.op != "!="
        return can_true, can_false
    if isinstance(p, IsIn):
        can_true = (
            (regular > 0 and any(_compare("==", lo, hi, v)[0] for v in p.values))
            or (nulls > 0 and p.nulls_may_match)
            or (nans > 0 and p.nans_may_match)
        )
        # is_in tells -0.0 from 0.0 (it hashes bits), so for floats equal bounds prove nothing.
        all_in = (
            lo is not None and lo == hi and lo in p.values and stat_kind(column_type) != "float"
        )
        can_false = (regular > 0 and not all_in) or nulls > 0 or (nans > 0 and not p.nans_may_match)
        return can_true, can_false
    return True, True  # pragma: no cover - the union is closed


def can_match(
    predicate: Predicate,
    stats: Mapping[str, ColumnStats],
    num_rows: int,
    types: Mapping[str, pa.DataType],
) -> bool:
    """False only when no row of a blocklet with these statistics can satisfy ``predicate``."""
    if num_rows == 0:
        return False
    return _evaluate(predicate, stats, num_rows, types)[0]


def python_literal(value: Any) -> pa.Scalar:
    """A Python filter value (int, float, str, bytes, date, datetime, Decimal...) as a scalar."""
    if isinstance(value, pa.Scalar):
        return value
    if isinstance(value, datetime.datetime):
        return pa.scalar(value, type=pa.timestamp("us", tz="UTC" if value.tzinfo else None))
    return pa.scalar(value)
