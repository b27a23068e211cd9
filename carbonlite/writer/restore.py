"""Restore: one new commit whose state equals an earlier version's (``Table.restore``).

The plan compares the segments live at the target version with those live now:

- a segment live then and still live with the same files at the same committed lengths is
  kept as it is (nothing is read or written);
- every other segment live now is marked for delete (rows appended since, compaction
  outputs, segments an overwrite created);
- every other segment live then (compacted since, overwritten, or a streaming segment that
  took appends since) is copied, blocklet bytes as they are, into a new segment of the same
  format, level and sort order, cut at the target version's committed lengths. Segment states
  are one-way (a compacted segment never comes back), so restore copies rather than revives,
  and a ``clean`` running meanwhile cannot delete what the restored state reads.

The table's schema and properties become the target version's; transaction markers stay
(a restore must not make an exactly-once stream replay its batches). The commit has
``data_change = false`` exactly when no data changed since the target version (only
compactions, handoffs and metadata changes came after it): then the rows are the same, and
streaming readers skip it. Otherwise it reads as what it is: every row of the marked segments
deleted and every copied row inserted (``changes``; a stream reading the table stops on it
unless it skips change commits, as for an overwrite).

The copies are written ahead of the commit, so :func:`restore` writes them under a lease
(``writer/lease.py``) covering the segments they go into, checked right before the commit:
``recover`` never deletes them in between, whatever its ``min_age``.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from carbonlite._version import ENGINE
from carbonlite.clock import elapsed_ms, now_ms
from carbonlite.errors import CorruptDataError, DataUnavailableError
from carbonlite.format.data_files import open_data_file
from carbonlite.format.parquet_file import PARQUET_SUFFIX, is_parquet
from carbonlite.format.secondary_index import SecondaryIndex
from carbonlite.metadata import (
    Action,
    BlockletEntry,
    BlockletsAppended,
    BloomFile,
    BloomRef,
    CommitInfo,
    DataUnchangedSince,
    DeletionRef,
    FileState,
    IndexFile,
    MetadataUnchanged,
    Requirement,
    RowsDeleted,
    SegmentAbsent,
    SegmentAdded,
    SegmentAsPlanned,
    SegmentState,
    SegmentStatusChanged,
    Snapshot,
    TableMetadata,
)
from carbonlite.metadata.columns import PENDING, DroppedColumn, stamped
from carbonlite.metadata.commit import commit
from carbonlite.metadata.log import Log
from carbonlite.seams import reach
from carbonlite.storage import Storage
from carbonlite.writer.index_files import index_path
from carbonlite.writer.lease import Lease
from carbonlite.writer.row_changes import dv_path
from carbonlite.writer.stream_file import copy_blocklets, copy_whole_file

__all__ = ["RestoreCommit", "plan_restore", "restore"]

COPY_CHUNK_BYTES = 64 * 1024 * 1024
"""Blocklet bytes read into memory at once while copying a file."""


@dataclass(frozen=True, slots=True)
class RestoreCommit:
    """A planned restore: segments to mark for delete, copies already written, metadata."""

    version: int
    """The version restored."""
    planned: tuple[SegmentAsPlanned, ...]
    """Every segment live when planned, as it was then."""
    dead: tuple[str, ...]
    copies: tuple[tuple[SegmentAdded, tuple[BlockletsAppended, ...]], ...]
    metadata: tuple[TableMetadata, TableMetadata]
    """(read, restored)."""
    data_change: bool
    rows_removed: int
    bytes_removed: int
    parameters: Mapping[str, str]
    files_removed: int = 0
    """Files of the segments marked for delete."""
    started_ms: int | None = None
    writer_id: str | None = None
    deletions: tuple[RowsDeleted, ...] = ()
    """The copies' deletion vectors: the rows deleted at the restored version stay deleted."""

    @property
    def rows_added(self) -> int:
        return sum(a.num_rows for _, appends in self.copies for a in appends) - sum(
            ref.cardinality for d in self.deletions for ref in d.vectors
        )

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        """Nothing changed the rows, the segments or the metadata since the plan."""
        return (
            DataUnchangedSince(operation="restore"),
            MetadataUnchanged(self.metadata[0]),
            *self.planned,
            *(SegmentAbsent(added.segment_id) for added, _ in self.copies),
        )

    def actions(self, snapshot: Snapshot, read_version: int) -> list[Action]:
        read, restored = self.metadata
        actions: list[Action] = (
            [] if restored == read else [stamped(restored, snapshot.version + 1)]
        )
        actions.extend(SegmentStatusChanged(sid, "MARKED_FOR_DELETE") for sid in self.dead)
        for added, appends in self.copies:
            actions.append(added)
            actions.extend(appends)
        actions.extend(self.deletions)
        now = now_ms()
        actions.append(
            CommitInfo(
                operation="RESTORE",
                timestamp=now,
                data_change=self.data_change,
                read_version=read_version,
                rows_added=self.rows_added,
                rows_removed=self.rows_removed,
                bytes_added=sum(a.end - a.start for _, appends in self.copies for a in appends),
                bytes_removed=self.bytes_removed,
                parameters=dict(self.parameters),
                engine=ENGINE,
                files_added=sum(1 for _, appends in self.copies for a in appends if a.start == 0),
                files_removed=self.files_removed,
                duration_ms=elapsed_ms(self.started_ms, now),
                writer_id=self.writer_id,
            )
        )
        return actions

    @property
    def changes_anything(self) -> bool:
        return bool(self.dead or self.copies or self.metadata[0] != self.metadata[1])


def _files(seg: SegmentState) -> dict[str, int]:
    return {path: f.committed_length for path, f in seg.files.items()}


def _deletions(seg: SegmentState) -> dict[str, int]:
    return {path: f.deletion_version for path, f in seg.files.items() if f.deletion_version}


def _copy_deletions(
    storage: Storage, root: str, f: FileState, copied: BlockletsAppended
) -> RowsDeleted | None:
    """``f``'s deletion vectors, written again for its copy ``copied`` (same blocklets, in
    the same order, at new offsets) into a file the copy owns."""
    if not f.deletions:
        return None
    moved = {old.offset: new.offset for old, new in zip(f.blocklets, copied.blocklets, strict=True)}
    dv_file = dv_path(copied.file, uuid.uuid4().hex[:16])
    parts, refs, size = [], [], 0
    for offset, ref in f.deletion_items():
        blob = storage.read(storage.join(root, ref.path), ref.offset, ref.offset + ref.length)
        refs.append(DeletionRef(moved[offset], dv_file, size, len(blob), ref.cardinality))
        parts.append(blob)
        size += len(blob)
    storage.put(storage.join(root, dv_file), b"".join(parts))
    return RowsDeleted(copied.segment_id, copied.file, tuple(refs), size)


def _copy_indexes(
    storage: Storage, root: str, f: FileState, copied: BlockletsAppended
) -> tuple[IndexFile, ...]:
    """``f``'s secondary indexes, written again for its copy ``copied`` (same blocklets, in
    the same order, at new offsets) into files the copy owns; an index that cannot be read is
    left behind (``build_index`` rebuilds it)."""
    moved = {old.offset: new.offset for old, new in zip(f.blocklets, copied.blocklets, strict=True)}
    out = []
    for column, ref in sorted(f.indexes.items()):
        try:
            index = SecondaryIndex.decode(
                storage.read(storage.join(root, ref.path)), where=ref.path
            )
        except (FileNotFoundError, CorruptDataError):
            continue
        if any(int(b) not in moved for b in index.blocklets):
            continue
        remapped = dataclasses.replace(
            index, blocklets=np.array([moved[int(b)] for b in index.blocklets], dtype=np.int64)
        )
        data = remapped.encode()
        path = index_path(copied.file, column)
        storage.put(storage.join(root, path), data)
        out.append(IndexFile(path, len(data), column))
    return tuple(out)


def _blooms(f: FileState, run: Sequence[BlockletEntry]) -> tuple[BloomFile, ...]:
    """The bloom filters of ``run`` (blocklets of ``f``), by bloom file."""
    groups: dict[str, list[BloomRef]] = {}
    for b in run:
        ref = f.blooms.get(b.offset)
        if ref is not None:
            groups.setdefault(ref.path, []).append(ref)
    return tuple(
        BloomFile(path, f.bloom_files[path], refs[0].columns, tuple(refs))
        for path, refs in groups.items()
    )


def _chunks(entries: Sequence[BlockletEntry]) -> Iterator[tuple[BlockletEntry, ...]]:
    """Runs of blocklets spanning at most :data:`COPY_CHUNK_BYTES` (one blocklet at least)."""
    run: list[BlockletEntry] = []
    for b in entries:
        if run and b.end - run[0].offset > COPY_CHUNK_BYTES:
            yield tuple(run)
            run = []
        run.append(b)
    if run:
        yield tuple(run)


def _copy_file(
    storage: Storage,
    root: str,
    segment_id: str,
    f: FileState,
    new_id: str,
    n: int,
    storage_options: Mapping[str, Any] | None,
) -> BlockletsAppended:
    """The committed blocklets of ``f`` copied into a file of segment ``new_id``: a columnar
    Parquet file whole, a blocklet file blocklet by blocklet (up to its committed length)."""
    if is_parquet(f.path):
        source = BlockletsAppended(
            segment_id, f.path, 0, f.committed_length, f.blocklets, _blooms(f, f.blocklets)
        )
        name = f"segments/{new_id}/restore-{uuid.uuid4().hex[:12]}-{n}{PARQUET_SUFFIX}"
        return copy_whole_file(storage, root, source, segment_id=new_id, file=name)
    with open_data_file(
        storage.uri(storage.join(root, f.path)), storage_options=storage_options
    ) as reader:
        schema = reader.schema
    sources = [
        BlockletsAppended(segment_id, f.path, run[0].offset, run[-1].end, run, _blooms(f, run))
        for run in _chunks(f.blocklets)
    ]
    return copy_blocklets(
        storage,
        root,
        sources,
        segment_id=new_id,
        file=f"segments/{new_id}/restore-{uuid.uuid4().hex[:12]}-{n}.cblt",
        committed_length=0,
        schema=schema,
        storage_options=storage_options,
    )


def _copy_segment(
    storage: Storage,
    root: str,
    old: SegmentState,
    new_id: str,
    storage_options: Mapping[str, Any] | None,
) -> tuple[SegmentAdded, tuple[BlockletsAppended, ...], tuple[RowsDeleted, ...]]:
    status = "STREAMING_FINISH" if old.status == "STREAMING" else old.status
    added = SegmentAdded(
        segment_id=new_id,
        format=old.format,
        status=status,
        level=old.level,
        sorted_by=old.sorted_by,
        partition=old.partition,
        content_hash=old.current_hash,
    )
    appends = []
    deletions = []
    for n, f in enumerate(sorted(old.files.values(), key=lambda f: f.path)):
        entries = f.blocklets
        if not entries:
            continue
        try:
            copied = _copy_file(storage, root, old.segment_id, f, new_id, n, storage_options)
            copied = dataclasses.replace(copied, indexes=_copy_indexes(storage, root, f, copied))
            appends.append(copied)
            kept_deleted = _copy_deletions(storage, root, f, copied)
            if kept_deleted is not None:
                deletions.append(kept_deleted)
        except FileNotFoundError:
            raise DataUnavailableError(
                f"cannot restore: {f.path!r} of segment {old.segment_id!r} is gone (clean "
                "removed it); restore a version whose data is still kept"
            ) from None
    return added, tuple(appends), tuple(deletions)


def plan_restore(
    storage: Storage,
    root: str,
    now: Snapshot,
    target: Snapshot,
    *,
    storage_options: Mapping[str, Any] | None,
    parameters: Mapping[str, str],
) -> RestoreCommit:
    """Plan the restore of ``target`` on top of ``now``, writing the copies it needs."""
    then = {s.segment_id: s for s in target.live_segments()}
    live = {s.segment_id: s for s in now.live_segments()}
    kept = {
        sid
        for sid, seg in then.items()
        if sid in live
        and (_files(live[sid]), _deletions(live[sid])) == (_files(seg), _deletions(seg))
    }
    dead = tuple(sid for sid in live if sid not in kept)
    to_copy = [seg for sid, seg in then.items() if sid not in kept]
    for seg in to_copy:
        present = now.segments.get(seg.segment_id)
        missing = sorted(set(seg.files) - set(present.files if present is not None else ()))
        if missing:
            raise DataUnavailableError(
                f"cannot restore version {target.version}: clean removed the files of segment "
                f"{seg.segment_id!r} it reads ({', '.join(missing[:3])}); restore a version "
                "whose data is still kept"
            )
    first_id = now.next_segment_number()
    copied = [
        _copy_segment(storage, root, seg, str(first_id + n), storage_options)
        for n, seg in enumerate(to_copy)
    ]
    restored = _ids_remembered(
        now.metadata,
        dataclasses.replace(
            target.metadata,
            table_id=now.metadata.table_id,
            created_time=now.metadata.created_time,
            format_version=max(now.metadata.format_version, target.metadata.format_version),
        ),
    )
    return RestoreCommit(
        version=target.version,
        planned=tuple(
            SegmentAsPlanned(
                sid, seg.status, _files(seg), operation="restore", deletions=_deletions(seg)
            )
            for sid, seg in live.items()
        ),
        dead=dead,
        copies=tuple((added, appends) for added, appends, _ in copied),
        deletions=tuple(d for _, _, kept in copied for d in kept),
        metadata=(now.metadata, restored),
        data_change=now.data_version > target.version,
        rows_removed=sum(live[sid].live_rows for sid in dead),
        bytes_removed=sum(live[sid].num_bytes for sid in dead),
        files_removed=sum(len(live[sid].files) for sid in dead),
        parameters=parameters,
    )


def _ids_remembered(now: TableMetadata, restored: TableMetadata) -> TableMetadata:
    """``restored`` (the target version's metadata) remembering the column ids and physical
    names used since: columns the restore removes count as dropped and ids never go back, so
    a column added later under one of their names is a new column and never reads their pages
    (which ``changes`` across the restore still reads)."""
    if not restored.columns:
        return restored
    kept = {c.id for c in restored.columns} | {d.id for d in restored.dropped}
    gone = [
        DroppedColumn(
            c.id, f.name, c.physical, PENDING, previous=tuple(name for name, _ in c.previous)
        )
        for f, c in zip(now.schema, now.columns, strict=False)
        if c.id not in kept
    ]
    gone += [d for d in now.dropped if d.id not in kept and d.id not in {g.id for g in gone}]
    if not gone and now.last_column_id <= restored.last_column_id:
        return restored
    return dataclasses.replace(
        restored,
        dropped=(*restored.dropped, *gone),
        last_column_id=max(now.last_column_id, restored.last_column_id),
    )


def restore(
    log: Log,
    now: Snapshot,
    target: Snapshot,
    *,
    storage_options: Mapping[str, Any] | None,
    parameters: Mapping[str, str],
    stamp: Callable[[RestoreCommit], RestoreCommit],
) -> tuple[Snapshot, RestoreCommit]:
    """Restore ``target`` on top of ``now``: plan it and write its copies under a lease over
    the segments they may go into, then commit (``stamp`` adds the writer's details). Returns
    the snapshot after the commit (``now`` when nothing would change) and the commit."""
    outputs = [
        f"segments/{now.next_segment_number() + n}/" for n in range(len(target.segments) + 1)
    ]
    with Lease(log.storage, log.root, owner="restore", paths=outputs) as lease:
        pending = plan_restore(
            log.storage,
            log.root,
            now,
            target,
            storage_options=storage_options,
            parameters=parameters,
        )
        if not pending.changes_anything:
            return now, pending
        reach("lease.before_check")
        lease.check()
        return commit(log, now, stamp(pending)), pending
