"""A CarbonLite partition spec as an Iceberg partition spec.

Identity fields (on integer, string, binary, boolean, date and microsecond timestamp columns)
and the time transforms ``year``, ``month``, ``day`` and ``hour`` map to Iceberg's fields of
the same transform; each data file's partition value is its segment's. ``bucket`` fields (a
hash other than Iceberg's) and identity fields on other types are left out of the Iceberg spec:
the files are still read right, only not pruned by those fields.

Iceberg's values: ``year`` years since 1970, ``month`` months since 1970-01, ``day`` a date,
``hour`` hours since the epoch (CarbonLite keeps ``"YYYY-MM"`` and ``"YYYY-MM-DDTHH"``
strings for the last two)."""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.types as pat

from carbonlite.metadata.columns import column_ids
from carbonlite.metadata.partition_spec import PartitionSpec

__all__ = ["FIRST_FIELD_ID", "Partitioning", "partitioning"]

FIRST_FIELD_ID = 1000
"""Iceberg's first partition field id."""
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class _Field:
    index: int
    """The field's place in the CarbonLite spec (and in a segment's partition value)."""
    name: str
    transform: str
    source_id: int
    field_id: int
    avro: Any
    iceberg_type: str
    convert: Callable[[Any], Any]


def _identity_types(t: pa.DataType) -> tuple[Any, str] | None:
    """(Avro type, Iceberg type) of identity values of a column of type ``t``."""
    if pat.is_int8(t) or pat.is_int16(t) or pat.is_int32(t):
        return "int", "int"
    if pat.is_int64(t):
        return "long", "long"
    if pat.is_string(t) or pat.is_large_string(t):
        return "string", "string"
    if pat.is_binary(t) or pat.is_large_binary(t):
        return "bytes", "binary"
    if pat.is_boolean(t):
        return "boolean", "boolean"
    if pat.is_date32(t):
        return {"type": "int", "logicalType": "date"}, "date"
    if pat.is_timestamp(t) and t.unit == "us":
        return (
            {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": t.tz is not None},
            "timestamptz" if t.tz is not None else "timestamp",
        )
    return None


def _month(value: str) -> int:
    year, month = value.split("-")
    return (int(year) - 1970) * 12 + int(month) - 1


def _hour(value: str) -> int:
    day, hour = value.split("T")
    stamp = dt.datetime.fromisoformat(day).replace(hour=int(hour), tzinfo=dt.timezone.utc)
    return int((stamp - _EPOCH).total_seconds()) // 3600


def _same(value: Any) -> Any:
    return value


_TIME: Mapping[str, tuple[Any, str, Callable[[Any], Any]]] = {
    "year": ("int", "int", lambda y: int(y) - 1970),
    "month": ("int", "int", _month),
    "day": ({"type": "int", "logicalType": "date"}, "date", _same),
    "hour": ("int", "int", _hour),
}


def _single(iceberg_type: str, value: Any) -> bytes:
    """Iceberg's single-value binary form of a partition value."""
    if iceberg_type in ("int",):
        return struct.pack("<i", int(value))
    if iceberg_type == "date":
        return struct.pack("<i", (value - dt.date(1970, 1, 1)).days)
    if iceberg_type == "long":
        return struct.pack("<q", int(value))
    if iceberg_type in ("timestamp", "timestamptz"):
        stamp = value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)
        delta = stamp - _EPOCH
        return struct.pack(
            "<q", delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds
        )
    if iceberg_type == "string":
        return str(value).encode("utf-8")
    if iceberg_type == "boolean":
        return b"\x01" if value else b"\x00"
    return bytes(value)


@dataclass(frozen=True)
class Partitioning:
    """The Iceberg partition spec of a table, and its values."""

    fields: tuple[_Field, ...]
    spec: PartitionSpec

    def spec_json(self) -> list[dict[str, Any]]:
        return [
            {
                "source-id": f.source_id,
                "field-id": f.field_id,
                "name": f.name,
                "transform": f.transform,
            }
            for f in self.fields
        ]

    def avro_fields(self) -> list[dict[str, Any]]:
        return [
            {"name": f.name, "type": ["null", f.avro], "default": None, "field-id": f.field_id}
            for f in self.fields
        ]

    @property
    def last_field_id(self) -> int:
        return FIRST_FIELD_ID - 1 + len(self.fields)

    def record(self, partition: Sequence[Any] | None) -> dict[str, Any]:
        """The partition record of a file of a segment whose partition value (JSON, as the
        log keeps it) is ``partition``."""
        if not self.fields or partition is None:
            return {}
        values = self.spec.value_from_json(list(partition))
        return {
            f.name: None if values[f.index] is None else f.convert(values[f.index])
            for f in self.fields
        }

    def summaries(self, records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The field summaries a manifest list gives of a manifest of files of ``records``."""
        out = []
        for f in self.fields:
            values = [r.get(f.name) for r in records]
            present = [v for v in values if v is not None]
            out.append(
                {
                    "contains_null": len(present) < len(values),
                    "contains_nan": False,
                    "lower_bound": _single(f.iceberg_type, min(present)) if present else None,
                    "upper_bound": _single(f.iceberg_type, max(present)) if present else None,
                }
            )
        return out


def partitioning(metadata: Any) -> Partitioning:
    """The Iceberg partitioning of a table of ``metadata``."""
    spec = PartitionSpec.from_json(list(metadata.partition_by), metadata.schema)
    ids = dict(zip(metadata.schema.names, column_ids(metadata), strict=True))
    fields: list[_Field] = []
    for i, f in enumerate(spec.fields):
        if f.transform == "identity":
            types = _identity_types(f.source_type)
            if types is None:
                continue
            avro, iceberg_type = types
            convert: Callable[[Any], Any] = _same
        elif f.transform in _TIME:
            avro, iceberg_type, convert = _TIME[f.transform]
        else:  # bucket: another hash than Iceberg's
            continue
        fields.append(
            _Field(
                index=i,
                name=f.name,
                transform=f.transform,
                source_id=ids[f.source],
                field_id=FIRST_FIELD_ID + len(fields),
                avro=avro,
                iceberg_type=iceberg_type,
                convert=convert,
            )
        )
    return Partitioning(tuple(fields), spec)
