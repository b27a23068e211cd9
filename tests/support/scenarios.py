"""Generated scenarios: a seed decides the table, the actors and the storage faults.

The hand-picked scenarios of tests/metadata/test_interleavings.py each name the actors a bug
needs; a bug needing another combination escapes them. Here a seed is turned into a whole
scenario (:func:`generate`):

- table properties: a small ``checkpoint_interval`` (1-5), sometimes a small
  ``checkpoint_max_entries`` or ``streaming_segment_max_bytes`` (a streaming segment rolls
  over every few appends, moving the blocklets of a writer racing it), ``log_retention`` 0 s
  when anything cleans;
- a set-up: 1-6 appends, a finished streaming segment (handoff input), columnar segments
  (compaction input), a ``clean`` of the log;
- 2-4 actors drawn from :data:`CATALOG` with their parameters (rows, batches, transactions,
  targets), stale ones among them: an append that began during the set-up and is held at its
  first seam while the set-up commits past it (:mod:`tests.support.parking`), as a writer
  delayed between reading the log and its put is, two or more at once at different versions;
- the seams the actors pause at (every seam, or a drawn subset: with fewer decisions, each
  switch an order makes lands at a seam that matters);
- a storage fault plan (tests/support/faults.py).

The schedule then runs on the harness of tests/support/interleave.py, in an order the same
seed draws (tests/support/orders.py: PCT or a random walk), and the table is checked against the model (tests/support/generated.py).
``Generated.describe`` prints all of it with a failure; the seed alone replays it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from carbonlite.seams import SEAMS
from tests.support.faults import FaultPlan

CATALOG: dict[str, float] = {
    "append": 3.0,  # 1-2 batches; some with txn=("q", batch): two actors may replay a batch
    "stale_append": 2.0,  # began during the set-up, held at its first seam
    "retry_append": 2.5,  # refused after a schema change, retried on the same handle
    "finish": 1.5,  # finish_streaming
    "delete": 1.0,
    "update": 1.0,
    "merge": 1.0,
    "handoff": 1.0,
    "compact": 0.5,  # a major compaction of columnar segments
    "clean": 2.0,  # retention 0, force; two may run at once
    "recover": 1.0,  # min_age 0
    "checkpoint": 1.0,  # t.log.write_checkpoint of a refreshed snapshot
    "restore": 0.7,
    "schema": 1.0,  # drop, rename or add a column other than id
    "reader": 1.0,  # reads of the latest state and time travel, recorded and checked
    "stream": 1.0,  # polls changes(start, latest) incrementally
}
"""Actor kinds and the weight each is drawn with (the ``mixed`` theme)."""

THEMES: dict[str, tuple[dict[str, float], frozenset[str]]] = {
    "mixed": (CATALOG, frozenset()),
    "log": (
        {"append": 3, "stale_append": 4, "clean": 3, "checkpoint": 2, "reader": 1, "recover": 1},
        frozenset({"version", "checkpoint", "pointer", "log"}),
    ),
    "segments": (
        {"append": 3, "finish": 2, "handoff": 2, "compact": 1, "restore": 1, "clean": 1}
        | {"recover": 1, "stale_append": 1},
        frozenset({"data", "lease", "segments", "leases", "manifest"}),
    ),
    "rows": (
        {"append": 2, "delete": 2, "update": 2, "merge": 2, "handoff": 1, "restore": 1}
        | {"reader": 1, "finish": 1},
        frozenset({"version", "data"}),
    ),
    "schema": (
        {"retry_append": 3, "schema": 2, "append": 2, "finish": 2, "handoff": 1, "merge": 1}
        | {"update": 1, "restore": 1},
        frozenset({"version", "checkpoint"}),
    ),
    "readers": (
        {"reader": 2, "stream": 2, "append": 2, "clean": 1, "handoff": 1, "restore": 1}
        | {"delete": 1, "stale_append": 1, "checkpoint": 1},
        frozenset({"log", "manifest", "pointer"}),
    ),
}
"""What a scenario stresses: the weights its actors are drawn with, and the classes of path
its faults are drawn at three times as often. Coherent scenarios (the log's maintenance,
segments' lifecycle, row-level changes, schema changes, readers) meet the combinations a bug
needs far more often than uniform draws from the whole catalog."""
THEME_WEIGHTS = {"mixed": 2.0, "log": 1.0, "segments": 1.0, "rows": 1.0, "schema": 1.0}
THEME_WEIGHTS["readers"] = 1.0

WRITERS = frozenset(
    {"append", "stale_append", "retry_append", "delete", "update", "merge", "restore"}
)
"""Kinds that commit rows (the others commit no data change, or nothing)."""

PAUSE_CHOICES = (
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
    "recover.before_cut",
    "lease.after_take",
    "lease.before_check",
    "history.after_look",
    "history.after_list",
    "history.after_chain",
    "clean.after_floor",
    "storage.before_swap_write",
)
"""Seams a drawn subset is taken from (``commit.before_put`` is always in it): the
protocol's, and the history's own steps (a look at the pointer, the listing, the chain check,
clean's raise of the floor, the pointer's swap)."""

SETUP_BASE = 100
"""Set-up batch k holds ids ``SETUP_BASE + 10 k`` and the next one."""
TXN_BASE = 9_000
"""A transactional batch b holds ids ``TXN_BASE + 10 b`` and the next one, whoever writes it."""


@dataclass(frozen=True, slots=True)
class ActorSpec:
    """One actor of a generated scenario, with its parameters."""

    kind: str
    name: str
    base: int = 0
    """Its rows: batch b holds ``base + 10 b`` and the next id (unless ``txn``)."""
    batches: int = 1
    txn: int | None = None
    """The first transactional batch id (app ``q``); later batches follow it."""
    parked_after: int | None = None
    """A stale actor: the set-up batch (1-based) after which it began; it is then held at its
    first seam while the set-up commits on."""
    target: int | None = None
    """A restore's target: the version after that set-up batch (0: before the first); the key
    an update sets."""
    ids: tuple[int, ...] = ()
    """The ids a delete deletes or a merge merges."""
    change: str | None = None
    """A schema change: ``drop``, ``rename`` or ``add``."""
    count: int = 1
    """Reads, polls or cleans."""

    def batch_ids(self, batch: int) -> tuple[int, int]:
        first = (
            TXN_BASE + 10 * (self.txn + batch) if self.txn is not None else self.base + 10 * batch
        )
        return first, first + 1

    def describe(self) -> str:
        extra = [
            f"{k}={v}"
            for k, v in (
                ("batches", self.batches if self.batches != 1 else None),
                ("txn", self.txn),
                ("parked_after", self.parked_after),
                ("target", self.target),
                ("ids", list(self.ids) or None),
                ("change", self.change),
                ("count", self.count if self.count != 1 else None),
            )
            if v is not None
        ]
        return f"{self.name}:{self.kind}({', '.join(extra)})"


@dataclass(frozen=True, slots=True)
class Setup:
    """What the table holds before the actors start."""

    batches: int
    finish: bool = False
    """Finish the streaming segment (ready for handoff)."""
    columnar: bool = False
    """Two columnar segments first (ready for a major compaction)."""
    clean: bool = False
    """Clean the log (retention 0) at the end: stale actors stand on removed versions."""
    pointer_lag: bool = False
    """A storage fault of the set-up: the pointer write of its last checkpoint failed (the
    checkpoint is there, ``_last_checkpoint`` names the one before, or none)."""


@dataclass(frozen=True)
class Generated:
    """One generated scenario: everything but the order, which PCT draws from ``seed``."""

    seed: int
    theme: str
    properties: dict[str, str]
    setup: Setup
    actors: tuple[ActorSpec, ...]
    faults: FaultPlan = field(default_factory=FaultPlan)
    pause_at: frozenset[str] | None = None

    @property
    def cleans(self) -> bool:
        return self.setup.clean or any(a.kind == "clean" for a in self.actors)

    def has(self, kind: str) -> bool:
        return any(a.kind == kind for a in self.actors)

    def describe(self, place: str = "memory") -> str:
        pauses = "every seam" if self.pause_at is None else ", ".join(sorted(self.pause_at))
        return (
            f"generated seed {self.seed} on {place}: replay with "
            f"tests.support.generated.replay({self.seed}, {place!r})\n"
            f"  theme {self.theme}; properties {self.properties}; setup {self.setup}\n"
            f"  actors {', '.join(a.describe() for a in self.actors)}\n"
            f"  pausing at {pauses}\n"
            f"  faults {self.faults.describe()}"
        )


def generate(seed: int, *, faults: bool = True) -> Generated:
    """The scenario of ``seed`` (the same on every storage; ``faults=False``: none)."""
    rng = random.Random(f"carbonlite-generated-{seed}")
    theme = rng.choices(list(THEME_WEIGHTS), weights=list(THEME_WEIGHTS.values()))[0]
    weights, emphasis = THEMES[theme]
    kinds = _draw_kinds(rng, weights)
    setup = _draw_setup(rng, kinds, 0.5 if theme == "log" else 0.15)
    actors = tuple(_spec(rng, kind, i, kinds, setup) for i, kind in enumerate(kinds))
    actors = _parked(rng, actors, setup)
    properties = {"checkpoint_interval": rng.choice(["1", "2", "3", "4", "5"])}
    if rng.random() < 0.25:
        properties["checkpoint_max_entries"] = rng.choice(["2", "4"])
    if rng.random() < 0.4:  # streaming segments roll over every few appends
        properties["streaming_segment_max_bytes"] = rng.choice(["600", "2000"])
    if setup.clean or "clean" in kinds or rng.random() < 0.3:
        properties["log_retention"] = "0s"
    pause_at = None
    if rng.random() < 0.7:
        pause_at = frozenset(
            {"commit.before_put", *(s for s in PAUSE_CHOICES if rng.random() < 0.3)}
        )
    assert pause_at is None or pause_at <= set(SEAMS)
    names = [a.name for a in actors]
    plan = FaultPlan.draw(rng, names, emphasis=emphasis) if faults else FaultPlan()
    return Generated(seed, theme, properties, setup, actors, plan, pause_at)


def _draw_kinds(rng: random.Random, catalog: dict[str, float]) -> list[str]:
    """2-4 kinds, with what each needs: a retried append needs a schema change to refuse it,
    a stale actor something cleaning the log (an actor, else the set-up), a second stale actor
    often (two or more at once)."""
    names, weights = list(catalog), list(catalog.values())
    kinds = rng.choices(names, weights=weights, k=rng.choice([2, 3, 3, 4, 4]))
    if "retry_append" in kinds and "schema" not in kinds:
        kinds.append("schema")
    if "stale_append" in kinds and kinds.count("stale_append") == 1 and rng.random() < 0.6:
        kinds.append("stale_append")
    if "stale_append" in kinds and "clean" not in kinds and rng.random() < 0.85:
        kinds.append("clean")
    if "clean" in kinds and rng.random() < 0.2:
        kinds.append("clean")  # two at once
    while len(kinds) > 4:  # drop one the others do not need
        needed = {"schema"} if "retry_append" in kinds else set()
        if "stale_append" in kinds:
            needed |= {"stale_append", "clean"}
        spare = [k for k in kinds if k not in needed] or kinds
        kinds.remove(rng.choice(spare))
    if len(kinds) < 2:
        kinds.append("append")
    return kinds


def _draw_setup(rng: random.Random, kinds: list[str], lag: float) -> Setup:
    stale = "stale_append" in kinds
    batches = rng.randint(3 if stale else 1, 6)
    finish = ("handoff" in kinds and "finish" not in kinds) or rng.random() < 0.2
    clean = stale and "clean" not in kinds
    clean = clean or (stale and rng.random() < 0.2)
    return Setup(
        batches,
        finish=finish,
        columnar="compact" in kinds,
        clean=clean,
        pointer_lag=rng.random() < lag,
    )


def _spec(rng: random.Random, kind: str, i: int, kinds: list[str], setup: Setup) -> ActorSpec:
    name = f"{kind[0]}{i}"
    base = 1_000 * (i + 1)
    setup_ids = [SETUP_BASE + 10 * k + j for k in range(1, setup.batches + 1) for j in (0, 1)]
    if kind == "append":
        txn = rng.choice([0, 1]) if rng.random() < 0.3 else None
        return ActorSpec(kind, name, base, batches=rng.choice([1, 1, 2]), txn=txn)
    if kind in ("stale_append", "retry_append"):
        return ActorSpec(kind, name, base)
    if kind == "delete":
        ids = [*rng.sample(setup_ids, min(2, len(setup_ids))), rng.choice([1_000, 2_000, 3_000])]
        return ActorSpec(kind, name, base, ids=tuple(sorted(ids)))
    if kind == "update":
        return ActorSpec(kind, name, base, target=rng.choice(setup_ids))
    if kind == "merge":
        return ActorSpec(kind, name, base, ids=(rng.choice(setup_ids), base + 5))
    if kind == "restore":
        return ActorSpec(kind, name, base, target=rng.randint(0, setup.batches))
    if kind == "schema":
        return ActorSpec(kind, name, base, change=rng.choice(["drop", "drop", "rename", "add"]))
    if kind == "reader":
        return ActorSpec(kind, name, base, count=rng.randint(1, 3))
    if kind == "stream":
        return ActorSpec(kind, name, base, count=rng.randint(2, 3))
    return ActorSpec(kind, name, base)


def _parked(
    rng: random.Random, actors: tuple[ActorSpec, ...], setup: Setup
) -> tuple[ActorSpec, ...]:
    """Stale appends each begin after a different set-up batch below the last one (so the
    set-up commits past every one of them): often one after another (writers started a commit
    apart), the newest of them or any, else anywhere."""
    stale = [a for a in actors if a.kind == "stale_append"]
    n = min(len(stale), setup.batches - 1)
    if rng.random() < 0.6:
        newest = rng.random() < 0.5
        first = setup.batches - n if newest else rng.randint(1, setup.batches - n)
        batches = list(range(first, first + n))
    else:
        batches = rng.sample(range(1, setup.batches), n)
    after = {a.name: k for a, k in zip(stale, batches, strict=False)}
    return tuple(
        ActorSpec(**{**_fields(a), "parked_after": after.get(a.name, 1)})
        if a.kind == "stale_append"
        else a
        for a in actors
    )


def _fields(spec: ActorSpec) -> dict[str, object]:
    return {name: getattr(spec, name) for name in ActorSpec.__slots__}
