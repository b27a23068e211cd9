"""The driver's side of a delete, update or merge whose reading, joining and writing run on
many workers (Spark executors), committed as ONE version with the conflict rules of
``Table.merge`` (the workers' side is :mod:`carbonlite.writer.distributed_changes`).

:func:`run_distributed_change` pins the latest snapshot and plans a
:class:`~carbonlite.writer.distributed_changes.ChangeJob` (:func:`plan_change`), hands it to
the engine, which runs the tasks and returns their results, and commits the deletion
vectors and parts they wrote in one version (``driver.commit_parts`` with
:class:`~carbonlite.writer.append.RowChanges`): the rows deleted must still be as the job
read them (``DeletionsAsRead``, ``RowsUnchangedSince``); appends, such as streaming
ingestion, do not conflict. When a concurrent row-level change wins
(:class:`RowsChangedError`), the files are discarded and the job runs again on the newest
snapshot, at most ``MAX_ROW_CHANGE_ATTEMPTS`` times, as ``Table.merge`` plans again. In a
primary-key table the keys are checked on the driver (``check_unique_keys``: the key
columns of the rows written and of the rows they may clash with are read), and the commit
is exclusive, as for ``Table.update`` and ``Table.merge``.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.driver import commit_parts, plan_write
from carbonlite.errors import (
    CarbonLiteError,
    CommitStateUnknownError,
    DuplicateKeyError,
    RowsChangedError,
)
from carbonlite.metadata import RowsDeleted, Snapshot
from carbonlite.metadata.commit import backoff
from carbonlite.reader.bloom_prune import bloom_pruner
from carbonlite.reader.planner import DEFAULT_SPLIT_BYTES, Split, plan_scan
from carbonlite.reader.scan import ROW_POSITION, SplitReader, read_splits
from carbonlite.seams import reach
from carbonlite.table import Table
from carbonlite.writer.append import RowChanges
from carbonlite.writer.distributed import abort_parts
from carbonlite.writer.distributed_changes import ChangeJob, ChangeTaskResult, job_files
from carbonlite.writer.lease import Lease
from carbonlite.writer.modify import MergeResult
from carbonlite.writer.partition_files import discard_files
from carbonlite.writer.row_changes import (
    MAX_ROW_CHANGE_ATTEMPTS,
    Selection,
    discard_deletions,
)
from carbonlite.writer.touched import Touched, plan_filter, row_filter
from carbonlite.writer.unique_keys import check_unique_keys

__all__ = ["TaskRunner", "plan_change", "run_distributed_change"]

TaskRunner = Callable[[ChangeJob], Sequence[ChangeTaskResult]]
"""Runs a job's tasks (reading, deciding, writing) and returns the kept attempts' results."""


def plan_change(
    table: Table,
    *,
    parallelism: int,
    columns: Sequence[str] | None = None,
    touched: Touched | None = None,
) -> tuple[ChangeJob, Snapshot]:
    """A job against the latest snapshot (returned too): its splits in at least
    ``parallelism`` reading groups (when it has that many blocklets), the ``columns`` they
    read (None: all), and where its rows go (a partitioned table: into their partitions, a
    primary-key table included). With ``touched``, only the files, blocklets and rows the
    change can touch are read (pruned by min/max, partitions, bloom filters and the secondary
    index: ``writer/touched.py``)."""
    write = plan_write(table, overwrite=False)
    snapshot = table.snapshot()  # plan_write's
    if snapshot.version != write.read_version:
        snapshot = table.snapshot(write.read_version)
    write = replace(write, partition_by=list(snapshot.metadata.partition_by))
    touched = touched or Touched()
    where = repr(table.path)
    planned = plan_filter(touched, snapshot.schema, where=where)
    splits: Sequence[Split] = ()
    if not touched.nothing:
        blooms = None if planned is None else bloom_pruner(table.storage, table.root)
        splits = plan_scan(snapshot, columns=None, filter=planned, blooms=blooms).splits
    groups = _groups(splits, parallelism)
    wanted = None
    if columns is not None:  # and the keys' (the reader reads a filter's columns itself)
        needed = {*columns, *touched.keys}
        wanted = [c for c in snapshot.schema.names if c in needed]
    job = ChangeJob(
        write,
        uuid.uuid4().hex[:16],
        groups,
        job_files(groups),
        wanted,
        filter=row_filter(touched, snapshot.schema, where=where),
        keys=dict(touched.keys),
    )
    return job, snapshot


def _groups(splits: Sequence[Split], parallelism: int) -> list[list[Split]]:
    """Splits of one blocklet each, in order, packed into groups of about equal bytes."""
    pieces = [
        Split(
            s.segment_id,
            s.file,
            s.committed_length,
            (b,),
            tuple(d for d in s.deletions if d[0] == b.offset),
        )
        for s in splits
        for b in s.blocklets
    ]
    total = sum(p.num_bytes for p in pieces)
    count = min(len(pieces), max(parallelism, math.ceil(total / DEFAULT_SPLIT_BYTES)))
    groups: list[list[Split]] = [[] for _ in range(count)]
    done = 0
    for piece in pieces:
        groups[min(count - 1, done * count // max(total, 1))].append(piece)
        done += piece.num_bytes
    return [g for g in groups if g]


def run_distributed_change(
    table: Table,
    run: TaskRunner,
    *,
    operation: str,
    parameters: Mapping[str, str],
    description: str,
    parallelism: int,
    columns: Sequence[str] | None = None,
    touched: Touched | None = None,
) -> MergeResult:
    """Plan, run the tasks with ``run`` and commit a delete, update or merge; again on the
    newest snapshot when a concurrent row-level change won (bounded). ``description`` names
    the change in errors ("merge into '/t' on t.id = s.id"); ``columns``: the
    table's columns the reading tasks read (None: all); ``touched``: what the change can
    touch (None: any row)."""
    storage, root = table.storage, table.root
    for attempt in range(MAX_ROW_CHANGE_ATTEMPTS):
        job, snapshot = plan_change(
            table, parallelism=parallelism, columns=columns, touched=touched
        )
        reach("row_change.after_plan")
        names = [f"{name.rsplit('/', 1)[-1]}.{job.token}" for name in job.files]
        owner = f"{operation.lower()} {job.token}"
        # recover leaves the parts and the vectors alone until the commit
        with Lease(
            storage, root, owner=owner, paths=[f"segments/{job.plan.segment_id}/"], names=names
        ) as lease:
            results = list(run(job))
            try:
                return _commit(
                    table, job, snapshot, results, lease, operation, parameters, description
                )
            except CarbonLiteError as exc:
                if not isinstance(exc, CommitStateUnknownError):  # nothing was committed
                    _discard(table, job, results)
                if isinstance(exc, RowsChangedError) and attempt + 1 < MAX_ROW_CHANGE_ATTEMPTS:
                    time.sleep(backoff(attempt))  # another row-level change won
                    continue
                raise
    raise AssertionError("unreachable")  # pragma: no cover - the last attempt raises


def _commit(
    table: Table,
    job: ChangeJob,
    snapshot: Snapshot,
    results: Sequence[ChangeTaskResult],
    lease: Lease,
    operation: str,
    parameters: Mapping[str, str],
    description: str,
) -> MergeResult:
    """Check the tasks' results and commit what they wrote in one version (nothing when they
    wrote nothing)."""
    changes = _checked(table, job, snapshot, results, operation, parameters, description)
    if changes is None:
        return MergeResult(None)
    lease.check()
    writer_id = f"{operation.lower()}-{job.token}"
    version = commit_parts(
        job.plan,
        [r.appended for r in results],
        txn=None,
        operation=operation,
        parameters={"writer_id": writer_id},
        writer_id=writer_id,
        partitioned=[f for r in results for f in r.partitioned],
        changes=changes,
    )
    return MergeResult(
        version,
        rows_updated=sum(r.updated for r in results),
        rows_inserted=sum(r.inserted for r in results),
        rows_deleted=sum(r.deleted for r in results),
    )


def _discard(table: Table, job: ChangeJob, results: Sequence[ChangeTaskResult]) -> None:
    """Remove the files of a change that was not committed (best effort: recover removes
    what is left)."""
    discard_deletions(table.storage, table.root, [d for r in results for d in r.deletions])
    abort_parts(job.plan, [r.appended for r in results])
    discard_files(job.plan, [f.appended for r in results for f in r.partitioned])


def _checked(
    table: Table,
    job: ChangeJob,
    snapshot: Snapshot,
    results: Sequence[ChangeTaskResult],
    operation: str,
    parameters: Mapping[str, str],
    description: str,
) -> RowChanges | None:
    """The deleting half of the commit, once the results pass the checks (None: the change
    changes nothing): no target row changed twice (:class:`DuplicateKeyError`), and in a
    primary-key table one row per key."""
    repeated = [r for r in results if r.repeated]
    if repeated:
        raise _repeated_error(table, job, snapshot, repeated, description)
    deletions = tuple(d for r in results for d in r.deletions)
    appends = [a for r in results for a in r.appends]
    if not deletions and not appends:
        return None
    exclusive = False
    if snapshot.metadata.primary_key and appends:
        _check_keys(table, job, snapshot, deletions, appends, operation, description)
        exclusive = True
    counts = {
        "rows_updated": str(sum(r.updated for r in results)),
        "rows_inserted": str(sum(r.inserted for r in results)),
        "rows_deleted": str(sum(r.deleted for r in results)),
    }
    return RowChanges(
        deletions,
        {
            (d.segment_id, d.file): snapshot.segments[d.segment_id].files[d.file].deletion_version
            for d in deletions
        },
        {**parameters, **counts},
        read_version=snapshot.version,
        exclusive=exclusive,
        row_level=True,
    )


def _reader(table: Table, snapshot: Snapshot) -> SplitReader:
    return SplitReader(
        table.storage,
        table.root,
        snapshot.schema,
        storage_options=table.storage_options,
        version=snapshot.version,
        layout=snapshot.layout,
    )


def _check_keys(
    table: Table,
    job: ChangeJob,
    snapshot: Snapshot,
    deletions: Sequence[RowsDeleted],
    appends: Sequence[Any],
    operation: str,
    description: str,
) -> None:
    """``check_unique_keys`` on the rows the tasks wrote (their key columns read back) and
    the rows their vectors delete."""
    keys = list(snapshot.metadata.primary_key)
    output = pa.schema([snapshot.schema.field(k) for k in keys])
    reader = _reader(table, snapshot)
    try:
        splits = [Split(a.segment_id, a.file, a.end, a.blocklets) for a in appends]
        written = pa.Table.from_batches(
            list(read_splits(reader, splits, output, None)), schema=output
        )
        selection = Selection(snapshot)
        for d in deletions:
            per_file = selection.blocklets.setdefault((d.segment_id, d.file), {})
            for ref in d.vectors:
                rows = job.files[d.file].blocklets[ref.blocklet][0]
                per_file[ref.blocklet] = (rows, [reader.deletion_vector(ref, rows).positions])
        check_unique_keys(reader, selection, written, operation.lower(), description)
    finally:
        reader.close()


def _repeated_error(
    table: Table,
    job: ChangeJob,
    snapshot: Snapshot,
    repeated: Sequence[ChangeTaskResult],
    description: str,
) -> DuplicateKeyError:
    """The error of a merge whose source matched a target row twice, showing one such row."""
    count = sum(r.repeated for r in repeated)
    at = next(r.repeated_at for r in repeated if r.repeated_at is not None)
    file, offset, position = at
    shown = ""
    split = next(
        (s for g in job.groups for s in g if s.file == file and s.blocklets[0].offset == offset),
        None,
    )
    if split is not None:
        reader = _reader(table, snapshot)
        try:
            rows = reader.read_blocklet(
                split, split.blocklets[0], snapshot.schema, None, positions=True
            )
        finally:
            reader.close()
        row = rows.filter(pc.equal(rows.column(ROW_POSITION), position)).drop_columns(
            [ROW_POSITION]
        )
        if row.num_rows:
            shown = f" (one of them: {row.to_pylist()[0]})"
    return DuplicateKeyError(
        f"{description}: {count} {'row of the table is' if count == 1 else 'rows of the table are'}"
        " each matched by more than one source row that a matched clause would update or "
        f"delete{shown}; which source row wins "
        "would be arbitrary, so nothing was committed (deduplicate the source by the merge "
        "condition's keys, or make the condition match at most one source row per table row)"
    )
