"""Which tables a query reads, and the past versions it asks for (time travel).

**Time travel.** A table name with a suffix reads a past version of it, committed rows only
(acknowledged rows still in memory belong to the latest version), written as one quoted
identifier, in any schema, wherever a table may stand::

    SELECT count(*) FROM "events@v3"                      -- version 3
    SELECT * FROM sales."eu@2026-11-29T10:00:00Z"         -- the latest version committed
                                                          -- at or before that time
    SELECT * FROM carbonlite.main."events@v3" AS e JOIN events USING (k)

``@v<N>`` (or ``@V<N>``) names version N; anything else after the last ``@`` must be an ISO
8601 time (a zone, or ``Z``; none: UTC), as ``Table.snapshot`` reads it. A table whose
own name holds ``@`` is read as itself. The version is found when the query is planned
(GetFlightInfo) and fixed in its signed ticket, like every table's; a version the table
does not have (never committed, or removed by ``clean``), or a time before its oldest
version, is refused (``INVALID_ARGUMENT``).

**What a query reads.** :func:`table_references` asks DuckDB's parser for the query's
syntax tree (``json_serialize_sql``: no binding, parameters allowed) and collects every
table reference, subqueries and common table expressions included, and the names the
query's own ``WITH`` clauses define (a name both may mean registers the table). The sandbox registers only the tables named so
(:func:`chosen_tables`), and every table when it cannot tell: a table function
(``query_table``, ``duckdb_tables()``), ``SHOW``, a system schema (``information_schema``,
``pg_catalog``), a name that is no table of the service, or a tree it cannot read (the
past versions named are registered too, but for the last).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from carbonlite.errors import CarbonLiteError
from carbonlite.serve.flight_sql.naming import CATALOG, DEFAULT_SCHEMA
from carbonlite.serve.wire import BadRequestError
from carbonlite.table import Table

__all__ = [
    "Chosen",
    "TableRef",
    "TableRefs",
    "chosen_tables",
    "past_version",
    "schemas_of",
    "syntax_tree",
    "table_references",
]

_UNKNOWN_KINDS = frozenset({"TABLE_FUNCTION", "SHOW_REF"})
_SYSTEM_SCHEMAS = frozenset({"information_schema", "pg_catalog"})
_VERSION = re.compile(r"[vV](\d+)")


@dataclass(frozen=True, slots=True)
class TableRef:
    """A table as a query names it: its schema (None: not given) and name, as written."""

    schema: str | None
    name: str


@dataclass(frozen=True, slots=True)
class TableRefs:
    """The tables a query names, and the names its ``WITH`` clauses define."""

    names: frozenset[TableRef]
    ctes: frozenset[str]
    """In lower case."""
    complete: bool
    """False when the query may read tables it does not name (a table function, ``SHOW``, a
    system schema)."""


def _nodes(tree: Any) -> Iterator[dict[str, Any]]:
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def syntax_tree(con: Any, query: str) -> dict[str, Any] | None:
    """``query``'s syntax tree by DuckDB connection ``con``'s parser (``json_serialize_sql``:
    no binding, parameters allowed); None when it cannot be read."""
    try:
        [(text,)] = con.execute("SELECT json_serialize_sql(?)", [query]).fetchall()
        tree = json.loads(text)
    except Exception:  # any failure of the parser: the caller assumes nothing
        return None
    if not isinstance(tree, dict) or tree.get("error"):
        return None
    return tree


def table_references(tree: dict[str, Any] | None) -> TableRefs | None:
    """The tables a query (its :func:`syntax_tree`) names; None when the tree is None
    (every table is registered)."""
    if tree is None:
        return None
    refs: set[TableRef] = set()
    ctes: set[str] = set()
    complete = True
    for node in _nodes(tree):
        kind = node.get("type")
        complete = complete and kind not in _UNKNOWN_KINDS
        if kind == "BASE_TABLE":
            schema = node.get("schema_name") or None
            if schema is not None and schema.lower() in _SYSTEM_SCHEMAS:
                complete = False
                continue
            refs.add(TableRef(schema, str(node.get("table_name", ""))))
        cte_map = node.get("cte_map")
        if isinstance(cte_map, dict):
            ctes.update(str(entry.get("key", "")).lower() for entry in cte_map.get("map", []))
    return TableRefs(frozenset(refs), frozenset(ctes), complete)


@dataclass(frozen=True, slots=True)
class Chosen:
    """The tables a query's sandbox registers."""

    names: list[str]
    """Service table names."""
    past: dict[str, tuple[str, str]]
    """``"<service name>@<suffix>"`` (the name SQL reads, in the table's schema) ->
    (service name, suffix), for each table read at a past version."""


def schemas_of(ref: TableRef) -> set[str]:
    """The schemas a reference may read (lower case): a two-part name's first part may be
    the catalog."""
    if ref.schema is None:
        return {DEFAULT_SCHEMA}
    schema = ref.schema.lower()
    return {schema, DEFAULT_SCHEMA} if schema == CATALOG else {schema}


def chosen_tables(refs: TableRefs | None, sql_names: Mapping[str, tuple[str, str]]) -> Chosen:
    """What to register for a query naming ``refs``, of the service's tables
    (``sql_names``: service name -> SQL schema and table): each table a reference may mean
    (by its name: a superset), and the past versions asked for; every table when ``refs``
    is None or not complete, or names one that is not the service's."""
    if refs is None:
        return Chosen(sorted(sql_names), {})
    by_name: dict[str, list[str]] = {}
    for service_name, (_, table) in sql_names.items():
        by_name.setdefault(table.lower(), []).append(service_name)
    names: set[str] = set()
    past: dict[str, tuple[str, str]] = {}
    every = not refs.complete
    for ref in refs.names:
        if ref.name.lower() in by_name:
            names.update(by_name[ref.name.lower()])
            continue
        if ref.schema is None and ref.name.lower() in refs.ctes:
            continue  # the query's own
        base, at, suffix = ref.name.rpartition("@")
        if not at or not base or base.lower() not in by_name:
            every = True  # a system view or a missing table: DuckDB says which
            continue
        schemas = schemas_of(ref)
        for service_name in by_name[base.lower()]:
            schema = sql_names[service_name][0]
            if schema.lower() in schemas:
                past[f"{service_name}@{suffix}"] = (service_name, suffix)
    return Chosen(sorted(sql_names) if every else sorted(names), past)


def past_version(table: Table, suffix: str, name: str) -> int:
    """The version ``"<name>@<suffix>"`` reads of ``table``; :class:`BadRequestError` saying
    why not when it has none."""
    match = _VERSION.fullmatch(suffix)
    try:
        if match is not None:
            return table.snapshot(int(match.group(1))).version
        return table.version_at(suffix)
    except CarbonLiteError as exc:
        raise BadRequestError(
            f"{name}@{suffix!s}: no such version of table {name!r} ({exc}). Read a past "
            'version as "<table>@v<N>" or "<table>@<ISO 8601 time>", e.g. '
            f'"{name.rpartition("/")[2]}@v0"'
        ) from None
