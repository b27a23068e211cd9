"""The workers' side of a delete, update or merge run by many workers (Spark executors) and
committed once (the driver's side is :mod:`carbonlite.driver_changes`).

1. The driver pins a snapshot and plans a :class:`ChangeJob`: the table's splits in groups
   (one reading task each), what each data file's blocklets hold (rows, the deletion vector
   before), a :class:`~carbonlite.writer.write_plan.WritePlan` for the rows written and a
   token naming the job's files.
2. :func:`read_located` (each reading task) yields the live rows of one group that the change
   can touch (:mod:`carbonlite.writer.touched`) with their location: :data:`FILE_COLUMN`,
   :data:`BLOCKLET_COLUMN`, :data:`POSITION_COLUMN`.
3. The engine joins, decides each row's :data:`ACTION_COLUMN` (delete; update: delete the old
   row and write the new one; insert) and sends every changed row of one data file to one
   task.
4. :func:`write_changes` (each writing task) writes the new rows as a part (``write_part`` /
   ``write_partitioned_part``, files named per task attempt) and, per data file, one
   deletion-vector file named after the job's token, the task and the attempt
   (``row_changes.write_file_deletions``: the union with the vector before). It returns a
   :class:`ChangeTaskResult`: plain data, no rows.

A retried or speculative attempt writes files of its own names (the engine gives each
attempt a number of its own: Spark's task attempt id); only the results of the attempts the
engine kept reach the driver, and the others' files are left for ``recover``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from carbonlite.metadata import BlockletsAppended, DeletionRef, RowsDeleted
from carbonlite.reader.expression import Filter
from carbonlite.reader.planner import Split
from carbonlite.reader.scan import ROW_POSITION, SplitReader
from carbonlite.storage import open_storage
from carbonlite.writer.distributed import write_part, write_partitioned_part
from carbonlite.writer.partition_files import PartitionFile
from carbonlite.writer.row_changes import read_positions, write_file_deletions
from carbonlite.writer.touched import keep_touched
from carbonlite.writer.write_plan import WritePlan

__all__ = [
    "ACTION_COLUMN",
    "ACTION_DELETE",
    "ACTION_INSERT",
    "ACTION_UPDATE",
    "BLOCKLET_COLUMN",
    "FILE_COLUMN",
    "POSITION_COLUMN",
    "ChangeJob",
    "ChangeTaskResult",
    "FileBlocklets",
    "job_files",
    "located_schema",
    "read_located",
    "write_changes",
]

FILE_COLUMN = "_carbonlite_file"
"""The data file a target row lies in: its number in :attr:`ChangeJob.file_names` (a number,
not the path, keeps the rows the engine shuffles small)."""
BLOCKLET_COLUMN = "_carbonlite_blocklet"
"""The offset of the row's blocklet in its file."""
POSITION_COLUMN = ROW_POSITION
"""The row's position in its blocklet."""
ACTION_COLUMN = "_carbonlite_action"
"""What happens to a changed row (:data:`ACTION_DELETE`, :data:`ACTION_UPDATE`,
:data:`ACTION_INSERT`)."""

ACTION_DELETE = 1
"""The row at the location is deleted."""
ACTION_UPDATE = 2
"""The row at the location is deleted and the row's values are written in its place."""
ACTION_INSERT = 3
"""The row's values are written (it has no location)."""


@dataclass(frozen=True, slots=True)
class FileBlocklets:
    """What a writing task needs of one data file: its segment, and for each blocklet offset
    the blocklet's rows and its deletion vector as the job read it."""

    segment_id: str
    blocklets: Mapping[int, tuple[int, DeletionRef | None]]


@dataclass
class ChangeJob:
    """A distributed change planned on the driver against ``version``."""

    plan: WritePlan
    """Where the rows written go (``plan.read_version`` is the pinned version)."""
    token: str
    groups: list[list[Split]]
    """The reading tasks' splits."""
    files: dict[str, FileBlocklets] = field(default_factory=dict)
    columns: list[str] | None = None
    """The table's columns the reading tasks read (None: every column)."""
    filter: Filter | None = None
    """The rows the reading tasks keep (``touched.row_filter``: the condition every row the
    change touches satisfies; None: every live row)."""
    keys: Mapping[str, pa.Array] = field(default_factory=dict)
    """And of those, the rows whose key columns hold one of these values (a merge's source
    keys: ``touched.keep_touched``)."""

    @property
    def file_names(self) -> list[str]:
        """The data files, numbered as :data:`FILE_COLUMN` numbers them."""
        return list(self.files)

    @property
    def read_schema(self) -> pa.Schema:
        """The columns the reading tasks read, in the table's order."""
        schema = self.plan.schema
        if self.columns is None:
            return schema
        return pa.schema([f for f in schema if f.name in self.columns])

    @property
    def version(self) -> int:
        return self.plan.read_version

    @property
    def tag(self) -> str:
        """Names the parts the writing tasks write."""
        return f"change-{self.token}"


@dataclass
class ChangeTaskResult:
    """What one writing task did (plain data for the driver)."""

    deletions: tuple[RowsDeleted, ...] = ()
    appended: BlockletsAppended | None = None
    partitioned: list[PartitionFile] = field(default_factory=list)
    updated: int = 0
    deleted: int = 0
    inserted: int = 0
    repeated: int = 0
    """Target rows more than one changed row deletes or updates (a merge whose source matched
    them twice); the task then writes no deletion vector."""
    repeated_at: tuple[str, int, int] | None = None
    """(file, blocklet offset, position) of one of them."""

    @property
    def appends(self) -> list[BlockletsAppended]:
        out = [f.appended for f in self.partitioned]
        return out if self.appended is None else [self.appended, *out]


def located_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` plus the location columns :func:`read_located` adds."""
    return pa.schema(
        [
            *schema,
            pa.field(FILE_COLUMN, pa.int32(), nullable=False),
            pa.field(BLOCKLET_COLUMN, pa.int64(), nullable=False),
            pa.field(POSITION_COLUMN, pa.int64(), nullable=False),
        ]
    )


def job_reader(job: ChangeJob) -> SplitReader:
    """A reader of the table's data files as of the job's version (on a worker)."""
    plan = job.plan
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    return SplitReader(
        storage,
        root,
        plan.schema,
        storage_options=plan.storage_options,
        version=job.version,
        layout=plan.layout,
    )


def read_located(job: ChangeJob, group: int) -> Iterator[pa.RecordBatch]:
    """The live rows of the splits of ``job.groups[group]`` as of the job's version, the
    job's columns plus their location (:func:`located_schema` of ``job.read_schema``); runs
    on a worker."""
    reader = job_reader(job)
    columns = job.read_schema
    output = located_schema(columns)
    numbers = {name: n for n, name in enumerate(job.files)}
    try:
        for split, blocklet, read in read_positions(reader, job.groups[group], columns, job.filter):
            batch = keep_touched(read, job.keys)
            n = batch.num_rows
            if not n:
                continue
            arrays = [
                *batch.columns[:-1],
                pa.repeat(pa.scalar(numbers[split.file], pa.int32()), n),
                pa.repeat(pa.scalar(blocklet.offset, pa.int64()), n),
                batch.column(ROW_POSITION).cast(pa.int64()),
            ]
            yield pa.RecordBatch.from_arrays(arrays, schema=output)
    finally:
        reader.close()


class _Deleted:
    """Positions a task deletes, per data file and blocklet, gathered as rows stream by."""

    def __init__(self) -> None:
        self.positions: dict[str, dict[int, list[np.ndarray]]] = {}

    def add(self, rows: pa.RecordBatch, names: list[str]) -> None:
        files = rows.column(FILE_COLUMN).to_numpy(zero_copy_only=False)
        blocklets = rows.column(BLOCKLET_COLUMN).to_numpy(zero_copy_only=False)
        positions = rows.column(POSITION_COLUMN).to_numpy(zero_copy_only=False)
        for number in np.unique(files):
            in_file = files == number
            per_file = self.positions.setdefault(names[int(number)], {})
            for offset in np.unique(blocklets[in_file]):
                chosen = positions[in_file & (blocklets == offset)]
                per_file.setdefault(int(offset), []).append(chosen)

    def repeated(self) -> tuple[int, tuple[str, int, int] | None]:
        """How many target rows appear more than once, and one of them."""
        count, example = 0, None
        for name, per_file in self.positions.items():
            for offset, parts in per_file.items():
                values, times = np.unique(np.concatenate(parts), return_counts=True)
                twice = values[times > 1]
                if len(twice):
                    count += len(twice)
                    example = example or (name, offset, int(twice[0]))
        return count, example


def write_changes(
    job: ChangeJob, batches: Iterable[pa.RecordBatch], *, task: int, attempt: int
) -> ChangeTaskResult:
    """One writing task: ``batches`` hold changed rows (the location columns,
    :data:`ACTION_COLUMN` and the table's columns, in the table's types); runs on a worker."""
    plan = job.plan
    deleted = _Deleted()
    result = ChangeTaskResult()
    names = plan.schema.names
    files = job.file_names

    def new_rows() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            action = batch.column(ACTION_COLUMN).to_numpy(zero_copy_only=False)
            deletes, updates = action == ACTION_DELETE, action == ACTION_UPDATE
            inserts = action == ACTION_INSERT
            result.deleted += int(deletes.sum())
            result.updated += int(updates.sum())
            result.inserted += int(inserts.sum())
            gone, written = deletes | updates, updates | inserts
            if gone.any():
                deleted.add(batch.filter(pa.array(gone)), files)
            if written.any():
                yield batch.filter(pa.array(written)).select(names)

    if plan.partition_by:
        result.partitioned = write_partitioned_part(
            plan, new_rows(), tag=job.tag, partition=task, attempt=attempt
        )
    else:
        result.appended = write_part(plan, new_rows(), tag=job.tag, partition=task, attempt=attempt)
    result.repeated, result.repeated_at = deleted.repeated()
    if result.repeated or not deleted.positions:
        return result  # a refused merge writes no vector (the driver discards the parts)
    result.deletions = _write_vectors(job, deleted, f"{job.token}-p{task:05d}-a{attempt}")
    return result


def _write_vectors(job: ChangeJob, deleted: _Deleted, token: str) -> tuple[RowsDeleted, ...]:
    plan = job.plan
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    reader = job_reader(job)
    out = []
    try:
        for name, per_file in sorted(deleted.positions.items()):
            known = job.files[name]
            blocklets = {
                offset: (known.blocklets[offset][0], np.concatenate(parts).astype(np.uint32))
                for offset, parts in per_file.items()
            }
            before = {
                offset: ref
                for offset, (_, ref) in known.blocklets.items()
                if ref is not None and offset in blocklets
            }
            out.append(
                write_file_deletions(
                    storage, root, reader, known.segment_id, name, blocklets, before, token
                )
            )
    finally:
        reader.close()
    return tuple(out)


def job_files(groups: Sequence[Sequence[Split]]) -> dict[str, FileBlocklets]:
    """Every data file of ``groups``' splits with its blocklets (rows, vector before)."""
    files: dict[str, tuple[str, dict[int, tuple[int, DeletionRef | None]]]] = {}
    for group in groups:
        for split in group:
            entry = files.setdefault(split.file, (split.segment_id, {}))
            for blocklet in split.blocklets:
                entry[1][blocklet.offset] = (blocklet.num_rows, split.deletion_of(blocklet))
    return {name: FileBlocklets(sid, blocklets) for name, (sid, blocklets) in files.items()}
