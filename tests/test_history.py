"""``Table.history()``: every commit records the operation's metrics (rows, bytes and data
files added and removed), how long it took and the writer that made it; versions written
before these were recorded (the golden tables) read with ``None`` for them."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.records import CommitRecord
from tests.compaction.lifecycle import SCHEMA, make_rows

DATA = Path(__file__).parent / "data"


def last(t: cl.Table) -> CommitRecord:
    return t.history(1)[0]


def test_appends_and_create_record_files_writer_and_duration(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA, writer_id="w-one")
    created = last(t)
    assert (created.operation, created.writer_id) == ("CREATE TABLE", "w-one")
    assert (created.files_added, created.files_removed) == (0, 0)
    assert created.duration is not None and created.duration.total_seconds() >= 0
    assert created.engine.startswith("carbonlite/")

    t.append(make_rows(range(10)))
    first = last(t)
    stream_file = next(iter(t.snapshot().segments["0"].files))
    assert stream_file.startswith("segments/0/w-one-")
    assert (first.rows, first.files_added, first.files_removed) == (10, 1, 0)
    assert first.bytes == t.snapshot().segments["0"].num_bytes
    assert first.writer_id == "w-one"
    t.append(make_rows(range(10, 15)))
    second = last(t)  # the same stream file grows: no new file
    assert (second.rows, second.files_added, second.files_removed) == (5, 0, 0)
    other = cl.open_table(tmp_path / "t", writer_id="w-two")
    other.append(make_rows(range(15, 20)))
    assert (last(other).writer_id, last(other).files_added) == ("w-two", 1)


def test_the_duration_is_the_operations(tmp_path: Path) -> None:
    """An append whose data takes 0.3 s to arrive records at least that."""
    t = cl.create_table(tmp_path / "t", SCHEMA)

    def slow() -> Iterator[pa.RecordBatch]:
        for n in range(3):
            time.sleep(0.1)
            yield from make_rows(range(n * 5, n * 5 + 5)).to_batches()

    t.append(pa.RecordBatchReader.from_batches(SCHEMA, slow()))
    record = last(t)
    assert record.rows == 15
    assert record.duration is not None and record.duration.total_seconds() >= 0.3


def test_overwrite_records_the_files_it_replaces(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA)
    t.append(make_rows(range(10)))
    t.finish_streaming()
    t.append(make_rows(range(10, 20)))
    replaced = [s for s in t.segments() if s.status in ("STREAMING", "STREAMING_FINISH")]
    t.overwrite(make_rows(range(100, 103)))
    record = last(t)
    assert record.operation == "OVERWRITE"
    assert (record.rows, record.rows_removed) == (3, 20)
    assert record.files_removed == sum(s.files for s in replaced) == 2
    assert record.bytes_removed == sum(s.bytes for s in replaced)
    assert record.files_added == 1


def test_handoff_compaction_and_clean_record_files(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA, writer_id="maint")
    for n in range(4):
        t.append(make_rows(range(n * 10, n * 10 + 10)))
        t.finish_streaming()
    finish = last(t)
    assert (finish.operation, finish.writer_id, finish.files_added) == (
        "FINISH STREAMING",
        "maint",
        0,
    )
    before = {s.id: s for s in t.segments()}
    result = t.handoff()
    handoff = last(t)
    after = {s.id: s for s in t.segments()}
    assert handoff.operation == "HANDOFF" and handoff.writer_id == "maint"
    assert handoff.files_removed == sum(before[s].files for s in result.segments_compacted)
    assert handoff.files_added == sum(after[s].files for s in result.segments_created) == 4
    assert handoff.bytes_removed == sum(before[s].bytes for s in result.segments_compacted)
    assert handoff.bytes == sum(after[s].bytes for s in result.segments_created)
    assert handoff.duration is not None
    t.compact("minor")
    minor = last(t)
    assert (minor.operation, minor.files_added, minor.files_removed) == ("COMPACT", 1, 4)
    cleaned = t.clean("0s", force=True)
    clean = last(t)
    assert clean.operation == "CLEAN"
    assert clean.files_removed == len(cleaned.files) == 8  # 4 stream files, 4 handed-off ones
    assert clean.bytes_removed == cleaned.bytes
    assert (clean.rows, clean.rows_removed, clean.data_change) == (0, 0, False)


def test_metadata_commits_record_the_writer(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA, writer_id="meta")
    t.append(make_rows(range(5)))
    t.add_columns(pa.field("extra", pa.string()))
    t.set_properties({"checkpoint_interval": "50"})
    t.unset_properties(["checkpoint_interval"])
    t.restore(1)
    records = t.history(4)
    assert [r.operation for r in records] == [
        "RESTORE",
        "UNSET PROPERTIES",
        "SET PROPERTIES",
        "ADD COLUMNS",
    ]
    for r in records:
        assert r.writer_id == "meta"
        assert r.duration is not None
    assert (records[-1].files_added, records[-1].files_removed) == (0, 0)


# golden tables written before commit metrics existed (v4 on carry them)
WITHOUT_METRICS = ["golden_v1", "golden_v2", "golden_v3"]


@pytest.mark.parametrize("golden", WITHOUT_METRICS)
def test_versions_of_older_writers_have_no_metrics(tmp_path: Path, golden: str) -> None:
    path = tmp_path / golden
    shutil.copytree(DATA / golden, path)
    t = cl.open_table(path)
    old = t.history()
    assert old and all(
        (r.files_added, r.files_removed, r.duration, r.writer_id) == (None, None, None, None)
        for r in old
    )
    assert any(r.rows for r in old)  # the metrics they did record still read
    t.append(t.to_arrow().slice(0, 1))  # a new commit on an old table records them
    assert last(t).files_added is not None and last(t).writer_id == t.writer_id
