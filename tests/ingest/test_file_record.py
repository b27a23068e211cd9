"""The record of ingested files (``carbonlite/ingest/file_record.py``) against a plain model:
the last version of every file added is held (listed, or behind the horizon), no file never
added (nor an earlier version of one replaced since) at or after the horizon is held, and the
record never keeps more than the files of the last ``max_age``; a time ahead of the clock
never moves the horizon past the clock, nor does any file past one not read yet (issue 38);
versions are told apart by ETag, else time and size; it round-trips through the table (marker
and state committed together), and a record kept before versions had sizes is read."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import carbonlite as cl
from carbonlite.errors import CorruptDataError
from carbonlite.ingest.file_record import FILE_RECORD_SCHEMA, FileRecord, FileVersion, record_name

NAMES = st.sampled_from([f"d{d}/part-{n}" for d in range(3) for n in range(8)])
VERSIONS = st.builds(FileVersion, st.integers(0, 10_000), st.integers(0, 3))
"""Versions of a file: a time and a size (a path added again with another is replaced)."""
COMMITS = st.lists(st.dictionaries(NAMES, VERSIONS, min_size=0, max_size=6), max_size=25)


@settings(max_examples=300, deadline=None)
@given(commits=COMMITS, max_age=st.integers(1, 3_000))
def test_the_record_holds_what_was_added_and_keeps_only_its_window(
    commits: list[dict[str, FileVersion]], max_age: int
) -> None:
    record = FileRecord.empty("files", "/src")
    added: dict[str, FileVersion] = {}
    earlier: dict[str, list[FileVersion]] = {}
    for n, files in enumerate(commits):
        record = record.with_files(files, max_age)
        for name, version in files.items():
            if name in added and not added[name].same(version):
                earlier.setdefault(name, []).append(added[name])
            added[name] = version
        assert record.generation == n
        newest = max((v.modified_ms for v in added.values()), default=None)
        for name, version in added.items():
            assert record.holds(name, version), (name, version, record)
            assert record.replaces(name, version) is None
        # a version replaced since is held only when it is behind the horizon
        for name, versions in earlier.items():
            for old in versions:
                if not added[name].same(old):
                    assert record.holds(name, old) == (old.modified_ms < record.horizon_ms)
                    if old.modified_ms >= record.horizon_ms:
                        assert record.replaces(name, old) == record.files.get(name)
        # the window: nothing older than the newest file minus max_age is kept
        times = [v.modified_ms for v in record.files.values()]
        if newest is not None:
            assert record.horizon_ms >= newest - max_age
            assert all(t >= newest - max_age for t in times)
        assert all(t >= record.horizon_ms for t in times)
        # a file never added is held only when it is behind the horizon
        for name in ("other/new-file", "d0/part-0"):
            if name not in added:
                assert not record.holds(name, record.horizon_ms)
                assert record.holds(name, record.horizon_ms - 1)
                assert record.behind(name, record.horizon_ms - 1)


@settings(max_examples=200, deadline=None)
@given(commits=COMMITS)
def test_the_horizon_never_moves_back(commits: list[dict[str, FileVersion]]) -> None:
    record = FileRecord.empty("files", "/src")
    for files in commits:
        before = record.horizon_ms
        record = record.with_files(files, 100)
        assert record.horizon_ms >= before


CLOCKED = st.lists(
    st.tuples(
        st.dictionaries(NAMES, st.integers(0, 100_000), max_size=4),  # path -> time
        st.integers(0, 1_000),  # how far the clock moved on since the commit before
    ),
    max_size=20,
)


@settings(max_examples=300, deadline=None)
@given(commits=CLOCKED, max_age=st.integers(1, 3_000), start=st.integers(3_000, 50_000))
def test_a_time_ahead_of_the_clock_never_moves_the_horizon_past_the_clock(
    commits: list[tuple[dict[str, int], int]], max_age: int, start: int
) -> None:
    """Files stamped anywhere, ahead of the clock too (issue 38: one file 30 days ahead made
    every later file behind the horizon): the horizon never passes the clock minus
    ``max_age``, so a file written now, or within ``max_age`` before now, is never behind
    it; and a file ahead of the clock stays recorded (held) until the clock passes it."""
    record = FileRecord.empty("files", "/src")
    now = start
    for files, tick in commits:
        now += tick
        record = record.with_files(files, max_age, now_ms=now)
        assert record.horizon_ms <= max(0, now - max_age), (record.horizon_ms, now)
        assert not record.behind("written-now", now)
        assert not record.behind("written-just-within-the-window", now - max_age)
        for name, modified in files.items():
            assert record.holds(name, modified)
            if modified > now:
                assert name in record.files


def test_one_file_in_the_future_leaves_the_files_after_it_to_be_read() -> None:
    """The issue's case: files of an hour ago, one stamped 30 days ahead, then ordinary
    files: none of those is behind the horizon (without the clock, all were)."""
    now = 1_795_000_000_000
    day = 86_400_000
    record = FileRecord.empty("files", "/src").with_files(
        {"a1": now - 3_600_000, "a2": now - 3_600_000, "future": now + 30 * day},
        7 * day,
        now_ms=now,
    )
    assert record.horizon_ms <= now - 7 * day
    for i in range(10):
        assert not record.behind(f"b{i}", now + i)
        assert not record.holds(f"b{i}", now + i)
    assert record.holds("future", now + 30 * day)


@settings(max_examples=200, deadline=None)
@given(
    commits=st.lists(st.dictionaries(NAMES, st.integers(0, 10_000), max_size=4), max_size=15),
    unread=st.integers(0, 10_000),
    max_age=st.integers(1, 3_000),
)
def test_the_horizon_never_passes_a_file_not_read_yet(
    commits: list[dict[str, int]], unread: int, max_age: int
) -> None:
    """A file listed and not read (left for a later listing, or for a later commit) is never
    put behind the horizon by a commit of newer files."""
    record = FileRecord.empty("files", "/src")
    for files in commits:
        floor = record.horizon_ms
        record = record.with_files(files, max_age, unread_ms=max(unread, floor))
        assert record.horizon_ms <= max(unread, floor)
        if unread >= floor:
            assert not record.behind("not-read-yet", unread)


@pytest.mark.parametrize(
    ("recorded", "listed", "same"),
    [
        (FileVersion(5, 10), FileVersion(5, 10), True),
        (FileVersion(5, 10), FileVersion(6, 10), False),  # touched, or replaced: a new file
        (FileVersion(5, 10), FileVersion(5, 11), False),  # replaced within the same ms
        (FileVersion(5, None), FileVersion(5, 11), True),  # a record kept before sizes were
        (FileVersion(5, 10, '"a"'), FileVersion(9, 10, '"a"'), True),  # the same bytes again
        (FileVersion(5, 10, '"a"'), FileVersion(5, 10, '"b"'), False),  # the same second, size
        (FileVersion(5, 10, None), FileVersion(5, 10, '"b"'), True),  # no ETag recorded
    ],
    ids=["same", "time", "size", "no-size-recorded", "etag-same", "etag-other", "no-etag"],
)
def test_versions_are_told_apart_by_etag_else_time_and_size(
    recorded: FileVersion, listed: FileVersion, same: bool
) -> None:
    assert recorded.same(listed) is same
    record = FileRecord.empty("files", "/src").with_files({"f": recorded}, 10**9)
    assert record.holds("f", listed) is same
    assert (record.replaces("f", listed) is None) is same


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


def test_a_record_kept_before_versions_had_sizes_is_read(tmp_path: Path) -> None:
    """A state table of two columns (file, modified_ms), as kept before sizes and ETags: its
    files are held by time alone (an upgrade reads nothing again); the next commit writes the
    record with every column."""
    table = cl.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    record = FileRecord.empty("files", "/src")
    earlier = pa.schema([FILE_RECORD_SCHEMA.field(0), FILE_RECORD_SCHEMA.field(1)])
    state = pa.table({"file": ["a", "b"], "modified_ms": [5, 7]}, schema=earlier)
    state = state.replace_schema_metadata({"source": "/src", "generation": "0", "horizon_ms": "0"})
    table.append(pa.table({"id": [1]}), markers=record.marker(), state={record.name: state})
    read = FileRecord.of("files", "/src", table.refresh().snapshot(), table.storage, table.root)
    assert read.generation == 0
    assert read.files == {"a": FileVersion(5), "b": FileVersion(7)}
    assert read.holds("a", FileVersion(5, 123)) and read.holds("b", FileVersion(7, 9, '"e"'))
    assert not read.holds("a", FileVersion(6, 123))
    after = read.with_files({"c": FileVersion(9, 4)}, 1_000)
    table.append(pa.table({"id": [2]}), markers=read.marker(), state={read.name: after.to_arrow()})
    again = FileRecord.of("files", "/src", table.refresh().snapshot(), table.storage, table.root)
    assert again == after
    assert table.state(read.name).schema.remove_metadata() == FILE_RECORD_SCHEMA
