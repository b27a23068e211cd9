"""The commit protocol under forced interleavings (tests/support/interleave.py).

Each scenario starts 2-4 actors on a fresh table: appends with and without a transaction,
deletes, handoff and compaction, clean, recover, checkpoint writes (a small
``checkpoint_interval`` makes every other commit write one) and stale handles. The harness
pauses each actor at every seam it reaches (``carbonlite.seams``) and runs them in every order
for the small scenarios, in seeded random orders for the larger ones. After each schedule the
table is checked against a model of row ids (tests/support/log_model.py): every acknowledged
commit visible exactly once, nothing unacknowledged visible, no hole or fork in the log, time
travel to every retained version equal to the model, ``changes`` from every start delivering
each committed row exactly once.

The slow tier explores more than 10,000 schedules; the default run a few hundred.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.compaction import recover as recover_module
from carbonlite.errors import CarbonLiteError, CommitStateUnknownError
from carbonlite.seams import SEAMS
from carbonlite.writer import lease as lease_module
from carbonlite.writer.lease import DEFAULT_LEASE_SECONDS
from tests.support.interleave import (
    Actor,
    Outcome,
    explore_all,
    explore_random,
    run_schedule,
)
from tests.support.log_model import SCHEMA, Model, Op, check_table, outcome_of, rows


@dataclass
class State:
    uri: str
    model: Model
    cleaned: bool = False
    errors_allowed: tuple[type[BaseException], ...] = ()


def fresh_table(properties: dict[str, str] | None = None) -> str:
    uri = f"memory://interleave/{uuid.uuid4().hex}"
    cl.create_table(uri, SCHEMA, properties={"checkpoint_interval": "2", **(properties or {})})
    return uri


def finished_segment(
    *batches: Sequence[int], properties: dict[str, str] | None = None
) -> tuple[str, Model]:
    """A fresh table whose segment holds ``batches`` (one commit each, in the model) and is
    finished streaming: ready for handoff."""
    uri, model = fresh_table(properties), Model()
    setup = cl.open_table(uri, writer_id="setup")
    for version, ids in enumerate(batches, start=1):
        setup.append(rows(ids))
        model.record(Op("setup", added=frozenset(ids), version=version, acknowledged=True))
    setup.finish_streaming()
    return uri, model


def settle(op: Op, call: Callable[[], Any]) -> None:
    """Run one commit and record what its caller was told."""
    try:
        outcome_of(op, call())
    except CommitStateUnknownError:
        op.uncertain = True
    except CarbonLiteError as exc:
        op.error = exc


def append(model: Model, table: cl.Table, name: str, ids: Sequence[int], txn: Any = None) -> Actor:
    def run() -> None:
        op = model.record(Op(name, added=frozenset(ids)))
        settle(op, lambda: table.append(rows(ids, name), txn=txn))

    return Actor(name, run)


def appends(model: Model, table: cl.Table, name: str, batches: Sequence[Sequence[int]]) -> Actor:
    def run() -> None:
        for ids in batches:
            op = model.record(Op(name, added=frozenset(ids)))
            settle(op, lambda ids=ids: table.append(rows(ids, name)))

    return Actor(name, run)


def delete(model: Model, table: cl.Table, name: str, ids: Sequence[int]) -> Actor:
    def run() -> None:
        op = model.record(Op(name, deleted=frozenset(ids)))
        settle(op, lambda: table.delete(pc.field("id").isin(list(ids))))
        if op.version is not None:
            info = table.log._commit_info(op.version)
            op.read_version = None if info is None else info.read_version

    return Actor(name, run)


def maintain(
    model: Model,
    table: cl.Table,
    name: str,
    call: Callable[[cl.Table], Any],
    *,
    removes_data: bool = False,
) -> Actor:
    """A commit without data change (handoff, compaction, clean): each version it made. A
    refused one that ``removes_data`` (a clean) may have deleted data files before it failed."""

    def run() -> None:
        try:
            result = call(table)
        except (CarbonLiteError, OSError) as exc:
            model.record(Op(name, error=exc, removes_data=removes_data))
            return
        versions = getattr(result, "versions", None)
        if versions is None:
            version = getattr(result, "version", None)
            versions = () if version is None else (version,)
        for v in versions:
            model.record(Op(name, version=v, acknowledged=True, removes_data=removes_data))

    return Actor(name, run)


def check(state: State, outcomes: dict[str, Outcome]) -> None:
    for name, outcome in outcomes.items():
        assert outcome.error is None, f"actor {name} raised {outcome.error!r}"
    for op in state.model.ops:
        if op.error is not None and not isinstance(op.error, state.errors_allowed):
            raise AssertionError(f"{op.actor} was refused: {op.error!r}")
    check_table(state.uri, state.model, cleaned=state.cleaned)


# --- scenarios ------------------------------------------------------------------------------


def two_appends() -> tuple[State, list[Actor]]:
    """Two writers append at once; every other version writes a checkpoint (the order of
    issue 24: one writer's version is read, built on and checkpointed by the other before the
    first one's post-write check)."""
    uri, model = fresh_table(), Model()
    a, b = cl.open_table(uri, writer_id="a"), cl.open_table(uri, writer_id="b")
    return State(uri, model), [append(model, a, "a", [0, 1]), append(model, b, "b", [10, 11])]


def replayed_batch() -> tuple[State, list[Actor]]:
    """The same micro-batch (query q, batch 0) committed by two drivers at once: exactly one
    of them commits it, the other is told it was skipped."""
    uri, model = fresh_table({"checkpoint_interval": "1"}), Model()
    a, b = (cl.open_table(uri, writer_id=w) for w in "ab")
    batch = [0, 1, 2]
    return State(uri, model), [
        append(model, a, "a", batch, txn=("q", 0)),
        append(model, b, "b", batch, txn=("q", 0)),
    ]


def replayed_batch_and_append() -> tuple[State, list[Actor]]:
    """The replayed micro-batch beside a blind append and a later batch of the same query."""
    state, actors = replayed_batch()
    c = cl.open_table(state.uri, writer_id="c")
    return state, [
        *actors,
        appends(state.model, c, "c", [[10], [11]]),
    ]


def stale_writer_and_clean() -> tuple[State, list[Actor]]:
    """A writer whose handle stands on version 1 appends while another writer commits past it
    and cleans the log behind a checkpoint (log retention 0): the stale writer's version may
    land where clean removed the log (a fork) and must then be retried on the latest."""
    uri = fresh_table({"log_retention": "0s"})
    model = Model()
    setup = cl.open_table(uri, writer_id="setup")
    model.record(Op("setup", added=frozenset({100}), version=1, acknowledged=True))
    setup.append(rows([100]))
    stale = cl.open_table(uri, writer_id="s")
    other = cl.open_table(uri, writer_id="o")

    def busy() -> None:
        for ids in ([20], [21], [22]):
            op = model.record(Op("o", added=frozenset(ids)))
            settle(op, lambda ids=ids: other.append(rows(ids, "o")))
        result = other.clean(retention=0, force=True)
        if result.version is not None:
            model.record(Op("o", version=result.version, acknowledged=True, removes_data=True))

    return State(uri, model, cleaned=True), [append(model, stale, "s", [0, 1]), Actor("o", busy)]


def append_during_handoff() -> tuple[State, list[Actor]]:
    """Ingestion goes on while a handoff rewrites a finished segment and clean runs."""
    uri, model = finished_segment([100, 101], [102], properties={"log_retention": "0s"})
    a, h = cl.open_table(uri, writer_id="a"), cl.open_table(uri, writer_id="h")
    c = cl.open_table(uri, writer_id="c")
    return State(uri, model, cleaned=True), [
        append(model, a, "a", [0, 1]),
        maintain(model, h, "h", lambda t: t.handoff()),
        maintain(model, c, "c", lambda t: t.clean(retention=0, force=True), removes_data=True),
    ]


def delete_and_appends() -> tuple[State, list[Actor]]:
    """A delete races appends and a compaction of the rows it deletes."""
    uri, model = finished_segment(range(100, 104))
    d, a = cl.open_table(uri, writer_id="d"), cl.open_table(uri, writer_id="a")
    h = cl.open_table(uri, writer_id="h")
    return State(uri, model), [
        delete(model, d, "d", [100, 102, 0]),
        append(model, a, "a", [0, 1]),
        maintain(model, h, "h", lambda t: t.handoff()),
    ]


def upserts_and_delete() -> tuple[State, list[Actor]]:
    """Two upserts into a primary-key table and a delete of keys they write: one row per key,
    each change serialized in version order."""
    uri = f"memory://interleave/{uuid.uuid4().hex}"
    cl.create_table(uri, SCHEMA, primary_key=["id"], properties={"checkpoint_interval": "2"})
    model = Model()
    setup = cl.open_table(uri, writer_id="setup")
    setup.append(rows([100, 101, 102]))
    model.record(Op("setup", added=frozenset({100, 101, 102}), version=1, acknowledged=True))
    u1, u2, d = (cl.open_table(uri, writer_id=w) for w in ("u1", "u2", "d"))

    def upsert(table: cl.Table, name: str, ids: list[int]) -> Actor:
        def run() -> None:
            op = model.record(Op(name, added=frozenset(ids), upsert=True))
            settle(op, lambda: table.append(rows(ids, name)))

        return Actor(name, run)

    return State(uri, model), [
        upsert(u1, "u1", [100, 0]),
        upsert(u2, "u2", [0, 1]),
        delete(model, d, "d", [101, 0]),
    ]


def merges_update_and_append() -> tuple[State, list[Actor]]:
    """Two merges inserting the same new key, an update of a row one of them matches, and a
    blind append: each key once, as if the row-level changes ran one after another."""
    uri = fresh_table()
    model = Model()
    setup = cl.open_table(uri, writer_id="setup")
    setup.append(rows([100, 101, 102]))
    model.record(Op("setup", added=frozenset({100, 101, 102}), version=1, acknowledged=True))
    m1, m2, u, a = (cl.open_table(uri, writer_id=w) for w in ("m1", "m2", "u", "a"))

    def merge(table: cl.Table, name: str, ids: list[int]) -> Actor:
        def run() -> None:
            op = model.record(Op(name, added=frozenset(ids), upsert=True))
            settle(op, lambda: table.merge(rows(ids, name), on=["id"]))

        return Actor(name, run)

    def update() -> None:
        op = model.record(Op("u", added=frozenset({101}), upsert=True))
        settle(op, lambda: u.update(pc.field("id") == 101, {"kind": "u"}))

    return State(uri, model), [
        merge(m1, "m1", [101, 5]),
        merge(m2, "m2", [5, 6]),
        Actor("u", update),
        append(model, a, "a", [7]),
    ]


def two_handoffs() -> tuple[State, list[Actor]]:
    """Two handoffs of the same finished segment and an append: the segment is handed off once."""
    uri, model = finished_segment([100, 101])
    h1, h2, a = (cl.open_table(uri, writer_id=w) for w in ("h1", "h2", "a"))
    return State(uri, model, errors_allowed=(cl.CommitConflictError,)), [
        maintain(model, h1, "h1", lambda t: t.handoff()),
        maintain(model, h2, "h2", lambda t: t.handoff()),
        append(model, a, "a", [0]),
    ]


def recover_during_append() -> tuple[State, list[Actor]]:
    """recover (min_age 0) runs while a writer holds written but uncommitted blocklets and a
    handoff holds leased outputs: neither loses what it then commits."""
    uri, model = finished_segment([100])
    a, h, r = (cl.open_table(uri, writer_id=w) for w in "ahr")
    return State(uri, model), [
        append(model, a, "a", [0]),
        maintain(model, h, "h", lambda t: t.handoff()),
        Actor("r", lambda: r.recover(min_age=0)),
    ]


SMALL = {"two_appends": two_appends}
WITHOUT_HISTORY = frozenset(
    s for s in SEAMS if not s.startswith("history.") and s != "storage.before_swap_write"
)
"""Every seam but the history's own steps and the pointer's swap: with no ``clean`` in a
scenario the floor never moves, so pausing in a look only multiplies the orders (two_appends:
15,476 with them), and the swap is the last step of a checkpoint, already paused at
``checkpoint.after_document``; the generated scenarios of ``test_generated_orders.py`` pause
at all of them, beside ``clean`` and storage faults."""
EXHAUSTIVE_SLOW = {"replayed_batch": replayed_batch}
"""(The stale writer racing clean had every order of five seams here, 7,867 of them; the
generated scenarios of test_generated_orders.py, whose "log" theme is stale writers, cleans,
checkpoints and storage faults at every seam of the history, took its place.)"""
LARGE = {
    "replayed_batch_and_append": replayed_batch_and_append,
    "stale_writer_and_clean": stale_writer_and_clean,
    "append_during_handoff": append_during_handoff,
    "delete_and_appends": delete_and_appends,
    "recover_during_append": recover_during_append,
    "two_handoffs": two_handoffs,
    "upserts_and_delete": upserts_and_delete,
    "merges_update_and_append": merges_update_and_append,
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_order(name: str) -> None:
    found = explore_all(SMALL[name], check, limit=2_000, pause_at=WITHOUT_HISTORY)
    assert found.exhaustive, f"{name}: more than 2,000 orders"
    assert found.schedules > 20
    assert {"commit.before_put", "commit.after_put", "checkpoint.after_document"} <= found.seams


@pytest.mark.parametrize(
    "name",  # merges_update_and_append (5 s) runs in the slow tier
    [
        pytest.param(n, marks=pytest.mark.slow) if n == "merges_update_and_append" else n
        for n in sorted(LARGE)
    ],
)
def test_random_orders(name: str) -> None:
    found = explore_random(LARGE[name], check, seeds=range(40))
    assert found.schedules == 40


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", sorted(LARGE))
def test_many_random_orders(name: str) -> None:
    seeds = range(1_000, 1_060)
    assert explore_random(LARGE[name], check, seeds=seeds).schedules == len(seeds)


@pytest.mark.slow
# every order of a replayed batch: about 20 s on 2 cores
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", sorted(EXHAUSTIVE_SLOW))
def test_every_order_slow(name: str) -> None:
    found = explore_all(EXHAUSTIVE_SLOW[name], check, limit=30_000, pause_at=WITHOUT_HISTORY)
    assert found.exhaustive, f"{name}: more than 30,000 orders"


def test_the_fork_guard_order_is_replayed() -> None:
    """The order issue 24 reported, by its choices: writer b's version 1 lands; writer a reads
    it, commits version 2 and checkpoints it; only then does b check its version. b's version
    must stay, and b must be told it committed."""
    schedule = run_schedule(
        two_appends, check, choices=[1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0], pause_at=WITHOUT_HISTORY
    )
    steps = [f"{a}@{s}" for a, s in schedule.trace]
    assert steps.index("a@checkpoint.after_document") < steps.index("b@commit.after_put")
    b = next(o for o in schedule.state.model.ops if o.actor == "b")
    assert b.acknowledged and b.version == 1


def test_seams_reached() -> None:
    """The scenarios together reach every seam of the commit protocol they exercise."""
    seen: set[str] = set()
    scenarios = itertools.chain(SMALL.values(), EXHAUSTIVE_SLOW.values(), LARGE.values())
    for scenario, seed in itertools.product(scenarios, range(4)):
        schedule = run_schedule(scenario, check, seed=seed)
        seen |= {s for o in schedule.outcomes.values() for s in o.seams}
    # the handoff, then clean (which then has data files to delete), then the append
    schedule = run_schedule(append_during_handoff, check, choices=[1] * 22)
    seen |= {s for o in schedule.outcomes.values() for s in o.seams}
    expected = {
        "commit.before_put",
        "commit.after_put",
        "commit.before_checkpoint",
        "log.after_read",
        "checkpoint.after_manifests",
        "checkpoint.after_document",
        "append.after_data",
        "row_change.after_plan",
        "compaction.after_plan",
        "compaction.after_execute",
        "clean.after_plan",
        "clean.after_data_deleted",
        "clean.before_log_delete",
        "recover.after_list_files",
        "recover.after_list_leases",
        "lease.after_take",
        "lease.before_check",
    }
    assert expected <= seen, sorted(expected - seen)


# --- lease expiry: a deterministic clock ------------------------------------------------------


class Clock:
    """The wall clock leases and recover read, moved only by the scenario's clock actor."""

    def __init__(self) -> None:
        self.ms = int(time.time() * 1000)

    def now_ms(self) -> int:
        return self.ms

    def time(self) -> float:
        return self.ms / 1000


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(lease_module, "_now_ms", fake.now_ms)
    monkeypatch.setattr(recover_module, "time", fake)
    return fake


def lease_expiry(clock: Clock) -> Callable[[], tuple[State, list[Actor]]]:
    """A handoff (its outputs leased), recover with min_age 0, and the clock jumping past the
    lease's term (the heartbeat renews it in real time, every 200 s: not within a schedule)."""

    def scenario() -> tuple[State, list[Actor]]:
        uri, model = finished_segment([100, 101])
        h, r = cl.open_table(uri, writer_id="h"), cl.open_table(uri, writer_id="r")

        def jump() -> None:
            clock.ms += (DEFAULT_LEASE_SECONDS + 1) * 1000

        return State(uri, model, errors_allowed=(cl.CommitConflictError,)), [
            maintain(model, h, "h", lambda t: t.handoff()),
            Actor("r", lambda: r.recover(min_age=0)),
            Actor("clock", jump),
        ]

    return scenario


LEASE_SEAMS = frozenset(
    {
        "lease.after_take",
        "lease.before_check",
        "compaction.after_execute",
        "commit.before_put",
        "commit.after_put",
        "recover.after_list_files",
        "recover.after_list_leases",
        "recover.before_cut",
    }
)
"""The seams the lease scenario is about (the others pass, keeping every order few)."""


def past_the_assumption(outcomes: dict[str, Outcome]) -> bool:
    """Whether the clock jumped between the handoff's lease check and its put (the one
    assumption of leases: a commit lands within a third of the term after its check)."""
    h, jumped = outcomes["h"], outcomes["clock"].finished
    if "lease.before_check" not in h.seams:
        return False
    after_check = h.seams.index("lease.before_check")
    puts = [i for i, s in enumerate(h.seams) if s == "commit.before_put" and i > after_check]
    landed = [i for i, s in enumerate(h.seams) if s == "commit.after_put"]
    if not puts:
        return False
    checked = h.steps[puts[0]]  # the lease was checked in the step that reached the put
    put = h.steps[landed[0]] if landed else h.finished
    return checked < jumped < put


def _lease_check(broken: list[str]) -> Callable[[State, dict[str, Outcome]], None]:
    """The model check, except when the clock jumped between the handoff's lease check and
    its put (which the lease's documented assumption excludes): then ``broken`` records what
    broke instead."""

    def check_lease(state: State, outcomes: dict[str, Outcome]) -> None:
        try:
            check(state, outcomes)
        except (AssertionError, CarbonLiteError) as exc:
            if not past_the_assumption(outcomes):
                raise
            broken.append(str(exc))

    return check_lease


def test_lease_expiry_in_random_orders(clock: Clock) -> None:
    found = explore_random(
        lease_expiry(clock), _lease_check([]), seeds=range(80), pause_at=LEASE_SEAMS
    )
    assert found.schedules == 80


@pytest.mark.slow
def test_lease_expiry_in_every_order(clock: Clock) -> None:
    """Every order of a handoff, recover and a clock jump past the lease's term: the table is
    never broken, except when the jump falls between the handoff's lease check and its put,
    which the lease's documented assumption excludes; the exploration must meet that case too
    (a harness that cannot see the assumption's edge would prove nothing about it)."""
    broken: list[str] = []
    found = explore_all(
        lease_expiry(clock), _lease_check(broken), limit=3_000, pause_at=LEASE_SEAMS
    )
    assert found.exhaustive
    assert {"lease.after_take", "lease.before_check", "recover.before_cut"} <= found.seams
    assert broken, "no order put the clock between the lease check and the put"
