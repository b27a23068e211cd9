"""Queries that are a plain read of one table, served without the SQL engine.

``SELECT * FROM events`` or ``SELECT k, kind FROM sales.eu``: every row of one table, some or
all of its columns as they are. The service answers such a query with the endpoints of its own
read of that table (``FlightService``'s ``GetFlightInfo`` of the read command
``{"table": ..., "columns": [...]}``): one per split of committed blocklets plus the rows in
memory, read in parallel by the client, in the table's own Arrow types, at one version. Going
through DuckDB would convert every value to DuckDB's vectors and back, in one stream.

:func:`plain_read` finds such a query in DuckDB's own parse tree (``json_serialize_sql``), so
what counts as one is what DuckDB reads: one ``SELECT`` with no ``WHERE``, grouping,
ordering, ``LIMIT``, ``DISTINCT``, sample, CTE or window, a base table without time travel,
and a select list of ``*`` (no ``EXCLUDE``/``REPLACE``/``COLUMNS``) or bare column names, each
at most once and not renamed. Anything else is the engine's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from carbonlite.serve.flight_sql.naming import sql_names
from carbonlite.serve.flight_sql.references import TableRef, schemas_of

__all__ = ["PlainRead", "plain_read", "read_columns", "served_table"]


@dataclass(frozen=True, slots=True)
class PlainRead:
    """One table's rows, as the query names them."""

    schema: str | None
    """The database schema the query names (None: not named)."""
    table: str
    columns: tuple[str, ...] | None
    """The columns in the query's order (None: ``*``, every column)."""


_EMPTY: tuple[object, ...] = (None, [], {}, "")


def _bare_select(node: dict[str, Any]) -> bool:
    if node.get("type") != "SELECT_NODE" or node.get("modifiers"):
        return False
    if node.get("cte_map", {}).get("map"):
        return False
    for key in ("where_clause", "having", "sample", "qualify"):
        if node.get(key) not in _EMPTY:
            return False
    if node.get("group_expressions") or node.get("group_sets"):
        return False
    return node.get("aggregate_handling", "STANDARD_HANDLING") == "STANDARD_HANDLING"


def _base_table(ref: Any) -> tuple[str | None, str] | None:
    if not isinstance(ref, dict) or ref.get("type") != "BASE_TABLE":
        return None
    if ref.get("sample") or ref.get("at_clause") or ref.get("column_name_alias"):
        return None
    if ref.get("catalog_name") not in ("", None, "carbonlite"):
        return None
    table = str(ref["table_name"])
    if "/" in table:  # a file's path (DuckDB reads 'x.csv' as a table): never a table's name
        return None
    return ref.get("schema_name") or None, table


def _column(item: dict[str, Any], alias: str | None) -> str | None:
    """The column a select-list item names, bare; None for anything else."""
    if item.get("class") != "COLUMN_REF" or item.get("type") != "COLUMN_REF":
        return None
    names = item.get("column_names") or []
    if not names or (len(names) == 2 and names[0] != alias) or len(names) > 2:
        return None
    name = str(names[-1])
    if item.get("alias") not in ("", None, name):
        return None
    return name


def _star(item: dict[str, Any], alias: str | None) -> bool:
    if item.get("class") != "STAR" or item.get("columns"):
        return False
    if item.get("exclude_list") or item.get("replace_list") or item.get("rename_list"):
        return False
    if item.get("expr") not in _EMPTY or item.get("alias") not in ("", None):
        return False
    return item.get("relation_name") in ("", None, alias)


def plain_read(tree: dict[str, Any] | None) -> PlainRead | None:
    """A query (its ``references.syntax_tree``) as a plain read of one table (see the module
    doc), or None."""
    statements = [] if tree is None else tree.get("statements", [])
    if len(statements) != 1 or not isinstance(statements[0].get("node"), dict):
        return None
    node = statements[0]["node"]
    if not _bare_select(node):
        return None
    found = _base_table(node.get("from_table"))
    if found is None:
        return None
    alias = node["from_table"].get("alias") or found[1]
    items = node.get("select_list") or []
    if len(items) == 1 and _star(items[0], alias):
        return PlainRead(found[0], found[1], None)
    columns = [_column(item, alias) for item in items]
    if not columns or any(c is None for c in columns):
        return None
    named = [c for c in columns if c is not None]
    if len({c.lower() for c in named}) != len(named):
        return None  # a column twice: the engine names the copies
    return PlainRead(found[0], found[1], tuple(named))


def read_columns(wanted: Sequence[str] | None, names: Sequence[str]) -> list[str] | None:
    """The table's own names of the ``wanted`` columns (SQL's are case-insensitive: an exact
    name first, else the one name that differs only in case); None when one is not there."""
    if wanted is None:
        return list(names)
    out = []
    for want in wanted:
        if want in names:
            out.append(want)
            continue
        folded = [n for n in names if n.lower() == want.lower()]
        if len(folded) != 1:
            return None
        out.append(folded[0])
    return out


def served_table(read: PlainRead, names: Iterable[str]) -> str | None:
    """The service table (of ``names``) ``read`` names, as SQL resolves it (case-insensitive,
    ``main`` for none, a catalog-qualified one too); None when none or more than one is."""
    schemas = schemas_of(TableRef(read.schema, read.table))
    found = [
        name
        for name, (schema, table) in sql_names(names).items()
        if table.lower() == read.table.lower() and schema.lower() in schemas
    ]
    return found[0] if len(found) == 1 else None
