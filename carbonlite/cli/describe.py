"""Plain, JSON-ready descriptions of a table, shared by the human and ``--json`` outputs."""

from __future__ import annotations

import base64
import dataclasses
import datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa

from carbonlite.format.types import stat_kind
from carbonlite.metadata import LIVE_STATUSES, Snapshot
from carbonlite.properties import PROPERTIES, effective_properties
from carbonlite.records import CommitRecord, PartitionInfo, SegmentInfo, table_summary
from carbonlite.table import Table

__all__ = [
    "default_literal",
    "describe_blocklets",
    "describe_columns",
    "describe_files",
    "describe_history",
    "describe_properties",
    "describe_segments",
    "describe_table",
    "jsonable",
]


def jsonable(value: Any) -> Any:
    """``value`` with datetimes, decimals and bytes made JSON-safe."""
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def _bound(value: Any, t: pa.DataType) -> Any:
    """A bound shown in the column's own terms (dates and timestamps as text)."""
    if value is not None and (pa.types.is_timestamp(t) or pa.types.is_date(t)):
        physical = pa.int32() if t.bit_width == 32 else pa.int64()
        return str(pa.scalar(value, physical).cast(t))
    return value


def describe_segments(segments: list[SegmentInfo]) -> list[dict[str, Any]]:
    return [
        {
            "id": s.id,
            "status": s.status,
            "format": s.format,
            "level": s.level,
            "rows": s.rows,
            "deleted_rows": s.deleted_rows,
            "deletion_vector_bytes": s.deletion_vector_bytes,
            "bytes": s.bytes,
            "files": s.files,
            "blocklets": s.blocklets,
            "created_version": s.created_version,
            "start_time": s.created_time.isoformat(),
            "end_time": s.status_time.isoformat() if s.status not in ("STREAMING",) else None,
            "merged_into": s.merged_into,
            "partition": s.partition,
        }
        for s in segments
    ]


def describe_partitions(partitions: list[PartitionInfo]) -> list[dict[str, Any]]:
    return [
        {
            "partition": p.name,
            "value": [jsonable(v) for v in p.value],
            "rows": p.rows,
            "bytes": p.bytes,
            "files": p.files,
            "segments": p.segments,
            "last_modified_version": p.last_modified_version,
            "content_hash": p.content_hash,
        }
        for p in partitions
    ]


def describe_history(records: list[CommitRecord]) -> list[dict[str, Any]]:
    return [
        {
            "version": r.version,
            "timestamp": r.timestamp.isoformat(),
            "operation": r.operation,
            "data_change": r.data_change,
            "rows_added": r.rows,
            "bytes_added": r.bytes,
            "rows_removed": r.rows_removed,
            "bytes_removed": r.bytes_removed,
            "read_version": r.read_version,
            "parameters": dict(r.parameters),
            "files_added": r.files_added,
            "files_removed": r.files_removed,
            "duration_ms": None if r.duration is None else round(r.duration.total_seconds() * 1000),
            "writer_id": r.writer_id,
            "engine": r.engine,
        }
        for r in records
    ]


def describe_properties(properties: dict[str, str]) -> list[dict[str, str]]:
    """Every property in force: ``key``, ``value``, and ``source``: ``set`` on the table,
    ``default``, or ``user`` (the table's own ``user.`` keys)."""
    out = []
    for key, value in effective_properties(properties).items():
        source = "user" if key not in PROPERTIES else "set" if key in properties else "default"
        out.append({"key": key, "value": value, "source": source})
    return out


def describe_files(snapshot: Snapshot, *, every: bool = False) -> list[dict[str, Any]]:
    """The data files of the live segments (``every``: of every segment the log still lists,
    compacted and deleted ones too), oldest segment first."""
    return [
        {
            "segment": seg.segment_id,
            "status": seg.status,
            "file": f.path,
            "bytes": f.committed_length,
            "rows": f.live_rows,
            "deleted_rows": f.num_deleted,
            "deletion_vector_bytes": sum(f.dv_files.values()),
            "blocklets": f.num_blocklets,
        }
        for seg in snapshot.segments.values()
        if every or seg.status in LIVE_STATUSES
        for f in seg.files.values()
    ]


def default_literal(value: Any) -> str:
    """A column's default as a DDL literal, as ``carbonlite alter ... add-column`` takes it:
    ``0``, ``'text'``, ``true``, ``DATE '2024-01-01'``, ``TIMESTAMP '2024-01-01 00:00:00'``
    (UTC)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:  # a timestamp column's value: an instant, shown in UTC
            value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, datetime.date):
        return f"DATE '{value.isoformat()}'"
    return str(value)


def describe_columns(snapshot: Snapshot) -> list[dict[str, Any]]:
    """Each column of the schema: name, type, nullable; its id and its ``physical`` name in
    data files (None and its own name for a table without column ids, format 5 and older),
    its ``default`` (None when it has none; ``default_literal``: as DDL) and its
    ``former_names``."""
    mappings = snapshot.metadata.columns or (None,) * len(snapshot.schema)
    return [
        {
            "name": f.name,
            "type": str(f.type),
            "nullable": f.nullable,
            "id": None if c is None else c.id,
            "physical": f.name if c is None else c.physical,
            "default": jsonable(c.default) if c is not None and c.has_default else None,
            "has_default": c is not None and c.has_default,
            "default_literal": default_literal(c.default)
            if c is not None and c.has_default
            else None,
            "former_names": [] if c is None else list(c.former_names),
        }
        for f, c in zip(snapshot.schema, mappings, strict=True)
    ]


def describe_table(table: Table, snapshot: Snapshot, segments: list[SegmentInfo]) -> dict[str, Any]:
    return {
        "path": table.path,
        "table_id": snapshot.metadata.table_id,
        "version": snapshot.version,
        "format_version": snapshot.metadata.format_version,
        "created": datetime.datetime.fromtimestamp(
            snapshot.metadata.created_time / 1000, tz=datetime.timezone.utc
        ).isoformat(),
        "schema": describe_columns(snapshot),
        "dropped_columns": [
            {"id": d.id, "name": d.name, "physical": d.physical, "version": d.version}
            for d in snapshot.metadata.dropped
        ],
        "last_column_id": snapshot.metadata.last_column_id,
        "sort_columns": list(snapshot.metadata.sort_columns),
        "primary_key": list(snapshot.metadata.primary_key),
        "properties": dict(snapshot.properties),
        "effective_properties": effective_properties(snapshot.properties),
        "summary": dataclasses.asdict(table_summary(snapshot)),
        "segments": describe_segments(segments),
    }


def describe_blocklets(snapshot: Snapshot) -> list[dict[str, Any]]:
    """Every live blocklet with its rows and per-column bounds (CarbonCli's summary)."""
    types = {f.name: f.type for f in snapshot.schema}
    out = []
    for seg, f in snapshot.iter_files():
        for i, b in enumerate(f.blocklets):
            deletion = f.deletions.get(b.offset)
            out.append(
                {
                    "segment": seg.segment_id,
                    "file": f.path,
                    "blocklet": i,
                    "offset": b.offset,
                    "length": b.length,
                    "rows": b.num_rows,
                    "deleted": deletion.cardinality if deletion is not None else 0,
                    "deletion_vector_bytes": deletion.length if deletion is not None else 0,
                    "columns": {
                        name: {
                            "nulls": s.null_count,
                            "min": jsonable(_bound(s.min, types[name])),
                            "max": jsonable(_bound(s.max, types[name])),
                        }
                        for name, s in b.stats.items()
                        if name in types and stat_kind(types[name]) is not None
                    },
                }
            )
    return out
