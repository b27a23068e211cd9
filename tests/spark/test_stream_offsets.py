"""Stream offsets (carbonlite/spark/offsets.py), driven through the reader without Spark: they
are plain JSON, name their table and the query's start, refuse a table that is not the one
they were made in, and offsets of the previous version (without those fields) still work."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pyarrow.compute as pc
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

import carbonlite as cl
from carbonlite.errors import TableIdMismatchError
from carbonlite.spark.change_feed import CarbonLiteChangeFeedReader
from carbonlite.spark.options import SparkOptions
from carbonlite.spark.stream_source import CarbonLiteStreamReader
from tests.support.log_model import SCHEMA, rows


def reader_of(path: str, *, feed: bool = False) -> CarbonLiteStreamReader:
    kind = CarbonLiteChangeFeedReader if feed else CarbonLiteStreamReader
    return kind(SparkOptions({"path": path}), None)


def read_batch(
    reader: CarbonLiteStreamReader, start: dict[str, Any], end: dict[str, Any]
) -> list[int]:
    ids: list[int] = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            ids.extend(pc.cast(batch.column("id"), "int64").to_pylist())
    reader.commit(end)
    return sorted(ids)


def test_offsets_are_json_and_name_the_table_and_the_start(tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    table = cl.create_table(path, SCHEMA)
    table.append(rows(range(5)))  # version 1
    reader = reader_of(path)
    first = reader.initialOffset()
    table.append(rows(range(5, 8)))  # version 2: the start stays the snapshot at 1
    assert reader.initialOffset() == first
    assert first == {
        "version": 1,
        "index": 0,
        "blocklet": 0,
        "initial": True,
        "table_id": table.table_id,
        "start": {"version": 1, "initial": True},
    }
    end = reader.latestOffset(first, ReadAllAvailable())
    assert end == {**first, "version": 3, "initial": False}
    for offset in (first, end, reader.reportLatestOffset()):
        assert json.loads(json.dumps(offset)) == offset
    assert read_batch(reader, first, end) == list(range(8))


@pytest.mark.parametrize("feed", [False, True], ids=["rows", "changes"])
def test_offsets_of_a_recreated_table_are_refused(tmp_path: Any, feed: bool) -> None:
    """A query restarted from its checkpoint after the table was deleted and re-created at
    the same path: whatever Spark asks first (the next batch's end, or the partitions of the
    batch it replays), the source fails naming both ids and the way out."""
    path = str(tmp_path / "t")
    old = cl.create_table(path, SCHEMA)
    old.append(rows(range(5)))
    reader = reader_of(path, feed=feed)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    shutil.rmtree(path)
    new = cl.create_table(path, SCHEMA)
    new.append(rows(range(100, 103)))
    restarted = reader_of(path, feed=feed)
    calls = {
        "latestOffset": lambda: restarted.latestOffset(end, ReadAllAvailable()),
        "partitions": lambda: restarted.partitions(start, end),
        "commit": lambda: restarted.commit(end),
    }
    for name, call in calls.items():
        with pytest.raises(TableIdMismatchError) as info:
            call()
        message = str(info.value)
        assert old.table_id in message and new.table_id in message, name
        assert "new checkpointLocation" in message, name
        assert (info.value.checkpoint_table_id, info.value.table_id) == (old.table_id, new.table_id)


def test_offsets_of_the_previous_version_are_accepted(tmp_path: Any) -> None:
    """Offsets as the previous version wrote them (no table id, no start; the oldest without
    ``blocklet``): a restarted query continues from them exactly once, and the offsets it
    writes from then on name the table."""
    path = str(tmp_path / "t")
    table = cl.create_table(path, SCHEMA)
    table.append(rows(range(5)))  # version 1
    table.append(rows(range(5, 9)))  # version 2
    reader = reader_of(path)
    start = {"version": 1, "index": 0, "initial": True}
    end = {"version": 2, "index": 0, "blocklet": 0, "initial": False}
    assert read_batch(reader, start, end) == list(range(5))  # replayed batch: the snapshot
    table.append(rows(range(9, 12)))  # version 3
    later = reader.latestOffset(end, ReadAllAvailable())
    assert later == {
        "version": 4,
        "index": 0,
        "blocklet": 0,
        "initial": False,
        "table_id": table.table_id,
    }
    assert read_batch(reader, end, later) == list(range(5, 12))
    assert reader.latestOffset(later, ReadAllAvailable()) == later


def test_batch_zero_replayed_by_a_new_reader_reads_the_start_it_was_planned_from(
    tmp_path: Any,
) -> None:
    """The restart Spark makes when batch 0 has offsets but no commit: a new reader's
    initialOffset (a later snapshot) with the old end. Batch 0 reads the first snapshot."""
    path = str(tmp_path / "t")
    table = cl.create_table(path, SCHEMA)
    table.append(rows(range(5)))
    first = reader_of(path)
    end = first.latestOffset(first.initialOffset(), ReadAllAvailable())
    table.append(rows(range(5, 7)))
    table.append(rows(range(7, 9)))
    restarted = reader_of(path)
    again = restarted.initialOffset()
    assert again["version"] == 3 and end["version"] == 2
    assert read_batch(restarted, again, end) == list(range(5))
    rest = restarted.latestOffset(end, ReadAllAvailable())
    assert read_batch(restarted, end, rest) == list(range(5, 9))


def test_available_now_includes_its_start(tmp_path: Any) -> None:
    """Spark calls prepareForTriggerAvailableNow before initialOffset: commits between the two
    cannot leave the start past what is available now (the query then read nothing)."""
    path = str(tmp_path / "t")
    table = cl.create_table(path, SCHEMA)
    table.append(rows(range(5)))
    reader = reader_of(path)
    reader.prepareForTriggerAvailableNow()
    table.append(rows(range(5, 7)))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert read_batch(reader, start, end) == list(range(5))
    assert reader.latestOffset(end, ReadAllAvailable()) == end


def big_blocklet_table(path: str) -> cl.Table:
    """Three appends of 1,000 rows handed off into blocklets of 1,000 rows (a compacted
    table's big blocklets, scaled down), then every 7th row deleted: deletion vectors inside
    the blocklets."""
    properties = {"blocklet_max_rows": "1000", "handoff_blocklet_rows": "1000"}
    table = cl.create_table(path, SCHEMA, properties=properties)
    for n in range(3):
        table.append(rows(range(n * 1000, (n + 1) * 1000)))
    table.finish_streaming()
    table.handoff()
    table.delete(pc.field("id").isin(list(range(0, 3000, 7))))
    blocklets = [b.num_rows for _, f in table.snapshot().iter_files() for b in f.blocklets]
    assert blocklets == [1000] * 3
    return table


def counted(partitions: list[Any]) -> tuple[int, int]:
    """What a batch counts against the limits: its rows (deleted ones included) and bytes (a
    row's share of its blocklet's stored bytes, rounded up per blocklet)."""
    nrows = nbytes = 0
    for p in partitions:
        for split in p.splits:
            for i, b in enumerate(split.blocklets):
                lo, hi = split.row_range(i)
                nrows += hi - lo
                nbytes += -(-b.length * (hi - lo) // b.num_rows)
    return nrows, nbytes


@pytest.mark.parametrize(
    ("option", "limit"),
    [("maxRowsPerTrigger", 300), ("maxBytesPerTrigger", 0)],  # bytes: set from the table
    ids=["rows", "bytes"],
)
def test_limits_hold_inside_a_blocklet_with_deleted_rows(
    tmp_path: Any, option: str, limit: int
) -> None:
    """Batches end inside blocklets (offsets carry a row), each within the limit; the live
    rows arrive exactly once, also through a new reader restarted from an offset inside a
    blocklet (as Spark restarts a query from its checkpoint)."""
    path = str(tmp_path / "t")
    table = big_blocklet_table(path)
    if option == "maxBytesPerTrigger":  # a third of a blocklet
        limit = min(b.length for _, f in table.snapshot().iter_files() for b in f.blocklets) // 3
    options = SparkOptions({"path": path, option: str(limit)})
    reader = CarbonLiteStreamReader(options, None)
    start = reader.initialOffset()
    delivered: list[int] = []
    ends: list[dict[str, Any]] = []
    while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) != start:
        assert json.loads(json.dumps(end)) == end
        nrows, nbytes = counted(reader.partitions(start, end))
        assert 0 < (nrows if option == "maxRowsPerTrigger" else nbytes) <= limit, (nrows, nbytes)
        delivered += read_batch(reader, start, end)
        ends.append(end)
        if len(ends) == 2:  # a restart: a new reader goes on from the checkpointed offset
            assert end.get("row"), f"the restart is not inside a blocklet: {end}"
            reader = CarbonLiteStreamReader(options, None)
        start = end
    assert sorted(delivered) == [i for i in range(3000) if i % 7]
    assert len(ends) >= 7, f"{len(ends)} batches for 3 blocklets of 1,000 rows"
