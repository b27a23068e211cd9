"""Polars reads CarbonLite tables lazily: ``carbonlite.polars.scan(path)`` is a LazyFrame.

It is a Polars IO source (``polars.io.plugins.register_io_source``, as ``pl.scan_iceberg``
and ``pl.scan_pyarrow_dataset`` are): Polars hands it the columns a query needs, its filter,
a row limit and a batch size, and it

- decodes only those columns (plus the ones the filter reads);
- translates what it can of the filter into a CarbonLite filter (:func:`to_arrow_filter`),
  so whole blocklets are skipped by their min/max statistics; the parts it cannot translate
  prune nothing, and the exact Polars filter is applied to every batch anyway, so the rows
  are Polars' own;
- stops reading once the row limit is reached, and yields at most ``batch_size`` rows at a
  time: one blocklet is decoded at a time per thread, the table is never read whole.

Polars' predicate reaches the source as a ``polars.Expr``; it is read through
``Expr.meta.serialize(format="json")``, whose layout Polars does not promise to keep. Any
node this module does not recognise, in whatever Polars version, prunes nothing.
"""

from __future__ import annotations

import datetime
import inspect
import json
import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.arguments import VersionLike
from carbonlite.create import open_table
from carbonlite.errors import CarbonLiteError
from carbonlite.optional import require
from carbonlite.reader.expression import check_filter
from carbonlite.table import Table

__all__ = ["scan", "to_arrow_filter"]

_COMPARISONS = {
    "Eq": "__eq__",
    "NotEq": "__ne__",
    "Lt": "__lt__",
    "LtEq": "__le__",
    "Gt": "__gt__",
    "GtEq": "__ge__",
}
_FLIPPED = {"Lt": "Gt", "LtEq": "GtEq", "Gt": "Lt", "GtEq": "LtEq", "Eq": "Eq", "NotEq": "NotEq"}
_UNITS = {"Nanoseconds": "ns", "Microseconds": "us", "Milliseconds": "ms"}
_NAN_ABOVE = {"Gt", "GtEq"}
"""Comparisons NaN satisfies in Polars (NaN sorts above every number) and never in Arrow."""


class _Untranslatable(Exception):
    pass


_NOT_TRANSLATED = (
    _Untranslatable,
    KeyError,
    TypeError,
    ValueError,
    IndexError,
    StopIteration,
    pa.ArrowException,
)
"""What translating a node of Polars' serialized predicate can raise: that node is left to
Polars (unexpected shapes of a tree whose format Polars does not promise included)."""


# --- literals ----------------------------------------------------------------------------------


def _zone(raw: Any) -> str | None:
    if raw is None or isinstance(raw, str):
        return raw or None
    if isinstance(raw, dict) and isinstance(raw.get("inner"), str):  # Polars 1.30+ / 2.x
        return str(raw["inner"]) or None
    raise _Untranslatable


def _literal(node: Any) -> Any:
    """A Python value or Arrow scalar of a Polars literal node (simple scalars only)."""
    if not isinstance(node, dict) or "Literal" not in node:
        raise _Untranslatable
    kind, body = next(iter(node["Literal"].items()))
    inner, value = next(iter(body.items()))
    if kind == "Dyn":  # a Python int, float or str not yet given a dtype
        if inner in ("Int", "Float", "Str"):
            return value
        raise _Untranslatable
    if kind != "Scalar":
        raise _Untranslatable
    if inner == "String" or inner == "Boolean":
        return value
    if inner.startswith(("Int", "UInt", "Float")) and isinstance(value, (int, float)):
        return value
    if inner == "Datetime":
        ticks, unit, zone = value
        if unit not in _UNITS:
            raise _Untranslatable
        return pa.scalar(ticks, pa.timestamp(_UNITS[unit], tz=_zone(zone)))
    if inner == "Date":
        return datetime.date(1970, 1, 1) + datetime.timedelta(days=value)
    if inner == "List":  # an ``is_in`` haystack: its values, as an Arrow IPC stream
        with pa.ipc.open_stream(pa.py_buffer(bytes(value))) as stream:
            values = stream.read_all()
        if values.num_columns != 1:
            raise _Untranslatable
        return values.column(0).combine_chunks()
    raise _Untranslatable


def _column(node: Any) -> str:
    if isinstance(node, dict) and isinstance(node.get("Column"), str):
        return str(node["Column"])
    raise _Untranslatable


# --- translation --------------------------------------------------------------------------------


class _Translator:
    """Polars expression trees (JSON) to Arrow expressions that prune soundly.

    In a positive context (under an even number of ``~``) every row the Polars predicate keeps
    must pass the translation; in a negative one, every row the Polars predicate rejects must
    fail it. So an ``&`` in a positive context (an ``|`` in a negative one) may drop a side it
    cannot translate; anything else untranslatable spoils its whole term."""

    def __init__(self, schema: pa.Schema) -> None:
        self.types = {f.name: f.type for f in schema}

    def _type(self, name: str) -> pa.DataType:
        if name not in self.types:
            raise _Untranslatable
        return self.types[name]

    def translate(self, node: Any, negated: bool = False) -> pc.Expression:
        if "Column" in node and pa.types.is_boolean(self._type(_column(node))):
            return pc.field(_column(node))  # filter(pl.col("flag"))
        if "BinaryExpr" in node:
            b = node["BinaryExpr"]
            op = b["op"]
            if op in ("And", "LogicalAnd", "Or", "LogicalOr"):
                conjunction = op in ("And", "LogicalAnd")
                return self._junction(b["left"], b["right"], conjunction, negated)
            if op in _COMPARISONS:
                try:
                    name, value = _column(b["left"]), _literal(b["right"])
                except _Untranslatable:
                    name, value, op = _column(b["right"]), _literal(b["left"]), _FLIPPED[op]
                return self._compare(name, op, value, negated)
            raise _Untranslatable
        if "Function" in node:
            f = node["Function"]
            fn, args = f["function"], f["input"]
            if fn == {"Boolean": "IsNull"}:
                return pc.field(_column(args[0])).is_null()
            if fn == {"Boolean": "IsNotNull"}:
                return pc.field(_column(args[0])).is_valid()
            if fn == {"Boolean": "Not"}:
                return ~self.translate(args[0], not negated)
            boolean = fn.get("Boolean") if isinstance(fn, dict) else None
            if isinstance(boolean, dict) and "IsBetween" in boolean:
                return self._between(args, boolean["IsBetween"]["closed"])
            if isinstance(boolean, dict) and "IsIn" in boolean:
                return self._is_in(args, bool(boolean["IsIn"].get("nulls_equal", False)))
        raise _Untranslatable

    def _junction(self, left: Any, right: Any, conjunction: bool, negated: bool) -> pc.Expression:
        droppable = conjunction != negated  # & positive, | negative: a side may go
        sides = []
        for side in (left, right):
            try:
                sides.append(self.translate(side, negated))
            except _NOT_TRANSLATED:
                if not droppable:
                    raise _Untranslatable from None
        if not sides:
            raise _Untranslatable
        if len(sides) == 1:
            return sides[0]
        return sides[0] & sides[1] if conjunction else sides[0] | sides[1]

    def _compare(self, name: str, op: str, value: Any, negated: bool) -> pc.Expression:
        column_type = self._type(name)
        self._check_literal(column_type, value)
        if pa.types.is_floating(column_type):
            if isinstance(value, float) and math.isnan(value):
                raise _Untranslatable  # NaN == NaN in Polars, never in Arrow
            if op in _NAN_ABOVE and not negated:
                raise _Untranslatable  # Polars keeps NaN rows, Arrow would drop them
        return getattr(pc.field(name), _COMPARISONS[op])(value)

    @staticmethod
    def _check_literal(column_type: pa.DataType, value: Any) -> None:
        """Refuse pairs Polars compares after a lossy cast (an integer column with a float
        literal is compared as float64 in Polars, exactly in CarbonLite) and pairs of
        different kinds (left to Polars to reject)."""
        numeric = pa.types.is_integer(column_type) or pa.types.is_floating(column_type)
        if isinstance(value, bool):
            ok = pa.types.is_boolean(column_type)
        elif isinstance(value, int):
            ok = numeric or pa.types.is_decimal(column_type)
        elif isinstance(value, float):
            ok = pa.types.is_floating(column_type)
        elif isinstance(value, str):
            ok = pa.types.is_string(column_type) or pa.types.is_large_string(column_type)
        elif isinstance(value, pa.TimestampScalar):
            ok = pa.types.is_timestamp(column_type) and (
                (column_type.tz is None) == (value.type.tz is None)
            )
        elif isinstance(value, datetime.date):
            ok = pa.types.is_date(column_type)
        else:
            ok = False
        if not ok:
            raise _Untranslatable

    def _between(self, args: list[Any], closed: str) -> pc.Expression:
        name = _column(args[0])
        low, high = _literal(args[1]), _literal(args[2])
        column_type = self._type(name)
        for bound in (low, high):
            self._check_literal(column_type, bound)
            if isinstance(bound, float) and math.isnan(bound):
                raise _Untranslatable
        # NaN is above both bounds in Polars and compares false in Arrow: either way the
        # row fails the upper bound, so the translation is exact on float columns too.
        column = pc.field(name)
        lower = column >= low if closed in ("Both", "Left") else column > low
        upper = column <= high if closed in ("Both", "Right") else column < high
        return lower & upper

    def _is_in(self, args: list[Any], nulls_equal: bool) -> pc.Expression:
        name = _column(args[0])
        column_type = self._type(name)
        if pa.types.is_floating(column_type):
            raise _Untranslatable  # NaN and -0.0 match differently
        values = _literal(args[1])
        if not isinstance(values, pa.Array):
            raise _Untranslatable
        members = values.cast(column_type).drop_null()  # a lossy cast raises: untranslated
        # Without a null member Arrow's is_in is false for a null row, where Polars gives
        # null (nulls_equal=False) or false: the same rows either way, and under ``~`` a
        # superset of Polars' rows. A null member matches null rows with nulls_equal=True.
        expression = pc.field(name).isin(members)
        if nulls_equal and values.null_count:
            expression = expression | pc.field(name).is_null()
        return expression


def _conjuncts(node: Any) -> Iterator[Any]:
    if "BinaryExpr" in node and node["BinaryExpr"]["op"] in ("And", "LogicalAnd"):
        yield from _conjuncts(node["BinaryExpr"]["left"])
        yield from _conjuncts(node["BinaryExpr"]["right"])
    else:
        yield node


def to_arrow_filter(predicate: Any, schema: pa.Schema) -> pc.Expression | None:
    """The part of a Polars predicate CarbonLite can prune with, as an Arrow expression that
    every row the predicate keeps passes; None when no part translates.

    Comparisons of a column with a literal, ``is_between``, ``is_in``, ``is_null``,
    ``is_not_null``, ``&``, ``|`` and ``~`` translate. Top-level ``&`` terms are translated
    and checked against ``schema`` one by one, so one untranslatable term drops only itself
    (as does an untranslatable side of a nested ``&``). Comparisons that NaN satisfies under
    Polars' rules and not Arrow's are left out on floating-point columns."""
    try:
        tree = json.loads(predicate.meta.serialize(format="json"))
    except Exception:  # a predicate Polars cannot serialize: prune nothing
        return None
    translator = _Translator(schema)
    terms = []
    for node in _conjuncts(tree):
        try:
            terms.append(translator.translate(node))
        except _NOT_TRANSLATED:
            continue  # an unexpected node shape: that term prunes nothing
    if _evaluable(_all_of(terms), schema):  # the usual case: one check for every term
        return _all_of(terms)
    return _all_of([term for term in terms if _evaluable(term, schema)])


def _all_of(terms: list[pc.Expression]) -> pc.Expression | None:
    if not terms:
        return None
    out = terms[0]
    for term in terms[1:]:
        out = out & term
    return out


def _evaluable(expression: pc.Expression | None, schema: pa.Schema) -> bool:
    """Whether Arrow can evaluate ``expression`` on the table's types (a Date literal against
    a timestamp column, say, is translated but refused here)."""
    if expression is None:
        return False
    try:
        check_filter(expression, schema, where="a Polars predicate")
    except CarbonLiteError:
        return False
    return True


# --- the source ----------------------------------------------------------------------------------


def scan(
    path: str | os.PathLike[str] | Table,
    *,
    version: VersionLike | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Any:
    """A ``polars.LazyFrame`` over the table at ``path`` (or a :class:`~carbonlite.Table`),
    at ``version`` (a number, a datetime or an ISO 8601 string; the latest by default), with
    projection, predicate, row-limit and batch-size pushdown::

        carbonlite.polars.scan(path).filter(pl.col("ts") >= start).select("id", "ts").collect()
    """
    pl = require("polars", "polars")
    from polars.io.plugins import register_io_source

    table = path if isinstance(path, Table) else open_table(path, storage_options=storage_options)
    number = table.snapshot().version if version is None else table.version_at(version)
    schema = table.snapshot(number).schema
    polars_schema = pl.from_arrow(schema.empty_table()).schema

    def source(
        with_columns: list[str] | None,
        predicate: Any,
        n_rows: int | None,
        batch_size: int | None,
    ) -> Iterator[Any]:
        if n_rows is not None and n_rows <= 0:
            return
        pruning = to_arrow_filter(predicate, schema) if predicate is not None else None
        needed = None
        if with_columns is not None:
            needed = list(with_columns)
            if predicate is not None:  # the exact filter reads its own columns
                needed += [c for c in predicate.meta.root_names() if c not in needed]
        left = n_rows
        batches = table.scan(columns=needed, filter=pruning, version=number).to_batches()
        try:
            for batch in batches:
                frame = pl.from_arrow(batch)
                if predicate is not None:
                    frame = frame.lazy().filter(predicate)
                    if with_columns is not None and needed != with_columns:
                        frame = frame.select(with_columns)
                    frame = frame.collect()
                for start in range(0, frame.height, batch_size or frame.height or 1):
                    chunk = frame.slice(start, batch_size) if batch_size else frame
                    if left is not None:
                        chunk = chunk.head(left)
                        left -= chunk.height
                    if chunk.height:
                        yield chunk
                    if left is not None and left <= 0:
                        return
        finally:
            batches.close()

    explain: dict[str, Any] = {
        "explain_name": "carbonlite",
        "explain_detail": f"{table.path} @ version {number}",
    }
    accepted = inspect.signature(register_io_source).parameters  # newer Polars only
    return register_io_source(
        io_source=source,
        schema=polars_schema,
        **{k: v for k, v in explain.items() if k in accepted},
    )
