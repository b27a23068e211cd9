"""``spark.readStream.format("carbonlite").option("readChangeFeed", "true")``: the change feed
(and ``spark.read`` with the same option: the changes of a range of versions, as a batch).

Each row carries the change columns of ``Table.changes`` (``_change_type`` in ``insert``,
``delete``, ``update_preimage``, ``update_postimage``; ``_commit_version``;
``_commit_timestamp``). Without ``startingVersion``/``startingTimestamp`` the stream starts
with the table's rows at the latest version, as inserts of that version (Delta's behaviour),
then every later commit's changes. Offsets are those of the plain stream source (the version
to read next; the start is decided once, and offsets name the table); a micro-batch takes
whole versions: ``maxFilesPerTrigger`` counts versions (the initial rows count as one), and
the other limits are not applied. A version that renames, drops or widens a column of the
query's schema ends the stream as in the plain source (a batch ends before it, the next one
fails with ``SchemaChangedError``); a restarted query reads every version's changes with its
own, newer, schema and layout.

The batch read (:class:`CarbonLiteChangeFeedBatchReader`, Delta's ``readChangeFeed`` batch
query) needs ``startingVersion`` or ``startingTimestamp`` and ends at ``endingVersion`` or
``endingTimestamp`` (inclusive; the latest version by default), the versions
``Table.changes`` reads for the same arguments; each version is one partition, read in the
end version's schema and layout.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxFiles

from carbonlite.create import open_table
from carbonlite.errors import InvalidOptionError
from carbonlite.metadata.columns import ColumnLayout
from carbonlite.reader.changes import CHANGE_COLUMNS, read_changes
from carbonlite.seams import reach
from carbonlite.spark.offsets import Position
from carbonlite.spark.options import SparkOptions
from carbonlite.spark.source import requested_columns
from carbonlite.spark.stream_source import CarbonLiteStreamReader
from carbonlite.spark.types import cast_for_spark, spark_arrow_schema
from carbonlite.table import Table

__all__ = [
    "CHANGE_NAMES",
    "RANGE_OPTIONS",
    "CarbonLiteChangeFeedBatchReader",
    "CarbonLiteChangeFeedReader",
    "ChangeFeedPartition",
    "change_feed_versions",
    "version_partitions",
    "with_changes",
]

CHANGE_NAMES = frozenset(f.name for f in CHANGE_COLUMNS)
RANGE_OPTIONS = ("startingVersion", "startingTimestamp", "endingVersion", "endingTimestamp")
"""The options of a batch read of the change feed that name its versions."""


def change_feed_versions(options: SparkOptions, table: Table) -> tuple[int, int]:
    """The first and last version a batch read of the change feed reads (see the module's
    documentation); a clear error for a range it cannot read."""
    where = f"reading the change feed of {table.path!r}"
    fixes = {
        "versionAsOf": "name the versions with startingVersion and endingVersion",
        "timestampAsOf": "name the versions with startingTimestamp and endingTimestamp",
        "filter": "filter the DataFrame with .where() instead",
    }
    for name, fix in fixes.items():
        if options.get(name) is not None:
            raise InvalidOptionError(f"{where}: {name} does not apply to the change feed: {fix}")
    start = _one_of(options, "startingVersion", "startingTimestamp", where)
    end = _one_of(options, "endingVersion", "endingTimestamp", where)
    if start is None:
        raise InvalidOptionError(
            f"{where}: a batch read of the change feed needs startingVersion or "
            "startingTimestamp (as Delta's does), such as .option('startingVersion', 0)"
        )
    return table.change_versions(start, end)


def _one_of(options: SparkOptions, version: str, timestamp: str, where: str) -> int | str | None:
    if options.get(version) is not None and options.get(timestamp) is not None:
        raise InvalidOptionError(f"{where}: give {version} or {timestamp}, not both")
    if options.get(timestamp) is not None:
        return options.get(timestamp)
    return options.get_int(version)


def with_changes(schema: pa.Schema) -> pa.Schema:
    """``schema`` and the change columns after it (what a change-feed stream returns)."""
    return pa.schema([*schema, *CHANGE_COLUMNS])


@dataclass
class ChangeFeedPartition(InputPartition):
    """One version's changes, or (``initial``) the rows at ``version`` as inserts."""

    uri: str
    storage_options: dict[str, Any]
    columns: list[str]
    output: pa.Schema
    version: int
    initial: bool
    table_schema: pa.Schema
    """The query's schema (older versions are read in it, with ``layout``)."""
    layout: ColumnLayout


def _without_change_columns(spark_schema: Any) -> Any:
    from pyspark.sql.types import StructType

    if spark_schema is None:
        return None
    return StructType([f for f in spark_schema.fields if f.name not in CHANGE_NAMES])


class CarbonLiteChangeFeedReader(CarbonLiteStreamReader):
    """The stream source in change-feed mode (see the module's documentation)."""

    def __init__(self, options: SparkOptions, spark_schema: Any) -> None:
        super().__init__(options, _without_change_columns(spark_schema))
        fields = [self.table_schema.field(c) for c in self.columns]
        self.output = spark_arrow_schema(with_changes(pa.schema(fields)))

    def _latest_offset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        offset = self._offset(start)
        version = offset.position.version
        latest = self._latest()
        if version > latest:
            return offset.to_json()
        most = None
        if isinstance(limit, ReadMaxFiles):
            most = limit.max_files
        elif not isinstance(limit, ReadAllAvailable):
            most = self.max_files
        end = latest + 1 if most is None else min(latest + 1, version + max(1, most))
        for v in range(version, end):
            changes = self._schema_change(v, offset.position.initial and v == version)
            if changes:
                if v == version:
                    raise self._schema_changed(v, changes)
                end = v  # the versions before it first
                break
        return offset.at(Position(end, 0, 0, False)).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        first, stop = self._batch(start, end)
        initial = first.version if first.initial else None
        return version_partitions(self, range(first.version, stop.version), initial)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChangeFeedPartition)
        reach("source.before_read")
        yield from read_change_partition(partition)


class CarbonLiteChangeFeedBatchReader(DataSourceReader):
    """``spark.read.format("carbonlite").option("readChangeFeed", "true")``: the changes of
    the versions :func:`change_feed_versions` names, one partition per version."""

    def __init__(self, options: SparkOptions, spark_schema: Any) -> None:
        self.uri = options.path
        self.storage_options = options.storage_options
        table = open_table(self.uri, storage_options=self.storage_options or None)
        self.first, self.end = change_feed_versions(options, table)
        snapshot = table.snapshot(self.end)
        self.table_schema = snapshot.schema
        self.layout = snapshot.layout
        self.columns = requested_columns(
            self.table_schema,
            _without_change_columns(spark_schema),
            repr(self.uri),
            snapshot.metadata,
        )
        fields = [self.table_schema.field(c) for c in self.columns]
        self.output = spark_arrow_schema(with_changes(pa.schema(fields)))

    def partitions(self) -> list[InputPartition]:
        return version_partitions(self, range(self.first, self.end + 1))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChangeFeedPartition)
        yield from read_change_partition(partition)


class _ChangeReader(Protocol):
    uri: str
    storage_options: dict[str, Any]
    columns: list[str]
    output: pa.Schema
    table_schema: pa.Schema
    layout: ColumnLayout


def version_partitions(
    reader: _ChangeReader, versions: range, initial: int | None = None
) -> list[InputPartition]:
    """One partition per version of ``versions`` (``initial``: the version whose partition
    holds the table's rows as inserts, a stream's start)."""
    return [
        ChangeFeedPartition(
            uri=reader.uri,
            storage_options=reader.storage_options,
            columns=reader.columns,
            output=reader.output,
            version=version,
            initial=version == initial,
            table_schema=reader.table_schema,
            layout=reader.layout,
        )
        for version in versions
    ]


def read_change_partition(p: ChangeFeedPartition) -> Iterator[pa.RecordBatch]:
    """The rows of one change-feed partition, Spark-typed (runs on an executor)."""
    table = open_table(p.uri, storage_options=p.storage_options or None)
    snapshot = table.snapshot(p.version)
    if p.initial:
        rows = table.to_arrow(columns=p.columns, version=p.version)
        n = rows.num_rows
        extra = [
            pa.array(["insert"] * n, pa.string()),
            pa.array([p.version] * n, pa.int64()),
            pa.array([snapshot.timestamp] * n, pa.int64()).cast(CHANGE_COLUMNS[2].type),
        ]
        changes = pa.Table.from_arrays([*rows.columns, *extra], schema=with_changes(rows.schema))
    else:
        before = table.log.load_version(p.version - 1, snapshot) if p.version > 0 else None
        changes = read_changes(
            table.storage,
            table.root,
            table.log,
            before,
            p.version,
            p.table_schema,
            storage_options=table.storage_options,
            layout=p.layout,
        ).select([*p.columns, *(f.name for f in CHANGE_COLUMNS)])
    for batch in changes.to_batches():
        yield cast_for_spark(batch, p.output)
