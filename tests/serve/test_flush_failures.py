"""Tables flush independently: one whose flush fails keeps its puts (in memory and in the
write-ahead log), is logged once and reported by the healthcheck, while the tables after it
flush and the log is released up to the failing table's oldest put, which the healthcheck
names as holding the log."""

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
        with caplog.at_level(logging.WARNING, logger="carbonlite.serve"):
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
        assert report["wal"]["first_lsn"] == 2  # b's first put released; a's kept, and later
        assert report["wal"]["segments"] == 3 and report["wal"]["bytes"] > 0
        assert any("table 'a'" in line and "LSN 2" in line for line in report["problems"])
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
