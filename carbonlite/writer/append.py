"""Appends and overwrites: write blocklets to this writer's stream file, commit one version.

The commit is an :class:`AppendCommit`: it survives losing a race to any commit that leaves
its assumptions standing (two blind appends never conflict), adopts a STREAMING segment that
a concurrent writer created under the same id, and moves its blocklets to the current
STREAMING segment when its own segment stopped taking appends (rolled over or handed off).
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import pyarrow as pa

from carbonlite._version import ENGINE
from carbonlite.clock import elapsed_ms, now_ms
from carbonlite.errors import CommitConflictError, CorruptDataError
from carbonlite.format import BlockletFileReader
from carbonlite.metadata import (
    DELETION_VECTOR_FORMAT_VERSION,
    PARTITION_FORMAT_VERSION,
    Action,
    BlockletsAppended,
    CommitInfo,
    DataUnchangedSince,
    DeletionsAsRead,
    FileAppendable,
    Log,
    MarkersContinue,
    MetadataUnchanged,
    Requirement,
    RowsDeleted,
    RowsUnchangedSince,
    SegmentAdded,
    SegmentNotWritableError,
    SegmentStatusChanged,
    Snapshot,
    StateStored,
    TableMetadata,
    TransactionAlreadyCommitted,
    TxnMarker,
    TxnNotCommitted,
    commit,
)
from carbonlite.metadata.columns import ColumnLayout, layout_of, stamped
from carbonlite.metadata.requirements import ColumnsAsWritten
from carbonlite.names import check_writer_id
from carbonlite.properties import TableProperties
from carbonlite.seams import reach
from carbonlite.storage import Storage
from carbonlite.writer.batches import (
    ColumnsAsOf,
    TableData,
    conformed_batches,
    iter_record_batches,
    merged_schema,
)
from carbonlite.writer.bloom_files import bloom_spec
from carbonlite.writer.lease import Lease
from carbonlite.writer.partition_rows import PartitionRows, partition_spec, route_rows
from carbonlite.writer.schema_changes import adding_columns
from carbonlite.writer.stream_file import copy_blocklets, write_blocklets

__all__ = [
    "AppendCommit",
    "CommitResult",
    "RowChanges",
    "StatesArg",
    "TableWriter",
    "lock_path",
    "merge_parameters",
    "owner_lock_paths",
    "schema_merge",
    "with_row_changes",
]

StatesArg = tuple[StateStored, ...] | Callable[[], tuple[StateStored, ...]]
"""State tables stored with a commit, or a callable giving them once the rows are written."""

_MAX_RELOCATIONS = 10
DYNAMIC = "dynamic"
LOCK_DIR = "_carbonlite/locks"
WRITER_LOCK_TIMEOUT = 60.0
"""Seconds a writer waits for another live writer with the same id before giving up."""


def lock_path(storage: Storage, root: str, name: str) -> str:
    """Where the writer lock ``name`` (a writer id, or a Spark task file's stem) lives."""
    return storage.join(root, LOCK_DIR, f"{name}.lock")


def owner_lock_paths(storage: Storage, root: str, file: str) -> list[str]:
    """The locks a live writer of ``file`` holds while it may still commit bytes to it:
    ``<writer id>`` for a table writer's ``<writer id>-<n>.cblt``, the file's own name for a
    Spark task's ``<tag>-p<partition>-a<attempt>.cblt``."""
    stem = file.rsplit("/", 1)[-1].removesuffix(".cblt")
    names = [stem]
    if "-" in stem:
        names.append(stem.rsplit("-", 1)[0])
    return [lock_path(storage, root, name) for name in names]


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a write did."""

    version: int | None
    """The committed version; None when nothing was committed."""
    operation: str
    rows: int = 0
    skipped: bool = False
    """True when the table already held this transaction's batch, so nothing was written."""


@dataclass(frozen=True, slots=True)
class RowChanges:
    """The deleting half of a row-level change, committed with the rows it writes."""

    deletions: tuple[RowsDeleted, ...] = ()
    """Deletion vectors already written (``writer/row_changes.py``)."""
    deletions_read: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """``deletion_version`` of each (segment, file) the deletions were computed from."""
    parameters: Mapping[str, str] = field(default_factory=dict)
    """What the commit info records of the operation (filter, keys, counts)."""
    read_version: int | None = None
    """The version the change was planned on (None: the one it is written on)."""
    exclusive: bool = False
    """Requires that no data changed since ``read_version`` at all (a primary-key upsert:
    a concurrent insert of the same key would make it two rows); the change plans again."""
    row_level: bool = False
    """A delete, update, merge or upsert (set by ``row_changes``): it conflicts with every
    other row-level change committed since it read (``RowsUnchangedSince``)."""


@dataclass(frozen=True, slots=True)
class AppendCommit:
    """A pending data commit: appends, optional overwrite, optional transaction marker."""

    appends: tuple[BlockletsAppended, ...]
    new_segments: frozenset[str] = frozenset()
    txn: TxnMarker | None = None
    overwrite: bool = False
    operation: str = "APPEND"
    parameters: Mapping[str, str] = field(default_factory=dict)
    metadata: tuple[TableMetadata, TableMetadata] | None = None
    """(read, new) table metadata when the commit also changes it (``schema_mode="merge"``)."""
    started_ms: int | None = None
    """When the write began (its commit records the duration; None: not recorded)."""
    writer_id: str | None = None
    """The writer committing it (set by :meth:`TableWriter.commit`)."""
    deletions: tuple[RowsDeleted, ...] = ()
    """Rows it deletes (a delete, update or merge), by deletion vectors already written."""
    deletions_read: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """``deletion_version`` of every (segment, file) whose rows it read to find them."""
    exclusive: bool = False
    """No data may have changed since the version it read (``RowChanges.exclusive``)."""
    row_level: bool = False
    """A delete, update, merge or upsert: it read rows to decide what it writes."""
    partitions: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    """The partition (JSON values) of each new segment, in a partitioned table."""
    content_hashes: Mapping[str, str] = field(default_factory=dict)
    """Content hash of each new segment that holds a whole published partition."""
    overwrite_partitions: frozenset[tuple[Any, ...]] | None = None
    """With ``overwrite``: only the segments of these partitions are replaced (a dynamic
    partition overwrite, a publish); None replaces every segment."""
    states: tuple[StateStored, ...] = ()
    """State tables stored with the commit (a publish's ``state``)."""
    progress: Mapping[str, tuple[int | None, int]] = field(default_factory=dict)
    """Transaction markers it moves, ``app_id -> (previous, new)``, each a compare-and-set
    (``TxnContinues``), decided together (``MarkersContinue``): one per Kafka partition an
    ingester consumed, one per producer a Flight flush commits."""
    written_with: TableMetadata | None = None
    """The table metadata its rows were written with (their columns' names and physical
    names): a rename or drop of one of them since refuses the commit (``ColumnsAsWritten``)."""

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        """Its batch is not in the table yet; an overwrite saw every row it replaces; each
        file still takes appends where this commit's blocklets start; a schema it merges
        was not changed by anyone else meanwhile; the rows it deletes are still as it read
        them."""
        requirements: list[Requirement] = []
        if self.metadata is not None:
            requirements.append(MetadataUnchanged(self.metadata[0]))
        if self.written_with is not None and self.appends and self.metadata is None:
            # (a commit that changes the metadata itself requires it unchanged, above)
            requirements.append(ColumnsAsWritten(self.written_with))
        if self.deletions_read or self.deletions or self.row_level:
            requirements.append(DeletionsAsRead(self.deletions_read, self.operation.lower()))
            requirements.append(RowsUnchangedSince(self.operation.lower()))
        if self.txn is not None:
            requirements.append(TxnNotCommitted(self.txn.app_id, self.txn.batch_id))
        if self.progress:
            requirements.append(MarkersContinue.of(self.progress))
        if self.overwrite:
            requirements.append(DataUnchangedSince())
        if self.exclusive:
            requirements.append(DataUnchangedSince(self.operation.lower(), replan=True))
        requirements.extend(
            FileAppendable(
                a.segment_id,
                a.file,
                a.start,
                creates=a.segment_id in self.new_segments,
                overwrite=self.overwrite,
                partition=self.partitions.get(a.segment_id),
            )
            for a in self.appends
        )
        return tuple(requirements)

    def actions(self, snapshot: Snapshot, read_version: int) -> list[Action]:
        actions: list[Action] = (
            [] if self.metadata is None else [stamped(self.metadata[1], snapshot.version + 1)]
        )
        actions.extend(
            SegmentAdded(
                segment_id=sid,
                format="STREAMING",
                status="STREAMING",
                partition=self.partitions.get(sid),
                content_hash=self.content_hashes.get(sid),
            )
            for sid in sorted(self.new_segments, key=_segment_order)
            if sid not in snapshot.segments
        )
        rows_removed = bytes_removed = files_removed = 0
        if self.overwrite:
            replaced = self.overwrite_partitions
            for seg in snapshot.live_segments():
                if seg.segment_id not in self.new_segments and (
                    replaced is None or seg.partition in replaced
                ):
                    actions.append(SegmentStatusChanged(seg.segment_id, "MARKED_FOR_DELETE"))
                    rows_removed += seg.live_rows
                    bytes_removed += seg.num_bytes
                    files_removed += len(seg.files)
        for d in self.deletions:
            before = snapshot.segments[d.segment_id].files[d.file].deletions
            for ref in d.vectors:
                old = before.get(ref.blocklet)
                rows_removed += ref.cardinality - (old.cardinality if old is not None else 0)
        actions.extend(self.deletions)
        actions.extend(self.appends)
        limit = TableProperties(snapshot.properties).streaming_segment_max_bytes
        for sid in sorted({a.segment_id for a in self.appends}):
            existing = snapshot.segments.get(sid)
            size = (existing.num_bytes if existing is not None else 0) + sum(
                a.end - a.start for a in self.appends if a.segment_id == sid
            )
            if size >= limit:
                actions.append(SegmentStatusChanged(sid, "STREAMING_FINISH"))
        actions.extend(self.states)
        if self.txn is not None:
            actions.append(self.txn)
        actions.extend(TxnMarker(app_id, new) for app_id, (_, new) in self.progress.items())
        now = now_ms()
        actions.append(
            CommitInfo(
                operation=self.operation,
                timestamp=now,
                data_change=True,
                read_version=read_version,
                rows_added=sum(a.num_rows for a in self.appends),
                rows_removed=rows_removed,
                bytes_added=sum(a.end - a.start for a in self.appends),
                bytes_removed=bytes_removed,
                parameters=dict(self.parameters),
                engine=ENGINE,
                files_added=sum(1 for a in self.appends if a.start == 0),
                files_removed=files_removed,
                duration_ms=elapsed_ms(self.started_ms, now),
                writer_id=self.writer_id,
            )
        )
        return actions


def with_row_changes(
    pending: AppendCommit, snapshot: Snapshot, changes: RowChanges
) -> AppendCommit:
    """``pending`` (blocklets other writers wrote) deleting ``changes``'s rows in the same
    version, as :meth:`TableWriter.write` commits a delete, update or merge: a delete, update
    or merge whose tasks ran elsewhere (``carbonlite/driver_changes.py``). The table's format
    is raised in the same version when it has no deletion vectors yet."""
    return replace(
        pending,
        deletions=changes.deletions,
        deletions_read=changes.deletions_read,
        exclusive=changes.exclusive,
        row_level=changes.row_level,
        parameters={**pending.parameters, **changes.parameters},
        metadata=_format_for(snapshot, pending.metadata, changes, {}, ()),
    )


def _segment_order(segment_id: str) -> tuple[int, str]:
    head = segment_id.split(".")[0]
    return (int(head) if head.isdigit() else -1, segment_id)


class TableWriter:
    """Writes data for one writer identity (its own stream files) into one table.

    One writer appends to one stream file per segment (``<writer id>-<n>.cblt``), so a stream
    of small appends grows one file instead of making many. Object stores cannot append, so
    there every append writes a new object.
    """

    def __init__(
        self,
        storage: Storage,
        root: str,
        *,
        writer_id: str | None,
        storage_options: Mapping[str, Any] | None,
    ) -> None:
        self.storage = storage
        self.root = root
        self.writer_id = uuid.uuid4().hex[:16] if writer_id is None else check_writer_id(writer_id)
        self.storage_options = dict(storage_options or {})
        self.lock = threading.RLock()
        self._owned_depth = 0
        self._file_schemas: dict[str, pa.Schema] = {}
        self._objects = itertools.count()

    @contextmanager
    def owned(self) -> Iterator[None]:
        """Hold this writer identity: the process-local lock and the storage lock, so a second
        live writer with the same id waits instead of truncating bytes this one committed."""
        with self.lock:
            if self._owned_depth:
                self._owned_depth += 1
                try:
                    yield
                finally:
                    self._owned_depth -= 1
                return
            path = lock_path(self.storage, self.root, self.writer_id)
            with self.storage.lock(path, timeout=WRITER_LOCK_TIMEOUT):
                self._owned_depth = 1
                try:
                    yield
                finally:
                    self._owned_depth = 0

    def leased(self) -> AbstractContextManager[Lease | None]:
        """A lease over this writer's files where no writer lock guards them (object stores:
        each append is a new object that ``recover`` could take for an orphan)."""
        if self.storage.supports_append:
            return nullcontext()
        return Lease(
            self.storage, self.root, owner=f"writer {self.writer_id}", names=[f"{self.writer_id}-"]
        )

    # --- choosing where to write --------------------------------------------------------------

    def target_segment(
        self,
        snapshot: Snapshot,
        *,
        overwrite: bool,
        partition: tuple[Any, ...] | None = None,
        number: int | None = None,
    ) -> tuple[str, bool]:
        """(segment id, whether this commit creates it) for rows of ``partition``; a new
        segment gets ``number`` (default: the next free one)."""
        if not overwrite:
            seg = snapshot.streaming_segment(partition)
            if seg is not None:
                return seg.segment_id, False
        return str(snapshot.next_segment_number() if number is None else number), True

    def stream_file(
        self, snapshot: Snapshot, segment_id: str, schema: pa.Schema
    ) -> tuple[str, int]:
        """(relative path, committed length) of the file this writer appends to in a segment."""
        prefix = f"segments/{segment_id}/{self.writer_id}-"
        if not self.storage.supports_append:
            return f"{prefix}{uuid.uuid4().hex[:12]}.cblt", 0
        seg = snapshot.segments.get(segment_id)
        mine = sorted(
            (int(path[len(prefix) : -len(".cblt")]), f)
            for path, f in (seg.files.items() if seg is not None else ())
            if path.startswith(prefix) and path[len(prefix) : -len(".cblt")].isdigit()
        )
        if not mine:
            return f"{prefix}0.cblt", 0
        n, latest = mine[-1]
        if self._file_schema(latest.path, committed=True).equals(schema):
            return latest.path, latest.committed_length
        return f"{prefix}{n + 1}.cblt", 0  # the table schema changed: start a new file

    def _file_schema(self, rel: str, *, committed: bool) -> pa.Schema:
        """The schema in the header of data file ``rel``. Kept only for a file whose header
        is ``committed`` (in a version of the log): such a header never changes. A file not
        committed yet may be written again from its start (the same name, after a refused
        commit, with another schema), so its header is read every time."""
        schema = self._file_schemas.get(rel) if committed else None
        if schema is None:
            uri = self.storage.uri(self.storage.join(self.root, rel))
            with BlockletFileReader(uri, storage_options=self.storage_options) as reader:
                schema = reader.schema
            if committed:
                self._file_schemas[rel] = schema
        return schema

    # --- writing ------------------------------------------------------------------------------

    def write(
        self,
        log: Log,
        snapshot: Snapshot,
        data: TableData,
        *,
        txn: TxnMarker | None = None,
        overwrite: bool = False,
        operation: str | None = None,
        merge_schema: bool = False,
        changes: RowChanges | None = None,
        parts: Sequence[PartitionRows] | None = None,
        fresh: bool = False,
        overwrite_partitions: frozenset[tuple[Any, ...]] | Literal["dynamic"] | None = None,
        states: StatesArg = (),
        started_ms: int | None = None,
        progress: Mapping[str, tuple[int | None, int]] | None = None,
        shown: ColumnsAsOf | None = None,
    ) -> tuple[CommitResult, Snapshot]:
        """Write ``data`` and commit it as one version; returns the result and new snapshot.
        With ``merge_schema``, columns of ``data`` the table lacks are added in the same
        version; with ``changes``, rows are deleted in the same version (a delete, update or
        merge: ``data`` is what it writes in their place).

        In a partitioned table the rows go to their partitions' segments (``parts``: rows
        already split by partition, ``data`` then unused). ``fresh``: every partition gets a
        new segment (a publish); ``overwrite_partitions``: what an overwrite replaces (None:
        everything, ``"dynamic"``: the partitions ``data`` has rows of); ``states``: state tables
        stored in the same version (a callable is called once the rows are written, for a
        writer whose state says what the data it streamed held: an ingester's files); ``progress``: transaction markers moved by compare-and-set
        (``AppendCommit.progress``); ``shown``: the metadata whose columns ``data`` names (the
        one the writing ``Table`` object showed its user, or the one a row change planned on)
        and what becomes of a column of it renamed or dropped since (:class:`ColumnsAsOf`)."""
        started = now_ms() if started_ms is None else started_ms
        operation = operation or ("OVERWRITE" if overwrite else "APPEND")
        with self.owned():
            snapshot = log.update(snapshot)  # committed lengths as of now, under the lock
            checks: list[TxnNotCommitted | MarkersContinue] = (
                [MarkersContinue.of(progress)] if progress else []
            )
            if txn is not None:
                checks.append(TxnNotCommitted(txn.app_id, txn.batch_id))
            try:  # before writing anything; the commit checks again
                for check in checks:
                    check.check(snapshot, snapshot.version)
            except TransactionAlreadyCommitted:
                return CommitResult(None, operation, skipped=True), snapshot
            with self.leased() as lease:
                return self._write_and_commit(
                    log,
                    snapshot,
                    data,
                    lease,
                    txn=txn,
                    overwrite=overwrite,
                    operation=operation,
                    merge_schema=merge_schema,
                    started_ms=started,
                    changes=changes or RowChanges(),
                    parts=parts,
                    fresh=fresh,
                    overwrite_partitions=overwrite_partitions,
                    states=states,
                    progress=dict(progress or {}),
                    shown=shown,
                )

    def stage(self, log: Log, snapshot: Snapshot, data: TableData) -> AppendCommit | None:
        """``data`` written as an append planned on ``snapshot``, not committed: the pending
        commit (None when ``data`` holds no rows), for :meth:`commit_staged` under the same
        :meth:`owned` and :meth:`leased`. ``write_table`` writes a new table's first rows so,
        before the table exists (``writer/new_table.py``)."""
        return self._staged(
            log,
            snapshot,
            data,
            txn=None,
            overwrite=False,
            operation="APPEND",
            merge_schema=False,
            started_ms=now_ms(),
            changes=RowChanges(),
            parts=None,
            fresh=False,
            overwrite_partitions=None,
            states=(),
            progress={},
            shown=None,
        )

    def commit_staged(
        self,
        log: Log,
        snapshot: Snapshot,
        pending: AppendCommit,
        lease: Lease | None,
        read_version: int,
    ) -> tuple[CommitResult, Snapshot]:
        """Commit written blocklets: checks the ``lease`` they were written under, if any, and
        commits ``pending`` (planned on ``read_version``) from ``snapshot``."""
        reach("append.after_data")
        if lease is not None:
            reach("lease.before_check")
            lease.check()
        return self._commit(log, snapshot, pending, read_version)

    def _write_and_commit(
        self,
        log: Log,
        snapshot: Snapshot,
        data: TableData,
        lease: Lease | None,
        *,
        txn: TxnMarker | None,
        overwrite: bool,
        operation: str,
        merge_schema: bool,
        started_ms: int,
        changes: RowChanges,
        parts: Sequence[PartitionRows] | None,
        fresh: bool,
        overwrite_partitions: frozenset[tuple[Any, ...]] | Literal["dynamic"] | None,
        states: StatesArg,
        progress: Mapping[str, tuple[int | None, int]],
        shown: ColumnsAsOf | None,
    ) -> tuple[CommitResult, Snapshot]:
        """Plan (the schema, the rows by partition), write the blocklets, build the commit
        and commit it."""
        pending = self._staged(
            log,
            snapshot,
            data,
            txn=txn,
            overwrite=overwrite,
            operation=operation,
            merge_schema=merge_schema,
            started_ms=started_ms,
            changes=changes,
            parts=parts,
            fresh=fresh,
            overwrite_partitions=overwrite_partitions,
            states=states,
            progress=progress,
            shown=shown,
        )
        if pending is None:
            return CommitResult(None, operation), snapshot
        read = snapshot.version if changes.read_version is None else changes.read_version
        return self.commit_staged(log, snapshot, pending, lease, read)

    def _staged(
        self,
        log: Log,
        snapshot: Snapshot,
        data: TableData,
        *,
        txn: TxnMarker | None,
        overwrite: bool,
        operation: str,
        merge_schema: bool,
        started_ms: int,
        changes: RowChanges,
        parts: Sequence[PartitionRows] | None,
        fresh: bool,
        overwrite_partitions: frozenset[tuple[Any, ...]] | Literal["dynamic"] | None,
        states: StatesArg,
        progress: Mapping[str, tuple[int | None, int]],
        shown: ColumnsAsOf | None,
    ) -> AppendCommit | None:
        """Plan and write the blocklets, and build the commit (None: nothing to commit)."""
        schema, metadata, parts = _incoming(log, snapshot, data, merge_schema, parts, shown)
        written_with = snapshot.metadata if metadata is None else metadata[1]
        written = self._write_parts(
            snapshot, schema, parts, overwrite=overwrite or fresh, layout=layout_of(written_with)
        )
        if callable(states):
            states = states()
        metadata = _format_for(snapshot, metadata, changes, written.hashes, states)
        if (
            not written.appends
            and not overwrite
            and txn is None
            and metadata is None
            and not changes.deletions
            and not states
            and not progress
        ):
            return None
        return AppendCommit(
            appends=tuple(written.appends),
            new_segments=frozenset(written.new_segments),
            txn=txn,
            overwrite=overwrite,
            operation=operation,
            parameters=self._parameters(overwrite, txn, progress, metadata, merge_schema, changes),
            metadata=metadata,
            written_with=written_with,
            started_ms=started_ms,
            deletions=changes.deletions,
            deletions_read=changes.deletions_read,
            exclusive=changes.exclusive,
            row_level=changes.row_level,
            partitions={k: v for k, v in written.new_segments.items() if v is not None},
            content_hashes=written.hashes,
            overwrite_partitions=_replaced(snapshot, overwrite_partitions, parts),
            states=states,
            progress=progress,
        )

    def _write_parts(
        self,
        snapshot: Snapshot,
        schema: pa.Schema,
        parts: Sequence[PartitionRows],
        *,
        overwrite: bool,
        layout: ColumnLayout,
    ) -> _Written:
        """Each part's rows as blocklets appended to its segment's stream file (a new segment
        for a partition that has none taking appends, or for an overwrite)."""
        props = TableProperties(snapshot.properties)
        written = _Written()
        number = snapshot.next_segment_number()
        file_schema = layout.file_schema(schema)
        for part in parts:
            segment_id, created = self.target_segment(
                snapshot, overwrite=overwrite, partition=part.partition, number=number
            )
            file, committed = self.stream_file(snapshot, segment_id, file_schema)
            appended = write_blocklets(
                self.storage,
                self.root,
                segment_id=segment_id,
                file=file,
                committed_length=committed,
                schema=schema,
                batches=part.data,
                storage_options=self.storage_options,
                compression_level=props.compression_level,
                codec=props.stream_codec,
                max_rows=props.blocklet_max_rows,
                max_bytes=props.blocklet_max_bytes,
                layout=layout,
                blooms=bloom_spec(snapshot.properties, schema, layout),
            )
            if appended is None:
                continue
            written.appends.append(appended)
            if created:
                written.new_segments[segment_id] = part.partition
                number += 1
                if part.content_hash is not None:
                    written.hashes[segment_id] = part.content_hash
        return written

    def _parameters(
        self,
        overwrite: bool,
        txn: TxnMarker | None,
        progress: Mapping[str, tuple[int | None, int]],
        metadata: tuple[TableMetadata, TableMetadata] | None,
        merge_schema: bool,
        changes: RowChanges,
    ) -> dict[str, str]:
        """The commit info's parameters of a write."""
        parameters = {"writer_id": self.writer_id}
        if not changes.parameters:  # a delete, update or merge records its own
            parameters["mode"] = "overwrite" if overwrite else "append"
        if txn is not None:
            parameters.update(app_id=txn.app_id, batch_id=str(txn.batch_id))
        if progress:  # e.g. kafka:events:0=41,kafka:events:1=57: the offsets committed
            parameters["txns"] = ",".join(f"{a}={new}" for a, (_, new) in progress.items())
        if metadata is not None and merge_schema:
            parameters.update(merge_parameters(metadata))
        parameters.update(changes.parameters)
        return parameters

    def commit(
        self,
        log: Log,
        snapshot: Snapshot,
        pending: AppendCommit,
        *,
        read_version: int | None = None,
    ) -> tuple[CommitResult, Snapshot]:
        """Commit ``pending`` (blocklets other writers wrote, such as Spark tasks), moving
        them into this writer's files if their segment stops taking appends (under this
        writer's lease, on object stores). ``read_version``: the version it was planned on,
        when ``snapshot`` is newer."""
        read_version = snapshot.version if read_version is None else read_version
        with self.owned(), self.leased():
            return self._commit(log, snapshot, pending, read_version)

    def _commit(
        self, log: Log, snapshot: Snapshot, pending: AppendCommit, read_version: int
    ) -> tuple[CommitResult, Snapshot]:
        rows = sum(a.num_rows for a in pending.appends)
        self._check_written(pending)
        if pending.writer_id is None:
            pending = replace(pending, writer_id=self.writer_id)
        planned = snapshot
        for _ in range(_MAX_RELOCATIONS):
            try:
                committed = commit(log, snapshot, pending, read_version=read_version)
            except TransactionAlreadyCommitted:
                return CommitResult(None, pending.operation, skipped=True), log.update(snapshot)
            except SegmentNotWritableError:
                snapshot = log.update(snapshot)
                pending = self.relocate(snapshot, pending, planned)
                continue
            return CommitResult(committed.version, pending.operation, rows=rows), committed
        raise CommitConflictError(
            f"gave up committing to {log.uri!r}: the STREAMING segment kept rolling over under "
            f"this writer {_MAX_RELOCATIONS} times",
            read_version=read_version,
        )

    def _check_written(self, pending: AppendCommit) -> None:
        """Refuse to commit bytes that are no longer there (a file removed or cut behind the
        writer's back, e.g. by ``recover`` with a tiny ``min_age``): appended blocklets and
        deletion-vector files alike."""
        for d in pending.deletions:
            path = self.storage.join(self.root, d.dv_file)
            try:
                size = self.storage.size(path)
            except FileNotFoundError:
                size = -1
            if size != d.size:
                raise CommitConflictError(
                    f"deletion-vector file {d.dv_file!r} was removed or changed before its "
                    "commit (by recover with a small min_age?); nothing was committed, run the "
                    "operation again"
                )
        for a in pending.appends:
            for b in a.blooms:
                try:
                    size = self.storage.size(self.storage.join(self.root, b.path))
                except FileNotFoundError:
                    size = -1
                if size != b.size:
                    raise CommitConflictError(
                        f"bloom filter file {b.path!r} was removed or changed before its commit "
                        "(by recover with a small min_age?); nothing was committed, append again"
                    )
            path = self.storage.join(self.root, a.file)
            try:
                size = self.storage.size(path)
            except FileNotFoundError:
                size = -1
            if size < a.end:
                raise CommitConflictError(
                    f"{a.file!r} no longer holds the {a.end - a.start} bytes this writer appended "
                    f"(it has {max(size, 0)} of {a.end}); nothing was committed, append again"
                )

    def relocate(
        self, snapshot: Snapshot, pending: AppendCommit, planned: Snapshot
    ) -> AppendCommit:
        """``pending`` with its blocklets copied into the segments that now take appends (one
        per partition, new ones numbered from the next free id). A segment gone from
        ``snapshot`` (retired, then removed by clean) has the partition ``planned``, the
        snapshot the writer planned on, gave it."""
        groups: dict[tuple[Any, str], list[BlockletsAppended]] = {}
        schemas: dict[str, pa.Schema] = {}
        hashes: dict[tuple[Any, ...] | None, str] = {}
        for a in pending.appends:
            if a.segment_id in pending.new_segments:
                partition = pending.partitions.get(a.segment_id)
                if a.segment_id in pending.content_hashes:
                    hashes[partition] = pending.content_hashes[a.segment_id]
            else:
                seg = snapshot.segments.get(a.segment_id) or planned.segments.get(a.segment_id)
                if seg is None:
                    raise CorruptDataError(
                        f"segment {a.segment_id!r}, which this writer appended to, is in "
                        f"neither version {snapshot.version} nor the version it planned on"
                    )
                partition = seg.partition
            schema = self._file_schema(a.file, committed=a.start > 0)  # header committed
            key = schema.to_string()
            groups.setdefault((partition, key), []).append(a)
            schemas[key] = schema
        moved = []
        used: set[str] = set()
        new_segments: dict[str, tuple[Any, ...] | None] = {}
        targets: dict[tuple[Any, ...] | None, tuple[str, bool]] = {}
        number = snapshot.next_segment_number()
        for (partition, key), sources in groups.items():
            if partition not in targets:
                targets[partition] = self.target_segment(
                    snapshot,
                    overwrite=pending.overwrite or bool(pending.content_hashes),
                    partition=partition,
                    number=number,
                )
                if targets[partition][1]:
                    new_segments[targets[partition][0]] = partition
                    number += 1
            segment_id = targets[partition][0]
            file, committed = self.stream_file(snapshot, segment_id, schemas[key])
            if file in used:  # a second schema in the same commit gets a file of its own
                file, committed = (
                    f"segments/{segment_id}/{self.writer_id}-{uuid.uuid4().hex[:12]}.cblt",
                    0,
                )
            used.add(file)
            moved.append(
                copy_blocklets(
                    self.storage,
                    self.root,
                    sources,
                    segment_id=segment_id,
                    file=file,
                    committed_length=committed,
                    schema=schemas[key],
                    storage_options=self.storage_options,
                )
            )
        return replace(
            pending,
            appends=tuple(moved),
            new_segments=frozenset(new_segments),
            partitions={k: v for k, v in new_segments.items() if v is not None},
            content_hashes={sid: hashes[p] for sid, p in new_segments.items() if p in hashes},
        )


@dataclass
class _Written:
    """What a write appended: the blocklets, the segments it added (with their partitions)
    and the content hashes of those a publish added."""

    appends: list[BlockletsAppended] = field(default_factory=list)
    new_segments: dict[str, tuple[Any, ...] | None] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)


def schema_merge(
    snapshot: Snapshot, incoming: pa.Schema, *, where: str
) -> tuple[TableMetadata, TableMetadata] | None:
    """(read, new) metadata when ``incoming`` has columns the table lacks (added at the end,
    as ``schema_mode="merge"`` and Delta's ``mergeSchema`` add them); None when it has none."""
    merged = merged_schema(snapshot.schema, incoming, where=where)
    if merged.equals(snapshot.schema):
        return None
    added = list(merged)[len(snapshot.schema) :]
    return snapshot.metadata, adding_columns(snapshot, added, {}, where=where)


def merge_parameters(change: tuple[TableMetadata, TableMetadata]) -> dict[str, str]:
    """What a commit info records of a schema its commit merged."""
    read, new = change
    added = new.schema.names[len(read.schema) :]
    return {"schema_mode": "merge", "new_columns": ",".join(added)} if added else {}


def _incoming(
    log: Log,
    snapshot: Snapshot,
    data: TableData,
    merge_schema: bool,
    parts: Sequence[PartitionRows] | None,
    shown: ColumnsAsOf | None = None,
) -> tuple[pa.Schema, tuple[TableMetadata, TableMetadata] | None, Sequence[PartitionRows]]:
    """(the schema the rows are written in, the metadata change a merged schema makes, the
    rows conformed to it and split by partition); ``parts``: rows already split (a
    publish); ``shown``: as :meth:`TableWriter.write` takes it."""
    schema = snapshot.schema
    batches: Iterator[pa.RecordBatch] = iter_record_batches(data)
    metadata = None
    if merge_schema:
        first = next(batches, None)
        if first is not None:
            batches = itertools.chain([first], batches)
            metadata = schema_merge(snapshot, first.schema, where=log.uri)
            if metadata is not None:
                schema = metadata[1].schema
    in_force = snapshot.metadata if metadata is None else metadata[1]
    defaults = layout_of(in_force).defaults
    if parts is None:
        rows = conformed_batches(
            batches,
            schema,
            where=log.uri,
            fill_missing=True,  # the columns rule (conformed_batches) for every append
            defaults=defaults,
            metadata=in_force,
            shown=shown,
        )
        return schema, metadata, route_rows(partition_spec(snapshot.metadata), rows, schema)
    conformed = [
        replace(
            p,
            data=conformed_batches(
                p.data,
                schema,
                where=log.uri,
                fill_missing=True,
                defaults=defaults,
                metadata=in_force,
                shown=shown,
            ),
        )
        for p in parts
    ]
    return schema, metadata, conformed


def _replaced(
    snapshot: Snapshot,
    overwrite_partitions: frozenset[tuple[Any, ...]] | Literal["dynamic"] | None,
    parts: Sequence[PartitionRows],
) -> frozenset[tuple[Any, ...]] | None:
    """The partitions an overwrite replaces (None: every one); ``"dynamic"``: those written
    (the whole table when it is unpartitioned, as in Spark)."""
    if overwrite_partitions != DYNAMIC:
        return overwrite_partitions  # type: ignore[return-value]
    if snapshot.metadata.partition_by:
        return frozenset(p.partition for p in parts if p.partition is not None)
    return None


def _format_for(
    snapshot: Snapshot,
    metadata: tuple[TableMetadata, TableMetadata] | None,
    changes: RowChanges,
    hashes: Mapping[str, str],
    states: tuple[StateStored, ...],
) -> tuple[TableMetadata, TableMetadata] | None:
    """``metadata``, with the table's format raised in the same version when the commit
    needs a newer one: deletion vectors came with format 4, content hashes and states with
    format 5."""
    needed = snapshot.metadata.format_version
    if changes.deletions:
        needed = max(needed, DELETION_VECTOR_FORMAT_VERSION)
    if hashes or states:
        needed = max(needed, PARTITION_FORMAT_VERSION)
    if needed == snapshot.metadata.format_version:
        return metadata
    current = snapshot.metadata if metadata is None else metadata[1]
    return snapshot.metadata, replace(current, format_version=needed)
