"""Spark's pushed filters as Arrow expressions, with Spark's semantics kept exactly.

A filter is taken over (not returned to Spark) only when Arrow evaluates it exactly as Spark
would. So filters on float/double columns are left to Spark (Spark orders NaN above every
number and makes NaN = NaN true; Arrow does neither), as are null literals, nested columns
and null-safe equality. ``IN`` keeps Spark's null semantics (a null row gives null, also under
``NOT``): short lists become an OR of equalities, long ones map nulls to null before ``is_in``. A string prefix also becomes a range, so it prunes blocklets.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from carbonlite.format.stats import truncate_upper

__all__ = ["to_expression"]

_NO_PUSH = None
_SMALL_IN = 64


def _literal(value: Any, t: pa.DataType) -> pa.Scalar | None:
    if value is None or isinstance(value, (list, tuple, dict)):
        return None
    if isinstance(value, bytearray):
        value = bytes(value)
    try:
        return pa.scalar(value, type=t)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None


def _column(f: Any, types: dict[str, pa.DataType]) -> tuple[str, pa.DataType] | None:
    path: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
    if len(path) != 1 or path[0] not in types:
        return None
    t = types[path[0]]
    if pat.is_floating(t) and type(f).__name__ not in ("IsNull", "IsNotNull"):
        return None
    return path[0], t


def to_expression(f: Any, types: dict[str, pa.DataType]) -> pc.Expression | None:
    """The Arrow expression of one Spark ``pyspark.sql.datasource.Filter``, or None."""
    kind = type(f).__name__
    if kind == "Not":
        child = to_expression(f.child, types)
        return ~child if child is not None else _NO_PUSH
    column = _column(f, types)
    if column is None:
        return _NO_PUSH
    name, t = column
    field = pc.field(name)
    if kind == "IsNull":
        return field.is_null()
    if kind == "IsNotNull":
        return field.is_valid()
    if kind == "In":
        values = [_literal(v, t) for v in f.value]
        if not values or any(v is None for v in values):
            return _NO_PUSH
        if len(values) <= _SMALL_IN:
            # Kleene OR of equalities: a null row gives null, as in Spark (also under NOT),
            # and pruning sees each value.
            return functools.reduce(operator.or_, (field == v for v in values))
        # A long list: Arrow's is_in gives false for a null row where Spark gives null, so
        # nulls are mapped to null first; the range in front lets pruning use the bounds.
        ordered = sorted((v for v in values if v is not None), key=lambda v: v.as_py())
        exact = pc.if_else(
            field.is_null(),
            pa.scalar(None, pa.bool_()),
            pc.is_in(field, value_set=pa.array(values, type=t)),
        )
        return (field >= ordered[0]) & (field <= ordered[-1]) & exact
    if kind in ("StringStartsWith", "StringEndsWith", "StringContains"):
        if not (pat.is_string(t) or pat.is_large_string(t)) or not isinstance(f.value, str):
            return _NO_PUSH
        if kind == "StringEndsWith":
            return pc.ends_with(field, pattern=f.value)
        if kind == "StringContains":
            return pc.match_substring(field, pattern=f.value)
        exact = pc.starts_with(field, pattern=f.value)
        if not f.value:
            return exact
        upper = truncate_upper(f.value + "\U0010ffff", limit=len(f.value.encode()))
        bounds = field >= pa.scalar(f.value, type=t)
        if upper is not None:
            bounds = bounds & (field < pa.scalar(upper, type=t))
        return bounds & exact
    scalar = _literal(getattr(f, "value", None), t)
    if scalar is None:
        return _NO_PUSH
    if kind == "EqualTo":
        return field == scalar
    if kind == "GreaterThan":
        return field > scalar
    if kind == "GreaterThanOrEqual":
        return field >= scalar
    if kind == "LessThan":
        return field < scalar
    if kind == "LessThanOrEqual":
        return field <= scalar
    return _NO_PUSH  # EqualNullSafe and anything newer stay with Spark
