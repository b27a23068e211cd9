"""Spark with schema evolution (issue 27): streams reaching a version that renames, drops or
widens a column, batch reads after such changes, the sink writing across them, and
CarbonTable's row changes under new names.

The stream source's part is driven first the way Spark drives it, without Spark (fast, every
case exact), then end to end through running queries.
"""

from __future__ import annotations

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

    def __init__(self, reader: CarbonLiteStreamReader, limit: ReadLimit) -> None:
        self.reader = reader
        self.limit = limit
        self.offset = reader.initialOffset()
        self.got: list[pa.Table] = []

    def restarted(self, reader: CarbonLiteStreamReader) -> Query:
        """The same query restarted from its checkpoint: a new reader, the committed offset."""
        query = Query.__new__(Query)
        query.reader, query.limit, query.offset, query.got = reader, self.limit, self.offset, []
        return query

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
    expected = pa.concat_tables([t.to_arrow(version=4)]).to_pylist()
    assert query.rows() == sorted(expected, key=lambda r: r["id"])
    assert query.rows()[:60] == after(0).to_pylist() + after(30).to_pylist()


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
    again = query.restarted(reader_of(path, startingVersion="1"))
    again.offset = again.reader.initialOffset()
    again.catch_up()
    assert [r["x"] for r in again.rows()] == [7] * ROWS + [1] * ROWS


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
