"""The one place that turns log actions and checkpoints into JSON and back (docs/LOG.md).

A log version is newline-delimited JSON, one action per line, each line an object with a
single key naming the action (checkpoints: ``checkpoint.py``).
Decoding blocklet statistics needs the column types, so decoding takes the schema in force.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from carbonlite.errors import CorruptDataError, UnsupportedFormatError
from carbonlite.format.stats import ColumnStats, stat_decoder, stat_to_json
from carbonlite.metadata.actions import (
    BLOOM_FORMAT_VERSION,
    DELETION_VECTOR_FORMAT_VERSION,
    LOG_FORMAT_VERSION,
    PARTITION_FORMAT_VERSION,
    SEALED_FORMAT_VERSION,
    Action,
    BlockletEntry,
    BlockletsAppended,
    BloomFile,
    BloomFiltersAdded,
    BloomRef,
    CommitInfo,
    DeletionRef,
    FilesRemoved,
    IndexesAdded,
    IndexFile,
    RowsDeleted,
    SegmentAdded,
    SegmentStatusChanged,
    StateStored,
    TableMetadata,
    TxnMarker,
)
from carbonlite.metadata.columns import (
    columns_from_json,
    columns_to_json,
    dropped_from_json,
    dropped_to_json,
    physical_schema,
)
from carbonlite.metadata.schema_json import schema_from_json, schema_to_json
from carbonlite.metadata.seal import SealMismatchError, seal, unseal

__all__ = [
    "bloom_file_from_json",
    "bloom_file_to_json",
    "decode_actions",
    "decode_commit_info",
    "deletion_ref_from_json",
    "deletion_ref_to_json",
    "dumps",
    "encode_actions",
    "index_file_from_json",
    "index_file_to_json",
    "metadata_from_json",
    "metadata_to_json",
    "partition_from_json",
    "state_from_json",
    "state_to_json",
    "stats_from_json",
    "stats_to_json",
]

_KEYS = {
    TableMetadata: "metaData",
    SegmentAdded: "addSegment",
    BlockletsAppended: "appendBlocklets",
    SegmentStatusChanged: "setSegmentStatus",
    FilesRemoved: "removeFiles",
    RowsDeleted: "deleteRows",
    BloomFiltersAdded: "addBloomFilters",
    IndexesAdded: "addIndexes",
    StateStored: "storeState",
    TxnMarker: "txn",
    CommitInfo: "commitInfo",
}


_SINCE_FORMAT = {
    "deleteRows": DELETION_VECTOR_FORMAT_VERSION,
    "storeState": PARTITION_FORMAT_VERSION,
    "addBloomFilters": BLOOM_FORMAT_VERSION,
    "addIndexes": BLOOM_FORMAT_VERSION,
}
"""Actions that appeared after format 1: the first table format allowed to hold them."""

_OPTIONAL_COMMIT_METRICS = ("files_added", "files_removed", "duration_ms", "writer_id")
"""Optional commitInfo keys: written only when known, None when absent (older writers).
Readers before them ignore them, so they need no new log format version."""


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# --- statistics and blocklets ----------------------------------------------------------------


def stats_to_json(
    stats: Mapping[str, ColumnStats], types: Mapping[str, pa.DataType]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, s in stats.items():
        t = types.get(name)
        if t is None:
            continue  # a column the schema no longer has (dropped, or widened to a new domain)
        entry: dict[str, Any] = {"nulls": s.null_count}
        if s.nan_count:
            entry["nans"] = s.nan_count
        if s.min is not None:
            entry["min"] = stat_to_json(s.min, t)
        if s.max is not None:
            entry["max"] = stat_to_json(s.max, t)
        out[name] = entry
    return out


def stats_from_json(
    obj: Mapping[str, Any], types: Mapping[str, pa.DataType]
) -> dict[str, ColumnStats]:
    return _stats_from_json(obj, _decoders(types))


_Decoders = Mapping[str, Callable[[Any], Any] | None]
"""Per column the schema knows: what turns a JSON bound into the bound (None: nothing)."""


def _decoders(types: Mapping[str, pa.DataType]) -> _Decoders:
    return {name: stat_decoder(t) for name, t in types.items()}


_last_schema: tuple[pa.Schema, _Decoders] | None = None


def _schema_decoders(schema: pa.Schema) -> _Decoders:
    """:func:`_decoders` of ``schema``'s columns, kept for the last schema asked for (replay
    asks once per version, nearly always with the same schema object)."""
    global _last_schema
    last = _last_schema
    if last is not None and last[0] is schema:
        return last[1]
    decoders = _decoders(_types(schema))
    _last_schema = (schema, decoders)
    return decoders


def _stats_from_json(obj: Mapping[str, Any], decoders: _Decoders) -> dict[str, ColumnStats]:
    # the hot loop of replaying appends: one pass, no per-value type dispatch
    out = {}
    for name, entry in obj.items():
        if name not in decoders:
            continue  # a column this schema does not know carries no usable bounds
        low = entry.get("min")
        high = entry.get("max")
        decode = decoders[name]
        if decode is not None:
            low = None if low is None else decode(low)
            high = None if high is None else decode(high)
        out[name] = ColumnStats(entry["nulls"], low, high, entry.get("nans", 0))
    return out


def _blocklet_to_json(b: BlockletEntry, types: Mapping[str, pa.DataType]) -> dict[str, Any]:
    return {
        "offset": b.offset,
        "length": b.length,
        "rows": b.num_rows,
        "stats": stats_to_json(b.stats, types),
    }


def _blocklet_from_json(obj: Mapping[str, Any], decoders: _Decoders) -> BlockletEntry:
    return BlockletEntry(
        obj["offset"], obj["length"], obj["rows"], _stats_from_json(obj.get("stats", {}), decoders)
    )


def _types(schema: pa.Schema) -> dict[str, pa.DataType]:
    return {f.name: f.type for f in schema}


def deletion_ref_to_json(ref: DeletionRef) -> list[Any]:
    """A deletion-vector reference as a compact list (checkpoints hold many)."""
    return [ref.blocklet, ref.path, ref.offset, ref.length, ref.cardinality]


def deletion_ref_from_json(obj: Any) -> DeletionRef:
    blocklet, path, offset, length, cardinality = obj
    return DeletionRef(int(blocklet), str(path), int(offset), int(length), int(cardinality))


def bloom_file_to_json(blooms: BloomFile) -> dict[str, Any]:
    """A bloom file and the records in it, as ``appendBlocklets`` and ``addBloomFilters``
    hold them (each record as ``[blocklet offset, offset, length]``)."""
    return {
        "path": blooms.path,
        "size": blooms.size,
        "columns": list(blooms.columns),
        "filters": [[r.blocklet, r.offset, r.length] for r in blooms.filters],
    }


def bloom_file_from_json(obj: Mapping[str, Any]) -> BloomFile:
    path, columns = str(obj["path"]), tuple(str(c) for c in obj["columns"])
    return BloomFile(
        path=path,
        size=int(obj["size"]),
        columns=columns,
        filters=tuple(
            BloomRef(int(b), path, int(o), int(n), columns) for b, o, n in obj["filters"]
        ),
    )


def index_file_to_json(index: IndexFile) -> dict[str, Any]:
    return {"path": index.path, "size": index.size, "column": index.column}


def index_file_from_json(obj: Mapping[str, Any]) -> IndexFile:
    return IndexFile(path=str(obj["path"]), size=int(obj["size"]), column=str(obj["column"]))


# --- actions ---------------------------------------------------------------------------------


def state_to_json(state: StateStored) -> dict[str, Any]:
    return {"name": state.name, "path": state.path, "size": state.size, "rows": state.rows}


def state_from_json(name: str, obj: Mapping[str, Any]) -> StateStored:
    return StateStored(
        name=str(name), path=str(obj["path"]), size=int(obj["size"]), rows=int(obj["rows"])
    )


def partition_from_json(obj: Any) -> tuple[Any, ...] | None:
    if obj is None:
        return None
    if not isinstance(obj, list) or any(isinstance(v, (list, dict)) for v in obj):
        raise ValueError(f"a segment's partition is a list of JSON scalars, not {obj!r}")
    return tuple(obj)


def metadata_to_json(m: TableMetadata) -> dict[str, Any]:
    out = {
        "table_id": m.table_id,
        "format_version": m.format_version,
        "schema": schema_to_json(m.schema),
        "sort_columns": list(m.sort_columns),
        "properties": dict(m.properties),
        "created_time": m.created_time,
    }
    if m.primary_key:
        out["primary_key"] = list(m.primary_key)
    if m.partition_by:
        out["partition_by"] = list(m.partition_by)
    if m.columns:
        out["columns"] = columns_to_json(m.columns, m.schema)
        out["last_column_id"] = m.last_column_id
    if m.dropped:
        out["dropped"] = dropped_to_json(m.dropped)
    return out


def metadata_from_json(obj: Mapping[str, Any]) -> TableMetadata:
    schema = schema_from_json(obj["schema"])
    return TableMetadata(
        table_id=obj["table_id"],
        format_version=obj["format_version"],
        schema=schema,
        sort_columns=tuple(obj.get("sort_columns", ())),
        properties=dict(obj.get("properties", {})),
        created_time=obj.get("created_time", 0),
        primary_key=tuple(obj.get("primary_key", ())),
        partition_by=tuple(obj.get("partition_by", ())),
        columns=columns_from_json(obj["columns"], schema) if "columns" in obj else (),
        dropped=dropped_from_json(obj.get("dropped", ())),
        last_column_id=int(obj.get("last_column_id", 0)),
    )


def _action_to_json(action: Action, types: Mapping[str, pa.DataType]) -> dict[str, Any]:
    if isinstance(action, TableMetadata):
        body: dict[str, Any] = metadata_to_json(action)
    elif isinstance(action, SegmentAdded):
        body = {
            "segment_id": action.segment_id,
            "format": action.format,
            "status": action.status,
            "level": action.level,
            "sorted_by": list(action.sorted_by),
        }
        if action.partition is not None:
            body["partition"] = list(action.partition)
        if action.content_hash is not None:
            body["content_hash"] = action.content_hash
    elif isinstance(action, StateStored):
        body = state_to_json(action)
    elif isinstance(action, BlockletsAppended):
        body = {
            "segment_id": action.segment_id,
            "file": action.file,
            "start": action.start,
            "end": action.end,
            "blocklets": [_blocklet_to_json(b, types) for b in action.blocklets],
        }
        if action.blooms:
            body["blooms"] = [bloom_file_to_json(b) for b in action.blooms]
        if action.indexes:
            body["indexes"] = [index_file_to_json(i) for i in action.indexes]
    elif isinstance(action, SegmentStatusChanged):
        body = {"segment_id": action.segment_id, "status": action.status}
        if action.merged_into is not None:
            body["merged_into"] = action.merged_into
    elif isinstance(action, FilesRemoved):
        body = {"segment_id": action.segment_id, "files": list(action.files)}
    elif isinstance(action, RowsDeleted):
        body = {
            "segment_id": action.segment_id,
            "file": action.file,
            "size": action.size,
            "vectors": [deletion_ref_to_json(v) for v in action.vectors],
        }
    elif isinstance(action, BloomFiltersAdded):
        body = {
            "segment_id": action.segment_id,
            "file": action.file,
            "blooms": bloom_file_to_json(action.blooms),
        }
    elif isinstance(action, IndexesAdded):
        body = {
            "segment_id": action.segment_id,
            "file": action.file,
            "indexes": [index_file_to_json(i) for i in action.indexes],
        }
    elif isinstance(action, TxnMarker):
        body = {"app_id": action.app_id, "batch_id": action.batch_id}
    elif isinstance(action, CommitInfo):
        body = {
            "operation": action.operation,
            "timestamp": action.timestamp,
            "data_change": action.data_change,
            "read_version": action.read_version,
            "rows_added": action.rows_added,
            "rows_removed": action.rows_removed,
            "bytes_added": action.bytes_added,
            "bytes_removed": action.bytes_removed,
            "parameters": dict(action.parameters),
            "engine": action.engine,
        }
        if action.commit_id:
            body["commit_id"] = action.commit_id
        if action.parent_commit_id:
            body["parent_commit_id"] = action.parent_commit_id
        for key in _OPTIONAL_COMMIT_METRICS:  # written when known; absent in older versions
            value = getattr(action, key)
            if value is not None:
                body[key] = value
    else:  # pragma: no cover - the Action union is closed
        raise TypeError(f"not a log action: {action!r}")
    return {_KEYS[type(action)]: body}


def encode_actions(actions: list[Action], schema: pa.Schema) -> bytes:
    """One log version as NDJSON, sealed; ``schema`` is the schema in force (the new one if
    the version changes it). The last action must be the version's :class:`CommitInfo`."""
    if not actions or not isinstance(actions[-1], CommitInfo):
        raise ValueError("a log version must end with its commitInfo")
    for a in actions:
        if isinstance(a, TableMetadata):
            schema = physical_schema(a)
    types = _types(schema)
    body = "\n".join(dumps(_action_to_json(a, types)) for a in actions).encode("utf-8")
    return seal(body, 2) + b"\n"


def _action_from_json(key: str, body: Mapping[str, Any], decoders: _Decoders) -> Action:
    if key == "metaData":
        return metadata_from_json(body)
    if key == "addSegment":
        return SegmentAdded(
            segment_id=body["segment_id"],
            format=body["format"],
            status=body["status"],
            level=body.get("level", 0),
            sorted_by=tuple(body.get("sorted_by", ())),
            partition=partition_from_json(body.get("partition")),
            content_hash=body.get("content_hash"),
        )
    if key == "storeState":
        return state_from_json(body["name"], body)
    if key == "appendBlocklets":
        return BlockletsAppended(
            segment_id=body["segment_id"],
            file=body["file"],
            start=body["start"],
            end=body["end"],
            blocklets=tuple(_blocklet_from_json(b, decoders) for b in body["blocklets"]),
            blooms=tuple(bloom_file_from_json(b) for b in body.get("blooms", ())),
            indexes=tuple(index_file_from_json(i) for i in body.get("indexes", ())),
        )
    if key == "setSegmentStatus":
        return SegmentStatusChanged(
            segment_id=body["segment_id"],
            status=body["status"],
            merged_into=body.get("merged_into"),
        )
    if key == "removeFiles":
        return FilesRemoved(segment_id=body["segment_id"], files=tuple(body["files"]))
    if key == "deleteRows":
        return RowsDeleted(
            segment_id=body["segment_id"],
            file=body["file"],
            vectors=tuple(deletion_ref_from_json(v) for v in body["vectors"]),
            size=int(body["size"]),
        )
    if key == "addBloomFilters":
        return BloomFiltersAdded(
            segment_id=body["segment_id"],
            file=body["file"],
            blooms=bloom_file_from_json(body["blooms"]),
        )
    if key == "addIndexes":
        return IndexesAdded(
            segment_id=body["segment_id"],
            file=body["file"],
            indexes=tuple(index_file_from_json(i) for i in body["indexes"]),
        )
    if key == "txn":
        return TxnMarker(app_id=body["app_id"], batch_id=body["batch_id"])
    if key == "commitInfo":
        return CommitInfo(
            operation=body["operation"],
            timestamp=body["timestamp"],
            data_change=body["data_change"],
            read_version=body.get("read_version"),
            rows_added=body.get("rows_added", 0),
            rows_removed=body.get("rows_removed", 0),
            bytes_added=body.get("bytes_added", 0),
            bytes_removed=body.get("bytes_removed", 0),
            parameters=dict(body.get("parameters", {})),
            engine=body.get("engine", ""),
            commit_id=body.get("commit_id", ""),
            parent_commit_id=body.get("parent_commit_id", ""),
            files_added=body.get("files_added"),
            files_removed=body.get("files_removed"),
            duration_ms=body.get("duration_ms"),
            writer_id=body.get("writer_id"),
        )
    raise ValueError(f"unknown log action {key!r}")  # decode_actions refuses these first


def decode_actions(
    data: bytes, schema: pa.Schema | None, *, where: str, format_version: int | None = None
) -> list[Action]:
    """Parse one log version, checking its seal. ``schema`` is the schema in force before it
    and ``format_version`` the table's (both None for version 0, which holds them).

    Raises :class:`CorruptDataError` naming ``where`` for anything damaged: a seal that does
    not match, a missing seal (format 2 on) or closing ``commitInfo``, an action this format
    does not have, a line that does not parse; :class:`UnsupportedFormatError` for a table of
    a newer format.
    """
    text = data[:-1] if data.endswith(b"\n") else data
    try:
        body = unseal(text, 2)
    except SealMismatchError as exc:
        raise CorruptDataError(
            f"log version is damaged ({exc}); restore the file from a backup or copy of the "
            "table, nothing was read from it",
            path=where,
        ) from None
    try:
        entries = []
        for n, line in enumerate((text if body is None else body).decode("utf-8").split("\n"), 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            if not isinstance(obj, dict) or len(obj) != 1:
                raise ValueError(f"line {n} is not an object with one action key")
            entries.append(next(iter(obj.items())))
        # A version is encoded with the schema it ends with (see encode_actions).
        for key, value in entries:
            if key == "metaData":
                schema = physical_schema(metadata_from_json(value))
                declared = int(value["format_version"])  # a version may raise the format
                format_version = max(format_version or declared, declared)
    except (ValueError, KeyError, TypeError, AttributeError, ArithmeticError) as exc:
        raise CorruptDataError(f"log entry does not parse: {exc!r}", path=where) from None
    format_version = LOG_FORMAT_VERSION if format_version is None else format_version
    if format_version > LOG_FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"{where} belongs to a table of log format version {format_version}; this "
            f"CarbonLite reads up to {LOG_FORMAT_VERSION}: upgrade carbonlite to read it"
        )
    if body is None and format_version >= SEALED_FORMAT_VERSION:
        raise CorruptDataError(
            "log version carries no checksum seal (cut short or damaged); restore the file from "
            "a backup or copy of the table, nothing was read from it",
            path=where,
        )
    unknown = sorted(
        key
        for key in {key for key, _ in entries}
        if key not in _KEYS.values() or _SINCE_FORMAT.get(key, 1) > format_version
    )
    if unknown:
        raise CorruptDataError(
            f"log version holds actions {unknown} that log format version {format_version} does "
            "not have: the file is damaged (a newer CarbonLite would have raised the table's "
            "format version)",
            path=where,
        )
    try:
        decoders = _schema_decoders(schema) if schema is not None else {}
        actions = [_action_from_json(key, value, decoders) for key, value in entries]
    except (ValueError, KeyError, TypeError, AttributeError, ArithmeticError) as exc:
        raise CorruptDataError(f"log entry does not parse: {exc!r}", path=where) from None
    if not actions or not isinstance(actions[-1], CommitInfo):
        raise CorruptDataError(
            "log version does not end with its commitInfo (cut short or damaged); restore the "
            "file from a backup or copy of the table, nothing was read from it",
            path=where,
        )
    return actions


def decode_commit_info(data: bytes, *, where: str) -> CommitInfo:
    """Only the closing ``commitInfo`` of one log version (seal checked): what ``history``
    and time travel by timestamp need, without decoding the version's other actions."""
    text = data[:-1] if data.endswith(b"\n") else data
    try:
        body = unseal(text, 2)
    except SealMismatchError as exc:
        raise CorruptDataError(f"log version is damaged ({exc})", path=where) from None
    last = (text if body is None else body).rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        obj = json.loads(last)
        info = _action_from_json("commitInfo", obj["commitInfo"], {})
    except (ValueError, KeyError, TypeError, AttributeError, ArithmeticError) as exc:
        raise CorruptDataError(
            f"log version does not end with a commitInfo that parses: {exc!r}", path=where
        ) from None
    assert isinstance(info, CommitInfo)
    return info
