"""The stream source's start against a racing writer, in forced orders (no Spark).

Spark asks a micro-batch source for its initial offset more than once when a query starts:
once to plan batch 0's end (``latestOffset``), again to plan its partitions, and a restarted
query whose batch 0 was planned but not committed asks a new reader instance and pairs the
answer with the end offset in its checkpoint (docs/SPARK.md, "What Spark calls"). Here
``CarbonLiteStreamReader`` (and the change-feed reader) is driven the way Spark drives it, on
one actor, while a writer actor appends commits; ``tests/support/interleave.py`` switches
between the two at the protocol's seams, in every order for a small scenario and in seeded
random orders for larger ones. The check: the ids delivered are the rows of the table's
snapshot at the start plus every later commit, each exactly once, which for a table that only
grows is the model's rows at the last version read (``tests/support/log_model.py``).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import fsspec
import pyarrow.compute as pc
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

import carbonlite as cl
from carbonlite.spark.change_feed import CarbonLiteChangeFeedReader
from carbonlite.spark.options import SparkOptions
from carbonlite.spark.stream_source import CarbonLiteStreamReader
from tests.metadata.test_interleavings import WITHOUT_HISTORY
from tests.support.interleave import Actor, Outcome, explore_all, explore_random
from tests.support.log_model import SCHEMA, Model, Op, outcome_of, rows

BASE = 10  # rows of the starting snapshot (version 1)
ROWS = 3  # rows per writer commit
"""Each commit is one blocklet: a row limit of 2 or 4 ends batches inside blocklets."""


@dataclass(frozen=True)
class Setup:
    """One way of starting a stream: what it reads, how Spark asks, what limit it has.

    ``ask``: ``twice`` is a fresh query (initialOffset, latestOffset, initialOffset again,
    partitions, all on one reader); ``restart`` is a query restarted before batch 0 committed
    (a new reader's initialOffset, paired with the end planned by the first reader);
    ``available_now`` is ``twice`` after ``prepareForTriggerAvailableNow``."""

    commits: int = 1
    feed: bool = False
    ask: str = "twice"
    max_rows: int | None = None
    options: tuple[tuple[str, str], ...] = ()

    def reader(self, uri: str) -> CarbonLiteStreamReader:
        options = SparkOptions({"path": uri, **dict(self.options)})
        kind = CarbonLiteChangeFeedReader if self.feed else CarbonLiteStreamReader
        return kind(options, None)

    def limit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_rows is None else ReadMaxRows(self.max_rows)


@dataclass
class Run:
    """One schedule's state: the table, the model, and what the source saw and delivered."""

    setup: Setup
    uri: str
    model: Model
    reader: CarbonLiteStreamReader
    initial: list[dict[str, Any]] = field(default_factory=list)
    delivered: list[int] = field(default_factory=list)
    position: dict[str, Any] | None = None
    version_before_start: int | None = None


def deliver(
    run: Run, reader: CarbonLiteStreamReader, start: dict[str, Any], end: dict[str, Any]
) -> None:
    """One micro-batch as Spark runs it: partitions, read every one, commit the end."""
    for offset in (start, end):
        assert json.loads(json.dumps(offset)) == offset, f"offset {offset} is not plain JSON"
    partitions = reader.partitions(start, end)
    if run.setup.max_rows is not None:  # the limit holds to the row, inside blocklets too
        planned = sum(s.num_rows for p in partitions for s in p.splits)  # type: ignore[attr-defined]
        assert planned <= run.setup.max_rows, f"a batch of {planned} rows from {start} to {end}"
    for partition in partitions:
        for batch in reader.read(partition):
            if run.setup.feed:
                kinds = set(batch.column("_change_type").to_pylist())
                assert kinds <= {"insert"}, f"a table that only grows delivered {kinds}"
            run.delivered.extend(pc.cast(batch.column("id"), "int64").to_pylist())
    reader.commit(end)


def catch_up(run: Run, reader: CarbonLiteStreamReader, start: dict[str, Any]) -> dict[str, Any]:
    """Batches until the reader has nothing new (latestOffset answers its start)."""
    while True:
        end = reader.latestOffset(start, run.setup.limit())
        if end == start:
            return start
        deliver(run, reader, start, end)
        start = end


def stream(run: Run, restarted: CarbonLiteStreamReader) -> None:
    """The source actor: the start of a query as Spark makes it, then batches until caught up.
    ``restarted`` is the reader of the restarted query (``ask="restart"``)."""
    reader = run.reader
    if run.setup.ask == "available_now":
        run.version_before_start = reader.table.refresh().version
        reader.prepareForTriggerAvailableNow()
    first = reader.initialOffset()
    end = reader.latestOffset(first, run.setup.limit())
    if run.setup.ask == "restart":
        reader = run.reader = restarted
    second = reader.initialOffset()
    run.initial = [first, second]
    deliver(run, reader, second, end)  # batch 0: Spark's second answer with the first's end
    run.position = catch_up(run, reader, end)


def scenario(setup: Setup) -> tuple[Run, list[Actor]]:
    """Version 1 holds BASE rows; the writer appends ``setup.commits`` commits of ROWS rows.
    Tables and readers are opened here, so the actors' seams are those of the protocol (a
    commit, and the source's calls), not of opening a table."""
    uri = f"memory://stream-orders-{uuid.uuid4().hex}"
    model = Model()
    table = cl.create_table(uri, SCHEMA)
    op = model.record(Op("setup", added=frozenset(range(BASE))))
    outcome_of(op, table.append(rows(range(BASE))))
    run = Run(setup, uri, model, setup.reader(uri))
    restarted = setup.reader(uri)
    for reader in (run.reader, restarted):
        assert reader.table.version == 1
    writer = cl.open_table(uri)

    def write() -> None:
        for n in range(setup.commits):
            ids = range(BASE + n * ROWS, BASE + (n + 1) * ROWS)
            op = model.record(Op("writer", added=frozenset(ids)))
            outcome_of(op, writer.append(rows(ids)))

    return run, [Actor("writer", write), Actor("source", lambda: stream(run, restarted))]


def expected_rows(run: Run, version: int) -> Counter[int]:
    """What a stream that started at Spark's first initial offset delivers up to ``version``:
    the snapshot at its version then every later commit (``initial``), or every commit from
    its version on."""
    start = run.initial[0]
    before = Counter() if start["initial"] else run.model.ids_at(start["version"] - 1)
    return run.model.ids_at(version) - before


def check(run: Run, outcomes: dict[str, Outcome]) -> None:
    try:
        check_rows(run, outcomes)
    finally:  # thousands of schedules: their tables must not pile up in memory
        fsspec.filesystem("memory").rm(run.uri, recursive=True)


def check_rows(run: Run, outcomes: dict[str, Outcome]) -> None:
    for name, outcome in outcomes.items():
        assert outcome.ok, f"{name} failed: {outcome.error!r}"
    latest = cl.open_table(run.uri).version
    if run.setup.ask == "available_now":
        # an availableNow query ends once it has what the table held when it started
        assert run.version_before_start is not None
        delivered = Counter(run.delivered)
        fits = [
            v
            for v in range(run.version_before_start, latest + 1)
            if delivered == expected_rows(run, v)
        ]
        assert fits, (
            f"delivered {sorted(delivered.elements())}: not the rows of any version from "
            f"{run.version_before_start} (the latest when the query started) to {latest} "
            f"(initial offsets {run.initial})"
        )
    else:
        assert run.position is not None
        run.position = catch_up(run, run.reader, run.position)  # the writer is done: the rest
        delivered, expected = Counter(run.delivered), expected_rows(run, latest)
        assert delivered == expected, (
            f"delivered {sorted(delivered.elements())}, expected each of {sorted(expected)} "
            f"once (initial offsets {run.initial})"
        )
    if run.setup.ask != "restart":
        assert run.initial[0] == run.initial[1], f"initialOffset answered {run.initial}"


SMALL = [
    pytest.param(Setup(), id="twice"),
    pytest.param(Setup(ask="restart"), id="restart", marks=pytest.mark.slow),
    pytest.param(Setup(ask="available_now"), id="available-now", marks=pytest.mark.slow),
]
"""The plain reader; the change feed has the same start but reads each version by opening the
table (a seam per version read), which makes its every-order exploration thousands of orders:
random orders cover it. The default tier explores every order of a fresh query; those of a
restart and of availableNow are in the slow tier (random orders of both run by default)."""


@pytest.mark.parametrize("setup", SMALL)
def test_every_order_of_a_commit_and_a_stream_start(setup: Setup) -> None:
    found = explore_all(lambda: scenario(setup), check, limit=5_000, pause_at=WITHOUT_HISTORY)
    assert found.exhaustive, f"only {found.schedules} orders explored"
    assert {"source.after_initial_offset", "commit.after_put", "source.before_read"} <= found.seams


def larger(commits: int) -> list[Any]:
    return [
        pytest.param(Setup(commits=commits), id="twice"),
        pytest.param(Setup(commits=commits, ask="restart"), id="restart"),
        pytest.param(Setup(commits=commits, ask="available_now"), id="available-now"),
        pytest.param(Setup(commits=commits, max_rows=2), id="limit"),
        pytest.param(Setup(commits=commits, max_rows=4, ask="restart"), id="limit-restart"),
        pytest.param(
            Setup(commits=commits, max_rows=4, ask="available_now"), id="limit-available-now"
        ),
        pytest.param(Setup(commits=commits, feed=True), id="changes"),
        pytest.param(Setup(commits=commits, feed=True, ask="restart"), id="changes-restart"),
        pytest.param(
            Setup(commits=commits, feed=True, ask="available_now"), id="changes-available-now"
        ),
        pytest.param(Setup(commits=commits, options=(("startingVersion", "1"),)), id="version"),
        pytest.param(Setup(commits=commits, options=(("startingVersion", "latest"),)), id="latest"),
        pytest.param(
            Setup(commits=commits, options=(("startingTimestamp", "2000-01-01T00:00:00Z"),)),
            id="timestamp",
        ),
    ]


@pytest.mark.parametrize("setup", larger(3))
def test_random_orders_of_commits_and_a_stream_start(setup: Setup) -> None:
    found = explore_random(lambda: scenario(setup), check, seeds=range(40))
    assert found.schedules == 40 and "commit.after_put" in found.seams


@pytest.mark.slow
@pytest.mark.parametrize("setup", larger(5))
def test_many_random_orders_of_commits_and_a_stream_start(setup: Setup) -> None:
    explore_random(lambda: scenario(setup), check, seeds=range(1_000, 1_120))
