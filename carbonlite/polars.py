"""Polars reads CarbonLite tables lazily: ``carbonlite.polars.scan(path)`` is a LazyFrame.

It is a Polars IO source (``polars.io.plugins.register_io_source``): Polars hands it the
columns a query needs, its filter and a row limit, and it

- decodes only those columns (plus the ones the filter reads);
- translates what it can of the filter (comparisons of a column with a literal, ``is_in``,
  ``is_between``, ``is_null``/``is_not_null``, ``&``, ``|``, ``~``) into CarbonLite's
  filter, so whole blocklets are skipped by their min/max statistics; the parts it cannot
  translate prune nothing, and the exact Polars filter is applied to every batch anyway;
- stops reading once the row limit is reached;
- yields one DataFrame per blocklet batch: the table is never read whole into memory.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.arguments import VersionLike
from carbonlite.optional import require
from carbonlite.table import Table, open_table

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


class _Untranslatable(Exception):
    pass


def _literal(node: Any) -> Any:
    """A Python value of a Polars literal node (simple scalars only)."""
    if not isinstance(node, dict) or "Literal" not in node:
        raise _Untranslatable
    lit = node["Literal"]
    kind, body = next(iter(lit.items()))
    if kind == "Dyn":  # a Python int/float/str literal not yet given a dtype
        inner, value = next(iter(body.items()))
        if inner in ("Int", "Float", "Str"):
            return value
        raise _Untranslatable
    if kind == "Scalar":
        inner, value = next(iter(body.items()))
        if inner in ("String", "Boolean") or inner.startswith(("Int", "UInt", "Float")):
            return value
        if inner == "Datetime":
            ticks, unit, zone = value
            if unit not in _UNITS:
                raise _Untranslatable
            return pa.scalar(ticks, pa.timestamp(_UNITS[unit], tz=zone or None))
        if inner == "Date":
            return datetime.date(1970, 1, 1) + datetime.timedelta(days=value)
    raise _Untranslatable


def _column(node: Any) -> str:
    if isinstance(node, dict) and isinstance(node.get("Column"), str):
        return str(node["Column"])
    raise _Untranslatable


_NAN_MATCHES = {"Gt", "GtEq", "NotEq"}
"""Comparisons NaN satisfies in Polars (NaN sorts above every number and equals itself) but
not in Arrow, whose comparisons with NaN are false: never translated on float columns."""


def _translate(node: Any, floats: frozenset[str], negated: bool = False) -> pc.Expression:
    if "BinaryExpr" in node:
        b = node["BinaryExpr"]
        op = b["op"]
        if op in ("And", "LogicalAnd"):
            return _translate(b["left"], floats, negated) & _translate(b["right"], floats, negated)
        if op in ("Or", "LogicalOr"):
            return _translate(b["left"], floats, negated) | _translate(b["right"], floats, negated)
        if op in _COMPARISONS:
            try:
                name, value = _column(b["left"]), _literal(b["right"])
            except _Untranslatable:
                name, value, op = _column(b["right"]), _literal(b["left"]), _FLIPPED[op]
            if name in floats and ((op in _NAN_MATCHES) != negated or op == "Eq"):
                raise _Untranslatable  # Eq: NaN == NaN in Polars, and a literal may be NaN
            return getattr(pc.field(name), _COMPARISONS[op])(value)
        raise _Untranslatable
    if "Function" in node:
        f = node["Function"]
        fn, args = f["function"], f["input"]
        if fn == {"Boolean": "IsNull"}:
            return pc.field(_column(args[0])).is_null()
        if fn == {"Boolean": "IsNotNull"}:
            return pc.field(_column(args[0])).is_valid()
        if fn == {"Boolean": "Not"}:
            return ~_translate(args[0], floats, not negated)
        if isinstance(fn, dict) and isinstance(fn.get("Boolean"), dict):
            (name,) = fn["Boolean"]
            if name == "IsBetween":
                closed = fn["Boolean"][name]["closed"]
                if _column(args[0]) in floats:
                    raise _Untranslatable
                column = pc.field(_column(args[0]))
                low, high = _literal(args[1]), _literal(args[2])
                lower = column >= low if closed in ("Both", "Left") else column > low
                upper = column <= high if closed in ("Both", "Right") else column < high
                return lower & upper
        raise _Untranslatable
    raise _Untranslatable


def _conjuncts(node: Any) -> Iterator[Any]:
    if "BinaryExpr" in node and node["BinaryExpr"]["op"] in ("And", "LogicalAnd"):
        yield from _conjuncts(node["BinaryExpr"]["left"])
        yield from _conjuncts(node["BinaryExpr"]["right"])
    else:
        yield node


def to_arrow_filter(predicate: Any, schema: pa.Schema | None = None) -> pc.Expression | None:
    """The part of a Polars predicate CarbonLite can prune with, as an Arrow expression
    implied by it (every row the predicate keeps passes it); None when no part translates.
    Top-level ``&`` terms are translated one by one, so one untranslatable term drops only
    itself. Comparisons on ``schema``'s floating-point columns that NaN could satisfy under
    Polars' rules are left out."""
    floats = frozenset(f.name for f in (schema or ()) if pa.types.is_floating(f.type))
    try:
        tree = json.loads(predicate.meta.serialize(format="json"))
    except Exception:  # a predicate Polars cannot serialize: prune nothing
        return None
    terms = []
    for term in _conjuncts(tree):
        try:
            terms.append(_translate(term, floats))
        except (_Untranslatable, KeyError, TypeError, ValueError, IndexError):
            continue
    if not terms:
        return None
    out = terms[0]
    for term in terms[1:]:
        out = out & term
    return out


def _schema(table: Table, version: int) -> Any:
    pl = require("polars", "polars")
    empty = table.snapshot(version).schema.empty_table()
    return pl.from_arrow(empty).schema


def scan(
    path: str | os.PathLike[str] | Table,
    *,
    version: VersionLike | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Any:
    """A ``polars.LazyFrame`` over the table at ``path`` (at ``version``: a number or a
    datetime; the latest by default) with projection, predicate and row-limit pushdown."""
    pl = require("polars", "polars")
    from polars.io.plugins import register_io_source

    table = path if isinstance(path, Table) else open_table(path, storage_options=storage_options)
    number = table.version if version is None else table.version_at(version)
    schema = table.snapshot(number).schema

    def source(
        with_columns: list[str] | None,
        predicate: Any,
        n_rows: int | None,
        batch_size: int | None,
    ) -> Iterator[Any]:
        pruning = to_arrow_filter(predicate, schema) if predicate is not None else None
        needed = None
        if with_columns is not None:
            needed = list(with_columns)
            if predicate is not None:  # the exact filter reads its own columns
                needed += [c for c in predicate.meta.root_names() if c not in needed]
        left = n_rows
        reader = table.scan(columns=needed, filter=pruning, version=number).to_reader()
        try:
            for batch in reader:
                frame = pl.from_arrow(batch)
                assert isinstance(frame, pl.DataFrame)
                if predicate is not None:
                    frame = frame.filter(predicate)
                if with_columns is not None:
                    frame = frame.select(with_columns)
                if left is not None:
                    frame = frame.head(left)
                    left -= frame.height
                if frame.height:
                    yield frame
                if left is not None and left <= 0:
                    return
        finally:
            reader.close()

    return register_io_source(
        io_source=source,
        schema=_schema(table, number),
        explain_name="carbonlite",
        explain_detail=f"{table.path} @ version {number}",
    )
