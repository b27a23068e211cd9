"""``CarbonTable``: a CarbonLite table seen from PySpark, in the shape of delta-spark's
``DeltaTable``, so that code written for Delta needs only the import and the class name
changed::

    from carbonlite.spark import CarbonTable

    t = CarbonTable.forPath(spark, "/data/events")
    t.delete("kind = 'test'")
    t.update("id = 7", {"value": "value * 2"})
    (t.alias("t").merge(updates.alias("s"), "t.id = s.id")
        .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    t.history(10).show()
    t.optimize().executeCompaction()
    t.vacuum(168)

Spark 4.3's SQL ``DELETE``/``UPDATE``/``MERGE`` cannot reach a Python data source, hence
this class. Row-level changes run as Spark jobs on the executors
(``carbonlite/spark/row_change_job.py``, ``merge_builder.py``); compaction runs its tasks on
the executors too (``carbonlite/spark/compaction.py``); the rest is the core's
:class:`~carbonlite.table.Table`, with its answers turned into DataFrames.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from carbonlite.arguments import timestamp_ms_arg
from carbonlite.clock import now_ms
from carbonlite.compaction import CompactionResult
from carbonlite.compaction.clean import MIN_RETENTION_SECONDS
from carbonlite.compaction.partition_select import partition_compactions
from carbonlite.create import open_table
from carbonlite.errors import InvalidOptionError, TableNotFoundError, UnsupportedOperationError
from carbonlite.records import CommitRecord, table_summary
from carbonlite.table import Table

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from carbonlite.spark.merge_builder import CarbonMergeBuilder

__all__ = ["CarbonOptimizeBuilder", "CarbonTable"]

RETENTION_CHECK_CONF = "spark.carbonlite.retentionDurationCheck.enabled"
"""Set to ``false`` to let :meth:`CarbonTable.vacuum` keep less than one hour (Delta's
``spark.databricks.delta.retentionDurationCheck.enabled``)."""

_HISTORY_SCHEMA = (
    "version long, timestamp timestamp, operation string, "
    "operationParameters map<string,string>, readVersion long, isBlindAppend boolean, "
    "dataChange boolean, operationMetrics map<string,string>, writerId string, "
    "engineInfo string"
)
_DETAIL_SCHEMA = (
    "format string, id string, name string, description string, location string, "
    "createdAt timestamp, lastModified timestamp, partitionColumns array<string>, "
    "clusteringColumns array<string>, numFiles long, sizeInBytes long, "
    "properties map<string,string>, minReaderVersion int, minWriterVersion int, "
    "tableFeatures array<string>, version long, numRows long, numDeletedRows long, "
    "numSegments long, numBlocklets long, primaryKey array<string>"
)
_BLIND_APPENDS = frozenset({"WRITE", "STREAMING UPDATE", "APPEND", "CREATE TABLE"})


class CarbonTable:
    """A CarbonLite table for PySpark users, named and shaped as delta-spark's
    ``DeltaTable`` (see docs/SPARK.md, "CarbonTable")."""

    def __init__(self, spark: SparkSession, table: Table, *, alias: str | None = None) -> None:
        self._spark = spark
        self._table = table
        self._alias = alias

    # --- finding a table ----------------------------------------------------------------------

    @classmethod
    def forPath(
        cls,
        sparkSession: SparkSession,
        path: str | os.PathLike[str],
        storage_options: Mapping[str, Any] | None = None,
    ) -> CarbonTable:
        """The table at ``path`` (a directory or an object-store URI); ``storage_options`` as
        :func:`carbonlite.open_table` takes them. :class:`TableNotFoundError` when there is
        no CarbonLite table."""
        return cls(sparkSession, open_table(path, storage_options=storage_options or None))

    @classmethod
    def forName(cls, sparkSession: SparkSession, tableOrViewName: str) -> CarbonTable:
        """The table registered as ``tableOrViewName`` with
        :func:`carbonlite.spark.register_table` in this session."""
        from carbonlite.spark.catalog import bound_table

        path, storage_options = bound_table(sparkSession, tableOrViewName)
        return cls.forPath(sparkSession, path, storage_options or None)

    @classmethod
    def isCarbonTable(
        cls,
        sparkSession: SparkSession,
        identifier: str | os.PathLike[str],
        storage_options: Mapping[str, Any] | None = None,
    ) -> bool:
        """Whether ``identifier`` (a path) holds a CarbonLite table. A table that exists but
        cannot be read (damaged, a newer format) raises its error rather than answer False."""
        try:
            open_table(identifier, storage_options=storage_options or None).close()
        except TableNotFoundError:
            return False
        return True

    # --- the table's rows -----------------------------------------------------------------------

    @property
    def table(self) -> Table:
        """The core :class:`~carbonlite.table.Table` handle (brought up to date)."""
        return self._table.refresh()

    def toDF(self) -> DataFrame:
        """The table's latest rows as a DataFrame (with the alias, if any)."""
        reader = self._spark.read.format("carbonlite")
        if self._table.storage_options:
            import json

            reader = reader.option("storageOptions", json.dumps(dict(self._table.storage_options)))
        df = reader.load(self._table.path)
        return df.alias(self._alias) if self._alias else df

    def alias(self, aliasName: str) -> CarbonTable:
        """This table under the name ``aliasName`` (for merge conditions, ``toDF``)."""
        if not isinstance(aliasName, str) or not aliasName:
            raise InvalidOptionError(f"alias must be a non-empty string, not {aliasName!r}")
        return CarbonTable(self._spark, self._table, alias=aliasName)

    # --- row-level changes (Spark jobs on the executors) --------------------------------------

    def delete(self, condition: str | Column | None = None) -> DataFrame:
        """Delete the rows ``condition`` (a SQL string or a ``Column``; None: every row)
        holds for, in one commit. Returns one row: ``num_affected_rows``,
        ``num_deleted_rows`` ... and the ``version`` committed (null when no row matched)."""
        from carbonlite.spark.row_change_job import delete_rows

        return delete_rows(self._spark, self.table, condition, alias=self._alias)

    def update(
        self,
        condition: str | Column | None = None,
        set: Mapping[str, str | Column] | None = None,
    ) -> DataFrame:
        """Set columns of the rows ``condition`` holds for: ``set`` maps a column to a SQL
        expression string or a ``Column`` of the row's old values. One commit."""
        from carbonlite.spark.row_change_job import update_rows

        if set is None:
            raise InvalidOptionError(
                "update needs set={column: expression}, such as set={'v': 'v + 1'}"
            )
        return update_rows(self._spark, self.table, condition, set, alias=self._alias)

    def merge(self, source: DataFrame, condition: str | Column) -> CarbonMergeBuilder:
        """Start a merge of ``source`` into this table on ``condition``; add
        ``whenMatched...``/``whenNotMatched...`` clauses and ``execute()`` it."""
        from carbonlite.spark.merge_builder import CarbonMergeBuilder

        return CarbonMergeBuilder(self._spark, self.table, source, condition, alias=self._alias)

    # --- history, detail, restore -------------------------------------------------------------

    def history(self, limit: int | None = None) -> DataFrame:
        """The table's commits, newest first (at most ``limit``), as a DataFrame with Delta's
        column names where they mean the same: version, timestamp, operation,
        operationParameters, readVersion, isBlindAppend, operationMetrics, engineInfo;
        and CarbonLite's dataChange and writerId."""
        records = self.table.history(limit)
        return self._spark.createDataFrame([_history_row(r) for r in records], _HISTORY_SCHEMA)

    def detail(self) -> DataFrame:
        """One row describing the table (Delta's ``DESCRIBE DETAIL`` columns, with
        ``clusteringColumns`` holding the sort columns, and CarbonLite's version, row,
        segment and blocklet counts and primary key)."""
        table = self.table
        snap = table.snapshot()
        summary = table_summary(snap)
        latest = table.history(1)
        meta = snap.metadata
        created = datetime.datetime.fromtimestamp(
            meta.created_time / 1000, tz=datetime.timezone.utc
        )
        row: tuple[Any, ...] = (
            "carbonlite",
            meta.table_id,
            None,
            None,
            table.path,
            created,
            latest[0].timestamp if latest else created,
            list(meta.partition_by),
            list(meta.sort_columns),
            summary.files,
            summary.bytes,
            dict(snap.properties),
            meta.format_version,
            meta.format_version,
            [],
            snap.version,
            summary.rows,
            summary.deleted_rows,
            summary.live_segments,
            summary.blocklets,
            list(meta.primary_key),
        )
        return self._spark.createDataFrame([row], _DETAIL_SCHEMA)

    def restoreToVersion(self, version: int) -> DataFrame:
        """Make the table's rows, schema and properties those of ``version``, in one new
        commit (``Table.restore``); returns Delta's restore metrics."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidOptionError(
                f"restoreToVersion takes a version number, not {type(version).__name__} "
                f"{version!r}; for a point in time use restoreToTimestamp"
            )
        return self._restored(version)

    def restoreToTimestamp(self, timestamp: str | datetime.datetime) -> DataFrame:
        """Restore the latest version committed at or before ``timestamp`` (a datetime, or a
        string such as ``'2026-11-26 10:00:00'``; without a zone it is in the session's
        ``spark.sql.session.timeZone``, as Spark reads timestamps)."""
        if not isinstance(timestamp, (str, datetime.datetime)):
            raise InvalidOptionError(
                f"restoreToTimestamp takes a timestamp string or datetime, not "
                f"{type(timestamp).__name__} {timestamp!r}; for a version use restoreToVersion"
            )
        return self._restored(self._in_session_zone(timestamp))

    def _in_session_zone(self, when: str | datetime.datetime) -> datetime.datetime:
        """``when`` as an aware datetime: without a zone, in the session's time zone."""
        if isinstance(when, str):
            timestamp_ms_arg(when, what="timestamp")  # refuses what is not ISO 8601, clearly
            when = datetime.datetime.fromisoformat(when.strip().replace("Z", "+00:00"))
        if when.tzinfo is None:
            zone = self._spark.conf.get("spark.sql.session.timeZone", "UTC") or "UTC"
            when = when.replace(tzinfo=ZoneInfo(zone))
        return when

    def _restored(self, version: int | datetime.datetime) -> DataFrame:
        table = self.table
        result = table.restore(version)
        record = None if result.version is None else table.history(1)[0]
        summary = table_summary(table.snapshot())
        row = (
            result.version,
            summary.bytes,
            summary.files,
            record.files_removed if record is not None else 0,
            record.files_added if record is not None else 0,
            record.bytes_removed if record is not None else 0,
            record.bytes if record is not None else 0,
        )
        return self._spark.createDataFrame(
            [row],
            "version long, table_size_after_restore long, num_of_files_after_restore long, "
            "num_removed_files long, num_restored_files long, removed_files_size long, "
            "restored_files_size long",
        )

    # --- maintenance --------------------------------------------------------------------------

    def optimize(self) -> CarbonOptimizeBuilder:
        """Compaction, as Delta's ``optimize().executeCompaction()``."""
        return CarbonOptimizeBuilder(self._spark, self)

    def vacuum(self, retentionHours: float | None = None) -> DataFrame:
        """Delete what no version within ``retentionHours`` needs (default: the table's
        ``deleted_data_retention``, 7 days, as Delta's 168 hours): data files of compacted and
        deleted segments, old log files, and files no version references (a failed write's
        debris) untouched for that long. Less than one hour is refused unless the session sets
        ``spark.carbonlite.retentionDurationCheck.enabled=false``. Returns what was deleted."""
        if retentionHours is not None and (
            isinstance(retentionHours, bool) or not isinstance(retentionHours, (int, float))
        ):
            raise InvalidOptionError(
                f"retentionHours must be a number of hours, not {retentionHours!r}"
            )
        if retentionHours is not None and retentionHours < 0:
            raise InvalidOptionError(f"retentionHours must not be negative: {retentionHours}")
        checked = str(self._spark.conf.get(RETENTION_CHECK_CONF, "true")).strip().lower()
        seconds = None if retentionHours is None else float(retentionHours) * 3600
        if checked != "false" and seconds is not None and seconds < MIN_RETENTION_SECONDS:
            raise InvalidOptionError(
                f"vacuum({retentionHours:g}) would keep less than 1 hour: readers, lagging "
                "streams and writers of older versions may still need those files. If you are "
                f"sure nothing reads versions that old, set {RETENTION_CHECK_CONF}=false"
            )
        table = self.table
        cleaned = table.clean(seconds, force=checked == "false")
        # debris of failed writes (never committed) older than the same retention
        recovered = table.recover(min_age=cleaned.retention_seconds)
        return self._spark.createDataFrame(
            [
                (
                    table.path,
                    cleaned.version,
                    len(cleaned.files) + len(recovered.orphans),
                    cleaned.bytes + recovered.bytes_freed,
                    len(cleaned.log_files),
                    cleaned.retention_seconds / 3600,
                )
            ],
            "path string, version long, numDeletedFiles long, numDeletedBytes long, "
            "numDeletedLogFiles long, retentionHours double",
        )

    def __repr__(self) -> str:
        alias = f" AS {self._alias}" if self._alias else ""
        return f"CarbonTable({self._table.path!r}{alias})"


class CarbonOptimizeBuilder:
    """``CarbonTable.optimize()``: ``executeCompaction()`` hands off finished streaming
    segments and merges small segments, with the tasks on Spark's executors; after
    ``where(partitionFilter)``, only the partitions the filter selects."""

    def __init__(
        self, spark: SparkSession, table: CarbonTable, partition_filter: str | None = None
    ) -> None:
        self._spark = spark
        self._table = table
        self._partition_filter = partition_filter

    def where(self, partitionFilter: str) -> CarbonOptimizeBuilder:
        """Compact only the partitions ``partitionFilter`` (a SQL condition on partition
        columns, such as ``"region = 'eu'"``) selects (Delta's ``optimize().where``)."""
        if not isinstance(partitionFilter, str) or not partitionFilter.strip():
            raise InvalidOptionError(
                "optimize().where() takes a SQL condition on partition columns as a string, "
                f"such as \"region = 'eu'\", not {partitionFilter!r}"
            )
        partition_compactions(self._table.table.snapshot(), partitionFilter)  # checked now
        return CarbonOptimizeBuilder(self._spark, self._table, partitionFilter)

    def executeZOrderBy(self, *columns: str) -> DataFrame:
        """Not supported: CarbonLite has no Z-order clustering."""
        raise UnsupportedOperationError(
            f"optimize().executeZOrderBy({', '.join(map(repr, columns))}) is not supported: "
            "CarbonLite does not Z-order. Handoff and compaction sort each segment by the table "
            "property sort_columns (set it with Table.set_properties), and min/max, bloom "
            "filters (bloom_filter_columns) and the secondary index (secondary_index_columns) "
            "prune lookups on other columns; run optimize().executeCompaction()"
        )

    def executeCompaction(self) -> DataFrame:
        """Close the STREAMING segments (``Table.finish_streaming``: writers go on into new
        ones), hand off every finished streaming segment (``Table.handoff``: a partition's
        small streaming files become one sorted file), then compact
        (``Table.compact("major")``). Every commit has ``data_change = false``, so streaming
        readers never see a row twice, and ingestion goes on meanwhile. Returns one row: the
        path, the versions committed and Delta-like metrics."""
        from carbonlite.spark.compaction import spark_executor

        table = self._table.table
        executor = spark_executor(self._spark)
        started = now_ms()
        closed = table.finish_streaming()
        closing = [table.version] if closed is not None else []
        if self._partition_filter is None:
            handoff = [table.handoff(executor=executor)]
            compaction = [table.compact("major", executor=executor)]
        else:  # the selected partitions' finished segments, each partition merged into one
            handoff = []
            compaction = self._compact_partitions(table, self._partition_filter, executor)
        results = [*handoff, *compaction]
        versions = [*closing, *(v for r in results for v in r.versions)]
        metrics = {
            "numStreamingSegmentsClosed": len(closed.split(",")) if closed else 0,
            "numSegmentsHandedOff": sum(len(r.segments_compacted) for r in handoff),
            "numSegmentsCompacted": sum(len(r.segments_compacted) for r in compaction),
            "numSegmentsAdded": sum(len(r.segments_created) for r in results),
            "numRowsRewritten": sum(r.rows for r in results),
            "numBytesRead": sum(r.bytes_read for r in results),
            "numBytesWritten": sum(r.bytes_written for r in results),
            "totalTimeMs": now_ms() - started,
        }
        return self._spark.createDataFrame(
            [(table.path, versions, metrics)],
            "path string, versions array<long>, metrics map<string,long>",
        )

    @staticmethod
    def _compact_partitions(
        table: Table, partition_filter: str, executor: Any
    ) -> list[CompactionResult]:
        """One custom compaction per selected partition, each planned on the latest snapshot
        (a partition another compaction merged meanwhile has nothing left to merge)."""
        done: set[tuple[object, ...]] = set()
        results: list[CompactionResult] = []
        while True:
            pending = [
                (key, ids)
                for key, ids in partition_compactions(table.refresh().snapshot(), partition_filter)
                if key not in done
            ]
            if not pending:
                return results
            key, ids = pending[0]
            done.add(key)
            results.append(table.compact("custom", segments=ids, executor=executor))


def _history_row(r: CommitRecord) -> tuple[Any, ...]:
    metrics = {
        "numOutputRows": r.rows,
        "numOutputBytes": r.bytes,
        "numRemovedRows": r.rows_removed,
        "numRemovedBytes": r.bytes_removed,
    }
    if r.files_added is not None:
        metrics["numAddedFiles"] = r.files_added
    if r.files_removed is not None:
        metrics["numRemovedFiles"] = r.files_removed
    if r.duration is not None:
        metrics["executionTimeMs"] = round(r.duration.total_seconds() * 1000)
    blind = r.operation in _BLIND_APPENDS and r.rows_removed == 0 and r.data_change
    return (
        r.version,
        r.timestamp,
        r.operation,
        dict(r.parameters),
        r.read_version,
        blind,
        r.data_change,
        {k: str(v) for k, v in metrics.items()},
        r.writer_id,
        r.engine,
    )
