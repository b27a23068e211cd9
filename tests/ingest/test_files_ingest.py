"""The file ingester (issue 28) on a local directory: every format, every row once; files
that are not final never read; commits bounded by ``max_batch_rows`` at file boundaries;
rows conformed to the table as appends are; files that grow or go away between listing and
reading left for later; a running ingester stopped from another thread; the bounded record
of ingested files (``files:<source>``) and files too old for it."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import carbonlite as cl
from carbonlite.errors import DataSourceError, SchemaMismatchError
from carbonlite.ingest import FileIngester, FileIngestResult
from carbonlite.seams import listening
from tests.support.file_ingest_data import (
    BASE_MTIME,
    KINDS,
    SCHEMA,
    WITH_PATH,
    encode,
    format_of,
    ids,
    record,
    rows,
    rows_per_file,
    write,
)


def make(tmp_path: Path, schema: pa.Schema = SCHEMA, **kwargs: object) -> cl.Table:
    return cl.create_table(tmp_path / "t", schema, **kwargs)  # type: ignore[arg-type]


def ingest(table: cl.Table, source: Path, **kwargs: object) -> FileIngestResult:
    return FileIngester(table, str(source), **kwargs).run(stop_at_end=True)  # type: ignore[arg-type]


def wait_for(what: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "not within the deadline"
        time.sleep(0.02)


# --- formats and layouts ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_each_format_every_row_once(tmp_path: Path, source: Path, kind: str) -> None:
    table = make(tmp_path)
    for i in range(4):
        write(
            source,
            f"part-{i}",
            encode(kind, rows(range(i * 100, i * 100 + 37))),
            mtime=BASE_MTIME + i,
        )
    result = ingest(table, source, format=format_of(kind))
    expected = sorted(i * 100 + j for i in range(4) for j in range(37))
    assert ids(table) == expected
    assert (result.files, result.rows, result.commits, result.bad_files) == (4, 148, 1, 0)
    assert result.pending == 0
    names = table.to_arrow()
    assert dict(zip(names["id"].to_pylist(), names["name"].to_pylist(), strict=True))[136] == "n136"
    again = ingest(table, source, format=format_of(kind))
    assert (again.files, again.rows, again.commits) == (0, 0, 0)
    assert ids(table) == expected and table.version == 1


def test_flink_bucket_directories(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path, WITH_PATH)
    written = {}
    for hour in range(3):
        for n in range(2):
            rel = f"2026-11-26--1{hour}/part-8f1c2a3b-{n}"
            write(
                source,
                rel,
                encode("parquet", rows(range(hour * 10 + n * 5, hour * 10 + n * 5 + 5))),
            )
            written[rel] = 5
    ingest(table, source)
    assert rows_per_file(table) == written
    assert ids(table) == list(range(30))


NOT_FINAL = [
    ".part-8f1c-0.inprogress.1d2e",
    "2026-11-26--10/.part-8f1c-1.inprogress.9a9a",
    "_temporary/0/task_0001/part-0.parquet",
    "_SUCCESS",
    ".part-0.parquet.crc",
    "2026-11-26--10/.part-8f1c-0.crc",
    "FlumeData.1.tmp",
    "x._COPYING_",
    ".staging/part-0.parquet",
    "a/_temporary/part-1.parquet",
    "part-9.inprogress",
]


def test_files_not_final_are_never_read(tmp_path: Path, source: Path) -> None:
    """Each of them holds bytes that are no parquet file: reading one would stop the run."""
    table = make(tmp_path, WITH_PATH)
    for rel in NOT_FINAL:
        write(source, rel, b"not parquet at all " + rel.encode())
    write(source, "2026-11-26--10/part-8f1c-0", encode("parquet", rows(range(3))))
    write(source, "part-1.parquet", encode("parquet", rows(range(3, 6))))
    result = ingest(table, source)
    assert rows_per_file(table) == {"2026-11-26--10/part-8f1c-0": 3, "part-1.parquet": 3}
    assert (result.files, result.bad_files, result.pending) == (2, 0, 0)
    uri = FileIngester(table, str(source)).source.uri
    assert sorted(record(table, uri)) == ["2026-11-26--10/part-8f1c-0", "part-1.parquet"]


def test_glob_picks_files(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path, WITH_PATH)
    write(source, "a/x.parquet", encode("parquet", rows(range(2))))
    write(source, "b/y.parquet", encode("parquet", rows(range(2, 4))))
    write(source, "a/notes.txt", b"not parquet")
    result = ingest(table, source, glob="a/*.parquet")
    assert rows_per_file(table) == {"a/x.parquet": 2}
    assert result.files == 1
    ingest(table, source, glob="*.parquet")  # fnmatch: '*' crosses '/'
    assert rows_per_file(table) == {"a/x.parquet": 2, "b/y.parquet": 2}


def test_new_files_after_a_run_are_ingested_by_the_next(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path, WITH_PATH)
    write(source, "p0", encode("parquet", rows(range(5))), mtime=BASE_MTIME)
    assert ingest(table, source).files == 1
    write(source, "p1", encode("parquet", rows(range(5, 9))), mtime=BASE_MTIME + 1)
    write(source, "sub/p2", encode("parquet", rows(range(9, 10))), mtime=BASE_MTIME + 2)
    result = ingest(table, source)
    assert (result.files, result.rows, result.commits) == (2, 5, 1)
    assert rows_per_file(table) == {"p0": 5, "p1": 4, "sub/p2": 1}
    assert table.version == 2


# --- commits --------------------------------------------------------------------------------


def test_max_batch_rows_splits_commits_at_file_boundaries(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path, WITH_PATH)
    sizes = [10, 10, 10, 10, 10, 40, 3]
    n = 0
    for i, size in enumerate(sizes):
        write(source, f"f{i}", encode("parquet", rows(range(n, n + size))), mtime=BASE_MTIME + i)
        n += size
    result = ingest(table, source, max_batch_rows=25)
    # files are taken until their rows reach 25: [f0 f1 f2] [f3 f4 f5] [f6]
    assert result.commits == 3 and result.files == 7 and result.rows == n
    assert [h.rows for h in reversed(table.history()) if h.operation == "APPEND"] == [30, 60, 3]
    seen: dict[str, int] = {}
    for version in range(1, table.version + 1):
        per_file = rows_per_file(table, version)
        for f, count in per_file.items():
            assert count == sizes[int(f[1:])], (version, f, count)  # never split
        seen = dict(per_file)
    assert seen == {f"f{i}": s for i, s in enumerate(sizes)}
    assert rows_per_file(table, 1) == {"f0": 10, "f1": 10, "f2": 10}


def test_many_small_files_are_one_commit(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path)
    for i in range(60):
        write(source, f"d{i % 4}/small-{i}.json", encode("json", rows([2 * i, 2 * i + 1])))
    result = ingest(table, source, format="json")
    assert (result.files, result.rows, result.commits) == (60, 120, 1)
    assert ids(table) == list(range(120)) and table.version == 1


# --- rows conformed to the table -----------------------------------------------------------------


def test_casts_integer_widths_and_timestamp_units(tmp_path: Path, source: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])
    table = make(tmp_path, schema)
    data = pa.table(
        {
            "id": pa.array([1, 2], pa.int32()),
            "ts": pa.array([1_700_000_000_000, 1_700_000_000_001], pa.timestamp("ms", tz="UTC")),
        }
    )
    write(source, "a.parquet", encode("parquet", data))
    write(
        source,
        "b.arrow",
        encode("arrow-file", data.set_column(0, "id", pa.array([3, 4], pa.int32()))),
    )
    ingest(table, source, glob="*.parquet")
    ingest(table, source, format="arrow", glob="*.arrow")
    got = table.refresh().to_arrow().sort_by("id")
    assert got.schema == schema
    assert got["id"].to_pylist() == [1, 2, 3, 4]
    assert (
        got["ts"].cast(pa.int64()).to_pylist()
        == [
            1_700_000_000_000_000,
            1_700_000_000_001_000,
        ]
        * 2
    )


def test_partitioned_table(tmp_path: Path, source: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("region", pa.string())])
    table = make(tmp_path, schema, partition_by=["region"])
    for i in range(3):
        data = pa.table({"id": list(range(i * 6, i * 6 + 6)), "region": ["eu", "us", "ap"] * 2})
        write(source, f"p{i}.csv", encode("csv", data))
    ingest(table, source, format="csv")
    got = table.refresh().to_arrow()
    assert sorted(got["id"].to_pylist()) == list(range(18))
    assert len(table.partitions()) == 3
    eu = table.to_arrow(filter=[("region", "=", "eu")])
    assert sorted(eu["id"].to_pylist()) == [i for i in range(18) if i % 3 == 0]


def test_primary_key_table_later_file_wins(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path, primary_key=["id"])
    write(
        source,
        "a",
        encode("parquet", pa.table({"id": [1, 2], "name": ["a1", "a2"]})),
        mtime=BASE_MTIME,
    )
    write(
        source,
        "b",
        encode("parquet", pa.table({"id": [2, 3], "name": ["b2", "b3"]})),
        mtime=BASE_MTIME + 1,
    )
    ingest(table, source)  # one commit: files oldest first, the last row of a key wins
    got = table.refresh().to_arrow().sort_by("id").to_pydict()
    assert got == {"id": [1, 2, 3], "name": ["a1", "b2", "b3"]}
    write(
        source, "c", encode("parquet", pa.table({"id": [1], "name": ["c1"]})), mtime=BASE_MTIME + 2
    )
    ingest(table, source)  # a later commit replaces the key
    got = table.refresh().to_arrow().sort_by("id").to_pydict()
    assert got == {"id": [1, 2, 3], "name": ["c1", "b2", "b3"]}


def test_table_with_sort_columns(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path, sort_columns=["id"])
    write(source, "a", encode("parquet", rows([9, 3, 7, 1])))
    write(source, "b", encode("parquet", rows([8, 2, 6])))
    ingest(table, source)
    assert ids(table) == [1, 2, 3, 6, 7, 8, 9]
    assert sorted(table.to_arrow(filter=[("id", "<", 4)])["id"].to_pylist()) == [1, 2, 3]
    assert table.sort_columns == ("id",)


def test_file_metadata_columns_are_filled(tmp_path: Path, source: Path) -> None:
    schema = pa.schema(
        [*SCHEMA, ("_file_path", pa.string()), ("_file_modified", pa.timestamp("ms", tz="UTC"))]
    )
    table = make(tmp_path, schema)
    write(source, "d/a.json", encode("json", rows([1, 2])), mtime=BASE_MTIME + 0.25)
    write(source, "b.json", encode("json", rows([3])), mtime=BASE_MTIME + 7)
    ingest(table, source, format="json")
    got = table.refresh().to_arrow().sort_by("id")
    assert got["_file_path"].to_pylist() == ["d/a.json", "d/a.json", "b.json"]
    millis = got["_file_modified"].cast(pa.int64()).to_pylist()
    assert millis == [1_790_000_000_250, 1_790_000_000_250, 1_790_000_007_000]


def test_a_renamed_column_makes_old_files_bad(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path)
    table.rename_column("name", "label")
    write(source, "old", encode("parquet", rows([1])), mtime=BASE_MTIME)
    write(
        source,
        "new",
        encode("parquet", pa.table({"id": [2], "label": ["l2"]})),
        mtime=BASE_MTIME + 1,
    )
    with pytest.raises(SchemaMismatchError) as raised:
        ingest(table, source)
    message = str(raised.value)
    assert "'old'" in message and "'name' was renamed to 'label'" in message, message
    assert "bad-records table" in message
    assert table.refresh().version == 1  # the rename; nothing ingested
    bad = tmp_path / "bad"
    result = ingest(table, source, bad_records=str(bad))
    assert (result.files, result.bad_files) == (1, 1)
    assert table.refresh().to_arrow().to_pydict() == {"id": [2], "label": ["l2"]}
    kept = cl.open_table(bad).to_arrow()
    assert kept["file"].to_pylist() == ["old"]
    assert "label" in kept["error"][0].as_py()


def test_a_column_default_fills_files_lacking_it(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path)
    table.add_columns(pa.field("n", pa.int64()), defaults={"n": 7})
    write(source, "a", encode("parquet", rows([1, 2])))
    write(source, "b", encode("parquet", rows([3]).append_column("n", pa.array([5], pa.int64()))))
    ingest(table, source)
    got = table.refresh().to_arrow().sort_by("id").to_pydict()
    assert got == {"id": [1, 2, 3], "name": ["n1", "n2", "n3"], "n": [7, 7, 5]}


@pytest.mark.parametrize(
    ("fmt", "content"),
    [
        ("json", b""),
        ("json", b"\n \n"),
        ("csv", b""),
        ("csv", b'"id","name"\n'),
    ],
    ids=["json-empty", "json-blank-lines", "csv-empty", "csv-header-only"],
)
def test_an_empty_text_file_is_recorded_with_no_rows(
    tmp_path: Path, source: Path, fmt: str, content: bytes
) -> None:
    table = make(tmp_path)
    write(source, "empty", content)
    write(source, "full", encode(fmt, rows([4])))
    result = ingest(table, source, format=fmt)
    assert (result.files, result.rows, result.bad_files) == (2, 1, 0)
    assert ids(table) == [4]
    uri = FileIngester(table, str(source), format=fmt).source.uri
    assert sorted(record(table, uri)) == ["empty", "full"]


# --- files that change under the ingester ------------------------------------------------------


def test_a_file_that_grows_after_listing_waits_until_stable(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path, WITH_PATH)
    write(source, "steady.json", encode("json", rows([1])), mtime=BASE_MTIME)
    growing = write(source, "growing.json", encode("json", rows([2])), mtime=BASE_MTIME + 1)
    lists = []

    def grow(name: str) -> None:
        if name == "files.after_list":
            lists.append(name)
            if len(lists) == 1:  # the writer appends between listing and reading
                with growing.open("ab") as f:
                    f.write(encode("json", rows([3])))

    with listening(grow):
        result = ingest(table, source, format="json")
    assert result.not_ready == 1
    assert (result.files, result.rows, result.commits, result.bad_files) == (2, 3, 2, 0)
    assert rows_per_file(table, 1) == {"steady.json": 1}  # the first round left it
    assert rows_per_file(table) == {"steady.json": 1, "growing.json": 2}
    assert ids(table) == [1, 2, 3]


def test_a_file_deleted_after_listing_is_skipped_not_bad(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path, WITH_PATH)
    write(source, "keep", encode("parquet", rows([1])), mtime=BASE_MTIME)
    gone = write(source, "gone", encode("parquet", rows([2])), mtime=BASE_MTIME + 1)

    def delete(name: str) -> None:
        if name == "files.after_list" and gone.exists():
            gone.unlink()

    bad = tmp_path / "bad"
    with listening(delete):
        result = ingest(table, source, bad_records=str(bad))
    assert (result.files, result.bad_files, result.not_ready) == (1, 0, 1)
    assert rows_per_file(table) == {"keep": 1}
    assert not bad.exists()
    uri = FileIngester(table, str(source)).source.uri
    assert list(record(table, uri)) == ["keep"]


# --- a running ingester ----------------------------------------------------------------------


def test_a_running_ingester_picks_up_new_files_and_stops(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path, WITH_PATH)
    write(source, "first", encode("parquet", rows(range(3))))
    ingester = FileIngester(table, str(source), max_latency=0.05)
    results: list[FileIngestResult] = []
    thread = threading.Thread(target=lambda: results.append(ingester.run()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: "first" in rows_per_file(table))
        write(source, "later/second", encode("parquet", rows(range(3, 5))))
        wait_for(lambda: "later/second" in rows_per_file(table))
    finally:
        ingester.stop()
        thread.join(30)
    assert not thread.is_alive()
    assert rows_per_file(table) == {"first": 3, "later/second": 2}
    assert results[0].files == 2 and results[0].rows == 5


def test_stop_from_another_thread_ends_an_idle_run(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path)
    ingester = FileIngester(table, str(source), max_latency=0.05)
    results: list[FileIngestResult] = []
    thread = threading.Thread(target=lambda: results.append(ingester.run()), daemon=True)
    thread.start()
    time.sleep(0.1)  # not a verdict: the run may or may not have listed yet
    ingester.stop()
    thread.join(30)
    assert not thread.is_alive()
    assert results and results[0].files == 0 and table.refresh().version == 0


# --- the record and its horizon ----------------------------------------------------------------


def test_too_old_files_are_counted_not_ingested(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path, WITH_PATH)
    now = time.time()
    write(source, "new", encode("parquet", rows([1])), mtime=now)
    assert ingest(table, source, max_file_age=60).files == 1
    write(source, "old", encode("parquet", rows([2])), mtime=now - 3600)
    write(source, "recent", encode("parquet", rows([3])), mtime=now - 30)
    result = ingest(table, source, max_file_age=60)
    assert (result.files, result.behind_horizon) == (1, 1)
    assert rows_per_file(table) == {"new": 1, "recent": 1}
    uri = FileIngester(table, str(source)).source.uri
    state = table.state(f"files:{uri}")
    assert dict(zip(state["file"].to_pylist(), state["modified_ms"].to_pylist(), strict=True)) == {
        "new": int(now * 1000),
        "recent": int((now - 30) * 1000),
    }
    meta = state.schema.metadata
    assert int(meta[b"horizon_ms"]) == int(now * 1000) - 60_000
    assert meta[b"source"].decode() == uri


def test_the_record_forgets_files_behind_its_horizon(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path, WITH_PATH)
    now = time.time()
    write(source, "old", encode("parquet", rows([1])), mtime=now - 3600)
    write(source, "new", encode("parquet", rows([2])), mtime=now)
    assert ingest(table, source, max_file_age=60).files == 2  # the first listing: no horizon
    uri = FileIngester(table, str(source)).source.uri
    assert list(record(table, uri)) == ["new"]
    again = ingest(table, source, max_file_age=60)
    assert (again.files, again.rows) == (0, 0)
    assert rows_per_file(table) == {"old": 1, "new": 1}


def test_a_file_the_record_forgot_is_not_read_again(tmp_path: Path, source: Path) -> None:
    table = make(tmp_path, WITH_PATH)
    now = time.time()
    write(source, "old", encode("parquet", rows([1])), mtime=now - 3600)
    write(source, "new", encode("parquet", rows([2])), mtime=now)
    result = ingest(table, source, max_file_age=60)
    assert rows_per_file(table) == {"old": 1, "new": 1}
    assert result.files == 2
    assert result.behind_horizon == 1  # ingested, then behind the horizon its commit moved


# --- a large file streams ----------------------------------------------------------------------


def test_a_large_parquet_file_streams(tmp_path: Path, source: Path) -> None:
    """4M rows (64 MB decoded) in row groups of 20k: the Arrow memory allocated at once
    while they are ingested (sampled every 2 ms from another thread: a peak between two
    samples is missed, so the check can only err towards passing) stays far below the
    file's decoded size (about 12 MB, the writer's buffers, whatever the file's size)."""
    n = 4_000_000
    data = pa.table({"id": pa.array(range(n), pa.int64()), "v": pa.array(range(n), pa.float64())})
    decoded = data.nbytes
    pq.write_table(data, source / "big.parquet", row_group_size=20_000)
    del data
    table = make(tmp_path, pa.schema([("id", pa.int64()), ("v", pa.float64())]))
    peak = [0]
    base = pa.total_allocated_bytes()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], pa.total_allocated_bytes() - base)
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = ingest(table, source)
    finally:
        stop.set()
        sampler.join()
    assert result.rows == n
    assert table.count_rows() == n
    assert peak[0] < decoded / 3, (peak[0], decoded)


@pytest.mark.slow
def test_a_large_json_file_streams(tmp_path: Path, source: Path) -> None:
    """About 150 MB of newline-delimited JSON (5M rows, about 100 MB decoded): the Arrow
    memory allocated at once while it is ingested (sampled as above) stays far below it."""
    n = 5_000_000
    with (source / "big.json").open("w") as f:
        for start in range(0, n, 100_000):
            f.write(
                "".join(
                    f'{{"id": {i}, "name": "name-{i:09}"}}\n' for i in range(start, start + 100_000)
                )
            )
    table = make(tmp_path)
    decoded = n * (8 + 14 + 4)  # int64 ids, 14-character names and their offsets
    peak = [0]
    base = pa.total_allocated_bytes()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], pa.total_allocated_bytes() - base)
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = ingest(table, source, format="json", max_batch_rows=10 * n)
    finally:
        stop.set()
        sampler.join()
    assert result.rows == n and result.commits == 1
    assert table.count_rows() == n
    assert peak[0] < decoded / 3, (peak[0], decoded)


# --- commits under crashes and a second ingester ---------------------------------------------------


def test_many_files_already_there_are_one_commit_of_a_running_ingester(
    tmp_path: Path, source: Path
) -> None:
    """Files written longer than ``max_latency`` ago are due at once: one commit of all."""
    table = make(tmp_path, WITH_PATH)
    for i in range(30):
        write(source, f"f{i:02}", encode("parquet", rows([i])), mtime=BASE_MTIME + i)
    ingester = FileIngester(table, str(source), max_latency=0.05)
    thread = threading.Thread(target=ingester.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: table.refresh().version >= 1)
    finally:
        ingester.stop()
        thread.join(30)
    assert ingester.result.commits == 1 and ingester.result.files == 30
    assert ids(table) == list(range(30)) and table.refresh().version == 1


class Crash(Exception):
    """The process died here (raised from a seam: nothing after it runs)."""


@pytest.mark.parametrize("seam", ["files.after_list", "files.after_file"])
def test_a_crash_before_the_commit_loses_and_duplicates_nothing(
    tmp_path: Path, source: Path, seam: str
) -> None:
    table = make(tmp_path, WITH_PATH)
    for i in range(3):
        write(
            source, f"f{i}", encode("parquet", rows(range(i * 3, i * 3 + 3))), mtime=BASE_MTIME + i
        )

    def crash(name: str) -> None:
        if name == seam:
            raise Crash(name)

    # raised inside the rows the append reads, the crash reaches the caller wrapped
    with listening(crash), pytest.raises((Crash, DataSourceError), match=f"Crash: {seam}|{seam}"):
        ingest(table, source)
    assert table.refresh().version == 0
    result = ingest(table, source)
    assert (result.files, result.rows) == (3, 9)
    assert rows_per_file(table) == {"f0": 3, "f1": 3, "f2": 3}


def test_a_second_ingester_committing_first_is_not_duplicated(tmp_path: Path, source: Path) -> None:
    """Ingester A has read its first file when B ingests every file: A's commit finds the
    record moved, commits nothing, reads the record again and has nothing left."""
    table = make(tmp_path, WITH_PATH)
    for i in range(4):
        write(
            source, f"f{i}", encode("parquet", rows(range(i * 2, i * 2 + 2))), mtime=BASE_MTIME + i
        )
    later = write(source, "g", encode("parquet", rows([100])), mtime=BASE_MTIME + 9)
    os.utime(later, (BASE_MTIME + 9, BASE_MTIME + 9))
    other = cl.open_table(tmp_path / "t")
    state = {"b_ran": False, "in_b": False}

    def b_first(name: str) -> None:
        if name == "files.after_file" and not state["b_ran"] and not state["in_b"]:
            state["in_b"] = True
            state["b_ran"] = True
            try:
                b = FileIngester(other, str(source)).run(stop_at_end=True)
                assert b.files == 5
            finally:
                state["in_b"] = False

    with listening(b_first):
        a = ingest(table, source)
    assert state["b_ran"]
    assert a.restarts >= 1 and a.files == 0 and a.commits == 0
    assert rows_per_file(table) == {"f0": 2, "f1": 2, "f2": 2, "f3": 2, "g": 1}
    assert table.refresh().version == 1
