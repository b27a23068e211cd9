"""Iceberg metadata for a version of a CarbonLite table (docs/ICEBERG.md).

The Iceberg view of version V holds the rows of its columnar Parquet files (handed-off and
compacted segments; the streaming tail is not Parquet and is not in it), less the rows its
deletion vectors delete, in V's schema. :func:`export_version` writes it in Iceberg's
file-system layout under ``<table>/metadata/``:

- one manifest per columnar segment (``seg-<segment>-<digest>.avro``), written when the
  segment first appears and named again by every later snapshot while the segment lives;
- for each data file with deleted rows, a position-delete Parquet file of its deleted
  positions (``del-<digest>.parquet``; a position counts the rows of the file's earlier row
  groups), all in one delete manifest per distinct set of them;
- the snapshot's manifest list ``snap-<id>.avro``, then ``v<N>.metadata.json``, created
  with a conditional put (never a rename), then ``version-hint.text``.

Snapshot ids and sequence numbers are the CarbonLite version plus one, and each snapshot's
summary carries ``carbonlite.version``. A version whose view equals the last exported one
writes nothing. Every name is a digest of what the file holds, so writing it again after a
crash writes the same bytes, and a later export catches up with any version skipped.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from carbonlite.errors import CarbonLiteError
from carbonlite.format.types import stat_kind
from carbonlite.iceberg.manifests import (
    DATA,
    POSITION_DELETES,
    DataFileEntry,
    ManifestFile,
    manifest_bytes,
    manifest_list_bytes,
)
from carbonlite.iceberg.partitions import Partitioning, partitioning
from carbonlite.iceberg.puffin import (
    PuffinBlob,
    deletion_vector_blob,
    puffin_blobs,
    puffin_file,
)
from carbonlite.iceberg.schema import (
    check_iceberg_schema,
    iceberg_schema,
    last_column_id,
    name_mapping,
)
from carbonlite.metadata.columns import column_ids, layout_of
from carbonlite.properties import TableProperties
from carbonlite.reader.parquet_view import deleted_positions, parquet_files
from carbonlite.storage import Storage

__all__ = [
    "METADATA_DIR",
    "IcebergState",
    "NamedFiles",
    "export_version",
    "iceberg_format",
    "named_files",
    "read_state",
    "stale_metadata_files",
]

METADATA_DIR = "metadata"
METADATA_LOG_MAX = 100
"""Entries of ``metadata-log`` kept (Iceberg's ``write.metadata.previous-versions-max``)."""
EXPORT_ATTEMPTS = 5
_HINT = "version-hint.text"
_FILE_PATH_ID, _POS_ID = 2147483546, 2147483545


def iceberg_format(properties: Mapping[str, str]) -> int | None:
    """The Iceberg format version the table publishes (None: ``iceberg`` is off)."""
    value = TableProperties(properties).iceberg
    return None if value == "off" else int(value[1:])


@dataclass(frozen=True)
class IcebergState:
    """The last Iceberg metadata written for a table."""

    metadata_version: int
    carbonlite_version: int
    snapshots: int
    path: str


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:20]


def read_state(storage: Storage, root: str) -> tuple[IcebergState, dict[str, Any]] | None:
    """The newest Iceberg metadata of the table (None: none was written yet)."""
    meta = storage.join(root, METADATA_DIR)
    try:
        hint = int(storage.read(storage.join(meta, _HINT)).decode().strip())
    except (FileNotFoundError, ValueError):
        hint = 0
    n = hint
    while storage.exists(storage.join(meta, f"v{n + 1}.metadata.json")):  # a hint not moved
        n += 1
    if n == 0:
        return None
    path = storage.join(meta, f"v{n}.metadata.json")
    doc = json.loads(storage.read(path))
    current = next(
        (s for s in doc.get("snapshots", []) if s["snapshot-id"] == doc.get("current-snapshot-id")),
        None,
    )
    version = -1 if current is None else int(current["summary"]["carbonlite.version"])
    return IcebergState(n, version, len(doc.get("snapshots", [])), path), doc


# --- the view ------------------------------------------------------------------------------


def _bound(kind: str | None, t: pa.DataType, value: Any) -> bytes | None:
    """Iceberg's single-value binary form of a statistics bound (None: not given)."""
    if value is None:
        return None
    if kind == "int":
        if (
            pa.types.is_date32(t)
            or pa.types.is_int32(t)
            or pa.types.is_int16(t)
            or pa.types.is_int8(t)
        ):
            return struct.pack("<i", int(value))
        return struct.pack("<q", int(value))
    if kind == "bool":
        return b"\x01" if value else b"\x00"
    if kind == "string":
        return str(value).encode("utf-8")
    if kind == "binary" and not pa.types.is_fixed_size_binary(t):
        return bytes(value)
    return None  # floats (NaN), decimals and fixed binaries: no bounds, no pruning


def _data_entry(
    storage: Storage, root: str, f: Any, metadata: Any, partition: Mapping[str, Any]
) -> DataFileEntry:
    """The manifest entry of the Parquet file ``f``: rows, size and per-column metrics
    merged from its blocklets' statistics (keyed by physical name)."""
    blocklets = f.blocklets
    rows = sum(b.num_rows for b in blocklets)
    layout = layout_of(metadata)
    values, nulls, lower, upper = {}, {}, {}, {}
    for field, cid in zip(metadata.schema, column_ids(metadata), strict=True):
        if pa.types.is_nested(field.type):
            continue
        physical = layout.physical(field.name)
        stats = [b.stats.get(physical) for b in blocklets]
        if not stats or any(s is None for s in stats):
            continue
        values[cid] = rows
        nulls[cid] = sum(s.null_count for s in stats)
        kind = stat_kind(field.type)
        valued = [
            (b, s) for b, s in zip(blocklets, stats, strict=True) if s and s.null_count < b.num_rows
        ]
        if valued and all(s.min is not None for _, s in valued):  # every value bounded
            lo = _bound(kind, field.type, min(s.min for _, s in valued))
            if lo is not None:
                lower[cid] = lo
        if valued and all(s.max is not None for _, s in valued):
            hi = _bound(kind, field.type, max(s.max for _, s in valued))
            if hi is not None:
                upper[cid] = hi
    return DataFileEntry(
        path=storage.uri(storage.join(root, f.path)),
        record_count=rows,
        size=f.committed_length,
        content=DATA,
        value_counts=values,
        null_counts=nulls,
        lower_bounds=lower,
        upper_bounds=upper,
        split_offsets=tuple(b.offset for b in blocklets),
        partition=partition,
        sequence_number=f.created_version + 1,
    )


@dataclass(frozen=True)
class _Deleted:
    """The rows deleted from one data file of the view, as its deletion vectors in the log
    say (the vectors themselves are read only to write a delete file not written yet)."""

    file: Any
    """The data file's ``FileState``."""
    uri: str
    partition: Mapping[str, Any]
    rows: int
    key: str
    """A digest of the data file and its deletion vectors' places: the same rows deleted."""

    def positions(self, storage: Storage, root: str) -> np.ndarray:
        return deleted_positions(storage, root, self.file)


def _deleted(storage: Storage, root: str, f: Any, partition: Mapping[str, Any]) -> _Deleted | None:
    """The deleted rows of data file ``f`` (None: none)."""
    items = f.deletion_items() if f.deletions else ()
    rows = sum(ref.cardinality for _, ref in items)
    if not rows:
        return None
    uri = storage.uri(storage.join(root, f.path))
    key = _digest(uri, [(b, ref.path, ref.offset, ref.length) for b, ref in items])
    return _Deleted(f, uri, partition, rows, key)


def _position_delete_file(storage: Storage, root: str, d: _Deleted) -> DataFileEntry:
    """The position-delete file of the rows deleted from one data file (written unless the
    file of the same deletion vectors is there: only then are they read)."""
    name = f"del-{d.key}.parquet"
    rel = storage.join(root, METADATA_DIR, name)
    schema = pa.schema(
        [
            pa.field(
                "file_path", pa.string(), False, {b"PARQUET:field_id": str(_FILE_PATH_ID).encode()}
            ),
            pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": str(_POS_ID).encode()}),
        ]
    )
    found = storage.exists(rel)
    if not found or not _parquet_tail_intact(storage, rel):
        positions = d.positions(storage, root)
        table = pa.table(
            [pa.array([d.uri] * len(positions), pa.string()), pa.array(np.sort(positions))],
            schema=schema,
        )
        out = io.BytesIO()
        pq.write_table(table, out, compression="zstd")
        _put_named(storage, rel, out.getvalue(), replace=found)
    return DataFileEntry(
        path=storage.uri(rel),
        record_count=d.rows,
        size=storage.size(rel),
        content=POSITION_DELETES,
        lower_bounds={_FILE_PATH_ID: d.uri.encode()},
        upper_bounds={_FILE_PATH_ID: d.uri.encode()},
        partition=d.partition,
        sequence_number=d.file.deletion_version + 1,
    )


def _deletion_vectors(
    storage: Storage, root: str, deleted: Sequence[_Deleted]
) -> list[DataFileEntry]:
    """Iceberg v3: the deleted positions of each data file as a deletion vector, all in one
    Puffin file, named by the deletion vectors it holds (written unless it is there: only
    then are they read; else its footer says where each blob lies)."""
    if not deleted:
        return []
    name = f"dv-{_digest(sorted(d.key for d in deleted))}.puffin"
    rel = storage.join(root, METADATA_DIR, name)
    size = storage.size(rel) if storage.exists(rel) else 0
    placed = _placed(storage, rel, size) if size else None
    if placed is None:
        blobs = []
        deleted = sorted(deleted, key=lambda d: d.key)  # the file: a function of its name
        for d in deleted:
            positions = np.sort(d.positions(storage, root))
            blobs.append(
                (
                    deletion_vector_blob(positions),
                    {"referenced-data-file": d.uri, "cardinality": str(len(positions))},
                )
            )
        data, where = puffin_file(blobs)
        _put_named(storage, rel, data, replace=size > 0)
        placed = {d.uri: w for d, w in zip(deleted, where, strict=True)}
        size = len(data)
    return [
        DataFileEntry(
            path=storage.uri(rel),
            record_count=d.rows,
            size=size,
            content=POSITION_DELETES,
            file_format="PUFFIN",
            referenced_data_file=d.uri,
            content_offset=placed[d.uri].offset,
            content_size=placed[d.uri].length,
            partition=d.partition,
            sequence_number=d.file.deletion_version + 1,
        )
        for d in deleted
    ]


def _put_named(storage: Storage, rel: str, data: bytes, *, replace: bool) -> None:
    """Write a delete file whose name stands for its bytes (the digest of the deletion
    vectors it holds). ``replace``: a file found under the name is damaged (no footer could
    be read), and is overwritten: any writer of the name writes these same bytes, so no
    reader's file changes but a broken one."""
    if replace:
        storage.put(rel, data)
    else:
        storage.put_if_absent(rel, data)


def _parquet_tail_intact(storage: Storage, rel: str) -> bool:
    """Whether the Parquet file ``rel`` ends as one does: its footer's length, which fits
    the file, then the magic ``PAR1`` (a truncated or overwritten file does not)."""
    size = storage.size(rel)
    if size < 12:
        return False
    tail = storage.read(rel, size - 8, size)
    return tail[4:] == b"PAR1" and int.from_bytes(tail[:4], "little") + 12 <= size


def _placed(storage: Storage, rel: str, size: int) -> dict[str, PuffinBlob] | None:
    """Where each blob of the Puffin file ``rel`` (of ``size`` bytes) lies, from its footer
    (None: no footer could be read, the file is damaged; the caller writes it again)."""
    want = 4096
    while True:
        tail = storage.read(rel, max(0, size - want), size)
        try:
            return puffin_blobs(tail)
        except ValueError:
            if want >= size:
                return None
            want *= 4


def _put_manifest(
    storage: Storage,
    root: str,
    name: str,
    entries: Sequence[DataFileEntry],
    *,
    content: int,
    snapshot_id: int,
    schema: Mapping[str, Any],
    parts: Partitioning,
    version: int,
) -> ManifestFile:
    """The manifest ``name`` of ``entries`` (its name a digest of them: written once, named
    again by later snapshots)."""
    rel = storage.join(root, METADATA_DIR, name)
    if not storage.exists(rel):
        data = manifest_bytes(
            entries,
            schema=schema,
            content=content,
            partition_fields=parts.avro_fields(),
            partition_spec=parts.spec_json(),
            format_version=version,
        )
        storage.put(rel, data)
    numbers = [e.sequence_number for e in entries]
    return ManifestFile(
        path=storage.uri(rel),
        length=storage.size(rel),
        content=content,
        sequence_number=max(numbers),
        min_sequence_number=min(numbers),
        added_snapshot_id=snapshot_id,
        files=len(entries),
        rows=sum(e.record_count for e in entries),
        partitions=parts.summaries([e.partition for e in entries]),
    )


def _fingerprint(snapshot: Any, schema: Mapping[str, Any]) -> str:
    files = [(f.path, f.committed_length, f.deletion_version) for _, f in parquet_files(snapshot)]
    return _digest(files, schema["fields"])


# --- the metadata document -------------------------------------------------------------------


class _LostRace(Exception):
    """Another writer created the metadata document this export was to create."""


def export_version(storage: Storage, root: str, snapshot: Any) -> IcebergState | None:
    """Write the Iceberg metadata of ``snapshot`` (None: nothing to write, the view is the
    one already exported, or a newer version was exported). Two writers exporting at once:
    the one whose document another created first reads the metadata again and exports on
    it (its version may be the newer one)."""
    for _ in range(EXPORT_ATTEMPTS):
        try:
            return _export(storage, root, snapshot)
        except _LostRace:
            continue
    raise CarbonLiteError(
        f"the Iceberg metadata of version {snapshot.version} of {storage.uri(root)} lost "
        f"{EXPORT_ATTEMPTS} races to other writers' in a row; the next commit or sync_iceberg() "
        "catches up"
    )


def _export(storage: Storage, root: str, snapshot: Any) -> IcebergState | None:
    """One attempt of :func:`export_version` (:class:`_LostRace`: another writer created
    the document first)."""
    version = iceberg_format(snapshot.properties)
    if version is None:
        return None
    where = storage.uri(root)
    check_iceberg_schema(snapshot.metadata, where, version)
    found = read_state(storage, root)
    state, doc = found if found is not None else (None, None)
    if state is not None and state.carbonlite_version >= snapshot.version:
        return None
    schemas = list(doc["schemas"]) if doc else []
    fields = iceberg_schema(snapshot.metadata, version=version)["fields"]
    schema_id = next((s["schema-id"] for s in schemas if s["fields"] == fields), None)
    if schema_id is None:
        schema_id = max((s["schema-id"] for s in schemas), default=-1) + 1
        schemas.append({"type": "struct", "schema-id": schema_id, "fields": fields})
    schema = {"type": "struct", "schema-id": schema_id, "fields": fields}
    fingerprint = _fingerprint(snapshot, schema)
    props = dict(doc.get("properties", {})) if doc else {}
    if (
        doc is not None
        and props.get("carbonlite.view") == fingerprint
        and doc.get("format-version") == version
    ):
        return None
    snapshot_id = snapshot.version + 1
    parts = partitioning(snapshot.metadata)
    manifests = _manifests(storage, root, snapshot, schema, snapshot_id, parts, version)
    first_row_id = int(doc.get("next-row-id", 0)) if doc else 0
    added_rows = 0
    known = json.loads(props.pop(ROW_IDS_PROPERTY, "{}"))
    if version >= 3:
        manifests, added_rows = _with_row_ids(manifests, known, first_row_id)
        props[ROW_IDS_PROPERTY] = json.dumps(
            {m.rows_key: m.first_row_id for m in manifests if m.rows_key is not None},
            separators=(",", ":"),
        )
    list_rel = storage.join(root, METADATA_DIR, f"snap-{snapshot_id}-{_digest(fingerprint)}.avro")
    parent = doc.get("current-snapshot-id") if doc else None
    storage.put(
        list_rel,
        manifest_list_bytes(
            manifests,
            snapshot_id=snapshot_id,
            parent_id=parent,
            sequence_number=snapshot_id,
            format_version=version,
        ),
    )
    rows = sum(m.rows for m in manifests if m.content == DATA)
    deleted = sum(m.rows for m in manifests if m.content == POSITION_DELETES)
    entry = {
        "snapshot-id": snapshot_id,
        "sequence-number": snapshot_id,
        "timestamp-ms": snapshot.timestamp,
        "manifest-list": storage.uri(list_rel),
        "summary": {
            "operation": "overwrite",
            "carbonlite.version": str(snapshot.version),
            "total-records": str(rows),
            "total-position-deletes": str(deleted),
            "total-data-files": str(sum(m.files for m in manifests if m.content == DATA)),
        },
        "schema-id": schema_id,
    }
    if parent is not None:
        entry["parent-snapshot-id"] = parent
    n = (state.metadata_version if state else 0) + 1
    snapshots = [*_kept(doc, snapshot), entry]
    props.update({"schema.name-mapping.default": name_mapping(snapshot.metadata)})
    props["carbonlite.view"] = fingerprint
    meta_rel = storage.join(root, METADATA_DIR, f"v{n}.metadata.json")
    if version >= 3:
        entry.update({"first-row-id": first_row_id, "added-rows": added_rows})
    document = {
        "format-version": version,
        "table-uuid": str(uuid.UUID(hex=snapshot.metadata.table_id[:32].ljust(32, "0"))),
        "location": where,
        "last-sequence-number": snapshot_id,
        "last-updated-ms": snapshot.timestamp,
        "last-column-id": max(
            last_column_id(snapshot.metadata), doc.get("last-column-id", 0) if doc else 0
        ),
        "current-schema-id": schema_id,
        "schemas": schemas,
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": parts.spec_json()}],
        "last-partition-id": parts.last_field_id,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": props,
        "current-snapshot-id": snapshot_id,
        "refs": {"main": {"snapshot-id": snapshot_id, "type": "branch"}},
        **({"next-row-id": first_row_id + added_rows} if version >= 3 else {}),
        "snapshots": snapshots,
        "snapshot-log": [
            {"snapshot-id": s["snapshot-id"], "timestamp-ms": s["timestamp-ms"]} for s in snapshots
        ],
        "metadata-log": (
            [
                *doc.get("metadata-log", []),
                {"metadata-file": storage.uri(state.path), "timestamp-ms": doc["last-updated-ms"]},
            ][-METADATA_LOG_MAX:]
            if doc and state
            else []
        ),
    }
    if not storage.put_if_absent(meta_rel, json.dumps(document, indent=1).encode()):
        raise _LostRace(storage.uri(meta_rel))
    storage.put(storage.join(root, METADATA_DIR, _HINT), str(n).encode())
    return IcebergState(n, snapshot.version, len(snapshots), meta_rel)


ROW_IDS_PROPERTY = "carbonlite.row-ids"
"""The metadata document's property that keeps, for v3 row lineage, the first row id of each
live segment's rows (JSON: rows key -> first row id), so a manifest of the same rows,
written again after a schema change, keeps their ids."""


def _with_row_ids(
    manifests: Sequence[ManifestFile], known: Mapping[str, int], next_row_id: int
) -> tuple[list[ManifestFile], int]:
    """``manifests`` with v3 row lineage (Iceberg's first-row-id inheritance): a data manifest
    of rows the export before gave ids keeps them; one of new rows takes the table's next row
    id, which then moves on by its rows. Returns them and the rows given new ids (the
    snapshot's ``added-rows``)."""
    out = []
    added = 0
    for m in manifests:
        if m.content != DATA:
            out.append(m)
        elif m.rows_key is not None and m.rows_key in known:
            out.append(replace(m, first_row_id=known[m.rows_key]))
        else:
            out.append(replace(m, first_row_id=next_row_id + added))
            added += m.rows
    return out, added


def _kept(doc: Mapping[str, Any] | None, snapshot: Any) -> list[dict[str, Any]]:
    """The earlier Iceberg snapshots still kept: those younger than the table's log
    retention and its deleted-data retention, whichever is shorter (so ``clean`` keeps
    their files)."""
    if not doc:
        return []
    props = TableProperties(snapshot.properties)
    keep_ms = 1000 * min(props.log_retention, props.deleted_data_retention)
    horizon = snapshot.timestamp - keep_ms
    return [s for s in doc.get("snapshots", []) if s["timestamp-ms"] >= horizon]


def _manifests(
    storage: Storage,
    root: str,
    snapshot: Any,
    schema: Mapping[str, Any],
    snapshot_id: int,
    parts: Partitioning,
    version: int,
) -> list[ManifestFile]:
    """A manifest of each segment's data files, and one of every delete file (v2: position
    delete files; v3: deletion vectors, all in one Puffin file)."""
    by_segment: dict[str, list[Any]] = {}
    segments = {}
    for seg, f in parquet_files(snapshot):
        by_segment.setdefault(seg.segment_id, []).append(f)
        segments[seg.segment_id] = seg
    out = []
    deleted: list[_Deleted] = []
    for segment_id, files in by_segment.items():
        partition = parts.record(segments[segment_id].partition)
        rows_key = _digest([(f.path, f.committed_length) for f in files])
        digest = _digest(rows_key, schema["fields"], partition, version)
        entries = [_data_entry(storage, root, f, snapshot.metadata, partition) for f in files]
        manifest = _put_manifest(
            storage,
            root,
            f"seg-{segment_id}-{digest}.avro",
            entries,
            content=DATA,
            snapshot_id=snapshot_id,
            schema=schema,
            parts=parts,
            version=version,
        )
        out.append(replace(manifest, rows_key=rows_key))
        for f in files:
            d = _deleted(storage, root, f, partition)
            if d is not None:
                deleted.append(d)
    if version >= 3:
        deletes = _deletion_vectors(storage, root, deleted)
    else:
        deletes = [_position_delete_file(storage, root, d) for d in deleted]
    if deletes:
        name = f"dels-{_digest(sorted((d.path, d.sequence_number) for d in deletes))}.avro"
        out.append(
            _put_manifest(
                storage,
                root,
                name,
                deletes,
                content=POSITION_DELETES,
                snapshot_id=snapshot_id,
                schema=schema,
                parts=parts,
                version=version,
            )
        )
    return out


@dataclass(frozen=True)
class NamedFiles:
    """What the Iceberg snapshots kept in the newest metadata name."""

    data_files: frozenset[str]
    """Data files (relative to the table root) a kept snapshot reads."""
    metadata_files: frozenset[str]
    """Files under ``metadata/`` a kept snapshot or the newest metadata needs (storage paths)."""
    exported_version: int = -1
    """The CarbonLite version of the newest Iceberg snapshot: an export of an older version
    still pending (a post-commit step running late) writes nothing once this one exists."""

    def may_name(self, segment: Any) -> bool:
        """Whether an Iceberg snapshot, kept or yet to be written, may read ``segment``'s
        files: one a kept snapshot names, or one retired after the newest exported version
        (a version before its retirement may still be exported, naming it)."""
        return bool(self.data_files.intersection(segment.files)) or (
            segment.status_version > self.exported_version
        )


def _records(data: bytes) -> list[dict[str, Any]]:
    """The records of an Avro file."""
    return [r for r in fastavro.reader(io.BytesIO(data)) if isinstance(r, dict)]


def named_files(storage: Storage, root: str) -> NamedFiles | None:
    """The files the kept Iceberg snapshots name (None: the table has no Iceberg metadata)."""
    found = read_state(storage, root)
    if found is None:
        return None
    state, doc = found
    base = storage.uri(root).rstrip("/") + "/"
    meta = storage.join(root, METADATA_DIR)

    def path_of(uri: str) -> str:
        return storage.join(root, uri[len(base) :]) if uri.startswith(base) else uri

    data: set[str] = set()
    kept = {state.path, storage.join(meta, _HINT)}
    for snap in doc.get("snapshots", []):
        listed = path_of(snap["manifest-list"])
        kept.add(listed)
        for manifest in _records(storage.read(listed)):
            mpath = path_of(manifest["manifest_path"])
            kept.add(mpath)
            for entry in _records(storage.read(mpath)):
                file_path = entry["data_file"]["file_path"]
                if manifest["content"] == DATA:
                    data.add(file_path[len(base) :] if file_path.startswith(base) else file_path)
                else:
                    kept.add(path_of(file_path))
    return NamedFiles(frozenset(data), frozenset(kept), state.carbonlite_version)


def stale_metadata_files(
    storage: Storage, root: str, named: NamedFiles, min_age_ms: int, now_ms: int
) -> list[str]:
    """Manifests, manifest lists and delete files under ``metadata/`` that no kept snapshot
    names, older than ``min_age_ms`` (an export running now may have just written them and
    not yet its metadata). Metadata documents (``v<N>.metadata.json``) are kept."""
    try:
        listing = storage.list(storage.join(root, METADATA_DIR))
    except FileNotFoundError:
        return []
    out = []
    for status in listing:
        name = status.path.rsplit("/", 1)[-1]
        if name.endswith(".metadata.json") or name == _HINT:
            continue
        if status.path not in named.metadata_files and status.mtime * 1000 <= now_ms - min_age_ms:
            out.append(status.path)
    return out
