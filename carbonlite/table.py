"""The Table facade: one object for a table, thin over writer/, reader/ and metadata/."""

from __future__ import annotations

import dataclasses
import datetime
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar

import pyarrow as pa

from carbonlite.arguments import (
    SchemaMode,
    VersionLike,
    callback_arg,
    columns_arg,
    duration_seconds_of,
    flag_arg,
    markers_arg,
    names_arg,
    schema_mode_arg,
    storage_options_arg,
    timestamp_ms_arg,
    txn_arg,
    version_arg,
    writer_id_arg,
)
from carbonlite.clock import now_ms
from carbonlite.compaction.auto import auto_compact
from carbonlite.compaction.clean import CleanResult, clean
from carbonlite.compaction.plan import CompactionKind
from carbonlite.compaction.progress import ProgressCallback
from carbonlite.compaction.recover import DEFAULT_MIN_AGE_SECONDS, RecoverResult, recover
from carbonlite.compaction.run import (
    CompactionResult,
    TaskExecutor,
    finish_streaming,
    run_compaction,
)
from carbonlite.compaction.verify import VerifyResult, verify
from carbonlite.errors import (
    InvalidOptionError,
    StaleSchemaError,
    VersionNotFoundError,
)
from carbonlite.iceberg import IcebergState, export_version, iceberg_format
from carbonlite.iceberg import read_state as read_iceberg_state
from carbonlite.metadata import (
    LOG_FORMAT_VERSION,
    Log,
    Snapshot,
    StateStored,
    TxnMarker,
    commit,
)
from carbonlite.metadata.columns import with_column_ids
from carbonlite.metadata.post_commit import EXIT_WAIT_SECONDS
from carbonlite.metadata.timeline import version_at
from carbonlite.names import check_name, table_location
from carbonlite.optional import require
from carbonlite.properties import TableProperties, effective_properties
from carbonlite.reader.bloom_prune import bloom_pruner
from carbonlite.reader.changes import read_changes
from carbonlite.reader.expression import Filter, FilterLike, parse_filter
from carbonlite.reader.parquet_view import ParquetView, is_parquet_columnar, parquet_view
from carbonlite.reader.planner import ScanPlan, Split, plan_scan, project_schema
from carbonlite.reader.scan import SplitReader, TableScan, read_splits
from carbonlite.records import (
    CommitRecord,
    PartitionInfo,
    SegmentInfo,
    partition_infos,
    read_history,
    segment_infos,
)
from carbonlite.storage import open_storage
from carbonlite.writer.append import CommitResult, StatesArg, TableWriter
from carbonlite.writer.batches import (
    ColumnsAsOf,
    TableData,
    check_not_moved,
    iter_record_batches,
)
from carbonlite.writer.build_index import IndexBuildResult, IndexKind, build_index
from carbonlite.writer.modify import (
    MatchedAction,
    MergeResult,
    NotMatchedAction,
    NotMatchedBySourceAction,
    RowChangePlan,
    keyed_rows,
    plan_delete,
    plan_merge,
    plan_update,
    plan_upsert,
)
from carbonlite.writer.partition_rows import partition_spec
from carbonlite.writer.publish import (
    PublishMode,
    PublishResult,
    StateArg,
    read_state,
    run_publish,
    write_states,
)
from carbonlite.writer.restore import RestoreCommit, restore
from carbonlite.writer.row_changes import KeyCache, commit_row_change
from carbonlite.writer.schema_changes import (
    dropping_columns,
    renaming_column,
    widening_column,
    with_columns,
)
from carbonlite.writer.table_metadata import (
    MetadataCommit,
    with_properties,
    without_properties,
)

__all__ = ["CommitResult", "MergeResult", "PartitionInfo", "PublishResult", "Table"]


class _TxnSkipped(Exception):
    """A row-level change carrying a transaction whose batch the table already holds."""


_Stampable = TypeVar("_Stampable", MetadataCommit, RestoreCommit)


class Table:
    """A CarbonLite table. Get one with :func:`create_table` or :func:`open_table`."""

    def __init__(
        self,
        uri: str,
        *,
        storage_options: Mapping[str, Any] | None = None,
        writer_id: str | None = None,
        _snapshot: Snapshot | None = None,
    ) -> None:
        writer_id = writer_id_arg(writer_id)
        uri = table_location(uri)
        self.storage_options = storage_options_arg(storage_options) or {}
        self.storage, self.root = open_storage(uri, self.storage_options or None)
        self.path = self.storage.uri(self.root)
        self.log = Log(self.storage, self.root, self.path)
        self._snapshot = _snapshot if _snapshot is not None else self.log.load_latest()
        self._writer = TableWriter(
            self.storage, self.root, writer_id=writer_id, storage_options=self.storage_options
        )
        self._closed = False
        self._key_cache = KeyCache()  # keys of blocklets merges and upserts have read

    def __repr__(self) -> str:
        if self._closed:
            return f"Table({self.path!r}, closed)"
        return f"Table({self.path!r}, version={self.version})"

    def __enter__(self) -> Table:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End this object's use: later calls raise :class:`InvalidOptionError`. A ``Table``
        holds no open file or lock between calls (storage clients are shared by the process
        and stay open), so this waits for the checkpoint its last commits are due, if one is
        still being written in the background (at most ``EXIT_WAIT_SECONDS``), and drops its
        cached state; closing twice is fine."""
        with self._writer.lock:
            self._closed = True
        self.log.post_commit.settle(EXIT_WAIT_SECONDS)

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidOptionError(
                f"table {self.path!r} was closed; open it again with open_table({self.path!r})"
            )

    # --- state --------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The version this object has loaded (``refresh`` to see newer commits)."""
        return self._snapshot.version

    @property
    def schema(self) -> pa.Schema:
        return self._snapshot.schema

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._snapshot.properties)

    @property
    def sort_columns(self) -> tuple[str, ...]:
        return self._snapshot.metadata.sort_columns

    @property
    def primary_key(self) -> tuple[str, ...]:
        """Key columns of a primary-key table (empty for other tables)."""
        return self._snapshot.metadata.primary_key

    @property
    def table_id(self) -> str:
        return self._snapshot.metadata.table_id

    @property
    def writer_id(self) -> str:
        """This object's writer identity: it owns the stream files named after it."""
        return self._writer.writer_id

    def refresh(self) -> Table:
        """Load every version committed since this object last looked: the one call (with
        the writes) that moves what this object reads; reads of the latest state (history,
        segments, ...) look at the log without moving it."""
        self._snapshot = self._latest()
        return self

    def _latest(self) -> Snapshot:
        """The newest snapshot in the log, leaving the loaded one as it is."""
        self._check_open()
        return self.log.update(self._snapshot)

    def snapshot(self, version: VersionLike | None = None) -> Snapshot:
        """The snapshot at ``version`` (the loaded one by default); a ``datetime`` (or ISO 8601
        string) means the latest version committed at or before it."""
        self._check_open()
        if version is None:
            return self._snapshot
        number = self.version_at(version)
        if number <= self._snapshot.version:
            return self.log.load_version(number, self._snapshot)
        return self.log.load_version(number, self._latest())  # newer than the loaded one

    def version_at(self, when: VersionLike, *, what: str = "version") -> int:
        """The version ``when`` names: a version number as it is; a ``datetime`` (naive ones
        are UTC) or ISO 8601 string, the latest version committed at or before it."""
        self._check_open()
        ms = timestamp_ms_arg(when, what=what)
        if ms is None:
            return version_arg(when, what=what)
        return version_at(self.log, self._latest(), ms)

    def history(self, limit: int | None = None) -> list[CommitRecord]:
        """Commits, newest first: at most ``limit`` (1 or more), every one when None."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1
        ):
            raise InvalidOptionError(
                f"limit must be a whole number of commits, 1 or more (or None for all of them), "
                f"not {type(limit).__name__} {limit!r}"
            )
        return read_history(self.log, self._latest(), limit)

    def segments(self, version: VersionLike | None = None) -> list[SegmentInfo]:
        """Every segment at ``version`` (latest by default), oldest first."""
        snap = self._latest() if version is None else self.snapshot(version)
        return segment_infos(snap)

    def transaction_version(self, app_id: str) -> int | None:
        """The latest batch id committed for ``app_id``, or None."""
        if not isinstance(app_id, str) or not app_id:
            raise InvalidOptionError(
                "app_id must be the non-empty application id a txn=(app_id, batch_id) was "
                f"committed with, not {type(app_id).__name__} {app_id!r}"
            )
        return self._latest().txns.get(app_id)

    # --- writing ------------------------------------------------------------------------------

    def append(
        self,
        data: TableData,
        *,
        txn: tuple[str, int] | None = None,
        schema_mode: SchemaMode = "strict",
        markers: Mapping[str, tuple[int | None, int]] | None = None,
        state: StateArg = None,
        columns_as_of: Snapshot | None = None,
    ) -> CommitResult:
        """Append ``data`` (Arrow data, a pandas or Polars DataFrame, any object with
        ``__arrow_c_stream__``) as one atomic commit.

        The data's columns follow the rule of every writer (docs/ENGINES.md, "Data in"): a
        named pandas index level is the column of its name; a column of the table the data
        lacks is written as its default, else as nulls, and refused with
        :class:`SchemaMismatchError` when it is not nullable (also in the whole rows an
        append to a primary-key table, an upsert, writes: :meth:`merge` changes some columns);
        data with no columns is refused; data with no rows commits nothing (``result.version``
        is None, unless ``schema_mode="merge"`` adds its new columns). Columns are
        cast into the table's types where no value can change (widening integers, any string
        layout, dictionaries, timestamp units and zones; see ``docs/FORMAT.md``); anything
        else raises :class:`SchemaMismatchError` naming the column, and so does a column the
        table lacks, unless ``schema_mode="merge"``, which adds the data's new columns
        (nullable) in the same commit. With ``txn=(app_id, batch_id)`` the batch id is
        committed in the same version as the data, and an append whose batch id the table
        already holds (or passed) is skipped: ``result.skipped`` is then True and nothing is
        written.

        ``markers``: for writers that track their own progress (an ingester's offset per
        partition, a service's sequence per producer), markers moved by compare-and-set in
        the same version as the rows. ``{name: (read, new)}`` moves marker ``name`` from
        ``read`` (the value this writer last read with :meth:`transaction_version`, None when
        absent) to ``new``. When every marker already stands at or past its ``new`` (this
        range was committed before: an uncertain commit retried, or a second writer of the
        same range), nothing is written and ``result.skipped`` is True. When some marker moved
        otherwise, nothing is committed and :class:`TxnMovedError` (a
        :class:`CommitConflictError`) names it: read the markers again and go on from them.

        ``state``: the writer's own bookkeeping tables (name -> ``pyarrow.Table``), stored in
        the same version as the rows, read back with :meth:`state` (as :meth:`publish`'s);
        or a callable returning them, called once the rows are written (a writer that streams
        ``data`` and records what it held: the file ingester records the files it read).

        ``data`` names columns as this object shows them, at the version it loaded: a column
        of that version renamed or dropped since is refused with :class:`StaleSchemaError`
        (a :class:`SchemaMismatchError`), also when another column has its name now, and
        this object keeps the version it showed (``refresh()`` it to write to the present
        columns). ``columns_as_of``: a snapshot of this table (from :meth:`snapshot`) whose
        columns ``data`` names instead, for a writer that shares this object with threads
        that may refresh it while it prepares the rows (the Flight service).
        """
        return self._write(
            data,
            txn=txn_arg(txn),
            overwrite=False,
            schema_mode=schema_mode,
            progress=markers_arg(markers) or None,
            state=state,
            shown=columns_as_of,
        )

    def overwrite(
        self,
        data: TableData,
        *,
        txn: tuple[str, int] | None = None,
        schema_mode: SchemaMode = "strict",
        partitions: Literal["all", "dynamic"] = "all",
    ) -> CommitResult:
        """Replace the table's rows with ``data`` in one version (old segments are marked for
        delete; time travel still sees them until ``clean``). Arguments as :meth:`append`;
        data with no rows (in the table's columns) leaves the table with none.

        ``partitions="dynamic"`` replaces only the partitions ``data`` has rows of (Spark's
        dynamic partition overwrite); the others keep their rows. On an unpartitioned table
        it replaces everything, as ``"all"`` does."""
        if partitions not in ("all", "dynamic"):
            raise InvalidOptionError(f"partitions is 'all' or 'dynamic', not {partitions!r}")
        return self._write(
            data,
            txn=txn_arg(txn),
            overwrite=True,
            schema_mode=schema_mode,
            overwrite_partitions="dynamic" if partitions == "dynamic" else None,
        )

    # --- partitions and publishing ----------------------------------------------------------

    @property
    def partition_by(self) -> tuple[str, ...]:
        """The partition fields (empty: an unpartitioned table)."""
        return self._snapshot.metadata.partition_by

    def partitions(self, version: VersionLike | None = None) -> list[PartitionInfo]:
        """Every partition with rows at ``version`` (latest by default): its value, rows,
        bytes, files, the newest version that wrote to it and its content hash (when known).
        Empty for an unpartitioned table."""
        snap = self._latest() if version is None else self.snapshot(version)
        return partition_infos(snap, partition_spec(snap.metadata))

    def publish(
        self,
        data: pa.Table | Mapping[Any, pa.Table],
        *,
        mode: PublishMode = "incremental",
        state: Mapping[str, pa.Table] | None = None,
    ) -> PublishResult:
        """Publish partitions, rewriting only those whose content changed, in one commit.

        ``data``: an Arrow table (split by the partition columns), or a mapping from partition
        value (the value for one partition field, a tuple for several) to that partition's
        rows, where an empty table deletes the partition. A partition whose rows hash the
        same as what the table holds is not rewritten (the hash ignores row order and
        batching). ``mode="snapshot"`` also deletes every partition not given. ``state``:
        tables of the publisher's own bookkeeping, stored in the same commit (read them back
        with :meth:`state`)."""
        self._check_open()
        with self._writer.lock:
            before = self.refresh()._snapshot
            result, self._snapshot = run_publish(
                self.log,
                self._writer,
                self._snapshot,
                data,
                mode=mode,
                state=state,
                storage_options=self.storage_options,
            )
        if result.version is not None:
            self._after_data_commit(before)
        return result

    def state(self, name: str, version: VersionLike | None = None) -> pa.Table:
        """The state table the newest publish or append (up to ``version``) stored under
        ``name``; :class:`InvalidOptionError` if none did."""
        if not isinstance(name, str):
            raise InvalidOptionError(
                f"a state's name is a string (a key of publish's or append's state=), not "
                f"{type(name).__name__} {name!r}"
            )
        snap = self._latest() if version is None else self.snapshot(version)
        stored = snap.states.get(name)
        if stored is None:
            known = ", ".join(repr(n) for n in sorted(snap.states)) or "none"
            raise InvalidOptionError(
                f"no publish or append stored state {name!r} in {self.path!r} up to version "
                f"{snap.version} (stored names: {known})"
            )
        return read_state(self.storage, self.root, stored)

    def _write(
        self,
        data: TableData,
        *,
        txn: TxnMarker | None,
        overwrite: bool,
        operation: str | None = None,
        schema_mode: SchemaMode = "strict",
        overwrite_partitions: Literal["dynamic"] | None = None,
        progress: Mapping[str, tuple[int | None, int]] | None = None,
        state: StateArg = None,
        shown: Snapshot | None = None,
    ) -> CommitResult:
        """Append or overwrite; ``progress``: transaction markers moved by compare-and-set in
        the same version (an ingester's offsets, ``AppendCommit.progress``); ``state``: state
        tables stored in it (:meth:`append`); ``shown``: the snapshot whose columns ``data``
        names (by default the loaded one: :meth:`append`'s ``columns_as_of``)."""
        states = self._states(state)
        merge = schema_mode_arg(schema_mode) == "merge"
        if shown is not None and (
            not isinstance(shown, Snapshot) or shown.metadata.table_id != self.table_id
        ):
            raise InvalidOptionError(
                f"columns_as_of must be a snapshot of {self.path!r} (from its snapshot()), "
                f"not {type(shown).__name__}"
            )
        keys = self._snapshot.metadata.primary_key  # fixed when the table was created
        if keys and merge:
            raise InvalidOptionError(
                f"schema_mode='merge' is not supported for the primary-key table {self.path!r}: "
                "add the new columns with add_columns first, then append"
            )
        if keys and not overwrite:
            return self._upsert(data, txn, progress, states, shown)
        if keys:  # an overwrite of a primary-key table keeps the last row of each key
            data = keyed_rows(data, self.schema, keys, repr(self.path), self._snapshot.metadata)
        with self._writer.lock:
            loaded = self._snapshot
            shown = loaded if shown is None else shown
            self.refresh()
            before = self._snapshot
            try:
                result, self._snapshot = self._writer.write(
                    self.log,
                    self._snapshot,
                    data,
                    txn=txn,
                    overwrite=overwrite,
                    operation=operation,
                    merge_schema=merge,
                    overwrite_partitions=overwrite_partitions,
                    progress=progress,
                    states=states,
                    shown=ColumnsAsOf(shown.metadata),
                )
            except StaleSchemaError:
                self._snapshot = loaded  # it still shows what it showed
                raise
        if result.version is not None:
            self._after_data_commit(before)
        return result

    def _states(self, state: StateArg) -> StatesArg:
        """The state tables of :meth:`append`'s ``state`` as the writer stores them: written
        to storage now, or when the callable is called."""
        if state is None:
            return ()
        where = repr(self.path)
        if not callable(state):
            return write_states(self.storage, self.root, state, where)
        stored: list[tuple[StateStored, ...]] = []

        def written() -> tuple[StateStored, ...]:
            if not stored:  # once: a row-level change plans again on the same rows
                stored.append(write_states(self.storage, self.root, state(), where))
            return stored[0]

        return written

    # --- row-level changes ----------------------------------------------------------------------

    def _upsert(
        self,
        data: TableData,
        txn: TxnMarker | None,
        progress: Mapping[str, tuple[int | None, int]] | None = None,
        states: StatesArg = (),
        shown: Snapshot | None = None,
    ) -> CommitResult:
        """An append to a primary-key table: the last row of each key of ``data`` replaces
        the table's row of that key, or is inserted. ``shown``: as :meth:`_write` takes it."""
        # read once (a retry plans again on them); a named pandas index is data
        batches = list(iter_record_batches(data))
        names = list(dict.fromkeys(n for b in batches for n in b.schema.names))
        named_as = (self._snapshot if shown is None else shown).metadata

        def plan(snap: Snapshot, reader: SplitReader) -> RowChangePlan:
            check_not_moved(names, named_as, snap.metadata, repr(self.path))
            return plan_upsert(reader, snap, batches, repr(self.path), self._key_cache)

        try:
            plan_done, version = self._change_rows(
                "UPSERT",
                plan,
                txn,
                progress,
                states,
            )
        except _TxnSkipped:
            return CommitResult(None, "UPSERT", skipped=True)
        return CommitResult(
            version, "UPSERT", rows=plan_done.rows_updated + plan_done.rows_inserted
        )

    def delete(self, filter: FilterLike) -> CommitResult:
        """Delete the rows ``filter`` keeps (any form :meth:`scan` takes; None deletes every
        row) in one commit, by deletion vectors: no data file is rewritten. ``rows`` of the
        result counts the rows deleted; ``version`` is None when no row matched."""
        plan, version = self._change_rows(
            "DELETE",
            lambda snap, reader: plan_delete(reader, snap, self._filter(filter, snap)),
        )
        return CommitResult(version, "DELETE", rows=plan.rows_deleted)

    def update(self, filter: FilterLike, set: Mapping[str, Any]) -> CommitResult:
        """Set columns of the rows ``filter`` keeps, in one commit: ``set`` maps a column to
        a scalar or a ``pyarrow.compute`` expression of the row's old values (such as
        ``pc.field("price") * 2``). ``rows`` of the result counts the rows updated."""
        plan, version = self._change_rows(
            "UPDATE",
            lambda snap, reader: plan_update(
                reader, snap, self._filter(filter, snap), set, repr(self.path)
            ),
        )
        return CommitResult(version, "UPDATE", rows=plan.rows_updated)

    def merge(
        self,
        source: TableData,
        on: Sequence[str],
        *,
        when_matched: MatchedAction = "update",
        when_not_matched: NotMatchedAction = "insert",
        when_not_matched_by_source: NotMatchedBySourceAction = "ignore",
        parameters: Mapping[str, str] | None = None,
    ) -> MergeResult:
        """Merge ``source`` (Arrow data, pandas, Polars; a subset of the table's columns
        holding the keys) into the table by the key columns ``on``, in one commit: rows of the
        table a source row matches are updated with the source's columns (``"delete"``:
        deleted, ``"ignore"``: left); source rows matching none are inserted (missing columns
        null); table rows no source row matches are left or, with
        ``when_not_matched_by_source="delete"``, deleted. A table row matched by two source
        rows raises :class:`DuplicateKeyError`. Null keys match nothing. ``parameters``: more
        entries for the commit's parameters, which history shows (a merge from Spark records
        its condition and clauses)."""
        keys = list(names_arg(on, what="on", example="['id']", one_string=True))
        if not keys or any(not isinstance(k, str) for k in keys):
            raise InvalidOptionError(f"on must name the key columns, such as ['id'], not {on!r}")
        for name, value, allowed in (
            ("when_matched", when_matched, ("update", "delete", "ignore")),
            ("when_not_matched", when_not_matched, ("insert", "ignore")),
            ("when_not_matched_by_source", when_not_matched_by_source, ("delete", "ignore")),
        ):
            if value not in allowed:
                raise InvalidOptionError(f"{name} must be one of {allowed}, not {value!r}")
        # read once (a retry plans again on them); a named pandas index is data
        batches = list(iter_record_batches(source))
        plan, version = self._change_rows(
            "MERGE",
            lambda snap, reader: plan_merge(
                reader,
                snap,
                batches,
                keys,
                when_matched=when_matched,
                when_not_matched=when_not_matched,
                when_not_matched_by_source=when_not_matched_by_source,
                where=repr(self.path),
                cache=self._key_cache,
                parameters=parameters,
            ),
        )
        return MergeResult(version, plan.rows_updated, plan.rows_inserted, plan.rows_deleted)

    def _filter(self, filter: FilterLike, snapshot: Snapshot) -> Filter | None:
        return parse_filter(filter, snapshot.schema, where=repr(self.path))

    def _change_rows(
        self,
        operation: str,
        plan: Callable[[Snapshot, SplitReader], RowChangePlan],
        txn: TxnMarker | None = None,
        progress: Mapping[str, tuple[int | None, int]] | None = None,
        states: StatesArg = (),
    ) -> tuple[RowChangePlan, int | None]:
        """Plan and commit a row-level change (again on a newer snapshot when it loses its
        rows to a concurrent commit); :class:`_TxnSkipped` when ``txn``'s batch is in the
        table already."""
        self._check_open()
        with self._writer.lock:
            before = self._snapshot
            planned, version, self._snapshot = commit_row_change(
                self._writer,
                self.log,
                self._snapshot,
                operation=operation,
                plan=plan,
                storage_options=self.storage_options,
                txn=txn,
                progress=progress,
                states=states,
            )
        if version is not None:
            self._after_data_commit(before)
        if planned is None:
            raise _TxnSkipped
        return planned, version

    def _after_data_commit(self, before: Snapshot) -> None:
        """Table properties auto_handoff and auto_compaction act after data commits
        (``compaction/auto.py``)."""
        props = TableProperties(self._snapshot.properties)
        if props.auto_handoff:
            rolled = any(
                s.status == "STREAMING_FINISH"
                and (
                    s.segment_id not in before.segments
                    or before.segments[s.segment_id].status == "STREAMING"
                )
                for s in self._snapshot.segments.values()
            )
            if rolled:
                self.handoff()
        if props.auto_compaction:
            self._check_open()
            _, snapshot = auto_compact(
                self.log,
                self._snapshot,
                storage_options=self.storage_options,
                writer_id=self.writer_id,
            )
            self._advance(snapshot)

    def add_columns(
        self,
        fields: pa.Field | Sequence[pa.Field] | pa.Schema,
        *,
        defaults: Mapping[str, Any] | None = None,
    ) -> CommitResult:
        """Add nullable columns at the end of the schema, in one commit. Rows written before
        read nulls, or the column's value in ``defaults`` (``{"n": 0}``: Iceberg's
        initial-default), which writers also fill in for rows that leave the column out
        (its write-default). Defaults need column ids (format 6; a table of format 3-5 is
        raised in the same version)."""
        return self._schema_change(
            lambda: with_columns(self._snapshot, fields, where=self.path, defaults=defaults)
        )

    def rename_column(self, old: str, new: str) -> CommitResult:
        """Rename column ``old`` to ``new`` in one commit; no data is rewritten (the column keeps
        its id and its physical name in data files). Sort, partition and key columns keep
        their role. Time travel to earlier versions shows the old name. A writer whose rows
        were written with the old name commits nothing (:class:`SchemaMismatchError`)."""
        return self._schema_change(
            lambda: renaming_column(self._snapshot, old, new, where=self.path)
        )

    def drop_columns(self, names: str | Sequence[str]) -> CommitResult:
        """Drop columns in one commit; no data is rewritten (their pages stay in older files,
        unread, until compaction writes the files again). Sort, partition and primary-key
        columns cannot be dropped. A column added later under a dropped name is a new column:
        the dropped values never come back."""
        return self._schema_change(lambda: dropping_columns(self._snapshot, names, where=self.path))

    def widen_column(self, name: str, type: pa.DataType) -> CommitResult:
        """Widen a column's type in one commit: int8 -> int16 -> int32 -> int64, float32 ->
        float64, decimal precision up at the same scale, date -> timestamp. Older files are
        read cast up; writers with the older type keep committing (their rows are cast up)."""
        return self._schema_change(
            lambda: widening_column(self._snapshot, name, type, where=self.path)
        )

    def _schema_change(self, plan: Callable[[], MetadataCommit]) -> CommitResult:
        """Plan a metadata change on the latest version and commit it (one version)."""
        started = now_ms()
        self._check_open()
        with self._writer.lock:
            self.refresh()
            pending = plan()
            self._snapshot = commit(self.log, self._snapshot, self._stamped(pending, started))
            return CommitResult(self._snapshot.version, pending.operation)

    def set_properties(self, properties: Mapping[str, str]) -> CommitResult:
        """Set table properties (checked as at :func:`create_table`; keys starting with
        ``user.`` are free-form) in one commit. ``version`` is None when nothing changed."""
        started = now_ms()
        with self._writer.lock:
            self.refresh()
            pending = with_properties(self._snapshot, properties)
            if pending is None:
                return CommitResult(None, "SET PROPERTIES", skipped=True)
            self._snapshot = commit(self.log, self._snapshot, self._stamped(pending, started))
            return CommitResult(self._snapshot.version, pending.operation)

    def unset_properties(self, keys: Sequence[str], *, missing_ok: bool = False) -> CommitResult:
        """Remove table properties, so their defaults apply again. A key that is not set is
        an error unless ``missing_ok``; ``version`` is None when nothing changed."""
        missing_ok = flag_arg(missing_ok, what="missing_ok")
        started = now_ms()
        with self._writer.lock:
            self.refresh()
            pending = without_properties(
                self._snapshot, keys, missing_ok=missing_ok, where=self.path
            )
            if pending is None:
                return CommitResult(None, "UNSET PROPERTIES", skipped=True)
            self._snapshot = commit(self.log, self._snapshot, self._stamped(pending, started))
            return CommitResult(self._snapshot.version, pending.operation)

    def _stamped(self, pending: _Stampable, started_ms: int) -> _Stampable:
        """``pending`` recording this table's writer and when the operation began."""
        return dataclasses.replace(pending, writer_id=self.writer_id, started_ms=started_ms)

    @property
    def effective_properties(self) -> dict[str, str]:
        """Every property CarbonLite knows with the value in force (set or default), then the
        table's ``user.`` keys."""
        return effective_properties(self._snapshot.properties)

    def restore(self, version: VersionLike) -> CommitResult:
        """Make the table's rows, schema and properties those of ``version`` (a number, or a
        ``datetime``: the latest version committed at or before it) in one new commit;
        history and time travel keep everything in between. Segments unchanged since are
        kept, the others copied (see ``carbonlite/writer/restore.py``); transaction markers
        are not rolled back. ``version`` of the result is None when nothing would change."""
        started = now_ms()
        with self._writer.lock:
            self.refresh()
            number = self.version_at(version)
            target = self.log.load_version(number, self._snapshot)
            parameters = {"version": str(number)}
            if not isinstance(version, int):
                parameters["timestamp"] = str(version)
            self._snapshot, pending = restore(
                self.log,
                self._snapshot,
                target,
                storage_options=self.storage_options,
                parameters=parameters,
                stamp=lambda p: self._stamped(p, started),
            )
            if not pending.changes_anything:
                return CommitResult(None, "RESTORE", skipped=True)
            return CommitResult(self._snapshot.version, "RESTORE", rows=pending.rows_added)

    def upgrade(self) -> CommitResult:
        """Raise the table to the log format this library writes (``LOG_FORMAT_VERSION``; what
        each format added is in docs/LOG.md), in one commit, and write a checkpoint of it at once.

        Tables of older formats are read and written as they are; those below format 3 keep
        monolithic checkpoints until upgraded. Readers with an older CarbonLite refuse the upgraded
        table (``UnsupportedFormatError``) rather than misread it. Returns a result with
        ``version=None`` when the table is already current."""
        started = now_ms()
        with self._writer.lock:
            self.refresh()
            snap = self._snapshot
            old = snap.metadata.format_version
            if old >= LOG_FORMAT_VERSION:
                return CommitResult(None, "UPGRADE", skipped=True)
            pending = MetadataCommit(
                snap.metadata,
                with_column_ids(
                    dataclasses.replace(snap.metadata, format_version=LOG_FORMAT_VERSION)
                ),
                operation="UPGRADE",
                parameters={"from": str(old), "to": str(LOG_FORMAT_VERSION)},
            )
            pending = self._stamped(pending, started)
            self._snapshot = self.log.write_checkpoint(commit(self.log, snap, pending))
            return CommitResult(self._snapshot.version, "UPGRADE")

    # --- segment lifecycle --------------------------------------------------------------------

    def finish_streaming(self) -> str | None:
        """Close the current STREAMING segment (it becomes STREAMING_FINISH, ready for
        handoff; the next append starts a new one). Returns its id, or None if there was none."""
        self._check_open()
        with self._writer.lock:
            segment_id, self._snapshot = finish_streaming(
                self.log, self._snapshot, writer_id=self.writer_id
            )
            return segment_id

    def handoff(
        self, *, executor: TaskExecutor | None = None, progress: ProgressCallback | None = None
    ) -> CompactionResult:
        """Turn every STREAMING_FINISH segment into a sorted COLUMNAR segment (CarbonData's
        handoff). Ingestion into the current STREAMING segment goes on meanwhile.
        ``progress(done, total)``: bytes, see ``carbonlite/compaction/progress.py``."""
        executor = callback_arg(executor, what="executor")
        progress = callback_arg(progress, what="progress")
        return self._compact("handoff", None, executor, progress)

    def compact(
        self,
        kind: CompactionKind = "minor",
        *,
        segments: Sequence[str] | None = None,
        executor: TaskExecutor | None = None,
        progress: ProgressCallback | None = None,
    ) -> CompactionResult:
        """Merge SUCCESS segments: ``"minor"`` by level thresholds
        (``compaction_level_threshold``), ``"major"`` up to ``major_compaction_size``,
        ``"custom"`` the given ``segments``. One version, ``data_change = false``.
        ``progress(done, total)``: bytes, see ``carbonlite/compaction/progress.py``."""
        if segments is not None:
            if isinstance(segments, str) or not isinstance(segments, Sequence):
                raise InvalidOptionError(
                    "segments must be a list of segment ids such as ['0', '1.1'], not "
                    f"{type(segments).__name__} {segments!r}"
                )
            for sid in segments:
                check_name(
                    sid,
                    what="segment id",
                    fix=f"give ids of segments of {self.path!r} as segments() lists them",
                )
        executor = callback_arg(executor, what="executor")
        progress = callback_arg(progress, what="progress")
        return self._compact(kind, segments, executor, progress)

    def _compact(
        self,
        kind: CompactionKind,
        segments: Sequence[str] | None,
        executor: TaskExecutor | None,
        progress: ProgressCallback | None = None,
    ) -> CompactionResult:
        self._check_open()
        result, snapshot = run_compaction(
            self.log,
            self._snapshot,
            kind,
            storage_options=self.storage_options,
            segments=segments,
            executor=executor,
            progress=progress,
            writer_id=self.writer_id,
        )
        self._advance(snapshot)
        return result

    def build_index(
        self, columns: Sequence[str] | None = None, *, kind: IndexKind = "bloom"
    ) -> IndexBuildResult:
        """Give every live blocklet bloom filters of ``columns`` and of the table's
        ``bloom_filter_columns`` (``columns`` are added to it, so later blocklets get them
        too), in one commit (``data_change = false``); appends and compaction go on meanwhile.
        Blocklets that have them already are left as they are. ``kind="secondary"``: the
        same for the secondary indexes of columnar files (``secondary_index_columns``)."""
        self._check_open()
        result, snapshot = build_index(
            self.log,
            self._snapshot,
            None
            if columns is None
            else names_arg(columns, what="columns", example="['user_id']", one_string=True),
            kind=kind,
            storage_options=self.storage_options,
            writer_id=self.writer_id,
        )
        self._advance(snapshot)
        return result

    def _advance(self, snapshot: Snapshot) -> None:
        with self._writer.lock:
            if snapshot.version > self._snapshot.version:
                self._snapshot = snapshot

    def clean(
        self,
        retention: str | float | datetime.timedelta | None = None,
        *,
        dry_run: bool = False,
        force: bool = False,
        progress: ProgressCallback | None = None,
    ) -> CleanResult:
        """Delete data of COMPACTED and MARKED_FOR_DELETE segments older than ``retention``
        (default: property ``deleted_data_retention``, 7 days) and log files older than
        ``log_retention``. Less than 1 hour is refused unless ``force``.
        ``progress(done, total)``: bytes deleted, see ``carbonlite/compaction/progress.py``."""
        self._check_open()
        result, snapshot = clean(
            self.log,
            self._snapshot,
            retention_seconds=duration_seconds_of(retention, what="retention"),
            dry_run=flag_arg(dry_run, what="dry_run"),
            force=flag_arg(force, what="force"),
            progress=callback_arg(progress, what="progress"),
            writer_id=self.writer_id,
        )
        self._advance(snapshot)
        return result

    def recover(
        self, *, dry_run: bool = False, min_age: str | float | datetime.timedelta | None = None
    ) -> RecoverResult:
        """Cut stream files back to their committed lengths and delete files no version
        references, leaving alone anything changed within ``min_age`` (default 1 hour) that a
        live writer may still commit."""
        age = duration_seconds_of(min_age, what="min_age")
        dry_run = flag_arg(dry_run, what="dry_run")
        return recover(
            self.log,
            self._latest(),
            dry_run=dry_run,
            min_age_seconds=DEFAULT_MIN_AGE_SECONDS if age is None else age,
        )

    def iceberg_metadata(self) -> str | None:
        """The URI of the table's newest Iceberg metadata file (``.../metadata/v<N>.metadata.json``),
        what Iceberg readers open (pyiceberg's ``StaticTable.from_metadata``, Polars'
        ``scan_iceberg``, DuckDB's ``iceberg_scan``); None when none was written."""
        self._check_open()
        found = read_iceberg_state(self.storage, self.root)
        return None if found is None else self.storage.uri(found[0].path)

    def sync_iceberg(self) -> IcebergState | None:
        """Write the Iceberg metadata of the latest version now (a table with ``iceberg`` on
        gets it after every commit that changes its columnar Parquet files; this catches up
        after a crash or a failure between a commit and its Iceberg metadata). Returns the
        state written, None when the metadata was up to date; errors are raised, not
        logged."""
        self._check_open()
        snapshot = self.refresh().snapshot()
        if iceberg_format(snapshot.properties) is None:
            raise InvalidOptionError(
                f"{self.path!r} does not publish Iceberg metadata: set its property "
                "iceberg=v2 first (set_properties)"
            )
        return export_version(self.storage, self.root, snapshot)

    def verify(
        self, *, version: VersionLike | None = None, progress: ProgressCallback | None = None
    ) -> VerifyResult:
        """Read every committed blocklet; check checksums, layout and statistics against the
        log. Problems are reported (file, offset, what), not raised. ``progress(done,
        total)``: bytes checked, see ``carbonlite/compaction/progress.py``."""
        progress = callback_arg(progress, what="progress")
        snapshot = self._latest() if version is None else self.snapshot(version)
        return verify(self.log, snapshot, storage_options=self.storage_options, progress=progress)

    # --- reading ------------------------------------------------------------------------------

    def _plan(
        self,
        columns: Sequence[str] | None,
        filter: FilterLike,
        version: VersionLike | None,
        *,
        tail_only: bool = False,
    ) -> tuple[ScanPlan, Filter | None]:
        columns = columns_arg(columns)
        snap = self.snapshot(version)
        parsed = parse_filter(filter, snap.schema, where=repr(self.path))
        plan = plan_scan(
            snap,
            columns=columns,
            filter=parsed,
            blooms=bloom_pruner(self.storage, self.root),
            skip=is_parquet_columnar if tail_only else None,
        )
        return plan, parsed

    def plan_splits(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: FilterLike = None,
        version: VersionLike | None = None,
        tail_only: bool = False,
    ) -> ScanPlan:
        """Which blocklets a scan reads, grouped into splits, pruned by statistics only.
        ``tail_only``: leave out the columnar Parquet files (:meth:`parquet_view`), which an
        engine reading Parquet itself reads."""
        return self._plan(columns, filter, version, tail_only=tail_only)[0]

    def parquet_view(self, version: VersionLike | None = None) -> ParquetView:
        """The columnar Parquet files of a version as an engine reading Parquet itself reads
        them (which columns each holds, the rows deleted from each), and how many other files
        the version has (its tail: :meth:`plan_splits` with ``tail_only``)."""
        return parquet_view(
            self.storage,
            self.root,
            self.snapshot(version),
            storage_options=self.storage_options or None,
        )

    def read_split(
        self,
        split: Split,
        *,
        columns: Sequence[str] | None = None,
        filter: FilterLike = None,
        version: VersionLike | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The rows of one split (from :meth:`plan_splits`), filtered and projected. The
        arguments are checked at once; the rows are read as the iterator is."""
        if not isinstance(split, Split):
            raise InvalidOptionError(
                f"split must be one of the splits plan_splits() returns, not "
                f"{type(split).__name__} {split!r}"
            )
        snap = self.snapshot(version)
        parsed = parse_filter(filter, snap.schema, where=repr(self.path))
        schema = project_schema(snap.schema, columns_arg(columns), where=repr(self.path))
        return self._read_split(split, snap, schema, parsed)

    def _read_split(
        self, split: Split, snap: Snapshot, schema: pa.Schema, filter: Filter | None
    ) -> Iterator[pa.RecordBatch]:
        reader = SplitReader(
            self.storage,
            self.root,
            snap.schema,
            storage_options=self.storage_options,
            layout=snap.layout,
        )
        try:
            yield from read_splits(reader, [split], schema, filter)
        finally:
            reader.close()

    def scan(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: FilterLike = None,
        version: VersionLike | None = None,
    ) -> TableScan:
        """Rows of the table (at ``version``), pruned by min/max, filtered exactly: a
        :class:`TableScan`, read like a ``pyarrow.RecordBatchReader``, and readable again by
        every query that takes an Arrow stream (DuckDB, Polars, ``pa.table``)."""
        plan, parsed = self._plan(columns, filter, version)
        return TableScan(
            self.storage, self.root, plan, parsed, storage_options=self.storage_options
        )

    def to_arrow(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: FilterLike = None,
        version: VersionLike | None = None,
    ) -> pa.Table:
        """:meth:`scan` read into one ``pyarrow.Table``."""
        return self.scan(columns=columns, filter=filter, version=version).read_all()

    def to_pandas(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: FilterLike = None,
        version: VersionLike | None = None,
    ) -> Any:
        """:meth:`scan` read into a ``pandas.DataFrame`` (needs pandas)."""
        require("pandas", "pandas")
        return self.to_arrow(columns=columns, filter=filter, version=version).to_pandas()

    def to_polars(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: FilterLike = None,
        version: VersionLike | None = None,
    ) -> Any:
        """:meth:`scan` read into a ``polars.DataFrame`` (needs polars; for a lazy query
        with pushdown use :func:`carbonlite.polars.scan`)."""
        pl = require("polars", "polars")
        return pl.from_arrow(self.to_arrow(columns=columns, filter=filter, version=version))

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """Every row at the loaded version, as a new Arrow stream per call: lets DuckDB
        (``duckdb.sql("SELECT ... FROM t")``), Polars and pyarrow read a ``Table`` directly."""
        return self.scan(version=self.version).__arrow_c_stream__(requested_schema)

    def count_rows(self, *, version: VersionLike | None = None) -> int:
        """Rows at ``version``, from the log alone."""
        return self.snapshot(version).num_rows

    def change_versions(
        self, start_version: VersionLike, end_version: VersionLike | None = None
    ) -> tuple[int, int]:
        """The first and last version :meth:`changes` reads for these arguments."""
        return self._change_range(start_version, end_version, self._latest())

    def _change_range(
        self, start_version: VersionLike, end_version: VersionLike | None, latest: Snapshot
    ) -> tuple[int, int]:
        start_ms = timestamp_ms_arg(start_version, what="start_version")
        if start_ms is None:
            first = version_arg(start_version, what="start_version")
        else:
            try:
                first = version_at(self.log, latest, start_ms - 1) + 1
            except VersionNotFoundError:
                first = 0
        end = (
            latest.version
            if end_version is None
            else self.version_at(end_version, what="end_version")
        )
        if first < 0 or end < first:
            raise InvalidOptionError(
                f"need 0 <= start_version <= end_version, got {first} and {end}"
            )
        return first, end

    def changes(
        self, start_version: VersionLike, end_version: VersionLike | None = None
    ) -> pa.Table:
        """Rows inserted or deleted by each commit from ``start_version`` to ``end_version``
        (inclusive; latest by default), with ``_change_type``, ``_commit_version`` and
        ``_commit_timestamp`` columns (names a table's own columns cannot take, nor
        ``_carbonlite_row``). A ``datetime`` start means the first version committed
        at or after it, a ``datetime`` end the last one committed at or before it."""
        latest = self._latest()
        first, end = self._change_range(start_version, end_version, latest)
        end_snapshot = self.log.load_version(end, latest)
        start = self.log.load_version(first - 1, latest) if first > 0 else None
        return read_changes(
            self.storage,
            self.root,
            self.log,
            start,
            end,
            end_snapshot.schema,
            storage_options=self.storage_options,
            layout=end_snapshot.layout,
        )
