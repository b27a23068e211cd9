"""The Spark sinks: exactly-once streaming writes and atomic batch writes.

Each micro-batch (or batch job) is planned on the driver against the latest snapshot: which
segment takes the data and the committed length of every stream file in it. Each task
appends blocklets to its own file, named after the writing application, the partition and the
task attempt (so retries and speculative attempts never share a file), truncating it to its
committed length first; it returns the appended range as its commit message. The driver
commits every task's range and the ``(query id, batch id)`` marker in ONE log version; a batch
the table already holds is skipped, so a replay after a crash cannot duplicate rows.
"""

from __future__ import annotations

import hashlib
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from carbonlite.create import create_table, open_table
from carbonlite.errors import (
    CarbonLiteError,
    SchemaMismatchError,
    TableExistsError,
    TableNotFoundError,
)
from carbonlite.format.conform import schema_differences
from carbonlite.metadata import BlockletsAppended, TxnMarker
from carbonlite.properties import TableProperties
from carbonlite.spark.options import SparkOptions
from carbonlite.spark.types import arrow_schema_from_spark, relabel_from_spark
from carbonlite.storage import open_storage
from carbonlite.table import Table
from carbonlite.writer.append import (
    WRITER_LOCK_TIMEOUT,
    AppendCommit,
    TableWriter,
    lock_path,
    now_ms,
)
from carbonlite.writer.batches import conformed_batches
from carbonlite.writer.lease import Lease
from carbonlite.writer.stream_file import write_blocklets

__all__ = ["CarbonLiteBatchWriter", "CarbonLiteCommitMessage", "CarbonLiteStreamWriter", "SinkPlan"]


@dataclass
class CarbonLiteCommitMessage(WriterCommitMessage):
    """What one task wrote (None when it wrote nothing)."""

    appended: BlockletsAppended | None
    app_id: str | None = None
    batch_id: int | None = None
    partition: int = 0
    attempt: int = 0


@dataclass
class SinkPlan:
    """Everything a task needs, decided on the driver for one micro-batch or job."""

    uri: str
    storage_options: dict[str, Any]
    schema: pa.Schema
    segment_id: str
    new_segment: bool
    committed: dict[str, int] = field(default_factory=dict)
    txns: dict[str, int] = field(default_factory=dict)
    overwrite: bool = False
    skip: bool = False
    blocklet_max_rows: int = 65_536
    blocklet_max_bytes: int = 64 * 1024 * 1024
    compression_level: int = 1
    read_version: int = 0
    planned_ms: int | None = None
    """When the driver planned the batch: its commit records the duration from here."""


def _tag(app_id: str) -> str:
    return hashlib.sha1(app_id.encode()).hexdigest()[:12]


def open_or_create(options: SparkOptions, spark_schema: Any) -> Table:
    """The sink's table, created from the incoming schema if missing; a schema that does not
    fit an existing table fails here, before anything is written."""
    uri, storage_options = options.path, options.storage_options
    incoming = arrow_schema_from_spark(spark_schema)
    try:
        table = open_table(uri, storage_options=storage_options or None)
    except TableNotFoundError:
        try:
            return create_table(
                uri,
                incoming,
                sort_columns=options.get_list("sortColumns"),
                properties=options.table_properties or None,
                storage_options=storage_options or None,
            )
        except TableExistsError:  # another writer created it a moment ago
            table = open_table(uri, storage_options=storage_options or None)
    problems = schema_differences(table.schema, incoming, allow_missing_nullable=True)
    if problems:
        raise SchemaMismatchError(
            f"the data written by Spark does not match the schema of table {table.path!r}", problems
        )
    return table


def plan_sink(table: Table, *, overwrite: bool, skip: bool = False) -> SinkPlan:
    snap = table.refresh().snapshot()
    writer = TableWriter(
        table.storage, table.root, writer_id="plan", storage_options=table.storage_options
    )
    segment_id, created = writer.target_segment(snap, overwrite=overwrite)
    seg = snap.segments.get(segment_id)
    props = TableProperties(snap.properties)
    return SinkPlan(
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
        read_version=snap.version,
        planned_ms=now_ms(),
    )


def write_task(
    plan: SinkPlan,
    iterator: Iterator[pa.RecordBatch],
    *,
    tag: str,
    app_id: str | None,
    batch_id: int | None,
) -> CarbonLiteCommitMessage:
    """Append this task's rows to its own stream file; runs on an executor."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    attempt = ctx.attemptNumber() if ctx is not None else 0
    done = plan.txns.get(app_id) if app_id is not None else None
    if plan.skip or (done is not None and batch_id is not None and done >= batch_id):
        for _ in iterator:  # already committed (a replay) or ignored: write nothing
            pass
        return CarbonLiteCommitMessage(None, app_id, batch_id, partition, attempt)
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    name = f"{tag}-p{partition:05d}-a{attempt}"
    file = f"segments/{plan.segment_id}/{name}.cblt"
    batches = (relabel_from_spark(b, plan.schema) for b in iterator)
    lock = storage.lock(lock_path(storage, root, name), timeout=WRITER_LOCK_TIMEOUT)
    with lock:  # a zombie attempt of an earlier batch may still hold this file
        appended = _write_task_file(storage, root, plan, file, batches)
    return CarbonLiteCommitMessage(appended, app_id, batch_id, partition, attempt)


def _write_task_file(
    storage: Any, root: str, plan: SinkPlan, file: str, batches: Iterator[pa.RecordBatch]
) -> BlockletsAppended | None:
    return write_blocklets(
        storage,
        root,
        segment_id=plan.segment_id,
        file=file,
        committed_length=plan.committed.get(file, 0),
        schema=plan.schema,
        batches=conformed_batches(batches, plan.schema, where=plan.uri),
        storage_options=plan.storage_options,
        compression_level=plan.compression_level,
        max_rows=plan.blocklet_max_rows,
        max_bytes=plan.blocklet_max_bytes,
    )


def commit_messages(
    plan: SinkPlan,
    messages: list[Any],
    *,
    txn: TxnMarker | None,
    operation: str,
    parameters: dict[str, str],
) -> None:
    """Commit every task's appends (and ``txn``) as one version; runs on the driver."""
    appends = tuple(m.appended for m in messages if m is not None and m.appended is not None)
    if plan.skip or (not appends and not plan.overwrite):
        return
    table = open_table(plan.uri, storage_options=plan.storage_options or None)
    writer = TableWriter(
        table.storage,
        table.root,
        writer_id=f"{_tag(txn.app_id) if txn else 'batch'}-driver",
        storage_options=table.storage_options,
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
    writer.commit(table.log, table.refresh().snapshot(), pending, read_version=plan.read_version)


def lease_plan(plan: SinkPlan, owner: str) -> Lease | None:
    """A lease over the segment the plan's tasks write into, held on the driver from planning
    until the commit or abort: recover leaves task files alone while the batch is in flight,
    however long it takes (writer/lease.py)."""
    if plan.skip:
        return None
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    return Lease(storage, root, owner=owner, paths=[f"segments/{plan.segment_id}/"]).acquire()


def commit_leased(lease: Lease | None, commit: Callable[[], None]) -> None:
    """Run ``commit`` if ``lease`` still holds, then release it (``Lease.__exit__`` leaves the
    record to expire when the commit's outcome is unknown: a late version may need the files)."""
    if lease is None:
        commit()
        return
    with lease:  # held since planning
        lease.check()
        commit()


class _LeasedWriter:
    """Holds the driver's lease for one planned batch, and keeps it out of what Spark ships to
    the executors. Should Spark drop the writer without a commit or abort, the lease is
    released when the writer is collected, so no heartbeat renews it forever."""

    _lease: Lease | None = None

    def _hold(self, plan: SinkPlan, owner: str) -> None:
        self._lease = lease_plan(plan, owner)
        if self._lease is not None:
            weakref.finalize(self, self._lease.release)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lease", None)
        return state

    def _release(self) -> None:
        if self._lease is not None:
            self._lease.release()


def abort_messages(plan: SinkPlan, messages: list[Any]) -> None:
    """Cut the files of an aborted batch back to their committed lengths (best effort: the
    next writer of each file does it anyway)."""
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    try:
        table = open_table(plan.uri, storage_options=plan.storage_options or None)
        snap = table.snapshot()
    except CarbonLiteError:
        return
    for m in messages:
        if m is None or m.appended is None:
            continue
        a = m.appended
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


class CarbonLiteStreamWriter(_LeasedWriter, DataSourceStreamArrowWriter):
    """``df.writeStream.format("carbonlite")``: one log version per micro-batch."""

    def __init__(self, options: SparkOptions, spark_schema: Any, overwrite: bool) -> None:
        table = open_or_create(options, spark_schema)
        self.plan = plan_sink(table, overwrite=overwrite)
        self.app_id = options.get("txnAppId")
        self.output_mode = "complete" if overwrite else "append"
        self._hold(self.plan, "spark stream")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> CarbonLiteCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query_id = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        app_id = self.app_id or query_id or "unknown-query"
        batch_id = int(batch) if batch is not None else None
        return write_task(self.plan, iterator, tag=_tag(app_id), app_id=app_id, batch_id=batch_id)

    def commit(self, messages: list[Any], batchId: int) -> None:
        app_id = self.app_id or next(
            (m.app_id for m in messages if m is not None and m.app_id), None
        )
        txn = TxnMarker(app_id, batchId) if app_id else None
        commit_leased(
            self._lease,
            lambda: commit_messages(
                self.plan,
                messages,
                txn=txn,
                operation="STREAMING UPDATE",
                parameters={
                    "outputMode": self.output_mode,
                    "queryId": app_id or "",
                    "epochId": str(batchId),
                },
            ),
        )

    def abort(self, messages: list[Any], batchId: int) -> None:
        abort_messages(self.plan, messages)
        self._release()


class CarbonLiteBatchWriter(_LeasedWriter, DataSourceArrowWriter):
    """``df.write.format("carbonlite")``: one atomic commit per write."""

    def __init__(self, options: SparkOptions, spark_schema: Any, overwrite: bool) -> None:
        mode = (
            options.get("carbonlite.saveMode") or ("overwrite" if overwrite else "append")
        ).lower()
        skip = False
        if mode in ("error", "errorifexists", "default", "ignore"):
            uri = options.path
            try:
                open_table(uri, storage_options=options.storage_options or None)
                exists = True
            except TableNotFoundError:
                exists = False
            if exists and mode != "ignore":
                raise TableExistsError(
                    f"table {uri!r} already exists (save mode {mode!r}); use mode('append') or "
                    "mode('overwrite') to write into it, or mode('ignore') to leave it"
                )
            skip = exists
        table = open_or_create(options, spark_schema)
        self.plan = plan_sink(table, overwrite=overwrite, skip=skip)
        self.tag = uuid.uuid4().hex[:12]
        self.mode = mode
        self._hold(self.plan, "spark write")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> CarbonLiteCommitMessage:
        return write_task(self.plan, iterator, tag=self.tag, app_id=None, batch_id=None)

    def commit(self, messages: list[Any]) -> None:
        commit_leased(
            self._lease,
            lambda: commit_messages(
                self.plan, messages, txn=None, operation="WRITE", parameters={"mode": self.mode}
            ),
        )

    def abort(self, messages: list[Any]) -> None:
        abort_messages(self.plan, messages)
        self._release()
