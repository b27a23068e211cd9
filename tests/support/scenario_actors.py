"""What each kind of actor in the catalog (tests/support/scenarios.py) does, and the state
it records into.

Each kind is a function ``(state, spec, table) -> body``: the body runs on the actor's thread
(or, for a stale actor, on the thread it began on during the set-up) with ``table``, the
actor's own handle, and records what it asked for and what it was told into ``state``: model
ops (tests/support/log_model.py) for commits, ``Read``s for reads, ``Poll``s for a stream
consumer, refusals for calls that commit nothing. Commits go through :func:`settle`, which
records the commit id of each acknowledged version, read by the acting thread right away.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import carbonlite as cl
from carbonlite.errors import CarbonLiteError, CommitStateUnknownError, SchemaMismatchError
from carbonlite.storage import Storage
from tests.metadata.test_interleavings import State, maintain
from tests.support.faults import Injector
from tests.support.log_model import Op, Poll, Read, change_ids, ids_of, outcome_of
from tests.support.scenarios import ActorSpec, Generated


@dataclass
class GenState(State):
    """A generated schedule's state: the model, plus what the check needs besides it."""

    gen: Generated | None = None
    options: dict[str, Any] | None = None
    storage: Storage | None = None
    root: str = ""
    injector: Injector | None = None
    kinds: dict[str, str] = field(default_factory=dict)
    after_batch: dict[int, int] = field(default_factory=dict)
    """Set-up batch -> the version after it (0: before the first batch)."""
    reads: list[Read] = field(default_factory=list)
    polls: dict[str, list[Poll]] = field(default_factory=dict)
    stream_start: dict[str, int] = field(default_factory=dict)
    refusals: list[tuple[str, BaseException]] = field(default_factory=list)
    """Errors of calls that commit nothing a model op records (reads, recover, checkpoints)."""
    unknown: list[tuple[Op, int, str]] = field(default_factory=list)
    """Commits told ``CommitStateUnknownError``: the op, its version and its commit id."""

    def open(self, writer_id: str | None = None) -> cl.Table:
        return cl.open_table(self.uri, writer_id=writer_id, storage_options=self.options)


def rows_for(schema: pa.Schema, ids: Sequence[int], who: str) -> pa.Table:
    """Rows ``ids`` under ``schema`` as it is now (columns renamed, dropped or added): text
    columns name the writer, integer columns repeat the id."""
    n, columns = len(ids), {}
    for f in schema:
        if f.name == "id" or pa.types.is_integer(f.type):
            columns[f.name] = pa.array(ids, f.type)
        elif pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
            columns[f.name] = pa.array([who] * n, f.type)
        else:
            columns[f.name] = pa.nulls(n, f.type)
    return pa.table(columns, schema=schema)


def actor_body(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
    """What actor ``spec`` does, on ``table`` (its own handle)."""
    return _BODIES[spec.kind](state, spec, table)


def settle(state: GenState, table: cl.Table, op: Op, call: Callable[[], Any]) -> None:
    """Run one commit and record what its caller was told, as ``settle`` of
    test_interleavings.py does, and also: the commit id of an acknowledged version
    (:func:`record_commit_id`), the version and commit id an uncertain commit was told of, and
    an ``OSError`` escaping the library (the outcome a user then assumes: nothing committed)."""
    try:
        outcome_of(op, call())
    except CommitStateUnknownError as exc:
        op.uncertain = True
        state.unknown.append((op, exc.version, exc.commit_id))
    except (CarbonLiteError, OSError) as exc:
        op.error = exc
    record_commit_id(table, op)


def record_commit_id(table: cl.Table, op: Op) -> None:
    """The commit id of the version ``op`` was acknowledged at, read right away, when the
    version file holds this writer's commit: ``clean`` may already have removed the version
    (a later checkpoint covers it) and a stale writer's fork taken its number."""
    if op.acknowledged and op.version is not None and op.commit_id is None:
        info = table.log._commit_info(op.version)
        if info is not None and info.writer_id in (None, table.writer_id):
            op.commit_id = info.commit_id


def refusing(state: GenState, name: str, call: Callable[[], Any]) -> bool:
    """Run a call that commits nothing the model records; False when it was refused."""
    try:
        call()
    except (CarbonLiteError, OSError) as exc:
        state.refusals.append((name, exc))
        return False
    return True


def _appends(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
    def run() -> None:
        for b in range(spec.batches):
            ids = spec.batch_ids(b)
            txn = None if spec.txn is None else ("q", spec.txn + b)
            op = state.model.record(Op(spec.name, added=frozenset(ids)))
            settle(
                state,
                table,
                op,
                lambda ids=ids, txn=txn: table.append(
                    rows_for(table.schema, ids, spec.name), txn=txn
                ),
            )

    return run


def _retried_append(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
    """An append refused (a schema change since its rows were built), then built again on the
    same handle, refreshed, and appended again (twice at most)."""

    def run() -> None:
        ids = spec.batch_ids(0)
        for _ in range(3):
            op = state.model.record(Op(spec.name, added=frozenset(ids)))
            settle(state, table, op, lambda: table.append(rows_for(table.schema, ids, spec.name)))
            if not isinstance(op.error, SchemaMismatchError):
                return
            if not refusing(state, spec.name, table.refresh):
                return

    return run


def _finish(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
    """``finish_streaming``: it commits a version, or finds the segment closed by another
    commit (a roll-over, another finish) and commits nothing; the version it stands on then
    tells which (its commit info names this writer, or not)."""

    def run() -> None:
        op = Op(spec.name)
        try:
            if table.finish_streaming() is not None:
                info = table.log._commit_info(table.version)
                if info is not None and info.writer_id == spec.name:
                    op.version, op.acknowledged, op.commit_id = table.version, True, info.commit_id
        except (CarbonLiteError, OSError) as exc:
            op.error = exc
        state.model.record(op)

    return run


def _delete(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
    def run() -> None:
        op = state.model.record(Op(spec.name, deleted=frozenset(spec.ids)))
        settle(state, table, op, lambda: table.delete(pc.field("id").isin(list(spec.ids))))
        if op.version is not None:
            info = table.log._commit_info(op.version)
            op.read_version = None if info is None else info.read_version

    return run


def _update(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
    """Sets the first text column of row ``target`` (the id itself when there is none)."""
    key = spec.target or 0

    def call() -> Any:
        schema = table.refresh().schema
        text = [f.name for f in schema if pa.types.is_string(f.type)]
        values = {text[0]: spec.name} if text else {"id": key}
        return table.update(pc.field("id") == key, values)

    def run() -> None:
        settle(state, table, state.model.record(Op(spec.name, frozenset({key}), upsert=True)), call)

    return run


def _merge(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
    source = pa.table({"id": pa.array(spec.ids, pa.int64())})

    def run() -> None:
        op = state.model.record(Op(spec.name, added=frozenset(spec.ids), upsert=True))
        settle(state, table, op, lambda: table.merge(source, on=["id"]))

    return run


def _restore(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
    def run() -> None:
        target = state.after_batch[spec.target or 0]
        op = state.model.record(Op(spec.name, restores=target))
        settle(state, table, op, lambda: table.restore(target))

    return run


_CHANGES: dict[str, Callable[[cl.Table], Any]] = {
    "drop": lambda t: t.drop_columns(["kind"]),
    "rename": lambda t: t.rename_column("kind", "label"),
    "add": lambda t: t.add_columns([pa.field("z", pa.int32())], defaults={"z": 0}),
}


def _maintained(
    call: Callable[[cl.Table], Any], *, removes_data: bool = False
) -> Callable[[GenState, ActorSpec, cl.Table], Callable[[], None]]:
    """A commit without data change (handoff, compaction, clean, a schema change), run by
    ``maintain`` of test_interleavings.py; then the commit ids of its versions."""

    def body(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
        inner = maintain(state.model, table, spec.name, call, removes_data=removes_data).run

        def run() -> None:
            refusing(state, spec.name, inner)
            for op in state.model.ops:
                if op.actor == spec.name:
                    record_commit_id(table, op)

        return run

    return body


def _schema(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
    return _maintained(_CHANGES[spec.change or "drop"])(state, spec, table)


def _recover(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
    return lambda: refusing(state, spec.name, lambda: table.recover(min_age=0))


def _checkpoint(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
    """An explicit checkpoint of a refreshed snapshot (as a maintenance job writes one)."""
    return lambda: refusing(
        state, spec.name, lambda: table.log.write_checkpoint(table.refresh().snapshot())
    )


def _reader(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
    """Reads of the latest state and time travel to an earlier version, alternately."""
    rng = random.Random(f"{state.gen.seed if state.gen else 0}-{spec.name}")

    def read(travel: bool) -> None:
        floor = state.model.latest_acknowledged()
        table.refresh()
        version = rng.randint(0, table.version) if travel else table.version
        ids = ids_of(table.to_arrow(columns=["id"], version=version if travel else None))
        state.reads.append(Read(spec.name, version, ids, floor, travel))

    def run() -> None:
        for i in range(spec.count):
            if not refusing(state, spec.name, lambda i=i: read(i % 2 == 1)):
                return

    return run


def _stream(state: GenState, spec: ActorSpec, table: cl.Table) -> Callable[[], None]:
    """A consumer polling ``changes(start, latest)`` from where its last poll ended."""
    state.stream_start[spec.name] = table.version + 1
    polls = state.polls.setdefault(spec.name, [])

    def poll() -> None:
        start = polls[-1].end + 1 if polls else state.stream_start[spec.name]
        latest = table.refresh().version
        if latest >= start:
            polls.append(Poll(spec.name, start, latest, *change_ids(table.changes(start, latest))))

    def run() -> None:
        for _ in range(spec.count):
            if not refusing(state, spec.name, poll):
                return

    return run


_BODIES: dict[str, Callable[[GenState, ActorSpec, cl.Table], Callable[[], None]]] = {
    "append": _appends,
    "stale_append": _appends,
    "retry_append": _retried_append,
    "finish": _finish,
    "delete": _delete,
    "update": _update,
    "merge": _merge,
    "handoff": _maintained(lambda t: t.handoff()),
    "compact": _maintained(lambda t: t.compact("major")),
    "clean": _maintained(lambda t: t.clean(retention=0, force=True), removes_data=True),
    "recover": _recover,
    "checkpoint": _checkpoint,
    "restore": _restore,
    "schema": _schema,
    "reader": _reader,
    "stream": _stream,
}
