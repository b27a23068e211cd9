"""The order a generated schedule runs in, drawn from its seed: PCT or a random walk.

tests/support/interleave.py draws seeded orders with PCT (random priorities and up to three
priority changes within the first 40 decisions): good at holding one actor at a seam while
another runs all the way through, poor at orders that alternate often (an append refused,
rewritten, and overtaken again needs three changes at three exact decisions). A random walk
at each decision continues the actor that ran last with probability ``stay``, else picks any
actor that can go; with few seams to pause at (a generated scenario often pauses at a few)
every alternation is a handful of coin flips. Each generated seed draws one of them
(:func:`order_of`), and :func:`run_ordered` runs it on the harness's own runner, so a seed
replays its order exactly.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from carbonlite.seams import listening
from tests.support.interleave import (
    Check,
    S,
    Scenario,
    Schedule,
    ScheduleError,
    _errors,
    _Priorities,
    _Runner,
)


@dataclass
class RandomWalk:
    """Continue the last actor with probability ``stay``, else pick uniformly."""

    seed: int
    stay: float

    def __post_init__(self) -> None:
        self.rng = random.Random(f"walk-{self.seed}")
        self.last: str | None = None

    def pick(self, decision: int, enabled: list[str]) -> int:
        if self.last in enabled and self.rng.random() < self.stay:
            choice = enabled.index(self.last)
        else:
            choice = self.rng.randrange(len(enabled))
        self.last = enabled[choice]
        return choice

    def describe(self) -> str:
        return f"random walk (stay {self.stay})"


class Pct:
    """PCT as tests/support/interleave.py draws it for ``seed``; with ``last``, those actors
    start below every other (a stale writer is a slow one: it goes on once the others went as
    far as they could, unless a priority change lets it in earlier)."""

    def __init__(self, names: Sequence[str], seed: int, last: Collection[str] = ()) -> None:
        self.priorities = _Priorities(list(names), seed)
        self.last = sorted(last)
        for name in self.last:
            self.priorities.priority[name] -= _BELOW

    def pick(self, decision: int, enabled: list[str]) -> int:
        return self.priorities.pick(decision, enabled)

    def describe(self) -> str:
        return f"PCT, {', '.join(self.last)} last" if self.last else "PCT"


_BELOW = 1_000.0
"""Below every priority PCT gives or changes to (its changes go down one at a time from -1)."""


Order = RandomWalk | Pct


def order_of(seed: int, names: Sequence[str], slow: Collection[str] = ()) -> Order:
    """The order strategy of ``seed``: PCT for 45 seeds in 100 (half of them with the ``slow``
    actors last), else a random walk that mostly never stays (the two find different bugs: a
    stale writer's put after the others ran all the way through, an append overtaken twice
    while it writes)."""
    rng = random.Random(f"order-{seed}")
    if rng.random() < 0.45:
        return Pct(names, seed, last=slow if rng.random() < 0.5 else ())
    return RandomWalk(seed, rng.choices([0.0, 0.5, 0.75], weights=[7, 2, 2])[0])


def run_ordered(
    scenario: Scenario[S],
    check: Check[S],
    *,
    seed: int,
    pause_at: Collection[str] | None = None,
    slow: Collection[str] = (),
) -> Schedule[S]:
    """``run_schedule`` of tests/support/interleave.py with the order :func:`order_of` draws
    for ``seed`` (``slow``: the stale actors)."""
    state, actors = scenario()
    order = order_of(seed, [a.name for a in actors], slow)
    runner = _Runner(actors, pause_at)
    with listening(runner.listener):
        made, options, trace = runner.run(order.pick)
    outcomes = {s.actor.name: s.outcome for s in runner.slots}
    schedule = Schedule(made, options, trace, outcomes, state, seed)
    try:
        check(state, outcomes)
    except Exception as exc:  # an assertion, or the table no longer reads
        raise ScheduleError(
            f"{exc}\n  order: {order.describe()}\n  {schedule.describe()}\n  {_errors(outcomes)}"
        ) from exc
    return schedule
