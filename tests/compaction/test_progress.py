"""The ``progress(done, total)`` callbacks of verify, clean, handoff and compaction: bytes,
``done`` never decreasing nor passing ``total``, the last call at ``done == total``, one
call at a time, and steps finer than a segment (blocklets as they are read and written)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.compaction import CompactionTask, TaskResult, run_tasks_locally
from carbonlite.compaction.progress import ProgressCounter
from tests.compaction.lifecycle import SCHEMA, assert_rows, make_rows

SEGMENTS = 4
ROWS = 60


class Recorder:
    """A progress callback that keeps every call and fails on two calls at once."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self._busy = threading.Lock()

    def __call__(self, done: int, total: int) -> None:
        assert self._busy.acquire(blocking=False), "two progress calls at once"
        try:
            self.calls.append((done, total))
        finally:
            self._busy.release()

    def check(self, total: int) -> None:
        done = [d for d, _ in self.calls]
        totals = [t for _, t in self.calls]
        assert done == sorted(done), f"done went backwards: {done}"
        assert totals == sorted(totals), f"the total shrank: {totals}"
        assert all(0 <= d <= t for d, t in self.calls)
        assert self.calls[-1] == (total, total)


def finished_table(path: Path, segments: int = SEGMENTS, **properties: str) -> cl.Table:
    """``segments`` STREAMING_FINISH segments of ``ROWS`` rows, in blocklets of 10 rows."""
    t = cl.create_table(
        path,
        SCHEMA,
        sort_columns=["ts"],
        properties={"blocklet_max_rows": "10", "handoff_blocklet_rows": "10", **properties},
    )
    for n in range(segments):
        t.append(make_rows(range(n * ROWS, (n + 1) * ROWS)))
        t.finish_streaming()
    return t


def test_verify_counts_committed_bytes_blocklet_by_blocklet(tmp_path: Path) -> None:
    t = finished_table(tmp_path / "t")
    snap = t.snapshot()
    progress = Recorder()
    result = t.verify(progress=progress)
    assert result.ok
    progress.check(sum(f.committed_length for _, f in snap.iter_files()))
    assert len(progress.calls) >= result.blocklets_checked  # a step per blocklet at least


def test_verify_of_a_damaged_table_still_ends_at_the_total(tmp_path: Path) -> None:
    t = finished_table(tmp_path / "t")
    files = [f for _, f in t.snapshot().iter_files()]
    (tmp_path / "t" / files[0].path).unlink()
    progress = Recorder()
    result = t.verify(progress=progress)
    assert [p.message for p in result.problems] == ["the file is missing"]
    progress.check(sum(f.committed_length for f in files))


def test_handoff_counts_input_bytes_read_then_written(tmp_path: Path) -> None:
    t = finished_table(tmp_path / "t")
    inputs = sum(s.bytes for s in t.segments())
    progress = Recorder()
    result = t.handoff(progress=progress)
    assert result.bytes_read == inputs
    progress.check(2 * inputs)
    assert progress.calls[0][1] == 2 * inputs  # the whole round is known from the start
    assert len(progress.calls) > SEGMENTS * 2  # blocklets and chunks, not one per segment
    assert_rows(t.to_arrow(), range(SEGMENTS * ROWS))


def test_minor_compaction_adds_each_round_to_the_total(tmp_path: Path) -> None:
    t = finished_table(tmp_path / "t", compaction_level_threshold="2,2")
    t.handoff()
    round_one = sum(s.bytes for s in t.segments() if s.status == "SUCCESS")
    progress = Recorder()
    result = t.compact("minor", progress=progress)
    assert len(result.versions) == 2 and result.outputs == ("0.2",)
    assert progress.calls[0][1] == 2 * round_one
    progress.check(2 * result.bytes_read)
    assert result.bytes_read > round_one  # the second round read the level-1 segments
    assert result.rows == SEGMENTS * ROWS == t.count_rows()


def test_tasks_run_elsewhere_report_their_round_when_it_is_done(tmp_path: Path) -> None:
    t = finished_table(tmp_path / "t")
    ran: list[int] = []

    def elsewhere(
        tasks: Sequence[CompactionTask],
        uri: str,
        schema: pa.Schema,
        storage_options: Mapping[str, Any],
    ) -> list[TaskResult]:
        ran.append(len(tasks))
        return run_tasks_locally(tasks, uri, schema, storage_options)

    total = 2 * sum(s.bytes for s in t.segments())
    progress = Recorder()
    t.handoff(executor=elsewhere, progress=progress)
    assert ran == [SEGMENTS]
    assert progress.calls == [(0, total), (total, total)]


def test_clean_counts_the_bytes_it_deletes(tmp_path: Path) -> None:
    t = finished_table(tmp_path / "t")
    t.handoff()
    dry = Recorder()
    planned = t.clean("0s", force=True, dry_run=True, progress=dry)
    assert dry.calls == []  # a dry run deletes nothing
    progress = Recorder()
    result = t.clean("0s", force=True, progress=progress)
    assert result.files == planned.files and len(result.files) == SEGMENTS
    progress.check(result.bytes)
    assert len(progress.calls) == SEGMENTS  # one step per file deleted
    nothing = Recorder()
    assert t.clean("0s", force=True, progress=nothing).files == ()
    assert nothing.calls == []


@pytest.mark.parametrize("kind", ["handoff", "minor", "major"])
def test_nothing_to_do_calls_nothing(tmp_path: Path, kind: str) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA)
    progress = Recorder()
    assert t.compact(kind, progress=progress).versions == ()  # type: ignore[arg-type]
    assert progress.calls == []
    assert t.verify(progress=progress).files_checked == 0
    assert progress.calls == []


def test_counter_from_many_threads() -> None:
    progress = Recorder()
    counter = ProgressCounter(progress, 8 * 1000)

    def work() -> None:
        for _ in range(1000):
            counter.advance(1)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    progress.check(8000)
    assert len(progress.calls) == 8000
    counter.advance(5)  # past the total: nothing more to say
    counter.finish()
    assert len(progress.calls) == 8000
