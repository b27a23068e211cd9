"""``build_index``: bloom filters (or secondary indexes) for data written before the table
asked for them.

Every live blocklet lacking a filter of one of the columns (``bloom_filter_columns`` plus
the columns asked for) is read, its filters built, and written into one new bloom file per
data file; one commit (``addBloomFilters`` actions, ``data_change = false``) attaches them,
and adds the columns asked for to ``bloom_filter_columns`` in the same version, so every
blocklet written later gets them too. A blocklet's record holds every column the table asks
for, replacing the one it had.

Ingestion never waits: appends and compaction go on while the blocklets are read. A data
file that a handoff or compaction retired meanwhile is left out of the commit (its bloom file
becomes an orphan that ``recover`` removes); blocklets that appeared meanwhile without
filters are picked up by another round, at most :data:`MAX_ROUNDS` in all.

``kind="secondary"`` does the same for ``secondary_index_columns``: every live file of a
columnar segment (handoff and compaction output; their files never change) lacking the index
of one of the columns gets one file per column (``addIndexes``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import pyarrow as pa

from carbonlite._version import ENGINE
from carbonlite.clock import elapsed_ms, now_ms
from carbonlite.errors import CommitConflictError, CommitStateUnknownError, InvalidOptionError
from carbonlite.format.bloom import BloomSpec, build_bloom_record
from carbonlite.format.pages import ordered_map
from carbonlite.metadata import (
    Action,
    BlockletEntry,
    BloomFiltersAdded,
    CommitInfo,
    FileState,
    IndexesAdded,
    Log,
    Requirement,
    SegmentState,
    Snapshot,
    commit,
)
from carbonlite.metadata.columns import stamped
from carbonlite.properties import TableProperties
from carbonlite.reader.planner import Split
from carbonlite.reader.scan import SplitReader
from carbonlite.seams import reach
from carbonlite.writer.bloom_files import bloom_spec, discard_blooms, write_bloom_file
from carbonlite.writer.index_files import index_columns, write_index_files
from carbonlite.writer.lease import Lease
from carbonlite.writer.table_metadata import with_properties

__all__ = ["MAX_ROUNDS", "IndexBuildResult", "IndexKind", "build_index"]

IndexKind = Literal["bloom", "secondary"]
_PROPERTY = {"bloom": "bloom_filter_columns", "secondary": "secondary_index_columns"}

MAX_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class IndexBuildResult:
    """What ``build_index`` did."""

    version: int | None
    """The last version it committed (None: nothing was missing, nothing committed)."""
    columns: tuple[str, ...]
    """The table's ``bloom_filter_columns`` (``secondary_index_columns``) afterwards."""
    blocklets: int = 0
    """Blocklets given filters (covered by the new secondary indexes)."""
    files: int = 0
    """Bloom files (secondary index files) written."""
    bytes_written: int = 0
    rows_read: int = 0
    kind: str = "bloom"


@dataclass(frozen=True, slots=True)
class _ColumnsAsIndexed:
    """The columns an index was built of are still the table's, under the same physical
    names (a rename keeps them; a drop or a widening to a new physical name does not)."""

    physical: Mapping[str, str]

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        layout, names = snapshot.layout, snapshot.schema.names
        gone = [c for c, p in self.physical.items() if c not in names or layout.physical(c) != p]
        if gone:
            raise CommitConflictError(
                f"columns {gone} of {snapshot.table_path!r} were renamed, dropped or rewritten "
                f"at version {snapshot.version} while build_index (read at version "
                f"{read_version}) indexed them; nothing was committed: run it again",
                read_version=read_version,
                conflicting_version=snapshot.version,
            )


@dataclass
class _IndexCommit:
    """A commit as data (``metadata/commit.py``): the filters or indexes of files still live
    when it lands, and ``columns`` added to the table's list as it is then (so a column
    another writer listed meanwhile stays). A blocklet whose filters cover more columns by
    then keeps them."""

    added: tuple[BloomFiltersAdded | IndexesAdded, ...]
    columns: tuple[str, ...]
    physical: Mapping[str, str]
    started_ms: int
    writer_id: str | None
    kind: IndexKind = "bloom"
    dropped: list[BloomFiltersAdded | IndexesAdded] = field(default_factory=list)

    @property
    def requirements(self) -> Sequence[Requirement]:
        return (_ColumnsAsIndexed(self.physical),)

    def actions(self, snapshot: Snapshot, read_version: int) -> list[Action]:
        kept: list[BloomFiltersAdded | IndexesAdded] = []
        self.dropped = []
        for a in self.added:
            f = _live(snapshot, a.segment_id, a.file)
            narrowed = None if f is None else _narrowed(a, f)
            if narrowed is None:
                self.dropped.append(a)
            else:
                kept.append(narrowed)
        now = now_ms()
        out: list[Action] = []
        key = _PROPERTY[self.kind]
        listed = getattr(TableProperties(snapshot.properties), key)
        merged = tuple(dict.fromkeys((*listed, *self.columns)))
        if merged != listed:
            changed = with_properties(snapshot, {key: ",".join(merged)})
            assert changed is not None
            out.append(stamped(changed.metadata, snapshot.version + 1))
        out.extend(kept)
        out.append(
            CommitInfo(
                operation="BUILD INDEX",
                timestamp=now,
                data_change=False,
                read_version=read_version,
                parameters={
                    "kind": self.kind,
                    "columns": ",".join(merged),
                    "files": str(len(kept)),
                },
                engine=ENGINE,
                files_added=len(kept),
                files_removed=0,
                duration_ms=elapsed_ms(self.started_ms, now),
                writer_id=self.writer_id,
            )
        )
        return out


def _narrowed(
    a: BloomFiltersAdded | IndexesAdded, f: FileState
) -> BloomFiltersAdded | IndexesAdded | None:
    """``a`` without the records of blocklets whose filters in ``f`` already cover every
    column of them (another ``build_index`` got there first); None when nothing is left."""
    if isinstance(a, IndexesAdded):
        return a
    filters = tuple(
        r
        for r in a.blooms.filters
        if (now := f.blooms.get(r.blocklet)) is None or not set(r.columns) <= set(now.columns)
    )
    if not filters:
        return None
    if len(filters) == len(a.blooms.filters):
        return a
    return replace(a, blooms=replace(a.blooms, filters=filters))


def _live(snapshot: Snapshot, segment_id: str, path: str) -> FileState | None:
    seg = snapshot.segments.get(segment_id)
    return seg.files.get(path) if seg is not None and seg.is_live else None


def _columns(snapshot: Snapshot, columns: Sequence[str] | None, kind: IndexKind) -> tuple[str, ...]:
    """The table's indexed columns of ``kind`` with ``columns`` added, in order."""
    if columns is not None and (
        isinstance(columns, str) or not all(isinstance(c, str) for c in columns)
    ):
        raise InvalidOptionError(
            f"build_index takes a list of column names such as ['user_id'], not {columns!r}"
        )
    blank = [c for c in columns or () if not c.strip() or "," in c or c != c.strip()]
    if blank:
        raise InvalidOptionError(
            f"build_index: {blank} are not column names (a name is not empty, has no comma and "
            f"no surrounding spaces); the columns of {snapshot.table_path!r} are "
            f"{snapshot.schema.names}"
        )
    have = getattr(TableProperties(snapshot.properties), _PROPERTY[kind])
    wanted = tuple(dict.fromkeys((*have, *(columns or ()))))
    if not wanted:
        raise InvalidOptionError(
            f"{snapshot.table_path!r} has no {_PROPERTY[kind]}: name the columns to index, "
            "such as build_index(['user_id']) (CLI: carbonlite index build PATH user_id)"
        )
    return wanted


def _missing(f: FileState, spec: BloomSpec) -> list[BlockletEntry]:
    """Blocklets of ``f`` without a filter of every column of ``spec``."""
    wanted = set(spec.columns)
    out = []
    for b in f.blocklets:
        ref = f.blooms.get(b.offset)
        if ref is None or not wanted.issubset(ref.columns):
            out.append(b)
    return out


def build_index(
    log: Log,
    snapshot: Snapshot,
    columns: Sequence[str] | None,
    *,
    kind: IndexKind = "bloom",
    storage_options: Mapping[str, object] | None = None,
    writer_id: str | None = None,
) -> tuple[IndexBuildResult, Snapshot]:
    """Give every live blocklet filters of ``columns`` and of the table's
    ``bloom_filter_columns`` (which gain ``columns``), or with ``kind="secondary"`` every live
    columnar file secondary indexes of them and of ``secondary_index_columns``. See the
    module docstring."""
    if kind not in _PROPERTY:
        raise InvalidOptionError(f"kind must be 'bloom' or 'secondary', not {kind!r}")
    started = now_ms()
    snapshot = log.update(snapshot)
    version = None
    wanted = _columns(snapshot, columns, kind)
    totals = [0, 0, 0, 0]  # blocklets, files, bytes, rows
    for _ in range(MAX_ROUNDS):
        wanted = _columns(snapshot, columns, kind)  # the table's list as it is now
        changed = with_properties(snapshot, {_PROPERTY[kind]: ",".join(wanted)})
        schema = snapshot.schema if changed is None else changed.metadata.schema
        properties = snapshot.properties if changed is None else changed.metadata.properties
        layout = snapshot.layout
        physical = {c: layout.physical(c) for c in wanted}
        work: list[tuple[SegmentState, FileState, Sequence[BlockletEntry]]] = []
        spec: BloomSpec | None = None
        index_work: list[tuple[SegmentState, FileState, tuple[str, ...]]] = []
        if kind == "bloom":
            spec = bloom_spec(properties, schema, layout)
            assert spec is not None  # the columns were checked by with_properties
            work = [
                (seg, f, missing)
                for seg in snapshot.live_segments()
                for f in seg.files.values()
                if (missing := _missing(f, spec))
            ]
        else:
            indexed = index_columns(properties, schema, layout)
            files = [
                (seg, f, tuple(c for c in indexed if c not in f.indexes))
                for seg in snapshot.live_segments()
                if seg.format == "COLUMNAR"
                for f in seg.files.values()
            ]
            index_work = [(seg, f, cols) for seg, f, cols in files if cols]
            work = [(seg, f, f.blocklets) for seg, f, _ in index_work]
        if not work and changed is None:
            break
        paths = [f"{f.path}." for _, f, _ in work]  # the bloom and index files of each
        added: list[BloomFiltersAdded | IndexesAdded] = []
        with Lease(log.storage, log.root, owner=f"build_index {kind}", paths=paths) as lease:
            try:
                if spec is not None:
                    added.extend(_write_filters(log, snapshot, work, spec, storage_options, totals))
                else:
                    added.extend(_write_indexes(log, snapshot, index_work, storage_options, totals))
                reach("index.before_commit")
                lease.check()
                pending = _IndexCommit(tuple(added), wanted, physical, started, writer_id, kind)
                snapshot = commit(log, snapshot, pending)
            except CommitStateUnknownError:
                lease.release(keep_record=True)  # its files must outlive a version landing late
                raise
            except BaseException:
                _discard(log, added)
                raise
        _discard(log, pending.dropped)
        for a in pending.dropped:
            blocklets, nbytes = _size(a)
            totals[0] -= blocklets
            totals[1] -= 1 if isinstance(a, BloomFiltersAdded) else len(a.indexes)
            totals[2] -= nbytes
        version = snapshot.version
    wanted = _columns(snapshot, columns, kind)
    return (
        IndexBuildResult(version, wanted, totals[0], totals[1], totals[2], totals[3], kind),
        snapshot,
    )


def _size(a: BloomFiltersAdded | IndexesAdded) -> tuple[int, int]:
    if isinstance(a, BloomFiltersAdded):
        return len(a.blooms.filters), a.blooms.size
    return 0, sum(i.size for i in a.indexes)


def _discard(log: Log, added: Sequence[BloomFiltersAdded | IndexesAdded]) -> None:
    discard_blooms(
        log.storage, log.root, (a.blooms for a in added if isinstance(a, BloomFiltersAdded))
    )
    for a in added:
        if isinstance(a, IndexesAdded):
            for index in a.indexes:
                with contextlib.suppress(OSError):
                    log.storage.delete(log.storage.join(log.root, index.path))


def _reader(
    log: Log, snapshot: Snapshot, storage_options: Mapping[str, object] | None
) -> SplitReader:
    """A reader of every committed row of ``snapshot``'s files, deleted ones included (an
    index covers every row a blocklet holds)."""
    return SplitReader(
        log.storage,
        log.root,
        snapshot.schema,
        storage_options=dict(storage_options or {}),
        version=snapshot.version,
        layout=snapshot.layout,
    )


def _write_indexes(
    log: Log,
    snapshot: Snapshot,
    work: Sequence[tuple[SegmentState, FileState, tuple[str, ...]]],
    storage_options: Mapping[str, object] | None,
    totals: list[int],
) -> list[IndexesAdded]:
    """Read the indexed columns of each file of ``work`` and write their index files."""
    layout = snapshot.layout
    added: list[IndexesAdded] = []
    reader = _reader(log, snapshot, storage_options)
    try:
        for seg, f, physical in work:
            wanted = set(physical)
            output = pa.schema([c for c in snapshot.schema if layout.physical(c.name) in wanted])
            split = Split(seg.segment_id, f.path, f.committed_length, f.blocklets)

            def read(
                b: BlockletEntry, split: Split = split, output: pa.Schema = output
            ) -> pa.RecordBatch:
                return reader.read_blocklet(split, b, output, None)

            batches = list(ordered_map(read, f.blocklets))
            rows = pa.Table.from_batches(batches, schema=output)
            rows = rows.rename_columns([layout.physical(n) for n in rows.column_names])
            totals[3] += rows.num_rows
            written = write_index_files(
                log.storage,
                log.root,
                f.path,
                rows,
                [(b.offset, b.num_rows) for b in f.blocklets],
                physical,
            )
            if written:
                added.append(IndexesAdded(seg.segment_id, f.path, written))
                totals[0] += len(f.blocklets)
                totals[1] += len(written)
                totals[2] += sum(i.size for i in written)
    except BaseException:
        _discard(log, added)
        raise
    finally:
        reader.close()
    return added


def _write_filters(
    log: Log,
    snapshot: Snapshot,
    work: Sequence[tuple[SegmentState, FileState, Sequence[BlockletEntry]]],
    spec: BloomSpec,
    storage_options: Mapping[str, object] | None,
    totals: list[int],
) -> list[BloomFiltersAdded]:
    """Read the blocklets of ``work`` and write one bloom file per data file."""
    layout = snapshot.layout
    physical = set(spec.columns)
    logical = [f for f in snapshot.schema if layout.physical(f.name) in physical]
    output = pa.schema(logical)
    reader = _reader(log, snapshot, storage_options)
    added: list[BloomFiltersAdded] = []
    try:
        for seg, f, missing in work:
            split = Split(seg.segment_id, f.path, f.committed_length, f.blocklets)

            def record(b: BlockletEntry, split: Split = split) -> tuple[int, bytes | None, int]:
                batch = reader.read_blocklet(split, b, output, None)
                batch = batch.rename_columns([layout.physical(n) for n in batch.schema.names])
                return b.offset, build_bloom_record(batch, spec.columns, spec.fpp), batch.num_rows

            records = []
            for offset, rec, rows in ordered_map(record, missing):
                totals[3] += rows
                if rec is not None:
                    records.append((offset, rec))
            written = write_bloom_file(log.storage, log.root, f.path, records, spec.columns)
            if written is None:
                continue
            added.append(BloomFiltersAdded(seg.segment_id, f.path, written))
            totals[0] += len(written.filters)
            totals[1] += 1
            totals[2] += written.size
    except BaseException:
        discard_blooms(log.storage, log.root, (a.blooms for a in added))
        raise
    finally:
        reader.close()
    return added
