"""Filters: accept a ``pyarrow.compute.Expression`` or DNF tuples, and see inside them.

A :class:`Filter` holds two views of one condition: an Arrow expression applied exactly to the
rows of every blocklet read, and a :mod:`predicate <carbonlite.reader.predicate>` tree that
prunes blocklets by their statistics. The tree is only ever built from information read
exactly; whatever is not understood becomes :class:`Unknown` (no pruning), never a guess.

- DNF tuples (``[("ts", ">", 5), ("id", "in", [1, 2])]``, or a list of such lists, OR-ed) are
  read directly: the values are the user's own Python values.
- A ``pyarrow.compute.Expression`` is read through its public Substrait serialization
  (:mod:`carbonlite.reader.substrait`), bound to the table schema as Arrow itself binds it.
  When pyarrow cannot serialize it because Arrow would cast a *column* to compare it (an
  integer column against a float literal, say), it is read once more against a schema whose
  integer and float32 columns are float64 (and s/ms timestamps are in us), rebuilt from what
  was read, and used only if the rebuilt expression ``equals()`` the user's one exactly.

Comparisons of an integer column with a literal of another numeric type are rewritten to an
exact comparison with an integer of the column's type (``i > 1.5`` is ``i > 1``), both for
pruning and for the rows: Arrow would cast the column to a float type and fail on large
values. Anything Arrow cannot evaluate is an :class:`InvalidFilterError`. See docs/FILTERS.md.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from carbonlite.errors import InvalidFilterError
from carbonlite.reader import substrait as sub
from carbonlite.reader.predicate import (
    And,
    Compare,
    CompareOp,
    IsIn,
    IsNan,
    IsNull,
    Not,
    Or,
    Predicate,
    Unknown,
    _NoLiteral,
    comparable_literal,
    integer_comparison,
    python_literal,
)

__all__ = ["Filter", "FilterLike", "check_filter", "parse_filter"]

FilterLike = Any
"""``pyarrow.compute.Expression``, DNF ``[("col", op, value), ...]`` (or a list of such lists,
OR-ed), or None."""

_OPERATORS: dict[str, Callable[[Any, Any], pc.Expression]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_FLIP: dict[str, CompareOp] = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_MAX_CANDIDATES = 256
"""How many literal-type combinations the second reading tries before giving up pruning."""


@dataclass(frozen=True)
class Filter:
    """A filter, both as an exact Arrow expression and as a tree for pruning."""

    expression: pc.Expression
    """What is applied to the rows (the user's expression, or an exact rewrite of it)."""
    predicate: Predicate
    columns: frozenset[str]
    """Every column the filter reads."""
    where: str = ""
    """The table, for error messages."""

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The rows of ``batch`` the filter keeps; Arrow's failures become
        :class:`InvalidFilterError`."""
        try:
            return batch.filter(self.expression)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise InvalidFilterError(
                f"filter {self.expression} cannot be evaluated on the rows of {self.where}: "
                f"{_first_line(exc)}{_hint(self.expression, batch.schema)}"
            ) from None


# --- helpers ---------------------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _probe(schema: pa.Schema) -> pa.Table:
    # One row of nulls: Arrow skips the kernels entirely on an empty table.
    if not len(schema):
        return pa.Table.from_batches([pa.RecordBatch.from_struct_array(pa.nulls(1, pa.struct([])))])
    return pa.Table.from_arrays([pa.nulls(1, f.type) for f in schema], names=schema.names)


_NO_MATCH = re.compile(r"No match for FieldRef\.Name\((.*)\) in ")


def _referenced(expression: pc.Expression, schema: pa.Schema) -> tuple[list[str], bool]:
    """Columns ``expression`` reads, found by binding it to ever larger schemas, and whether
    that list is complete (the expression bound to it)."""
    names: list[str] = []
    for _ in range(len(schema) + 1):
        try:
            _probe(pa.schema([schema.field(n) for n in names])).filter(expression)
            return names, True
        except (pa.ArrowException, TypeError, ValueError) as exc:
            match = _NO_MATCH.match(_first_line(exc))
            name = match.group(1) if match else None
            if name is None or name not in schema.names or name in names:
                break
            names.append(name)
    return names, False


def _needed_columns(expression: pc.Expression, schema: pa.Schema) -> frozenset[str]:
    """The columns ``expression`` reads (all of them when that cannot be told)."""
    names, complete = _referenced(expression, schema)
    return frozenset(names) if complete else frozenset(schema.names)


def _hint(expression: pc.Expression, schema: pa.Schema) -> str:
    """What a failing filter compares, for an error message: each column with its type and the
    type of the literal it is compared with, or else the columns it reads."""
    try:
        rebuilt = _second_reading(expression, schema)
        if rebuilt is not None and rebuilt.literals:
            pairs = dict.fromkeys(
                f"column {c!r} ({schema.field(c).type}) with a literal of type {t}"
                for c, t in rebuilt.literals
            )
            return f" (it compares {'; '.join(pairs)})"
        columns = sorted(_referenced(expression, schema)[0])
    except Exception:  # only a hint
        return ""
    typed = ", ".join(f"{c!r} ({schema.field(c).type})" for c in columns)
    return f" (it reads {typed})" if typed else ""


def _check_applies(expression: pc.Expression, schema: pa.Schema, where: str) -> None:
    """Refuse a filter Arrow cannot evaluate on this schema (types that do not compare, a
    result that is not a condition, an unknown column), before any data is read."""
    try:
        result = _probe(schema).filter(expression)
        del result
    except (pa.ArrowException, TypeError, ValueError) as exc:
        message = _first_line(exc)
        match = _NO_MATCH.match(message)
        if match:
            raise InvalidFilterError(
                f"filter {expression} names a column {match.group(1)!r} that {where} does not "
                f"have; its columns are {schema.names}"
            ) from None
        if message.startswith("No match for FieldRef"):
            raise InvalidFilterError(
                f"filter {expression} names a column that {where} does not have ({message}); "
                f"its columns are {schema.names}"
            ) from None
        raise InvalidFilterError(
            f"filter {expression} does not apply to {where}: {message}{_hint(expression, schema)}"
        ) from None


# --- one comparison ---------------------------------------------------------------------------


def _is_number(t: pa.DataType) -> bool:
    return bool(pat.is_integer(t) or pat.is_floating(t) or pat.is_decimal(t))


def _python_number(value: Any) -> bool:
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


def _comparison(
    column: str, column_type: pa.DataType, op: CompareOp, literal: pa.Scalar | Any
) -> tuple[pc.Expression, Predicate]:
    """``column op literal`` (a scalar, or a Python value): the expression to apply to rows,
    and its predicate.

    An integer column against a number of another type becomes an exact comparison with an
    integer of the column's type; anything else is left to Arrow's own semantics."""
    field = pc.field(column)
    number: Any = None
    if isinstance(literal, pa.Scalar):
        if literal.is_valid and literal.type != column_type and _is_number(literal.type):
            number = literal.as_py()
    elif _python_number(literal):
        number = literal
    if number is not None and pat.is_integer(column_type):
        new_op, n = integer_comparison(column_type, op, number)
        exact = pa.scalar(n, column_type)
        return _OPERATORS[new_op](field, exact), Compare(column, new_op, n)
    if not isinstance(literal, pa.Scalar):
        literal = python_literal(literal)
    expression = _OPERATORS[op](field, literal)
    try:
        return expression, Compare(column, op, comparable_literal(column_type, literal))
    except _NoLiteral:
        return expression, Unknown()


def _membership(
    column: str, column_type: pa.DataType, value_set: pa.Array, *, skip_nulls: bool
) -> tuple[pc.Expression, Predicate]:
    """``column IN value_set`` (a null member matches null rows unless ``skip_nulls``)."""
    field = pc.field(column)
    if pat.is_integer(column_type) and value_set.type != column_type and _is_number(value_set.type):
        value_set = _integer_members(column_type, value_set.to_pylist())
    expression = pc.is_in(field, value_set=value_set, skip_nulls=skip_nulls)
    return expression, _is_in_predicate(
        column, column_type, list(value_set), nulls_match=not skip_nulls
    )


def _integer_members(column_type: pa.DataType, values: Sequence[Any]) -> pa.Array:
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


def _is_in_predicate(
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


# --- a Substrait tree -> predicate (the expression as Arrow binds it) --------------------------


def _predicate(node: sub.Node, types: dict[str, pa.DataType]) -> Predicate:
    if isinstance(node, sub.Field):
        if pat.is_boolean(types[node.name]):
            return Compare(node.name, "==", True)
        return Unknown()
    if not isinstance(node, (sub.Call, sub.InList)):
        return Unknown()
    if isinstance(node, sub.InList):
        if not isinstance(node.value, sub.Field) or not all(
            isinstance(o, sub.Literal) for o in node.options
        ):
            return Unknown()
        column = node.value.name
        members = [o.value for o in node.options if isinstance(o, sub.Literal)]
        # The null-matching behaviour is not written: a null member *may* match null rows.
        return _is_in_predicate(column, types[column], members, nulls_match=True)
    name, args = node.function, node.args
    if name == "and":
        return And(tuple(_predicate(a, types) for a in args))
    if name == "or":
        return Or(tuple(_predicate(a, types) for a in args))
    if name == "not":
        return Not(_predicate(args[0], types))
    if name in ("is_null", "is_not_null", "is_nan"):
        if not isinstance(args[0], sub.Field):
            return Unknown()
        column = args[0].name
        if name == "is_null":
            return IsNull(column)  # Arrow writes only is_null(nan_is_null=false) this way
        return Not(IsNull(column)) if name == "is_not_null" else IsNan(column)
    left, right = args
    if (
        name in ("==", "!=")
        and isinstance(left, sub.Field)
        and isinstance(right, sub.Field)
        and left.name == right.name
        and pat.is_floating(types[left.name])
    ):
        # x != x holds for NaN alone (null rows: null), x == x for every other number. DuckDB
        # states "NaN sorts above every number" this way (x > 1 becomes x > 1 or x != x).
        return IsNan(left.name) if name == "!=" else Not(IsNan(left.name))
    flipped = False
    if isinstance(left, sub.Literal) and isinstance(right, sub.Field):
        left, right, flipped = right, left, True
    if not (isinstance(left, sub.Field) and isinstance(right, sub.Literal)):
        return Unknown()
    try:
        value = comparable_literal(types[left.name], right.value)
    except _NoLiteral:
        return Unknown()
    op: CompareOp = _FLIP[name] if flipped else name  # type: ignore[assignment]
    return Compare(left.name, op, value)


def _fields(node: sub.Node) -> set[str] | None:
    """Columns a tree reads; None when part of it is opaque (and may read others)."""
    if isinstance(node, sub.Field):
        return {node.name}
    if isinstance(node, sub.Literal):
        return set()
    if isinstance(node, sub.Opaque):
        return None
    parts = node.args if isinstance(node, sub.Call) else (node.value, *node.options)
    out: set[str] = set()
    for part in parts:
        found = _fields(part)
        if found is None:
            return None
        out |= found
    return out


# --- the second reading: rebuild the user's expression, verify it, rewrite it ----------------


@dataclass(frozen=True)
class _Rebuilt:
    user: pc.Expression
    """The user's expression as rebuilt (to compare with ``equals()``)."""
    rows: pc.Expression
    """The expression to apply to rows (exact rewrites included)."""
    predicate: Predicate
    literals: tuple[tuple[str, pa.DataType], ...] = ()
    """(column, literal type) of each comparison, for error messages."""
    columns: frozenset[str] = frozenset()
    """Every column read (set on the whole expression only)."""


def _joined(name: str, parts: Sequence[_Rebuilt]) -> _Rebuilt:
    join = operator.and_ if name == "and" else operator.or_
    user, rows = parts[0].user, parts[0].rows
    for part in parts[1:]:
        user, rows = join(user, part.user), join(rows, part.rows)
    predicates = tuple(p.predicate for p in parts)
    return _Rebuilt(
        user,
        rows,
        And(predicates) if name == "and" else Or(predicates),
        tuple(lit for p in parts for lit in p.literals),
    )


class _NoRebuild(Exception):
    pass


def _literal_candidates(column_type: pa.DataType, seen: pa.Scalar) -> list[pa.Scalar]:
    """Literals the user may have written, given the one Arrow bound: Arrow narrows a literal
    to the column's type when that is lossless, and the second reading binds numbers to a
    float64 stand-in. Each is tried; ``equals()`` on the whole expression decides."""
    out = [seen]
    if not seen.is_valid:
        return out
    t = seen.type
    if pat.is_integer(t) or pat.is_floating(t):
        targets = [pa.int64(), pa.float64(), column_type, pa.uint64(), pa.float32()]
    elif pat.is_timestamp(t):
        tz = column_type.tz if pat.is_timestamp(column_type) else None
        targets = [column_type, *(pa.timestamp(u, tz=tz or t.tz) for u in ("us", "ms", "s"))]
    elif pat.is_string(t) or pat.is_large_string(t):
        targets = [pa.string(), pa.large_string()]
    elif pat.is_binary(t) or pat.is_large_binary(t):
        targets = [pa.binary(), pa.large_binary()]
    else:
        targets = []
    for target in targets:
        try:
            candidate = seen.cast(target)  # safe: refuses to round or truncate
            if candidate.cast(t) != seen:
                continue
        except (pa.ArrowException, ValueError, OverflowError, TypeError):
            continue
        if all(candidate.type != o.type or not candidate.equals(o) for o in out):
            out.append(candidate)
    return out


def _rebuild(node: sub.Node, types: dict[str, pa.DataType]) -> Iterator[_Rebuilt]:
    if isinstance(node, sub.Field):
        e = pc.field(node.name)
        pred: Predicate = (
            Compare(node.name, "==", True) if pat.is_boolean(types[node.name]) else Unknown()
        )
        yield _Rebuilt(e, e, pred)
        return
    if isinstance(node, sub.InList):
        if not isinstance(node.value, sub.Field) or not all(
            isinstance(o, sub.Literal) for o in node.options
        ):
            raise _NoRebuild
        column = node.value.name
        column_type = types[column]
        members = [o.value for o in node.options if isinstance(o, sub.Literal)]
        kinds = {m.type for m in members if m.is_valid}
        for t in dict.fromkeys([column_type, pa.int64(), *kinds]):
            values = [m.as_py() for m in members]
            if pat.is_integer(t):
                values = [int(v) if isinstance(v, float) and v.is_integer() else v for v in values]
            try:
                value_set = pa.array(values, t)
            except (pa.ArrowException, ValueError, OverflowError, TypeError):
                continue
            for skip_nulls in (False, True):
                user = pc.is_in(pc.field(column), value_set=value_set, skip_nulls=skip_nulls)
                rows, predicate = _membership(column, column_type, value_set, skip_nulls=skip_nulls)
                yield _Rebuilt(user, rows, predicate, ((column, t),))
        return
    if not isinstance(node, sub.Call):
        raise _NoRebuild
    name, args = node.function, node.args
    if name in ("and", "or", "not"):
        options = [list(itertools.islice(_rebuild(a, types), _MAX_CANDIDATES)) for a in args]
        for combo in itertools.product(*options):
            if name == "not":
                (part,) = combo
                yield _Rebuilt(~part.user, ~part.rows, Not(part.predicate), part.literals)
            else:
                yield _joined(name, combo)
        return
    if name in ("is_null", "is_not_null", "is_nan"):
        if not isinstance(args[0], sub.Field):
            raise _NoRebuild
        column = args[0].name
        f = pc.field(column)
        if name == "is_null":
            e, pred = f.is_null(), IsNull(column)
        elif name == "is_not_null":
            e, pred = f.is_valid(), Not(IsNull(column))
        else:
            e, pred = f.is_nan(), IsNan(column)
        yield _Rebuilt(e, e, pred)
        return
    left, right = args
    if isinstance(left, sub.Field) and isinstance(right, sub.Literal):
        column, seen, flipped = left.name, right.value, False
    elif isinstance(left, sub.Literal) and isinstance(right, sub.Field):
        column, seen, flipped = right.name, left.value, True
    else:
        raise _NoRebuild
    column_type = types[column]
    op: CompareOp = _FLIP[name] if flipped else name  # type: ignore[assignment]
    for literal in _literal_candidates(column_type, seen):
        if flipped:
            user = _OPERATORS[name](pc.scalar(literal), pc.field(column))
        else:
            user = _OPERATORS[name](pc.field(column), literal)
        rows, predicate = _comparison(column, column_type, op, literal)
        yield _Rebuilt(user, rows, predicate, ((column, literal.type),))


def _widened(schema: pa.Schema) -> pa.Schema:
    """``schema`` with integer and float32 columns as float64, and second or millisecond
    timestamps in microseconds: Arrow then binds most literals without casting the column."""

    def stand_in(t: pa.DataType) -> pa.DataType:
        if pat.is_integer(t) or pat.is_float32(t):
            return pa.float64()
        if pat.is_timestamp(t) and t.unit in ("s", "ms"):
            return pa.timestamp("us", tz=t.tz)
        return t

    return pa.schema([f.with_type(stand_in(f.type)) for f in schema])


def _needs_rewrite(node: sub.Node, types: dict[str, pa.DataType]) -> bool:
    """Whether Arrow would compare an integer column with numbers of another type (an IN list
    of floats, say), which it does by casting the column, failing on large values."""
    if isinstance(node, sub.InList) and isinstance(node.value, sub.Field):
        column_type = types[node.value.name]
        return pat.is_integer(column_type) and any(
            isinstance(o, sub.Literal) and o.value.is_valid and o.value.type != column_type
            for o in node.options
        )
    if isinstance(node, sub.Call):
        return any(_needs_rewrite(a, types) for a in node.args)
    return False


def _verified(
    expression: pc.Expression, tree: sub.Node, types: dict[str, pa.DataType]
) -> _Rebuilt | None:
    """The filter rebuilt from ``tree``, if the rebuilt expression is exactly ``expression``."""
    columns = _fields(tree)
    if columns is None:
        return None
    try:
        for rebuilt in itertools.islice(_rebuild(tree, types), _MAX_CANDIDATES):
            if rebuilt.user.equals(expression):
                return dataclasses.replace(rebuilt, columns=frozenset(columns))
    except _NoRebuild:
        return None
    return None


def _second_reading(expression: pc.Expression, schema: pa.Schema) -> _Rebuilt | None:
    """For an expression pyarrow cannot serialize as it stands (Arrow would cast a column):
    read it with numeric columns as float64, and keep it only if it rebuilds exactly."""
    try:
        widened = sub.read_expression(expression, _widened(schema))
    except sub.SubstraitUnavailable:
        return None
    return _verified(expression, widened, {f.name: f.type for f in schema})


def _from_expression(expression: pc.Expression, schema: pa.Schema) -> Filter:
    types = {f.name: f.type for f in schema}
    try:
        tree = sub.read_expression(expression, schema)
    except sub.SubstraitUnavailable:
        tree = None
    found = None
    if tree is None:
        found = _second_reading(expression, schema)
    elif _needs_rewrite(tree, types):
        found = _verified(expression, tree, types)
    if found is not None:
        return Filter(found.rows, found.predicate, found.columns)
    if tree is None:
        return Filter(expression, Unknown(), _needed_columns(expression, schema))
    columns = _fields(tree)
    return Filter(
        expression,
        _predicate(tree, types),
        frozenset(columns) if columns is not None else _needed_columns(expression, schema),
    )


# --- DNF tuples -------------------------------------------------------------------------------


def _dnf_term(t: Any, types: dict[str, pa.DataType], where: str) -> tuple[pc.Expression, Predicate]:
    if not (isinstance(t, (tuple, list)) and len(t) == 3 and isinstance(t[0], str)):
        raise InvalidFilterError(f"a filter term must be (column, op, value), got {t!r}")
    column, op, value = t
    if column not in types:
        raise InvalidFilterError(
            f"filter term {t!r} names a column {column!r} that {where} does not have; "
            f"its columns are {list(types)}"
        )
    column_type = types[column]
    if op in ("=", "==", "!=", "<", "<=", ">", ">="):
        try:
            return _comparison(column, column_type, "==" if op == "=" else op, value)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise InvalidFilterError(
                f"filter term {t!r}: {value!r} is not a value: {exc}"
            ) from None
    if op in ("in", "not in"):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise InvalidFilterError(f"{op!r} needs a list of values, got {value!r}")
        values = list(value)
        try:
            if pat.is_integer(column_type) and all(v is None or _python_number(v) for v in values):
                value_set = _integer_members(column_type, values)
            else:
                value_set = pa.array(values) if values else pa.array([], column_type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise InvalidFilterError(f"filter term {t!r}: the values do not fit: {exc}") from None
        expression, predicate = _membership(column, column_type, value_set, skip_nulls=False)
        return (expression, predicate) if op == "in" else (~expression, Not(predicate))
    raise InvalidFilterError(
        f"unknown filter operator {op!r} in {t!r}; use =, ==, !=, <, <=, >, >=, in, not in"
    )


def _dnf(filters: Sequence[Any], types: dict[str, pa.DataType], where: str) -> Filter:
    def conjunction(terms: Sequence[Any]) -> tuple[pc.Expression, Predicate, set[str]]:
        if not terms:
            raise InvalidFilterError("an empty list of filter terms")
        parts = [_dnf_term(t, types, where) for t in terms]
        expression = parts[0][0]
        for e, _p in parts[1:]:
            expression = expression & e
        return expression, And(tuple(p for _e, p in parts)), {t[0] for t in terms}

    if filters and all(
        isinstance(f, list) and (not f or isinstance(f[0], (tuple, list))) for f in filters
    ):
        groups = [conjunction(group) for group in filters]
    else:
        groups = [conjunction(list(filters))]
    expression = groups[0][0]
    for e, _p, _c in groups[1:]:
        expression = expression | e
    predicate: Predicate = groups[0][1] if len(groups) == 1 else Or(tuple(g[1] for g in groups))
    columns = frozenset(c for g in groups for c in g[2])
    return Filter(expression, predicate, columns, where)


# --- public entry -----------------------------------------------------------------------------


def parse_filter(filter: FilterLike, schema: pa.Schema, *, where: str) -> Filter | None:
    """A :class:`Filter` for ``filter`` against ``schema``, or None for no filter.

    Raises :class:`InvalidFilterError` for a malformed filter, one naming unknown columns, or
    one Arrow cannot evaluate on the schema's types.
    """
    if filter is None:
        return None
    types = {f.name: f.type for f in schema}
    if isinstance(filter, (list, tuple)):
        parsed = _dnf(list(filter), types, where)
        _check_applies(parsed.expression, schema, where)
        return parsed
    if not isinstance(filter, pc.Expression):
        raise InvalidFilterError(
            "filter must be a pyarrow.compute.Expression or DNF tuples such as "
            f"[('col', '>', 5)], not {type(filter).__name__}"
        )
    _check_applies(filter, schema, where)
    found = _from_expression(filter, schema)
    return Filter(found.expression, found.predicate, found.columns, where)


def check_filter(expression: pc.Expression, schema: pa.Schema, *, where: str) -> None:
    """Raise :class:`InvalidFilterError` unless Arrow can evaluate ``expression`` on rows of
    ``schema``: what :func:`parse_filter` checks first, without reading the expression for
    pruning (for a caller that only asks whether a filter would be accepted)."""
    _check_applies(expression, schema, where)
