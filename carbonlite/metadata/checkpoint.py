"""Checkpoints: the table state at one version in one small JSON document (docs/LOG.md).

Format 3 (``encode_checkpoint``): the document holds metadata, transactions, segments and
their files (with counts), and the list of *manifests* (``manifest.py``) where the blocklet
entries live; it never holds entries itself, so its size follows the number of live files,
not blocklets. Formats 1 and 2 (``encode_legacy_checkpoint``, kept for tables not yet
upgraded): the same document plus one blocklet index of every entry, rewritten whole each time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import immutables

from carbonlite.errors import CorruptDataError
from carbonlite.format.layout import crc32c
from carbonlite.metadata.actions import (
    LOG_FORMAT_VERSION,
    SEALED_FORMAT_VERSION,
    BlockletEntry,
    BloomFile,
    BloomRef,
    TableMetadata,
)
from carbonlite.metadata.blocklet_index import encode_blocklet_index
from carbonlite.metadata.columns import physical_schema
from carbonlite.metadata.manifest import ManifestRef, ManifestSet, ManifestStore
from carbonlite.metadata.pmap import OrderedMap
from carbonlite.metadata.seal import SealMismatchError, seal, unseal
from carbonlite.metadata.serde import (
    bloom_file_from_json,
    bloom_file_to_json,
    deletion_ref_from_json,
    deletion_ref_to_json,
    dumps,
    index_file_from_json,
    index_file_to_json,
    metadata_from_json,
    metadata_to_json,
    partition_from_json,
    state_from_json,
    state_to_json,
    stats_from_json,
    stats_to_json,
)
from carbonlite.metadata.snapshot import FileState, SegmentState, Snapshot
from carbonlite.names import check_checkpoint_names, check_log_name, check_log_path

__all__ = [
    "MANIFEST_FORMAT_VERSION",
    "decode_checkpoint",
    "encode_checkpoint",
    "encode_legacy_checkpoint",
]

MANIFEST_FORMAT_VERSION = 3
"""The first table format whose checkpoints reference manifests."""


def _segment_to_json(seg: SegmentState, files: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "segment_id": seg.segment_id,
        "format": seg.format,
        "status": seg.status,
        "level": seg.level,
        "sorted_by": list(seg.sorted_by),
        "created_version": seg.created_version,
        "created_time": seg.created_time,
        "status_version": seg.status_version,
        "status_time": seg.status_time,
        "merged_into": seg.merged_into,
        "files_removed": seg.files_removed,
        "files": files,
    }
    if seg.partition is not None:
        out["partition"] = list(seg.partition)
    if seg.content_hash is not None:
        out["content_hash"] = seg.content_hash
    return out


def _file_to_json(f: FileState) -> dict[str, Any]:
    out: dict[str, Any] = {
        "path": f.path,
        "committed_length": f.committed_length,
        "created_version": f.created_version,
        "modified_version": f.modified_version,
        "rows": f.num_rows,
        "blocklets": f.num_blocklets,
        "bytes": f.blocklet_bytes,
    }
    if f.dv_files:  # format 4: only files that had rows deleted carry these
        out["deletion_version"] = f.deletion_version
        out["deletions"] = [deletion_ref_to_json(ref) for _, ref in f.deletion_items()]
        out["dv_files"] = dict(sorted(f.dv_files.items()))
    if f.bloom_files:  # format 7: only files with bloom filters carry these
        out["bloom_files"] = dict(sorted(f.bloom_files.items()))
        out["blooms"] = _blooms_to_json(f)
    if f.index_files:  # format 7: only files with secondary indexes carry these
        out["index_files"] = dict(sorted(f.index_files.items()))
        out["indexes"] = [index_file_to_json(i) for _, i in sorted(f.indexes.items())]
    return out


def _index_state(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The secondary index fields of a file's checkpoint entry, as ``FileState`` takes them."""
    if "index_files" not in obj:
        return {}
    index_files = {str(p): int(n) for p, n in obj["index_files"].items()}
    for path in index_files:
        check_log_path(path, what="secondary index file", where=where)
    indexes = [index_file_from_json(i) for i in obj["indexes"]]
    if any(i.path not in index_files for i in indexes):
        raise CorruptDataError(
            f"a secondary index of {obj['path']!r} lies in a file the checkpoint does not list",
            path=where,
        )
    return {
        "indexes": immutables.Map({i.column: i for i in indexes}),
        "index_files": immutables.Map(index_files),
    }


def _blooms_to_json(f: FileState) -> list[dict[str, Any]]:
    """A file's bloom filter records in force, grouped by bloom file."""
    groups: dict[str, BloomFile] = {}
    for _, ref in sorted(f.blooms.items()):
        g = groups.get(ref.path)
        filters = (*g.filters, ref) if g is not None else (ref,)
        groups[ref.path] = BloomFile(ref.path, f.bloom_files[ref.path], ref.columns, filters)
    out = []
    for g in groups.values():
        body = bloom_file_to_json(g)
        del body["size"]  # bloom_files has it
        out.append(body)
    return out


def _bloom_state(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The bloom filter fields of a file's checkpoint entry, as ``FileState`` takes them."""
    if "bloom_files" not in obj:
        return {}
    bloom_files = {str(p): int(n) for p, n in obj["bloom_files"].items()}
    for path in bloom_files:
        check_log_path(path, what="bloom filter file", where=where)
    refs: list[BloomRef] = []
    for group in obj["blooms"]:
        size = bloom_files.get(str(group["path"]))
        if size is None:
            raise CorruptDataError(
                f"bloom filters of {obj['path']!r} lie in a file the checkpoint does not list",
                path=where,
            )
        refs.extend(bloom_file_from_json({**group, "size": size}).filters)
    return {
        "blooms": immutables.Map({r.blocklet: r for r in refs}),
        "bloom_files": immutables.Map(bloom_files),
    }


def _deletion_state(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The deletion fields of a file's checkpoint entry, as ``FileState`` takes them."""
    if "dv_files" not in obj:
        return {}
    refs = [deletion_ref_from_json(r) for r in obj["deletions"]]
    dv_files = {str(p): int(n) for p, n in obj["dv_files"].items()}
    for path in dv_files:
        check_log_path(path, what="deletion-vector file", where=where)
    if any(r.path not in dv_files for r in refs):
        raise CorruptDataError(
            f"a deletion vector of {obj['path']!r} lies in a file the checkpoint does not list",
            path=where,
        )
    return {
        "deletions": immutables.Map({r.blocklet: r for r in refs}),
        "deletion_version": int(obj["deletion_version"]),
        "dv_files": immutables.Map(dv_files),
    }


def _ref_to_json(ref: ManifestRef, types: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": ref.name,
        "crc32c": ref.crc32c,
        "entries": ref.entries,
        "rows": ref.rows,
        "size": ref.size,
        "min_version": ref.min_version,
        "max_version": ref.max_version,
        "level": ref.level,
        "segments": list(ref.segments),
        "stats": stats_to_json(ref.stats, types),
    }


def _ref_from_json(obj: Mapping[str, Any], types: Mapping[str, Any], where: str) -> ManifestRef:
    check_log_name(obj["name"], what="manifest", where=where)
    return ManifestRef(
        name=obj["name"],
        crc32c=int(obj["crc32c"]),
        entries=int(obj["entries"]),
        rows=int(obj["rows"]),
        size=int(obj["size"]),
        min_version=int(obj["min_version"]),
        max_version=int(obj["max_version"]),
        level=int(obj["level"]),
        segments=tuple(obj["segments"]),
        stats=stats_from_json(obj.get("stats", {}), types),
    )


def _policy_count(snapshot: Snapshot) -> dict[str, Any]:
    """The checkpoint policy's count at the snapshot (``checkpoint_policy.py``)."""
    return {
        "replay_entries": snapshot.replay_entries,
        "recent_checkpoints": list(snapshot.recent_checkpoints),
    }


def _header(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "metadata": metadata_to_json(snapshot.metadata),
        "txns": dict(snapshot.txns),
        "data_version": snapshot.data_version,
        "row_change_version": snapshot.row_change_version,
        "next_segment": snapshot.next_segment,
        **({"commit_id": snapshot.commit_id} if snapshot.commit_id else {}),
        **(
            {"states": {n: state_to_json(st) for n, st in snapshot.states.items()}}
            if snapshot.states
            else {}
        ),
    }


def encode_checkpoint(snapshot: Snapshot, refs: tuple[ManifestRef, ...]) -> bytes:
    """The format 3 document of ``snapshot`` whose entries all lie in ``refs``."""
    types = {f.name: f.type for f in snapshot.physical_schema}
    doc = {
        "checkpoint": {
            "version": snapshot.version,
            "timestamp": snapshot.timestamp,
            **_policy_count(snapshot),
        },
        **_header(snapshot),
        "manifests": [_ref_to_json(r, types) for r in refs],
        "segments": [
            _segment_to_json(seg, [_file_to_json(f) for f in seg.files.values()])
            for seg in snapshot.segments.values()
        ],
    }
    return seal(dumps(doc).encode("utf-8"), 1)


def encode_legacy_checkpoint(snapshot: Snapshot, index_name: str) -> tuple[bytes, bytes]:
    """A format 1/2 checkpoint: (JSON document, blocklet index named ``index_name``)."""
    segments = []
    files: list[tuple[BlockletEntry, ...]] = []
    for seg in snapshot.segments.values():
        entries = []
        for f in seg.files.values():
            entry = _file_to_json(f)
            del entry["bytes"]
            entry["index"] = len(files)
            entries.append(entry)
            files.append(f.blocklets)
        segments.append(_segment_to_json(seg, entries))
    index = encode_blocklet_index(files, snapshot.physical_schema)
    header = _header(snapshot)  # next_segment too: older readers ignore it
    doc = {
        "checkpoint": {
            "version": snapshot.version,
            "timestamp": snapshot.timestamp,
            "blocklet_index": index_name,
            "blocklet_index_crc32c": crc32c(index),
            **_policy_count(snapshot),  # older readers ignore it
        },
        **header,
        "segments": segments,
    }
    return seal(dumps(doc).encode("utf-8"), 1), index


def decode_checkpoint(
    data: bytes,
    table_path: str,
    *,
    where: str,
    store: ManifestStore,
) -> Snapshot:
    """The snapshot of a checkpoint document (format 3, or 1 and 2). Manifests (or the old
    blocklet index) are read through ``store``, only when some entries are needed."""
    doc = _open_document(data, where)
    try:
        metadata = metadata_from_json(doc["metadata"])
        if (
            doc.get(_UNSEALED)
            and SEALED_FORMAT_VERSION <= metadata.format_version <= LOG_FORMAT_VERSION
        ):
            raise CorruptDataError("checkpoint carries no checksum seal (damaged)", path=where)
        legacy = "manifests" not in doc
        refs = _legacy_refs(doc, where) if legacy else _manifest_refs(doc, metadata, where)
        version = int(doc["checkpoint"]["version"])
        manifests = ManifestSet(refs, store, physical_schema(metadata), version)
        segments = _segments(doc["segments"], manifests, where)
        check_checkpoint_names(
            refs[0].name if legacy else "manifests",
            {k: v.files for k, v in segments.items()},
            where=where,
        )
        if legacy:
            segments = _forget_cleaned(segments)
        return _snapshot(doc, table_path, metadata, segments, manifests, legacy)
    except (ValueError, KeyError, TypeError, AttributeError, ArithmeticError) as exc:
        raise CorruptDataError(f"checkpoint does not parse: {exc!r}", path=where) from None


_UNSEALED = "\0unsealed"
"""Marks a document that came without a seal (a key no JSON document of ours carries)."""


def _open_document(data: bytes, where: str) -> dict[str, Any]:
    """The checkpoint's JSON document, its seal checked (documents of formats 1 and 2 have
    none: those are marked, and refused later if their format should have one)."""
    try:
        body = unseal(data, 1)
    except SealMismatchError as exc:
        raise CorruptDataError(f"checkpoint is damaged ({exc})", path=where) from None
    try:
        doc = json.loads((data if body is None else body).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptDataError(f"checkpoint does not parse: {exc!r}", path=where) from None
    if not isinstance(doc, dict):
        raise CorruptDataError("checkpoint does not parse: not a JSON object", path=where)
    if body is None:
        doc[_UNSEALED] = True
    return doc


def _legacy_refs(doc: dict[str, Any], where: str) -> tuple[ManifestRef, ...]:
    """Formats 1 and 2: one blocklet index file stands in for the manifests."""
    header = doc["checkpoint"]
    index_name = header["blocklet_index"]
    check_log_name(index_name, what="blocklet index", where=where)
    paths = tuple(f["path"] for s in doc["segments"] for f in s["files"])
    crc = header.get("blocklet_index_crc32c")
    return (
        ManifestRef(
            name=index_name,
            crc32c=-1 if crc is None else int(crc),
            entries=-1,
            rows=-1,
            size=-1,
            min_version=0,
            max_version=int(header["version"]),
            level=0,
            segments=(),
            legacy_paths=paths,
        ),
    )


def _manifest_refs(
    doc: dict[str, Any], metadata: TableMetadata, where: str
) -> tuple[ManifestRef, ...]:
    types = {f.name: f.type for f in physical_schema(metadata)}
    return tuple(_ref_from_json(r, types, where) for r in doc["manifests"])


def _segments(
    docs: list[dict[str, Any]], manifests: ManifestSet, where: str
) -> OrderedMap[str, SegmentState]:
    """Every segment of the document, its files' blocklets left in ``manifests``."""
    segments: OrderedMap[str, SegmentState] = OrderedMap()
    for s in docs:
        sid = s["segment_id"]
        files = OrderedMap((f["path"], _file_state(f, sid, manifests, where)) for f in s["files"])
        segments = segments.set(
            sid,
            SegmentState(
                segment_id=sid,
                format=s["format"],
                status=s["status"],
                level=s["level"],
                sorted_by=tuple(s.get("sorted_by", ())),
                created_version=s["created_version"],
                created_time=s["created_time"],
                status_version=s["status_version"],
                status_time=s["status_time"],
                merged_into=s.get("merged_into"),
                files=files,
                files_removed=s.get("files_removed", False),
                partition=partition_from_json(s.get("partition")),
                content_hash=s.get("content_hash"),
            ),
        )
    return segments


def _file_state(f: dict[str, Any], sid: str, manifests: ManifestSet, where: str) -> FileState:
    return FileState(
        path=f["path"],
        committed_length=f["committed_length"],
        blocklets=(),
        created_version=f["created_version"],
        modified_version=f["modified_version"],
        segment_id=sid,
        source=manifests,
        counts=(f["rows"], f["blocklets"], int(f.get("bytes", 0))),
        **_deletion_state(f, where),
        **_bloom_state(f, where),
        **_index_state(f, where),
    )


def _snapshot(
    doc: dict[str, Any],
    table_path: str,
    metadata: TableMetadata,
    segments: OrderedMap[str, SegmentState],
    manifests: ManifestSet,
    legacy: bool,
) -> Snapshot:
    header = doc["checkpoint"]
    found = doc.get("next_segment") if legacy else doc["next_segment"]
    return Snapshot(
        table_path=table_path,
        version=header["version"],
        timestamp=header["timestamp"],
        metadata=metadata,
        segments=segments,
        txns=doc.get("txns", {}),
        data_version=doc.get("data_version"),
        row_change_version=doc.get("row_change_version"),
        states={n: state_from_json(n, st) for n, st in doc.get("states", {}).items()},
        manifests=manifests,
        next_segment=None if found is None else int(found),
        commit_id=str(doc.get("commit_id", "")),
        # absent in checkpoints of older writers: those stand at a multiple of the
        # interval (due whatever the count), except upgrade's and clean's
        replay_entries=int(header.get("replay_entries", 0)),
        recent_checkpoints=tuple(int(v) for v in header.get("recent_checkpoints", ())),
    )


def _forget_cleaned(segments: OrderedMap[str, SegmentState]) -> OrderedMap[str, SegmentState]:
    """Format 1/2 kept cleaned segments: forget them as replay now does."""
    for sid, seg in list(segments.items()):
        if seg.files_removed and not seg.files:
            segments = segments.delete(sid)
    return segments
