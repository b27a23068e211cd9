"""Spark with schema evolution (issue 27): streams reaching a version that renames, drops or
widens a column, batch reads after such changes, the sink writing across them, and
CarbonTable's row changes under new names.

The stream source's part is driven first the way Spark drives it, without Spark (fast, every
case exact), then end to end through running queries.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

import carbonlite as cl
from carbonlite.errors import SchemaChangedError
from carbonlite.spark.change_feed import CarbonLiteChangeFeedReader
from carbonlite.spark.options import SparkOptions
from carbonlite.spark.stream_source import CarbonLiteStreamReader
from tests.spark.streams import finish, wait_until

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string()), ("n", pa.int32())])
ROWS = 30


def rows(first: int, count: int = ROWS, *, names: tuple[str, ...] = ("id", "k", "n")) -> pa.Table:
    ids = list(range(first, first + count))
    columns = {
        "id": pa.array(ids, pa.int64()),
        "k": pa.array([f"k{i % 3}" for i in ids], pa.string()),
        "n": pa.array([i * 10 for i in ids], pa.int32()),
    }
    return pa.table([columns[c] for c in ("id", "k", "n")], names=list(names))


CHANGES: dict[str, tuple[Callable[[cl.Table], Any], Callable[[int], pa.Table], str]] = {
    # the change, the rows appended after it, what the error says
    "rename": (
        lambda t: t.rename_column("k", "kind"),
        lambda first: rows(first, names=("id", "kind", "n")),
        "column 'k' was renamed to 'kind' at version 3",
    ),
    "drop": (
        lambda t: t.drop_columns(["k"]),
        lambda first: rows(first).drop_columns(["k"]),
        "column 'k' was dropped at version 3",
    ),
    "widen": (
        lambda t: t.widen_column("n", pa.int64()),
        lambda first: rows(first).set_column(2, "n", rows(first).column("n").cast(pa.int64())),
        "column 'n' was widened from int32 to int64 at version 3",
    ),
}


def reader_of(path: str, *, feed: bool = False, **options: str) -> CarbonLiteStreamReader:
    kind = CarbonLiteChangeFeedReader if feed else CarbonLiteStreamReader
    return kind(SparkOptions({"path": path, **options}), None)


class Query:
    """A stream query as Spark runs it, on a reader: its committed offset and what it got."""

    def __init__(
        self,
        reader: CarbonLiteStreamReader,
        limit: ReadLimit,
        offset: dict[str, Any] | None = None,
    ) -> None:
        self.reader = reader
        self.limit = limit
        self.offset = reader.initialOffset() if offset is None else offset
        self.got: list[pa.Table] = []

    def restarted(self, reader: CarbonLiteStreamReader) -> Query:
        """The same query restarted from its checkpoint: a new reader, the committed offset
        (Spark asks no initialOffset then)."""
        return Query(reader, self.limit, self.offset)

    def catch_up(self) -> None:
        """Batches until the reader has nothing new."""
        while True:
            end = self.reader.latestOffset(self.offset, self.limit)
            if end == self.offset:
                return
            batches = [
                b for p in self.reader.partitions(self.offset, end) for b in self.reader.read(p)
            ]
            self.reader.commit(end)
            self.offset = end
            got = pa.Table.from_batches(batches)
            self.got.append(got.drop_columns([c for c in got.column_names if c.startswith("_")]))

    def ids(self) -> list[int]:
        return sorted(i for t in self.got for i in t.column("id").to_pylist())

    def rows(self) -> list[dict[str, Any]]:
        return sorted((r for t in self.got for r in t.to_pylist()), key=lambda r: r["id"])


# --- the stream source, driven as Spark drives it ----------------------------------------------


@pytest.mark.parametrize("feed", [False, True], ids=["rows", "change-feed"])
@pytest.mark.parametrize("limit", [ReadAllAvailable(), ReadMaxRows(20)], ids=["all", "rows-20"])
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_stream_stops_before_a_schema_change_and_a_restart_reads_on(
    tmp_path: Any, change: str, limit: ReadLimit, feed: bool
) -> None:
    """v1: rows 0-29 (the start); v2: rows 30-59; v3: the change; v4: rows 60-89 in the new
    schema. The query delivers v1 and v2 (its batches end before v3), then fails naming v3;
    restarted (a new reader, the committed offset) it goes on with the new schema."""
    path = str(tmp_path / "t")
    apply, after, message = CHANGES[change]
    t = cl.create_table(path, SCHEMA)
    t.append(rows(0))
    query = Query(reader_of(path, feed=feed), limit)
    query.catch_up()
    t.append(rows(30))
    apply(t)
    t.append(after(60))
    with pytest.raises(SchemaChangedError, match=message) as failed:
        query.catch_up()
    assert failed.value.version == 3
    assert "restart the query to read on with the new schema" in str(failed.value)
    assert query.ids() == list(range(60)), "every row before the change, exactly once"
    assert all(g.column_names == SCHEMA.names for g in query.got)
    assert query.offset["version"] == 3 and query.offset["index"] == 0

    again = query.restarted(reader_of(path, feed=feed))
    again.catch_up()
    assert again.rows() == after(60).to_pylist()


@pytest.mark.parametrize("feed", [False, True], ids=["rows", "change-feed"])
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_query_started_before_a_change_reads_older_files_with_the_new_layout(
    tmp_path: Any, change: str, feed: bool
) -> None:
    """A query (re)started after the change reading from before it (startingVersion=1): the
    rows written before the change come in the new schema (renamed, dropped, cast up)."""
    path = str(tmp_path / "t")
    apply, after, _ = CHANGES[change]
    t = cl.create_table(path, SCHEMA)
    t.append(rows(0))
    t.append(rows(30))
    apply(t)
    t.append(after(60))
    query = Query(reader_of(path, feed=feed, startingVersion="1"), ReadAllAvailable())
    query.catch_up()
    assert query.rows() == after(0).to_pylist() + after(30).to_pylist() + after(60).to_pylist()


def test_added_column_the_stream_goes_on_without_it(tmp_path: Any) -> None:
    """add_columns (with a default or without) is no schema change for a running stream: its
    schema stays the one it started with, and it reads on."""
    path = str(tmp_path / "t")
    t = cl.create_table(path, SCHEMA)
    t.append(rows(0))
    query = Query(reader_of(path), ReadAllAvailable())
    query.catch_up()
    t.add_columns(pa.field("x", pa.int64()), defaults={"x": 7})
    t.append(rows(30).append_column("x", pa.array([1] * ROWS, pa.int64())))
    query.catch_up()
    assert query.rows() == rows(0).to_pylist() + rows(30).to_pylist()
    again = Query(reader_of(path, startingVersion="1"), ReadAllAvailable())  # a new query
    again.catch_up()
    assert [r["x"] for r in again.rows()] == [7] * ROWS + [1] * ROWS


@pytest.mark.parametrize("feed", [False, True], ids=["rows", "change-feed"])
def test_a_user_schema_stops_only_at_changes_of_its_columns(tmp_path: Any, feed: bool) -> None:
    """A query reading (id, n) by a user schema crosses a rename of k, and stops at a widening
    of n."""
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType

    path = str(tmp_path / "t")
    t = cl.create_table(path, SCHEMA)
    t.append(rows(0))
    user = StructType([StructField("id", LongType()), StructField("n", IntegerType())])
    kind = CarbonLiteChangeFeedReader if feed else CarbonLiteStreamReader
    query = Query(kind(SparkOptions({"path": path}), user), ReadAllAvailable())
    query.catch_up()
    t.rename_column("k", "kind")  # version 2
    t.append(rows(30, names=("id", "kind", "n")))
    query.catch_up()
    assert query.rows() == rows(0, 60).select(["id", "n"]).to_pylist()
    t.widen_column("n", pa.int64())  # version 4
    with pytest.raises(
        SchemaChangedError, match="'n' was widened from int32 to int64 at version 4"
    ):
        query.catch_up()


@pytest.mark.parametrize("feed", [False, True], ids=["rows", "change-feed"])
def test_available_now_stops_before_a_change_in_what_it_reads(tmp_path: Any, feed: bool) -> None:
    """availableNow (startingVersion=1) fixes its end after a rename that landed once the
    reader was made: it delivers the versions before the rename, then fails naming it."""
    path = str(tmp_path / "t")
    t = cl.create_table(path, SCHEMA)
    t.append(rows(0))
    t.append(rows(30))
    reader = reader_of(path, feed=feed, startingVersion="1")
    t.rename_column("k", "kind")  # version 3
    t.append(rows(60, names=("id", "kind", "n")))
    reader.prepareForTriggerAvailableNow()
    query = Query(reader, ReadMaxRows(25))
    with pytest.raises(SchemaChangedError, match="'k' was renamed to 'kind' at version 3"):
        query.catch_up()
    assert query.ids() == list(range(60))
    again = query.restarted(reader_of(path, feed=feed))
    again.reader.prepareForTriggerAvailableNow()
    again.catch_up()
    assert again.ids() == list(range(60, 90))


@pytest.mark.parametrize("feed", [False, True], ids=["rows", "change-feed"])
def test_a_change_before_the_query_starts_fails_it_at_once(tmp_path: Any, feed: bool) -> None:
    """A rename between the reader's creation and the query's start (availableNow fixes what
    it reads after the rename): nothing is delivered, the error names the version, and the
    restarted query starts with the new schema."""
    path = str(tmp_path / "t")
    t = cl.create_table(path, SCHEMA)
    t.append(rows(0))
    reader = reader_of(path, feed=feed)
    t.rename_column("k", "kind")
    reader.prepareForTriggerAvailableNow()
    with pytest.raises(SchemaChangedError, match="column 'k' was renamed to 'kind' at version 2"):
        Query(reader, ReadAllAvailable()).catch_up()
    again = reader_of(path, feed=feed)
    again.prepareForTriggerAvailableNow()
    query = Query(again, ReadAllAvailable())
    query.catch_up()
    assert query.rows() == rows(0, names=("id", "kind", "n")).to_pylist()


# --- running queries -----------------------------------------------------------------------------


def _saved(out: Any) -> dict[int, list[dict[str, Any]]]:
    """What foreachBatch saved, by batch id (a replayed batch overwrites its file)."""
    return {int(f.stem): json.loads(f.read_text()) for f in out.iterdir()}


@pytest.mark.parametrize(
    "feed", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["rows", "change-feed"]
)
def test_running_query_fails_at_a_rename_and_its_restart_reads_on(
    spark: Any, tmp_path: Any, feed: bool, stop_queries: None
) -> None:
    """A query running when a rename lands delivers every row before it once, then fails
    naming the version and the change; restarted from its checkpoint (a new DataFrame: the
    new names) it delivers the rows after it, with the new name."""
    path, out, ck = str(tmp_path / "t"), tmp_path / "batches", str(tmp_path / "ck")
    out.mkdir()
    t = cl.create_table(path, SCHEMA)
    t.append(rows(0))

    def save(df: Any, batch_id: int) -> None:
        data = [r.asDict() for r in df.collect()]
        (out / f"{batch_id}.json").write_text(json.dumps(data, default=str))

    def start(**trigger: Any) -> Any:
        reader = spark.readStream.format("carbonlite")
        if feed:
            reader = reader.option("readChangeFeed", "true")
        return (
            reader.load(path)
            .writeStream.foreachBatch(save)
            .option("checkpointLocation", ck)
            .trigger(**trigger)
            .start()
        )

    def delivered() -> list[int]:
        return sorted(r["id"] for batch in _saved(out).values() for r in batch)

    q = start(processingTime="0.2 seconds")
    wait_until(lambda: delivered() == list(range(ROWS)), what="the first rows")
    t.append(rows(30))  # version 2
    t.rename_column("k", "kind")  # version 3
    t.append(rows(60, names=("id", "kind", "n")))  # version 4
    with pytest.raises(cl.SchemaChangedError) as failed:  # itself, not Spark's wrapper
        finish(q)
    message = str(failed.value)
    assert message.startswith("version 3 of ") or "version 3" in message.splitlines()[0]
    assert "column 'k' was renamed to 'kind' at version 3" in message
    assert "restart the query to read on with the new schema" in message
    assert delivered() == list(range(60)), "every row before the rename, exactly once"
    assert all("k" in r and "kind" not in r for b in _saved(out).values() for r in b)

    before = set(_saved(out))
    finish(start(availableNow=True))
    new = {b: rows_ for b, rows_ in _saved(out).items() if b not in before}
    assert delivered() == list(range(90))
    after = sorted((r for b in new.values() for r in b), key=lambda r: r["id"])
    assert [r["id"] for r in after] == list(range(60, 90))
    assert [r["kind"] for r in after] == rows(60).column("k").to_pylist()
    assert all("k" not in r for r in after)


# --- batch reads ---------------------------------------------------------------------------------


def _evolved(path: str) -> cl.Table:
    """v1: rows 0-9 (id, k, n int32, gone string); v2: rename k -> kind; v3: drop gone;
    v4: widen n to int64; v5: add x int64 default 7; v6: rows 10-19 with every column."""
    schema = pa.schema([*SCHEMA, ("gone", pa.string())])
    t = cl.create_table(path, schema)
    t.append(rows(0, 10).append_column("gone", pa.array(["g"] * 10)))
    t.rename_column("k", "kind")
    t.drop_columns(["gone"])
    t.widen_column("n", pa.int64())
    t.add_columns(pa.field("x", pa.int64()), defaults={"x": 7})
    new = rows(10, 10, names=("id", "kind", "n"))
    new = new.set_column(2, "n", new.column("n").cast(pa.int64()))
    t.append(new.append_column("x", pa.array(range(10), pa.int64())))
    return t


def _sorted_rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.orderBy("id").collect()]


def test_batch_read_sees_current_names_types_and_defaults(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    _evolved(path)
    df = spark.read.format("carbonlite").load(path)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("id", "bigint"),
        ("kind", "string"),
        ("n", "bigint"),
        ("x", "bigint"),
    ]
    got = _sorted_rows(df)
    assert [r["id"] for r in got] == list(range(20))
    assert [r["kind"] for r in got] == [f"k{i % 3}" for i in range(20)]
    assert [r["n"] for r in got] == [i * 10 for i in range(20)]
    assert [r["x"] for r in got] == [7] * 10 + list(range(10))

    old = spark.read.format("carbonlite").option("versionAsOf", 1).load(path)
    assert old.columns == ["id", "k", "n", "gone"]
    assert [r["k"] for r in _sorted_rows(old)] == [f"k{i % 3}" for i in range(10)]
    assert [r["gone"] for r in _sorted_rows(old)] == ["g"] * 10
    renamed = spark.read.format("carbonlite").option("versionAsOf", 2).load(path)
    assert renamed.columns == ["id", "kind", "n", "gone"]


def test_filters_on_a_renamed_column(spark: Any, tmp_path: Any) -> None:
    """The option filter, a pushed filter (filterPushdown) and SQL over a temporary view name
    the column by its new name; the rows written under the old name are found."""
    path = str(tmp_path / "t")
    _evolved(path)
    want = [i for i in range(20) if i % 3 == 1]
    by_option = spark.read.format("carbonlite").option("filter", '[["kind", "=", "k1"]]').load(path)
    assert [r["id"] for r in _sorted_rows(by_option)] == want
    pushed = (
        spark.read.format("carbonlite")
        .option("filterPushdown", "true")
        .load(path)
        .where("kind = 'k1' and n >= 0")
    )
    assert [r["id"] for r in _sorted_rows(pushed)] == want
    view = f"v_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TEMPORARY VIEW {view} USING carbonlite OPTIONS (path '{path}')")
    try:
        got = spark.sql(f"SELECT id, x FROM {view} WHERE kind = 'k1' ORDER BY id").collect()
        assert [r.id for r in got] == want
        assert [r.x for r in got] == [7 if i < 10 else i - 10 for i in want]
    finally:
        spark.catalog.dropTempView(view)


# --- the sink ------------------------------------------------------------------------------------


def _stream_into(spark: Any, source: str, sink: str, ck: str) -> Any:
    return finish(
        spark.readStream.format("carbonlite")
        .load(source)
        .writeStream.format("carbonlite")
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start(sink)
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.rename_column("k", "kind"), "column 'k' was renamed to 'kind' at version 2"),
        pytest.param(
            lambda t: t.drop_columns(["k"]),
            "column 'k' was dropped at version 2",
            marks=pytest.mark.slow,
        ),
    ],
    ids=["rename", "drop"],
)
def test_sink_refuses_a_dataframe_with_a_renamed_or_dropped_column(
    spark: Any, tmp_path: Any, change: Any, message: str, stop_queries: None
) -> None:
    """A query writing (id, k, n) ran once; k is renamed (or dropped) in the sink's table; the
    query's next run fails naming the change, and the table gets no commit."""
    source, sink, ck = str(tmp_path / "src"), str(tmp_path / "sink"), str(tmp_path / "ck")
    s = cl.create_table(source, SCHEMA)
    s.append(rows(0))
    _stream_into(spark, source, sink, ck)
    t = cl.open_table(sink)
    assert t.to_arrow().num_rows == ROWS
    change(t)
    version = t.refresh().version
    s.append(rows(30))
    with pytest.raises(cl.SchemaMismatchError) as failed:
        _stream_into(spark, source, sink, ck)
    text = str(failed.value)
    assert message in text
    assert "nothing was written" in text
    assert t.refresh().version == version
    assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(ROWS))


@pytest.mark.slow
def test_sink_writes_into_a_widened_column_and_fills_an_added_default(
    spark: Any, tmp_path: Any, stop_queries: None
) -> None:
    """The sink's n was widened to int64 and x added with default 7: a query writing
    (id, k, n int32) keeps writing; its rows read n cast up and x = 7."""
    source, sink, ck = str(tmp_path / "src"), str(tmp_path / "sink"), str(tmp_path / "ck")
    s = cl.create_table(source, SCHEMA)
    s.append(rows(0))
    _stream_into(spark, source, sink, ck)
    t = cl.open_table(sink)
    t.widen_column("n", pa.int64())
    t.add_columns(pa.field("x", pa.int64()), defaults={"x": 7})
    s.append(rows(30))
    _stream_into(spark, source, sink, ck)
    got = t.refresh().to_arrow().sort_by("id")
    assert got.schema.field("n").type == pa.int64()
    assert got.column("id").to_pylist() == list(range(60))
    assert got.column("n").to_pylist() == [i * 10 for i in range(60)]
    assert got.column("x").to_pylist() == [7] * 60  # before: the default read; after: written
    first_attempts_only(t)


def first_attempts_only(t: cl.Table) -> None:
    """Every part file the sink committed was written by its task's first attempt: no
    micro-batch failed a task and needed Spark's retry (this suite's session allows one, so
    a sink that fails every first attempt would still deliver its rows)."""
    snapshot = t.refresh().snapshot()
    parts = [f.path for s in snapshot.segments.values() for f in s.files.values()]
    assert parts and all(re.search(r"-a0-s[0-9a-f]{8}\.cblt$", p) for p in parts), parts


SINK_CHANGES: dict[str, Callable[[cl.Table], Any]] = {
    "add": lambda t: t.add_columns(pa.field("x", pa.int64()), defaults={"x": 7}),
    "widen": lambda t: t.widen_column("n", pa.int64()),
    "drop": lambda t: t.drop_columns(["extra"]),  # a column the stream does not write
}


@pytest.mark.parametrize(
    "change",
    # every change in the slow tier, one in the default tier (each restarts a query: 8-10 s)
    [c if c == "add" else pytest.param(c, marks=pytest.mark.slow) for c in sorted(SINK_CHANGES)],
)
def test_an_unpartitioned_sink_goes_on_after_a_schema_change_without_a_retry(
    spark: Any, tmp_path: Any, stop_queries: None, change: str
) -> None:
    """Issue 40 §3: a stopped query restarted after add_columns, widen_column or
    drop_columns on its unpartitioned sink writes every later micro-batch at the first
    attempt (its part files were named as before the change: the write refused its own
    earlier file's schema and only the retry, a new file, went through)."""
    source, sink, ck = str(tmp_path / "src"), str(tmp_path / "sink"), str(tmp_path / "ck")
    s = cl.create_table(source, SCHEMA)
    s.append(rows(0))
    t = cl.create_table(sink, SCHEMA.append(pa.field("extra", pa.string())))
    _stream_into(spark, source, sink, ck)
    SINK_CHANGES[change](t)
    for first in (30, 60):
        s.append(rows(first))
        _stream_into(spark, source, sink, ck)
    got = t.refresh().to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == list(range(90))
    first_attempts_only(t)


def test_a_rename_between_plan_and_commit_refuses_the_commit(tmp_path: Any) -> None:
    """The race the sink's driver lives with: planned before a rename of k, committed after
    (the driver API Spark's sink uses): refused, naming the rename; nothing committed."""
    from carbonlite.driver import commit_parts, plan_write
    from carbonlite.errors import SchemaMismatchError
    from carbonlite.writer.distributed import write_part

    path = str(tmp_path / "t")
    t = cl.create_table(path, SCHEMA)
    t.append(rows(0))
    plan = plan_write(t, overwrite=False)
    part = write_part(plan, rows(30).to_batches(), tag="race", partition=0, attempt=0)
    t.rename_column("k", "kind")
    version = t.refresh().version
    with pytest.raises(SchemaMismatchError, match="column 'k' was renamed to 'kind' at version 2"):
        commit_parts(
            plan, [part], txn=None, operation="WRITE", parameters={}, writer_id="race-driver"
        )
    assert t.refresh().version == version
    assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(ROWS))


# --- CarbonTable -------------------------------------------------------------------------------


def test_carbon_table_row_changes_use_the_new_names(spark: Any, tmp_path: Any) -> None:
    """After k -> kind and n widened: delete, update and merge name the present columns and
    change rows written before the changes and after them alike."""
    from carbonlite.spark import CarbonTable

    path = str(tmp_path / "t")
    t = cl.create_table(path, SCHEMA)
    t.append(rows(0, 10))
    t.rename_column("k", "kind")
    t.widen_column("n", pa.int64())
    new = rows(10, 10, names=("id", "kind", "n"))
    t.append(new.set_column(2, "n", new.column("n").cast(pa.int64())))
    table = CarbonTable.forPath(spark, path)
    table.delete("kind = 'k0'").collect()
    table.update("id >= 15", {"kind": "'late'", "n": "n + 1"}).collect()
    src = spark.createDataFrame([(1, "merged", 5), (100, "new", 6)], "id long, kind string, n long")
    (
        table.alias("t")
        .merge(src.alias("s"), "t.id = s.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    got = {r["id"]: (r["kind"], r["n"]) for r in t.refresh().to_arrow().to_pylist()}
    expected = {i: (f"k{i % 3}", i * 10) for i in range(20) if i % 3 != 0}
    expected.update({i: ("late", i * 10 + 1) for i in expected if i >= 15})
    expected.update({1: ("merged", 5), 100: ("new", 6)})
    assert got == expected
    assert t.schema.names == ["id", "kind", "n"]


def test_a_catalog_table_after_a_rename_says_to_register_it_again(
    spark: Any, tmp_path: Any
) -> None:
    """Spark's catalog keeps the schema a table was registered with: after a rename, a query
    by name fails naming the rename and the way out; registered again, it reads the present
    names (and a user schema with the old name fails the same way)."""
    from carbonlite.spark import register_table

    path = str(tmp_path / "t")
    t = cl.create_table(path, SCHEMA)
    t.append(rows(0, 5))
    name = f"t_{uuid.uuid4().hex[:8]}"
    register_table(spark, name, path)
    try:
        assert spark.sql(f"SELECT count(*) AS c FROM {name} WHERE k = 'k1'").first().c == 2
        t.rename_column("k", "kind")
        with pytest.raises(Exception) as failed:
            spark.sql(f"SELECT * FROM {name}").collect()
        text = str(failed.value)
        assert "column 'k' was renamed to 'kind' at version 2" in text
        assert "register_table again" in text
        register_table(spark, name, path)
        got = spark.sql(f"SELECT id FROM {name} WHERE kind = 'k1' ORDER BY id").collect()
        assert [r.id for r in got] == [1, 4]
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")
    with pytest.raises(cl.SchemaMismatchError) as failed:  # not Spark's AnalysisException
        spark.read.format("carbonlite").schema("id long, k string").load(path).collect()
    assert "column 'k' was renamed to 'kind' at version 2" in str(failed.value)


def test_merge_schema_adds_a_dataframes_new_columns(
    spark: Any, tmp_path: Any, stop_queries: None
) -> None:
    """Issue 40 §3: ``mergeSchema`` on a batch write and on a stream adds the DataFrame's new
    columns, as ``schema_mode="merge"`` does in Python (Delta's option); without it the write
    is refused and nothing is committed."""
    path = str(tmp_path / "t")
    t = cl.create_table(path, SCHEMA)
    t.append(rows(0, 3))
    wider = spark.createDataFrame([(10, "a", 1, 0.5)], "id long, k string, n int, score double")
    version = t.version
    with pytest.raises(
        cl.SchemaMismatchError, match=r"does not match.*\n.*column 'score' .* not in"
    ):
        wider.write.format("carbonlite").mode("append").save(path)
    assert t.refresh().version == version
    wider.write.format("carbonlite").option("mergeSchema", "true").mode("append").save(path)
    got = t.refresh().to_arrow().sort_by("id")
    assert got.schema.names == ["id", "k", "n", "score"]
    assert got.column("score").to_pylist() == [None, None, None, 0.5]

    source, ck = str(tmp_path / "src"), str(tmp_path / "ck")
    s = cl.create_table(source, pa.schema([*SCHEMA, ("score", pa.float64()), ("tag", pa.string())]))
    s.append(
        rows(20, 2)
        .append_column("score", pa.array([1.0, 2.0]))
        .append_column("tag", pa.array(["x", "y"]))
    )
    finish(
        spark.readStream.format("carbonlite")
        .load(source)
        .writeStream.format("carbonlite")
        .option("mergeSchema", "true")
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start(path)
    )
    got = t.refresh().to_arrow().sort_by("id")
    assert got.schema.names == ["id", "k", "n", "score", "tag"]
    assert got.column("tag").to_pylist() == [None] * 4 + ["x", "y"]
