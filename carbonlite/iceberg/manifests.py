"""Iceberg manifests and manifest lists (format v2), Avro files written with fastavro.

The Avro schemas are the Iceberg spec's, with each field's ``field-id``; maps with non-string
keys are arrays of key/value records (``logicalType: map``), as the spec gives them.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import fastavro

__all__ = ["DataFileEntry", "ManifestFile", "manifest_bytes", "manifest_list_bytes"]

DATA, POSITION_DELETES = 0, 1
"""``content`` of a data file entry."""


def _map(name: str, key_id: int, value_id: int, value: str) -> dict[str, Any]:
    return {
        "type": "array",
        "logicalType": "map",
        "items": {
            "type": "record",
            "name": name,
            "fields": [
                {"name": "key", "type": "int", "field-id": key_id},
                {"name": "value", "type": value, "field-id": value_id},
            ],
        },
    }


def _optional(name: str, t: Any, fid: int) -> dict[str, Any]:
    return {"name": name, "type": ["null", t], "default": None, "field-id": fid}


def _entry_schema(
    partition_fields: Sequence[dict[str, Any]], format_version: int
) -> dict[str, Any]:
    data_file = {
        "type": "record",
        "name": "r2",
        "fields": [
            {"name": "content", "type": "int", "field-id": 134},
            {"name": "file_path", "type": "string", "field-id": 100},
            {"name": "file_format", "type": "string", "field-id": 101},
            {
                "name": "partition",
                "type": {"type": "record", "name": "r102", "fields": list(partition_fields)},
                "field-id": 102,
            },
            {"name": "record_count", "type": "long", "field-id": 103},
            {"name": "file_size_in_bytes", "type": "long", "field-id": 104},
            _optional("column_sizes", _map("k117_v118", 117, 118, "long"), 108),
            _optional("value_counts", _map("k119_v120", 119, 120, "long"), 109),
            _optional("null_value_counts", _map("k121_v122", 121, 122, "long"), 110),
            _optional("nan_value_counts", _map("k138_v139", 138, 139, "long"), 137),
            _optional("lower_bounds", _map("k126_v127", 126, 127, "bytes"), 125),
            _optional("upper_bounds", _map("k129_v130", 129, 130, "bytes"), 128),
            _optional("key_metadata", "bytes", 131),
            _optional("split_offsets", {"type": "array", "items": "long", "element-id": 133}, 132),
            _optional("equality_ids", {"type": "array", "items": "int", "element-id": 136}, 135),
            _optional("sort_order_id", "int", 140),
            *(
                [
                    _optional("first_row_id", "long", 142),
                    _optional("referenced_data_file", "string", 143),
                    _optional("content_offset", "long", 144),
                    _optional("content_size_in_bytes", "long", 145),
                ]
                if format_version >= 3
                else []
            ),
        ],
    }
    return {
        "type": "record",
        "name": "manifest_entry",
        "fields": [
            {"name": "status", "type": "int", "field-id": 0},
            _optional("snapshot_id", "long", 1),
            _optional("sequence_number", "long", 3),
            _optional("file_sequence_number", "long", 4),
            {"name": "data_file", "type": data_file, "field-id": 2},
        ],
    }


_MANIFEST_FILE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "manifest_file",
    "fields": [
        {"name": "manifest_path", "type": "string", "field-id": 500},
        {"name": "manifest_length", "type": "long", "field-id": 501},
        {"name": "partition_spec_id", "type": "int", "field-id": 502},
        {"name": "content", "type": "int", "field-id": 517},
        {"name": "sequence_number", "type": "long", "field-id": 515},
        {"name": "min_sequence_number", "type": "long", "field-id": 516},
        {"name": "added_snapshot_id", "type": "long", "field-id": 503},
        {"name": "added_files_count", "type": "int", "field-id": 504},
        {"name": "existing_files_count", "type": "int", "field-id": 505},
        {"name": "deleted_files_count", "type": "int", "field-id": 506},
        {"name": "added_rows_count", "type": "long", "field-id": 512},
        {"name": "existing_rows_count", "type": "long", "field-id": 513},
        {"name": "deleted_rows_count", "type": "long", "field-id": 514},
        _optional(
            "partitions",
            {
                "type": "array",
                "element-id": 508,
                "items": {
                    "type": "record",
                    "name": "r508",
                    "fields": [
                        {"name": "contains_null", "type": "boolean", "field-id": 509},
                        _optional("contains_nan", "boolean", 518),
                        _optional("lower_bound", "bytes", 510),
                        _optional("upper_bound", "bytes", 511),
                    ],
                },
            },
            507,
        ),
        _optional("key_metadata", "bytes", 519),
    ],
}


def _manifest_file_schema(format_version: int) -> dict[str, Any]:
    if format_version < 3:
        return _MANIFEST_FILE_SCHEMA
    fields = [*_MANIFEST_FILE_SCHEMA["fields"], _optional("first_row_id", "long", 520)]
    return {**_MANIFEST_FILE_SCHEMA, "fields": fields}


@dataclass(frozen=True)
class DataFileEntry:
    """One file of a manifest: a Parquet data file, or a position-delete file."""

    path: str
    record_count: int
    size: int
    content: int = DATA
    value_counts: Mapping[int, int] = field(default_factory=dict)
    null_counts: Mapping[int, int] = field(default_factory=dict)
    lower_bounds: Mapping[int, bytes] = field(default_factory=dict)
    upper_bounds: Mapping[int, bytes] = field(default_factory=dict)
    split_offsets: tuple[int, ...] = ()
    partition: Mapping[str, Any] = field(default_factory=dict)
    """Its partition record (field name -> Iceberg value)."""
    file_format: str = "PARQUET"
    referenced_data_file: str | None = None
    """A deletion vector's data file (v3)."""
    content_offset: int | None = None
    """Where a deletion vector's blob lies in its Puffin file (v3)."""
    content_size: int | None = None
    sequence_number: int = 0
    """Its data sequence number, also the id of the snapshot said to add it: the CarbonLite
    version that wrote it, plus one (a data file's: the version that created it; a delete
    file's: the version of the newest delete of its data file), so a position delete always
    applies to its data file however often their manifests are written again."""


@dataclass(frozen=True)
class ManifestFile:
    """A written manifest as a manifest list names it."""

    path: str
    length: int
    content: int
    sequence_number: int
    min_sequence_number: int
    added_snapshot_id: int
    files: int
    rows: int
    partitions: Sequence[Mapping[str, Any]] = ()
    """A summary of each partition field over its files."""
    first_row_id: int | None = None
    """v3 row lineage: the row id of the first row of its first file (its files' rows are
    numbered on from it, in order); None for a delete manifest or in v2."""
    rows_key: str | None = None
    """What its rows are (a digest of its data files and their lengths, whatever the schema):
    a manifest of the same rows keeps their row ids."""


def _pairs(values: Mapping[int, Any]) -> list[dict[str, Any]] | None:
    return [{"key": k, "value": v} for k, v in sorted(values.items())] or None


def manifest_bytes(
    entries: Sequence[DataFileEntry],
    *,
    schema: Mapping[str, Any],
    content: int,
    partition_fields: Sequence[Mapping[str, Any]] = (),
    partition_spec: Sequence[Mapping[str, Any]] = (),
    format_version: int = 2,
) -> bytes:
    """A manifest of ``entries``, each ADDED at its own sequence number (written, never
    inherited, so a manifest is named again unchanged by later snapshots), unpartitioned."""
    rows: list[dict[str, Any]] = [
        {
            "status": 1,
            "snapshot_id": e.sequence_number,
            "sequence_number": e.sequence_number,
            "file_sequence_number": e.sequence_number,
            "data_file": {
                "content": e.content,
                "file_path": e.path,
                "file_format": e.file_format,
                "partition": dict(e.partition),
                "record_count": e.record_count,
                "file_size_in_bytes": e.size,
                "column_sizes": None,
                "value_counts": _pairs(e.value_counts),
                "null_value_counts": _pairs(e.null_counts),
                "nan_value_counts": None,
                "lower_bounds": _pairs(e.lower_bounds),
                "upper_bounds": _pairs(e.upper_bounds),
                "key_metadata": None,
                "split_offsets": list(e.split_offsets) or None,
                "equality_ids": None,
                "sort_order_id": None,
                **(
                    {
                        "first_row_id": None,
                        "referenced_data_file": e.referenced_data_file,
                        "content_offset": e.content_offset,
                        "content_size_in_bytes": e.content_size,
                    }
                    if format_version >= 3
                    else {}
                ),
            },
        }
        for e in entries
    ]
    out = io.BytesIO()
    fastavro.writer(
        out,
        fastavro.parse_schema(_entry_schema([dict(f) for f in partition_fields], format_version)),
        rows,
        metadata={
            "schema": json.dumps(schema),
            "schema-id": str(schema.get("schema-id", 0)),
            "partition-spec": json.dumps(list(partition_spec)),
            "partition-spec-id": "0",
            "format-version": str(format_version),
            "content": "deletes" if content else "data",
        },
    )
    return out.getvalue()


def manifest_list_bytes(
    manifests: Sequence[ManifestFile],
    *,
    snapshot_id: int,
    parent_id: int | None,
    sequence_number: int,
    format_version: int = 2,
) -> bytes:
    """The manifest list of a snapshot naming ``manifests``."""
    rows: list[dict[str, Any]] = [
        {
            "manifest_path": m.path,
            "manifest_length": m.length,
            "partition_spec_id": 0,
            "content": m.content,
            "sequence_number": m.sequence_number,
            "min_sequence_number": m.min_sequence_number,
            "added_snapshot_id": m.added_snapshot_id,
            "added_files_count": m.files,
            "existing_files_count": 0,
            "deleted_files_count": 0,
            "added_rows_count": m.rows,
            "existing_rows_count": 0,
            "deleted_rows_count": 0,
            "partitions": [dict(p) for p in m.partitions],
            "key_metadata": None,
            **({"first_row_id": m.first_row_id} if format_version >= 3 else {}),
        }
        for m in manifests
    ]
    out = io.BytesIO()
    fastavro.writer(
        out,
        fastavro.parse_schema(_manifest_file_schema(format_version)),
        rows,
        metadata={
            "snapshot-id": str(snapshot_id),
            "parent-snapshot-id": "null" if parent_id is None else str(parent_id),
            "sequence-number": str(sequence_number),
            "format-version": str(format_version),
        },
    )
    return out.getvalue()
