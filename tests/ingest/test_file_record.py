"""The record of ingested files (``carbonlite/ingest/file_record.py``) against a plain model:
every file ever added is held (listed, or behind the horizon), no file never added and at or
after the horizon is held, and the record never keeps more than the files of the last
``max_age``; it round-trips through the table (marker and state committed together)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import carbonlite as cl
from carbonlite.errors import CorruptDataError
from carbonlite.ingest.file_record import FileRecord, record_name

NAMES = st.sampled_from([f"d{d}/part-{n}" for d in range(3) for n in range(8)])
COMMITS = st.lists(
    st.dictionaries(NAMES, st.integers(0, 10_000), min_size=0, max_size=6), max_size=25
)


@settings(max_examples=300, deadline=None)
@given(commits=COMMITS, max_age=st.integers(1, 3_000))
def test_the_record_holds_what_was_added_and_keeps_only_its_window(
    commits: list[dict[str, int]], max_age: int
) -> None:
    record = FileRecord.empty("files", "/src")
    added: dict[str, int] = {}
    for n, files in enumerate(commits):
        record = record.with_files(files, max_age)
        added.update(files)
        assert record.generation == n
        newest = max(added.values(), default=None)
        for name, modified in added.items():
            assert record.holds(name, modified), (name, modified, record)
        # the window: nothing older than the newest file minus max_age is kept
        if newest is not None:
            assert record.horizon_ms >= newest - max_age
            assert all(t >= newest - max_age for t in record.files.values())
        assert all(t >= record.horizon_ms for t in record.files.values())
        # a file never added is held only when it is behind the horizon
        for name in ("other/new-file", "d0/part-0"):
            if name not in added:
                assert not record.holds(name, record.horizon_ms)
                assert record.holds(name, record.horizon_ms - 1)
                assert record.behind(name, record.horizon_ms - 1)


@settings(max_examples=200, deadline=None)
@given(commits=COMMITS)
def test_the_horizon_never_moves_back(commits: list[dict[str, int]]) -> None:
    record = FileRecord.empty("files", "/src")
    for files in commits:
        before = record.horizon_ms
        record = record.with_files(files, 100)
        assert record.horizon_ms >= before


def test_a_long_uri_names_its_record_by_hash() -> None:
    short = record_name("files", "/data/out")
    assert short == "files:/data/out"
    long = record_name("files", "s3://bucket/" + "x" * 300)
    assert long.startswith("files:sha256:") and len(long) <= 200
    assert long != record_name("files-bad", "s3://bucket/" + "x" * 300)


@settings(max_examples=15, deadline=None)
@given(commits=st.lists(st.dictionaries(NAMES, st.integers(0, 10_000), max_size=4), max_size=5))
def test_the_record_round_trips_through_the_table(
    tmp_path_factory: pytest.TempPathFactory, commits: list[dict[str, int]]
) -> None:
    root = tmp_path_factory.mktemp("record")
    table = cl.create_table(str(root / "t"), pa.schema([("id", pa.int64())]))
    record = FileRecord.of("files", "/src", table.snapshot(), table.storage, table.root)
    assert record.generation is None and not record.files
    for files in commits:
        after = record.with_files(files, 5_000)
        table.append(
            pa.table({"id": [1]}), markers=record.marker(), state={record.name: after.to_arrow()}
        )
        table.refresh()
        record = FileRecord.of("files", "/src", table.snapshot(), table.storage, table.root)
        assert record == after


def test_a_state_that_is_not_its_markers_generation_is_corrupt(tmp_path: Path) -> None:
    table = cl.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    record = FileRecord.empty("files", "/src")
    stale = record.with_files({"a": 1}, 10)
    table.append(
        pa.table({"id": [1]}), markers=record.marker(), state={record.name: stale.to_arrow()}
    )
    newer = stale.with_files({"b": 2}, 10)
    # a state table of the wrong generation committed with the marker's next move
    table.append(
        pa.table({"id": [2]}), markers=stale.marker(), state={record.name: stale.to_arrow()}
    )
    assert newer.generation == 1
    with pytest.raises(CorruptDataError, match="generation 1"):
        FileRecord.of("files", "/src", table.refresh().snapshot(), table.storage, table.root)
