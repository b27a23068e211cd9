"""The driver's side of a write planned once, done by many workers and committed once (the
protocol behind the Spark sinks; the workers' side is :mod:`carbonlite.writer.distributed`).

1. :func:`plan_write` decides, against the latest snapshot, which segment takes the rows and
   the committed length of every stream file in it.
2. Each worker writes its part (:func:`carbonlite.writer.distributed.write_part`).
3. :func:`commit_parts` commits every part, and an optional transaction marker, as ONE log
   version; a marker the table already holds means the write was done before, and nothing is
   committed (exactly once). A primary-key table's parts are rewritten by the table's own
   writer (the upsert), which is why this lives beside :class:`~carbonlite.table.Table` and
   not in ``writer/``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from carbonlite.clock import now_ms
from carbonlite.compaction.auto import auto_compact
from carbonlite.create import open_table
from carbonlite.errors import SchemaMismatchError
from carbonlite.metadata import BlockletsAppended, Snapshot, TableMetadata, TxnMarker
from carbonlite.properties import TableProperties
from carbonlite.reader.planner import Split
from carbonlite.reader.scan import SplitReader, read_splits
from carbonlite.table import Table
from carbonlite.writer.append import (
    AppendCommit,
    CommitResult,
    RowChanges,
    TableWriter,
    merge_parameters,
    schema_merge,
    with_row_changes,
)
from carbonlite.writer.distributed import abort_parts
from carbonlite.writer.partition_files import PartitionFile
from carbonlite.writer.replace_where import select_replaced
from carbonlite.writer.row_changes import commit_row_change
from carbonlite.writer.write_plan import WritePlan

__all__ = ["commit_parts", "plan_write"]


def plan_write(
    table: Table,
    *,
    overwrite: bool,
    skip: bool = False,
    txn: TxnMarker | None = None,
    merge_schema: pa.Schema | None = None,
) -> WritePlan:
    """Plan a write into ``table`` against its latest version; with ``txn`` already committed
    the plan writes nothing. ``merge_schema``: the schema of the rows to write, whose columns
    the table lacks are added by the write's own commit (Delta's ``mergeSchema``, the Python
    ``schema_mode="merge"``); workers write in the merged schema."""
    snap = table.refresh().snapshot()
    change = _merged(table, snap, merge_schema) if merge_schema is not None else None
    metadata = snap.metadata if change is None else change[1]
    writer = TableWriter(
        table.storage, table.root, writer_id="plan", storage_options=table.storage_options
    )
    segment_id, created = writer.target_segment(snap, overwrite=overwrite)
    seg = snap.segments.get(segment_id)
    props = TableProperties(snap.properties)
    if txn is not None:
        done = snap.txns.get(txn.app_id)
        skip = skip or (done is not None and done >= txn.batch_id)
    return WritePlan(
        uri=table.path,
        storage_options=table.storage_options,
        schema=metadata.schema,
        segment_id=segment_id,
        new_segment=created,
        committed={p: f.committed_length for p, f in seg.files.items()} if seg is not None else {},
        txns=dict(snap.txns),
        overwrite=overwrite,
        skip=skip,
        blocklet_max_rows=props.blocklet_max_rows,
        blocklet_max_bytes=props.blocklet_max_bytes,
        compression_level=props.compression_level,
        codec=props.stream_codec,
        read_version=snap.version,
        planned_ms=now_ms(),
        append_files=table.storage.supports_append,
        partition_by=[] if snap.metadata.primary_key else list(snap.metadata.partition_by),
        partition_streams=_partition_streams(snap)
        if table.storage.supports_append and not overwrite and not snap.metadata.primary_key
        else {},
        metadata=metadata,
        metadata_change=change,
    )


def _partition_streams(snap: Snapshot) -> dict[tuple[Any, ...], tuple[str, dict[str, int]]]:
    """Each partition's STREAMING segment (the newest, as ``Snapshot.streaming_segment``
    finds it) with its files' committed lengths."""
    streams: dict[tuple[Any, ...], tuple[str, dict[str, int]]] = {}
    for seg in snap.segments.values():
        if seg.status == "STREAMING" and seg.partition is not None:
            streams[seg.partition] = (
                seg.segment_id,
                {p: f.committed_length for p, f in seg.files.items()},
            )
    return streams


def _merged(
    table: Table, snap: Snapshot, incoming: pa.Schema
) -> tuple[TableMetadata, TableMetadata] | None:
    """(read, new) metadata when ``incoming`` has columns the table lacks; None otherwise."""
    change = schema_merge(snap, incoming, where=repr(table.path))
    if change is not None and snap.metadata.primary_key:
        raise SchemaMismatchError(
            f"mergeSchema is not supported for the primary-key table {table.path!r}: add the "
            "columns with add_columns first",
            [f"new columns: {change[1].schema.names[len(snap.schema) :]}"],
        )
    return change


def commit_parts(
    plan: WritePlan,
    parts: Sequence[BlockletsAppended | None],
    *,
    txn: TxnMarker | None,
    operation: str,
    parameters: dict[str, str],
    writer_id: str,
    partitioned: Sequence[PartitionFile] = (),
    changes: RowChanges | None = None,
) -> int | None:
    """Commit every part (and ``txn``) as one version; the version, or None when nothing was
    committed (nothing written, or ``txn`` was already there). ``partitioned``: the files
    workers wrote per partition (:func:`write_partitioned_part`). ``changes``: rows the same
    version deletes (a delete, update or merge whose tasks wrote the parts and the deletion
    vectors, ``carbonlite/driver_changes.py``); the parts are then committed as written,
    in a primary-key table too (the change checked its keys)."""
    appends = tuple(p for p in parts if p is not None)
    if plan.metadata_change is not None:
        parameters = {**parameters, **merge_parameters(plan.metadata_change)}
    deletes = changes is not None and bool(changes.deletions)
    nothing = not appends and not partitioned and not plan.overwrite and not deletes
    if plan.skip or (nothing and plan.replace_where is None):
        return None
    table = open_table(plan.uri, storage_options=plan.storage_options or None)
    if changes is None and (table.primary_key or (table.partition_by and not plan.partition_by)):
        return _rewrite_parts(table, plan, appends, txn)  # the table's own writer compacts
    if plan.partition_by:
        build = _partitioned_commit(plan, partitioned, txn, operation, parameters)
    else:
        build = _appends_commit(plan, appends, txn, operation, parameters)
    if changes is not None:
        build = _deleting(build, changes)
    version, snapshot = _commit(table, plan, build, writer_id)
    if version is not None and TableProperties(snapshot.properties).auto_compaction:
        auto_compact(
            table.log, snapshot, storage_options=table.storage_options, writer_id=writer_id
        )
    return version


def _deleting(
    build: Callable[[Snapshot, TableWriter], AppendCommit], changes: RowChanges
) -> Callable[[Snapshot, TableWriter], AppendCommit]:
    """``build``'s commit deleting ``changes``'s rows in the same version."""

    def deleting(snapshot: Snapshot, writer: TableWriter) -> AppendCommit:
        return with_row_changes(build(snapshot, writer), snapshot, changes)

    return deleting


def _commit(
    table: Table,
    plan: WritePlan,
    build: Callable[[Snapshot, TableWriter], AppendCommit],
    writer_id: str,
) -> tuple[int | None, Snapshot]:
    """Commit what ``build`` makes of the workers' parts on the newest snapshot; with
    ``replaceWhere``, together with the deletion of the rows its predicate keeps."""
    writer = TableWriter(
        table.storage, table.root, writer_id=writer_id, storage_options=table.storage_options
    )
    if plan.replace_where is not None:
        return _commit_replacing(table, plan.replace_where, build, writer)
    snapshot = table.refresh().snapshot()
    pending = build(snapshot, writer)
    result, snapshot = writer.commit(table.log, snapshot, pending, read_version=plan.read_version)
    return result.version, snapshot


def _commit_replacing(
    table: Table,
    predicate: str,
    build: Callable[[Snapshot, TableWriter], AppendCommit],
    writer: TableWriter,
) -> tuple[int | None, Snapshot]:
    """Delta's ``replaceWhere``: the rows ``predicate`` keeps are deleted by deletion vectors
    in the version that adds the parts, by the row-change loop of ``writer/row_changes.py``
    (planned again when a concurrent row-level change took those rows first)."""

    def write(snapshot: Snapshot, changes: RowChanges) -> tuple[CommitResult, Snapshot]:
        return writer.commit(table.log, snapshot, _deleting(build, changes)(snapshot, writer))

    _, version, snapshot = commit_row_change(
        writer,
        table.log,
        table.refresh().snapshot(),
        operation="WRITE",
        plan=lambda snapshot, reader: select_replaced(reader, snapshot, predicate),
        storage_options=table.storage_options,
        write=write,
    )
    return version, snapshot


def _appends_commit(
    plan: WritePlan,
    appends: Sequence[BlockletsAppended],
    txn: TxnMarker | None,
    operation: str,
    parameters: dict[str, str],
) -> Callable[[Snapshot, TableWriter], AppendCommit]:
    """The workers' parts of an unpartitioned table, as one commit."""

    def build(snapshot: Snapshot, writer: TableWriter) -> AppendCommit:
        return AppendCommit(
            appends=tuple(appends),
            new_segments=frozenset({plan.segment_id})
            if plan.new_segment and appends
            else frozenset(),
            txn=txn,
            overwrite=plan.overwrite,
            operation=operation,
            parameters=parameters,
            started_ms=plan.planned_ms,
            written_with=plan.metadata,
            metadata=plan.metadata_change,
        )

    return build


def _partitioned_commit(
    plan: WritePlan,
    files: Sequence[PartitionFile],
    txn: TxnMarker | None,
    operation: str,
    parameters: dict[str, str],
) -> Callable[[Snapshot, TableWriter], AppendCommit]:
    """The workers' per-partition files, each committed to its partition's STREAMING segment
    (or a new one), all in one version; an overwrite replaces every partition, or with
    ``dynamic_overwrite`` those written. A file a stream appended to in the segment the plan
    found stays there (``FileAppendable`` refuses the commit if that segment stopped taking
    appends, and ``TableWriter.commit`` then moves the blocklets to the new one)."""
    by_key: dict[tuple[Any, ...], list[BlockletsAppended]] = {}
    for f in files:
        by_key.setdefault(f.partition, []).append(f.appended)

    def build(snapshot: Snapshot, writer: TableWriter) -> AppendCommit:
        number = snapshot.next_segment_number()
        appends: list[BlockletsAppended] = []
        new_segments: dict[str, tuple[Any, ...]] = {}
        for key, written in by_key.items():
            stream = plan.partition_streams.get(key)
            planned = stream[0] if stream is not None else None
            appends.extend(a for a in written if a.segment_id == planned)  # stay: appended to
            moved = [a for a in written if a.segment_id != planned]
            if not moved:
                continue
            sid, created = writer.target_segment(
                snapshot, overwrite=plan.overwrite, partition=key, number=number
            )
            if created:
                new_segments[sid] = key
                number += 1
            appends.extend(replace(a, segment_id=sid) for a in moved)
        return AppendCommit(
            appends=tuple(appends),
            new_segments=frozenset(new_segments),
            txn=txn,
            overwrite=plan.overwrite,
            operation=operation,
            parameters=parameters,
            started_ms=plan.planned_ms,
            written_with=plan.metadata,
            metadata=plan.metadata_change,
            partitions=new_segments,
            overwrite_partitions=frozenset(by_key)
            if plan.overwrite and plan.dynamic_overwrite
            else None,
        )

    return build


def _rewrite_parts(
    table: Table, plan: WritePlan, appends: Sequence[BlockletsAppended], txn: TxnMarker | None
) -> int | None:
    """A write into a primary-key table (partitioned or not): the parts' rows, read back in
    partition order, are written again by the table's own writer, which upserts them
    (deleting the rows they replace; an overwrite keeps one row per key) and routes them to
    their partitions' segments; the parts themselves are never committed and are removed.
    The driver holds the micro-batch in memory, and its rows are written twice."""
    reader = SplitReader(
        table.storage,
        table.root,
        table.schema,
        storage_options=table.storage_options,
        layout=plan.layout,
    )
    try:
        splits = [Split(a.segment_id, a.file, a.end, a.blocklets) for a in appends]
        rows = pa.Table.from_batches(
            list(read_splits(reader, splits, table.schema, None)), schema=table.schema
        )
    finally:
        reader.close()
    marker = None if txn is None else (txn.app_id, txn.batch_id)
    if plan.overwrite:
        result = table.overwrite(
            rows, txn=marker, partitions="dynamic" if plan.dynamic_overwrite else "all"
        )
    else:
        result = table.append(rows, txn=marker)
    abort_parts(plan, appends)
    return result.version
