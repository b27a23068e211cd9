"""Tables flush independently: one whose flush fails keeps its puts (in memory and in the
write-ahead log), is logged once and reported by the healthcheck, while the tables after it
flush. The log is released up to the failing table's oldest put, which the healthcheck names
as holding the log; once that holds enough of the log, the failing table's puts are carried
forward (written to the log's end again) so the rest is released, and a replay counts each
carried put once, in its producer's order, wherever a crash fell."""

from __future__ import annotations

import logging
import shutil
from functools import partial
from pathlib import Path

import pytest

import carbonlite as cl
from carbonlite.serve import service as service_module
from carbonlite.serve.records import PutRequest
from carbonlite.serve.service import FlightService
from carbonlite.serve.wal import WriteAheadLog
from tests.serve.test_service import SCHEMA, puts_in, rows
from tests.serve.test_service_seams import crash, start


@pytest.fixture(autouse=True)
def one_record_per_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each log record in a segment of its own: a release deletes exactly what it covers."""
    monkeypatch.setattr(service_module, "WriteAheadLog", partial(WriteAheadLog, segment_bytes=1))


def put(service: FlightService, table: str, producer: str, seq: int) -> None:
    got = service.catalog.table(table, refresh=False)
    answer = service._put(PutRequest(table, producer, seq), rows(producer, seq), got)
    assert answer == {"version": None, "skipped": False}


def committed(root: Path, table: str) -> dict[tuple[str, int], int]:
    return puts_in(cl.open_table(root / table).to_arrow())


def test_a_failing_table_does_not_stop_the_tables_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("a", "b", "c"):
        cl.create_table(tmp_path / name, SCHEMA)
    service = start(tmp_path)
    try:
        put(service, "b", "p", 0)  # LSN 1
        service.flush_all()
        assert service.wal.usage().first_lsn == 1  # the segment being written is kept
        put(service, "a", "p", 0)  # LSN 2: the failing table's put
        put(service, "b", "p", 1)  # LSN 3
        put(service, "c", "p", 0)  # LSN 4
        shutil.rmtree(tmp_path / "a")
        with caplog.at_level(logging.INFO, logger="carbonlite.serve"):
            for _ in range(3):
                service.flush_all()  # never raises: a's failure is recorded
        assert committed(tmp_path, "b") == {("p", 0): 3, ("p", 1): 3}
        assert committed(tmp_path, "c") == {("p", 0): 3}
        failed = [r for r in caplog.records if "flush of table 'a' failed" in r.getMessage()]
        assert len(failed) == 1, "a failure in a row is logged once"
        report = service.health()
        assert report["status"] == "degraded"
        assert report["tables"]["a"]["pending_puts"] == 1
        assert report["tables"]["a"]["failures"] == 3
        assert "no table 'a'" in report["tables"]["a"]["error"]
        assert list(report["tables"]) == ["a"]  # b and c have nothing waiting
        assert report["wal"]["held_by"] == "a"
        # a's put (LSN 2) held LSNs 1 to 4: it was carried forward to LSN 5, once, and the
        # records of b and c were released
        assert report["tables"]["a"]["oldest_lsn"] == 5
        assert report["wal"]["first_lsn"] == 5 and report["wal"]["segments"] == 1
        assert any("table 'a'" in line and "LSN 5" in line for line in report["problems"])
        carried = [r for r in caplog.records if "carried 1 waiting put(s)" in r.getMessage()]
        assert len(carried) == 1
        cl.create_table(tmp_path / "a", SCHEMA)  # the table is back: its put is committed
        service.flush_all()
        assert committed(tmp_path, "a") == {("p", 0): 3}
        report = service.health()
        assert report["status"] == "ok" and report["tables"] == {} and report["problems"] == []
        assert report["wal"]["segments"] == 1 and report["wal"]["held_by"] is None
    finally:
        crash(service)


def test_a_failing_tables_puts_survive_a_restart(tmp_path: Path) -> None:
    """The failing table's put is only in the log when the service dies: the next run
    replays it and, the table being back, commits it once."""
    for name in ("a", "b"):
        cl.create_table(tmp_path / name, SCHEMA)
    service = start(tmp_path)
    try:
        put(service, "a", "p", 0)
        put(service, "b", "p", 0)
        aside = tmp_path / "a.aside"
        (tmp_path / "a").rename(aside)
        service.flush_all()
        assert committed(tmp_path, "b") == {("p", 0): 3}
    finally:
        crash(service)
    aside.rename(tmp_path / "a")
    again = start(tmp_path)
    try:
        assert committed(tmp_path, "a") == {("p", 0): 3}
        assert committed(tmp_path, "b") == {("p", 0): 3}
        assert again.health()["status"] == "ok"
    finally:
        crash(again)


@pytest.mark.parametrize("released_through", [None, 1, 2, 3, 9])
def test_carried_forward_puts_are_replayed_once_and_in_order(
    tmp_path: Path, released_through: int | None
) -> None:
    """p's puts 0-2 to failing table a (LSNs 1-3) are written again (LSNs 10-12); the service
    dies before the release, or after releasing the log through LSN 1, 2, 3 or 9 (so the
    replay finds both records of some puts, or the later only, or an older record of a
    later sequence before the carried record of an earlier one). The table back, the next
    run commits each put once, the marker at 2; a re-send of 2 is skipped."""
    for name in ("a", "b"):
        cl.create_table(tmp_path / name, SCHEMA)
    service = start(tmp_path)
    try:
        for seq in range(3):
            put(service, "a", "p", seq)
        for seq in range(6):
            put(service, "b", "q", seq)
        (tmp_path / "a").rename(tmp_path / "a.aside")
        service._flush("b")  # a's flush would fail: the table is gone
        assert service.flusher._relog("a", "p") == 3
        assert [p.lsn for p in service.buffer.pending("a")] == [10, 11, 12]
        if released_through is not None:
            service.wal.release(released_through)
    finally:
        crash(service)
    (tmp_path / "a.aside").rename(tmp_path / "a")
    again = start(tmp_path)
    try:
        assert committed(tmp_path, "a") == {("p", s): 3 for s in range(3)}
        assert committed(tmp_path, "b") == {("q", s): 3 for s in range(6)}
        assert cl.open_table(tmp_path / "a").transaction_version("flight:p") == 2
        events = again.catalog.table("a", refresh=False)
        assert again._put(PutRequest("a", "p", 2), rows("p", 2), events)["skipped"] is True
        put(again, "a", "p", 3)
        again.flush_all()
        assert committed(tmp_path, "a") == {("p", s): 3 for s in range(4)}
    finally:
        crash(again)
