"""Filters: accept a ``pyarrow.compute.Expression`` or DNF tuples, and see inside them.

pyarrow exposes no public way to walk an Expression, but it pickles one as an Arrow IPC file
whose schema metadata lists the tree in prefix order (``call``/``field_ref``/``literal``/
``options``/``end``) and whose columns hold the literals. That metadata has repeated keys, which
``Schema.metadata`` (a dict) would merge, so it is read through the Arrow C data interface.

Whatever cannot be read this way becomes :class:`Unknown` and is still applied exactly to
the rows; it only goes unused for pruning.
"""

from __future__ import annotations

import ctypes
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.errors import InvalidFilterError
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
    _NoLiteral,
    comparable_literal,
    python_literal,
)

__all__ = ["Filter", "FilterLike", "parse_filter"]

_logger = logging.getLogger(__name__)

FilterLike = Any
"""``pyarrow.compute.Expression``, DNF ``[("col", op, value), ...]`` (or a list of such lists,
OR-ed), or None."""

_COMPARE_OPS = {
    "equal": "==",
    "not_equal": "!=",
    "less": "<",
    "less_equal": "<=",
    "greater": ">",
    "greater_equal": ">=",
}


@dataclass(frozen=True)
class Filter:
    """A filter, both as an exact Arrow expression and as a tree for pruning."""

    expression: pc.Expression
    predicate: Predicate
    columns: frozenset[str]
    """Every column the filter reads."""


# --- reading an Expression's serialized tree -----------------------------------------------


class _ArrowSchemaC(ctypes.Structure):
    _fields_ = [
        ("format", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("metadata", ctypes.c_void_p),
        ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _metadata_pairs(schema: pa.Schema) -> list[tuple[str, str]]:
    """Schema metadata in order, duplicates kept (C data interface encoding)."""
    capsule = schema.__arrow_c_schema__()
    c_schema = _ArrowSchemaC.from_address(_capsule_pointer(capsule, b"arrow_schema"))
    if not c_schema.metadata:
        return []
    pos = c_schema.metadata
    count = ctypes.c_int32.from_address(pos).value
    pos += 4
    pairs = []
    for _ in range(count):
        parts = []
        for _kv in range(2):
            n = ctypes.c_int32.from_address(pos).value
            pos += 4
            parts.append(ctypes.string_at(pos, n).decode("utf-8"))
            pos += n
        pairs.append((parts[0], parts[1]))
    return pairs


@dataclass(frozen=True)
class _Node:
    kind: str  # "call", "field", "literal", "nested"
    name: str = ""
    args: tuple[_Node, ...] = ()
    value: Any = None
    options: Any = None


def _expression_tree(expr: pc.Expression) -> _Node:
    _fn, (buffer,) = expr.__reduce__()
    reader = pa.ipc.open_file(buffer)
    literals = reader.read_all()
    pairs = _metadata_pairs(reader.schema)
    node, end = _parse_node(pairs, 0, literals)
    if end != len(pairs):
        raise ValueError("trailing entries in the expression tree")
    return node


def _parse_node(pairs: list[tuple[str, str]], i: int, literals: pa.Table) -> tuple[_Node, int]:
    key, value = pairs[i]
    if key == "literal":
        return _Node("literal", value=literals.column(int(value))[0]), i + 1
    if key == "field_ref":
        return _Node("field", name=value), i + 1
    if key == "nested_field_ref":
        depth = int(value)
        names = [pairs[i + 1 + k][1] for k in range(depth)]
        return _Node("nested", name=".".join(names)), i + 1 + depth
    if key == "call":
        i += 1
        args: list[_Node] = []
        options = None
        while pairs[i][0] != "end":
            if pairs[i][0] == "options":
                options = literals.column(int(pairs[i][1]))[0]
                i += 1
            else:
                arg, i = _parse_node(pairs, i, literals)
                args.append(arg)
        return _Node("call", name=value, args=tuple(args), options=options), i + 1
    raise ValueError(f"unexpected entry {key!r} in the expression tree")


# --- from the tree to a predicate ----------------------------------------------------------


def _fields(node: _Node) -> set[str]:
    if node.kind == "field":
        return {node.name}
    if node.kind == "nested":
        return {node.name.split(".")[0]}
    out: set[str] = set()
    for a in node.args:
        out |= _fields(a)
    return out


def _to_predicate(node: _Node, types: dict[str, pa.DataType]) -> Predicate:
    if node.kind != "call":
        return Unknown()
    name = node.name
    if name in ("and", "and_kleene"):
        return And(tuple(_to_predicate(a, types) for a in node.args))
    if name in ("or", "or_kleene"):
        return Or(tuple(_to_predicate(a, types) for a in node.args))
    if name == "invert" and len(node.args) == 1:
        return Not(_to_predicate(node.args[0], types))
    args = node.args
    if name in _COMPARE_OPS and len(args) == 2:
        left, right = args
        flipped = False
        if left.kind == "literal" and right.kind == "field":
            left, right, flipped = right, left, True
        if left.kind == "field" and right.kind == "literal" and left.name in types:
            try:
                value = comparable_literal(types[left.name], right.value)
            except _NoLiteral:
                return Unknown()
            cmp = Compare(left.name, _COMPARE_OPS[name], value)  # type: ignore[arg-type]
            return cmp.flipped() if flipped else cmp
        return Unknown()
    if len(args) == 1 and args[0].kind == "field" and args[0].name in types:
        column = args[0].name
        if name == "is_null":
            nan_is_null = bool(node.options and node.options["nan_is_null"].as_py())
            return IsNull(column, nan_is_null=nan_is_null)
        if name == "is_valid":
            return Not(IsNull(column))
        if name == "is_nan":
            return IsNan(column)
        if name == "is_in" and node.options is not None:
            return _is_in(column, types[column], node.options)
    return Unknown()


def _is_in(column: str, column_type: pa.DataType, options: pa.StructScalar) -> Predicate:
    value_set = options["value_set"]
    behavior = (
        options["null_matching_behavior"].as_py()
        if "null_matching_behavior" in [f.name for f in options.type]
        else 0
    )
    values = []
    nulls = nans = False
    for scalar in value_set.values if hasattr(value_set, "values") else value_set:
        if not scalar.is_valid:
            nulls = True
            continue
        raw = scalar.as_py()
        if isinstance(raw, float) and math.isnan(raw):
            nans = True
            continue
        try:
            values.append(comparable_literal(column_type, scalar))
        except _NoLiteral:
            return Unknown()
    # MATCH (0) lets a null in the set match null rows; other behaviours are treated as maybe.
    return IsIn(column, tuple(values), nulls_may_match=nulls or behavior != 0, nans_may_match=nans)


# --- public entry -------------------------------------------------------------------------


def _dnf_to_expression(filters: Sequence[Any]) -> pc.Expression:
    def term(t: Any) -> pc.Expression:
        if not (isinstance(t, (tuple, list)) and len(t) == 3 and isinstance(t[0], str)):
            raise InvalidFilterError(f"a filter term must be (column, op, value), got {t!r}")
        col, op, value = t
        f = pc.field(col)
        if op in ("=", "=="):
            return f == python_literal(value)
        if op == "!=":
            return f != python_literal(value)
        if op in ("<", "<=", ">", ">="):
            scalar = python_literal(value)
            return {"<": f < scalar, "<=": f <= scalar, ">": f > scalar, ">=": f >= scalar}[op]
        if op in ("in", "not in"):
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise InvalidFilterError(f"{op!r} needs a list of values, got {value!r}")
            e = f.isin(list(value))
            return e if op == "in" else ~e
        raise InvalidFilterError(
            f"unknown filter operator {op!r} in {t!r}; use =, ==, !=, <, <=, >, >=, in, not in"
        )

    def conjunction(terms: Sequence[Any]) -> pc.Expression:
        if not terms:
            raise InvalidFilterError("an empty list of filter terms")
        expr = term(terms[0])
        for t in terms[1:]:
            expr = expr & term(t)
        return expr

    if filters and all(
        isinstance(f, list) and (not f or isinstance(f[0], (tuple, list))) for f in filters
    ):
        expr = conjunction(filters[0])
        for group in filters[1:]:
            expr = expr | conjunction(group)
        return expr
    return conjunction(list(filters))


def _check_applies(expression: pc.Expression, schema: pa.Schema, where: str) -> None:
    """Refuse a filter Arrow cannot evaluate on this schema (types that do not compare, a
    result that is not a condition), before any data is read."""
    # One row of nulls: Arrow skips the kernels entirely on an empty table.
    probe = pa.Table.from_arrays([pa.nulls(1, f.type) for f in schema], names=schema.names)
    try:
        probe.filter(expression)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        names = set(schema.names)
        missing = [n for n in _field_names(expression) if n not in names]
        if missing:
            raise InvalidFilterError(
                f"filter {expression} names columns {sorted(missing)} that {where} does not "
                f"have; its columns are {schema.names}"
            ) from None
        raise InvalidFilterError(
            f"filter {expression} does not apply to {where}: {message}"
        ) from None


def _field_names(expression: pc.Expression) -> set[str]:
    try:
        return _fields(_expression_tree(expression))
    except Exception:
        return set()


def parse_filter(filter: FilterLike, schema: pa.Schema, *, where: str) -> Filter | None:
    """A :class:`Filter` for ``filter`` against ``schema``, or None for no filter.

    Raises :class:`InvalidFilterError` for a malformed filter or one naming unknown columns.
    """
    if filter is None:
        return None
    if isinstance(filter, pc.Expression):
        expression = filter
    elif isinstance(filter, (list, tuple)):
        try:
            expression = _dnf_to_expression(list(filter))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise InvalidFilterError(f"filter {filter!r} is not valid: {exc}") from None
    else:
        raise InvalidFilterError(
            "filter must be a pyarrow.compute.Expression or DNF tuples such as "
            f"[('col', '>', 5)], not {type(filter).__name__}"
        )
    _check_applies(expression, schema, where)
    types = {f.name: f.type for f in schema}
    try:
        tree = _expression_tree(expression)
    except Exception as exc:  # an unreadable tree only costs pruning
        _logger.debug("filter %s is not inspectable (%s); it will not prune", expression, exc)
        return Filter(expression, Unknown(), frozenset(types))
    columns = _fields(tree)
    missing = sorted(columns - set(types))
    if missing:
        raise InvalidFilterError(
            f"filter {expression} names columns {missing} that {where} does not have; "
            f"its columns are {list(types)}"
        )
    return Filter(expression, _to_predicate(tree, types), frozenset(columns))
