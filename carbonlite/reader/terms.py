"""One comparison or membership test of a column, as the expression applied to rows and the
predicate that prunes by statistics. An integer column against a number of another type becomes
an exact comparison with an integer of the column's type (``i > 1.5`` is ``i > 1``): Arrow would
cast the column to a float type and fail on large values."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from carbonlite.reader.predicate import (
    Compare,
    CompareOp,
    IsIn,
    Predicate,
    Unknown,
    _NoLiteral,
    comparable_literal,
    integer_comparison,
    python_literal,
)

__all__ = [
    "FLIP",
    "OPERATORS",
    "comparison",
    "integer_members",
    "is_in_predicate",
    "membership",
    "python_number",
]

OPERATORS: dict[str, Callable[[Any, Any], pc.Expression]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
FLIP: dict[str, CompareOp] = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def is_number(t: pa.DataType) -> bool:
    return bool(pat.is_integer(t) or pat.is_floating(t) or pat.is_decimal(t))


def python_number(value: Any) -> bool:
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


def comparison(
    column: str, column_type: pa.DataType, op: CompareOp, literal: pa.Scalar | Any
) -> tuple[pc.Expression, Predicate]:
    """``column op literal`` (a scalar, or a Python value): the expression to apply to rows,
    and its predicate.

    An integer column against a number of another type becomes an exact comparison with an
    integer of the column's type; anything else is left to Arrow's own semantics."""
    field = pc.field(column)
    number: Any = None
    if isinstance(literal, pa.Scalar):
        if literal.is_valid and literal.type != column_type and is_number(literal.type):
            number = literal.as_py()
    elif python_number(literal):
        number = literal
    if number is not None and pat.is_integer(column_type):
        new_op, n = integer_comparison(column_type, op, number)
        exact = pa.scalar(n, column_type)
        return OPERATORS[new_op](field, exact), Compare(column, new_op, n)
    if not isinstance(literal, pa.Scalar):
        literal = python_literal(literal)
    expression = OPERATORS[op](field, literal)
    try:
        return expression, Compare(column, op, comparable_literal(column_type, literal))
    except _NoLiteral:
        return expression, Unknown()


def membership(
    column: str, column_type: pa.DataType, value_set: pa.Array, *, skip_nulls: bool
) -> tuple[pc.Expression, Predicate]:
    """``column IN value_set`` (a null member matches null rows unless ``skip_nulls``)."""
    field = pc.field(column)
    if pat.is_integer(column_type) and value_set.type != column_type and is_number(value_set.type):
        value_set = integer_members(column_type, value_set.to_pylist())
    expression = pc.is_in(field, value_set=value_set, skip_nulls=skip_nulls)
    return expression, is_in_predicate(
        column, column_type, list(value_set), nulls_match=not skip_nulls
    )


def integer_members(column_type: pa.DataType, values: Sequence[Any]) -> pa.Array:
    """Numbers (and nulls) as a value set of an integer column's type; members no integer of
    that type equals can match no row, and are left out."""
    kept: list[int | None] = []
    for v in values:
        if v is None:
            kept.append(None)
            continue
        op, n = integer_comparison(column_type, "==", v)
        if op == "==":
            kept.append(n)
    return pa.array(kept, column_type)


def is_in_predicate(
    column: str, column_type: pa.DataType, members: Sequence[pa.Scalar], *, nulls_match: bool
) -> Predicate:
    values = []
    nulls = nans = False
    for scalar in members:
        if not scalar.is_valid:
            nulls = True
            continue
        raw = scalar.as_py()
        if isinstance(raw, float) and raw != raw:
            nans = True
            continue
        try:
            values.append(comparable_literal(column_type, scalar))
        except _NoLiteral:
            return Unknown()
    return IsIn(column, tuple(values), nulls_may_match=nulls and nulls_match, nans_may_match=nans)
