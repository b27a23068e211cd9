"""Row-level changes: find rows, and delete them with deletion vectors (docs/LOG.md).

A delete, update or merge reads only the columns it needs of the blocklets min/max pruning
keeps, with each row's position in its blocklet (``SplitReader.read_blocklet(...,
positions=True)``; rows deleted earlier are skipped as for any reader). The rows it selects
become a :class:`Selection`: positions per blocklet of each data file. ``write_deletions``
then writes, for every data file touched, one deletion-vector file
``<data file>.<token>.dv`` holding one vector per touched blocklet: the union of the rows
deleted before and the new ones. The commit carries those vectors as ``deleteRows`` actions,
with the rows an update or merge writes in their place, and requires that no other commit
touched the deleted files' rows since they were read (``DeletionsAsRead``); appends to the
same files do not matter, so a delete never conflicts with streaming ingestion.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa

from carbonlite.errors import ColumnsMovedError, CommitConflictError, RowsChangedError
from carbonlite.format.deletion_vector import DeletionVector
from carbonlite.format.pages import ordered_map
from carbonlite.metadata import (
    BlockletEntry,
    DeletionRef,
    Log,
    RowsDeleted,
    Snapshot,
    TransactionAlreadyCommitted,
    TxnMarker,
    TxnNotCommitted,
)
from carbonlite.metadata.columns import ColumnLayout
from carbonlite.metadata.commit import backoff
from carbonlite.reader.bloom_prune import bloom_pruner
from carbonlite.reader.expression import Filter
from carbonlite.reader.planner import Split, plan_scan
from carbonlite.reader.scan import ROW_POSITION, SplitReader
from carbonlite.seams import reach
from carbonlite.storage import Storage
from carbonlite.writer.append import CommitResult, RowChanges, StatesArg, TableWriter
from carbonlite.writer.batches import ColumnsAsOf
from carbonlite.writer.lease import Lease

__all__ = [
    "DV_SUFFIX",
    "MAX_ROW_CHANGE_ATTEMPTS",
    "CommitStep",
    "KeyCache",
    "PlannedChange",
    "Selection",
    "commit_row_change",
    "discard_deletions",
    "dv_path",
    "read_located_keys",
    "read_positions",
    "row_changes",
    "select_rows",
    "write_deletions",
    "write_file_deletions",
]

DV_SUFFIX = ".dv"

_FileKey = tuple[str, str]
"""(segment id, data file path)."""


@dataclass
class Selection:
    """Rows chosen for deletion: positions within blocklets of data files of ``snapshot``."""

    snapshot: Snapshot
    blocklets: dict[_FileKey, dict[int, tuple[int, list[np.ndarray]]]] = field(default_factory=dict)
    """(segment, file) -> blocklet offset -> (rows of the blocklet, arrays of positions)."""

    def add(self, split: Split, blocklet: BlockletEntry, positions: np.ndarray) -> None:
        if not len(positions):
            return
        per_file = self.blocklets.setdefault((split.segment_id, split.file), {})
        per_file.setdefault(blocklet.offset, (blocklet.num_rows, []))[1].append(positions)

    def positions(self, split: Split, blocklet: BlockletEntry) -> np.ndarray:
        """The positions selected in ``blocklet`` of ``split``'s file (none: empty)."""
        entry = self.blocklets.get((split.segment_id, split.file), {}).get(blocklet.offset)
        if entry is None:
            return np.empty(0, dtype=np.uint32)
        return np.concatenate(entry[1])

    @property
    def num_rows(self) -> int:
        return sum(
            sum(len(p) for p in parts)
            for per_file in self.blocklets.values()
            for _, parts in per_file.values()
        )

    def files_read(self) -> dict[_FileKey, int]:
        """``deletion_version`` of each file with selected rows, as read."""
        segments = self.snapshot.segments
        return {key: segments[key[0]].files[key[1]].deletion_version for key in self.blocklets}


def read_positions(
    reader: SplitReader,
    splits: Sequence[Split],
    output: pa.Schema,
    filter: Filter | None,
) -> Iterator[tuple[Split, BlockletEntry, pa.RecordBatch]]:
    """(split, blocklet, live rows ``filter`` keeps in ``output``'s columns plus
    :data:`ROW_POSITION`) for every blocklet of ``splits``, decoded in parallel."""
    tasks = ((s, b) for s in splits for b in s.blocklets)

    def read(task: tuple[Split, BlockletEntry]) -> tuple[Split, BlockletEntry, pa.RecordBatch]:
        split, blocklet = task
        return (
            split,
            blocklet,
            reader.read_blocklet(split, blocklet, output, filter, positions=True),
        )

    for split, blocklet, batch in ordered_map(read, tasks):
        if batch.num_rows:
            yield split, blocklet, batch


class KeyCache:
    """Decoded key columns of committed blocklets, kept by one ``Table`` across its merges and
    upserts, so that each reads only the blocklets committed since (a primary-key table looks
    up every upsert's keys). A committed blocklet never changes: its file is only appended to,
    and segment ids and committed file names are never reused. A column is known by its
    physical name and type, never by its present name: a rename, a drop followed by an add of
    the same name, or a widening changes what a name reads, not what a physical column holds.
    Deletions are applied on every use, from the snapshot's vectors. Holds at most
    ``max_bytes``; past that, nothing more is kept."""

    def __init__(self, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._blocklets: dict[tuple[str, int, tuple[str, ...]], pa.RecordBatch] = {}
        self._lock = threading.Lock()

    def get(self, file: str, offset: int, columns: tuple[str, ...]) -> pa.RecordBatch | None:
        with self._lock:
            return self._blocklets.get((file, offset, columns))

    def put(self, file: str, offset: int, columns: tuple[str, ...], batch: pa.RecordBatch) -> None:
        with self._lock:
            if self.nbytes + batch.nbytes <= self.max_bytes:
                self._blocklets[(file, offset, columns)] = batch
                self.nbytes += batch.nbytes


def read_located_keys(
    reader: SplitReader,
    splits: Sequence[Split],
    output: pa.Schema,
    layout: ColumnLayout,
    cache: KeyCache,
    locator: str,
) -> tuple[list[tuple[Split, BlockletEntry]], pa.Table]:
    """Every live row of ``splits`` in ``output``'s columns (the keys; ``layout``: the
    snapshot's, naming their physical columns), plus a column ``locator`` = ``n << 32 |
    position``: the row's position in the ``n``-th blocklet of the list returned. Keys come
    from ``cache`` where it has them (new blocklets are decoded in parallel and kept there);
    deletions are applied to all rows at once, as one mask."""
    columns = tuple(f"{layout.physical(f.name)}:{f.type}" for f in output)
    located = [(s, b) for s in splits for b in s.blocklets]
    found = [cache.get(s.file, b.offset, columns) for s, b in located]
    missing = [n for n, batch in enumerate(found) if batch is None]

    def read(n: int) -> pa.RecordBatch:
        split, blocklet = located[n]
        batch = reader.read_blocklet(
            dataclasses.replace(split, deletions=()), blocklet, output, None
        )
        cache.put(split.file, blocklet.offset, columns, batch)
        return batch

    for n, batch in zip(missing, ordered_map(read, missing), strict=True):
        found[n] = batch
    rows = np.array([b.num_rows for _, b in located], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]]) if len(rows) else rows
    total = int(rows.sum())
    keep = np.ones(total, dtype=np.bool_)
    for n, (split, blocklet) in enumerate(located):
        ref = split.deletion_of(blocklet) if split.deletions else None
        if ref is not None:
            keep[starts[n] + reader.deletion_vector(ref, blocklet.num_rows).positions] = False
    numbers = np.repeat(np.arange(len(located), dtype=np.int64), rows)
    positions = np.arange(total, dtype=np.int64) - np.repeat(starts, rows)
    table = pa.Table.from_batches(  # cached under earlier names: the present ones
        [pa.RecordBatch.from_arrays(b.columns, schema=output) for b in found if b is not None],
        schema=output,
    )
    table = table.append_column(locator, pa.array((numbers << 32) | positions, pa.int64()))
    return located, table.filter(pa.array(keep))


def select_rows(
    reader: SplitReader,
    snapshot: Snapshot,
    filter: Filter | None,
    columns: Sequence[str] | None,
) -> tuple[Selection, list[pa.RecordBatch]]:
    """The live rows ``filter`` keeps (every live row when None): their positions, and the
    rows themselves in ``columns`` (None: every column; [] : none, positions only)."""
    plan = plan_scan(
        snapshot, columns=columns, filter=filter, blooms=bloom_pruner(reader.storage, reader.root)
    )
    selection = Selection(snapshot)
    batches = []
    for split, blocklet, batch in read_positions(reader, plan.splits, plan.schema, filter):
        positions = batch.column(ROW_POSITION).to_numpy()
        selection.add(split, blocklet, positions)
        batches.append(batch.drop_columns([ROW_POSITION]))
    return selection, batches


def dv_path(data_file: str, token: str) -> str:
    """The deletion-vector file of ``data_file`` that the change ``token`` writes."""
    return f"{data_file}.{token}{DV_SUFFIX}"


def write_deletions(
    storage: Storage, root: str, reader: SplitReader, selection: Selection, token: str
) -> tuple[RowsDeleted, ...]:
    """Write one deletion-vector file per data file of ``selection`` (:func:`dv_path`):
    every touched blocklet's vector, the rows deleted before included. Nothing is visible
    until the ``deleteRows`` actions returned are committed."""
    out = []
    for (sid, path), per_blocklet in sorted(selection.blocklets.items()):
        f = selection.snapshot.segments[sid].files[path]
        blocklets = {
            offset: (rows, np.concatenate(positions))
            for offset, (rows, positions) in per_blocklet.items()
        }
        out.append(
            write_file_deletions(storage, root, reader, sid, path, blocklets, f.deletions, token)
        )
    return tuple(out)


def write_file_deletions(
    storage: Storage,
    root: str,
    reader: SplitReader,
    segment_id: str,
    path: str,
    blocklets: Mapping[int, tuple[int, np.ndarray]],
    before: Mapping[int, DeletionRef],
    token: str,
) -> RowsDeleted:
    """Write the deletion-vector file of one data file (:func:`dv_path`): for each blocklet
    (offset -> (its rows, positions newly deleted)), the union with the vector ``before``
    holds for it. Used by :func:`write_deletions` on one machine and by the tasks of a
    distributed change (``writer/distributed_changes.py``)."""
    dv_file = dv_path(path, token)
    parts: list[bytes] = []
    refs: list[DeletionRef] = []
    size = 0
    for offset, (rows, positions) in sorted(blocklets.items()):
        vector = DeletionVector.of(positions, rows)
        old = before.get(offset)
        if old is not None:
            vector = vector.union(reader.deletion_vector(old, rows))
        blob = vector.encode()
        refs.append(DeletionRef(offset, dv_file, size, len(blob), vector.cardinality))
        parts.append(blob)
        size += len(blob)
    if not storage.put_if_absent(storage.join(root, dv_file), b"".join(parts)):
        raise CommitConflictError(
            f"deletion-vector file {dv_file!r} exists already (a name clash); nothing was "
            "committed, run the operation again"
        )
    return RowsDeleted(segment_id, path, tuple(refs), size)


def discard_deletions(storage: Storage, root: str, deletions: Sequence[RowsDeleted]) -> None:
    """Delete deletion-vector files of a change that was not committed."""
    for d in deletions:
        storage.delete(storage.join(root, d.dv_file))


def row_changes(
    storage: Storage,
    root: str,
    reader: SplitReader,
    selection: Selection,
    parameters: Mapping[str, str],
    *,
    token: str,
    exclusive: bool = False,
) -> RowChanges:
    """The deleting half of a commit: ``selection``'s vectors written (by the change
    ``token``), and what they need."""
    deletions = (
        write_deletions(storage, root, reader, selection, token) if selection.blocklets else ()
    )
    return RowChanges(
        deletions,
        selection.files_read(),
        dict(parameters),
        read_version=selection.snapshot.version,
        exclusive=exclusive,
        row_level=True,
    )


MAX_ROW_CHANGE_ATTEMPTS = 10
"""Times a delete, update or merge plans again after losing its rows to a concurrent commit."""

_Plan = TypeVar("_Plan", bound="PlannedChange")


class PlannedChange(Protocol):
    """What ``commit_row_change`` needs of a plan (``modify.RowChangePlan``)."""

    @property
    def selection(self) -> Selection: ...

    @property
    def data(self) -> pa.Table: ...

    @property
    def parameters(self) -> Mapping[str, str]: ...

    @property
    def changes_anything(self) -> bool: ...

    @property
    def exclusive(self) -> bool: ...


CommitStep = Callable[[Snapshot, RowChanges], tuple[CommitResult, Snapshot]]
"""Commits a change's deletions on a snapshot; the result and the snapshot after."""


def commit_row_change(
    writer: TableWriter,
    log: Log,
    snapshot: Snapshot,
    *,
    operation: str,
    plan: Callable[[Snapshot, SplitReader], _Plan],
    storage_options: Mapping[str, Any],
    txn: TxnMarker | None = None,
    progress: Mapping[str, tuple[int | None, int]] | None = None,
    states: StatesArg = (),
    write: CommitStep | None = None,
) -> tuple[_Plan | None, int | None, Snapshot]:
    """Plan on the newest snapshot, write the deletion vectors, commit them with the plan's
    rows (and ``txn``, exactly once, or the markers ``progress`` moves by compare-and-set:
    ``TxnMovedError`` when one moved; and ``states``, as :meth:`TableWriter.write`); plan
    again when a concurrent commit changed the rows read, or renamed or dropped one of their
    columns (bounded; the new plan decides whether the change still applies: a filter or a
    value naming a column gone is refused then). Returns the plan committed (None: ``txn`` was committed before), its
    version (None when nothing was committed) and the new snapshot.

    ``write`` commits the deletions with rows written elsewhere (``replaceWhere``: the
    workers' blocklets) instead of the plan's ``data``."""
    storage, root = log.storage, log.root
    for attempt in range(MAX_ROW_CHANGE_ATTEMPTS):
        snapshot = log.update(snapshot)
        if txn is not None:
            try:
                TxnNotCommitted(txn.app_id, txn.batch_id).check(snapshot, snapshot.version)
            except TransactionAlreadyCommitted:
                return None, None, snapshot
        reader = SplitReader(
            storage,
            root,
            snapshot.schema,
            storage_options=storage_options,
            version=snapshot.version,
            layout=snapshot.layout,
        )
        try:
            planned = plan(snapshot, reader)
            reach("row_change.after_plan")
            if not planned.changes_anything and txn is None and not progress:
                return planned, None, snapshot
            token = uuid.uuid4().hex[:16]
            vectors = [dv_path(path, token) for _, path in planned.selection.blocklets]
            # recover leaves the vector files alone from before they exist until the commit
            lease = Lease(storage, root, owner=f"{operation.lower()} {token}", paths=vectors)
            with lease if vectors else nullcontext():
                changes = row_changes(
                    storage,
                    root,
                    reader,
                    planned.selection,
                    planned.parameters,
                    token=token,
                    exclusive=planned.exclusive,
                )
                try:
                    if write is not None:
                        result, snapshot = write(snapshot, changes)
                    else:
                        result, snapshot = writer.write(
                            log,
                            snapshot,
                            planned.data,
                            operation=operation,
                            changes=changes,
                            txn=txn,
                            progress=progress,
                            states=states,
                            # the rows were read in the plan's columns: a rename or drop
                            # of one of them since is ColumnsMovedError
                            shown=ColumnsAsOf(snapshot.metadata, read=True),
                        )
                except (CommitConflictError, ColumnsMovedError) as exc:
                    discard_deletions(storage, root, changes.deletions)  # nothing was committed
                    lost = isinstance(exc, (RowsChangedError, ColumnsMovedError))
                    if lost and attempt + 1 < MAX_ROW_CHANGE_ATTEMPTS:
                        # another row-level change won, or a rename or drop of a column of
                        # the rows read: plan again on the table as it is
                        time.sleep(backoff(attempt))
                        continue
                    raise
        finally:
            reader.close()
        if result.skipped:  # the batch landed meanwhile: these vectors are not needed
            discard_deletions(storage, root, changes.deletions)
            return None, None, snapshot
        return planned, result.version, snapshot
    raise AssertionError("unreachable")  # pragma: no cover - the last attempt raises
