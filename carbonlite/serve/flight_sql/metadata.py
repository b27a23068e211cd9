"""The answers to Flight SQL's metadata commands, in exactly the schemas FlightSql.proto
gives them (nullability included: the ADBC driver refuses a result whose schema differs).

``GetCatalogs`` (one: ``carbonlite``), ``GetDbSchemas`` (``main`` and one per directory
that holds tables, see ``naming.py``), ``GetTables`` (``include_schema``: the table's
schema, IPC-serialized), ``GetTableTypes`` (``TABLE``), ``GetPrimaryKeys`` (the key columns
of primary-key tables, in key order, the key unnamed; catalog, schema and table are exact
names, not patterns) and ``GetSqlInfo``. ``GetXdbcTypeInfo`` is ``xdbc.py``'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from carbonlite._version import __version__
from carbonlite.serve.flight_sql.naming import CATALOG, DEFAULT_SCHEMA
from carbonlite.serve.flight_sql.protocol import (
    CommandGetDbSchemas,
    CommandGetPrimaryKeys,
    CommandGetSqlInfo,
    CommandGetTables,
)

__all__ = [
    "CATALOGS_SCHEMA",
    "DB_SCHEMAS_SCHEMA",
    "PRIMARY_KEYS_SCHEMA",
    "SQL_INFO_SCHEMA",
    "TABLES_SCHEMA",
    "TABLES_WITH_SCHEMA_SCHEMA",
    "TABLE_TYPE",
    "TABLE_TYPES_SCHEMA",
    "SqlTable",
    "catalogs",
    "db_schemas",
    "primary_keys",
    "sql_info",
    "table_types",
    "tables",
]

TABLE_TYPE = "TABLE"

CATALOGS_SCHEMA = pa.schema([pa.field("catalog_name", pa.utf8(), nullable=False)])
DB_SCHEMAS_SCHEMA = pa.schema(
    [pa.field("catalog_name", pa.utf8()), pa.field("db_schema_name", pa.utf8(), nullable=False)]
)
TABLES_SCHEMA = pa.schema(
    [
        pa.field("catalog_name", pa.utf8()),
        pa.field("db_schema_name", pa.utf8()),
        pa.field("table_name", pa.utf8(), nullable=False),
        pa.field("table_type", pa.utf8(), nullable=False),
    ]
)
TABLES_WITH_SCHEMA_SCHEMA = TABLES_SCHEMA.append(
    pa.field("table_schema", pa.binary(), nullable=False)
)
TABLE_TYPES_SCHEMA = pa.schema([pa.field("table_type", pa.utf8(), nullable=False)])
PRIMARY_KEYS_SCHEMA = pa.schema(
    [
        pa.field("catalog_name", pa.utf8()),
        pa.field("db_schema_name", pa.utf8()),
        pa.field("table_name", pa.utf8(), nullable=False),
        pa.field("column_name", pa.utf8(), nullable=False),
        pa.field("key_name", pa.utf8()),
        pa.field("key_sequence", pa.int32(), nullable=False),
    ]
)

_INFO_VALUE = pa.dense_union(
    [
        pa.field("string_value", pa.utf8(), nullable=False),
        pa.field("bool_value", pa.bool_(), nullable=False),
        pa.field("bigint_value", pa.int64(), nullable=False),
        pa.field("int32_bitmask", pa.int32(), nullable=False),
        pa.field("string_list", pa.list_(pa.utf8()), nullable=False),
        pa.field(
            "int32_to_int32_list_map",
            pa.map_(pa.int32(), pa.list_(pa.int32())),
            nullable=False,
        ),
    ],
    type_codes=[0, 1, 2, 3, 4, 5],
)
SQL_INFO_SCHEMA = pa.schema(
    [
        pa.field("info_name", pa.uint32(), nullable=False),
        pa.field("value", _INFO_VALUE, nullable=False),
    ]
)

_STRING, _BOOL, _BIGINT, _INT32 = 0, 1, 2, 3


def _sql_info_values() -> dict[int, tuple[int, str | bool | int]]:
    """Code -> (union type code, value), after FlightSql.proto's ``SqlInfo``."""
    return {
        0: (_STRING, "CarbonLite"),  # FLIGHT_SQL_SERVER_NAME
        1: (_STRING, __version__),  # FLIGHT_SQL_SERVER_VERSION
        2: (_STRING, pa.__version__),  # FLIGHT_SQL_SERVER_ARROW_VERSION
        3: (_BOOL, True),  # FLIGHT_SQL_SERVER_READ_ONLY
        4: (_BOOL, True),  # FLIGHT_SQL_SERVER_SQL
        5: (_BOOL, False),  # FLIGHT_SQL_SERVER_SUBSTRAIT
        8: (_INT32, 0),  # FLIGHT_SQL_SERVER_TRANSACTION: none
        9: (_BOOL, False),  # FLIGHT_SQL_SERVER_CANCEL
        500: (_BOOL, False),  # SQL_DDL_CATALOG
        501: (_BOOL, False),  # SQL_DDL_SCHEMA
        502: (_BOOL, False),  # SQL_DDL_TABLE
        503: (_INT32, 1),  # SQL_IDENTIFIER_CASE: case-insensitive
        504: (_STRING, '"'),  # SQL_IDENTIFIER_QUOTE_CHAR
        505: (_INT32, 3),  # SQL_QUOTED_IDENTIFIER_CASE: case-insensitive (DuckDB)
        506: (_BOOL, True),  # SQL_ALL_TABLES_ARE_SELECTABLE
        529: (_STRING, "schema"),  # SQL_SCHEMA_TERM
        531: (_STRING, "catalog"),  # SQL_CATALOG_TERM
        563: (_BOOL, False),  # SQL_TRANSACTIONS_SUPPORTED
    }


@dataclass(frozen=True, slots=True)
class SqlTable:
    """A table as SQL names it, and its columns."""

    schema: str
    name: str
    arrow_schema: pa.Schema
    primary_key: tuple[str, ...] = ()
    """The key columns of a primary-key table, in key order (empty for other tables)."""


def _like(pattern: str | None) -> Callable[[str], bool]:
    """A matcher of SQL ``LIKE`` ``pattern`` (``%``, ``_``, ``\\`` escapes); None: all."""
    if pattern is None:
        return lambda _: True
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
        i += 1
    regex = re.compile("".join(out), re.S)
    return lambda name: regex.fullmatch(name) is not None


def _catalog_matches(catalog: str | None) -> bool:
    return catalog is None or catalog == CATALOG


def catalogs() -> pa.Table:
    return pa.table({"catalog_name": [CATALOG]}, schema=CATALOGS_SCHEMA)


def db_schemas(command: CommandGetDbSchemas, tables: Iterable[SqlTable]) -> pa.Table:
    matches = _like(command.db_schema_filter_pattern)
    names: list[str] = []
    if _catalog_matches(command.catalog):
        found = {DEFAULT_SCHEMA} | {t.schema for t in tables}
        names = sorted(n for n in found if matches(n))
    return pa.table(
        {"catalog_name": [CATALOG] * len(names), "db_schema_name": names},
        schema=DB_SCHEMAS_SCHEMA,
    )


def tables(command: CommandGetTables, found: Iterable[SqlTable]) -> pa.Table:
    schema_matches = _like(command.db_schema_filter_pattern)
    table_matches = _like(command.table_name_filter_pattern)
    typed = not command.table_types or TABLE_TYPE in command.table_types
    rows = []
    if _catalog_matches(command.catalog) and typed:
        rows = sorted(
            (t for t in found if schema_matches(t.schema) and table_matches(t.name)),
            key=lambda t: (t.schema, t.name),
        )
    columns: dict[str, list[object]] = {
        "catalog_name": [CATALOG] * len(rows),
        "db_schema_name": [t.schema for t in rows],
        "table_name": [t.name for t in rows],
        "table_type": [TABLE_TYPE] * len(rows),
    }
    if not command.include_schema:
        return pa.table(columns, schema=TABLES_SCHEMA)
    columns["table_schema"] = [t.arrow_schema.serialize().to_pybytes() for t in rows]
    return pa.table(columns, schema=TABLES_WITH_SCHEMA_SCHEMA)


def primary_keys(command: CommandGetPrimaryKeys, found: Iterable[SqlTable]) -> pa.Table:
    """The key columns of the tables ``command`` names (one row per column, in key order)."""
    rows: list[tuple[SqlTable, int, str]] = []
    if _catalog_matches(command.catalog):
        for t in sorted(found, key=lambda t: (t.schema, t.name)):
            if command.db_schema not in (None, t.schema) or command.table != t.name:
                continue
            rows.extend((t, i + 1, column) for i, column in enumerate(t.primary_key))
    return pa.table(
        {
            "catalog_name": [CATALOG] * len(rows),
            "db_schema_name": [t.schema for t, _, _ in rows],
            "table_name": [t.name for t, _, _ in rows],
            "column_name": [column for _, _, column in rows],
            "key_name": [None] * len(rows),
            "key_sequence": [i for _, i, _ in rows],
        },
        schema=PRIMARY_KEYS_SCHEMA,
    )


def table_types() -> pa.Table:
    return pa.table({"table_type": [TABLE_TYPE]}, schema=TABLE_TYPES_SCHEMA)


def sql_info(command: CommandGetSqlInfo) -> pa.Table:
    """The facts asked for (those the service knows; every one when none is asked for)."""
    known: Mapping[int, tuple[int, str | bool | int]] = _sql_info_values()
    codes = [c for c in command.info if c in known] if command.info else sorted(known)
    kinds = [known[c][0] for c in codes]
    values: dict[int, list[object]] = {kind: [] for kind in range(6)}
    offsets = []
    for code in codes:
        kind, value = known[code]
        offsets.append(len(values[kind]))
        values[kind].append(value)
    children = [
        pa.array(values[i], type=_INFO_VALUE.field(i).type) for i in range(_INFO_VALUE.num_fields)
    ]
    union = pa.Array.from_buffers(
        _INFO_VALUE,
        len(codes),
        [None, pa.array(kinds, pa.int8()).buffers()[1], pa.array(offsets, pa.int32()).buffers()[1]],
        children=children,
    )
    names = pa.array(codes, pa.uint32())
    return pa.Table.from_arrays([names, union], schema=SQL_INFO_SCHEMA)
