"""Arrow schemas as readable JSON for the log (docs/LOG.md, "Schema")."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.types as pat

from carbonlite.errors import UnsupportedFormatError

__all__ = ["schema_from_json", "schema_to_json", "type_from_json", "type_to_json"]

_SIMPLE: dict[str, pa.DataType] = {
    "null": pa.null(),
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "date32": pa.date32(),
    "date64": pa.date64(),
}
_SIMPLE_NAMES = {str(t): name for name, t in _SIMPLE.items()}


def type_to_json(t: pa.DataType) -> Any:
    """A string for simple types, an object for parameterised and nested ones."""
    name = _SIMPLE_NAMES.get(str(t))
    if name is not None and t.equals(_SIMPLE[name]):
        return name
    if pat.is_timestamp(t):
        return {"type": "timestamp", "unit": t.unit, "tz": t.tz}
    if pat.is_time32(t) or pat.is_time64(t):
        return {"type": "time32" if pat.is_time32(t) else "time64", "unit": t.unit}
    if pat.is_duration(t):
        return {"type": "duration", "unit": t.unit}
    if pat.is_decimal(t):
        return {"type": f"decimal{t.bit_width}", "precision": t.precision, "scale": t.scale}
    if pat.is_fixed_size_binary(t):
        return {"type": "fixed_size_binary", "width": t.byte_width}
    if pat.is_list(t) or pat.is_large_list(t):
        kind = "list" if pat.is_list(t) else "large_list"
        return {"type": kind, "item": field_to_json(t.value_field)}
    if pat.is_fixed_size_list(t):
        return {
            "type": "fixed_size_list",
            "size": t.list_size,
            "item": field_to_json(t.value_field),
        }
    if pat.is_map(t):
        return {
            "type": "map",
            "key": field_to_json(t.key_field),
            "value": field_to_json(t.item_field),
            "keys_sorted": t.keys_sorted,
        }
    if pat.is_struct(t):
        return {
            "type": "struct",
            "fields": [field_to_json(t.field(i)) for i in range(t.num_fields)],
        }
    raise UnsupportedFormatError(f"type {t} has no JSON form in the CarbonLite log")


def type_from_json(obj: Any) -> pa.DataType:
    if isinstance(obj, str):
        try:
            return _SIMPLE[obj]
        except KeyError:
            raise UnsupportedFormatError(f"unknown column type {obj!r} in the log") from None
    kind = obj.get("type")
    if kind == "timestamp":
        return pa.timestamp(obj["unit"], tz=obj.get("tz"))
    if kind == "time32":
        return pa.time32(obj["unit"])
    if kind == "time64":
        return pa.time64(obj["unit"])
    if kind == "duration":
        return pa.duration(obj["unit"])
    if kind == "decimal128":
        return pa.decimal128(obj["precision"], obj["scale"])
    if kind == "decimal256":
        return pa.decimal256(obj["precision"], obj["scale"])
    if kind == "fixed_size_binary":
        return pa.binary(obj["width"])
    if kind == "list":
        return pa.list_(field_from_json(obj["item"]))
    if kind == "large_list":
        return pa.large_list(field_from_json(obj["item"]))
    if kind == "fixed_size_list":
        return pa.list_(field_from_json(obj["item"]), obj["size"])
    if kind == "map":
        return pa.map_(
            field_from_json(obj["key"]),
            field_from_json(obj["value"]),
            obj.get("keys_sorted", False),
        )
    if kind == "struct":
        return pa.struct([field_from_json(f) for f in obj["fields"]])
    raise UnsupportedFormatError(f"unknown column type {obj!r} in the log")


def field_to_json(field: pa.Field) -> dict[str, Any]:
    out: dict[str, Any] = {"name": field.name, "type": type_to_json(field.type)}
    if not field.nullable:
        out["nullable"] = False
    if field.metadata:
        out["metadata"] = {k.decode(): v.decode() for k, v in field.metadata.items()}
    return out


def field_from_json(obj: dict[str, Any]) -> pa.Field:
    metadata = obj.get("metadata")
    return pa.field(
        obj["name"],
        type_from_json(obj["type"]),
        nullable=obj.get("nullable", True),
        metadata={k.encode(): v.encode() for k, v in metadata.items()} if metadata else None,
    )


def schema_to_json(schema: pa.Schema) -> list[dict[str, Any]]:
    return [field_to_json(f) for f in schema]


def schema_from_json(obj: list[dict[str, Any]]) -> pa.Schema:
    return pa.schema([field_from_json(f) for f in obj])
