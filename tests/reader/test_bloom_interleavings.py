"""``build_index`` under forced interleavings (tests/support/interleave.py).

``Table.build_index(["k"])`` reads the blocklets lacking filters, writes their bloom files,
stops at ``index.before_commit`` and commits (dropping files no longer live, and running
further rounds for blocklets that appeared meanwhile). Here it races, on fresh ``memory://``
tables whose ``k`` values are spread so min/max cannot prune a lookup:

- an append to the streaming segment it is indexing;
- ``finish_streaming()`` and a handoff of that segment;
- a major compaction of two handed-off segments;
- a second ``build_index(["k"])``;
- ``recover(min_age=0)``.

After every order: the log and the rows match the row-id model (tests/support/log_model.py:
every acknowledged commit visible exactly once); lookups ``k == v`` and ``k.isin`` are exact
for present and absent values; every blocklet live at the version ``build_index`` returned on
has a filter of ``k``, and a blocklet live now without one was committed later by a writer
that read the table before ``bloom_filter_columns`` was set; ``verify`` finds nothing.

Every order of each two-actor scenario runs in the default tier (about 200 in all), with the
seams narrowed to the ones it is about; the slow tier runs every order of every seam, and
more random orders of build_index, an append and a handoff together. Three bugs found here
are fixed and tested by orders that showed them: recover(min_age=0) deleted the bloom files
build_index was about to commit (now covered by a lease); a second build_index adding the
same column was refused; and a column another actor added to ``bloom_filter_columns``
meanwhile was dropped again by build_index's next round.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.errors import CarbonLiteError, CommitStateUnknownError
from tests.support.interleave import Actor, Outcome, explore_all, explore_random, run_schedule
from tests.support.log_model import Model, Op, check_table, outcome_of

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64())])
PRESENT_IDS = (0, 3, 5, 100, 103, 201)
ABSENT_K = (3001, 4999, 5001)
"""Odd, so no row has them, and inside every blocklet's min/max (see :func:`k_of`)."""

INDEX_SEAMS = frozenset({"index.before_commit", "commit.before_put"})
APPEND_SEAMS = frozenset({"append.after_data", "commit.before_put"})
COMPACTION_SEAMS = frozenset(
    {"compaction.after_plan", "compaction.after_execute", "commit.before_put"}
)
RECOVER_SEAMS = frozenset(
    {"recover.after_list_files", "recover.after_list_leases", "recover.before_cut"}
)
EVERY_SEAM = INDEX_SEAMS | APPEND_SEAMS | COMPACTION_SEAMS | RECOVER_SEAMS | {"commit.after_put"}


def k_of(i: int) -> int:
    """Even ids low, odd ids high: a blocklet of two rows (every batch here starts at an even
    id and has an even length) spans most of 0..10,000, so min/max cannot prune a lookup."""
    return 2 * i if i % 2 == 0 else 10_000 - 2 * i


def rows(ids: Sequence[int]) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "k": [k_of(i) for i in ids]}, schema=SCHEMA)


def test_absent_values_are_absent() -> None:
    for j in range(0, 300, 2):
        low, high = sorted((k_of(j), k_of(j + 1)))
        assert all(low < v < high and v % 2 == 1 for v in ABSENT_K), j


@dataclass
class State:
    uri: str
    model: Model
    indexers: dict[str, cl.Table] = field(default_factory=dict)
    errors_allowed: tuple[type[BaseException], ...] = ()


def fresh_table(
    *setup: Sequence[int], handoff_each: bool = False, listed: bool = False
) -> tuple[str, Model]:
    """A fresh table without bloom filters, two rows a blocklet, holding ``setup`` (one
    commit each; with ``handoff_each`` each batch is its own handed-off segment). With
    ``listed``, ``bloom_filter_columns`` is set to ``k`` after the setup (its blocklets still
    have no filters)."""
    uri = f"memory://bloom-interleave/{uuid.uuid4().hex}"
    t = cl.create_table(
        uri,
        SCHEMA,
        properties={
            "blocklet_max_rows": "2",
            "handoff_blocklet_rows": "2",
            "checkpoint_interval": "2",
        },
        writer_id="setup",
    )
    model = Model()
    for ids in setup:
        model.record(
            Op(
                "setup",
                added=frozenset(ids),
                version=t.append(rows(ids)).version,
                acknowledged=True,
            )
        )
        if handoff_each:
            t.finish_streaming()
            for v in t.handoff().versions:
                model.record(Op("setup", version=v, acknowledged=True))
    if listed:
        version = t.set_properties({"bloom_filter_columns": "k"}).version
        model.record(Op("setup", version=version, acknowledged=True))
    return uri, model


def settle(op: Op, call: Callable[[], Any]) -> None:
    try:
        outcome_of(op, call())
    except CommitStateUnknownError:
        op.uncertain = True
    except CarbonLiteError as exc:
        op.error = exc


def append(state: State, name: str, ids: Sequence[int]) -> Actor:
    table = cl.open_table(state.uri, writer_id=name)

    def run() -> None:
        op = state.model.record(Op(name, added=frozenset(ids)))
        settle(op, lambda: table.append(rows(ids)))

    return Actor(name, run)


def maintain(
    state: State, name: str, call: Callable[[cl.Table], Any], table: cl.Table | None = None
) -> Actor:
    """A commit without data change: each version it made goes into the model."""
    table = table or cl.open_table(state.uri, writer_id=name)

    def run() -> Any:
        try:
            result = call(table)
        except CarbonLiteError as exc:
            state.model.record(Op(name, error=exc))
            return None
        versions = getattr(result, "versions", None)
        if versions is None:
            version = getattr(result, "version", None)
            versions = () if version is None else (version,)
        for v in versions:
            state.model.record(Op(name, version=v, acknowledged=True))
        return result

    return Actor(name, run)


def indexer(state: State, name: str = "i") -> Actor:
    table = cl.open_table(state.uri, writer_id=name)
    state.indexers[name] = table
    return maintain(state, name, lambda t: t.build_index(["k"]), table)


def handoff(t: cl.Table) -> Any:
    t.finish_streaming()
    return t.handoff()


# --- the checks -------------------------------------------------------------------------------


def bloom_set_at(table: cl.Table) -> int:
    """The first version whose properties list ``k`` in ``bloom_filter_columns``."""
    for v in range(table.version + 1):
        if "k" in table.snapshot(v).properties.get("bloom_filter_columns", "").split(","):
            return v
    raise AssertionError("bloom_filter_columns never listed k")


def blocklets_without_k(snapshot: Any) -> set[tuple[str, int]]:
    return {
        (f.path, b.offset)
        for _, f in snapshot.iter_files()
        for b in f.blocklets
        if (ref := f.blooms.get(b.offset)) is None or "k" not in ref.columns
    }


def first_version_with(table: cl.Table, blocklet: tuple[str, int], after: int) -> int:
    for v in range(after + 1, table.version + 1):
        for _, f in table.snapshot(v).iter_files():
            if f.path == blocklet[0] and any(b.offset == blocklet[1] for b in f.blocklets):
                return v
    raise AssertionError(f"blocklet {blocklet} is live now but in no version after {after}")


def check_filters(state: State) -> None:
    """Every blocklet live at the version each ``build_index`` returned on has a filter of
    ``k``; one live now without it was committed after, by a writer that read the table
    before ``k`` was listed."""
    table = cl.open_table(state.uri)
    listed_at = bloom_set_at(table)
    refused = {op.actor for op in state.model.ops if op.error is not None}
    for name, handle in state.indexers.items():
        if name in refused:
            continue
        returned_on = handle.version
        missing = blocklets_without_k(table.snapshot(returned_on))
        assert not missing, (
            f"{name} returned on version {returned_on}, whose blocklets {sorted(missing)} "
            "have no filter of k"
        )
        for blocklet in blocklets_without_k(table.snapshot()):
            v = first_version_with(table, blocklet, returned_on)
            info = table.log._commit_info(v)
            assert info is not None and info.read_version is not None
            assert info.read_version < listed_at, (
                f"blocklet {blocklet} has no filter of k; version {v} ({info.operation}) "
                f"committed it having read version {info.read_version}, and k was listed "
                f"from version {listed_at}"
            )


def check_lookups(uri: str, *, filters_may_be_gone: bool = False) -> None:
    table = cl.open_table(uri)
    everything = table.to_arrow(columns=["id", "k"])
    present = sorted({k_of(i) for i in PRESENT_IDS})
    for v in [*present, *ABSENT_K]:
        got = table.to_arrow(columns=["id", "k"], filter=pc.field("k") == v)
        want = everything.filter(pc.field("k") == v)
        assert sorted(got.column("id").to_pylist()) == sorted(want.column("id").to_pylist()), v
    values = [present[0], ABSENT_K[0], present[-1]]
    got = table.to_arrow(columns=["id"], filter=pc.field("k").isin(values))
    want = everything.filter(pc.field("k").isin(values))
    assert sorted(got.column("id").to_pylist()) == sorted(want.column("id").to_pylist())
    plan = table.plan_splits(filter=pc.field("k") == ABSENT_K[2])
    with_filters = table.plan_splits().blocklets_total - len(blocklets_without_k(table.snapshot()))
    assert plan.blocklets_pruned_by_stats == 0, "min/max pruned: the data is not spread"
    # every blocklet with a filter of k is pruned unless a false positive (fpp 1%) keeps it
    pruned = plan.blocklets_pruned_by_bloom
    if filters_may_be_gone:
        pruned += plan.blocklets_bloom_unreadable
    assert pruned >= with_filters - 1, (plan, with_filters)


def check(state: State, outcomes: dict[str, Outcome], *, filters_may_be_gone: bool = False) -> None:
    """The model, exact lookups, the filters' coverage and ``verify``; with
    ``filters_may_be_gone`` a bloom file the log names may be missing (lookups then read its
    blocklets: still exact) and ``verify`` may say so."""
    for name, outcome in outcomes.items():
        assert outcome.error is None, f"actor {name} raised {outcome.error!r}"
    for op in state.model.ops:
        if op.error is not None and not isinstance(op.error, state.errors_allowed):
            raise AssertionError(f"{op.actor} was refused: {op.error!r}")
    check_table(state.uri, state.model)
    check_lookups(state.uri, filters_may_be_gone=filters_may_be_gone)
    check_filters(state)
    result = cl.open_table(state.uri).verify()
    if filters_may_be_gone:
        assert all(p.file.endswith(".bloom") for p in result.problems), result.problems
    else:
        assert result.ok, result.problems


def check_after_recover(state: State, outcomes: dict[str, Outcome]) -> None:
    check(state, outcomes, filters_may_be_gone=False)


# --- scenarios --------------------------------------------------------------------------------


def index_and_append() -> tuple[State, list[Actor]]:
    """(a) build_index of a streaming segment while an append extends its file."""
    state = State(*fresh_table([0, 1, 2, 3], [4, 5]))
    return state, [indexer(state), append(state, "a", [100, 101, 102, 103])]


def index_and_handoff() -> tuple[State, list[Actor]]:
    """(b) build_index while the segment it reads is finished and handed off."""
    state = State(*fresh_table([0, 1, 2, 3], [4, 5]))
    return state, [indexer(state), maintain(state, "h", handoff)]


def index_and_major_compaction() -> tuple[State, list[Actor]]:
    """(c) build_index while two handed-off segments are compacted into one."""
    state = State(*fresh_table([0, 1, 2, 3], [4, 5, 6, 7], handoff_each=True))
    return state, [indexer(state), maintain(state, "c", lambda t: t.compact("major"))]


def two_indexers() -> tuple[State, list[Actor]]:
    """(d) two build_index(["k"]) at once on a table listing ``k`` already: both commit."""
    state = State(*fresh_table([0, 1, 2, 3], [4, 5], listed=True))
    return state, [indexer(state, "i"), indexer(state, "j")]


def two_indexers_listing() -> tuple[State, list[Actor]]:
    """Two build_index(["k"]) at once, each adding ``k`` to ``bloom_filter_columns``: both
    commit in every order (the loser rebases its property change on the winner's)."""
    state = State(*fresh_table([0, 1, 2, 3], [4, 5]))
    return state, [indexer(state, "i"), indexer(state, "j")]


def index_and_recover() -> tuple[State, list[Actor]]:
    """(e) recover(min_age=0) while build_index holds bloom files nothing names yet."""
    state = State(*fresh_table([0, 1, 2, 3], [4, 5]))
    return state, [indexer(state), maintain(state, "r", lambda t: t.recover(min_age=0))]


def index_append_handoff() -> tuple[State, list[Actor]]:
    """build_index, an append and a handoff together (random orders)."""
    state = State(*fresh_table([0, 1, 2, 3], [4, 5]))
    return state, [
        indexer(state),
        append(state, "a", [100, 101, 102, 103]),
        maintain(state, "h", handoff),
    ]


EXHAUSTIVE: dict[str, tuple[Callable[[], tuple[State, list[Actor]]], Collection[str]]] = {
    "append": (index_and_append, INDEX_SEAMS | APPEND_SEAMS),
    "handoff": (index_and_handoff, INDEX_SEAMS | COMPACTION_SEAMS),
    "major compaction": (index_and_major_compaction, INDEX_SEAMS | COMPACTION_SEAMS),
    "second build_index": (two_indexers, INDEX_SEAMS),
    "second build_index, both listing k": (two_indexers_listing, INDEX_SEAMS),
}


_SLOW_SCENARIOS = {"handoff", "major compaction"}  # 94 and 35 orders: the slow tier's


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if n in _SLOW_SCENARIOS else n
        for n in sorted(EXHAUSTIVE)
    ],
)
def test_build_index_in_every_order(name: str) -> None:
    scenario, seams = EXHAUSTIVE[name]
    found = explore_all(scenario, check, limit=200, pause_at=seams)
    assert found.exhaustive, f"more than {found.schedules} orders"
    assert "index.before_commit" in found.seams
    assert found.schedules >= 3


def test_build_index_and_recover_in_every_order() -> None:
    """recover(min_age=0) never deletes the bloom files build_index has written and not
    committed yet (a lease covers them from before they exist): in every order, rows and
    lookups are exact and every filter the log names is there."""
    found = explore_all(
        index_and_recover,
        check_after_recover,
        limit=400,
        pause_at=INDEX_SEAMS | RECOVER_SEAMS | {"lease.after_take"},
    )
    assert found.exhaustive and found.schedules >= 10
    assert {"index.before_commit", "lease.after_take", "recover.after_list_files"} <= found.seams


def test_recover_does_not_delete_the_bloom_files_build_index_is_about_to_commit() -> None:
    # i writes its bloom file; r lists files and leases and decides; i commits; r deletes
    schedule = run_schedule(
        index_and_recover, choices=[0, 1, 1, 1, 0, 0], pause_at=INDEX_SEAMS | RECOVER_SEAMS
    )
    assert schedule.outcomes["i"].result.blocklets == 3
    table = cl.open_table(schedule.state.uri)
    plan = table.plan_splits(filter=pc.field("k") == ABSENT_K[0])
    assert plan.blocklets_bloom_unreadable == 0, plan
    assert table.verify().ok, table.verify().problems


@pytest.mark.parametrize(
    "seeds", [range(12), pytest.param(range(12, 150), marks=pytest.mark.slow)], ids=str
)
def test_build_index_append_and_handoff_in_random_orders(seeds: range) -> None:
    found = explore_random(index_append_handoff, check, seeds=seeds, pause_at=EVERY_SEAM)
    assert found.schedules == len(seeds)
    assert {"index.before_commit", "append.after_data", "compaction.after_plan"} <= found.seams


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXHAUSTIVE))
def test_build_index_in_every_order_of_every_seam_slow(name: str) -> None:
    scenario, _ = EXHAUSTIVE[name]
    found = explore_all(scenario, check, limit=400, pause_at=EVERY_SEAM)
    assert found.schedules >= 3


def test_second_build_index_of_the_same_column_is_not_refused() -> None:
    # j reads, then i runs through its commit, then j commits
    schedule = run_schedule(two_indexers_listing, choices=[1, 0, 0, 0], pause_at=INDEX_SEAMS)
    refused = [op for op in schedule.state.model.ops if op.error is not None]
    assert not refused, refused


def test_a_handoff_planned_before_k_was_listed_commits_blocklets_without_filters() -> None:
    """The window the module docstring allows: a handoff planned before ``build_index``
    listed ``k`` commits its outputs after it, without filters. Lookups stay exact (those
    blocklets are read), and the next ``build_index`` gives them theirs."""
    # h finishes the segment, plans and writes its outputs; i runs through its commit; h commits
    schedule = run_schedule(
        index_and_handoff,
        check,
        choices=[1, 1, 1, 0, 0, 0],
        pause_at=INDEX_SEAMS | COMPACTION_SEAMS,
    )
    trace = [f"{a}@{s}" for a, s in schedule.trace]
    # (a trace step names the seam an actor was resumed from)
    assert trace.index("h@compaction.after_plan") < trace.index("i@start"), trace
    assert trace.index("i@commit.before_put") < trace.index("h@compaction.after_execute"), trace
    table = cl.open_table(schedule.state.uri)
    missing = blocklets_without_k(table.snapshot())
    assert missing and {path for path, _ in missing} == {
        f.path for seg, f in table.snapshot().iter_files() if seg.segment_id != "0"
    }
    plan = table.plan_splits(filter=pc.field("k") == ABSENT_K[0])
    assert plan.blocklets_selected >= len(missing)
    again = table.build_index()
    assert again.version is not None and again.blocklets == len(missing)
    assert not blocklets_without_k(table.snapshot())
    assert table.plan_splits(filter=pc.field("k") == ABSENT_K[0]).blocklets_selected <= 1


def indexer_and_lister(other: str) -> Callable[[], tuple[State, list[Actor]]]:
    """build_index(["k"]) on a table listing ``k``, racing another actor that adds ``id`` to
    ``bloom_filter_columns``: build_index(["id"]), or set_properties."""

    def scenario() -> tuple[State, list[Actor]]:
        state = State(*fresh_table([0, 1, 2, 3], [4, 5], listed=True))
        if other == "build_index":
            second = maintain(state, "j", lambda t: t.build_index(["id"]))
        else:
            second = maintain(
                state, "j", lambda t: t.set_properties({"bloom_filter_columns": "k,id"})
            )
        return state, [indexer(state), second]

    return scenario


@pytest.mark.parametrize("other", ["build_index", "set_properties"])
def test_a_column_listed_meanwhile_is_kept(other: str) -> None:
    # i reads and writes its bloom file; j runs to its end; i commits (and runs again)
    schedule = run_schedule(
        indexer_and_lister(other), choices=[0, 1, 1, 1, 0, 0], pause_at=INDEX_SEAMS
    )
    assert all(o.error is None for o in schedule.outcomes.values())
    table = cl.open_table(schedule.state.uri)
    assert table.properties["bloom_filter_columns"].split(",") == ["k", "id"]
    if other == "build_index":
        for _, f in table.snapshot().iter_files():
            for b in f.blocklets:
                assert set(f.blooms[b.offset].columns) == {"k", "id"}, (f.path, b.offset)


def test_recover_with_its_default_min_age_leaves_the_pending_bloom_files() -> None:
    """The order of the xfail above with recover's default ``min_age`` (1 hour): the bloom
    file build_index wrote is young, so recover keeps it, and every check holds."""

    def scenario() -> tuple[State, list[Actor]]:
        state = State(*fresh_table([0, 1, 2, 3], [4, 5]))
        return state, [indexer(state), maintain(state, "r", lambda t: t.recover())]

    schedule = run_schedule(
        scenario, check, choices=[0, 1, 1, 1, 0, 0], pause_at=INDEX_SEAMS | RECOVER_SEAMS
    )
    trace = [f"{a}@{s}" for a, s in schedule.trace]
    assert trace.index("r@recover.after_list_leases") < trace.index("i@index.before_commit")
    table = cl.open_table(schedule.state.uri)
    assert table.plan_splits(filter=pc.field("k") == ABSENT_K[0]).blocklets_bloom_unreadable == 0
