"""The stream source: ``spark.readStream.format("carbonlite")`` (micro-batches of a table's log).

An offset is a position in the log,
``{"version": v, "index": i, "blocklet": k, "row": r, "initial": b, ...}``: the first ``i``
units of version ``v`` have been delivered, the first ``k`` blocklets of unit ``i`` and the
first ``r`` rows of its next blocklet; it also names the table and the query's start
(carbonlite/spark/offsets.py). A unit is one file's appended range in one commit (or, for the
initial snapshot, one whole file); the limits on rows and bytes cut units between rows, inside
a blocklet if need be. Offsets never name physical file offsets, which compaction could move;
commits with ``data_change = false`` (handoff, compaction) hold no units, so no row is
delivered twice. A query's start is decided once, at the first ``initialOffset`` (or
``prepareForTriggerAvailableNow``), and every offset after it carries it.

A query's schema is fixed when it starts (the table's latest metadata when Spark creates the
reader; of a user schema, its columns): a later version that renames, drops or widens one
of its columns ends the batch before it, and the next batch, which would start at it, fails with
:class:`SchemaChangedError` naming the version and the change. The rows before it were
delivered once; the query restarted from its checkpoint reads on with the new schema (files
written before the change are read with the new layout). An added column is no such change:
the query goes on without it (docs/SPARK.md, "Schema evolution").
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from carbonlite.arguments import timestamp_ms_arg
from carbonlite.create import open_table
from carbonlite.errors import (
    CarbonLiteError,
    DataUnavailableError,
    InvalidOptionError,
    SchemaChangedError,
    VersionNotFoundError,
)
from carbonlite.metadata import (
    Action,
    BlockletsAppended,
    CommitInfo,
    RowsDeleted,
    SegmentStatusChanged,
    Snapshot,
    TableMetadata,
)
from carbonlite.metadata.columns import schema_change_problems
from carbonlite.metadata.timeline import earliest_version, first_version_at_or_after
from carbonlite.reader.planner import Split, plan_scan
from carbonlite.seams import reach
from carbonlite.spark.offsets import Position, StreamOffset, batch_range, read_offset
from carbonlite.spark.options import SparkOptions
from carbonlite.spark.source import (
    LOG,
    SplitsPartition,
    log_at_info,
    nullable_of,
    open_from,
    partitions_of,
    read_partition,
    requested_columns,
)
from carbonlite.table import Table

__all__ = ["STREAM_LOG_ENV", "CarbonLiteStreamReader", "log_stream_batch"]

_WHOLE_FILES = 1 << 62
"""A split size no file reaches: the initial snapshot is read as one unit per file."""


STREAM_LOG_ENV = "CARBONLITE_SPARK_LOG"
"""Set (to anything) in the environment the Spark driver starts with, it makes the stream
source print its per-batch line to the driver's stderr."""


def _log_to_stderr() -> None:
    """Spark runs a stream source's driver side in a Python process of its own that has no
    logging set up and that ``python_worker_logs()`` does not cover; its stderr is the Spark
    driver's. With :data:`STREAM_LOG_ENV` set, the logger writes there."""
    if os.environ.get(STREAM_LOG_ENV) and not LOG.hasHandlers():
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        LOG.addHandler(handler)


def log_stream_batch(uri: str, start: Position, stop: Position, splits: Sequence[Split]) -> None:
    """One INFO line per planned micro-batch: what it reads (Spark 4.3 has no custom metrics
    for Python streams, and a stream source gets no filters, so nothing is pruned)."""
    log_at_info()
    _log_to_stderr()
    LOG.info(
        "carbonlite stream batch of %r from %s to %s: %d rows, %d bytes, %d blocklets (%d read "
        "in part) in %d units",
        uri,
        _at(start),
        _at(stop),
        sum(s.num_rows for s in splits),
        sum(_split_bytes(s) for s in splits),
        sum(len(s.blocklets) for s in splits),
        sum(bool(s.start_row) + (s.stop_row is not None) for s in splits),
        len(splits),
    )


def _at(p: Position) -> str:
    snapshot = " of the snapshot" if p.initial else ""
    return f"version {p.version}{snapshot} unit {p.unit} blocklet {p.blocklet} row {p.row}"


def _split_bytes(split: Split) -> int:
    """The bytes a split counts for against maxBytesPerTrigger (see ``_bytes_of``)."""
    return sum(
        _bytes_of(hi - lo, b.num_rows, b.length)
        for b, (lo, hi) in zip(
            split.blocklets, map(split.row_range, range(len(split.blocklets))), strict=True
        )
    )


@dataclass(frozen=True)
class _Unit:
    split: Split
    rows: int
    nbytes: int


class CarbonLiteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("carbonlite").load(path)``."""

    def __init__(self, options: SparkOptions, spark_schema: Any) -> None:
        self.options = options
        table = open_from(options)
        self.uri = table.path
        self.storage_options = table.storage_options
        snapshot = table._snapshot
        self.table_schema = snapshot.schema
        self.layout = snapshot.layout
        self.metadata_version = snapshot.version
        """The version whose metadata fixes the query's schema: a later one that renames,
        drops or widens a column of it ends the stream there (see the module's documentation)."""
        self.columns = requested_columns(
            self.table_schema, spark_schema, repr(self.uri), snapshot.metadata
        )
        self.metadata = _of_columns(snapshot.metadata, self.columns)
        """The metadata of the columns the query reads (a user schema may name fewer)."""
        self.nullable = nullable_of(self.table_schema, spark_schema)
        self.max_files = options.get_int("maxFilesPerTrigger", minimum=1)
        self.max_bytes = options.get_size("maxBytesPerTrigger")
        self.max_rows = options.get_int("maxRowsPerTrigger", minimum=1)
        self.skip_change_commits = options.get_bool("skipChangeCommits")
        self.starting_version = options.get("startingVersion")
        self.starting_timestamp = options.get("startingTimestamp")
        if self.starting_version is not None and self.starting_timestamp is not None:
            raise InvalidOptionError(
                f"reading {self.uri!r}: give startingVersion or startingTimestamp, not both "
                f"(got startingVersion={self.starting_version!r}, "
                f"startingTimestamp={self.starting_timestamp!r})"
            )
        self._table: Table | None = None
        self._units: dict[tuple[int, bool], list[_Unit]] = {}
        self._schema_changes: dict[int, list[str]] = {}
        self._available_now: int | None = None
        self.table_id = table.table_id
        self._initial: StreamOffset | None = None
        """The query's start, once initialOffset (or prepareForTriggerAvailableNow) decided it."""

    # --- log access (driver side) -------------------------------------------------------------

    @property
    def table(self) -> Table:
        if self._table is None:
            self._table = open_table(self.uri, storage_options=self.storage_options or None)
        return self._table

    def _latest(self) -> int:
        latest = self.table.refresh().version
        return latest if self._available_now is None else min(latest, self._available_now)

    def _initial_units(self, version: int) -> list[_Unit]:
        snapshot = self.table.snapshot(version)
        changes = self._note_schema_change(version, snapshot.metadata)
        if changes:
            # the table changed between the reader's creation and the query's start
            raise self._schema_changed(version, changes)
        plan = plan_scan(snapshot, columns=None, filter=None, split_bytes=_WHOLE_FILES)
        return [_Unit(split, split.num_rows, split.num_bytes) for split in plan.splits]

    def _actions(self, version: int) -> list[Action]:
        try:
            before: Snapshot = self.table.snapshot()
            return self.table.log.read_retained(version, before)
        except FileNotFoundError:
            raise DataUnavailableError(
                f"version {version} of {self.uri!r} is no longer in the log (clean removed it); "
                "the stream fell behind the table's log retention: restart it with a new checkpoint"
            ) from None

    def _note_schema_change(self, version: int, metadata: TableMetadata | None) -> list[str]:
        """What ``version`` (whose metadata is ``metadata``, None: unchanged) renamed, dropped
        or widened of the query's schema: nothing for the versions up to the reader's own."""
        changes: list[str] = []
        if metadata is not None and version > self.metadata_version:
            changes = schema_change_problems(self.metadata, metadata, widened=True)
        self._schema_changes[version] = changes
        return changes

    def _schema_change(self, version: int, initial: bool = False) -> list[str]:
        """:meth:`_note_schema_change` of ``version``, read once (``initial``: of the snapshot
        at ``version``)."""
        changes = self._schema_changes.get(version)
        if changes is None:
            if version <= self.metadata_version:
                return []
            if initial:
                metadata: TableMetadata | None = self.table.snapshot(version).metadata
            else:
                actions = self._actions(version)
                metadata = next((a for a in actions if isinstance(a, TableMetadata)), None)
            changes = self._note_schema_change(version, metadata)
        return changes

    def _schema_changed(self, version: int, changes: list[str]) -> SchemaChangedError:
        return SchemaChangedError(
            f"the stream of {self.uri!r} reached version {version}, which changed the schema "
            f"the query started with (at version {self.metadata_version}): {'; '.join(changes)}"
            "; every row before it was delivered: restart the query to read on with the new "
            "schema",
            version=version,
            changes=changes,
        )

    def _version_units(self, version: int) -> list[_Unit]:
        actions = self._actions(version)
        metadata = next((a for a in actions if isinstance(a, TableMetadata)), None)
        if self._note_schema_change(version, metadata):
            return []  # _batch_end stops before it
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        if info is None or not info.data_change:
            return []
        if any(
            isinstance(a, RowsDeleted)
            or (isinstance(a, SegmentStatusChanged) and a.status == "MARKED_FOR_DELETE")
            for a in actions
        ):
            if self.skip_change_commits:
                return []
            raise CarbonLiteError(
                f"version {version} of {self.uri!r} ({info.operation}) removed rows, which a "
                "stream cannot deliver as appends; set option skipChangeCommits=true to skip such commits "
                "(their new rows are skipped too), or restart the stream from a later version"
            )
        return [
            _Unit(
                Split(a.segment_id, a.file, a.end, a.blocklets),
                a.num_rows,
                sum(b.length for b in a.blocklets),
            )
            for a in actions
            if isinstance(a, BlockletsAppended) and a.blocklets
        ]

    def _units_of(self, version: int, initial: bool) -> list[_Unit]:
        key = (version, initial)
        units = self._units.get(key)
        if units is None:
            units = self._units[key] = (
                self._initial_units(version) if initial else self._version_units(version)
            )
        return units

    # --- Spark's streaming protocol -----------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Where the query starts: decided at the first call, the same answer at every later
        one (Spark asks again to plan batch 0's partitions, docs/SPARK.md)."""
        offset = self._start().to_json()
        reach("source.after_initial_offset")
        return offset

    def _start(self) -> StreamOffset:
        if self._initial is None:
            position = self._initial_position()
            self._initial = StreamOffset(position, self.table_id, position)
        return self._initial

    def _initial_position(self) -> Position:
        snapshot = self.table.refresh()._snapshot
        latest = snapshot.version
        if self.starting_timestamp is not None:
            return Position(self._version_from_timestamp(snapshot), 0, 0, False)
        start = self.starting_version
        if start is None:
            return Position(latest, 0, 0, True)
        if start.strip().lower() == "latest":
            return Position(latest + 1, 0, 0, False)
        try:
            version = int(start)
        except ValueError:
            raise InvalidOptionError(
                f"startingVersion={start!r} must be a version number or 'latest'"
            ) from None
        earliest = earliest_version(self.table.log, latest)
        if not earliest <= version <= latest:
            raise VersionNotFoundError(
                f"startingVersion={version} is not a version of {self.uri!r}: its log holds "
                f"versions {earliest} to {latest}"
            )
        return Position(version, 0, 0, False)

    def check_start(self) -> None:
        """Raise now what the query's first ``initialOffset`` would raise for its starting
        options (a ``startingVersion`` the log does not hold, a ``startingTimestamp`` after the
        latest commit or not a time), without deciding the start: ``readStream...load()`` calls
        it (carbonlite/spark/patches.py), so the error comes before any query runs."""
        if self.starting_version is not None or self.starting_timestamp is not None:
            self._initial_position()

    def _offset(self, offset: dict[str, Any]) -> StreamOffset:
        """An offset Spark hands back, checked to be one of this table's. One written before
        offsets named their table gets this table's id on its way on."""
        read = read_offset(offset, self.table_id, repr(self.uri))
        return StreamOffset(read.position, self.table_id, read.start)

    def _version_from_timestamp(self, snapshot: Snapshot) -> int:
        text = self.starting_timestamp or ""
        try:
            ms = timestamp_ms_arg(text, what="startingTimestamp")
        except InvalidOptionError:
            ms = None
        if ms is None:
            raise InvalidOptionError(
                f"startingTimestamp={text!r} reading {self.uri!r} is not a timestamp: give an "
                "ISO 8601 time such as '2026-11-22T18:00:00Z' or '2026-11-22 18:00:00' (UTC "
                "when it has no offset)"
            )
        try:
            return first_version_at_or_after(self.table.log, snapshot, ms)
        except VersionNotFoundError as exc:
            raise VersionNotFoundError(
                f"startingTimestamp={text!r}: {exc}; give an earlier time, or "
                "startingVersion=latest for only the commits made after the query starts"
            ) from None

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_files is not None:
            return ReadMaxFiles(self.max_files)
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # Spark calls this before initialOffset: the start is decided first, so what is
        # available now is never older than the snapshot the query starts from
        self._start()
        self._available_now = self.table.refresh().version
        reach("source.after_available_now")

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        end = self._latest_offset(start, limit)
        reach("source.after_latest_offset")
        return end

    def _latest_offset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        offset = self._offset(start)
        return offset.at(self._batch_end(offset.position, limit)).to_json()

    def _batch_end(self, start: Position, limit: ReadLimit) -> Position:
        version, index, blocklet, initial, row = start
        latest = self._latest()
        limited = not isinstance(limit, ReadAllAvailable)
        max_files = self.max_files if limited else None
        max_bytes = self.max_bytes if limited else None
        max_rows = self.max_rows if limited else None
        if isinstance(limit, ReadMaxFiles):
            max_files = limit.max_files
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        elif isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        # Units count against maxFilesPerTrigger; rows and bytes are added row by row (a
        # row's bytes: its share of its blocklet's stored bytes), so a batch may end inside a
        # unit and inside a blocklet. Every batch takes one row at least.
        files = nbytes = rows = 0
        while version <= latest:
            units = self._units_of(version, initial)
            changes = self._schema_change(version, initial)
            if changes:
                # the rows before it are delivered and committed first; the batch after
                # them would start here
                if rows:
                    return Position(version, 0, 0, False)
                raise self._schema_changed(version, changes)
            while index < len(units):
                blocklets = units[index].split.blocklets
                while blocklet < len(blocklets):
                    b = blocklets[blocklet]
                    left = b.num_rows - row
                    new_unit = (blocklet == 0 and row == 0) or rows == 0
                    take = _rows_within(
                        left, b.num_rows, b.length, max_rows, max_bytes, rows, nbytes
                    )
                    if rows and (
                        take == 0 or (max_files is not None and new_unit and files >= max_files)
                    ):
                        return Position(version, index, blocklet, initial, row)
                    take = max(take, min(left, 1))
                    files += new_unit
                    rows, nbytes = rows + take, nbytes + _bytes_of(take, b.num_rows, b.length)
                    if take < left:
                        return Position(version, index, blocklet, initial, row + take)
                    blocklet, row = blocklet + 1, 0
                index, blocklet, row = index + 1, 0, 0
            version, index, blocklet, row, initial = version + 1, 0, 0, 0, False
        return Position(version, index, blocklet, initial, row)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        latest = Position(self.table.refresh().version + 1, 0, 0, False)
        return StreamOffset(latest, self.table_id, None).to_json()

    def _batch(self, start: dict[str, Any], end: dict[str, Any]) -> tuple[Position, Position]:
        """The positions a batch reads between (see :func:`batch_range`)."""
        return batch_range(self._offset(start), self._offset(end))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        position, stop = self._batch(start, end)
        version, index, blocklet, initial, row = position
        splits: list[Split] = []
        until = (stop.version, not stop.initial, stop.unit, stop.blocklet, stop.row)
        while (version, not initial, index, blocklet, row) < until:
            units = self._units_of(version, initial)
            last = (version, initial) == (stop.version, stop.initial)
            while index < len(units) and (
                not last or (index, blocklet, row) < (stop.unit, stop.blocklet, stop.row)
            ):
                split = units[index].split
                upto, stop_row = len(split.blocklets), None
                if last and index == stop.unit:
                    # a batch ending inside a blocklet reads that blocklet's first rows
                    upto, stop_row = stop.blocklet + (stop.row > 0), stop.row or None
                if upto > blocklet:
                    splits.append(
                        dataclasses.replace(
                            split,
                            blocklets=split.blocklets[blocklet:upto],
                            start_row=row,
                            stop_row=stop_row,
                        )
                    )
                index, blocklet, row = index + 1, 0, 0
            version, index, blocklet, row, initial = version + 1, 0, 0, 0, False
        log_stream_batch(self.uri, position, stop, splits)
        return partitions_of(self, splits)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitsPartition)
        reach("source.before_read")
        yield from read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        version = self._offset(end).position.version
        for key in [k for k in self._units if k[0] < version]:
            del self._units[key]
        for v in [v for v in self._schema_changes if v < version]:
            del self._schema_changes[v]

    def stop(self) -> None:
        self._units.clear()
        self._schema_changes.clear()
        self._table = None


def _of_columns(metadata: TableMetadata, columns: Sequence[str]) -> TableMetadata:
    """``metadata`` with only ``columns`` in its schema (and their ids): a change to a column
    the query does not read does not stop it."""
    if list(columns) == metadata.schema.names:
        return metadata
    index = [metadata.schema.get_field_index(c) for c in columns]
    return dataclasses.replace(
        metadata,
        schema=pa.schema([metadata.schema.field(i) for i in index]),
        columns=tuple(metadata.columns[i] for i in index) if metadata.columns else (),
    )


def _rows_within(
    left: int,
    num_rows: int,
    length: int,
    max_rows: int | None,
    max_bytes: int | None,
    rows: int,
    nbytes: int,
) -> int:
    """How many of a blocklet's ``left`` rows fit in a batch that holds ``rows`` rows and
    ``nbytes`` bytes already (a blocklet of ``num_rows`` rows stored in ``length`` bytes)."""
    take = left
    if max_rows is not None:
        take = min(take, max(max_rows - rows, 0))
    if max_bytes is not None and length:
        take = min(take, max(max_bytes - nbytes, 0) * num_rows // length)
    return take


def _bytes_of(take: int, num_rows: int, length: int) -> int:
    """The bytes ``take`` rows of a blocklet count for: their share, rounded up."""
    return -(-length * take // num_rows) if num_rows else length
