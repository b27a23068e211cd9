"""Running generated scenarios (tests/support/scenarios.py): build, run, check, replay.

:func:`run_generated` builds the scenario of a seed on a storage (:class:`Where`: memory://,
a local directory, an S3 bucket), starts its fault plan (tests/support/faults.py), runs the
actors in the order the same seed draws (tests/support/orders.py: PCT or a random walk) and
checks the model (tests/support/log_model.py):

- every actor ended normally; every refusal is one its kind may meet (a schema change
  refusing an append written before it, a conflict between two compactions, a version
  cleaned away under time travel) or followed a fault that struck that actor;
- a commit whose outcome its actor could not tell (``CommitStateUnknownError``) is settled by
  the log, as a user would: committed if the history holds its commit id at its version;
- the table against the model (``check_table``: rows, holes, forks, time travel, changes,
  the history and its commit ids), every read made during the schedule, and each stream
  consumer's polls (finished by one more poll after the schedule).

A failure's message names the seed, the storage, the whole scenario and the faults that
struck; :func:`replay` runs that seed alone.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import carbonlite as cl
from carbonlite.errors import (
    CarbonLiteError,
    CommitConflictError,
    DataUnavailableError,
    SchemaMismatchError,
    VersionNotFoundError,
)
from carbonlite.seams import SEAMS, listening
from tests.support.faults import Injector
from tests.support.interleave import Actor, Outcome, Schedule, ScheduleError, forgetting_memory
from tests.support.log_model import (
    SCHEMA,
    Model,
    Op,
    Poll,
    change_ids,
    check_polls,
    check_reads,
    check_table,
)
from tests.support.orders import run_ordered
from tests.support.parking import Parker
from tests.support.scenario_actors import GenState, actor_body, rows_for
from tests.support.scenarios import SETUP_BASE, Generated, generate

Place = Literal["memory", "local", "s3"]


@dataclass(frozen=True)
class Where:
    """Where generated tables live: each schedule gets a fresh table under ``base``."""

    place: Place
    base: str
    options: dict[str, Any] | None = None

    def new_uri(self) -> str:
        return f"{self.base.rstrip('/')}/{uuid.uuid4().hex}"

    def pausable(self, gen: Generated) -> frozenset[str] | None:
        """The seams ``gen`` pauses at here: on local files not inside a pointer's swap, which
        holds the pointer's lock (docs/STORAGE.md), so every other actor's swap would wait for
        an actor the schedule holds."""
        if self.place != "local":
            return gen.pause_at
        return (gen.pause_at or frozenset(SEAMS)) - {"storage.before_swap_write"}

    def remove(self, uri: str) -> None:
        """Drop a local table once checked (memory:// is forgotten by the harness; S3 tables
        go with their bucket)."""
        if self.place == "local":
            shutil.rmtree(uri, ignore_errors=True)


MEMORY = Where("memory", "memory://generated")


# --- building -----------------------------------------------------------------------------------


def build(gen: Generated, where: Where) -> tuple[GenState, list[Actor]]:
    """The table and the actors of ``gen`` (stale ones already begun and held)."""
    uri = where.new_uri()
    cl.create_table(uri, SCHEMA, properties=gen.properties, storage_options=where.options)
    state = GenState(uri, Model(), cleaned=gen.cleans, gen=gen, options=where.options)
    setup = state.open("setup")
    state.storage, state.root = setup.storage, setup.root
    state.kinds = {a.name: a.kind for a in gen.actors}
    parker, parked = Parker(), {}
    try:
        with listening(parker.listener):
            if gen.setup.columnar:
                for c in (0, 1):
                    _setup_append(state, setup, (50 + 2 * c, 51 + 2 * c))
                    setup.finish_streaming()
                    setup.handoff()
            state.after_batch[0] = setup.version
            pointers = [_pointer_bytes(setup)]
            for k in range(1, gen.setup.batches + 1):
                _setup_append(state, setup, (SETUP_BASE + 10 * k, SETUP_BASE + 10 * k + 1))
                state.after_batch[k] = setup.version
                if _pointer_bytes(setup) != pointers[-1]:
                    pointers.append(_pointer_bytes(setup))
                for spec in gen.actors:
                    if spec.parked_after == k:
                        body = actor_body(state, spec, state.open(spec.name))
                        parked[spec.name] = parker.park(spec.name, body)
            if gen.setup.pointer_lag:
                _unmove_pointer(setup, pointers)
            if gen.setup.finish:
                setup.finish_streaming()
            if gen.setup.clean:
                cleaned = setup.clean(retention=0, force=True)
                if cleaned.version is not None:
                    op = Op("setup", version=cleaned.version, acknowledged=True, removes_data=True)
                    state.model.record(op)
    except BaseException:
        parker.release_all()
        raise
    state.injector = Injector(setup.storage, setup.root, gen.faults)
    actors = [
        Actor(s.name, parked[s.name].resume)
        if s.name in parked
        else Actor(s.name, actor_body(state, s, state.open(s.name)))
        for s in gen.actors
    ]
    return state, actors


def _pointer_bytes(setup: cl.Table) -> bytes | None:
    setup.log.post_commit.settle()
    return setup.log._read_pointer()


def _unmove_pointer(setup: cl.Table, pointers: list[bytes | None]) -> None:
    """The set-up's fault: its last pointer move failed (the pointer document is the one
    before it, or there is none)."""
    if len(pointers) < 2:
        return
    path = setup.log._pointer
    if pointers[-2] is None:
        setup.storage.delete(path)
    else:
        setup.storage.put(path, pointers[-2])


def _setup_append(state: GenState, setup: cl.Table, ids: tuple[int, int]) -> None:
    result = setup.append(rows_for(setup.schema, ids, "setup"))
    state.model.record(Op("setup", added=frozenset(ids), version=result.version, acknowledged=True))


# --- checking -----------------------------------------------------------------------------------


def allowed(gen: Generated, kind: str) -> tuple[type[BaseException], ...]:
    """The refusals an actor of ``kind`` may meet in ``gen`` without a fault."""
    out: list[type[BaseException]] = []
    if gen.has("schema") and kind in ("append", "stale_append", "retry_append", "update", "merge"):
        out.append(SchemaMismatchError)
    if kind in ("handoff", "compact", "schema", "restore"):
        out.append(CommitConflictError)
    if kind == "schema":
        out.append(SchemaMismatchError)
    if kind == "restore" or (kind in ("reader", "stream") and gen.cleans):
        out.append(VersionNotFoundError)
    if kind == "restore" or gen.cleans:
        # log_retention 0: clean removes the files of every version but the latest at once,
        # so work that read an older version (a reader, a handoff planned before another
        # one) finds its files gone, as with Delta's VACUUM at retention 0
        out.append(DataUnavailableError)
    return tuple(out)


def check_generated(state: GenState, outcomes: dict[str, Outcome]) -> None:
    """The checks of the module's documentation."""
    assert state.gen is not None and state.injector is not None
    state.injector.stop()
    struck = state.injector.struck
    for name, outcome in outcomes.items():
        excused = name in struck and isinstance(outcome.error, (CarbonLiteError, OSError))
        assert outcome.error is None or excused, f"actor {name} raised {outcome.error!r}"
    refusals = [(o.actor, o.error) for o in state.model.ops if o.error is not None]
    for name, error in [*refusals, *state.refusals]:
        kind = state.kinds.get(name, "setup")
        if name not in struck and not isinstance(error, allowed(state.gen, kind)):
            raise AssertionError(f"{name} ({kind}) was refused: {error!r}")
    _settle_unknown(state)
    _last_polls(state)
    check_table(state.uri, state.model, cleaned=state.cleaned, storage_options=state.options)
    check_reads(state.model, state.reads, state.open().version)
    for polls in state.polls.values():
        check_polls(state.model, polls)


def _settle_unknown(state: GenState) -> None:
    """Each commit told ``CommitStateUnknownError`` as the log settles it: committed when its
    version is in the history and holds its commit id; not committed when its version is
    retained and holds another (or none); still uncertain when its version was cleaned."""
    if not state.unknown:
        return
    table = state.open()
    history = {r.version for r in table.history()}
    for op, version, commit_id in state.unknown:
        info = table.log._commit_info(version)
        if version in history and info is not None and info.commit_id == commit_id:
            op.version, op.acknowledged, op.uncertain, op.commit_id = (
                version,
                True,
                False,
                commit_id,
            )
        elif history and version >= min(history):
            op.uncertain = False


def _last_polls(state: GenState) -> None:
    """Each stream consumer polls once more, after the schedule, up to the latest version."""
    if not state.polls:
        return
    table = state.open()
    for name, polls in state.polls.items():
        start = polls[-1].end + 1 if polls else state.stream_start[name]
        if table.version < start:
            continue
        try:
            changes = table.changes(start, table.version)
        except (VersionNotFoundError, DataUnavailableError):
            assert state.gen is not None and state.gen.cleans, f"{name}'s last poll failed"
            continue
        polls.append(Poll(name, start, table.version, *change_ids(changes)))


# --- running ------------------------------------------------------------------------------------


def run_generated(gen: Generated, where: Where = MEMORY) -> Schedule[GenState]:
    """Build, run and check ``gen`` on ``where``; a failure raises :class:`ScheduleError`
    naming the seed, the scenario and the faults that struck."""
    box: list[GenState] = []

    def scenario() -> tuple[GenState, list[Actor]]:
        state, actors = build(gen, where)
        box.append(state)
        assert state.injector is not None
        state.injector.start()
        return state, actors

    try:
        with forgetting_memory():
            slow = [a.name for a in gen.actors if a.parked_after is not None]
            return run_ordered(
                scenario, check_generated, seed=gen.seed, pause_at=where.pausable(gen), slow=slow
            )
    except Exception as exc:
        faults = box[0].injector.describe() if box and box[0].injector else "faults: none started"
        raise ScheduleError(f"{exc}\n  {gen.describe(where.place)}\n  {faults}") from exc
    finally:
        if box:
            if box[0].injector is not None:
                box[0].injector.stop()
            where.remove(box[0].uri)


def replay(
    seed: int, place: Place = "memory", where: Where | None = None, *, faults: bool = True
) -> Schedule[GenState]:
    """Run the generated schedule of ``seed`` alone (``where``: needed for S3; a local
    schedule runs in a fresh temporary directory)."""
    if where is None:
        if place == "s3":
            raise ValueError("replaying on S3 needs a Where with the server's storage options")
        if place == "local":
            where = Where("local", tempfile.mkdtemp(prefix="carbonlite-generated-"))
        else:
            where = MEMORY
    return run_generated(generate(seed, faults=faults), where)


@dataclass
class Explored:
    """What :func:`explore_generated` ran: schedules, failures by seed, seconds."""

    schedules: int = 0
    failures: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0
    fired: Counter[str] = field(default_factory=Counter)
    """Faults that struck in the schedules that passed, by kind and target."""

    @property
    def per_schedule(self) -> float:
        return self.seconds / max(1, self.schedules)


def explore_generated(
    seeds: Iterable[int],
    where: Where = MEMORY,
    *,
    faults: bool = True,
    stop_at_first: bool = False,
    skip: Iterable[int] = (),
    only: Callable[[Generated], bool] | None = None,
) -> Explored:
    """Run the generated schedule of every seed (except ``skip``, and those ``only`` rejects:
    a family of scenarios); collect the failures."""
    found, skipped = Explored(), set(skip)
    began = time.perf_counter()
    for seed in seeds:
        gen = generate(seed, faults=faults)
        if seed in skipped or (only is not None and not only(gen)):
            continue
        found.schedules += 1
        try:
            schedule = run_generated(gen, where)
        except ScheduleError as exc:
            found.failures[seed] = str(exc)
            if stop_at_first:
                break
            continue
        injector = schedule.state.injector
        for _, fault, _ in injector.fired if injector is not None else ():
            found.fired[f"{fault.kind} {fault.call} {fault.target}"] += 1
    found.seconds = time.perf_counter() - began
    return found
