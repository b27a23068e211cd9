"""The core of a delete, update or merge run by many workers (carbonlite/driver_changes.py,
carbonlite/writer/distributed_changes.py), driven here without an engine: the "tasks" are
calls of ``read_located`` and ``write_changes`` made by the runner the driver is given, so
a task can be run twice (a retried or speculative attempt) and only one result kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.driver_changes import run_distributed_change
from carbonlite.writer.distributed_changes import (
    ACTION_COLUMN,
    ACTION_DELETE,
    ACTION_INSERT,
    ACTION_UPDATE,
    BLOCKLET_COLUMN,
    FILE_COLUMN,
    POSITION_COLUMN,
    ChangeJob,
    ChangeTaskResult,
    read_located,
    write_changes,
)

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


@pytest.fixture
def table(tmp_path: Path) -> cl.Table:
    t = cl.create_table(tmp_path / "t", SCHEMA, properties={"blocklet_max_rows": "10"})
    t.append(pa.table({"id": list(range(50)), "v": list(range(50))}, schema=SCHEMA))
    return t


def changed_rows(job: ChangeJob) -> pa.RecordBatch:
    """What an engine would decide for 'delete id < 5, set v = -id where 40 <= id, insert
    id 100': the located rows with their action, the table's columns where rows are
    written."""
    located = pa.Table.from_batches(
        [b for g in range(len(job.groups)) for b in read_located(job, g)]
    ).combine_chunks()
    ids = located.column("id").to_numpy()
    action = np.where(ids < 5, ACTION_DELETE, np.where(ids >= 40, ACTION_UPDATE, 0))
    keep = action > 0
    rows = located.filter(pa.array(keep))
    new_v = np.where(rows.column("id").to_numpy() >= 40, -rows.column("id").to_numpy(), 0)
    changed = pa.table(
        {
            FILE_COLUMN: rows.column(FILE_COLUMN),
            BLOCKLET_COLUMN: rows.column(BLOCKLET_COLUMN),
            POSITION_COLUMN: rows.column(POSITION_COLUMN),
            ACTION_COLUMN: pa.array(action[keep], pa.int32()),
            "id": rows.column("id"),
            "v": pa.array(new_v, pa.int64()),
        }
    )
    insert = pa.table(
        {
            FILE_COLUMN: pa.array([None], pa.int32()),
            BLOCKLET_COLUMN: pa.array([None], pa.int64()),
            POSITION_COLUMN: pa.array([None], pa.int64()),
            ACTION_COLUMN: pa.array([ACTION_INSERT], pa.int32()),
            "id": [100],
            "v": [100],
        }
    )
    return pa.concat_tables([changed, insert.cast(changed.schema)]).combine_chunks().to_batches()[0]


def test_a_retried_attempts_files_are_never_committed_and_recover_removes_them(
    table: cl.Table, tmp_path: Path
) -> None:
    """Attempt 0 of the only writing task writes its part and its vectors and is then given
    up (a failure after writing, or the slower of two speculative attempts); attempt 1 runs
    again and only its result reaches the driver. The table shows the change once, nothing of
    attempt 0 is referenced, and ``recover`` removes attempt 0's files."""
    first: list[ChangeTaskResult] = []

    def run(job: ChangeJob) -> list[ChangeTaskResult]:
        rows = changed_rows(job)
        first.append(write_changes(job, [rows], task=0, attempt=0))  # lost
        return [write_changes(job, [rows], task=0, attempt=1)]

    result = run_distributed_change(
        table, run, operation="MERGE", parameters={}, description="test", parallelism=2
    )
    assert (result.rows_deleted, result.rows_updated, result.rows_inserted) == (5, 10, 1)
    assert result.version == 2
    got = {r["id"]: r["v"] for r in cl.open_table(table.path).to_arrow().to_pylist()}
    expected = {i: (-i if i >= 40 else i) for i in range(5, 50)} | {100: 100}
    assert got == expected
    lost = first[0]
    lost_files = {d.dv_file for d in lost.deletions} | {a.file for a in lost.appends}
    assert lost_files and all("-a0" in f for f in lost_files)
    snapshot = cl.open_table(table.path).snapshot()
    referenced = {f.path for s in snapshot.segments.values() for f in s.files.values()} | {
        ref.path
        for s in snapshot.segments.values()
        for f in s.files.values()
        for ref in f.deletions.values()
    }
    assert not lost_files & referenced
    assert all((tmp_path / "t" / f).exists() for f in lost_files)
    removed = cl.open_table(table.path).recover(min_age=0)
    assert lost_files <= set(removed.orphans)
    assert not any((tmp_path / "t" / f).exists() for f in lost_files)
    again = {r["id"]: r["v"] for r in cl.open_table(table.path).to_arrow().to_pylist()}
    assert again == expected


def test_a_change_that_writes_nothing_commits_nothing(table: cl.Table) -> None:
    result = run_distributed_change(
        table,
        lambda job: [write_changes(job, [], task=0, attempt=0)],
        operation="DELETE",
        parameters={},
        description="test",
        parallelism=2,
    )
    assert result.version is None and cl.open_table(table.path).version == 1
    assert cl.open_table(table.path).count_rows() == 50
    assert cl.open_table(table.path).to_arrow(filter=pc.field("id") < 5).num_rows == 5
