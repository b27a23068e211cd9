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

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
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
    IsNan,
    IsNull,
    Not,
    Or,
    Predicate,
    Unknown,
    _NoLiteral,
    comparable_literal,
)
from carbonlite.reader.rebuild import fields_read, needs_rewrite, second_reading, verified
from carbonlite.reader.terms import (
    FLIP,
    comparison,
    integer_members,
    is_in_predicate,
    membership,
    python_number,
)

__all__ = ["Filter", "FilterLike", "check_filter", "parse_filter"]

FilterLike = Any
"""``pyarrow.compute.Expression``, DNF ``[("col", op, value), ...]`` (or a list of such lists,
OR-ed), a SQL-ish string such as ``"day >= '2026-01-01' AND id IN (1, 2)"``
(:mod:`carbonlite.reader.sql_filter`), or None."""


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
        :class:`InvalidFilterError`.

        The expression is evaluated by an Acero projection (which reads only the columns it
        names), and its mask then selects the rows of every column in one pass: Arrow's own
        ``batch.filter(expression)`` runs every column through its plan in 32k-row pieces and
        joins them again (a third more time on a 131k-row blocklet of six columns). The rows
        kept are the same: those where the expression is true (false and null drop)."""
        # (imported here: pyarrow.acero imports pandas, which importing carbonlite must not)
        from pyarrow.acero import Declaration, ProjectNodeOptions, TableSourceNodeOptions

        try:
            if not batch.num_columns or not batch.num_rows:
                return batch.filter(self.expression)
            source = pa.Table.from_batches([batch])  # every column: fields may be by position
            mask = (
                Declaration.from_sequence(
                    [
                        Declaration("table_source", TableSourceNodeOptions(source)),
                        Declaration("project", ProjectNodeOptions([self.expression], ["keep"])),
                    ]
                )
                .to_table(use_threads=False)
                .column(0)
            )
            return _kept(batch, mask.combine_chunks() if mask.num_chunks != 1 else mask.chunk(0))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise InvalidFilterError(
                f"filter {self.expression} cannot be evaluated on the rows of {self.where}: "
                f"{_first_line(exc)}{_hint(self.expression, batch.schema)}"
            ) from None


# --- helpers ---------------------------------------------------------------------------------


def _kept(batch: pa.RecordBatch, mask: pa.BooleanArray) -> pa.RecordBatch:
    """The rows of ``batch`` where ``mask`` is true (false and null drop). Rows kept in one
    unbroken run (a range of a sorted column, every row) of at least a quarter of the batch
    are a slice of it, with no copy (the slice holds on to the batch's memory: at most four
    times its own); any other mask copies the rows it keeps."""
    if mask.null_count:
        mask = pc.fill_null(mask, False)
    count = pc.sum(mask).as_py() or 0
    if count * SLICE_MIN_SHARE >= len(mask) > 0:
        first = pc.index(mask, True).as_py()
        if pc.all(mask.slice(first, count)).as_py():
            return batch.slice(first, count)
    return batch.filter(mask)


SLICE_MIN_SHARE = 4
"""A run of kept rows is sliced, not copied, when it holds at least 1/4 of the batch's rows."""


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
        rebuilt = second_reading(expression, schema)
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
        return is_in_predicate(column, types[column], members, nulls_match=True)
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
    op: CompareOp = FLIP[name] if flipped else name  # type: ignore[assignment]
    return Compare(left.name, op, value)


def _from_expression(expression: pc.Expression, schema: pa.Schema) -> Filter:
    types = {f.name: f.type for f in schema}
    try:
        tree = sub.read_expression(expression, schema)
    except sub.SubstraitUnavailable:
        tree = None
    found = None
    if tree is None:
        found = second_reading(expression, schema)
    elif needs_rewrite(tree, types):
        found = verified(expression, tree, types)
    if found is not None:
        return Filter(found.rows, found.predicate, found.columns)
    if tree is None:
        return Filter(expression, Unknown(), _needed_columns(expression, schema))
    columns = fields_read(tree)
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
            return comparison(column, column_type, "==" if op == "=" else op, value)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise InvalidFilterError(
                f"filter term {t!r}: {value!r} is not a value: {exc}"
            ) from None
    if op in ("in", "not in"):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise InvalidFilterError(f"{op!r} needs a list of values, got {value!r}")
        values = list(value)
        try:
            if pat.is_integer(column_type) and all(v is None or python_number(v) for v in values):
                value_set = integer_members(column_type, values)
            else:
                value_set = pa.array(values) if values else pa.array([], column_type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise InvalidFilterError(f"filter term {t!r}: the values do not fit: {exc}") from None
        expression, predicate = membership(column, column_type, value_set, skip_nulls=False)
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
    key = _cache_key(filter, schema)
    if key is not None:
        with _PARSED_LOCK:
            known = _PARSED.get(key)
            if known is not None:
                _PARSED.move_to_end(key)
        if known is not None:
            return replace(known, where=where)
    parsed = _parse(filter, schema, where=where)
    if key is not None and parsed is not None:
        with _PARSED_LOCK:
            _PARSED[key] = replace(parsed, where="")
            while len(_PARSED) > _PARSED_MAX:
                _PARSED.popitem(last=False)
    return parsed


_PARSED: OrderedDict[tuple[str, bytes | str, pa.Schema], Filter] = OrderedDict()
"""Filters parsed lately, by (kind, the filter's exact form, schema): a table queried again
and again with the same filter (a dashboard, a Spark query per micro-batch) parses it once.
An accepted filter only: one refused is parsed (and refused) again each time."""
_PARSED_MAX = 256
_PARSED_LOCK = threading.Lock()


def _cache_key(filter: FilterLike, schema: pa.Schema) -> tuple[str, bytes | str, pa.Schema] | None:
    """The exact form of a string or an Arrow expression (its serialization, which holds each
    literal's type), with the schema it is parsed against; None for DNF lists, whose Python
    values have no exact cheap form (``1`` and ``True`` are equal keys), and for an
    expression Arrow cannot serialize (a field by position)."""
    if isinstance(filter, str):
        return ("sql", filter, schema)
    if isinstance(filter, pc.Expression):
        try:
            _make, (buffer,) = filter.__reduce__()
        except pa.ArrowException:  # a field by position (pc.field(0)) has no serialization
            return None
        return ("expression", buffer.to_pybytes(), schema)
    return None


def _parse(filter: FilterLike, schema: pa.Schema, *, where: str) -> Filter | None:
    if isinstance(filter, str):  # SQL-ish: "day >= '2026-01-01' AND region = 'eu'"
        from carbonlite.reader.sql_filter import sql_dnf

        filter = sql_dnf(filter, schema, where=where)
    types = {f.name: f.type for f in schema}
    if isinstance(filter, (list, tuple)):
        parsed = _dnf(list(filter), types, where)
        _check_applies(parsed.expression, schema, where)
        return parsed
    if not isinstance(filter, pc.Expression):
        raise InvalidFilterError(
            "filter must be a pyarrow.compute.Expression, DNF tuples such as "
            f"[('col', '>', 5)] or a string such as \"col > 5\", not {type(filter).__name__}"
        )
    _check_applies(filter, schema, where)
    found = _from_expression(filter, schema)
    return Filter(found.expression, found.predicate, found.columns, where)


def check_filter(expression: pc.Expression, schema: pa.Schema, *, where: str) -> None:
    """Raise :class:`InvalidFilterError` unless Arrow can evaluate ``expression`` on rows of
    ``schema``: what :func:`parse_filter` checks first, without reading the expression for
    pruning (for a caller that only asks whether a filter would be accepted)."""
    _check_applies(expression, schema, where)
