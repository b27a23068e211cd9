"""CarbonLite tables as Spark catalog tables: ``SELECT``, ``INSERT INTO``, ``writeTo`` and
``toTable`` by name.

Spark 4.3 hands a Python data source a catalog table's ``LOCATION`` only while the table is
created (``CREATE TABLE``); when the table is later read or written, the source gets no
options at all. So a plain ``CREATE TABLE t USING carbonlite LOCATION '...'`` would leave an
entry nothing can read. :func:`register_table` instead registers a data source bound to the
table's path (a subclass of the ``carbonlite`` source whose name is derived from the path), and
creates the catalog entry with it: every route Spark resolves by table name then reaches the
right table. ``CREATE TABLE ... USING carbonlite`` is refused with a message saying so (see
``CarbonLiteDataSource.schema``).

The catalog entry survives the session only with a persistent (Hive) metastore; the bound
source does not. Call :func:`register_table` again in every new session, with the same path:
the source's name is the same, so the existing entry is used again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from carbonlite.create import create_table, open_table
from carbonlite.errors import InvalidOptionError, TableExistsError, TableNotFoundError
from carbonlite.spark.datasource import CarbonLiteDataSource
from carbonlite.spark.types import spark_schema

__all__ = [
    "bound_here",
    "bound_source_name",
    "bound_table",
    "is_carbonlite_table",
    "register_table",
]

_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`")
_PROVIDER = re.compile(r"^Provider: (\S+)$", re.MULTILINE)

_BOUND: dict[str, tuple[str, dict[str, Any]]] = {}
"""The tables :func:`register_table` bound in this process: source name (lower case) ->
(table path, storage options)."""


def bound_source_name(uri: str) -> str:
    """The data source name bound to the table at ``uri`` (the same in every session)."""
    return "carbonlite_" + hashlib.sha256(uri.encode("utf-8")).hexdigest()[:16]


def _identifier(name: str) -> list[str]:
    """``name`` (``t``, ``db.t``, ``cat.db.t``, parts optionally in backquotes) checked as a
    Spark multi-part identifier: its parts, each backquoted."""
    parts = []
    rest = name
    while True:
        match = _PART.match(rest)
        if match is None:
            break
        part = match.group()
        parts.append(part if part.startswith("`") else f"`{part}`")
        rest = rest[match.end() :]
        if not rest.startswith("."):
            break
        rest = rest[1:]
    if rest or not parts or len(parts) > 3:
        raise InvalidOptionError(
            f"table name {name!r} is not a Spark table identifier: give 't', 'db.t' or "
            "'catalog.db.t', each part letters, digits and '_' (or quoted in backquotes)"
        )
    return parts


def _bound_source(uri: str, storage_options: Mapping[str, Any]) -> type[CarbonLiteDataSource]:
    source_name = bound_source_name(uri)
    return type(
        "BoundCarbonLiteDataSource",
        (CarbonLiteDataSource,),
        {
            "bound_path": uri,
            "bound_storage_options": json.dumps(dict(storage_options), sort_keys=True),
            "name": classmethod(lambda cls: source_name),
            "__module__": __name__,
        },
    )


def _provider_of(spark: Any, parts: list[str]) -> str | None:
    """The data source of an existing catalog table (``SHOW CREATE TABLE`` leaves it out for
    the tables of Python sources; ``SHOW TABLE EXTENDED`` says it)."""
    where = f" IN {'.'.join(parts[:-1])}" if len(parts) > 1 else ""
    pattern = parts[-1][1:-1].replace("``", "`").replace("'", "\\'")
    rows = spark.sql(f"SHOW TABLE EXTENDED{where} LIKE '{pattern}'").collect()
    for row in rows:
        match = _PROVIDER.search(row["information"])
        if match:
            return str(match.group(1))
    return None


def register_table(
    spark: Any,
    name: str,
    path: str | os.PathLike[str],
    *,
    schema: pa.Schema | None = None,
    sort_columns: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> str:
    """Make the CarbonLite table at ``path`` the Spark table ``name`` (``t`` or ``db.t``), so
    ``spark.table(name)``, ``SELECT ... FROM name``, ``INSERT INTO``/``INSERT OVERWRITE``,
    ``df.writeTo(name).append()``, ``readStream.table(name)`` and
    ``writeStream.toTable(name)`` reach it. Returns the bound data source's name.

    The table is created first when it does not exist and ``schema`` is given (with
    ``sort_columns`` and ``properties``); otherwise it must exist (:class:`TableNotFoundError`).
    An existing catalog entry of that name is reused when it is bound to the same path, and
    refused with :class:`TableExistsError` when it is anything else. Call it again in each
    new session (see the module's notes).
    """
    parts = _identifier(name)
    identifier = ".".join(parts)
    options = dict(storage_options or {})
    try:
        table = open_table(path, storage_options=options or None)
    except TableNotFoundError:
        if schema is None:
            raise TableNotFoundError(
                f"no CarbonLite table at {os.fspath(path)!r} to register as {name!r}: create it "
                "first, or pass schema= (and sort_columns=, properties=) to create it here"
            ) from None
        table = create_table(
            path,
            schema,
            sort_columns=sort_columns,
            properties=properties,
            storage_options=options or None,
        )
    source = _bound_source(table.path, options)
    provider = source.name()
    spark.dataSource.register(source)
    _BOUND[provider.lower()] = (table.path, options)
    if spark.catalog.tableExists(name):
        found = _provider_of(spark, parts)
        if found is None or found.lower() != provider.lower():
            raise TableExistsError(
                f"Spark already has a table {name!r} (provider {found!r}) that is not the "
                f"CarbonLite table at {table.path!r}; DROP TABLE it first (DROP TABLE never "
                "deletes a CarbonLite table's data) or choose another name"
            )
        # the catalog entry's own schema (spark.table reads the table itself: patches.py)
        if spark.sql(f"SELECT * FROM {identifier}").schema == spark_schema(table.schema):
            return provider
        # the catalog keeps the schema it was created with: after a schema change, renew it
        spark.sql(f"DROP TABLE {identifier}")
    spark.sql(f"CREATE TABLE {identifier} USING {provider}")
    return provider


def bound_table(spark: Any, name: str) -> tuple[str, dict[str, Any]]:
    """The path and storage options of the CarbonLite table registered as the Spark table
    ``name`` (by :func:`register_table`, in this session)."""
    parts = _identifier(name)
    if not spark.catalog.tableExists(name):
        raise TableNotFoundError(
            f"Spark has no table {name!r}; register the CarbonLite table first: "
            f"carbonlite.spark.register_table(spark, {name!r}, '/path/to/table')"
        )
    provider = (_provider_of(spark, parts) or "").lower()
    if provider in _BOUND:
        path, options = _BOUND[provider]
        return path, dict(options)
    if provider.startswith("carbonlite_"):
        raise TableNotFoundError(
            f"the Spark table {name!r} is a CarbonLite table registered in another session; "
            "call carbonlite.spark.register_table(spark, name, path) again in this one"
        )
    raise TableNotFoundError(
        f"the Spark table {name!r} is not a CarbonLite table (its provider is "
        f"{provider or 'unknown'!r}); CarbonTable.forName takes tables registered with "
        "carbonlite.spark.register_table"
    )


def bound_here(spark: Any, name: str) -> tuple[str, dict[str, Any]] | None:
    """The path and storage options of the Spark table ``name`` when it is a CarbonLite table
    :func:`register_table` bound in this process; None for any other table or name (asked
    of Spark's catalog only once some table was bound, so other reads pay nothing)."""
    if not _BOUND:
        return None
    bound = _BOUND.get(_existing_provider(spark, name) or "")
    return None if bound is None else (bound[0], dict(bound[1]))


def is_carbonlite_table(spark: Any, name: str) -> bool:
    """Whether the Spark table ``name`` is a CarbonLite table registered by
    :func:`register_table` (in this session or another)."""
    return (_existing_provider(spark, name) or "").startswith("carbonlite_")


def _existing_provider(spark: Any, name: str) -> str | None:
    """The data source (lower case) of the existing Spark table ``name``; None when ``name``
    is no table identifier or names no table."""
    try:
        parts = _identifier(name)
    except InvalidOptionError:
        return None
    if not spark.catalog.tableExists(name):
        return None
    return (_provider_of(spark, parts) or "").lower()
