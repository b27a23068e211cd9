"""The Spark sinks: exactly-once streaming writes and atomic batch writes, translated onto
the planned/distributed write of ``carbonlite/writer/distributed.py``.

Each micro-batch (or batch job) is planned on the driver; each Spark task writes its rows as
one part, named after the writing application (or job), the partition and the task attempt;
the driver commits every part and the ``(app id, batch id)`` marker (the query's, or
``txnAppId``/``txnVersion`` on a batch write) in ONE log version. A batch the table already
holds is skipped, so a replay after a crash cannot duplicate rows.
"""

from __future__ import annotations

import hashlib
import uuid
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from carbonlite.create import create_table, open_table
from carbonlite.driver import commit_parts, plan_write
from carbonlite.errors import (
    InvalidOptionError,
    SchemaMismatchError,
    TableExistsError,
    TableNotFoundError,
)
from carbonlite.format.conform import schema_differences
from carbonlite.metadata import BlockletsAppended, TxnMarker
from carbonlite.metadata.columns import former_name_problems
from carbonlite.spark.options import SparkOptions
from carbonlite.spark.publish_channel import save_result, states_from_option
from carbonlite.spark.types import arrow_schema_from_spark, relabel_from_spark
from carbonlite.table import Table
from carbonlite.writer.batches import merged_schema
from carbonlite.writer.distributed import (
    abort_parts,
    commit_leased,
    lease_plan,
    write_part,
    write_partitioned_part,
)
from carbonlite.writer.distributed_publish import commit_publish
from carbonlite.writer.lease import Lease
from carbonlite.writer.partition_files import (
    PartitionFile,
    discard_files,
    write_partition_files,
)
from carbonlite.writer.publish import PublishMode, PublishResult
from carbonlite.writer.replace_where import replace_filter
from carbonlite.writer.write_plan import WritePlan

__all__ = [
    "CarbonLiteBatchWriter",
    "CarbonLiteCommitMessage",
    "CarbonLitePublishWriter",
    "CarbonLiteStreamWriter",
]


@dataclass
class CarbonLiteCommitMessage(WriterCommitMessage):
    """What one task wrote (None when it wrote nothing)."""

    appended: BlockletsAppended | None
    app_id: str | None = None
    batch_id: int | None = None
    partition: int = 0
    attempt: int = 0
    partitioned: list[PartitionFile] | None = None
    """The files it wrote per partition, in a partitioned table (``appended`` is None)."""


def _tag(app_id: str) -> str:
    return hashlib.sha1(app_id.encode()).hexdigest()[:12]


def open_or_create(options: SparkOptions, spark_schema: Any) -> Table:
    """The sink's table, created from the incoming schema if missing; a schema that does not
    fit an existing table fails here, before anything is written (with ``mergeSchema``,
    columns the table lacks fit: :func:`planned` adds them)."""
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
                partition_by=partition_fields(options.get("partitionBy") or ""),
                properties=options.table_properties or None,
                storage_options=storage_options or None,
            )
        except TableExistsError:  # another writer created it a moment ago
            table = open_table(uri, storage_options=storage_options or None)
    _check_partitioning(table, options.get("partitionBy"))
    schema = table.schema
    if options.get_bool("mergeSchema"):  # the write's commit adds the new columns
        schema = merged_schema(schema, incoming, where=repr(table.path))
    problems = schema_differences(schema, incoming, allow_missing_nullable=True)
    if problems:
        # a column renamed or dropped since the DataFrame was defined: say so first
        hints = former_name_problems(incoming.names, table._snapshot.metadata)
        advice = "; nothing was written: write them under the table's present names"
        raise SchemaMismatchError(
            f"the data written by Spark does not match the schema of table {table.path!r}"
            + (advice if hints else ""),
            [*hints, *problems],
        )
    return table


def planned(table: Table, options: SparkOptions, spark_schema: Any, overwrite: bool) -> WritePlan:
    """The write's plan; with ``mergeSchema``, one whose commit adds the DataFrame's columns
    the table lacks (``driver.plan_write(merge_schema=...)``)."""
    incoming = arrow_schema_from_spark(spark_schema) if options.get_bool("mergeSchema") else None
    return plan_write(table, overwrite=overwrite, merge_schema=incoming)


def write_task(
    plan: WritePlan,
    iterator: Iterator[pa.RecordBatch],
    *,
    tag: str,
    app_id: str | None,
    batch_id: int | None,
) -> CarbonLiteCommitMessage:
    """One Spark task's part of the write (writer/distributed.py); runs on an executor."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    attempt = ctx.attemptNumber() if ctx is not None else 0
    batches = (relabel_from_spark(b, plan.schema) for b in iterator)
    if plan.partition_by:
        files = write_partitioned_part(
            plan,
            batches,
            tag=tag,
            partition=partition,
            attempt=attempt,
            app_id=app_id,
            batch_id=batch_id,
            reuse=app_id is not None,  # a stream: its tag names its files batch after batch
        )
        return CarbonLiteCommitMessage(None, app_id, batch_id, partition, attempt, files)
    appended = write_part(
        plan,
        batches,
        tag=tag,
        partition=partition,
        attempt=attempt,
        app_id=app_id,
        batch_id=batch_id,
    )
    return CarbonLiteCommitMessage(appended, app_id, batch_id, partition, attempt)


def _parts(messages: list[Any]) -> list[BlockletsAppended | None]:
    return [m.appended if m is not None else None for m in messages]


def _partitioned(messages: list[Any]) -> list[PartitionFile]:
    return [f for m in messages if m is not None for f in (m.partitioned or ())]


def _abort(plan: WritePlan, messages: list[Any]) -> None:
    """Cut every file the tasks appended to back to its committed length (a stream's
    partition files too), deleting those no version holds."""
    abort_parts(plan, [*_parts(messages), *(f.appended for f in _partitioned(messages))])


class _LeasedWriter:
    """Holds the driver's lease for one planned batch, and keeps it out of what Spark ships to
    the executors. Should Spark drop the writer without a commit or abort, the lease is
    released when the writer is collected, so no heartbeat renews it forever."""

    _lease: Lease | None = None

    def _hold(self, plan: WritePlan, owner: str) -> None:
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


class CarbonLiteStreamWriter(_LeasedWriter, DataSourceStreamArrowWriter):
    """``df.writeStream.format("carbonlite")``: one log version per micro-batch."""

    def __init__(self, options: SparkOptions, spark_schema: Any, overwrite: bool) -> None:
        table = open_or_create(options, spark_schema)
        self.plan = planned(table, options, spark_schema, overwrite)
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
            lambda: commit_parts(
                self.plan,
                _parts(messages),
                txn=txn,
                operation="STREAMING UPDATE",
                parameters={
                    "outputMode": self.output_mode,
                    "queryId": app_id or "",
                    "epochId": str(batchId),
                },
                writer_id=f"{_tag(app_id) if app_id else 'stream'}-driver",
                partitioned=_partitioned(messages),
            ),
        )

    def abort(self, messages: list[Any], batchId: int) -> None:
        _abort(self.plan, messages)
        self._release()


class CarbonLiteBatchWriter(_LeasedWriter, DataSourceArrowWriter):
    """``df.write.format("carbonlite")``: one atomic commit per write. With ``txnAppId`` and
    ``txnVersion`` (Delta's idempotent writes, e.g. in ``foreachBatch``) the write commits its
    transaction marker with its rows, and a version the table already holds for that app id
    writes nothing."""

    def __init__(self, options: SparkOptions, spark_schema: Any, overwrite: bool) -> None:
        self.mode = (
            options.get("carbonlite.saveMode") or ("overwrite" if overwrite else "append")
        ).lower()
        self.txn = _batch_txn(options)
        exists = self.mode in ("error", "errorifexists", "default", "ignore") and _exists(options)
        if exists and self.mode != "ignore":
            raise TableExistsError(
                f"table {options.path!r} already exists (save mode {self.mode!r}); use "
                "mode('append') or mode('overwrite') to write into it, or mode('ignore') to "
                "leave it"
            )
        if exists:  # mode ignore on an existing table: leave it as it is, schema included
            table = open_table(options.path, storage_options=options.storage_options or None)
        else:
            table = open_or_create(options, spark_schema)
        replace_where = _replace_where(options, table, self.mode)
        merge = options.get_bool("mergeSchema") and not exists
        self.plan = plan_write(
            table,
            overwrite=overwrite and replace_where is None,
            skip=exists,
            txn=self.txn,
            merge_schema=arrow_schema_from_spark(spark_schema) if merge else None,
        )
        self.plan.dynamic_overwrite = _dynamic_overwrite(options)
        self.plan.replace_where = replace_where
        self.tag = uuid.uuid4().hex[:12]
        self._hold(self.plan, "spark write")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> CarbonLiteCommitMessage:
        return write_task(self.plan, iterator, tag=self.tag, app_id=None, batch_id=None)

    def commit(self, messages: list[Any]) -> None:
        parameters = {"mode": self.mode}
        if self.plan.replace_where is not None:
            parameters["replaceWhere"] = self.plan.replace_where
        if self.txn is not None:
            parameters.update(txnAppId=self.txn.app_id, txnVersion=str(self.txn.batch_id))
        commit_leased(
            self._lease,
            lambda: commit_parts(
                self.plan,
                _parts(messages),
                txn=self.txn,
                operation="WRITE",
                parameters=parameters,
                writer_id=f"{_tag(self.txn.app_id) if self.txn else 'batch'}-driver",
                partitioned=_partitioned(messages),
            ),
        )

    def abort(self, messages: list[Any]) -> None:
        _abort(self.plan, messages)
        self._release()


def _replace_where(options: SparkOptions, table: Table, mode: str) -> str | None:
    """The option ``replaceWhere`` (Delta's selective overwrite), checked against the table
    before anything is written: it needs ``mode("overwrite")`` and a table without a primary
    key, and must parse (``reader/sql_filter.py``)."""
    predicate = options.get("replaceWhere")
    if predicate is None:
        return None
    if mode != "overwrite":
        raise InvalidOptionError(
            f"option replaceWhere={predicate!r} replaces the rows it matches, so it needs "
            f"mode('overwrite'), not mode({mode!r})"
        )
    if table.primary_key:
        raise InvalidOptionError(
            f"option replaceWhere is not supported for the primary-key table {table.path!r}: "
            "its writes upsert by key; delete the rows first (Table.delete), then append"
        )
    replace_filter(predicate, table.schema, where=repr(table.path))  # InvalidFilterError if bad
    return predicate


def _dynamic_overwrite(options: SparkOptions) -> bool:
    """The write option ``partitionOverwriteMode``, else the session's
    ``spark.sql.sources.partitionOverwriteMode`` (passed on by ``spark/patches.py``), else
    static: the precedence of Spark's file sources."""
    given = options.get("partitionOverwriteMode")
    source = "option partitionOverwriteMode"
    if given is None:
        given = options.get("carbonlite.sessionPartitionOverwriteMode")
        source = "session setting spark.sql.sources.partitionOverwriteMode"
    mode = (given or "static").lower()
    if mode not in ("static", "dynamic"):
        raise InvalidOptionError(
            f"{source}={given!r} must be 'static' (an overwrite replaces the whole table) or "
            "'dynamic' (only the partitions it writes)"
        )
    return mode == "dynamic"


def _exists(options: SparkOptions) -> bool:
    try:
        open_table(options.path, storage_options=options.storage_options or None)
    except TableNotFoundError:
        return False
    return True


def _batch_txn(options: SparkOptions) -> TxnMarker | None:
    """``txnAppId`` + ``txnVersion``: both or neither."""
    app_id = options.get("txnAppId")
    version = options.get_int("txnVersion")
    if app_id is None and version is None:
        return None
    if not app_id or version is None:
        raise InvalidOptionError(
            "txnAppId and txnVersion go together: give both (e.g. in foreachBatch, "
            ".option('txnAppId', app).option('txnVersion', batch_id)) or neither; got "
            f"txnAppId={app_id!r}, txnVersion={options.get('txnVersion')!r}"
        )
    return TxnMarker(app_id, version)


def _check_partitioning(table: Table, given: str | None) -> None:
    """A write naming partition fields (option or ``partitionBy()``) other than an existing
    table's is refused, as Delta refuses one: the table keeps its partitioning."""
    if given is None:
        return

    def canon(fields: Sequence[str]) -> list[str]:
        return ["".join(f.split()).lower() for f in fields]

    if canon(partition_fields(given)) != canon(table.partition_by):
        now = ", ".join(table.partition_by) or "none"
        raise InvalidOptionError(
            f"partitionBy {given!r} does not match the partitioning of table {table.path!r} "
            f"({now}); nothing was written: drop partitionBy to write into the table as it is "
            "partitioned"
        )


def partition_fields(text: str) -> list[str]:
    """``partitionBy`` as partition fields: commas split fields, except inside parentheses
    (``"region, bucket(16, id)"`` is two fields)."""
    fields: list[str] = []
    current: list[str] = []
    depth = 0
    for c in text:
        depth += (c == "(") - (c == ")")
        if c == "," and depth == 0:
            fields.append("".join(current).strip())
            current = []
        else:
            current.append(c)
    fields.append("".join(current).strip())
    return [f for f in fields if f]


@dataclass
class CarbonLitePublishMessage(WriterCommitMessage):
    """The partitions one task wrote, with their content sums."""

    parts: list[PartitionFile]


class CarbonLitePublishWriter(_LeasedWriter, DataSourceArrowWriter):
    """``df.write.format("carbonlite").option("publish", "incremental"|"snapshot")``: tasks
    write and hash their partitions, the driver commits the changed ones once
    (``writer/distributed_publish.py``)."""

    def __init__(self, options: SparkOptions, spark_schema: Any, overwrite: bool) -> None:
        mode = (options.get("publish") or "").lower()
        if mode not in ("incremental", "snapshot"):
            raise InvalidOptionError(
                f"option publish={options.get('publish')!r} must be 'incremental' or 'snapshot'"
            )
        if overwrite:
            raise InvalidOptionError(
                "a publish decides itself which partitions it replaces: write it with "
                "mode('append'), not mode('overwrite')"
            )
        table = open_or_create(options, spark_schema)
        if not table.partition_by:
            raise InvalidOptionError(
                f"publish needs a partitioned table; {table.path!r} has no partition_by (create "
                "it with partition_by, or give option partitionBy when Spark creates it)"
            )
        self.mode: PublishMode = mode  # type: ignore[assignment]
        self.spec_json = list(table.partition_by)
        self.plan = plan_write(table, overwrite=False)
        self.tag = uuid.uuid4().hex[:12]
        self.token = options.get("publishToken")
        self.states = states_from_option(options.get("publishState"))
        self._hold(self.plan, "spark publish")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> CarbonLitePublishMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        batches = (relabel_from_spark(b, self.plan.schema) for b in iterator)
        parts = write_partition_files(
            self.plan,
            batches,
            spec_json=self.spec_json,
            tag=self.tag,
            task=task,
            attempt=attempt,
            hashed=True,
        )
        return CarbonLitePublishMessage(parts)

    def commit(self, messages: list[Any]) -> None:
        parts = [p for m in messages if m is not None for p in m.parts]
        results: list[PublishResult] = []
        commit_leased(
            self._lease,
            lambda: results.append(
                commit_publish(
                    self.plan,
                    parts,
                    mode=self.mode,
                    states=self.states,
                    writer_id=f"publish-{self.tag}-driver",
                )
            ),
        )
        if self.token and results:
            save_result(self.plan, self.token, results[0])

    def abort(self, messages: list[Any]) -> None:
        discard_files(self.plan, [p.appended for m in messages if m is not None for p in m.parts])
        self._release()
