"""A CarbonLite schema as an Iceberg schema: field ids are column ids (nested ones from
``format/field_ids.py``, the ids the Parquet files carry), names the present column names.

Types Iceberg cannot hold are refused with :class:`IcebergTypeError` naming the column:
unsigned integers, timestamps in other units than microseconds (nanoseconds need format v3),
times other than microseconds, durations, null columns, a column whose default is not null
in format 2 (Iceberg v2 reads the files written before it as null; format 3 writes it as the
column's ``initial-default``), and a date widened to a timestamp (no Iceberg promotion).
Setting ``iceberg`` and every schema change of a table with it on are checked."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.types as pat

from carbonlite.errors import CarbonLiteError
from carbonlite.format.field_ids import NESTED_ID_BASE, NESTED_IDS_PER_COLUMN, nested_fields
from carbonlite.metadata.columns import column_ids, widened_from_dates
from carbonlite.properties import TableProperties

__all__ = [
    "IcebergTypeError",
    "check_iceberg_schema",
    "check_iceberg_table",
    "default_json",
    "iceberg_schema",
    "iceberg_type",
    "last_column_id",
    "name_mapping",
]


class IcebergTypeError(CarbonLiteError):
    """A column's type (or default) cannot be published as Iceberg: nothing was changed."""


def _problem(t: pa.DataType, version: int) -> str | None:
    if pat.is_unsigned_integer(t):
        return f"{t} is unsigned; Iceberg has only signed integers: widen it to a signed type"
    if pat.is_timestamp(t) and not (t.unit == "us" or (t.unit == "ns" and version >= 3)):
        return f"{t}: Iceberg timestamps are microseconds (nanoseconds with iceberg=v3)"
    if pat.is_time(t) and (t.bit_width != 64 or t.unit != "us"):
        return f"{t}: Iceberg times are microseconds (time64[us])"
    if pat.is_duration(t) or pat.is_null(t) or pat.is_date64(t):
        return f"{t} has no Iceberg type"
    if pat.is_fixed_size_list(t):
        return f"{t} has no Iceberg type (a list of fixed size)"
    if pat.is_decimal(t) and t.precision > 38:
        return f"{t}: Iceberg decimals hold at most 38 digits"
    return None


def _all_problems(name: str, t: pa.DataType, version: int) -> list[str]:
    out = []
    problem = _problem(t, version)
    if problem is not None:
        out.append(f"column {name!r}: {problem}")
    for _path, child in nested_fields(t):
        problem = _problem(child.type, version)
        if problem is not None:
            out.append(f"column {name!r} (its field {child.name!r}): {problem}")
    return out


def check_iceberg_schema(metadata: Any, where: str, version: int = 2) -> None:
    """Refuse a table whose columns Iceberg (format ``version``) cannot hold
    (:class:`IcebergTypeError`)."""
    problems = [p for f in metadata.schema for p in _all_problems(f.name, f.type, version)]
    for f, c in zip(metadata.schema, metadata.columns, strict=False):
        if not c.has_default or c.default is None:
            continue
        if version < 3:
            problems.append(
                f"column {f.name!r} has the default {c.default!r}: Iceberg v2 reads the files "
                "written before it was added as null (iceberg=v3 holds it as the column's "
                "initial-default)"
            )
        elif default_json(c.default, f.type) is None:
            problems.append(
                f"column {f.name!r} has the default {c.default!r}, of a type whose Iceberg "
                "initial-default CarbonLite does not write (nested, or a float that is not "
                "finite)"
            )
    for name in sorted(widened_from_dates(metadata)):
        problems.append(
            f"column {name!r} was widened from date to timestamp, which Iceberg cannot promote: "
            "its older files hold dates"
        )
    if problems:
        raise IcebergTypeError(
            f"{where} cannot be published as Iceberg: "
            + "; ".join(problems)
            + ". Change those columns (or keep iceberg=off)"
        )


def check_iceberg_table(metadata: Any, where: str) -> None:
    """With ``iceberg`` on: the table writes its columnar segments in Parquet and Iceberg can
    hold its columns (else :class:`IcebergTypeError`)."""
    props = TableProperties(metadata.properties)
    if props.iceberg == "off":
        return
    if props.columnar_format != "parquet":
        raise IcebergTypeError(
            f"{where} writes its columnar segments as blocklet files (columnar_format="
            f"{props.columnar_format}), which Iceberg cannot name: set columnar_format=parquet "
            "with iceberg (and run a major compaction to convert the segments written before)"
        )
    check_iceberg_schema(metadata, where, int(props.iceberg[1:]))


def _primitive(t: pa.DataType) -> str:
    if pat.is_boolean(t):
        return "boolean"
    if pat.is_int8(t) or pat.is_int16(t) or pat.is_int32(t):
        return "int"
    if pat.is_int64(t):
        return "long"
    if pat.is_float32(t) or pat.is_float16(t):
        return "float"
    if pat.is_float64(t):
        return "double"
    if pat.is_decimal(t):
        return f"decimal({t.precision}, {t.scale})"
    if pat.is_date32(t):
        return "date"
    if pat.is_time64(t):
        return "time"
    if pat.is_timestamp(t):
        suffix = "_ns" if t.unit == "ns" else ""
        return ("timestamptz" if t.tz is not None else "timestamp") + suffix
    if pat.is_string(t) or pat.is_large_string(t):
        return "string"
    if pat.is_fixed_size_binary(t):
        return f"fixed[{t.byte_width}]"
    if pat.is_binary(t) or pat.is_large_binary(t):
        return "binary"
    raise IcebergTypeError(f"{t} has no Iceberg type")


def iceberg_type(t: pa.DataType, column_id: int, counter: list[int] | None = None) -> Any:
    """The Iceberg type of a column of Arrow type ``t`` and id ``column_id`` (nested field
    ids in the order ``format/field_ids.py`` numbers them)."""
    counter = [0] if counter is None else counter

    def next_id() -> int:
        k = counter[0]
        counter[0] += 1
        return NESTED_ID_BASE + column_id * NESTED_IDS_PER_COLUMN + k

    if pat.is_struct(t):
        fields = []
        for i in range(t.num_fields):
            child = t.field(i)
            fid = next_id()
            fields.append(
                {
                    "id": fid,
                    "name": child.name,
                    "required": not child.nullable,
                    "type": iceberg_type(child.type, column_id, counter),
                }
            )
        return {"type": "struct", "fields": fields}
    if pat.is_map(t):
        key_id = next_id()
        key = iceberg_type(t.key_type, column_id, counter)
        value_id = next_id()
        value = iceberg_type(t.item_type, column_id, counter)
        return {
            "type": "map",
            "key-id": key_id,
            "key": key,
            "value-id": value_id,
            "value": value,
            "value-required": not t.item_field.nullable,
        }
    if pat.is_list(t) or pat.is_large_list(t):
        element_id = next_id()
        element = iceberg_type(t.value_type, column_id, counter)
        return {
            "type": "list",
            "element-id": element_id,
            "element": element,
            "element-required": not t.value_field.nullable,
        }
    return _primitive(t)


def iceberg_schema(metadata: Any, schema_id: int = 0, version: int = 2) -> dict[str, Any]:
    """The Iceberg schema (JSON object) of ``metadata``'s present columns; in format 3 a
    column's default is its ``initial-default`` (what its rows in files written before it
    was added read as) and ``write-default``."""
    fields = []
    for f, c, cid in zip(metadata.schema, metadata.columns, column_ids(metadata), strict=True):
        field: dict[str, Any] = {
            "id": cid,
            "name": f.name,
            "required": not f.nullable,
            "type": iceberg_type(f.type, cid),
        }
        if version >= 3 and c.has_default and c.default is not None:
            value = default_json(c.default, f.type)
            field["initial-default"] = field["write-default"] = value
        fields.append(field)
    return {"type": "struct", "schema-id": schema_id, "fields": fields}


def default_json(value: Any, t: pa.DataType) -> Any:
    """A primitive default in Iceberg's JSON single-value form (None: not written for this
    type): numbers and booleans as JSON, decimals as text, dates, times and timestamps as ISO
    text (``+00:00`` on an instant), strings as they are, binary as hex."""
    if pat.is_boolean(t) or pat.is_integer(t):
        return bool(value) if pat.is_boolean(t) else int(value)
    if pat.is_floating(t):
        number = float(value)
        return number if math.isfinite(number) else None
    if pat.is_decimal(t):
        return str(value)
    if pat.is_string(t) or pat.is_large_string(t):
        return str(value)
    if pat.is_binary(t) or pat.is_large_binary(t) or pat.is_fixed_size_binary(t):
        return bytes(value).hex()
    if pat.is_date(t):
        return value.isoformat()
    if pat.is_time(t):
        return value.isoformat(timespec="microseconds")
    if pat.is_timestamp(t):
        # the unit's digits, no rounding; an instant in UTC's wall time
        text = pa.scalar(value, t).cast(pa.timestamp(t.unit)).cast(pa.string()).as_py()
        return text.replace(" ", "T") + ("+00:00" if t.tz is not None else "")
    return None


def last_column_id(metadata: Any) -> int:
    """The largest field id the schema has ever given (nested ones included)."""
    top = max([metadata.last_column_id, *column_ids(metadata)], default=0)
    nested = [
        NESTED_ID_BASE + cid * NESTED_IDS_PER_COLUMN + len(nested_fields(f.type)) - 1
        for f, cid in zip(metadata.schema, column_ids(metadata), strict=True)
        if nested_fields(f.type)
    ]
    return max([top, *nested])


def name_mapping(metadata: Any) -> str:
    """``schema.name-mapping.default``: each column's id under the names it has in data files
    (its physical names, newest first), for readers of files without field ids."""
    out: list[dict[str, Any]] = []
    layout_names: Sequence[Any] = metadata.columns
    for f, cid, mapping in zip(
        metadata.schema,
        column_ids(metadata),
        layout_names or [None] * len(metadata.schema),
        strict=True,
    ):
        names = [f.name]
        if mapping is not None:
            names = list(dict.fromkeys([mapping.physical, *(p for p, _ in mapping.previous)]))
        out.append({"field-id": cid, "names": names})
    return json.dumps(out, separators=(",", ":"))
