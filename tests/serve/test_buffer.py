"""The service's buffer: a reader gets from memory exactly the puts its version lacks, or is
told to plan again, never less; memory stays within its limits; received sequences are runs."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbonlite.serve.buffer import (
    Buffer,
    Mark,
    Put,
    SequenceError,
    StaleReadError,
    _Runs,
)


def put(producer: str, sequence: int, lsn: int, rows: int = 10) -> Put:
    data = pa.table({"producer": [producer] * rows, "seq": [sequence] * rows})
    return Put("t", producer, sequence, lsn, data, (1, 2))


def add(buffer: Buffer, p: Put, marker: int | None = None) -> None:
    """``p`` checked as new (the table's marker of its producer: ``marker``), then added."""
    assert buffer.check(p.table, p.producer_id, p.sequence, lambda: marker)
    buffer.add(p)


def keys(puts: list[Put]) -> list[tuple[str, int]]:
    """(producer, sequence) of each put's rows, in order."""
    out = []
    for p in puts:
        out.append((p.rows.column("producer")[0].as_py(), p.rows.column("seq")[0].as_py()))
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-50, 50), max_size=80), st.lists(st.integers(-60, 60), max_size=30))
def test_runs_hold_exactly_the_numbers_added(added: list[int], probes: list[int]) -> None:
    runs, model = _Runs(), set()
    for n in added:
        runs.add(n)
        model.add(n)
        assert runs.starts == sorted(runs.starts)
        assert all(s <= e for s, e in zip(runs.starts, runs.ends, strict=True))
        # disjoint and not touching: each run is as long as it can be
        assert all(e + 1 < s for e, s in zip(runs.ends, runs.starts[1:], strict=False))
    for n in [*probes, *added]:
        assert (n in runs) == (n in model)
    gaps = sum(1 for n in model if n - 1 not in model)
    assert len(runs) == gaps


def test_a_producer_counting_up_is_one_run() -> None:
    buffer = Buffer()
    for seq in range(20_000):
        assert buffer.check("t", "p", seq, lambda: None)
        buffer.add(put("p", seq, seq + 1, rows=1))
        if seq % 1000 == 999:
            buffer.committed("t", buffer.pending("t"))
    producer = buffer._tables["t"].producers["p"]
    assert len(producer.received) == 1
    assert buffer.check("t", "p", 12_345, lambda: None) is False  # a re-send
    assert buffer.check("t", "p", 20_000, lambda: None) is True


def test_sequences_new_resent_and_regressed() -> None:
    buffer = Buffer()
    assert buffer.check("t", "p", 5, lambda: 3) is True  # the table's marker is 3
    buffer.add(put("p", 5, 1))
    buffer.add(put("p", 9, 2))
    assert buffer.check("t", "p", 9, lambda: None) is False
    assert buffer.check("t", "p", 5, lambda: None) is False
    assert buffer.check("t", "p", 3, lambda: None) is False  # the table's marker, seen first
    with pytest.raises(SequenceError, match="sequence 7 is older and was never received"):
        buffer.check("t", "p", 7, lambda: None)
    assert buffer.check("t", "q", 0, lambda: 0) is False  # committed before the service ran


def test_a_producer_first_seen_in_the_replayed_log_is_known_as_one_seen_live() -> None:
    """Replayed at start: p's puts 4 and 5 (the table's marker is 5: committed before the
    crash) and 6 (buffered again). 5, the marker when p was first seen, and every sequence
    in the log are re-sends, as they are for a producer seen live; 3 never was received."""
    buffer = Buffer()
    for seq in (4, 5, 6):
        buffer.replayed("t", "p", seq, marker=5)
    buffer.add(put("p", 6, 3))
    assert [buffer.check("t", "p", s, lambda: None) for s in (4, 5, 6, 7)] == [
        False,
        False,
        False,
        True,
    ]
    with pytest.raises(SequenceError, match="sequence 3 is older and was never received"):
        buffer.check("t", "p", 3, lambda: None)
    live = Buffer()  # the same producer seen live: its first put 6, the marker 5
    add(live, put("p", 6, 1), marker=5)
    assert live.check("t", "p", 5, lambda: None) is False
    # a put is added only after its producer is known from the table's marker
    with pytest.raises(RuntimeError, match="neither checked nor replayed"):
        Buffer().add(put("p", 0, 1))


def test_pending_puts_are_in_log_order_however_they_were_added() -> None:
    """q's put was logged (LSN 1) before p's (2, 3), but added after them (its thread was
    held between the log and the buffer): the log must keep LSN 1 until q's put is in the
    table, and a flush takes the puts in the order they were logged."""
    buffer = Buffer()
    add(buffer, put("p", 0, 2))
    add(buffer, put("p", 1, 3))
    add(buffer, put("q", 0, 1))
    assert buffer.lowest_pending_lsn() == 1
    assert [(p.producer_id, p.lsn) for p in buffer.pending("t")] == [("q", 1), ("p", 2), ("p", 3)]
    buffer.committed("t", [p for p in buffer.pending("t") if p.producer_id == "p"])
    assert buffer.lowest_pending_lsn() == 1
    buffer.committed("t", buffer.pending("t"))
    assert buffer.lowest_pending_lsn() is None


def test_a_mark_of_another_run_is_stale() -> None:
    buffer = Buffer()
    add(buffer, put("p", 0, 1))
    assert keys(buffer.puts_after("t", {}, buffer.mark())) == [("p", 0)]
    with pytest.raises(StaleReadError, match="call GetFlightInfo again"):
        buffer.puts_after("t", {}, Mark("another run", 0))


def test_memory_stays_within_its_byte_limit() -> None:
    one = put("p", 0, 1, rows=100).rows.get_total_buffer_size()
    buffer = Buffer(retain_bytes=10 * one)
    for seq in range(1000):
        add(buffer, put("p", seq, seq + 1, rows=100))
        buffer.committed("t", buffer.pending("t"))
    table = buffer._tables["t"]
    assert table.retained_bytes <= 10 * one
    assert len(table.retained) == len(table.producers["p"].entries) == 10
    assert keys(buffer.puts_after("t", {"p": 994}, buffer.mark())) == [
        ("p", s) for s in range(995, 1000)
    ]


def test_committed_puts_read_from_the_commits_rows() -> None:
    """Given the commit's rows, the puts kept for readers read slices of them (their own rows
    let go), the same rows as before; a put left pending keeps its own."""
    buffer = Buffer()
    puts = [put("p", 0, 1, rows=3), put("q", 0, 2, rows=2), put("p", 1, 3, rows=4)]
    for p in puts:
        add(buffer, p)
    committing = [puts[0], puts[2]]
    block = pa.concat_tables([p.rows for p in committing]).combine_chunks()
    with pytest.raises(ValueError, match="rows given"):
        buffer.committed("t", committing, block.slice(1), (1, 2))
    with pytest.raises(ValueError, match="column ids"):
        buffer.committed("t", committing, block, (1,))
    buffer.committed("t", committing, block, (4, 5))  # the commit's columns: ids 4 and 5
    assert buffer.pending_rows() == 2
    got = buffer.puts_after("t", {}, buffer.mark())
    assert [p.rows.to_pylist() for p in got] == [p.rows.to_pylist() for p in (*committing, puts[1])]
    assert [p.column_ids for p in got] == [(4, 5), (4, 5), (1, 2)]
    entries = buffer._tables["t"].producers["p"].entries
    assert all(e.block is block and e.put.rows.num_rows == 0 for e in entries)
    assert keys(buffer.puts_after("t", {"p": 0}, buffer.mark())) == [("p", 1), ("q", 0)]
    assert buffer.retained() == (2, sum(p.rows.get_total_buffer_size() for p in committing))


def test_old_commits_leave_memory_by_age(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("carbonlite.serve.buffer.time.monotonic", lambda: now[0])
    buffer = Buffer(retain_seconds=60)
    add(buffer, put("p", 0, 1))
    buffer.committed("t", buffer.pending("t"))
    mark = buffer.mark()
    assert buffer.producers("t") == {"p"}
    now[0] += 61
    assert buffer.producers("t") == set()  # gone; nothing committed after the mark was
    assert buffer.puts_after("t", {}, mark) == []


# -- a model: readers plan, puts arrive, flushes commit, limits drop ------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from("abc"), st.integers(1, 3)),
        st.tuples(st.just("commit"), st.integers(0, 4)),
        st.tuples(st.just("plan")),
        st.tuples(st.just("read"), st.integers(0, 5)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops=ops, limit=st.integers(0, 12))
def test_readers_get_exactly_what_their_version_lacks_or_plan_again(
    ops: list[tuple], limit: int
) -> None:
    """The table is modelled by its producers' committed markers. A reader plans (mark, then
    the version's markers of the producers in memory); later, from memory it must get every
    put with a sequence above its version's marker, each once and nothing else, or a
    StaleReadError, which may only happen if a put committed after its mark left memory."""
    one = put("a", 0, 1, rows=1).rows.get_total_buffer_size()
    buffer = Buffer(retain_bytes=limit * one)
    table_markers: dict[str, int] = {}  # the table: each producer's last committed sequence
    next_seq = {"a": 0, "b": 0, "c": 0}
    lsn = 0
    plans: list[tuple[Mark, dict[str, int | None], dict[str, int]]] = []
    received: list[tuple[str, int]] = []
    for op in ops:
        if op[0] == "put":
            _, producer, step = op
            next_seq[producer] += step
            lsn += 1
            assert buffer.check("t", producer, next_seq[producer], lambda: None)
            buffer.add(put(producer, next_seq[producer], lsn, rows=1))
            received.append((producer, next_seq[producer]))
        elif op[0] == "commit":
            pending = buffer.pending("t")[: op[1] or None]  # a prefix, as a flush takes
            for p in pending:
                table_markers[p.producer_id] = max(table_markers.get(p.producer_id, -1), p.sequence)
            if pending:
                buffer.committed("t", pending)
        elif op[0] == "plan":
            mark = buffer.mark()
            version = dict(table_markers)  # the snapshot, read after the mark
            noted = {p: version.get(p) for p in buffer.producers("t")}
            plans.append((mark, noted, version))
        elif plans:
            mark, noted, version = plans[op[1] % len(plans)]
            lacking = sorted(k for k in received if k[1] > version.get(k[0], -1))
            try:
                got = sorted(keys(buffer.puts_after("t", noted, mark)))
            except StaleReadError:
                assert buffer._tables["t"].dropped_through > mark.commits
                continue
            assert got == lacking
