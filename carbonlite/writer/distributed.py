"""Writes planned once, done by many workers, committed once: the protocol behind the Spark sinks
(and any engine whose tasks run elsewhere).

1. :func:`plan_write` (driver) decides, against the latest snapshot, which segment takes the
   rows and the committed length of every stream file in it.
2. :func:`write_part` (each worker) writes its rows as blocklets into a file of its own, and
   returns the appended range as plain data.
3. :func:`commit_parts` (driver) commits every part, and an optional transaction marker, as ONE
   log version; a marker the table already holds means the write was done before, and nothing
   is committed (exactly once).

File names keep workers apart. On storage that appends (local disks), a part appends to
``<tag>-p<partition>-a<attempt>.cblt`` batch after batch, after cutting it back to its
committed length; under the file's lock it first checks that the log has not moved the file
past the plan (a zombie attempt of an earlier batch would otherwise cut committed bytes). On
object stores every part is a new object named after the plan, the partition and the attempt,
created with put-if-absent, so a zombie can never overwrite an object a version references.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from carbonlite.errors import CarbonLiteError, CommitConflictError
from carbonlite.format.pages import PageCodec
from carbonlite.metadata import BlockletsAppended, Log, TxnMarker
from carbonlite.properties import TableProperties
from carbonlite.reader.planner import Split
from carbonlite.reader.scan import SplitReader, read_splits
from carbonlite.storage import open_storage
from carbonlite.writer.append import (
    WRITER_LOCK_TIMEOUT,
    AppendCommit,
    TableWriter,
    lock_path,
    now_ms,
)
from carbonlite.writer.batches import conformed_batches
from carbonlite.writer.lease import Lease
from carbonlite.writer.partition_files import PartitionFile, write_partition_files
from carbonlite.writer.stream_file import write_blocklets

if TYPE_CHECKING:
    from carbonlite.table import Table

__all__ = [
    "WritePlan",
    "abort_parts",
    "commit_leased",
    "commit_parts",
    "lease_plan",
    "plan_write",
    "write_part",
    "write_partitioned_part",
]


@dataclass
class WritePlan:
    """Everything a worker needs, decided on the driver for one micro-batch or job."""

    uri: str
    storage_options: dict[str, Any]
    schema: pa.Schema
    segment_id: str
    new_segment: bool
    committed: dict[str, int] = field(default_factory=dict)
    txns: dict[str, int] = field(default_factory=dict)
    overwrite: bool = False
    skip: bool = False
    """Write nothing (the transaction was committed before, or a save mode says so)."""
    blocklet_max_rows: int = 65_536
    blocklet_max_bytes: int = 64 * 1024 * 1024
    compression_level: int = 1
    codec: PageCodec = "lz4"
    read_version: int = 0
    planned_ms: int | None = None
    """When the driver planned the write: its commit records the duration from here."""
    plan_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    """Names this plan's objects on object stores (a replanned batch never reuses a name)."""
    append_files: bool = True
    """Whether the storage appends (local disk): parts then reuse their files across plans."""
    partition_by: list[str] = field(default_factory=list)
    """The table's partition fields when workers write one file per partition (a
    partitioned table without a primary key); empty otherwise."""
    dynamic_overwrite: bool = False
    """An overwrite of a partitioned table replaces only the partitions written (Spark's
    ``partitionOverwriteMode=dynamic``)."""

    def done(self, app_id: str | None, batch_id: int | None) -> bool:
        """Whether the table already held ``(app_id, batch_id)`` when this was planned."""
        committed = self.txns.get(app_id) if app_id is not None else None
        return committed is not None and batch_id is not None and committed >= batch_id


def plan_write(
    table: Table, *, overwrite: bool, skip: bool = False, txn: TxnMarker | None = None
) -> WritePlan:
    """Plan a write into ``table`` against its latest version; with ``txn`` already committed
    the plan writes nothing."""
    snap = table.refresh().snapshot()
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
        schema=snap.schema,
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
    )


def part_file(plan: WritePlan, tag: str, partition: int, attempt: int) -> str:
    """The file (relative to the table) a part writes: see the module's notes."""
    if plan.append_files:
        name = f"{tag}-p{partition:05d}-a{attempt}"
    else:
        name = f"{tag}-{plan.plan_id}-p{partition:05d}-a{attempt}"
    return f"segments/{plan.segment_id}/{name}.cblt"


def _skipped(
    plan: WritePlan, batches: Iterable[pa.RecordBatch], app_id: str | None, batch_id: int | None
) -> bool:
    """Whether the plan writes nothing for this worker (the transaction was committed before,
    or a save mode ignores the write); its rows are then read to the end and dropped."""
    if not (plan.skip or plan.done(app_id, batch_id)):
        return False
    for _ in batches:  # already committed (a replay) or ignored: write nothing
        pass
    return True


def write_part(
    plan: WritePlan,
    batches: Iterable[pa.RecordBatch],
    *,
    tag: str,
    partition: int,
    attempt: int,
    app_id: str | None = None,
    batch_id: int | None = None,
) -> BlockletsAppended | None:
    """Write one worker's rows; None when it wrote nothing (no rows, or the plan skips)."""
    if _skipped(plan, batches, app_id, batch_id):
        return None
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    file = part_file(plan, tag, partition, attempt)
    if not plan.append_files:
        return _write(storage, root, plan, file, 0, batches)
    name = file.rsplit("/", 1)[-1][: -len(".cblt")]
    with storage.lock(lock_path(storage, root, name), timeout=WRITER_LOCK_TIMEOUT):
        committed = plan.committed.get(file, 0)
        _check_not_stale(storage, root, plan, file, committed)
        return _write(storage, root, plan, file, committed, batches)


def _check_not_stale(storage: Any, root: str, plan: WritePlan, file: str, committed: int) -> None:
    """Refuse to cut ``file`` back to a committed length the log has since moved past: this
    part belongs to a plan other commits have overtaken (a zombie attempt)."""
    latest = Log(storage, root, storage.uri(root)).load_latest()
    seg = latest.segments.get(plan.segment_id)
    now = seg.files.get(file) if seg is not None else None
    if now is not None and now.committed_length != committed:
        raise CommitConflictError(
            f"{storage.uri(storage.join(root, file))!r} was committed up to "
            f"{now.committed_length} bytes at version {latest.version}, past the "
            f"{committed} bytes this write was planned on (version {plan.read_version}): a "
            "later batch has committed into it, so this attempt is stale and writes nothing",
            read_version=plan.read_version,
        )


def _write(
    storage: Any,
    root: str,
    plan: WritePlan,
    file: str,
    committed: int,
    batches: Iterable[pa.RecordBatch],
) -> BlockletsAppended | None:
    return write_blocklets(
        storage,
        root,
        segment_id=plan.segment_id,
        file=file,
        committed_length=committed,
        schema=plan.schema,
        # the Spark sink takes a DataFrame without some nullable columns (spark/sink.py)
        batches=conformed_batches(batches, plan.schema, where=plan.uri, fill_missing=True),
        storage_options=plan.storage_options,
        compression_level=plan.compression_level,
        codec=plan.codec,
        max_rows=plan.blocklet_max_rows,
        max_bytes=plan.blocklet_max_bytes,
    )


def write_partitioned_part(
    plan: WritePlan,
    batches: Iterable[pa.RecordBatch],
    *,
    tag: str,
    partition: int,
    attempt: int,
    app_id: str | None = None,
    batch_id: int | None = None,
) -> list[PartitionFile]:
    """Write one worker's rows into a partitioned table: one new file per partition."""
    if _skipped(plan, batches, app_id, batch_id):
        return []
    return write_partition_files(
        plan,
        batches,
        spec_json=plan.partition_by,
        tag=tag,
        task=partition,
        attempt=attempt,
        hashed=False,
    )


def commit_parts(
    plan: WritePlan,
    parts: Sequence[BlockletsAppended | None],
    *,
    txn: TxnMarker | None,
    operation: str,
    parameters: dict[str, str],
    writer_id: str,
    partitioned: Sequence[PartitionFile] = (),
) -> int | None:
    """Commit every part (and ``txn``) as one version; the version, or None when nothing was
    committed (nothing written, or ``txn`` was already there). ``partitioned``: the files
    workers wrote per partition (:func:`write_partitioned_part`)."""
    from carbonlite.create import open_table

    appends = tuple(p for p in parts if p is not None)
    if plan.skip or (not appends and not partitioned and not plan.overwrite):
        return None
    table = open_table(plan.uri, storage_options=plan.storage_options or None)
    if plan.partition_by:
        return _commit_partitioned(table, plan, partitioned, txn, operation, parameters, writer_id)
    if table.primary_key or table.partition_by:
        return _rewrite_parts(table, plan, appends, txn)
    writer = TableWriter(
        table.storage, table.root, writer_id=writer_id, storage_options=table.storage_options
    )
    pending = AppendCommit(
        appends=appends,
        new_segments=frozenset({plan.segment_id}) if plan.new_segment and appends else frozenset(),
        txn=txn,
        overwrite=plan.overwrite,
        operation=operation,
        parameters=parameters,
        started_ms=plan.planned_ms,
    )
    result, _ = writer.commit(
        table.log, table.refresh().snapshot(), pending, read_version=plan.read_version
    )
    return result.version


def _commit_partitioned(
    table: Table,
    plan: WritePlan,
    files: Sequence[PartitionFile],
    txn: TxnMarker | None,
    operation: str,
    parameters: dict[str, str],
    writer_id: str,
) -> int | None:
    """The workers' per-partition files, each committed to its partition's STREAMING segment
    (or a new one), all in one version; an overwrite replaces every partition, or with
    ``dynamic_overwrite`` those written."""
    snapshot = table.refresh().snapshot()
    writer = TableWriter(
        table.storage, table.root, writer_id=writer_id, storage_options=table.storage_options
    )
    by_key: dict[tuple[Any, ...], list[BlockletsAppended]] = {}
    for f in files:
        by_key.setdefault(f.partition, []).append(f.appended)
    number = snapshot.next_segment_number()
    appends: list[BlockletsAppended] = []
    new_segments: dict[str, tuple[Any, ...]] = {}
    for key, written in by_key.items():
        sid, created = writer.target_segment(
            snapshot, overwrite=plan.overwrite, partition=key, number=number
        )
        if created:
            new_segments[sid] = key
            number += 1
        appends.extend(replace(a, segment_id=sid) for a in written)
    replaced = frozenset(by_key) if plan.overwrite and plan.dynamic_overwrite else None
    pending = AppendCommit(
        appends=tuple(appends),
        new_segments=frozenset(new_segments),
        txn=txn,
        overwrite=plan.overwrite,
        operation=operation,
        parameters=parameters,
        started_ms=plan.planned_ms,
        partitions=new_segments,
        overwrite_partitions=replaced,
    )
    result, _ = writer.commit(table.log, snapshot, pending, read_version=plan.read_version)
    return result.version


def _rewrite_parts(
    table: Table, plan: WritePlan, appends: Sequence[BlockletsAppended], txn: TxnMarker | None
) -> int | None:
    """A write into a primary-key table (partitioned or not): the parts' rows, read back in
    partition order, are written again by the table's own writer, which upserts them
    (deleting the rows they replace; an overwrite keeps one row per key) and routes them to
    their partitions' segments; the parts themselves are never committed and are removed.
    The driver holds the micro-batch in memory, and its rows are written twice."""
    reader = SplitReader(
        table.storage, table.root, table.schema, storage_options=table.storage_options
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


def lease_plan(plan: WritePlan, owner: str) -> Lease | None:
    """A lease over the segment the plan's workers write into, held on the driver from planning
    until the commit or abort: recover leaves their files alone while the write is in flight,
    however long it takes (writer/lease.py)."""
    if plan.skip:
        return None
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    return Lease(storage, root, owner=owner, paths=[f"segments/{plan.segment_id}/"]).acquire()


def commit_leased(lease: Lease | None, commit: Callable[[], Any]) -> None:
    """Run ``commit`` if ``lease`` still holds, then release it (``Lease.__exit__`` leaves the
    record to expire when the commit's outcome is unknown: a late version may need the files)."""
    if lease is None:
        commit()
        return
    with lease:  # held since planning
        lease.check()
        commit()


def abort_parts(plan: WritePlan, parts: Sequence[BlockletsAppended | None]) -> None:
    """Cut the files of an aborted write back to their committed lengths, or delete the new
    ones (best effort: the next writer of each file does it anyway)."""
    from carbonlite.create import open_table

    storage, root = open_storage(plan.uri, plan.storage_options or None)
    try:
        snap = open_table(plan.uri, storage_options=plan.storage_options or None).snapshot()
    except CarbonLiteError:
        return
    for a in parts:
        if a is None:
            continue
        seg = snap.segments.get(a.segment_id)
        f = seg.files.get(a.file) if seg is not None else None
        committed = f.committed_length if f is not None else 0
        path = storage.join(root, a.file)
        try:
            if committed == 0:
                storage.delete(path)
            elif committed == a.start and storage.supports_append:
                storage.truncate(path, committed)
        except OSError:
            pass
