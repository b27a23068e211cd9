"""The second reading of a ``pyarrow.compute.Expression``: for one pyarrow cannot serialize as
it stands (Arrow would cast a *column* to compare it), read it against a schema whose integer and
float32 columns are float64 (and s/ms timestamps are in us), rebuild it from what was read, and
keep the rebuilt filter only if it ``equals()`` the user's expression exactly. The same rebuild
rewrites integer comparisons with other numbers into exact ones (:mod:`.terms`)."""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

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
)
from carbonlite.reader.terms import FLIP, OPERATORS, comparison, membership

__all__ = ["Rebuilt", "fields_read", "needs_rewrite", "second_reading", "verified"]

MAX_CANDIDATES = 256
"""How many literal-type combinations the second reading tries before giving up pruning."""


def fields_read(node: sub.Node) -> set[str] | None:
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
        found = fields_read(part)
        if found is None:
            return None
        out |= found
    return out


@dataclass(frozen=True)
class Rebuilt:
    user: pc.Expression
    """The user's expression as rebuilt (to compare with ``equals()``)."""
    rows: pc.Expression
    """The expression to apply to rows (exact rewrites included)."""
    predicate: Predicate
    literals: tuple[tuple[str, pa.DataType], ...] = ()
    """(column, literal type) of each comparison, for error messages."""
    columns: frozenset[str] = frozenset()
    """Every column read (set on the whole expression only)."""


def _joined(name: str, parts: Sequence[Rebuilt]) -> Rebuilt:
    join = operator.and_ if name == "and" else operator.or_
    user, rows = parts[0].user, parts[0].rows
    for part in parts[1:]:
        user, rows = join(user, part.user), join(rows, part.rows)
    predicates = tuple(p.predicate for p in parts)
    return Rebuilt(
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


def _rebuild(node: sub.Node, types: dict[str, pa.DataType]) -> Iterator[Rebuilt]:
    if isinstance(node, sub.Field):
        e = pc.field(node.name)
        pred: Predicate = (
            Compare(node.name, "==", True) if pat.is_boolean(types[node.name]) else Unknown()
        )
        yield Rebuilt(e, e, pred)
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
                rows, predicate = membership(column, column_type, value_set, skip_nulls=skip_nulls)
                yield Rebuilt(user, rows, predicate, ((column, t),))
        return
    if not isinstance(node, sub.Call):
        raise _NoRebuild
    name, args = node.function, node.args
    if name in ("and", "or", "not"):
        options = [list(itertools.islice(_rebuild(a, types), MAX_CANDIDATES)) for a in args]
        for combo in itertools.product(*options):
            if name == "not":
                (part,) = combo
                yield Rebuilt(~part.user, ~part.rows, Not(part.predicate), part.literals)
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
        yield Rebuilt(e, e, pred)
        return
    left, right = args
    if isinstance(left, sub.Field) and isinstance(right, sub.Literal):
        column, seen, flipped = left.name, right.value, False
    elif isinstance(left, sub.Literal) and isinstance(right, sub.Field):
        column, seen, flipped = right.name, left.value, True
    else:
        raise _NoRebuild
    column_type = types[column]
    op: CompareOp = FLIP[name] if flipped else name  # type: ignore[assignment]
    for literal in _literal_candidates(column_type, seen):
        if flipped:
            user = OPERATORS[name](pc.scalar(literal), pc.field(column))
        else:
            user = OPERATORS[name](pc.field(column), literal)
        rows, predicate = comparison(column, column_type, op, literal)
        yield Rebuilt(user, rows, predicate, ((column, literal.type),))


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


def needs_rewrite(node: sub.Node, types: dict[str, pa.DataType]) -> bool:
    """Whether Arrow would compare an integer column with numbers of another type (an IN list
    of floats, say), which it does by casting the column, failing on large values."""
    if isinstance(node, sub.InList) and isinstance(node.value, sub.Field):
        column_type = types[node.value.name]
        return pat.is_integer(column_type) and any(
            isinstance(o, sub.Literal) and o.value.is_valid and o.value.type != column_type
            for o in node.options
        )
    if isinstance(node, sub.Call):
        return any(needs_rewrite(a, types) for a in node.args)
    return False


def verified(
    expression: pc.Expression, tree: sub.Node, types: dict[str, pa.DataType]
) -> Rebuilt | None:
    """The filter rebuilt from ``tree``, if the rebuilt expression is exactly ``expression``."""
    columns = fields_read(tree)
    if columns is None:
        return None
    try:
        for rebuilt in itertools.islice(_rebuild(tree, types), MAX_CANDIDATES):
            if rebuilt.user.equals(expression):
                return dataclasses.replace(rebuilt, columns=frozenset(columns))
    except _NoRebuild:
        return None
    return None


def second_reading(expression: pc.Expression, schema: pa.Schema) -> Rebuilt | None:
    """For an expression pyarrow cannot serialize as it stands (Arrow would cast a column):
    read it with numeric columns as float64, and keep it only if it rebuilds exactly."""
    try:
        widened = sub.read_expression(expression, _widened(schema))
    except sub.SubstraitUnavailable:
        return None
    return verified(expression, widened, {f.name: f.type for f in schema})
