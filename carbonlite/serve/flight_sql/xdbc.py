"""The answer to Flight SQL's ``GetXdbcTypeInfo``: one row per SQL type the engine gives
the service's columns, in exactly the schema FlightSql.proto gives it.

DuckDB reads a CarbonLite column as one of these types (parameterized ones by their base
name: ``DECIMAL(10,2)`` is ``DECIMAL``, ``INTEGER[]`` a ``LIST``, ``INTEGER[3]`` an
``ARRAY``): the integers signed and unsigned, ``FLOAT``, ``DOUBLE``, ``DECIMAL``,
``BOOLEAN``, ``VARCHAR``, ``BLOB``, ``DATE``, ``TIME`` (``TIME_NS``), ``TIMESTAMP`` in its
four units and two with a time zone, ``INTERVAL`` (durations), ``NULL`` and the nested
``LIST``, ``ARRAY``, ``MAP`` and ``STRUCT``. The codes are XDBC's (JDBC's and ODBC's):
``BOOLEAN`` is ``BIT``, a nested type ``XDBC_UNKNOWN_TYPE``. Rows are ordered by
``data_type``, then ``type_name``, as the spec asks.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from carbonlite.serve.flight_sql.protocol import CommandGetXdbcTypeInfo

__all__ = ["XDBC_TYPE_INFO_SCHEMA", "SqlType", "sql_types", "xdbc_type_info"]

XDBC_TYPE_INFO_SCHEMA = pa.schema(
    [
        pa.field("type_name", pa.utf8(), nullable=False),
        pa.field("data_type", pa.int32(), nullable=False),
        pa.field("column_size", pa.int32()),
        pa.field("literal_prefix", pa.utf8()),
        pa.field("literal_suffix", pa.utf8()),
        pa.field("create_params", pa.list_(pa.field("item", pa.utf8(), nullable=False))),
        pa.field("nullable", pa.int32(), nullable=False),
        pa.field("case_sensitive", pa.bool_(), nullable=False),
        pa.field("searchable", pa.int32(), nullable=False),
        pa.field("unsigned_attribute", pa.bool_()),
        pa.field("fixed_prec_scale", pa.bool_(), nullable=False),
        pa.field("auto_increment", pa.bool_()),
        pa.field("local_type_name", pa.utf8()),
        pa.field("minimum_scale", pa.int32()),
        pa.field("maximum_scale", pa.int32()),
        pa.field("sql_data_type", pa.int32(), nullable=False),
        pa.field("datetime_subcode", pa.int32()),
        pa.field("num_prec_radix", pa.int32()),
        pa.field("interval_precision", pa.int32()),
    ]
)

# XdbcDataType
_UNKNOWN, _DECIMAL, _INTEGER, _SMALLINT, _REAL, _DOUBLE = 0, 3, 4, 5, 7, 8
_DATETIME, _INTERVAL, _VARCHAR, _DATE, _TIME, _TIMESTAMP = 9, 10, 12, 91, 92, 93
_VARBINARY, _BIGINT, _TINYINT, _BIT = -3, -5, -6, -7
# XdbcDatetimeSubcode, Nullable, Searchable
_SUB_DATE, _SUB_TIME, _SUB_TIMESTAMP, _SUB_TIMESTAMP_TZ = 1, 2, 3, 5
_NULLABLE = 1
_SEARCH_BASIC, _SEARCH_FULL = 2, 3


@dataclass(frozen=True, slots=True)
class SqlType:
    """One row of the answer (the columns that vary; the rest follow from them)."""

    name: str
    code: int
    size: int | None = None
    """Digits (exact numbers), bits (approximate ones) or characters (dates and times)."""
    prefix: str | None = None
    suffix: str | None = None
    unsigned: bool | None = None
    """None: not a number."""
    radix: int | None = None
    scales: tuple[int, int] | None = None
    subcode: int | None = None
    """For dates, times and intervals: their XDBC subcode (the SQL data type is then the
    generic ``DATETIME`` or ``INTERVAL``)."""

    @property
    def sql_data_type(self) -> int:
        if self.code in (_DATE, _TIME, _TIMESTAMP):
            return _DATETIME
        return self.code


def _integer(name: str, code: int, digits: int, *, unsigned: bool) -> SqlType:
    return SqlType(name, code, digits, unsigned=unsigned, radix=10, scales=(0, 0))


def _moment(name: str, code: int, chars: int, keyword: str, subcode: int) -> SqlType:
    return SqlType(name, code, chars, f"{keyword} '", "'", subcode=subcode)


def sql_types() -> list[SqlType]:
    """Every SQL type the engine gives a CarbonLite column, in the answer's order."""
    types = [
        _integer("TINYINT", _TINYINT, 3, unsigned=False),
        _integer("UTINYINT", _TINYINT, 3, unsigned=True),
        _integer("SMALLINT", _SMALLINT, 5, unsigned=False),
        _integer("USMALLINT", _SMALLINT, 5, unsigned=True),
        _integer("INTEGER", _INTEGER, 10, unsigned=False),
        _integer("UINTEGER", _INTEGER, 10, unsigned=True),
        _integer("BIGINT", _BIGINT, 19, unsigned=False),
        _integer("UBIGINT", _BIGINT, 20, unsigned=True),
        SqlType("FLOAT", _REAL, 24, unsigned=False, radix=2),
        SqlType("DOUBLE", _DOUBLE, 53, unsigned=False, radix=2),
        SqlType("DECIMAL", _DECIMAL, 38, unsigned=False, radix=10, scales=(0, 38)),
        SqlType("BOOLEAN", _BIT),
        SqlType("VARCHAR", _VARCHAR, None, "'", "'"),
        SqlType("BLOB", _VARBINARY, None, "'", "'::BLOB"),
        _moment("DATE", _DATE, 10, "DATE", _SUB_DATE),
        _moment("TIME", _TIME, 15, "TIME", _SUB_TIME),
        _moment("TIME_NS", _TIME, 18, "TIME_NS", _SUB_TIME),
        _moment("TIMESTAMP", _TIMESTAMP, 26, "TIMESTAMP", _SUB_TIMESTAMP),
        _moment("TIMESTAMP_S", _TIMESTAMP, 19, "TIMESTAMP_S", _SUB_TIMESTAMP),
        _moment("TIMESTAMP_MS", _TIMESTAMP, 23, "TIMESTAMP_MS", _SUB_TIMESTAMP),
        _moment("TIMESTAMP_NS", _TIMESTAMP, 29, "TIMESTAMP_NS", _SUB_TIMESTAMP),
        _moment("TIMESTAMP WITH TIME ZONE", _TIMESTAMP, 32, "TIMESTAMPTZ", _SUB_TIMESTAMP_TZ),
        _moment("TIMESTAMPTZ_NS", _TIMESTAMP, 35, "TIMESTAMPTZ_NS", _SUB_TIMESTAMP_TZ),
        SqlType("INTERVAL", _INTERVAL, None, "INTERVAL '", "'", subcode=0),
        SqlType("NULL", _UNKNOWN),
        SqlType("LIST", _UNKNOWN),
        SqlType("ARRAY", _UNKNOWN),
        SqlType("MAP", _UNKNOWN),
        SqlType("STRUCT", _UNKNOWN),
    ]
    return sorted(types, key=lambda t: (t.code, t.name))


def xdbc_type_info(command: CommandGetXdbcTypeInfo) -> pa.Table:
    """The SQL types (only those of ``command.data_type``, when it is given)."""
    rows = [t for t in sql_types() if command.data_type in (None, t.code)]
    numeric = [t.unsigned is not None for t in rows]
    columns: dict[str, list[object]] = {
        "type_name": [t.name for t in rows],
        "data_type": [t.code for t in rows],
        "column_size": [t.size for t in rows],
        "literal_prefix": [t.prefix for t in rows],
        "literal_suffix": [t.suffix for t in rows],
        "create_params": [["precision", "scale"] if t.code == _DECIMAL else None for t in rows],
        "nullable": [_NULLABLE] * len(rows),
        "case_sensitive": [t.code == _VARCHAR for t in rows],
        "searchable": [_SEARCH_FULL if t.code == _VARCHAR else _SEARCH_BASIC for t in rows],
        "unsigned_attribute": [t.unsigned for t in rows],
        "fixed_prec_scale": [False] * len(rows),
        "auto_increment": [False if n else None for n in numeric],
        "local_type_name": [t.name for t in rows],
        "minimum_scale": [None if t.scales is None else t.scales[0] for t in rows],
        "maximum_scale": [None if t.scales is None else t.scales[1] for t in rows],
        "sql_data_type": [t.sql_data_type for t in rows],
        "datetime_subcode": [t.subcode for t in rows],
        "num_prec_radix": [t.radix for t in rows],
        "interval_precision": [None] * len(rows),
    }
    return pa.table(columns, schema=XDBC_TYPE_INFO_SCHEMA)
