"""Exactly once: ``txn=(app_id, batch_id)`` commits a batch id with its data, and a batch id the
table already holds (or passed) is skipped, whoever replays it and however often."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import carbonlite as cl
from tests.support.tables import EVENTS, drop_memory, events, memory_uri, rows


def test_replaying_a_batch_adds_its_data_once(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    first = t.append(events(0, 5), txn=("app", 0))
    assert (first.version, first.rows, first.skipped) == (1, 5, False)
    for _ in range(4):
        again = t.append(events(0, 5), txn=("app", 0))
        assert (again.version, again.rows, again.skipped) == (None, 0, True)
    assert t.version == 1
    assert rows(t.to_arrow()) == rows(events(0, 5))
    assert t.transaction_version("app") == 0


def test_an_older_batch_is_skipped_and_the_newest_is_reported(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    t.append(events(0, 2), txn=("app", 5))
    for old in (0, 4, 5):
        assert t.append(events(100, 1), txn=("app", old)).skipped
    assert t.transaction_version("app") == 5
    assert t.append(events(2, 2), txn=("app", 9)).version == 2  # gaps are fine
    assert t.append(events(100, 1), txn=("app", 6)).skipped
    assert t.transaction_version("app") == 9
    assert rows(t.to_arrow()) == rows(events(0, 4))


def test_applications_are_independent(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    t.append(events(0, 1), txn=("a", 3))
    assert t.append(events(1, 1), txn=("b", 0)).version == 2
    assert t.append(events(2, 1), txn=("b", 3)).version == 3
    assert t.append(events(9, 1), txn=("a", 3)).skipped
    assert (t.transaction_version("a"), t.transaction_version("b")) == (3, 3)
    assert t.transaction_version("c") is None
    assert rows(t.to_arrow()) == rows(events(0, 3))


def test_another_table_object_sees_the_committed_batch(mem_uri: str) -> None:
    cl.create_table(mem_uri, EVENTS, writer_id="w1").append(events(0, 3), txn=("query", 1))
    other = cl.open_table(mem_uri, writer_id="w2")
    assert other.append(events(0, 3), txn=("query", 1)).skipped
    stale = cl.open_table(mem_uri, writer_id="w3")  # loaded before the next batch lands
    assert cl.open_table(mem_uri).append(events(3, 3), txn=("query", 2)).version == 2
    assert stale.version == 1
    assert stale.append(events(3, 3), txn=("query", 2)).skipped  # it refreshes first
    assert rows(cl.open_table(mem_uri).to_arrow()) == rows(events(0, 6))


def test_overwrite_with_a_transaction_is_skipped_when_replayed(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    t.append(events(0, 4))
    assert t.overwrite(events(10, 2), txn=("complete", 0)).version == 2
    t.append(events(20, 1))
    assert t.overwrite(events(10, 2), txn=("complete", 0)).skipped
    assert rows(t.to_arrow()) == rows(pa.concat_tables([events(10, 2), events(20, 1)]))


def test_the_batch_id_is_committed_in_the_same_version_as_its_data(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "t", EVENTS)
    version = t.append(events(0, 3), txn=("query-1", 41)).version
    text = (tmp_path / "t" / "_carbonlite" / "log" / f"{version:020d}.json").read_text()
    actions = [json.loads(line) for line in text.split("\n") if line]
    keys = [next(iter(a)) for a in actions]
    assert "appendBlocklets" in keys and "txn" in keys
    assert {"txn": {"app_id": "query-1", "batch_id": 41}} in actions
    assert t.history(limit=1)[0].parameters["batch_id"] == "41"


@pytest.mark.parametrize(
    "txn",
    [("", 1), ("app", -1), ("app", "1"), (1, 1), ("app", 1.0), "app", ("app", 1, 2), ("app",)],
)
def test_invalid_transactions_are_refused(mem_uri: str, txn) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    with pytest.raises(cl.InvalidOptionError, match="txn must be"):
        t.append(events(0, 1), txn=txn)
    assert t.version == 0 and t.count_rows() == 0


@settings(
    max_examples=40,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["spark-a", "spark-b", "job"]),
            st.integers(0, 6),
            st.integers(0, 3),
            st.booleans(),
        ),
        min_size=1,
        max_size=18,
    )
)
def test_random_batches_against_a_model(steps) -> None:
    uri = memory_uri("txn")
    try:
        t = cl.create_table(uri, EVENTS, properties={"blocklet_max_rows": "2"})
        committed: dict[str, int] = {}
        expected: list[pa.Table] = []
        version = 0
        for n, (app, batch, count, reopen) in enumerate(steps):
            writer = cl.open_table(uri) if reopen else t
            data = events(100 * n, count)
            result = writer.append(data, txn=(app, batch))
            if batch > committed.get(app, -1):
                version += 1
                assert (result.version, result.skipped, result.rows) == (version, False, count)
                committed[app] = batch
                expected.append(data)
            else:
                assert (result.version, result.skipped) == (None, True)
            assert writer.transaction_version(app) == committed[app]
        fresh = cl.open_table(uri)
        assert fresh.version == version
        for app in ("spark-a", "spark-b", "job"):
            assert fresh.transaction_version(app) == committed.get(app)
        want = pa.concat_tables(expected) if expected else EVENTS.empty_table()
        # writers append to files of their own, so rows come back grouped by file, not in
        # commit order: compare them as a set of unique ids
        by_id = sorted(rows(fresh.to_arrow()), key=lambda r: r["id"])
        assert by_id == sorted(rows(want), key=lambda r: r["id"])
    finally:
        drop_memory(uri)


def test_a_committer_that_refreshed_after_planning_skips_a_batch_already_there(mem_uri) -> None:
    """A Spark driver plans a batch, refreshes before committing and finds the batch already
    committed (a replay): the commit is skipped, not refused as a damaged log."""
    from carbonlite.metadata import TxnMarker
    from carbonlite.writer.append import AppendCommit

    t = cl.create_table(mem_uri, pa.schema([("x", pa.int64())]))
    planned = t.version
    t.append(pa.table({"x": [1]}), txn=("query", 7))
    writer = t._writer
    stale = AppendCommit(appends=(), txn=TxnMarker("query", 7), overwrite=True)
    result, _ = writer.commit(t.log, t.refresh().snapshot(), stale, read_version=planned)
    assert result.skipped and result.version is None
    assert t.refresh().to_arrow().column("x").to_pylist() == [1]
