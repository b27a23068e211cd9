"""Schema changes under forced interleavings (tests/support/interleave.py), beside the
scenarios of ``test_interleavings.py``.

Each scenario races a schema change (rename, drop, widen, add) against an append, a handoff or
another schema change, on a fresh table with a checkpoint every other version, and runs every
order. After each order the rows are checked against the log model of row ids
(tests/support/log_model.py: each acknowledged commit once, nothing unacknowledged, time
travel, ``changes``), and the schemas against a serial model written here: the schema changes
that were acknowledged, applied in version order, give every version's names and types, and
every row of every version holds the values its writer gave it under those names (cast up
after a widening). The rules of docs/LOG.md ("Schema evolution"):

- an append (or an update) whose rows were written before a rename or drop of one of their
  columns commits before it, or fails with ``SchemaMismatchError`` and commits nothing;
- a delete racing a rename or drop commits (its filter names a column neither touches): it
  plans again when the change won the race (ColumnsMovedError inside), never refused;
- an update setting a column the change leaves alone commits the same way;
- an append racing a widening commits, and its values read cast up;
- a handoff racing a rename or a drop commits, its rows intact under the new names;
- of two schema changes, each commits on the metadata it planned on or gets
  ``CommitConflictError``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.errors import CarbonLiteError, CommitConflictError, SchemaMismatchError
from tests.metadata.test_interleavings import WITHOUT_HISTORY, delete, maintain, settle
from tests.support.interleave import Actor, Outcome, explore_all, explore_random, run_schedule
from tests.support.log_model import Model, Op, check_table

SCHEMA = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("n", pa.int32())])


def rows(ids: Sequence[int], kind: str, schema: pa.Schema = SCHEMA) -> pa.Table:
    """Rows ``ids`` written by ``kind``: ``n`` is the id, so a row's values follow from it."""
    columns = {"id": list(ids), "kind": [kind] * len(ids), "n": list(ids)}
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in schema})


@dataclass
class Change:
    """A schema change an actor asked for, and what it was told."""

    actor: str
    apply: Callable[[dict[str, pa.DataType]], dict[str, pa.DataType]]
    """The change on the model's schema (present name -> type, in order)."""
    version: int | None = None
    error: BaseException | None = None


@dataclass
class State:
    uri: str
    model: Model
    changes: list[Change] = field(default_factory=list)
    refused: dict[str, tuple[type[BaseException], ...]] = field(default_factory=dict)
    """Actor -> the errors it may be refused with (any other error fails the order)."""
    before_changes: set[str] = field(default_factory=set)
    """Appending actors whose rows must commit before every acknowledged schema change."""


def fresh_table(
    *batches: Sequence[int], finish: bool = False, columnar: bool = False
) -> tuple[str, Model]:
    """A table whose rows ``batches`` were appended by "setup" (one version each); with
    ``finish`` its streaming segment is finished (ready for handoff), with ``columnar`` each
    batch is a columnar segment of its own (ready for compaction)."""
    uri = f"memory://interleave/{uuid.uuid4().hex}"
    cl.create_table(uri, SCHEMA, properties={"checkpoint_interval": "2"})
    setup, model = cl.open_table(uri, writer_id="setup"), Model()
    for ids in batches:
        version = setup.append(rows(ids, "setup")).version
        model.record(Op("setup", added=frozenset(ids), version=version, acknowledged=True))
        if columnar:
            setup.finish_streaming()
    if finish:
        setup.finish_streaming()
    if columnar:
        setup.handoff()
    return uri, model


def append(state: State, table: cl.Table, name: str, ids: Sequence[int]) -> Actor:
    def run() -> None:
        op = state.model.record(Op(name, added=frozenset(ids)))
        settle(op, lambda: table.append(rows(ids, name, table.schema)))

    return Actor(name, run)


def schema_change(
    state: State,
    table: cl.Table,
    name: str,
    call: Callable[[cl.Table], Any],
    model: Callable[[dict[str, pa.DataType]], dict[str, pa.DataType]],
) -> Actor:
    def run() -> None:
        change = Change(name, model)
        state.changes.append(change)
        try:
            change.version = call(table).version
        except CarbonLiteError as exc:
            change.error = exc

    return Actor(name, run)


def renamed(old: str, new: str) -> Callable[[dict[str, pa.DataType]], dict[str, pa.DataType]]:
    return lambda s: {(new if n == old else n): t for n, t in s.items()}


def dropped(name: str) -> Callable[[dict[str, pa.DataType]], dict[str, pa.DataType]]:
    return lambda s: {n: t for n, t in s.items() if n != name}


def widened(
    name: str, to: pa.DataType
) -> Callable[[dict[str, pa.DataType]], dict[str, pa.DataType]]:
    return lambda s: {n: (to if n == name else t) for n, t in s.items()}


def added(name: str, t: pa.DataType) -> Callable[[dict[str, pa.DataType]], dict[str, pa.DataType]]:
    return lambda s: {**s, name: t}


# --- the check ------------------------------------------------------------------------------


def schema_at(state: State, version: int) -> dict[str, pa.DataType]:
    """The serial model: the acknowledged schema changes up to ``version``, in order."""
    schema = {f.name: f.type for f in SCHEMA}
    for change in sorted(
        (c for c in state.changes if c.version is not None), key=lambda c: c.version or 0
    ):
        if change.version is not None and change.version <= version:
            schema = change.apply(schema)
    return schema


def check(state: State, outcomes: dict[str, Outcome]) -> None:
    for name, outcome in outcomes.items():
        assert outcome.error is None, f"actor {name} raised {outcome.error!r}"
    for what in (*state.model.ops, *state.changes):
        allowed = state.refused.get(what.actor, ())
        if what.error is not None and not isinstance(what.error, allowed):
            raise AssertionError(f"{what.actor} was refused: {what.error!r}")
    versions = [c.version for c in state.changes if c.version is not None]
    for op in state.model.ops:
        if op.actor in state.before_changes and op.acknowledged:
            assert op.version is not None and all(op.version < v for v in versions), (
                f"{op.actor}'s rows, written before a rename or drop of their columns, were "
                f"committed at version {op.version}, after the change at {versions}"
            )
    check_table(state.uri, state.model)
    table = cl.open_table(state.uri)
    for version in range(table.version + 1):
        check_version(state, table, version)


def check_version(state: State, table: cl.Table, version: int) -> None:
    """Version ``version`` has the serial model's names and types, and each row the values
    its writer gave it (``kind``: the writer, under its present name; ``n``: the id)."""
    want = schema_at(state, version)
    got = table.to_arrow(version=version)
    types = {f.name: f.type for f in got.schema}
    assert list(types.items()) == list(want.items()), (
        f"version {version}: schema {types}, the serial model {want}"
    )
    names = list(want)
    kind = names[1] if names[1] != "n" else None  # renames keep a column's place
    n = "n" if "n" in want else None
    writers = {op.actor for op in state.model.ops}
    for row in got.to_pylist():
        if kind is not None:
            assert row[kind] in writers, f"version {version}: row {row}, {kind!r} lost its value"
        if n is not None:
            assert row[n] == row["id"], f"version {version}: row {row}, n is not the id"
        for extra in names[3:]:
            assert row[extra] is None or row[extra] == 0, f"version {version}: row {row}"


RENAME = (lambda t: t.rename_column("kind", "label"), renamed("kind", "label"))
RENAME_OTHER = (lambda t: t.rename_column("kind", "tag"), renamed("kind", "tag"))
DROP = (lambda t: t.drop_columns(["n"]), dropped("n"))
DROP_KIND = (lambda t: t.drop_columns(["kind"]), dropped("kind"))
WIDEN = (lambda t: t.widen_column("n", pa.int64()), widened("n", pa.int64()))
ADD = (
    lambda t: t.add_columns([pa.field("z", pa.int32())], defaults={"z": 0}),
    added("z", pa.int32()),
)


# --- scenarios ------------------------------------------------------------------------------


def append_and_rename() -> tuple[State, list[Actor]]:
    """(a) An append racing a rename of one of its columns, its handle opened before."""
    uri, model = fresh_table([100])
    state = State(uri, model, refused={"a": (SchemaMismatchError,)}, before_changes={"a"})
    a, r = cl.open_table(uri, writer_id="a"), cl.open_table(uri, writer_id="r")
    return state, [
        append(state, a, "a", [0, 1]),
        schema_change(state, r, "r", *RENAME),
    ]


def append_and_drop() -> tuple[State, list[Actor]]:
    """(b) An append racing a drop of one of its columns."""
    uri, model = fresh_table([100])
    state = State(uri, model, refused={"a": (SchemaMismatchError,)}, before_changes={"a"})
    a, d = cl.open_table(uri, writer_id="a"), cl.open_table(uri, writer_id="d")
    return state, [
        append(state, a, "a", [0, 1]),
        schema_change(state, d, "d", *DROP),
    ]


def append_and_widen() -> tuple[State, list[Actor]]:
    """(c) An append racing a widening of one of its columns: both commit, read cast up."""
    uri, model = fresh_table([100])
    state = State(uri, model)
    a, w = cl.open_table(uri, writer_id="a"), cl.open_table(uri, writer_id="w")
    return state, [
        append(state, a, "a", [0, 1]),
        schema_change(state, w, "w", *WIDEN),
    ]


def append_and_add() -> tuple[State, list[Actor]]:
    """An append racing an added column with a default: both commit; rows written before the
    column read its default (0)."""
    uri, model = fresh_table([100])
    state = State(uri, model)
    a, c = cl.open_table(uri, writer_id="a"), cl.open_table(uri, writer_id="c")
    return state, [
        append(state, a, "a", [0, 1]),
        schema_change(state, c, "c", *ADD),
    ]


def update(state: State, table: cl.Table, name: str, key: int) -> Actor:
    """An update of row ``key``'s writer column (``kind``) to ``name``."""

    def run() -> None:
        op = state.model.record(Op(name, added=frozenset({key}), upsert=True))
        settle(op, lambda: table.update(pc.field("id") == key, {"kind": name}))

    return Actor(name, run)


def update_and_change(
    change: tuple[Callable[[cl.Table], Any], Callable[..., Any]],
) -> Callable[[], tuple[State, list[Actor]]]:
    """An update setting a column racing a rename or a drop of that column: it commits
    before the change or is refused (its rows, written with the column, come after it)."""

    def scenario() -> tuple[State, list[Actor]]:
        uri, model = fresh_table([100, 101])
        state = State(uri, model, refused={"u": (SchemaMismatchError,)}, before_changes={"u"})
        u, c = cl.open_table(uri, writer_id="u"), cl.open_table(uri, writer_id="c")
        return state, [update(state, u, "u", 100), schema_change(state, c, "c", *change)]

    return scenario


def update_n(state: State, table: cl.Table, name: str, key: int) -> Actor:
    """An update of row ``key``'s ``n`` to its own value (a change no rename of ``kind``
    touches)."""

    def run() -> None:
        op = state.model.record(Op(name, added=frozenset({key}), upsert=True))
        settle(op, lambda: table.update(pc.field("id") == key, {"n": pc.scalar(key)}))

    return Actor(name, run)


def row_change_beside(
    kind: str, change: tuple[Callable[[cl.Table], Any], Callable[..., Any]]
) -> Callable[[], tuple[State, list[Actor]]]:
    """A delete by id (``kind`` "delete") or an update of ``n`` ("update") racing a schema
    change of another column: it commits in every order, whichever commits first (the
    delete read its rows in columns the change renamed or dropped; it plans again)."""

    def scenario() -> tuple[State, list[Actor]]:
        uri, model = fresh_table([100, 101], [102])
        state = State(uri, model)
        x, c = cl.open_table(uri, writer_id="x"), cl.open_table(uri, writer_id="c")
        actor = (
            delete(model, x, "x", [100, 102]) if kind == "delete" else update_n(state, x, "x", 101)
        )
        return state, [actor, schema_change(state, c, "c", *change)]

    return scenario


def handoff_and_rename() -> tuple[State, list[Actor]]:
    """(d) A handoff racing a rename: both commit, the rows intact under the new name."""
    uri, model = fresh_table([100, 101], [102], finish=True)
    state = State(uri, model)
    h, r = cl.open_table(uri, writer_id="h"), cl.open_table(uri, writer_id="r")
    return state, [
        maintain(model, h, "h", lambda t: t.handoff()),
        schema_change(state, r, "r", *RENAME),
    ]


def handoff_and_drop() -> tuple[State, list[Actor]]:
    """(d) A handoff racing a drop: both commit, the rows intact."""
    uri, model = fresh_table([100, 101], [102], finish=True)
    state = State(uri, model)
    h, d = cl.open_table(uri, writer_id="h"), cl.open_table(uri, writer_id="d")
    return state, [
        maintain(model, h, "h", lambda t: t.handoff()),
        schema_change(state, d, "d", *DROP),
    ]


def compaction_and_widen() -> tuple[State, list[Actor]]:
    """(d) A major compaction of two columnar segments racing a widening: both commit, the
    compacted rows read cast up."""
    uri, model = fresh_table([100, 101], [102], columnar=True)
    state = State(uri, model)
    c, w = cl.open_table(uri, writer_id="c"), cl.open_table(uri, writer_id="w")
    return state, [
        maintain(model, c, "c", lambda t: t.compact("major")),
        schema_change(state, w, "w", *WIDEN),
    ]


def two_schema_changes(
    first: tuple[Callable[[cl.Table], Any], Callable[..., Any]],
    second: tuple[Callable[[cl.Table], Any], Callable[..., Any]],
) -> Callable[[], tuple[State, list[Actor]]]:
    """(e) Two schema changes: each commits on the metadata it planned on, or gets
    CommitConflictError (or, planned on the other's metadata, SchemaMismatchError when the
    column it names is gone)."""

    def scenario() -> tuple[State, list[Actor]]:
        uri, model = fresh_table([100])
        refused = (CommitConflictError, SchemaMismatchError)
        state = State(uri, model, refused={"x": refused, "y": refused})
        x, y = cl.open_table(uri, writer_id="x"), cl.open_table(uri, writer_id="y")
        return state, [
            schema_change(state, x, "x", *first),
            schema_change(state, y, "y", *second),
        ]

    return scenario


SCENARIOS: dict[str, Callable[[], tuple[State, list[Actor]]]] = {
    "append_and_rename": append_and_rename,
    "append_and_drop": append_and_drop,
    "append_and_widen": append_and_widen,
    "append_and_add": append_and_add,
    "update_and_rename": update_and_change(RENAME),
    "update_and_drop": update_and_change(DROP_KIND),
    "delete_and_rename": row_change_beside("delete", RENAME),
    "delete_and_drop": row_change_beside("delete", DROP_KIND),
    "update_and_rename_another": row_change_beside("update", RENAME),
    "handoff_and_rename": handoff_and_rename,
    "handoff_and_drop": handoff_and_drop,
    "compaction_and_widen": compaction_and_widen,
    "two_renames": two_schema_changes(RENAME, RENAME_OTHER),
    "rename_and_drop": two_schema_changes(RENAME, DROP),
    "widen_and_drop": two_schema_changes(WIDEN, DROP),
    "widen_and_add": two_schema_changes(WIDEN, ADD),
}


PAUSE_AT = frozenset(
    {
        "commit.before_put",
        "commit.after_put",
        "append.after_data",
        "row_change.after_plan",
        "compaction.after_plan",
        "compaction.after_execute",
    }
)
"""The seams the default tier pauses at: where rows are written and not committed, where a
commit's actions are built and not put, and where a version is put and not checked (12 to 69
orders a scenario; every seam, in the slow tier, makes hundreds to thousands)."""


SLOW_SCENARIOS = frozenset({"compaction_and_widen", "update_and_rename_another"})
"""The scenarios of the most orders (6 s each): the slow tier runs them."""


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if n in SLOW_SCENARIOS else n
        for n in sorted(SCENARIOS)
    ],
)
def test_every_order(name: str) -> None:
    found = explore_all(SCENARIOS[name], check, limit=500, pause_at=PAUSE_AT)
    assert found.exhaustive, f"{name}: more than 500 orders"
    assert {"commit.before_put", "commit.after_put"} <= found.seams
    assert found.schedules >= 12


def test_a_stale_append_is_refused_after_a_rename() -> None:
    """The order (a) must meet: the rename commits while the append's rows are written; the
    append is refused, naming the rename, and commits nothing."""
    # the rename runs to its end first, then the append
    schedule = run_schedule(append_and_rename, check, choices=[1] * 12)
    a = next(op for op in schedule.state.model.ops if op.actor == "a")
    assert isinstance(a.error, SchemaMismatchError), a
    assert "kind" in str(a.error)
    assert not a.acknowledged


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_order_at_every_seam(name: str) -> None:
    """Every seam (checkpoints, replays, leases): all orders where they are 250 or fewer, else
    the first 250 depth first and 100 seeded random orders (the generated scenarios of
    test_generated_orders.py explore schema changes beside the others)."""
    found = explore_all(SCENARIOS[name], check, limit=250, pause_at=WITHOUT_HISTORY)
    assert found.schedules > 12
    if not found.exhaustive:
        assert explore_random(SCENARIOS[name], check, seeds=range(100)).schedules == 100
