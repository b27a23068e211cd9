"""The Flight service at its seams, in process: producers' puts and flushers (the background
one, a second one) paused at ``serve.after_wal`` (a put logged, not yet in memory) and
``serve.before_flush_commit`` (a flush took its puts, not yet committed), in every order (a
small bound) and in seeded random orders that also pause inside the commits. Then the
service dies without a last flush and a new one replays its log: every acknowledged put is
in the table exactly once, each producer's marker at its last sequence."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import carbonlite as cl
from carbonlite.serve import service as service_module
from carbonlite.serve.records import PutRequest
from carbonlite.serve.service import FlightService
from carbonlite.serve.wal import WriteAheadLog
from tests.serve.test_service import SCHEMA, puts_in, rows
from tests.support.interleave import Actor, Outcome, explore_all, explore_random

DOOR_SEAMS = ("serve.after_wal", "serve.before_flush_commit")
COMMIT_SEAMS = (*DOOR_SEAMS, "commit.before_put", "commit.after_put")


@pytest.fixture(autouse=True)
def one_record_per_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every log record in a segment of its own, so a release deletes exactly the records
    it covers (with 64 MiB segments it deletes none here, and a release too far would go
    unseen)."""
    monkeypatch.setattr(service_module, "WriteAheadLog", partial(WriteAheadLog, segment_bytes=1))


def start(root: Path) -> FlightService:
    """A service on a free port that flushes only when asked (and replays its log)."""
    return FlightService(str(root), port=0, flush_interval=3600, flush_rows=10**9)


def crash(service: FlightService) -> None:
    """Stop as a SIGKILL would: no last flush, the log closed as it is."""
    service._stopping.set()
    service._wake.set()
    service._flusher.join()
    service.shutdown()
    service.wal.close()
    service.catalog.close()


class Run:
    """One schedule's service and what its producers were told."""

    def __init__(self, root: Path) -> None:
        self.root = root
        cl.create_table(root / "events", SCHEMA)
        self.service = start(root)
        self.acked: dict[tuple[str, int], dict[str, Any]] = {}

    def producer(self, name: str, sequences: range) -> Callable[[], None]:
        def run() -> None:
            table = self.service.catalog.table("events", refresh=False)
            for seq in sequences:
                answer = self.service._put(PutRequest("events", name, seq), rows(name, seq), table)
                self.acked[(name, seq)] = answer

        return run

    def flusher(self) -> Callable[[], None]:
        return self.service.flush_all


def doors(
    root: Path, producers: dict[str, range], flushers: int
) -> tuple[Callable[[], tuple[Run, list[Actor]]], Callable[[Run, dict[str, Outcome]], None]]:
    runs = itertools.count()

    def scenario() -> tuple[Run, list[Actor]]:
        where = root / f"s{next(runs)}"
        where.mkdir()
        run = Run(where)
        actors = [Actor(f"put-{p}", run.producer(p, seqs)) for p, seqs in producers.items()]
        actors += [Actor(f"flush-{i}", run.flusher()) for i in range(flushers)]
        return run, actors

    def check(run: Run, outcomes: dict[str, Outcome]) -> None:
        for outcome in outcomes.values():
            assert outcome.ok, f"{outcome.name} failed: {outcome.error!r}"
        want = {(p, s) for p, seqs in producers.items() for s in seqs}
        assert set(run.acked) == want
        assert all(a == {"version": None, "skipped": False} for a in run.acked.values())
        crash(run.service)  # whatever is not committed is only in the log now
        again = start(run.root)  # replays, then flushes
        try:
            table = cl.open_table(run.root / "events")
            got = puts_in(table.to_arrow())
            assert got == dict.fromkeys(want, 3), "a put lost or committed twice"
            for p, seqs in producers.items():
                assert table.transaction_version(f"flight:{p}") == seqs[-1]
            # a re-send of each producer's last put is skipped, with the version holding it
            events = again.catalog.table("events", refresh=False)
            for p, seqs in producers.items():
                answer = again._put(PutRequest("events", p, seqs[-1]), rows(p, seqs[-1]), events)
                assert answer == {"version": table.version, "skipped": True}
        finally:
            crash(again)

    return scenario, check


def test_a_producer_and_two_flushers_in_every_order(tmp_path: Path) -> None:
    """A second flush takes the puts a first one holds, commits them first, or commits more:
    the first finds them in the table (its commit skipped, or refused when only some are)
    and looks again, never failing and never committing them twice."""
    scenario, check = doors(tmp_path, {"p": range(2)}, flushers=2)
    found = explore_all(scenario, check, pause_at=DOOR_SEAMS)
    assert found.exhaustive and found.schedules >= 40
    assert set(DOOR_SEAMS) <= found.seams


def test_two_producers_and_a_flusher_in_every_order(tmp_path: Path) -> None:
    """q's put is logged before p's second, but p's reaches memory first; a flush in between
    must not let the log go past q's record (it did: the lowest LSN pending was taken to be
    the first put added, and after a crash q's acknowledged put was gone)."""
    scenario, check = doors(tmp_path, {"p": range(2), "q": range(1)}, flushers=1)
    found = explore_all(scenario, check, pause_at=DOOR_SEAMS)
    assert found.exhaustive and found.schedules >= 100
    assert set(DOOR_SEAMS) <= found.seams


@pytest.mark.slow
def test_two_producers_and_two_flushers_in_every_order(tmp_path: Path) -> None:
    scenario, check = doors(tmp_path, {"p": range(1), "q": range(1)}, flushers=2)
    found = explore_all(scenario, check, pause_at=DOOR_SEAMS)
    assert found.exhaustive and found.schedules >= 400


@pytest.mark.parametrize(
    ("flushers", "pause_at"),
    [(1, COMMIT_SEAMS), (2, DOOR_SEAMS)],
    ids=["one flusher, inside its commits too", "two flushers"],
)
@pytest.mark.parametrize(
    "seeds", [range(12), pytest.param(range(12, 120), marks=pytest.mark.slow)], ids=str
)
def test_producers_and_flushers_in_random_orders(
    tmp_path: Path, flushers: int, pause_at: tuple[str, ...], seeds: range
) -> None:
    """Two flushers share the table's writer (and its lock, held through a commit), so they
    pause only at the service's seams: one paused inside a commit would hold up the other,
    which the harness reports as a deadlock."""
    scenario, check = doors(tmp_path, {"p": range(3), "q": range(2)}, flushers=flushers)
    found = explore_random(scenario, check, seeds=seeds, pause_at=pause_at)
    assert found.schedules == len(seeds) and set(pause_at) <= found.seams
