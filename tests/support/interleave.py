"""Forced interleavings: run actors one step at a time, switching only at the protocol's seams.

Stress and SIGKILL loops never reach a window one pointer-read wide. Here every actor runs in a
thread of its own, but only one runs at a time: an actor runs until it reaches a seam
(``carbonlite.seams.reach``) or finishes, and then the *schedule* picks which paused actor goes
next. So an order is a list of choices, and an order is replayed exactly by giving the same
choices again (deterministic simulation in the spirit of FoundationDB's and TigerBeetle's VOPR,
on the real code and a real storage backend).

- :func:`run_schedule` runs one order: the choices given, then at every later decision a
  seeded random pick (PCT: random priorities with a few random switches) or the first actor
  that can go.
- :func:`explore_all` enumerates every order (depth first over the decisions), up to a bound.
- :func:`explore_random` runs seeded random orders.

A *scenario* is a function that builds fresh state and returns the actors; a *check* gets the
scenario's state and the outcomes and raises ``AssertionError`` when the model is broken. A
failure names the schedule (its choices, and the seed) and the trace of seams, so that
``run_schedule(scenario, choices=...)`` replays it.

Only threads started as actors pause; threads the library starts for itself (page encoding,
lease heartbeats) pass seams without stopping. ``pause_at`` narrows the seams actors pause at
to the ones a scenario is about (the others are passed as a library thread passes them), so
an exhaustive exploration stays small. An actor that blocks on something another
paused actor holds would hang the schedule: after ``STEP_TIMEOUT`` seconds it is reported as a
deadlock, which is a verdict about the protocol, not about the machine's speed.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, TypeVar

from fsspec.implementations.memory import MemoryFileSystem

from carbonlite.seams import listening

STEP_TIMEOUT = 120.0
"""Seconds one step (from one seam to the next) may take before the schedule is a deadlock."""

S = TypeVar("S")


@dataclass
class Actor:
    """One participant: ``run`` is called on the actor's own thread."""

    name: str
    run: Callable[[], Any]


@dataclass
class Outcome:
    """What one actor ended with: its return value or the exception it raised."""

    name: str
    result: Any = None
    error: BaseException | None = None
    seams: list[str] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    """The schedule's step at which each of ``seams`` was reached (steps count the resumptions
    of actors, so they order the seams of different actors)."""
    finished: int = -1
    """The step in which the actor finished."""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Schedule(Generic[S]):
    """One order that ran: the choices made, the trace, each actor's outcome and the state."""

    choices: list[int]
    options: list[int]
    trace: list[tuple[str, str]]
    outcomes: dict[str, Outcome]
    state: S
    seed: int | None = None

    def describe(self) -> str:
        steps = " -> ".join(f"{a}@{s}" for a, s in self.trace)
        return f"choices={self.choices} seed={self.seed}\n  trace: {steps}"


class ScheduleError(AssertionError):
    """A schedule broke the model; the message names its choices so it can be replayed."""


Scenario = Callable[[], tuple[S, Sequence[Actor]]]
Check = Callable[[S, dict[str, Outcome]], None]


class _Slot:
    def __init__(self, actor: Actor) -> None:
        self.actor = actor
        self.go = threading.Semaphore(0)
        self.state = "starting"  # starting -> ready -> running <-> paused -> done
        self.seam = "start"
        self.outcome = Outcome(actor.name)
        self.thread: threading.Thread | None = None


def _moved(slot: _Slot) -> bool:
    return slot.state != "running"


class _Runner:
    """Runs one schedule: owns the actor threads and the seam listener."""

    def __init__(self, actors: Sequence[Actor], pause_at: Collection[str] | None = None) -> None:
        self.slots = [_Slot(a) for a in actors]
        self.pause_at = None if pause_at is None else frozenset(pause_at)
        self.by_thread: dict[int, _Slot] = {}
        self.cond = threading.Condition()
        self.free = False  # after a failure every actor runs to its end unpaused
        self.step = 0

    def listener(self, name: str) -> None:
        slot = self.by_thread.get(threading.get_ident())
        if slot is None or self.free or (self.pause_at is not None and name not in self.pause_at):
            return
        slot.outcome.seams.append(name)
        slot.outcome.steps.append(self.step)
        with self.cond:
            slot.state, slot.seam = "paused", name
            self.cond.notify_all()
        slot.go.acquire()

    def body(self, slot: _Slot) -> None:
        with self.cond:
            self.by_thread[threading.get_ident()] = slot
            slot.state = "ready"
            self.cond.notify_all()
        slot.go.acquire()
        try:
            slot.outcome.result = slot.actor.run()
        except BaseException as exc:
            slot.outcome.error = exc
        with self.cond:
            slot.outcome.finished = self.step
            slot.state = "done"
            self.cond.notify_all()

    def run(
        self, pick: Callable[[int, list[str]], int]
    ) -> tuple[list[int], list[int], list[tuple[str, str]]]:
        choices: list[int] = []
        options: list[int] = []
        trace: list[tuple[str, str]] = []
        for slot in self.slots:
            slot.thread = threading.Thread(
                target=self.body, args=(slot,), name=f"actor-{slot.actor.name}", daemon=True
            )
            slot.thread.start()
        with self.cond:
            self.cond.wait_for(lambda: all(s.state != "starting" for s in self.slots))
        try:
            while True:
                enabled = [s for s in self.slots if s.state in ("ready", "paused")]
                if not enabled:
                    break
                if len(enabled) > 1:
                    choice = pick(len(choices), [s.actor.name for s in enabled])
                    choices.append(choice)
                    options.append(len(enabled))
                else:
                    choice = 0
                slot = enabled[choice]
                trace.append((slot.actor.name, slot.seam))
                with self.cond:
                    self.step += 1
                    slot.state = "running"
                slot.go.release()
                with self.cond:
                    if not self.cond.wait_for(partial(_moved, slot), STEP_TIMEOUT):
                        raise ScheduleError(
                            f"actor {slot.actor.name!r} neither reached a seam nor finished "
                            f"within {STEP_TIMEOUT:.0f} s after {slot.seam!r}: it waits on "
                            "another paused actor (a deadlock)"
                        )
        finally:
            self.release_all()
        return choices, options, trace

    def release_all(self) -> None:
        """Let every actor run to its end without pausing (after a failure, or at the end)."""
        self.free = True
        for slot in self.slots:
            slot.go.release()
        for slot in self.slots:
            if slot.thread is not None:
                slot.thread.join(STEP_TIMEOUT)


def run_schedule(
    scenario: Scenario[S],
    check: Check[S] | None = None,
    *,
    choices: Sequence[int] = (),
    seed: int | None = None,
    pause_at: Collection[str] | None = None,
) -> Schedule[S]:
    """Run ``scenario``'s actors in one order: ``choices`` first (index into the actors that
    can go, in the order the scenario listed them), then random picks from ``seed`` (or the
    first actor that can go when ``seed`` is None). Then ``check`` the state. ``pause_at``:
    the seams actors pause at (None: every seam)."""
    state, actors = scenario()
    strategy = _Priorities([a.name for a in actors], seed) if seed is not None else None

    def pick(decision: int, enabled: list[str]) -> int:
        if decision < len(choices):
            return min(choices[decision], len(enabled) - 1)
        return strategy.pick(decision, enabled) if strategy is not None else 0

    runner = _Runner(actors, pause_at)
    with listening(runner.listener):
        made, options, trace = runner.run(pick)
    outcomes = {s.actor.name: s.outcome for s in runner.slots}
    schedule = Schedule(made, options, trace, outcomes, state, seed)
    if check is not None:
        try:
            check(state, outcomes)
        except Exception as exc:  # an assertion, or the table no longer reads
            raise ScheduleError(f"{exc}\n  {schedule.describe()}\n  {_errors(outcomes)}") from exc
    return schedule


class _Priorities:
    """Seeded random orders as PCT draws them (Burckhardt et al., "A Randomized Scheduler with
    Probabilistic Guarantees of Finding Bugs", 2010): each actor gets a random priority, the
    highest-priority actor that can go goes, and at a few random decisions the actor about to go
    drops below every other. A bug that needs d such switches is found with probability of
    about 1/(n k^(d-1)) per order for n actors and k decisions, where uniform random picks need
    a long run of lucky coin flips (one actor held at a seam while another runs all the way
    through, say)."""

    def __init__(self, names: list[str], seed: int) -> None:
        rng = random.Random(seed)
        order = names[:]
        rng.shuffle(order)
        self.priority = {name: float(i) for i, name in enumerate(reversed(order))}
        depth = rng.randint(1, 4)
        self.changes = {rng.randrange(_PCT_STEPS) for _ in range(depth - 1)}
        self.low = -1.0

    def pick(self, decision: int, enabled: list[str]) -> int:
        best = max(enabled, key=self.priority.__getitem__)
        if decision in self.changes:
            self.priority[best] = self.low
            self.low -= 1.0
            best = max(enabled, key=self.priority.__getitem__)
        return enabled.index(best)


_PCT_STEPS = 40
"""Decisions a priority change is drawn from (scenarios here make 20-60)."""


def _errors(outcomes: dict[str, Outcome]) -> str:
    return "; ".join(f"{n}: {o.error!r}" for n, o in outcomes.items() if o.error is not None)


@dataclass
class Exploration:
    """What an exploration covered."""

    schedules: int = 0
    exhaustive: bool = False
    seams: set[str] = field(default_factory=set)

    def add(self, schedule: Schedule[Any]) -> None:
        self.schedules += 1
        self.seams.update(s for _, s in schedule.trace)


def explore_all(
    scenario: Scenario[S],
    check: Check[S],
    *,
    limit: int = 10_000,
    pause_at: Collection[str] | None = None,
) -> Exploration:
    """Every order of ``scenario`` (each run checked), depth first, at most ``limit`` of them;
    ``exhaustive`` tells whether all were run. ``pause_at`` as for :func:`run_schedule`."""
    found = Exploration()
    pending: list[list[int]] = [[]]
    while pending and found.schedules < limit:
        prefix = pending.pop()
        with forgetting_memory():
            schedule = run_schedule(scenario, check, choices=prefix, pause_at=pause_at)
        found.add(schedule)
        options = schedule.options
        for i in range(len(options) - 1, len(prefix) - 1, -1):
            for alternative in range(options[i] - 1, 0, -1):
                pending.append([*schedule.choices[:i], alternative])
    found.exhaustive = not pending
    return found


def explore_random(
    scenario: Scenario[S],
    check: Check[S],
    *,
    seeds: Iterator[int] | range,
    pause_at: Collection[str] | None = None,
) -> Exploration:
    """Seeded random orders of ``scenario``, each checked; ``pause_at`` as for
    :func:`run_schedule`."""
    found = Exploration()
    for seed in seeds:
        with forgetting_memory():
            found.add(run_schedule(scenario, check, seed=seed, pause_at=pause_at))
    return found


@contextmanager
def forgetting_memory() -> Iterator[None]:
    """Forget every ``memory://`` object the block stored: an exploration runs thousands of
    orders, each on a fresh table, and the store is listed by scanning every object in it, so
    without this each order runs slower than the last (quadratic; an hour-long slow tier)."""
    store = MemoryFileSystem.store
    before = set(store)
    try:
        yield
    finally:
        for key in set(store) - before:
            store.pop(key, None)
