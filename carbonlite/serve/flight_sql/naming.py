"""How the service's tables are named in SQL.

One catalog, ``carbonlite``. A table's service name is a ``/``-separated path (``events``,
``sales/eu``): its last part is the SQL table, the parts before it, joined with ``/``, its
database schema (``sales.eu``; ``"a/b".c`` for ``a/b/c``), and a top-level table is in the
schema ``main`` (``events``, ``main.events``). When a nested table's SQL name is a top-level
one's too (``main/events`` beside ``events``), the top-level table keeps it and the nested
one is not reachable by SQL. A past version of a table is read by a suffix of its SQL name,
``"events@v3"`` or ``sales."eu@2026-11-29T10:00:00Z"`` (see ``references.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CATALOG", "DEFAULT_SCHEMA", "quoted", "sql_names"]

CATALOG = "carbonlite"
DEFAULT_SCHEMA = "main"


def _sql_name(name: str) -> tuple[str, str]:
    schema, _, table = name.rpartition("/")
    return schema or DEFAULT_SCHEMA, table


def sql_names(names: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Each service table name's ``(schema, table)`` in SQL, leaving out the names a
    top-level table (or an earlier name) already has."""
    ordered = sorted(names, key=lambda n: ("/" in n, n))
    taken: set[tuple[str, str]] = set()
    out: dict[str, tuple[str, str]] = {}
    for name in ordered:
        sql = _sql_name(name)
        key = (sql[0].lower(), sql[1].lower())  # SQL names are case-insensitive
        if key in taken:
            continue
        taken.add(key)
        out[name] = sql
    return out


def quoted(identifier: str) -> str:
    """``identifier`` as a quoted SQL identifier."""
    return '"' + identifier.replace('"', '""') + '"'
