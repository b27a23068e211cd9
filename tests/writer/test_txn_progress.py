"""Transaction markers moved by compare-and-set (``AppendCommit.progress``): what a Kafka
ingester commits with its rows, one marker per partition, so two ingesters on one partition
can never both commit the same offsets."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.metadata import TxnMovedError

SCHEMA = pa.schema([("offset", pa.int64())])


def rows(offsets: range) -> pa.Table:
    return pa.table({"offset": list(offsets)}, schema=SCHEMA)


def write(t: cl.Table, offsets: range, progress: dict[str, tuple[int | None, int]]) -> int | None:
    result, t._snapshot = t._writer.write(t.log, t.snapshot(), rows(offsets), progress=progress)
    return result.version


def test_markers_move_with_the_rows_in_one_version(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA)
    v = write(t, range(0, 10), {"kafka:t:0": (None, 9), "kafka:t:1": (None, 4)})
    assert v == 1
    assert t.transaction_version("kafka:t:0") == 9 and t.transaction_version("kafka:t:1") == 4
    assert write(t, range(10, 15), {"kafka:t:0": (9, 14)}) == 2
    assert t.transaction_version("kafka:t:0") == 14 and t.count_rows() == 15
    # the same batch again (an uncertain commit retried): skipped, nothing written
    assert write(t, range(10, 15), {"kafka:t:0": (9, 14)}) is None
    assert t.count_rows() == 15


def test_two_writers_from_the_same_position_commit_once(tmp_path: Path) -> None:
    cl.create_table(tmp_path / "t", SCHEMA)
    a = cl.open_table(tmp_path / "t", writer_id="a")
    b = cl.open_table(tmp_path / "t", writer_id="b")
    stale = b.snapshot()
    assert write(a, range(0, 100), {"kafka:t:0": (None, 99)}) == 1
    # b read the table before a committed and consumed from the same start, further on
    with pytest.raises(TxnMovedError) as caught:
        b._writer.write(b.log, stale, rows(range(0, 150)), progress={"kafka:t:0": (None, 149)})
    assert caught.value.found == 99 and caught.value.expected is None
    fresh = cl.open_table(tmp_path / "t")
    assert fresh.count_rows() == 100 and fresh.transaction_version("kafka:t:0") == 99
    # after re-reading the marker, b continues from it
    b.refresh()
    assert write(b, range(100, 150), {"kafka:t:0": (99, 149)}) == 2
    assert cl.open_table(tmp_path / "t").count_rows() == 150


def test_a_race_decided_inside_the_commit(tmp_path: Path) -> None:
    """Both writers pass the check before writing; the commit's requirement decides."""
    cl.create_table(tmp_path / "t", SCHEMA)
    a = cl.open_table(tmp_path / "t", writer_id="a")
    b = cl.open_table(tmp_path / "t", writer_id="b")
    from carbonlite.writer.append import AppendCommit

    stale = b.snapshot()
    write(a, range(0, 10), {"kafka:t:0": (None, 9)})
    pending = AppendCommit(appends=(), progress={"kafka:t:0": (None, 19)})
    with pytest.raises(TxnMovedError):
        b._writer.commit(b.log, stale, pending)
    assert cl.open_table(tmp_path / "t").transaction_version("kafka:t:0") == 9


def test_markers_moved_in_part_refuse_the_commit_instead_of_skipping_it(tmp_path: Path) -> None:
    """A commit moving two markers finds one past its batch (another writer committed that
    part) and the other where it read it. It is refused (``TxnMovedError``), before writing
    and inside the commit alike: skipped, it would drop the other part's rows; committed,
    it would repeat the first part. Only when every marker holds the batch is it skipped."""
    from carbonlite.writer.append import AppendCommit

    cl.create_table(tmp_path / "t", SCHEMA)
    a = cl.open_table(tmp_path / "t", writer_id="a")
    b = cl.open_table(tmp_path / "t", writer_id="b")
    stale = b.snapshot()
    assert write(a, range(0, 10), {"kafka:t:0": (None, 9)}) == 1
    both = {"kafka:t:0": (None, 9), "kafka:t:1": (None, 4)}
    with pytest.raises(TxnMovedError, match="but not that of 'kafka:t:1'") as caught:
        write(b, range(0, 15), both)
    assert caught.value.app_id == "kafka:t:0" and caught.value.found == 9
    with pytest.raises(TxnMovedError):  # decided inside the commit, from the stale read
        b._writer.commit(b.log, stale, AppendCommit(appends=(), progress=both))
    fresh = cl.open_table(tmp_path / "t")
    assert fresh.count_rows() == 10 and fresh.transaction_version("kafka:t:1") is None
    # every marker at or past the batch: the batch is in, skipped
    assert write(a, range(10, 15), {"kafka:t:1": (None, 4)}) == 2
    assert write(b, range(0, 15), both) is None
    assert cl.open_table(tmp_path / "t").count_rows() == 15
