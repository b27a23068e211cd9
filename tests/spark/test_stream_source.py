"""The streaming source: read limits, commits that change no data, starting positions,
commits that remove rows, reading while another writer appends, the default start while a
writer races it (initialOffset asked more than once), a restart that replays batch 0, and a
checkpoint of a table since deleted and re-created.

Tables are written with the Python API. A "unit" of the source is one file's appended range
in one commit (after the start), or one whole file of the snapshot the stream starts from;
``maxFilesPerTrigger`` counts units.
"""

from __future__ import annotations

import datetime
import json
import shutil
import threading
import time
from typing import Any

import pyarrow as pa
import pytest

from carbonlite import create_table, open_table
from carbonlite.errors import CarbonLiteError, TableIdMismatchError
from tests.spark.streams import data_batches, finish, ids_delivered, memory_name, wait_until
from tests.support.spark_data import SOURCE_DDL, SOURCE_SCHEMA, assert_same_rows, source_rows

pytestmark = pytest.mark.spark

K = 4  # commits in the tables of the read-limit tests
ROWS = 30  # rows per commit


def make_table(path: str, commits: int, *, separate_writers: bool) -> list[pa.Table]:
    """A table of ``commits`` appends of ``ROWS`` rows; with ``separate_writers`` each append
    comes from a new Table object (its own writer id, so its own file), else all share one
    file."""
    t = create_table(path, SOURCE_SCHEMA)
    chunks = []
    for n in range(commits):
        rows = source_rows(n * ROWS, ROWS)
        (open_table(path) if separate_writers else t).append(rows)
        chunks.append(rows)
    return chunks


def read_into_memory(spark: Any, path: str, **options: Any) -> tuple[Any, pa.Table]:
    """Stream ``path`` with ``options`` into a memory sink (availableNow); the query and rows."""
    name = memory_name()
    reader = spark.readStream.format("carbonlite")
    for key, value in options.items():
        reader = reader.option(key, value)
    q = finish(
        reader.load(path)
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    rows = spark.sql(f"select * from {name}").toArrow()
    spark.catalog.dropTempView(name)
    return q, rows


@pytest.mark.parametrize(
    ("start", "separate_writers", "batches"),
    [
        pytest.param("snapshot", True, K, id="snapshot-K-files"),
        pytest.param("snapshot", False, 1, id="snapshot-one-file", marks=pytest.mark.slow),
        pytest.param("log", False, K, id="log-K-ranges-of-one-file", marks=pytest.mark.slow),
    ],
)
def test_max_files_per_trigger(
    spark: Any, tmp_path: Any, start: str, separate_writers: bool, batches: int, stop_queries: None
) -> None:
    path = str(tmp_path / "t")
    chunks = make_table(path, K, separate_writers=separate_writers)
    options: dict[str, Any] = {"maxFilesPerTrigger": 1}
    if start == "log":
        options["startingVersion"] = 1
    q, rows = read_into_memory(spark, path, **options)
    assert_same_rows(rows, pa.concat_tables(chunks))
    got = [p["numInputRows"] for p in data_batches(q)]
    assert len(got) == batches, f"batch sizes {got}"
    assert sum(got) == K * ROWS


def test_max_rows_per_trigger(spark: Any, tmp_path: Any, stop_queries: None) -> None:
    """The limit holds to the row: a batch ends inside a commit's blocklet."""
    path = str(tmp_path / "t")
    chunks = make_table(path, K, separate_writers=False)
    limit = 2 * ROWS + 10
    q, rows = read_into_memory(spark, path, startingVersion=1, maxRowsPerTrigger=limit)
    assert_same_rows(rows, pa.concat_tables(chunks))
    assert [p["numInputRows"] for p in data_batches(q)] == [limit, K * ROWS - limit]


def batch_bytes(batches: list[int], blocklets: list[tuple[int, int]]) -> list[int]:
    """The bytes each batch counts against maxBytesPerTrigger, from the batches' row counts
    (batches deliver the blocklets' rows in order) and each blocklet's (rows, stored bytes):
    a row counts for its share of its blocklet's bytes, rounded up per blocklet and batch."""
    out, row, index = [], 0, 0
    for size in batches:
        total = 0
        while size:
            rows, length = blocklets[index]
            take = min(size, rows - row)
            total += -(-length * take // rows)
            size, row = size - take, row + take
            if row == rows:
                index, row = index + 1, 0
        out.append(total)
    return out


def test_max_bytes_per_trigger(spark: Any, tmp_path: Any, stop_queries: None) -> None:
    path = str(tmp_path / "t")
    chunks = make_table(path, K, separate_writers=True)
    # A unit's size is the bytes of its blocklets as stored (file headers not included).
    sizes = [
        sum(b.length for b in f.blocklets) for _, f in open_table(path).snapshot().iter_files()
    ]
    assert len(sizes) == K and max(sizes) < 1.2 * min(sizes)
    limit = int(2.5 * max(sizes))  # two files and part of a third fit
    q, rows = read_into_memory(spark, path, maxBytesPerTrigger=limit)
    assert_same_rows(rows, pa.concat_tables(chunks))
    got = [p["numInputRows"] for p in data_batches(q)]
    assert len(got) == 2 and 2 * ROWS < got[0] < 3 * ROWS, f"batch sizes {got}"
    blocklets = [
        (b.num_rows, b.length)
        for _, f in open_table(path).snapshot().iter_files()
        for b in f.blocklets
    ]
    assert all(n <= limit for n in batch_bytes(got, blocklets))
    assert batch_bytes([got[0] + 1], blocklets)[0] > limit, "the first batch was not full"


def test_metadata_commit_in_the_middle_is_not_delivered(
    spark: Any, tmp_path: Any, stop_queries: None
) -> None:
    """``add_columns`` commits with data_change=false between two appends: the stream crosses
    it without a batch and without delivering any row again."""
    path = str(tmp_path / "t")
    chunks = make_table(path, 2, separate_writers=False)
    t = open_table(path)
    t.add_columns(pa.field("x", pa.string()))
    assert not t.history(limit=1)[0].data_change
    extra = source_rows(1_000, ROWS).append_column("x", pa.array(["new"] * ROWS))
    t.append(extra)
    q, rows = read_into_memory(spark, path, startingVersion=1, maxFilesPerTrigger=1)
    old = pa.concat_tables(chunks)
    expected = pa.concat_tables(
        [old.append_column("x", pa.nulls(old.num_rows, pa.string())), extra]
    )
    assert_same_rows(rows, expected)
    assert [p["numInputRows"] for p in data_batches(q)] == [ROWS, ROWS, ROWS]


@pytest.mark.slow
def test_metadata_commit_between_runs(spark: Any, tmp_path: Any, stop_queries: None) -> None:
    """A query restarted after an ``add_columns`` commit delivers only the rows appended
    after its last batch (into a CarbonLite sink, with the columns it was started with)."""
    path, sink, ck = str(tmp_path / "t"), str(tmp_path / "sink"), str(tmp_path / "ck")
    chunks = make_table(path, 2, separate_writers=True)

    def run() -> Any:
        return finish(
            spark.readStream.format("carbonlite")
            .schema(SOURCE_DDL)
            .load(path)
            .writeStream.format("carbonlite")
            .option("checkpointLocation", ck)
            .trigger(availableNow=True)
            .start(sink)
        )

    run()
    assert_same_rows(open_table(sink).to_arrow(), pa.concat_tables(chunks), context="run 1")
    t = open_table(path)
    t.add_columns(pa.field("x", pa.string()))
    t.append(source_rows(500, ROWS).append_column("x", pa.array(["new"] * ROWS)))
    q = run()
    assert [p["numInputRows"] for p in data_batches(q)] == [ROWS]
    expected = pa.concat_tables([*chunks, source_rows(500, ROWS)])
    assert_same_rows(open_table(sink).to_arrow(), expected, context="run 2")


def test_starting_version_number(spark: Any, tmp_path: Any, stop_queries: None) -> None:
    path = str(tmp_path / "t")
    chunks = make_table(path, 3, separate_writers=False)  # versions 1, 2, 3
    _, rows = read_into_memory(spark, path, startingVersion=2)
    assert_same_rows(rows, pa.concat_tables(chunks[1:]))


@pytest.mark.parametrize("start", [pytest.param("latest", marks=pytest.mark.slow), "default"])
def test_starting_version_latest_and_default(
    spark: Any, tmp_path: Any, start: str, stop_queries: None
) -> None:
    """``latest``: only commits made after the query started. Default: the table as it was at
    the start (a snapshot), then every later commit."""
    path, sink, ck = str(tmp_path / "t"), str(tmp_path / "sink"), str(tmp_path / "ck")
    chunks = make_table(path, 2, separate_writers=False)

    def run() -> Any:
        reader = spark.readStream.format("carbonlite")
        if start == "latest":
            reader = reader.option("startingVersion", "latest")
        return finish(
            reader.load(path)
            .writeStream.format("carbonlite")
            .option("checkpointLocation", ck)
            .trigger(availableNow=True)
            .start(sink)
        )

    first = run()
    seen = [] if start == "latest" else chunks
    assert sum(p["numInputRows"] for p in first.recentProgress) == sum(c.num_rows for c in seen)
    later = source_rows(900, 7)
    open_table(path).append(later)
    run()
    assert_same_rows(open_table(sink).to_arrow(), pa.concat_tables([*seen, later]))


@pytest.mark.parametrize("skip", [False, True])
def test_overwrite_commit_in_stream(
    spark: Any, tmp_path: Any, skip: bool, stop_queries: None
) -> None:
    path = str(tmp_path / "t")
    t = create_table(path, SOURCE_SCHEMA)
    before, replaced, after = source_rows(0, 10), source_rows(100, 10), source_rows(200, 10)
    t.append(before)
    t.overwrite(replaced)
    t.append(after)
    if not skip:
        with pytest.raises(CarbonLiteError, match="skipChangeCommits=true") as info:
            read_into_memory(spark, path, startingVersion=1)
        assert "version 2" in str(info.value) and "removed rows" in str(info.value)
        return
    _, rows = read_into_memory(spark, path, startingVersion=1, skipChangeCommits="true")
    assert_same_rows(rows, pa.concat_tables([before, after]))


@pytest.mark.slow
def test_read_while_a_writer_appends(spark: Any, tmp_path: Any, stop_queries: None) -> None:
    """A Python writer commits into the table while the stream reads it with processing-time
    triggers; once the writer is done and the stream caught up, every row arrived once."""
    path = str(tmp_path / "t")
    t = create_table(path, SOURCE_SCHEMA, properties={"blocklet_max_rows": "8"})
    t.append(source_rows(0, 20))
    name = memory_name()
    q = (
        spark.readStream.format("carbonlite")
        .option("maxFilesPerTrigger", 2)
        .load(path)
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    wait_until(lambda: bool(data_batches(q)), what="the first batch")
    errors: list[BaseException] = []

    def append() -> None:
        try:
            writer = open_table(path)
            for n in range(1, 13):
                writer.append(source_rows(n * 100, 15 + n))
                time.sleep(0.15)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=append)
    thread.start()
    thread.join(120)
    assert not errors, errors
    q.processAllAvailable()
    q.stop()
    assert q.exception() is None
    rows = spark.sql(f"select * from {name}").toArrow()
    spark.catalog.dropTempView(name)
    assert_same_rows(rows, open_table(path).to_arrow())
    assert rows.num_rows == 20 + sum(15 + n for n in range(1, 13))
    assert len(data_batches(q)) >= 3, "the stream did not read while the writer was appending"


def compacted_table(path: str) -> pa.Table:
    """Three appends of 40 rows in blocklets of 10, handed off: one sorted file of 12
    blocklets, which the starting snapshot reads as one unit."""
    properties = {"blocklet_max_rows": "10", "handoff_blocklet_rows": "10"}
    t = create_table(path, SOURCE_SCHEMA, properties=properties)
    chunks = [source_rows(n * 40, 40) for n in range(3)]
    for chunk in chunks:
        t.append(chunk)
    t.finish_streaming()
    assert t.handoff().rows == 120
    files = list(open_table(path).snapshot().iter_files())
    assert [(seg.status, f.num_blocklets) for seg, f in files] == [("SUCCESS", 12)]
    return pa.concat_tables(chunks)


@pytest.mark.parametrize(
    ("option", "value", "batches"),
    [
        pytest.param("maxRowsPerTrigger", 25, [25] * 4 + [20], id="rows"),
        pytest.param("maxFilesPerTrigger", 1, [120], id="files"),
    ],
)
def test_limits_hold_inside_a_compacted_file(
    spark: Any, tmp_path: Any, option: str, value: int, batches: list[int], stop_queries: None
) -> None:
    """The rows limit cuts a unit between rows, inside a blocklet (blocklets of 10 rows here);
    maxFilesPerTrigger still counts whole units."""
    path = str(tmp_path / "t")
    expected = compacted_table(path)
    q, rows = read_into_memory(spark, path, **{option: value})
    assert_same_rows(rows, expected)
    assert [p["numInputRows"] for p in data_batches(q)] == batches


@pytest.mark.parametrize(
    "option",  # 6-7 s each: the slow tier (test_stream_offsets.py keeps both limits' rules)
    [pytest.param(o, marks=pytest.mark.slow) for o in ("maxRowsPerTrigger", "maxBytesPerTrigger")],
)
def test_limit_inside_a_blocklet_and_restart(
    spark: Any, tmp_path: Any, option: str, stop_queries: None
) -> None:
    """A restarted query resumes inside the blocklet where its last batch ended: every row
    once, every batch within the limit."""
    path, sink, ck = str(tmp_path / "t"), str(tmp_path / "sink"), str(tmp_path / "ck")
    expected = compacted_table(path)
    blocklets = [
        (b.num_rows, b.length)
        for _, f in open_table(path).snapshot().iter_files()
        for b in f.blocklets
    ]
    # 23 rows: every batch ends inside a blocklet of 10; bytes: 2.3 blocklets (two batches of
    # 2.5 would end on a blocklet's end)
    limit = 23 if option == "maxRowsPerTrigger" else blocklets[0][1] * 23 // 10

    def run(max_batches: int | None) -> Any:
        name = memory_name() if max_batches else None
        reader = spark.readStream.format("carbonlite").option(option, limit)
        writer = reader.load(path).writeStream.format("carbonlite").option("checkpointLocation", ck)
        if name is None:
            return finish(writer.trigger(availableNow=True).start(sink))
        q = writer.trigger(processingTime="100 milliseconds").start(sink)
        wait_until(lambda: len(data_batches(q)) >= max_batches, what=f"{max_batches} batches")
        q.stop()
        return q

    first = run(2)
    sizes = [p["numInputRows"] for p in data_batches(first)]
    assert 0 < sum(sizes) < 120 and sum(sizes) % 10, f"{sizes}: not stopped inside a blocklet"
    second = run(None)
    sizes += [p["numInputRows"] for p in data_batches(second)]
    assert sum(sizes) == 120
    if option == "maxRowsPerTrigger":
        assert max(sizes) == limit
    else:
        assert max(batch_bytes(sizes, blocklets)) <= limit
    assert_same_rows(open_table(sink).to_arrow(), expected)


@pytest.mark.slow
def test_starting_timestamp(spark: Any, tmp_path: Any, stop_queries: None) -> None:
    """startingTimestamp: the changes committed at or after it (not a snapshot)."""
    path = str(tmp_path / "t")
    chunks = make_table(path, 3, separate_writers=False)  # versions 1, 2, 3
    stamps = {h.version: h.timestamp for h in open_table(path).history()}
    at_two = stamps[2].isoformat()
    _, rows = read_into_memory(spark, path, startingTimestamp=at_two)
    assert_same_rows(rows, pa.concat_tables(chunks[1:]))
    just_after = (stamps[2] + datetime.timedelta(milliseconds=1)).strftime("%Y-%m-%d %H:%M:%S.%f")
    _, rows = read_into_memory(spark, path, startingTimestamp=just_after)
    assert_same_rows(rows, chunks[2])
    _, rows = read_into_memory(spark, path, startingTimestamp="2000-01-01T00:00:00Z")
    assert_same_rows(rows, pa.concat_tables(chunks))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingVersion": 1, "startingTimestamp": "2000-01-01"}, "not both"),
        ({"startingVersion": 9}, "versions 0 to 3"),
        ({"startingTimestamp": "2999-01-01T00:00:00Z"}, "no version committed at or after"),
        ({"startingTimestamp": "yesterday"}, "is not a timestamp"),
    ],
    ids=["both", "no-such-version", "future", "not-a-time"],
)
def test_bad_starting_position(
    spark: Any, tmp_path: Any, options: dict[str, Any], message: str, stop_queries: None
) -> None:
    path = str(tmp_path / "t")
    make_table(path, 3, separate_writers=False)
    with pytest.raises(Exception, match=message):
        read_into_memory(spark, path, **options)


# --- the default start while a writer appends (issue 24) ---------------------------------------

START_ROWS = 1_000  # the table's rows when the writer starts
STEP = 10  # rows per writer commit


class Appender:
    """A thread committing STEP rows of the next ids every 30 ms until stopped. Tests stop it
    on what the stream did (its progress, its end), never after a fixed time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.commits = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="appender", daemon=True)

    def _run(self) -> None:
        try:
            writer = open_table(self.path)
            while not self._stop.is_set():
                writer.append(source_rows(START_ROWS + self.commits * STEP, STEP))
                self.commits += 1
                time.sleep(0.03)
        except BaseException as exc:  # reported by the test thread
            self.errors.append(exc)

    def start(self, commits: int = 3) -> Appender:
        """Start, and return once ``commits`` commits are in."""
        self._thread.start()
        wait_until(lambda: self.commits >= commits or bool(self.errors), what="first commits")
        return self

    def stop(self) -> int:
        """Stop; the table's row count."""
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the appender did not stop"
        assert not self.errors, self.errors
        return START_ROWS + self.commits * STEP


@pytest.mark.slow
def test_default_start_while_a_writer_appends(
    spark: Any, tmp_path: Any, stop_queries: None
) -> None:
    """Processing-time triggers, default start, a commit every 30 ms while the query starts
    and runs its first batches: the snapshot at the start and every later commit arrive,
    each row once (Spark asks initialOffset twice as the query starts)."""
    path = str(tmp_path / "t")
    create_table(path, SOURCE_SCHEMA).append(source_rows(0, START_ROWS))
    appender = Appender(path).start()
    name = memory_name()
    q = (
        spark.readStream.format("carbonlite")
        .load(path)
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: len(data_batches(q)) >= 3 or not q.isActive, what="three batches")
    finally:
        total = appender.stop()
    q.processAllAvailable()
    q.stop()
    assert q.exception() is None
    assert ids_delivered(spark, name) == list(range(total))


@pytest.mark.parametrize("feed", [False, True], ids=["rows", "changes"])
def test_default_start_available_now_while_a_writer_appends(
    spark: Any, tmp_path: Any, feed: bool, stop_queries: None
) -> None:
    """availableNow, default start, a commit every 30 ms until the query ends: it delivers
    the table as it was when it started (at least) and the commits after that it took, each
    row once: the rows of one version."""
    path = str(tmp_path / "t")
    create_table(path, SOURCE_SCHEMA).append(source_rows(0, START_ROWS))
    appender = Appender(path).start()
    name = memory_name()
    before = START_ROWS + appender.commits * STEP
    q = (
        spark.readStream.format("carbonlite")
        .option("readChangeFeed", str(feed).lower())
        .load(path)
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    try:
        finish(q)
    finally:
        appender.stop()
    ids = ids_delivered(spark, name)
    assert len(ids) >= before, f"{len(ids)} rows delivered, the table had {before} at the start"
    assert ids == list(range(len(ids))), "not the rows of one version, each once"


@pytest.mark.slow
def test_restart_replaying_batch_zero_reads_its_rows_again(
    spark: Any, tmp_path: Any, stop_queries: None
) -> None:
    """A query restarted after batch 0 was planned (offsets/0) but not committed replays it:
    Spark pairs a new reader's initialOffset with the end in the checkpoint. The table moved
    in between; batch 0 still reads the snapshot the query started from."""
    path, out, ck = str(tmp_path / "t"), tmp_path / "batches", tmp_path / "ck"
    t = create_table(path, SOURCE_SCHEMA)
    t.append(source_rows(0, 100))
    t.append(source_rows(100, 30))
    out.mkdir()

    def save(df: Any, batch_id: int) -> None:
        ids = sorted(r.id for r in df.select("id").collect())
        (out / f"{batch_id}.json").write_text(json.dumps(ids))

    def run() -> Any:
        return finish(
            spark.readStream.format("carbonlite")
            .load(path)
            .writeStream.foreachBatch(save)
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )

    run()
    assert json.loads((out / "0.json").read_text()) == list(range(130))
    for name in ("commits", "offsets"):  # as if the driver died right after offsets/0
        for f in (ck / name).iterdir():
            if (name, f.name) != ("offsets", "0"):
                f.unlink()
    (out / "0.json").unlink()
    t.append(source_rows(130, 20))
    run()
    assert json.loads((out / "0.json").read_text()) == list(range(130)), "batch 0 replayed"
    assert json.loads((out / "1.json").read_text()) == list(range(130, 150))


@pytest.mark.slow
def test_checkpoint_of_a_recreated_table_is_refused(
    spark: Any, tmp_path: Any, stop_queries: None
) -> None:
    """The table was deleted and re-created at the same path between two runs of a query:
    the checkpoint's offsets belong to the old table, and the query fails naming both ids and
    the way out, instead of delivering nothing."""
    path, ck = str(tmp_path / "t"), str(tmp_path / "ck")
    old = create_table(path, SOURCE_SCHEMA)
    old.append(source_rows(0, 20))

    def run() -> Any:
        return finish(
            spark.readStream.format("carbonlite")
            .load(path)
            .writeStream.format("noop")
            .option("checkpointLocation", ck)
            .trigger(availableNow=True)
            .start()
        )

    run()
    shutil.rmtree(path)
    new = create_table(path, SOURCE_SCHEMA)
    new.append(source_rows(0, 50))
    with pytest.raises(TableIdMismatchError) as info:
        run()
    message = str(info.value)
    assert old.table_id in message and new.table_id in message
    assert "new checkpointLocation" in message
