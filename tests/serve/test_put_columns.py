"""Issue 38 §2: an acknowledged put keeps each value in the column it was acknowledged in,
by column id, whatever another writer changes before the put is flushed: a column dropped
and added again under its name reads null (the dropped values never come back), two names
swapped by renames keep each value in its own column, a widened column is cast up and an
added one reads its default. The same read from memory, at the flush, and after a SIGKILL
from the write-ahead log; and when the change lands between a flush's conform and its
commit. A record logged by an earlier release (no column ids) is placed by name only where
no name can have moved between columns; otherwise it waits, reported, and is never read into
the wrong column."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import carbonlite as cl
from carbonlite.seams import listening
from carbonlite.serve.records import PutRequest
from carbonlite.serve.service import WAL_DIR, FlightService
from carbonlite.serve.wal import WriteAheadLog
from tests.support.column_moves import drop_and_add_again, swap_by_renames
from tests.support.flight_service import ServiceProcess, health, put, read_all

SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.string()), ("b", pa.string()), ("n", pa.int32())])
SLOW = ("--flush-interval", "3600", "--flush-rows", "100000000")
"""Every put stays in memory (and the log) until SIGTERM."""
ACKED = pa.table(
    {"id": [1], "a": ["OLD-A"], "b": ["OLD-B"], "n": pa.array([5], pa.int32())}, schema=SCHEMA
)
"""The put, acknowledged before the change."""


def _widen_and_add(t: cl.Table) -> None:
    t.widen_column("n", pa.int64())
    t.add_columns([pa.field("d", pa.int64()), pa.field("e", pa.string())], defaults={"d": 7})


CHANGES: dict[str, tuple[Callable[[cl.Table], None], dict[str, Any]]] = {
    # the new 'a' is another column: it starts empty
    "drop-and-add-again": (drop_and_add_again, {"id": 1, "b": "OLD-B", "n": 5, "a": None}),
    # the column acknowledged as 'a' is named 'b' now, and the other way round
    "swap-by-renames": (swap_by_renames, {"id": 1, "b": "OLD-A", "a": "OLD-B", "n": 5}),
    "widen-and-add": (
        _widen_and_add,
        {"id": 1, "a": "OLD-A", "b": "OLD-B", "n": 5, "d": 7, "e": None},
    ),
}


@pytest.fixture
def root(tmp_path: Path) -> str:
    cl.create_table(tmp_path / "t", SCHEMA)
    return str(tmp_path)


def _flushed_cleanly(service: ServiceProcess) -> bool:
    return not any("flush of table" in line and "failed" in line for line in service.stderr)


@pytest.mark.parametrize("change", list(CHANGES))
def test_an_acknowledged_put_keeps_its_values_in_its_columns(root: str, change: str) -> None:
    apply, want = CHANGES[change]
    table = cl.open_table(os.path.join(root, "t"))
    with ServiceProcess(root, *SLOW) as service:
        client = service.client()
        assert put(client, "t", "p", 0, ACKED) == {"version": None, "skipped": False}
        apply(table)
        # read from memory, before the flush: the present schema, each value in its column
        got = read_all(client, flight.FlightDescriptor.for_path("t"))
        assert got.schema == table.refresh().schema
        assert got.to_pylist() == [want]
        assert service.terminate() == 0  # flushes
    assert _flushed_cleanly(service)
    assert table.refresh().to_arrow().to_pylist() == [want]
    assert table.transaction_version("flight:p") == 0


@pytest.mark.parametrize("change", list(CHANGES))
def test_an_acknowledged_put_keeps_its_columns_across_a_sigkill_and_the_replay(
    root: str, change: str
) -> None:
    apply, want = CHANGES[change]
    table = cl.open_table(os.path.join(root, "t"))
    service = ServiceProcess(root, *SLOW)
    with service:
        assert put(service.client(), "t", "p", 0, ACKED)["skipped"] is False
        apply(table)
        service.kill()  # the put is only in the write-ahead log now
        assert table.refresh().count_rows() == 0
        service.start()  # replays the log and flushes it before it listens
        assert table.refresh().to_arrow().to_pylist() == [want]
        assert table.transaction_version("flight:p") == 0
        got = read_all(service.client(), flight.FlightDescriptor.for_path("t"))
        assert got.to_pylist() == [want]  # once: committed, and no longer lacking
        assert service.terminate() == 0
    assert _flushed_cleanly(service)
    assert table.refresh().to_arrow().to_pylist() == [want]


@pytest.mark.parametrize("refreshed", [False, True], ids=["alone", "handle-refreshed"])
def test_a_column_dropped_and_added_again_while_a_flush_commits(
    tmp_path: Path, refreshed: bool
) -> None:
    """The change lands between the flush's conform (its rows in the schema of that moment)
    and its commit (``serve.before_flush_commit``): the table's append refuses rows whose
    columns moved since they were conformed, and the flush conforms them again by id. With
    ``refreshed``, a put or a read of another thread also refreshed the table object the
    service shares (the catalog's) in between: the append still knows what the rows were
    conformed to."""
    cl.create_table(tmp_path / "t", SCHEMA)
    other = cl.open_table(tmp_path / "t")
    service = FlightService(str(tmp_path), port=0, flush_interval=3600, flush_rows=10**9)
    try:
        table = service.catalog.table("t", refresh=False)
        assert service._put(PutRequest("t", "p", 0), ACKED, table)["skipped"] is False
        reached: list[str] = []

        def change_once(name: str) -> None:
            if name == "serve.before_flush_commit" and not reached:
                reached.append(name)
                drop_and_add_again(other)
                if refreshed:
                    assert service.catalog.table("t") is table  # the one the flush uses

        with listening(change_once):
            service.flush_all()
        assert reached
        assert service.health()["status"] == "ok"
    finally:
        service.shutdown()
        service.close()
    done = cl.open_table(tmp_path / "t")
    assert done.to_arrow().to_pylist() == [{"id": 1, "b": "OLD-B", "n": 5, "a": None}]
    assert done.transaction_version("flight:p") == 0


# --- records logged by an earlier release: no column ids ------------------------------------


def _legacy_record(table: str, sequence: int, rows: pa.Table) -> bytes:
    """A put record as the release before column ids wrote it: header without them."""
    header = json.dumps({"table": table, "producer_id": "p", "sequence": sequence}).encode()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return len(header).to_bytes(4, "big") + header + sink.getvalue().to_pybytes()


def test_records_of_an_earlier_release_go_by_name_only_where_no_name_moved(
    tmp_path: Path,
) -> None:
    """``kept``: only widened and added to since; ``moved``: 'a' dropped and added again. The
    earlier release's records of both were acknowledged before the changes (their rows in the
    schema of then) and left in the log by a crash."""
    kept = cl.create_table(tmp_path / "kept", SCHEMA)
    moved = cl.create_table(tmp_path / "moved", SCHEMA)
    with WriteAheadLog(str(tmp_path / WAL_DIR)) as wal:
        wal.append(_legacy_record("kept", 0, ACKED))
        wal.append(_legacy_record("moved", 0, ACKED))
    _widen_and_add(kept)
    drop_and_add_again(moved)
    with ServiceProcess(str(tmp_path), *SLOW) as service:
        client = service.client()
        assert kept.refresh().to_arrow().to_pylist() == [CHANGES["widen-and-add"][1]]
        # the other waits: never flushed, nor read, into the new 'a'
        assert moved.refresh().count_rows() == 0
        report = health(client)
        assert report["status"] == "degraded"
        error = report["tables"]["moved"]["error"]
        assert "UnplacedPutError" in error and "earlier release" in error
        assert "the columns ['a'] were dropped" in error
        with pytest.raises(flight.FlightServerError, match="earlier release") as refused:
            read_all(client, flight.FlightDescriptor.for_path("moved"))
        assert json.loads(refused.value.extra_info)["kind"] == "failed"
        # new puts to it are taken; they wait behind the old one, which keeps its place
        newer = ACKED.drop_columns(["a"]).append_column("a", pa.array(["NEW-A"]))
        assert put(client, "moved", "q", 0, newer)["skipped"] is False
        assert service.terminate() == 0
    assert moved.refresh().count_rows() == 0
    assert any("stopping with 2 put(s) of table 'moved'" in line for line in service.stderr)
