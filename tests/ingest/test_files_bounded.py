"""The record of ingested files stays bounded (issue 28): a source that runs for years keeps
the files of the last ``max_file_age`` in its record, never more, and the log versions and
the ingester's memory stay flat while the files keep coming.

Files are tiny CSV files (one or two rows), written as bytes in bucket directories of 1,000
files, with modification times one second apart (``os.utime``), so a ``max_file_age`` of
``AGE`` seconds keeps ``AGE + 1`` files in the record. They are ingested in rounds (write a
round's files, ``run(stop_at_end=True)``), and after each round the record (rows, bytes of
its state file), the newest log version's and checkpoint's bytes and the ingester's memory
are measured. ``benchmarks/bench_file_ingest.py`` prints the same figures.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.ingest.file_record import record_name
from carbonlite.ingest.file_source import SourceFile
from carbonlite.ingest.files import FileIngester, FileIngestResult

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
BUCKET = 1_000
"""Files per bucket directory."""
BATCH_ROWS = 500
"""``max_batch_rows``: a round of 10,000 files is about 25 commits."""


def ids_of(i: int) -> list[int]:
    """The ids file ``i`` holds: ``2i``, and ``2i + 1`` for every fourth file."""
    return [2 * i, 2 * i + 1] if i % 4 == 0 else [2 * i]


def write_small_files(source: Path, start: int, count: int, base_s: float) -> None:
    """Files ``start`` .. ``start + count - 1``: ``b<bucket>/f<i>.csv``, written under a dot
    name and renamed into place, modified at ``base_s + i`` seconds. (Plain strings, not
    ``Path``: pathlib interns every name, and the interned-strings table it grows would count
    in the memory measured.)"""
    root = str(source)
    for i in range(start, start + count):
        bucket = os.path.join(root, f"b{i // BUCKET:04d}")
        if i % BUCKET == 0 or i == start:
            os.makedirs(bucket, exist_ok=True)
        rows = b"".join(b"%d,v%d\n" % (n, n) for n in ids_of(i))
        temp = os.path.join(bucket, f".f{i:07d}.csv")
        with open(temp, "wb") as f:
            f.write(b"id,v\n" + rows)
        os.utime(temp, (base_s + i, base_s + i))
        os.rename(temp, os.path.join(bucket, f"f{i:07d}.csv"))


@dataclass
class RoundFigures:
    """What one round left behind."""

    files: int
    """Files written so far."""
    record_rows: int
    record_bytes: int
    """Bytes of the record's state file (the log's figure, checked against the disk)."""
    log_version_bytes: int
    """Bytes of the newest log version."""
    checkpoint_bytes: int
    """Bytes of the newest checkpoint's document."""
    traced_bytes: int
    """Python memory held after ``gc.collect()`` (tracemalloc), since before the ingester was
    made."""
    arrow_bytes: int
    """pyarrow's allocated bytes (not traced by tracemalloc)."""
    held_blocks: int
    """Python's allocated memory blocks after ``gc.collect()`` (``sys.getallocatedblocks``):
    every object a leak keeps holds at least one, and counting them costs nothing, where
    tracing every allocation makes the ingester three times slower."""
    commits: int
    seconds: float


@dataclass
class Rounds:
    """A long run of rounds and what each left."""

    figures: list[RoundFigures] = field(default_factory=list)
    largest_record: int = 0
    """The most rows the record had after any commit."""
    results: list[FileIngestResult] = field(default_factory=list)
    table: cl.Table | None = None
    files: int = 0

    def as_dicts(self) -> list[dict[str, float]]:
        return [asdict(f) for f in self.figures]


def log_dir(table: cl.Table) -> Path:
    return Path(table.path) / "_carbonlite" / "log"


def newest_checkpoint_bytes(table: cl.Table) -> int:
    documents = sorted(log_dir(table).glob("*.checkpoint.json"))
    return documents[-1].stat().st_size if documents else 0


def measure(
    table: cl.Table, ingester: FileIngester, files: int, commits: int, seconds: float
) -> RoundFigures:
    name = record_name("files", ingester.source.uri)
    snapshot = table.refresh().snapshot()
    stored = snapshot.states[name]
    on_disk = (Path(table.path) / stored.path).stat().st_size
    assert on_disk == stored.size, (stored.path, on_disk, stored.size)
    version = log_dir(table) / f"{snapshot.version:020d}.json"
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
    return RoundFigures(
        files=files,
        record_rows=stored.rows,
        record_bytes=stored.size,
        log_version_bytes=version.stat().st_size,
        checkpoint_bytes=newest_checkpoint_bytes(table),
        traced_bytes=traced,
        arrow_bytes=pa.total_allocated_bytes(),
        held_blocks=sys.getallocatedblocks(),
        commits=commits,
        seconds=seconds,
    )


def run_rounds(
    folder: Path,
    *,
    rounds: int,
    per_round: int,
    max_file_age: float,
    long_lived: bool,
    trace: bool = True,
    report: Callable[[RoundFigures], None] | None = None,
) -> Rounds:
    """Write ``per_round`` files and ingest them, ``rounds`` times: with one ingester for
    every round (``long_lived``) or a new one per round, into one table object."""
    source = folder / "source"
    source.mkdir(parents=True)
    table = cl.create_table(str(folder / "table"), SCHEMA)
    name = record_name("files", table.storage.uri(str(source)))
    base_s = time.time() - rounds * per_round - 3600  # all in the past: nothing waits
    out = Rounds(table=table)

    def after_commit(_: FileIngestResult) -> None:
        stored = table.snapshot().states.get(name)
        out.largest_record = max(out.largest_record, stored.rows if stored else 0)

    def new_ingester() -> FileIngester:
        return FileIngester(
            table,
            str(source),
            format="csv",
            max_batch_rows=BATCH_ROWS,
            max_file_age=max_file_age,
            progress=after_commit,
        )

    if trace:
        gc.collect()
        tracemalloc.start()
    try:
        ingester = new_ingester()
        for r in range(rounds):
            write_small_files(source, r * per_round, per_round, base_s)
            if not long_lived and r:
                ingester = new_ingester()
            started = time.perf_counter()
            before = replace(ingester.result)
            result = ingester.run(stop_at_end=True)
            seconds = time.perf_counter() - started
            out.results.append(_since(before, result))
            out.files = (r + 1) * per_round
            figures = measure(table, ingester, out.files, out.results[-1].commits, seconds)
            out.figures.append(figures)
            if report is not None:
                report(figures)
    finally:
        if trace:
            tracemalloc.stop()
    return out


def _since(before: FileIngestResult, after: FileIngestResult) -> FileIngestResult:
    """What one run added (a long-lived ingester's result adds up its runs; ``pending`` and
    ``behind_horizon`` are as of its last listing)."""
    counts = ("files", "rows", "bad_files", "commits", "restarts", "not_ready")
    return replace(after, **{k: getattr(after, k) - getattr(before, k) for k in counts})


def check_rows(table: cl.Table, files: int) -> None:
    """Every row of every file in the table, exactly once."""
    ids = table.refresh().to_arrow(columns=["id"]).column("id")
    expected = [n for i in range(files) for n in ids_of(i)]
    assert len(ids) == len(expected)
    assert pc.count_distinct(ids).as_py() == len(expected)
    assert pc.min(ids).as_py() == 0 and pc.max(ids).as_py() == max(expected)
    assert pc.sum(ids).as_py() == sum(expected)


def check_bounded(rounds: Rounds, age: int, per_round: int) -> None:
    kept = age + 1  # one file a second, the newest's time minus age included
    assert rounds.largest_record == kept
    first, *_, last = rounds.figures[1:]  # round 1 holds the table's first commits
    for f in rounds.figures:
        assert f.record_rows == kept, f
    assert last.record_bytes <= 1.1 * first.record_bytes + 256, (first, last)
    assert last.log_version_bytes <= 1.1 * first.log_version_bytes + 256, (first, last)
    # the checkpoint lists the table's manifests: a saw-tooth as they are merged, not the record
    largest = max(f.checkpoint_bytes for f in rounds.figures[1:])
    assert largest <= 2.5 * first.checkpoint_bytes + 2048, rounds.figures
    for r in rounds.results:
        assert (r.files, r.bad_files, r.not_ready, r.pending) == (per_round, 0, 0, 0), r


# --- the default tier: a couple of thousand files ------------------------------------------------


@pytest.mark.parametrize("long_lived", [True, False], ids=["one-ingester", "one-per-round"])
def test_record_stays_bounded(tmp_path: Path, long_lived: bool) -> None:
    rounds = run_rounds(
        tmp_path, rounds=4, per_round=500, max_file_age=100, long_lived=long_lived, trace=False
    )
    check_bounded(rounds, 100, 500)
    assert rounds.table is not None
    check_rows(rounds.table, rounds.files)


def test_record_behind_the_horizon_reads_as_ingested(tmp_path: Path) -> None:
    """What the record forgot still counts as ingested: a restart reads none of it again."""
    rounds = run_rounds(
        tmp_path, rounds=2, per_round=500, max_file_age=50, long_lived=True, trace=False
    )
    assert rounds.table is not None
    again = FileIngester(rounds.table, str(tmp_path / "source"), format="csv", max_file_age=50).run(
        stop_at_end=True
    )
    assert (again.files, again.commits) == (0, 0)
    check_rows(rounds.table, rounds.files)


def test_forgotten_files_are_not_read_again_nor_kept(tmp_path: Path) -> None:
    """Files the record forgot (ingested, then behind the horizon) are counted as behind it,
    never read again, and the ingester keeps no list of them."""
    rounds = run_rounds(
        tmp_path, rounds=2, per_round=500, max_file_age=50, long_lived=True, trace=False
    )
    assert rounds.table is not None
    check_rows(rounds.table, rounds.files)  # every file was ingested once
    assert [r.behind_horizon for r in rounds.results] == [500 - 51, 1000 - 51]


# --- found while measuring the latency (benchmarks/bench_file_ingest.py) --------------------------


def test_a_files_due_time_is_max_latency_after_it_was_written(tmp_path: Path) -> None:
    """Decided once, at the listing that first saw the file (``run`` keeps it): the file's
    age then counts, so waiting does not move it (it did: commits came at half the
    latency)."""
    (tmp_path / "source").mkdir()
    table = cl.create_table(str(tmp_path / "table"), SCHEMA)
    ingester = FileIngester(table, str(tmp_path / "source"), format="csv", max_latency=1.0)
    written_s = 1_800_000_000.0
    file = SourceFile("x", "f.csv", 10, int(written_s * 1000))
    seen = 500.0  # the monotonic clock when a listing first saw it, 0.2 s after it was written
    assert ingester._due(file, seen, written_s + 0.2) == pytest.approx(seen + 0.8)
    assert ingester._due(file, seen, written_s + 5.0) == pytest.approx(seen)  # a backlog
    assert ingester._due(file, seen, written_s - 3.0) == pytest.approx(seen + 1.0)  # skewed


# --- the slow tier: 50,000 files -----------------------------------------------------------------

AGE = 1_000
"""``max_file_age`` of the long runs: 1,001 files in the record."""
ROUNDS = 10
PER_ROUND = 5_000
PER_ROUND_SHORT_LIVED = 3_000
"""Files per round when every round has a new ingester: 30,000 files, each round three times
``AGE``, so every round still turns the whole record over. The long-lived ingester's run takes
50,000, five times ``AGE`` a round (100,000 until CI's time ran short: benchmarks/
bench_file_ingest.py measures the record, the log and memory flat to 100,000)."""


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rounds]:
    """50,000 files in 10 rounds through one long-lived ingester (its memory counted in
    blocks, not traced: ``benchmarks/bench_file_ingest.py`` traces it)."""
    yield run_rounds(
        tmp_path_factory.mktemp("long"),
        rounds=ROUNDS,
        per_round=PER_ROUND,
        max_file_age=AGE,
        long_lived=True,
        trace=False,
        report=lambda f: print(f, file=sys.stderr),  # shown with -s
    )


@pytest.mark.slow
def test_record_bounded_after_50k_files(long_run: Rounds) -> None:
    check_bounded(long_run, AGE, PER_ROUND)
    assert long_run.table is not None
    check_rows(long_run.table, long_run.files)


@pytest.mark.slow
def test_record_bounded_after_30k_files_one_ingester_per_round(tmp_path: Path) -> None:
    rounds = run_rounds(
        tmp_path,
        rounds=ROUNDS,
        per_round=PER_ROUND_SHORT_LIVED,
        max_file_age=AGE,
        long_lived=False,
        trace=False,
    )
    check_bounded(rounds, AGE, PER_ROUND_SHORT_LIVED)
    assert rounds.table is not None
    check_rows(rounds.table, rounds.files)


BLOCKS_SLACK = 8_000
"""Growth of the blocks held from round 2 to round 10 that counts as flat. A leak of one
object per file ingested would add 40,000 (8,000 is one per 5 files)."""


@pytest.mark.slow
def test_long_lived_ingester_memory_flat_after_50k_files(long_run: Rounds) -> None:
    first, last = long_run.figures[1], long_run.figures[-1]
    assert last.held_blocks - first.held_blocks <= BLOCKS_SLACK, (first, last)
    assert last.arrow_bytes - first.arrow_bytes <= 1 << 20, (first, last)
