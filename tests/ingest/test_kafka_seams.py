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
from collections.abc import Callable, Iterator
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
        restarted._commit(batch(messages, wrong), markers)
        markers.update({p: offsets[-1] for p, offsets in messages.items()})
    read = {(p, o) for p, offsets in itertools.chain(first.items()) for o in offsets}
    read |= {(p, o) for messages in again for p, offsets in messages.items() for o in offsets}
    assert bad_records(bad) == Counter(read & wrong)
    table = cl.open_table(path)
    ids = Counter(table.to_arrow().column("id").to_pylist())
    landed = {(p, o) for messages in again for p, offsets in messages.items() for o in offsets}
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
