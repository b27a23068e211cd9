"""Appends: what data is accepted, how it becomes blocklets, and how stream files grow and roll."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from tests.support.tables import EVENTS, events, rows


def log_version(path: Path, version: int) -> list[dict]:
    text = (path / "_carbonlite" / "log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.split("\n") if line]


def blocklet_rows(t: cl.Table) -> list[int]:
    return [b.num_rows for split in t.plan_splits().splits for b in split.blocklets]


def data_files(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in (path / "segments").rglob("*") if p.is_file())


# --- what append accepts -------------------------------------------------------------------------


class ArrowStream:
    """Any object that speaks the Arrow PyCapsule stream protocol (polars, duckdb...)."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def __arrow_c_stream__(self, requested_schema=None):
        return self._table.__arrow_c_stream__(requested_schema)


def _generator(table: pa.Table) -> Iterator[pa.RecordBatch]:
    yield from table.to_batches(max_chunksize=2)


@pytest.mark.parametrize(
    "kind", ["table", "record batch", "reader", "generator", "list of tables", "c stream"]
)
def test_every_kind_of_data_appends_the_same_rows(mem_uri: str, kind: str) -> None:
    data = events(0, 9)
    given = {
        "table": lambda: data,
        "record batch": lambda: data.combine_chunks().to_batches()[0],
        "reader": lambda: pa.RecordBatchReader.from_batches(
            EVENTS, data.to_batches(max_chunksize=4)
        ),
        "generator": lambda: _generator(data),
        "list of tables": lambda: [data.slice(0, 4), data.slice(4)],
        "c stream": lambda: ArrowStream(data),
    }[kind]()
    t = cl.create_table(mem_uri, EVENTS)
    result = t.append(given)
    assert (result.version, result.rows, result.skipped) == (1, 9, False)
    assert rows(cl.open_table(mem_uri).to_arrow()) == rows(data)


@pytest.mark.parametrize("bad", [{"id": [1]}, [{"id": 1}], "id,name\n1,a", 42])
def test_data_of_the_wrong_kind_is_refused(mem_uri: str, bad) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    with pytest.raises(cl.InvalidOptionError, match="RecordBatch"):
        t.append(bad)
    assert t.version == 0 and cl.open_table(mem_uri).version == 0


@pytest.mark.parametrize(
    "empty",
    [
        "empty table",
        "empty batch",
        "no batches",
        "reader of nothing",
        "empty batches",
    ],
)
def test_empty_appends_commit_nothing(tmp_path: Path, empty: str) -> None:
    data = {
        "empty table": EVENTS.empty_table(),
        "empty batch": pa.RecordBatch.from_pylist([], schema=EVENTS),
        "no batches": [],
        "reader of nothing": pa.RecordBatchReader.from_batches(EVENTS, []),
        "empty batches": [pa.RecordBatch.from_pylist([], schema=EVENTS)] * 3,
    }[empty]
    path = tmp_path / "t"
    t = cl.create_table(path, EVENTS)
    result = t.append(data)
    assert (result.version, result.rows, result.skipped) == (None, 0, False)
    assert t.version == 0 and cl.open_table(path).version == 0
    assert t.segments() == []
    assert not (path / "segments").exists() or data_files(path) == []


def test_empty_append_with_a_transaction_records_only_the_transaction(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    result = t.append(EVENTS.empty_table(), txn=("app", 3))
    assert (result.version, result.rows, result.skipped) == (1, 0, False)
    assert t.transaction_version("app") == 3
    assert t.segments() == [] and t.count_rows() == 0
    (record, _) = t.history()
    assert (record.operation, record.rows, record.data_change) == ("APPEND", 0, True)
    assert t.append(events(0, 2), txn=("app", 3)).skipped  # batch 3 is done, empty or not


# --- blocklets -----------------------------------------------------------------------------------


def test_small_batches_are_combined_into_blocklets(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS, properties={"blocklet_max_rows": "50"})
    data = events(0, 300)
    t.append(data.to_batches(max_chunksize=3))  # 100 batches of 3 rows
    sizes = blocklet_rows(t)
    assert sum(sizes) == 300
    assert len(sizes) <= 7  # runs of 16 batches (48 rows) each: never 100 tiny blocklets
    assert all(n <= 50 for n in sizes)
    assert all(n >= 45 for n in sizes[:-1])
    assert rows(t.to_arrow()) == rows(data)
    plan = t.plan_splits()
    assert plan.blocklets_total == plan.blocklets_selected == len(sizes)


def test_large_batches_are_cut_into_blocklets(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS, properties={"blocklet_max_rows": "50"})
    t.append(events(0, 120))
    assert blocklet_rows(t) == [50, 50, 20]
    t.append([events(120, 10), events(130, 45), events(175, 5)])  # 10+45 > 50: two runs
    assert blocklet_rows(t)[3:] == [10, 50]
    assert rows(t.to_arrow()) == rows(events(0, 180))


def test_blocklet_max_bytes_cuts_wide_rows(mem_uri: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("blob", pa.string())])
    t = cl.create_table(mem_uri, schema, properties={"blocklet_max_bytes": "4kb"})
    data = pa.table({"id": range(200), "blob": ["x" * 200] * 200}, schema=schema)
    t.append(data)
    sizes = blocklet_rows(t)
    assert sum(sizes) == 200
    assert max(sizes) <= 4096 // 200 + 1
    assert len(sizes) >= 200 * 200 // 4096
    assert rows(t.to_arrow()) == rows(data)


# --- stream files --------------------------------------------------------------------------------


def test_one_writer_appends_to_one_growing_file(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = cl.create_table(path, EVENTS, writer_id="w1")
    lengths = []
    for n in range(25):
        t.append(events(10 * n, 3))
        (segment,) = t.segments()
        assert segment.files == 1
        lengths.append(segment.bytes)
        assert (path / "segments" / "0" / "w1-0.cblt").stat().st_size == segment.bytes
    assert lengths == sorted(set(lengths))  # strictly growing
    assert data_files(path) == ["segments/0/w1-0.cblt"]
    previous_end = 0
    for version in range(1, 26):
        (append,) = [
            a["appendBlocklets"] for a in log_version(path, version) if "appendBlocklets" in a
        ]
        assert append["file"] == "segments/0/w1-0.cblt"
        assert append["start"] == previous_end or (version == 1 and append["start"] == 0)
        previous_end = append["end"]
    assert previous_end == lengths[-1]
    assert rows(cl.open_table(path).to_arrow()) == rows(
        pa.concat_tables([events(10 * n, 3) for n in range(25)])
    )


def test_a_new_object_with_the_same_writer_id_continues_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t"
    cl.create_table(path, EVENTS, writer_id="w1").append(events(0, 2))
    size = (path / "segments" / "0" / "w1-0.cblt").stat().st_size
    again = cl.open_table(path, writer_id="w1")
    assert again.writer_id == "w1"
    again.append(events(2, 2))
    assert data_files(path) == ["segments/0/w1-0.cblt"]
    assert (path / "segments" / "0" / "w1-0.cblt").stat().st_size > size
    other = cl.open_table(path, writer_id="w2")  # another writer gets a file of its own
    other.append(events(4, 2))
    again.append(events(6, 2))  # w1 picks up w2's commit, then appends to its own file
    assert data_files(path) == ["segments/0/w1-0.cblt", "segments/0/w2-0.cblt"]
    (segment,) = cl.open_table(path).segments()
    assert (segment.files, segment.rows) == (2, 8)
    got = [r["id"] for r in rows(cl.open_table(path).to_arrow(columns=["id"]))]
    assert got == [0, 1, 2, 3, 6, 7, 4, 5]  # file order within the segment


def test_uncommitted_tail_is_invisible_and_cut_by_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = cl.create_table(path, EVENTS, writer_id="w1")
    t.append(events(0, 3))
    file = path / "segments" / "0" / "w1-0.cblt"
    committed = file.stat().st_size
    with file.open("ab") as f:  # what a writer that crashed before committing leaves behind
        f.write(b"\x00partial blocklet of a crashed writer" * 10)
    assert rows(cl.open_table(path).to_arrow()) == rows(events(0, 3))
    cl.open_table(path, writer_id="w1").append(events(3, 2))
    fresh = cl.open_table(path)
    (segment,) = fresh.segments()
    assert file.stat().st_size == segment.bytes > committed
    assert rows(fresh.to_arrow()) == rows(events(0, 5))


def test_streaming_segment_rolls_over_at_the_size_limit(mem_uri: str) -> None:
    limit = 4096
    t = cl.create_table(
        mem_uri, EVENTS, properties={"streaming_segment_max_bytes": "4kb"}, writer_id="w"
    )
    appended = []
    for n in range(30):
        appended.append(events(10 * n, 10))
        t.append(appended[-1])
        segments = t.segments()
        assert [s.status for s in segments[:-1]] == ["STREAMING_FINISH"] * (len(segments) - 1)
        last = segments[-1]
        assert last.status == ("STREAMING_FINISH" if last.bytes >= limit else "STREAMING")
    segments = t.segments()
    assert len(segments) >= 3
    assert [s.id for s in segments] == [str(i) for i in range(len(segments))]
    for s in segments:
        assert s.files == 1
        assert (s.bytes >= limit) == (s.status == "STREAMING_FINISH")
    for before, after in itertools.pairwise(segments):  # the next append opens the next segment
        assert after.created_version > before.created_version
        assert after.created_time >= before.status_time
    finished = [s for s in segments if s.status == "STREAMING_FINISH"]
    assert all(s.bytes < limit + 2048 for s in finished)  # rolled at the first append past it
    assert sum(s.rows for s in segments) == 300 == t.count_rows()
    assert rows(cl.open_table(mem_uri).to_arrow()) == rows(pa.concat_tables(appended))


def test_roll_over_happens_in_the_commit_that_crosses_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = cl.create_table(path, EVENTS, properties={"streaming_segment_max_bytes": "2kb"})
    version = 0
    while len(t.segments()) < 2:
        version = t.append(events(version * 5, 5)).version
    first, second = t.segments()
    assert first.status == "STREAMING_FINISH" and second.status == "STREAMING"
    crossing = [a for a in log_version(path, version - 1) if "setSegmentStatus" in a]
    assert crossing == [{"setSegmentStatus": {"segment_id": "0", "status": "STREAMING_FINISH"}}]
    assert second.created_version == version
    assert [next(iter(a)) for a in log_version(path, version)][:2] == [
        "addSegment",
        "appendBlocklets",
    ]


def test_two_table_objects_interleave_without_losing_commits(mem_uri: str) -> None:
    a = cl.create_table(mem_uri, EVENTS, writer_id="a")
    b = cl.open_table(mem_uri, writer_id="b")
    for n in range(6):
        (a if n % 2 == 0 else b).append(events(10 * n, 2))
    fresh = cl.open_table(mem_uri)
    assert fresh.version == 6
    ids = sorted(r["id"] for r in rows(fresh.to_arrow(columns=["id"])))
    assert ids == sorted(i for n in range(6) for i in (10 * n, 10 * n + 1))
    assert [h.parameters["writer_id"] for h in fresh.history()[:-1]] == ["b", "a"] * 3
