"""A stream into a partitioned table appends to its task's own file in each partition's
STREAMING segment, batch after batch (writer/partition_files.py, ``reuse``), instead of adding
one small file per partition per batch; and the orders that could lose a row with files that
outlive a batch: a zombie attempt of an earlier batch, the segment closed or handed off between
the plan and the commit, recover while a batch is in flight, an aborted batch."""

from __future__ import annotations

import os
from collections.abc import Callable

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.driver import commit_parts, plan_write
from carbonlite.errors import CommitConflictError
from carbonlite.metadata import TxnMarker
from carbonlite.writer.distributed import abort_parts, lease_plan, write_partitioned_part
from carbonlite.writer.partition_files import PartitionFile
from carbonlite.writer.write_plan import WritePlan

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])
PARTS = 3


def _rows(batch: int, n: int = 12) -> list[pa.RecordBatch]:
    ids = list(range(batch * n, (batch + 1) * n))
    return [pa.record_batch({"id": ids, "part": [f"p{i % PARTS}" for i in ids]}, SCHEMA)]


def _table(tmp_path, **properties: str) -> cl.Table:
    return cl.create_table(
        tmp_path / "t", SCHEMA, partition_by=["part"], properties=properties or None
    )


def _write(
    plan: WritePlan, batch: int, *, task: int = 0, rows: int | None = None
) -> list[PartitionFile]:
    return write_partitioned_part(
        plan,
        _rows(batch if rows is None else rows),
        tag="q",
        partition=task,
        attempt=0,
        app_id="q",
        batch_id=batch,
        reuse=True,
    )


def _commit(plan: WritePlan, files: list[PartitionFile], batch: int) -> int | None:
    return commit_parts(
        plan,
        [None],
        txn=TxnMarker("q", batch),
        operation="STREAMING UPDATE",
        parameters={},
        writer_id="q-driver",
        partitioned=files,
    )


def _batch(t: cl.Table, batch: int, *, tasks: int = 1) -> None:
    plan = plan_write(t, overwrite=False)
    files = [
        f
        for task in range(tasks)
        for f in _write(plan, batch, task=task, rows=batch * tasks + task)
    ]
    assert _commit(plan, files, batch) is not None


def _ids(t: cl.Table) -> list[int]:
    return sorted(t.refresh().to_arrow().column("id").to_pylist())


def _files_per_partition(t: cl.Table) -> dict[tuple[object, ...], int]:
    snap = t.refresh().snapshot()
    return {s.partition: len(s.files) for s in snap.live_segments() if s.partition is not None}


@pytest.mark.parametrize("tasks", [1, 2])
def test_a_stream_adds_no_file_per_partition_and_batch(tmp_path, tasks: int) -> None:
    t = _table(tmp_path)
    for batch in range(20):
        _batch(t, batch, tasks=tasks)
    assert _ids(t) == list(range(20 * tasks * 12))
    # the first batch's file of each task (named after its plan, before the partition had a
    # segment), then each task's own file in the segment: not one file per batch
    assert _files_per_partition(t) == {(f"p{i}",): 2 * tasks for i in range(PARTS)}
    snap = t.snapshot()
    for seg in snap.live_segments():
        grown = [f for p, f in seg.files.items() if p.rsplit("/", 1)[1].startswith("q-p")]
        assert len(grown) == tasks  # in the segment's own directory, holding 19 batches
        assert all(f.path.startswith(f"segments/{seg.segment_id}/") for f in grown)
        assert all(len(f.blocklets) == 19 for f in grown)
        for f in grown:
            assert os.path.getsize(tmp_path / "t" / f.path) == f.committed_length
    assert t.verify().ok


def test_each_commit_appends_where_the_last_one_ended(tmp_path) -> None:
    t = _table(tmp_path)
    _batch(t, 0)
    ends: dict[str, int] = {}
    for batch in range(1, 4):
        plan = plan_write(t, overwrite=False)
        files = _write(plan, batch)
        for f in files:
            assert f.appended.start == ends.get(f.appended.file, 0)
            ends[f.appended.file] = f.appended.end
        _commit(plan, files, batch)
    assert len(ends) == PARTS


def test_a_zombie_of_an_earlier_batch_cannot_cut_committed_bytes(tmp_path) -> None:
    t = _table(tmp_path)
    _batch(t, 0)
    stale = plan_write(t, overwrite=False)  # batch 1, whose attempt will also run late
    _commit(stale, _write(stale, 1), 1)
    _batch(t, 2)  # appends to the same files
    with pytest.raises(CommitConflictError, match="stale"):
        _write(stale, 1)
    assert _ids(t) == list(range(36))
    assert t.verify().ok


def test_a_replayed_batch_writes_nothing(tmp_path) -> None:
    t = _table(tmp_path)
    _batch(t, 0)
    _batch(t, 1)
    again = plan_write(t, overwrite=False, txn=TxnMarker("q", 1))
    assert _write(again, 1) == []
    assert _commit(again, [], 1) is None
    assert _ids(t) == list(range(24))


def _close(t: cl.Table) -> None:
    t.finish_streaming()


def _handoff(t: cl.Table) -> None:
    t.finish_streaming()
    t.handoff()


@pytest.mark.parametrize("closing", [_close, _handoff], ids=["finish", "handoff"])
@pytest.mark.parametrize("when", ["before the write", "before the commit"])
def test_a_segment_closed_under_a_batch_loses_no_row(
    tmp_path, closing: Callable[[cl.Table], None], when: str
) -> None:
    t = _table(tmp_path)
    _batch(t, 0)
    _batch(t, 1)
    plan = plan_write(t, overwrite=False)  # finds each partition's STREAMING segment
    planned = {sid for sid, _ in plan.partition_streams.values()}
    if when == "before the write":
        closing(cl.open_table(t.path))
    files = _write(plan, 2)
    if when == "before the commit":
        closing(cl.open_table(t.path))
    assert _commit(plan, files, 2) is not None  # the blocklets move to the new segments
    assert _ids(t) == list(range(36))
    snap = t.refresh().snapshot()
    streaming = {s.segment_id for s in snap.live_segments() if s.status == "STREAMING"}
    assert streaming and not streaming & planned
    _batch(t, 3)  # and the stream goes on in the new segments
    assert _ids(t) == list(range(48))
    assert t.verify().ok


def test_recover_leaves_a_batch_in_flight_alone(tmp_path) -> None:
    t = _table(tmp_path)
    _batch(t, 0)
    _batch(t, 1)
    plan = plan_write(t, overwrite=False)
    lease = lease_plan(plan, "test stream")
    assert lease is not None
    files = _write(plan, 2)
    result = cl.open_table(t.path).recover(min_age=0)
    assert not result.truncated and not result.orphans
    with lease:
        _commit(plan, files, 2)
    assert _ids(t) == list(range(36))
    assert t.verify().ok


def test_an_aborted_batch_is_cut_back_and_the_next_one_goes_on(tmp_path) -> None:
    t = _table(tmp_path)
    _batch(t, 0)
    _batch(t, 1)
    plan = plan_write(t, overwrite=False)
    files = _write(plan, 2)
    assert all(f.appended.start > 0 for f in files)
    abort_parts(plan, [f.appended for f in files])  # the sink's abort
    for f in files:
        assert os.path.getsize(tmp_path / "t" / f.appended.file) == f.appended.start
    _batch(t, 2)
    assert _ids(t) == list(range(36))
    assert t.verify().ok


def test_an_overwrite_writes_new_files(tmp_path) -> None:
    t = _table(tmp_path)
    _batch(t, 0)
    _batch(t, 1)
    plan = plan_write(t, overwrite=True)
    assert plan.partition_streams == {}
    files = _write(plan, 2)
    assert all(f.appended.start == 0 for f in files)
    commit_parts(
        plan,
        [None],
        txn=None,
        operation="WRITE",
        parameters={},
        writer_id="d",
        partitioned=files,
    )
    assert _ids(t) == list(range(24, 36))
