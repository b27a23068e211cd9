"""The Kafka ingester at its seams: a batch read again after a crash between its bad records'
commit and its rows', and ingesters racing, paused at ``ingest.after_fetch``,
``ingest.before_commit`` and ``ingest.after_bad_commit`` in every order (a small bound) and
in seeded random orders. Every good message is a row exactly once, every bad one a bad record
exactly once, and each partition's markers end at its last offset."""

from __future__ import annotations

import itertools
import json
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.ingest import KafkaIngester, app_id
from carbonlite.ingest import kafka as kafka_module
from carbonlite.ingest.clients import Fetched
from carbonlite.metadata import TxnMovedError
from carbonlite.seams import listening
from tests.support.interleave import Actor, Outcome, explore_all, explore_random
from tests.support.kafka_broker import KafkaBroker

SCHEMA = pa.schema([("id", pa.int64()), ("_kafka_partition", pa.int32())])
BAD = b"{broken"
TOPIC = "events"


def value(partition: int, offset: int) -> bytes:
    return json.dumps({"id": partition * 1000 + offset}).encode()


def batch(messages: dict[int, range], bad: set[tuple[int, int]]) -> Fetched:
    """The messages of these offset ranges per partition, in fetch order; those at ``bad``
    (partition, offset) do not decode."""
    out = Fetched()
    for p, offsets in messages.items():
        for o in offsets:
            out.partitions.append(p)
            out.offsets.append(o)
            out.timestamps.append(1_700_000_000_000 + o)
            out.keys.append(None)
            out.values.append(BAD if (p, o) in bad else value(p, o))
    return out


class Crash(Exception):
    """The process died here (raised from a seam: nothing after it runs)."""


def crash_at(seam: str) -> Callable[[str], None]:
    def listener(name: str) -> None:
        if name == seam:
            raise Crash(seam)

    return listener


def committer(path: Path, bad: Path, writer_id: str) -> KafkaIngester:
    """An ingester (its committer only: no broker is reached)."""
    return KafkaIngester(
        str(path),
        bootstrap_servers="127.0.0.1:1",
        topic=TOPIC,
        bad_records=str(bad),
        writer_id=writer_id,
    )


def bad_records(bad: Path) -> Counter[tuple[int, int]]:
    t = cl.open_table(bad).to_arrow()
    return Counter(
        zip(t.column("partition").to_pylist(), t.column("offset").to_pylist(), strict=True)
    )


# (first batch, crashed after its bad records' commit; the batches read again after restart)
CASES = {
    "another partition joins the batch read again": (
        {0: range(4)},
        [{0: range(4), 1: range(4)}],
    ),
    "the batch read again is longer": ({0: range(4)}, [{0: range(8)}]),
    "the batch read again is shorter": ({0: range(8)}, [{0: range(3)}, {0: range(3, 8)}]),
    "both partitions, one read again shorter": (
        {0: range(4), 1: range(6)},
        [{0: range(2), 1: range(8)}, {0: range(2, 6)}],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_records_of_a_batch_read_again_after_a_crash_land_exactly_once(
    tmp_path: Path, case: str
) -> None:
    """A crash between a batch's bad records' commit and its rows' leaves the bad-records
    markers ahead of the table's. The restarted ingester reads from the table's markers, in
    batches of another shape (more partitions, more or fewer offsets): each bad record must
    land once, those kept before the crash not again, the others not dropped."""
    first, again = CASES[case]
    wrong = {(0, 1), (0, 5), (1, 2), (1, 7)}
    path, bad = tmp_path / "t", tmp_path / "bad"
    cl.create_table(path, SCHEMA)
    crashed = committer(path, bad, "a")
    with listening(crash_at("ingest.after_bad_commit")), pytest.raises(Crash):
        crashed._commit(batch(first, wrong), dict.fromkeys(first))
    assert cl.open_table(path).count_rows() == 0  # the rows' commit never ran
    restarted = committer(path, bad, "b")
    markers: dict[int, int | None] = {0: None, 1: None}
    for messages in again:
        restarted._commit(batch(messages, wrong), dict(markers))
        markers.update({p: offsets[-1] for p, offsets in messages.items()})
    landed = {(p, o) for messages in again for p, offsets in messages.items() for o in offsets}
    read = landed | {(p, o) for p, offsets in first.items() for o in offsets}
    assert bad_records(bad) == Counter(read & wrong)
    table = cl.open_table(path)
    ids = Counter(table.to_arrow().column("id").to_pylist())
    assert ids == Counter(p * 1000 + o for p, o in landed - wrong)
    for p, last in markers.items():
        assert table.transaction_version(app_id(TOPIC, p)) == last


def test_a_batch_whose_markers_moved_only_in_part_is_refused_not_skipped(tmp_path: Path) -> None:
    """Ingester ``a`` reads partition 0 only and commits its offsets 0-3; ``b`` fetched
    partitions 0 and 1 from the start meanwhile. b's commit finds partition 0's marker past
    its batch and partition 1's where b left it: part of b's batch is in, part is not.
    Skipping it all would drop partition 1's rows; it is refused (``TxnMovedError``), and b
    resumes after the table's markers: every record lands once."""
    path, bad = tmp_path / "t", tmp_path / "bad"
    cl.create_table(path, SCHEMA)
    wrong = {(0, 1), (1, 2)}
    a, b = committer(path, bad, "a"), committer(path, bad, "b")
    a._commit(batch({0: range(4)}, wrong), {0: None})
    with pytest.raises(TxnMovedError):
        b._commit(batch({0: range(4), 1: range(4)}, wrong), {0: None, 1: None})
    table = cl.open_table(path)
    resume = {p: table.transaction_version(app_id(TOPIC, p)) for p in (0, 1)}
    assert resume == {0: 3, 1: None}
    b._commit(batch({1: range(4)}, wrong), {1: None})
    assert bad_records(bad) == Counter(wrong)
    ids = Counter(cl.open_table(path).to_arrow().column("id").to_pylist())
    assert ids == Counter(p * 1000 + o for p in (0, 1) for o in range(4) if (p, o) not in wrong)


# -- two ingesters racing, paused at the ingester's seams --------------------------------------

RACE_BAD = {(0, 1), (0, 4), (1, 2)}
RACE_OFFSETS = range(6)
DOOR_SEAMS = ("ingest.after_fetch", "ingest.before_commit", "ingest.after_bad_commit")
"""The ingester's own seams: explored in every order."""
COMMIT_SEAMS = (*DOOR_SEAMS, "commit.before_put", "commit.after_put")
"""With the commit's: the window between reading a marker and moving it (random orders)."""


class InlineExecutor:
    """The ingester's committer, run at ``submit`` on the caller's thread: the actor's, so
    the commit pauses at its seams like the rest of the actor (a thread of the pool would
    pass them unpaused, and run beside the actor). A batch then commits before the next is
    fetched, not while; the order of commits and their markers is the same."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


@pytest.fixture(scope="module")
def race_topic(kafka_broker: KafkaBroker) -> str:
    """Two partitions of six messages; offsets 1 and 4 of partition 0 and 2 of partition 1
    do not decode."""
    name = f"race-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(name, 2)
    for p in (0, 1):
        values = [BAD if (p, o) in RACE_BAD else value(p, o) for o in RACE_OFFSETS]
        kafka_broker.produce(name, values, partition=p)
    return name


@pytest.fixture
def inline_commits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_module, "ThreadPoolExecutor", InlineExecutor)


def race(
    broker: KafkaBroker, name: str, root: Path
) -> tuple[
    Callable[[], tuple[tuple[Path, Path], list[Actor]]],
    Callable[[tuple[Path, Path], dict[str, Outcome]], None],
]:
    """Ingester ``a`` reads partition 0; ``b`` reads partitions 0 and 1: both to the end,
    into one table and one bad-records table. The check: every good message a row once,
    every bad one a bad record once, both markers at the last offset, each ingester's
    reported offsets the table's."""
    runs = itertools.count()

    def scenario() -> tuple[tuple[Path, Path], list[Actor]]:
        where = root / f"s{next(runs)}"
        path, bad = where / "t", where / "bad"
        cl.create_table(path, SCHEMA)
        cl.create_table(bad, kafka_module.BAD_RECORDS_SCHEMA)

        def ingest(writer: str, partitions: list[int]) -> Callable[[], Any]:
            return lambda: KafkaIngester(
                str(path),
                bootstrap_servers=broker.bootstrap,
                topic=name,
                partitions=partitions,
                bad_records=str(bad),
                writer_id=writer,
                stop_at_end=True,
                max_latency=0.5,
                client="kafka-python",
            ).run()

        return (path, bad), [Actor("a", ingest("a", [0])), Actor("b", ingest("b", [0, 1]))]

    def check(state: tuple[Path, Path], outcomes: dict[str, Outcome]) -> None:
        path, bad = state
        for outcome in outcomes.values():
            assert outcome.ok, f"{outcome.name} failed: {outcome.error!r}"
        table = cl.open_table(path)
        ids = Counter(table.to_arrow().column("id").to_pylist())
        good = {(p, o) for p in (0, 1) for o in RACE_OFFSETS} - RACE_BAD
        assert ids == Counter(p * 1000 + o for p, o in good), "a row lost or repeated"
        assert bad_records(bad) == Counter(RACE_BAD), "a bad record lost or repeated"
        markers = {p: table.transaction_version(app_id(name, p)) for p in (0, 1)}
        assert markers == {0: RACE_OFFSETS[-1], 1: RACE_OFFSETS[-1]}
        for outcome in outcomes.values():
            reported = outcome.result.offsets
            assert reported == {p: markers[p] for p in reported}, (
                f"{outcome.name} reported offsets {reported}, the table holds {markers}"
            )

    return scenario, check


@pytest.mark.slow  # 6-8 s of orders: the slow tier (random orders of commits stay in the default)
@pytest.mark.usefixtures("inline_commits")
def test_two_ingesters_in_every_order_of_their_seams(
    kafka_broker: KafkaBroker, race_topic: str, tmp_path: Path
) -> None:
    scenario, check = race(kafka_broker, race_topic, tmp_path)
    found = explore_all(scenario, check, pause_at=DOOR_SEAMS, limit=200)
    assert found.exhaustive, f"more than {found.schedules} orders"
    assert set(DOOR_SEAMS) <= found.seams


@pytest.mark.usefixtures("inline_commits")
@pytest.mark.parametrize(
    "seeds", [range(16), pytest.param(range(16, 120), marks=pytest.mark.slow)], ids=str
)
def test_two_ingesters_in_random_orders_of_their_commits(
    kafka_broker: KafkaBroker, race_topic: str, tmp_path: Path, seeds: range
) -> None:
    scenario, check = race(kafka_broker, race_topic, tmp_path)
    found = explore_random(scenario, check, seeds=seeds, pause_at=COMMIT_SEAMS)
    assert found.schedules == len(seeds) and set(COMMIT_SEAMS) <= found.seams
