"""File ingesters racing for real, as threads and as processes: two or three of one source into
one table, ingesters of two sources into one table, and an ingester beside a plain appender
and handoff/compaction of the same table.

The racers are started together at a barrier (each holds at its first ``files.after_list``,
after reading the record, until all got there), so they all start from the same record and all
but one must find it moved: that, and every count of the results, follows from the protocol,
not from the machine's speed. After the race: every row of every file once, in the version
that recorded it, every bad file kept once (``tests/support/file_ingest_source.py``), and the
results add up: each file committed by one ingester, each commit one move of the marker.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.errors import InvalidOptionError
from carbonlite.ingest import FileIngester, FileIngestResult
from carbonlite.seams import listening
from carbonlite.storage import open_storage
from tests.support.file_ingest_source import (
    SCHEMA,
    Source,
    bad_bytes,
    check_ingested,
    file_rows,
    parquet_bytes,
    record_files,
)
from tests.support.file_ingest_worker import IngestProcess
from tests.support.places import Place

DEADLINE = 120.0
"""Seconds a wait for the racers may take before the test fails (a hang, not slowness)."""


@contextmanager
def start_together(count: int, threads: set[int] | None = None) -> Iterator[None]:
    """Hold each of ``count`` threads at its first ``files.after_list`` until all are there
    (``threads``: only those; others pass)."""
    barrier = threading.Barrier(count, timeout=DEADLINE)
    arrived: set[int] = set()
    lock = threading.Lock()

    def listener(name: str) -> None:
        me = threading.get_ident()
        if name != "files.after_list" or (threads is not None and me not in threads):
            return
        with lock:
            if me in arrived:
                return
            arrived.add(me)
        barrier.wait()

    with listening(listener):
        yield


def filled_source(where: Path, rng: random.Random, files: int = 24) -> Source:
    source = Source(str(where))
    source.add_never_final()
    for _ in range(files):
        source.add_random(rng)
    source.add_bad("garbage")
    return source


def run_threads(calls: list[Callable[[], Any]], *, together: bool = True) -> list[Any]:
    """Run each call on a thread of its own (started together); their results, or raise the
    first error."""
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []
    started: set[int] = set()

    def body(i: int) -> None:
        started.add(threading.get_ident())
        try:
            results[i] = calls[i]()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(calls))]
    context = start_together(len(calls)) if together else _nothing()
    with context:
        for t in threads:
            t.start()
        for t in threads:
            t.join(DEADLINE)
    assert not any(t.is_alive() for t in threads), f"a racer did not end within {DEADLINE} s"
    if errors:
        raise errors[0]
    return results


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def ingester(table: Path, source: Source, bad: Path, writer: str, **kwargs: Any) -> FileIngester:
    return FileIngester(
        str(table),
        source.uri,
        bad_records=str(bad),
        writer_id=writer,
        max_batch_rows=kwargs.pop("max_batch_rows", 150),
        max_latency=kwargs.pop("max_latency", 0.05),
        **kwargs,
    )


def check_results(
    table: Path,
    source: Source,
    results: list[FileIngestResult],
    *,
    racing: bool = True,
    to_end: bool = True,
) -> None:
    """The results add up: each good file committed by one ingester, each bad one kept by
    one, each commit one move of the marker; all but one found the record moved."""
    assert sum(r.files for r in results) == len(source.good), results
    assert sum(r.rows for r in results) == sum(len(ids) for ids in source.good.values())
    assert sum(r.bad_files for r in results) == len(source.bad), results
    generation = cl.open_table(table).snapshot().txns[source.record]
    assert sum(r.commits for r in results) == generation + 1, (generation, results)
    if racing:
        assert sum(r.restarts for r in results) >= len(results) - 1, results
    if to_end:  # (a stopped one's last listing may predate the other's last commits)
        assert all(r.pending == 0 for r in results), results


@pytest.mark.parametrize("racers", [2, 3])
def test_ingesters_of_one_source_as_threads(tmp_path: Path, racers: int) -> None:
    rng = random.Random(racers)
    table, bad = tmp_path / "t", tmp_path / "bad"
    cl.create_table(table, SCHEMA, properties={"checkpoint_interval": "4"})
    source = filled_source(tmp_path / "src", rng)
    ingesters = [ingester(table, source, bad, f"w{i}") for i in range(racers)]
    results = run_threads([lambda i=i: i.run(stop_at_end=True) for i in ingesters])
    check_ingested(str(table), [source], str(bad))
    check_results(table, source, results)


@pytest.mark.parametrize("racers", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_ingesters_of_one_source_as_processes(tmp_path: Path, racers: int) -> None:
    """The command, ``racers`` times at once: each held after its first listing until all
    are, then let go together."""
    rng = random.Random(10 + racers)
    table, bad = tmp_path / "t", tmp_path / "bad"
    cl.create_table(table, SCHEMA, properties={"checkpoint_interval": "4"})
    source = filled_source(tmp_path / "src", rng)
    args = [
        "ingest",
        "files",
        str(table),
        "--source",
        source.uri,
        "--bad-records",
        str(bad),
        "--max-batch-rows",
        "150",
        "--stop-at-end",
        "--json",
    ]
    spec = {"args": args, "seam": "files.after_list", "nth": 1, "release": True}
    procs = [IngestProcess(spec) for _ in range(racers)]
    try:
        for p in procs:
            assert p.run.held_or_ended(DEADLINE), "a racer ended before its first listing"
        for p in procs:
            p.run.go()
        for p in procs:
            assert p.run.wait(DEADLINE) == 0 and p.run.code == 0, p.run.errors
    finally:
        for p in procs:
            p.close()
    summaries = [p.run.summary for p in procs]
    assert all(s is not None for s in summaries), summaries
    results = [
        FileIngestResult(**{k: v for k, v in s.items() if k != "seconds"})  # type: ignore[union-attr]
        for s in summaries
    ]
    check_ingested(str(table), [source], str(bad))
    check_results(table, source, results)


def test_ingesters_of_one_source_while_files_arrive(tmp_path: Path) -> None:
    """Two ingesters running (not to an end), files renamed into place in bursts meanwhile;
    once the record lists every file both stop: every file once."""
    rng = random.Random(7)
    table, bad = tmp_path / "t", tmp_path / "bad"
    cl.create_table(table, SCHEMA, properties={"checkpoint_interval": "4"})
    source = filled_source(tmp_path / "src", rng, files=4)
    ingesters = [ingester(table, source, bad, f"w{i}", max_latency=0.02) for i in range(2)]

    def arrive() -> None:
        for _ in range(8):
            for _ in range(rng.randint(1, 4)):
                source.add_random(rng)
            time.sleep(0.02)  # spreads the arrivals over listings; the verdict does not use it
        wait_until(lambda: set(record_files(cl.open_table(table), source.record)) >= source.files)
        for i in ingesters:
            i.stop()

    results = run_threads([ingesters[0].run, ingesters[1].run, arrive], together=False)
    check_ingested(str(table), [source], str(bad))
    check_results(table, source, results[:2], racing=False, to_end=False)


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"not done within {DEADLINE} s"
        time.sleep(0.02)


def test_ingesters_of_two_sources_into_one_table_both_progress(tmp_path: Path) -> None:
    """Their records are apart: neither makes the other restart, both ingest all of theirs."""
    rng = random.Random(3)
    table, bad = tmp_path / "t", tmp_path / "bad"
    cl.create_table(table, SCHEMA, properties={"checkpoint_interval": "4"})
    first = filled_source(tmp_path / "a", rng)
    second = Source(str(tmp_path / "b"), numbers=5000)
    for _ in range(24):
        second.add_random(rng)
    ingesters = [ingester(table, first, bad, "a"), ingester(table, second, bad, "b")]
    results = run_threads([lambda i=i: i.run(stop_at_end=True) for i in ingesters])
    check_ingested(str(table), [first, second], str(bad))
    for source, result in zip((first, second), results, strict=True):
        check_results(table, source, [result], racing=False)
        assert result.restarts == 0, result
    versions = Counter(cl.open_table(table).changes(0).column("_commit_version").to_pylist())
    assert len(versions) >= 4


def test_an_ingester_beside_an_appender_and_handoff_and_compaction(tmp_path: Path) -> None:
    """Plain appends, ``finish_streaming`` + ``handoff`` and compactions of the same table
    while an ingester commits file after file (after each of its commits it waits until the
    others have committed again, so they are between every two of its commits): every file
    once, every append once, and the maintenance really rewrote the ingested rows."""
    rng = random.Random(5)
    table, bad = tmp_path / "t", tmp_path / "bad"
    cl.create_table(
        table,
        SCHEMA,
        properties={"checkpoint_interval": "4", "compaction_level_threshold": "2,2"},
    )
    source = filled_source(tmp_path / "src", rng, files=16)
    ing = ingester(table, source, bad, "ingest", max_batch_rows=200)
    appended: Counter[int] = Counter()
    rounds = [0, 0]  # appends, maintenance rounds
    done = threading.Event()
    ingesting: set[int] = set()

    def between_commits(name: str) -> None:
        if name == "files.after_commit" and threading.get_ident() in ingesting:
            seen = list(rounds)
            wait_until(lambda: rounds[0] > seen[0] and rounds[1] > seen[1])

    def ingest() -> FileIngestResult:
        ingesting.add(threading.get_ident())
        try:
            return ing.run(stop_at_end=True)
        finally:
            done.set()

    def append() -> None:
        t = cl.open_table(table, writer_id="appender")
        while not done.is_set():
            n = rounds[0]
            ids = list(range(10_000_000 + n * 10, 10_000_000 + n * 10 + 10))
            t.append(pa.table({"id": ids, "payload": ["appended"] * 10}), schema_mode="merge")
            appended.update(ids)
            rounds[0] += 1

    def maintain() -> None:
        t = cl.open_table(table, writer_id="maintainer")
        while not done.is_set():
            t.refresh()
            t.finish_streaming()
            t.handoff()
            t.compact("minor" if rounds[1] % 2 else "major")
            rounds[1] += 1

    with listening(between_commits):
        result, _, _ = run_threads([ingest, append, maintain], together=False)
    check_ingested(str(table), [source], str(bad), others=appended)
    check_results(table, source, [result], racing=False)
    assert result.commits >= 4, result
    history = cl.open_table(table).history()
    kinds = Counter(c.operation for c in history)
    assert kinds["APPEND"] >= result.commits + rounds[0] - 1 and rounds[1] >= result.commits
    assert kinds["HANDOFF"] >= 2, kinds


def test_a_bad_records_table_inside_the_source_is_refused(tmp_path: Path) -> None:
    """The bad-records table and the ingester's source must not overlap, as the table and
    the source must not: its files would be listed as the source's. Refused when it is given,
    whether or not it exists yet, not after it was made there."""
    table = tmp_path / "t"
    cl.create_table(table, SCHEMA)
    source = Source(str(tmp_path / "src"))
    source.add_good(5)
    source.add_bad("garbage")
    inside = tmp_path / "src" / "bad"
    try:
        first = FileIngester(str(table), source.uri, bad_records=str(inside))
    except InvalidOptionError as exc:
        assert "overlap" in str(exc)
        return
    first.run(stop_at_end=True)  # makes the bad-records table, inside the source
    try:
        FileIngester(str(table), source.uri, bad_records=str(inside))
    except InvalidOptionError as exc:
        raise AssertionError(
            f"the first ingester was let make its bad-records table inside the source; now "
            f"its restart is refused: {exc}"
        ) from exc


def test_a_running_ingester_never_keeps_its_bad_records_table_as_bad(place: Place) -> None:
    """An ingester running (not to an end) whose bad-records path lies inside its source,
    and does not exist yet. It is refused; or, if not, after the source's two files are
    recorded and two more listings have passed, the bad-records table holds the one bad file
    of the source and none of its own files."""
    options = place.storage_options
    storage, root = open_storage(place.uri("src"), options)
    storage.put(storage.join(root, "part-1.parquet"), parquet_bytes(file_rows(1, 5)))
    storage.put(storage.join(root, "part-2.parquet"), bad_bytes("garbage", 2))
    table = cl.create_table(place.uri("t"), SCHEMA, storage_options=options)
    try:
        running = FileIngester(
            table,
            place.uri("src"),
            storage_options=options,
            bad_records=place.uri("src/bad"),
            max_latency=0.01,
        )
    except InvalidOptionError as exc:
        assert "overlap" in str(exc)
        return
    listings = [0]
    record = running._record().name

    def count(name: str) -> None:
        if name == "files.after_list":
            listings[0] += 1

    def watch() -> None:
        wait_until(lambda: {"part-1.parquet", "part-2.parquet"} <= set(recorded()))
        seen = listings[0]
        wait_until(lambda: listings[0] >= seen + 2)
        running.stop()

    def recorded() -> dict[str, int]:
        return record_files(cl.open_table(place.uri("t"), storage_options=options), record)

    with listening(count):
        run_threads([running.run, watch], together=False)
    bad = cl.open_table(place.uri("src/bad"), storage_options=options).to_arrow()
    kept = bad.column("file").to_pylist()
    assert kept == ["part-2.parquet"], f"kept as bad files of the source: {kept[:5]} ..."
