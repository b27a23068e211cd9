"""One history (issue 37, sections 1 and 2): the orders that lost acknowledged commits.

Each test replays a reported order by hand (``tests/support/holds.py``): stale writers held at
their puts, a pointer write that fails once, ``clean`` with a zero log retention. Afterwards
the table is checked against the model of row ids (``tests/support/log_model.py``): every
acknowledged commit in the table exactly once and in ``history()`` with the version its
writer was told, nothing unacknowledged visible, time travel to every retained version equal
to the model, and versions below the floor refused rather than read.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import carbonlite as cl
from carbonlite.errors import VersionNotFoundError
from carbonlite.metadata.history import Pointer
from carbonlite.seams import listening
from carbonlite.storage import Storage
from tests.support.holds import Holds
from tests.support.log_model import SCHEMA, Model, Op, check_table, outcome_of, rows

POINTER = "_carbonlite/_last_checkpoint"


def _table() -> tuple[str, cl.Table, Model]:
    uri = f"memory://one-history/{uuid.uuid4().hex}"
    table = cl.create_table(
        uri, SCHEMA, properties={"checkpoint_interval": "5", "log_retention": "0s"}
    )
    return uri, table, Model()


def _commit(model: Model, table: cl.Table, name: str, ids: list[int]) -> None:
    op = model.record(Op(name, added=frozenset(ids)))
    outcome_of(op, table.append(rows(ids, name)))
    assert op.acknowledged


def _record(model: Model, name: str, ids: list[int], holds: Holds) -> Op:
    op = model.record(Op(name, added=frozenset(ids)))
    outcome = holds.outcomes[name]
    assert outcome.error is None, f"{name} raised {outcome.error!r}"
    outcome_of(op, outcome.result)
    return op


@contextmanager
def pointer_fails_once(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The next move of the pointer fails with a transient storage error, once."""
    real = storage.swap
    failed: list[Any] = []

    def swap(path: str, change: Callable[[bytes | None], bytes | None]) -> bytes | None:
        if path.endswith(POINTER) and not failed:
            failed.append(path)
            raise OSError("connection reset by peer")
        return real(path, change)

    monkeypatch.setattr(storage, "swap", swap)
    try:
        yield failed
    finally:
        monkeypatch.setattr(storage, "swap", real)


def issue_37_order(monkeypatch: pytest.MonkeyPatch) -> tuple[str, Model, Op, Op]:
    """The order of issue 37, section 1, replayed: writer O commits versions 1-6; stale writer
    S1 (at 6) is held before its put of 7; O commits 7; S2 (at 7) is held before its put of 8;
    O commits 8 and 9, the pointer's move to checkpoint 9 failing once; ``clean`` (log
    retention 0) keeps checkpoint 9; S1 puts its 7 (a fork) and is held before its retry; S2
    puts its 8. Returns the table, the model, and what S1 and S2 were told."""
    uri, o, model = _table()
    for i in range(1, 7):
        _commit(model, o, "o", [i])
    holds = Holds()
    with listening(holds.listener):
        s1 = cl.open_table(uri, writer_id="s1")  # at version 6
        s1_put = holds.at("s1", "commit.before_put")
        t1 = holds.start("s1", lambda: s1.append(rows([700], "s1")))
        s1_put.wait()
        _commit(model, o, "o", [7])
        s2 = cl.open_table(uri, writer_id="s2")  # at version 7
        s2_put = holds.at("s2", "commit.before_put")
        t2 = holds.start("s2", lambda: s2.append(rows([800], "s2")))
        s2_put.wait()
        _commit(model, o, "o", [8])
        with pointer_fails_once(o.storage, monkeypatch) as failed:
            _commit(model, o, "o", [9])
        assert failed and o.log.last_checkpoint() == 5, "the pointer should have stayed at 5"
        assert 9 in o.log.listing().checkpoints
        result = o.clean(retention=0, force=True)
        assert o.log.version_path(8) in result.log_files
        s1_retry = holds.at("s1", "commit.before_put")
        s1_put.release()
        s1_retry.wait_unless_done(t1)  # s1 put its version 7 (a fork) and stands before its retry
        s2_put.release()
        t2.join()
        s1_retry.release()
        t1.join()
    s2_op = _record(model, "s2", [800], holds)
    s1_op = _record(model, "s1", [700], holds)
    return uri, model, s1_op, s2_op


def test_a_stale_writer_above_a_fork_is_not_told_it_committed(monkeypatch) -> None:
    """In issue 37's order the fast path "pointer below V and V-1 exists" said committed and
    S2's row was lost. S2 must end in the table once, told the version it is at (or told it
    failed and be absent): here both stale writers retry above the floor and commit."""
    uri, model, s1_op, s2_op = issue_37_order(monkeypatch)
    table = cl.open_table(uri)
    assert table.log.look().floor == 9
    assert s2_op.acknowledged and s2_op.version is not None and s2_op.version > 9
    assert s1_op.acknowledged and s1_op.version is not None and s1_op.version > 9
    check_table(uri, model, cleaned=True)
    assert {r.version for r in table.history()} >= {s1_op.version, s2_op.version}
    for below in (4, 7, 8):
        with pytest.raises(VersionNotFoundError, match="no longer in the log"):
            table.to_arrow(version=below)


def test_a_failed_pointer_move_is_reported_as_what_failed(monkeypatch, caplog) -> None:
    """A post-commit step that fails never changes the commit: the version stands, the
    checkpoint document is there, and the failure says the pointer could not be moved."""
    uri, t, model = _table()
    for i in range(1, 5):
        _commit(model, t, "t", [i])
    with pointer_fails_once(t.storage, monkeypatch):
        _commit(model, t, "t", [5])  # version 5: due, its pointer move fails
    assert 5 in t.log.listing().checkpoints
    failure = t.log.post_commit.failures[-1]
    assert (failure.version, failure.step) == (5, "pointer")
    assert "the pointer could not be moved to checkpoint 5" in str(failure)
    assert "the pointer could not be moved to checkpoint 5" in caplog.text
    check_table(uri, model)


def test_clean_raises_the_floor_before_it_deletes_anything(monkeypatch) -> None:
    uri, t, model = _table()
    for i in range(1, 10):
        _commit(model, t, "t", [i])
    seen: list[tuple[int, int]] = []

    def at_floor(name: str) -> None:
        if name == "clean.after_floor":
            seen.append((t.log.look().floor, len(t.log.listing().versions)))

    with listening(at_floor):
        result = t.clean(retention=0, force=True)
    kept = min(t.log.listing().versions)
    assert seen == [(kept, 10)], "the floor moved, then the log was cleaned"
    assert len(result.log_files) >= kept
    check_table(uri, model, cleaned=True)


def test_clean_whose_floor_cannot_move_deletes_no_log_file(monkeypatch) -> None:
    uri, t, model = _table()
    for i in range(1, 10):
        _commit(model, t, "t", [i])
    before = t.log.listing()
    with pointer_fails_once(t.storage, monkeypatch), pytest.raises(OSError, match="reset"):
        t.clean(retention=0, force=True)
    assert t.log.listing() == before
    assert t.log.look().floor == 0
    check_table(uri, model)


def test_the_pointer_codec_keeps_what_earlier_releases_read() -> None:
    assert Pointer(9, 5).encode() == b'{"version":9,"floor":5}'
    assert Pointer.decode(b'{"version": 9}') == Pointer(9, None)  # an earlier release's
    assert Pointer.decode(b"{") is None
    assert Pointer.decode(b'{"version": -1, "floor": 2}') is None
    assert Pointer(9, None).moved(checkpoint=5, floor=None, known_floor=3) == Pointer(9, 3)
    assert Pointer(9, 7).moved(checkpoint=12, floor=4, known_floor=0) == Pointer(12, 7)


def test_a_paused_pointer_move_never_takes_the_pointer_back() -> None:
    """The variant of issue 37, section 1: a checkpoint writer pauses between reading the
    pointer and writing it; meanwhile another writer checkpoints further and ``clean`` keeps
    that checkpoint. The paused move must not take the pointer (or its floor) back, a stale
    writer's version must not be taken for the history, and time travel below the floor is
    refused instead of returning a state that never existed."""
    uri = f"memory://one-history/{uuid.uuid4().hex}"
    props = {"checkpoint_interval": "4", "checkpoint_max_entries": "1000", "log_retention": "0s"}
    o = cl.create_table(uri, SCHEMA, properties=props)
    model = Model()
    for i in range(1, 4):
        _commit(model, o, "o", [i])
    p = cl.open_table(uri, writer_id="p")
    stale = cl.open_table(uri, writer_id="s")  # at version 3
    holds = Holds()
    with listening(holds.listener):
        paused = holds.at("p", "storage.before_swap_write")
        stale_put = holds.at("s", "commit.before_put")
        tp = holds.start("p", lambda: p.append(rows([4], "p")))  # version 4, due
        paused.wait()  # p's checkpoint 4 is written; its pointer move is paused
        ts = holds.start("s", lambda: stale.append(rows([300], "s")))
        stale_put.wait()
        for i in range(5, 9):
            _commit(model, o, "o", [i])  # checkpoint 8, pointer 8
        o.clean(retention=0, force=True)  # keeps 8: floor 8, versions 0-7 deleted
        assert o.log.look().floor == 8
        paused.release()
        tp.join()
        stale_put.release()
        ts.join()
    p_op = _record(model, "p", [4], holds)
    assert p_op.version == 4
    s_op = _record(model, "s", [300], holds)
    assert s_op.acknowledged and s_op.version is not None and s_op.version > 8
    pointer = Pointer.decode(o.storage.read(o.storage.join(o.root, POINTER)))
    assert pointer is not None and pointer.floor == 8
    assert pointer.checkpoint is not None and pointer.checkpoint >= 8
    check_table(uri, model, cleaned=True)
    table = cl.open_table(uri)
    with pytest.raises(VersionNotFoundError, match="no longer in the log"):
        table.to_arrow(version=4)
