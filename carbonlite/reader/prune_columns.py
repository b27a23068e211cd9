"""Pruning over columns of statistics: :func:`can_match` for every blocklet at once.

The planner holds blocklet entries as Arrow columns (manifests, ``blocklet_index.py``): per
table column a struct ``stats.<name>`` of ``{nulls, nans, min, max}``. :func:`match_mask`
answers, for every row, exactly what :func:`carbonlite.reader.predicate.can_match` answers for
that blocklet, with the same two questions per predicate node (can it be true for some row,
can it be false for some row), each a numpy array instead of a bool. Bounds are compared in
Arrow/numpy; a temporal literal (exact nanoseconds, milliseconds for dates) is compared with
the stored integers of the column's unit by rounding the literal, never the bounds, so the
answers stay exact. Columns whose bounds have no cheap exact vector comparison (decimals,
booleans) are answered row by row with the scalar code, for that predicate node only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.format.stats import ColumnStats
from carbonlite.format.types import stat_kind
from carbonlite.reader.predicate import (
    And,
    Compare,
    IsIn,
    IsNan,
    IsNull,
    Not,
    Or,
    Predicate,
    Unknown,
    _evaluate,
    _temporal_class,
)

__all__ = ["match_mask", "one_chunk"]

_STATS = "stats."
_Pair = tuple[np.ndarray, np.ndarray]
_NS_PER = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}


def match_mask(
    predicate: Predicate | None, entries: pa.Table, types: Mapping[str, pa.DataType]
) -> pa.BooleanArray:
    """Per row of ``entries`` (one blocklet each): may some row of it satisfy ``predicate``?"""
    n = entries.num_rows
    rows = entries.column("rows").to_numpy()
    if predicate is None:
        return pa.array(rows > 0, pa.bool_())
    can_true, _ = _Evaluator(entries, types).evaluate(predicate)
    return pa.array(can_true & (rows > 0), pa.bool_()) if n else pa.array([], pa.bool_())


class _Evaluator:
    def __init__(self, entries: pa.Table, types: Mapping[str, pa.DataType]) -> None:
        self.entries = entries
        self.types = types
        self.n = entries.num_rows
        self.rows = np.asarray(one_chunk(entries.column("rows")).to_numpy(), dtype=np.int64)
        self._columns: dict[str, Any] = {}
        self._bound_cache: dict[str, tuple[_Bound, _Bound]] = {}

    def _all(self, value: bool) -> np.ndarray:
        return np.full(self.n, value, dtype=bool)

    def evaluate(self, p: Predicate) -> _Pair:
        if isinstance(p, And):
            parts = [self.evaluate(q) for q in p.parts]
            return (
                np.logical_and.reduce([t for t, _ in parts]) if parts else self._all(True),
                np.logical_or.reduce([f for _, f in parts]) if parts else self._all(False),
            )
        if isinstance(p, Or):
            parts = [self.evaluate(q) for q in p.parts]
            return (
                np.logical_or.reduce([t for t, _ in parts]) if parts else self._all(False),
                np.logical_and.reduce([f for _, f in parts]) if parts else self._all(True),
            )
        if isinstance(p, Not):
            can_true, can_false = self.evaluate(p.part)
            return can_false, can_true
        if isinstance(p, Unknown):
            return self._all(True), self._all(True)
        return self._leaf(p)

    def _leaf(self, p: Compare | IsIn | IsNull | IsNan) -> _Pair:
        column_type = self.types.get(p.column)
        name = _STATS + p.column
        if column_type is None or name not in self.entries.column_names:
            return self._all(True), self._all(True)
        stats, present, nulls, nans, regular = self._column(name)
        if isinstance(p, IsNull):
            hits = nulls + (nans if p.nan_is_null else 0)
            can_true, can_false = hits > 0, hits < self.rows
        elif isinstance(p, IsNan):
            can_true, can_false = nans > 0, regular > 0
        elif stat_kind(column_type) is None:
            return self._all(True), self._all(True)  # no bounds kept: anything may match
        elif stat_kind(column_type) in ("decimal", "bool"):
            return self._row_by_row(p, stats, column_type)
        else:
            lo, hi = self._bounds(name, stats, column_type)
            if isinstance(p, Compare):
                t, f = _compare(p.op, lo, hi, p.value)
                can_true = (regular > 0) & t
                can_false = (regular > 0) & f
                if p.op == "!=":
                    can_true = can_true | (nans > 0)
                else:
                    can_false = can_false | (nans > 0)
            else:
                hit = self._all(False)
                for v in p.values:
                    hit |= _compare("==", lo, hi, v)[0]
                can_true = (
                    ((regular > 0) & hit)
                    | ((nulls > 0) & p.nulls_may_match)
                    | ((nans > 0) & p.nans_may_match)
                )
                all_in = self._all(False)
                if stat_kind(column_type) != "float" and p.values:
                    for v in p.values:
                        all_in |= lo.eq(v) & hi.eq(v)
                can_false = (
                    ((regular > 0) & ~all_in) | (nulls > 0) | ((nans > 0) & (not p.nans_may_match))
                )
        return np.where(present, can_true, True), np.where(present, can_false, True)

    def _column(
        self, name: str
    ) -> tuple[pa.StructArray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """A statistics column's struct, presence, null and NaN counts, and regular rows:
        computed once per column, shared by every predicate node on it."""
        found = self._columns.get(name)
        if found is None:
            stats = one_chunk(self.entries.column(name))
            nulls = _ints(stats.field("nulls"))
            nans = _ints(stats.field("nans"))
            found = (stats, _valid(stats), nulls, nans, self.rows - nulls - nans)
            self._columns[name] = found
        return found

    def _bounds(
        self, name: str, stats: pa.StructArray, column_type: pa.DataType
    ) -> tuple[_Bound, _Bound]:
        found = self._bound_cache.get(name)
        if found is None:
            found = (_Bound(stats, "min", column_type), _Bound(stats, "max", column_type))
            self._bound_cache[name] = found
        return found

    def _row_by_row(self, p: Predicate, stats: pa.StructArray, column_type: pa.DataType) -> _Pair:
        """The scalar evaluation, for columns whose bounds do not compare as vectors."""
        values = stats.to_pylist()
        can_true, can_false = self._all(True), self._all(True)
        column = p.column  # type: ignore[union-attr]
        for i, v in enumerate(values):
            if v is None:
                continue
            s = ColumnStats(v["nulls"], v.get("min"), v.get("max"), v["nans"])
            can_true[i], can_false[i] = _evaluate(
                p, {column: s}, int(self.rows[i]), {column: column_type}
            )
        return can_true, can_false


def one_chunk(column: pa.ChunkedArray) -> pa.Array:
    """The column as one array, without a copy when it already is one chunk."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _valid(array: pa.Array) -> np.ndarray:
    if array.null_count == 0:
        return np.ones(len(array), dtype=bool)
    return np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _ints(array: pa.Array) -> np.ndarray:
    if array.null_count:
        array = array.fill_null(0)
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.int64)


class _Bound:
    """One side of every blocklet's bounds: values (numpy or Arrow) and where there is one."""

    def __init__(self, stats: pa.StructArray, side: str, column_type: pa.DataType) -> None:
        self.values = stats.field(side)
        self.known = _valid(stats) & _valid(self.values)
        kind = stat_kind(column_type)
        self.numeric = kind in ("int", "uint", "float")
        if self.numeric:
            values = self.values.fill_null(0) if self.values.null_count else self.values
            self.array = values.to_numpy(zero_copy_only=False)
        self.scale = _scale(column_type)
        self.kind = kind

    def _cmp(self, op: str, v: Any) -> np.ndarray:
        """``bound op v`` where there is a bound (False elsewhere), exact."""
        if self.numeric:
            out = _numeric_cmp(self.array, self.kind, op, v, self.scale)
        else:
            arrow_op = _ARROW_OPS[op]
            result = arrow_op(self.values, pa.scalar(v, self.values.type))
            out = np.asarray(result.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
        return out & self.known

    def lt(self, v: Any) -> np.ndarray:
        return self._cmp("<", v)

    def le(self, v: Any) -> np.ndarray:
        return self._cmp("<=", v)

    def gt(self, v: Any) -> np.ndarray:
        return self._cmp(">", v)

    def ge(self, v: Any) -> np.ndarray:
        return self._cmp(">=", v)

    def eq(self, v: Any) -> np.ndarray:
        return self._cmp("==", v)


def _scale(column_type: pa.DataType) -> int:
    """What a stored integer is multiplied by to compare with a literal (``_temporal_value``)."""
    temporal = _temporal_class(column_type)
    if temporal is None:
        return 1
    if temporal == "date":
        return 86_400_000 if pa.types.is_date32(column_type) else 1
    return _NS_PER[column_type.unit]


_NP_OPS = {
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "==": np.equal,
}
_ARROW_OPS = {
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
    "==": pc.equal,
}
_INT_RANGE = {"int": (-(1 << 63), (1 << 63) - 1), "uint": (0, (1 << 64) - 1)}


def _numeric_cmp(array: np.ndarray, kind: str | None, op: str, v: Any, scale: int) -> np.ndarray:
    """``array * scale op v`` exactly, for stored integers (or floats, scale 1)."""
    if kind == "float":
        return _NP_OPS[op](array, float(v))
    x = Fraction(v) / scale if not (isinstance(v, float) and math.isinf(v)) else v
    if isinstance(x, float):  # an infinite literal: beyond every integer
        smaller = x > 0  # every bound is below it
        result = {"<": smaller, "<=": smaller, ">": not smaller, ">=": not smaller, "==": False}
        return np.full(len(array), result[op], dtype=bool)
    lo, hi = _INT_RANGE[kind or "int"]
    if op in ("<", ">="):
        k = math.ceil(x)  # a < x  <=>  a < ceil(x);  a >= x  <=>  a >= ceil(x)
    elif op in ("<=", ">"):
        k = math.floor(x)  # a <= x  <=>  a <= floor(x);  a > x  <=>  a > floor(x)
    else:
        if x.denominator != 1 or not lo <= x <= hi:
            return np.zeros(len(array), dtype=bool)
        k = int(x)
    if k > hi:
        return np.full(len(array), op in ("<", "<="), dtype=bool)
    if k < lo:
        return np.full(len(array), op in (">", ">="), dtype=bool)
    scalar = np.array(k, dtype=array.dtype)
    return _NP_OPS[op](array, scalar)


def _compare(op: str, lo: _Bound, hi: _Bound, v: Any) -> _Pair:
    """As ``predicate._compare``: (can be true, can be false) of ``value op v`` per row."""
    n = len(lo.known)
    if isinstance(v, float) and math.isnan(v):
        return np.full(n, op == "!="), np.full(n, op != "!=")
    lo_open, hi_open = ~lo.known, ~hi.known
    below = lo_open | lo.lt(v)
    above = hi_open | hi.gt(v)
    lo_le = lo_open | lo.le(v)
    hi_ge = hi_open | hi.ge(v)
    reach = lo_le & hi_ge
    only_v = lo.eq(v) & hi.eq(v)
    if op == "==":
        return reach, ~only_v
    if op == "!=":
        return ~only_v, reach
    if op == "<":
        return below, hi_ge
    if op == "<=":
        return lo_le, above
    if op == ">":
        return above, lo_le
    return hi_ge, below  # ">="
