"""Planning a scan from a snapshot alone: segments -> files -> blocklets, pruned by statistics.

No data file is opened here. A :class:`Split` is a run of consecutive matching blocklets of
one file, read only up to the file's committed length; it is plain data, so it can be
shipped to a Spark executor and read there with :func:`carbonlite.reader.scan.read_split`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from carbonlite.errors import SchemaMismatchError
from carbonlite.metadata import (
    BlockletEntry,
    BloomRef,
    DeletionRef,
    FileState,
    SegmentState,
    Snapshot,
)
from carbonlite.metadata.blocklet_index import entries_table
from carbonlite.metadata.columns import IDENTITY, ColumnLayout
from carbonlite.metadata.manifest import ManifestSet
from carbonlite.reader.bloom_prune import BloomPruner, bloom_clauses
from carbonlite.reader.expression import Filter
from carbonlite.reader.partition_prune import pruned_segments
from carbonlite.reader.predicate import Predicate, can_match, renamed
from carbonlite.reader.prune_columns import match_mask, one_chunk

__all__ = [
    "DEFAULT_SPLIT_BYTES",
    "ScanPlan",
    "Split",
    "file_split",
    "plan_scan",
    "project_schema",
]

DEFAULT_SPLIT_BYTES = 128 * 1024 * 1024
"""A run of blocklets longer than this is cut into several splits (parallelism)."""


@dataclass(frozen=True, slots=True)
class Split:
    """A run of consecutive blocklets of one file, up to the file's committed length."""

    segment_id: str
    file: str
    """Path relative to the table root."""
    committed_length: int
    blocklets: tuple[BlockletEntry, ...]
    deletions: tuple[tuple[int, DeletionRef], ...] = ()
    """(blocklet offset, deletion vector) of its blocklets with deleted rows: readers skip
    those rows (empty: every row is live, as when a change feed reads rows as appended)."""
    start_row: int = 0
    """Rows of the first blocklet to skip: a stream batch that starts inside a blocklet."""
    stop_row: int | None = None
    """Rows of the last blocklet to read (None: all): a stream batch that ends inside one."""

    def row_range(self, index: int) -> tuple[int, int]:
        """The rows ``[start, stop)`` of its ``index``-th blocklet that the split reads."""
        start = self.start_row if index == 0 else 0
        last = index == len(self.blocklets) - 1
        stop = self.stop_row if last and self.stop_row is not None else None
        return start, self.blocklets[index].num_rows if stop is None else stop

    @property
    def num_rows(self) -> int:
        """Rows it reads, deleted ones included."""
        return sum(b.num_rows for b in self.blocklets) - self.start_row - self._rows_after_stop

    @property
    def _rows_after_stop(self) -> int:
        if self.stop_row is None or not self.blocklets:
            return 0
        return self.blocklets[-1].num_rows - self.stop_row

    @property
    def live_rows(self) -> int:
        """Rows of its blocklets less the deleted ones (of a split without a row range: which
        of a blocklet's rows a vector deletes is known only once the vector is read)."""
        return self.num_rows - sum(ref.cardinality for _, ref in self.deletions)

    def deletion_of(self, blocklet: BlockletEntry) -> DeletionRef | None:
        for offset, ref in self.deletions:
            if offset == blocklet.offset:
                return ref
        return None

    @property
    def num_bytes(self) -> int:
        return sum(b.length for b in self.blocklets)


@dataclass(frozen=True, slots=True)
class ScanPlan:
    """What a scan will read, and how much pruning saved."""

    version: int
    table_schema: pa.Schema
    schema: pa.Schema
    """The output schema (the projected columns)."""
    splits: tuple[Split, ...]
    blocklets_total: int
    blocklets_selected: int
    bytes_total: int
    bytes_selected: int
    layout: ColumnLayout = IDENTITY
    """Where the table's columns lie in data files (``metadata/columns.py``)."""
    blocklets_pruned_by_partition: int = 0
    """Blocklets of segments whose partition cannot match the filter."""
    blocklets_pruned_by_stats: int = 0
    """Blocklets whose min/max/null statistics (or their manifest's) rule the filter out."""
    blocklets_pruned_by_index: int = 0
    """Blocklets min/max left that their file's secondary index rules out
    (``secondary_index_columns``)."""
    blocklets_pruned_by_bloom: int = 0
    """Blocklets min/max and the secondary indexes left that their bloom filters rule out
    (``bloom_filter_columns``)."""
    blocklets_bloom_unreadable: int = 0
    """Blocklets whose bloom filters could not be used (damaged or gone): read, not pruned."""

    @property
    def blocklets_pruned(self) -> int:
        return self.blocklets_total - self.blocklets_selected

    @property
    def num_rows(self) -> int:
        """Rows in the selected blocklets (before the exact filter)."""
        return sum(s.num_rows for s in self.splits)


def file_split(seg: SegmentState, f: FileState) -> Split:
    """Every committed blocklet of ``f``, with its deletion vectors."""
    return Split(seg.segment_id, f.path, f.committed_length, f.blocklets, f.deletion_items())


def project_schema(schema: pa.Schema, columns: Sequence[str] | None, *, where: str) -> pa.Schema:
    if columns is None:
        return schema
    if isinstance(columns, str):
        columns = [columns]
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise SchemaMismatchError(
            f"cannot select columns {missing} from {where}", [f"its columns are {schema.names}"]
        )
    if len(set(columns)) != len(columns):
        raise SchemaMismatchError(f"columns {list(columns)} name a column twice")
    return pa.schema([schema.field(c) for c in columns])


def plan_scan(
    snapshot: Snapshot,
    *,
    columns: Sequence[str] | None,
    filter: Filter | None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    blooms: BloomPruner | None = None,
    skip: Callable[[SegmentState, FileState], bool] | None = None,
) -> ScanPlan:
    """Every live blocklet whose statistics allow a match, grouped into splits.

    Pruning is columnar: whole manifests are skipped by their summary statistics, and the
    entries of the others are matched with Arrow compute (``prune_arrays``); only the
    selected blocklets become objects. With ``blooms`` (which reads the table's bloom
    files), equality and membership tests also prune by bloom filters
    (``reader/bloom_prune.py``). ``skip``: files left out of the plan (the columnar Parquet
    files an engine reads itself: ``reader/parquet_view.py``); the counts count them too."""
    schema = project_schema(snapshot.schema, columns, where=repr(snapshot.table_path))
    types = {f.name: f.type for f in snapshot.physical_schema}
    predicate = filter.predicate if filter is not None else None
    pruned: set[str] = set()
    if predicate is not None and snapshot.metadata.partition_by:
        pruned = pruned_segments(snapshot, predicate)
    if predicate is not None and not snapshot.layout.is_identity:
        # statistics are kept under physical names (metadata/columns.py)
        layout = snapshot.layout
        predicate = renamed(predicate, {n: layout.physical(n) for n in snapshot.schema.names})
    live: dict[str, tuple[int, SegmentState, FileState]] = {}
    total, bytes_total = snapshot.memo("blocklet_totals", lambda: _totals(snapshot))
    for seg in snapshot.live_segments():
        if seg.segment_id not in pruned:
            for f in seg.files.values():
                if skip is None or not skip(seg, f):
                    live[f.path] = (len(live), seg, f)
    chunks: list[_Chunk] = []
    manifests = snapshot.manifests
    if manifests is not None and live:
        live_segments = {seg.segment_id for _, seg, _ in live.values()}
        for ref in manifests.refs:
            if not ref.is_legacy and live_segments.isdisjoint(ref.segments):
                continue
            if (
                predicate is not None
                and ref.stats
                and not can_match(predicate, ref.stats, ref.rows, types)
            ):
                continue
            table = manifests.store.load(ref, manifests.schema).table
            chunks.append(_select(table, live, predicate, types, source=manifests))
    if any(f.has_tail for _, _, f in live.values()):
        tail_table = snapshot.memo("tail_entries", lambda: _tail_entries(snapshot))
        chunks.append(_select(tail_table, live, predicate, types, source=None))
    after_stats = sum(len(c[0]) for c in chunks)
    unreadable = by_index = 0
    if blooms is not None and predicate is not None:
        before = blooms.unreadable
        chunks, by_index = _index_pruned(chunks, live, predicate, types, blooms)
        unreadable = blooms.unreadable - before
    after_bloom = sum(len(c[0]) for c in chunks)
    by_partition = sum(
        seg.num_blocklets for seg in snapshot.live_segments() if seg.segment_id in pruned
    )
    splits = _splits(chunks, live, split_bytes)
    return ScanPlan(
        version=snapshot.version,
        table_schema=snapshot.schema,
        schema=schema,
        splits=tuple(splits),
        blocklets_total=total,
        blocklets_selected=sum(len(s.blocklets) for s in splits),
        bytes_total=bytes_total,
        bytes_selected=sum(s.num_bytes for s in splits),
        layout=snapshot.layout,
        blocklets_pruned_by_partition=by_partition,
        blocklets_pruned_by_stats=total - by_partition - after_stats,
        blocklets_pruned_by_index=by_index,
        blocklets_pruned_by_bloom=after_stats - after_bloom - by_index,
        blocklets_bloom_unreadable=unreadable,
    )


def _index_pruned(
    chunks: list[_Chunk],
    live: dict[str, tuple[int, SegmentState, FileState]],
    predicate: Predicate,
    types: dict[str, pa.DataType],
    blooms: BloomPruner,
) -> tuple[list[_Chunk], int]:
    """``chunks`` less the blocklets whose secondary indexes or bloom filters rule
    ``predicate`` out, and how many the indexes ruled out."""
    by_number = {n: f for n, _, f in live.values() if f.blooms or f.indexes}
    if not by_number:
        return chunks, 0
    clauses = bloom_clauses(predicate, frozenset(types))
    if not clauses:
        return chunks, 0
    out = []
    by_index = 0
    for chunk in chunks:
        files = [by_number.get(n) for n in chunk[0].tolist()]
        keep = blooms.index_may_match(clauses, files, chunk[1], types)
        by_index += int(len(keep) - keep.sum())
        refs: list[tuple[BloomRef, int] | None] = []
        for k, f, offset in zip(keep.tolist(), files, chunk[1].tolist(), strict=True):
            ref = f.blooms.get(offset) if k and f is not None else None
            refs.append(None if ref is None or f is None else (ref, f.bloom_files[ref.path]))
        keep &= blooms.may_match(clauses, refs, types)
        out.append((chunk[0][keep], chunk[1][keep], chunk[2][keep], chunk[3][keep]))
    return out, by_index


def _totals(snapshot: Snapshot) -> tuple[int, int]:
    """(blocklets, bytes of blocklets) of every live file."""
    blocklets = size = 0
    for _, f in snapshot.iter_files():
        blocklets += f.num_blocklets
        size += f.blocklet_bytes
    return blocklets, size


_Chunk = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""Selected blocklets of one entries table: file number (in ``live``), offset, length, rows."""


def _tail_entries(snapshot: Snapshot) -> pa.Table:
    """The entries table of every live file's tail (its blocklets not yet in a manifest),
    made once per snapshot: a plan selects the files it reads from it (:func:`_select`)."""
    tails = [
        (f.path, f.tail)
        for seg in snapshot.live_segments()
        for f in seg.files.values()
        if f.has_tail
    ]
    return entries_table(tails, snapshot.physical_schema)


def _select(
    table: pa.Table,
    live: dict[str, tuple[int, SegmentState, FileState]],
    predicate: Predicate | None,
    types: dict[str, pa.DataType],
    *,
    source: ManifestSet | None,
) -> _Chunk:
    """The blocklets of ``table`` that belong to live files and may match ``predicate``.
    ``source``: the manifests ``table`` is one of (a file's entries count only from the
    manifests it descends from); None for a table of the files' tails."""
    files = one_chunk(table.column("file"))
    number = np.array(
        [
            found[0]
            if (found := live.get(p)) is not None and (source is None or found[2].source is source)
            else -1
            for p in files.dictionary.to_pylist()
        ],
        dtype=np.int64,
    )
    file_of_row = (
        number[files.indices.to_numpy(zero_copy_only=False)]
        if len(number)
        else (np.zeros(0, np.int64))
    )
    keep = file_of_row >= 0
    if predicate is not None and keep.any():
        keep &= match_mask(predicate, table, types).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(keep)
    return (
        file_of_row[rows],
        one_chunk(table.column("offset")).to_numpy()[rows],
        one_chunk(table.column("length")).to_numpy()[rows],
        one_chunk(table.column("rows")).to_numpy()[rows],
    )


def _splits(
    chunks: list[_Chunk],
    live: dict[str, tuple[int, SegmentState, FileState]],
    split_bytes: int,
) -> list[Split]:
    """Runs of adjacent selected blocklets of one file (each starting where the one before it
    ends: no blocklet between them was pruned), in segment, file and file order."""
    if not chunks:
        return []
    files = np.concatenate([c[0] for c in chunks])
    offsets = np.concatenate([c[1] for c in chunks])
    lengths = np.concatenate([c[2] for c in chunks])
    counts = np.concatenate([c[3] for c in chunks])
    order = np.lexsort((offsets, files))
    by_number = {n: (seg, f) for n, seg, f in live.values()}
    splits: list[Split] = []
    run: list[BlockletEntry] = []
    run_deletions: list[tuple[int, DeletionRef]] = []
    run_bytes = 0
    previous_file = previous_end = -1

    def close_run() -> None:
        seg, f = by_number[previous_file]
        splits.append(
            Split(seg.segment_id, f.path, f.committed_length, tuple(run), tuple(run_deletions))
        )

    for i in order.tolist():
        file, offset, length, rows = int(files[i]), int(offsets[i]), int(lengths[i]), int(counts[i])
        deletion = (
            by_number[file][1].deletions.get(offset) if by_number[file][1].deletions else None
        )
        if deletion is not None and deletion.cardinality >= rows:
            continue  # every row of it deleted: the blocklet is gone for readers
        if run and (
            file != previous_file or offset != previous_end or run_bytes + length > split_bytes
        ):
            close_run()
            run, run_deletions, run_bytes = [], [], 0
        run.append(BlockletEntry(offset, length, rows))
        if deletion is not None:
            run_deletions.append((offset, deletion))
        run_bytes += length
        previous_file, previous_end = file, offset + length
    if run:
        close_run()
    return splits
