"""The model an interleaving is checked against: what each actor was told, replayed in order.

Every actor records what it did as an :class:`Op` with the version it was acknowledged at
(``None``: it committed nothing, or was told so). :func:`check_table` then opens the table
afresh and checks, against a plain model of row ids:

- the log has no hole and no fork: its versions are contiguous from the earliest retained one
  to the latest, and every acknowledged version is in it as that actor's own commit;
- every acknowledged commit is visible exactly once, and no row of an unacknowledged one is;
- time travel to every retained version equals the model at that version;
- ``changes`` from any retained start delivers each row committed since exactly once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

import carbonlite as cl
from carbonlite.errors import CarbonLiteError, DataUnavailableError

SCHEMA = pa.schema([("id", pa.int64()), ("kind", pa.string())])


def rows(ids: Iterable[int], kind: str = "a") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "kind": [kind] * len(ids)}, schema=SCHEMA)


@dataclass
class Op:
    """One commit an actor asked for: rows it added and ids it deleted, and the outcome."""

    actor: str
    added: frozenset[int] = frozenset()
    deleted: frozenset[int] = frozenset()
    version: int | None = None
    acknowledged: bool = False
    uncertain: bool = False  # CommitStateUnknownError: either outcome is allowed
    error: BaseException | None = None
    removes_data: bool = False  # a clean: older versions may have lost their data files
    upsert: bool = False  # a primary-key table: an added id replaces the row of that id
    read_version: int | None = None
    """For a delete: the version it read (its commitInfo's). As in Delta's write-serializable
    mode, it removes the matching rows of that version; blind appends committed between its
    read and its commit are ordered after it, whatever their version numbers."""


@dataclass
class Model:
    """The ops of one schedule, filled in by the actors as they run."""

    ops: list[Op] = field(default_factory=list)

    def record(self, op: Op) -> Op:
        self.ops.append(op)
        return op

    def acknowledged(self) -> list[Op]:
        return sorted(
            (o for o in self.ops if o.acknowledged and o.version is not None),
            key=lambda o: o.version or 0,
        )

    def ids_at(self, version: int) -> Counter[int]:
        state: Counter[int] = Counter()
        for op in self.acknowledged():
            if op.version is not None and op.version <= version:
                if op.deleted:
                    read = op.version - 1 if op.read_version is None else op.read_version
                    seen = self.ids_at(read)
                    for i in op.deleted:
                        if i in seen:
                            state.pop(i, None)
                if op.upsert:
                    state.update({i: 1 - state[i] for i in op.added if state[i] == 0})
                else:
                    state.update(op.added)
        return state


def ids_of(table: pa.Table) -> Counter[int]:
    return Counter(table.column("id").to_pylist())


def log_versions(table: cl.Table) -> list[int]:
    return table.log.listing().versions


def retained_start(table: cl.Table, *, cleaned: bool) -> int:
    """The earliest version the log holds (0 unless ``clean`` ran). Without a clean the log
    must hold every version from 0 to the latest; after one, a contiguous run from a checkpoint
    to the latest (below it, clean's leftovers and forks of stale writers are allowed)."""
    latest = table.version
    versions = log_versions(table)
    assert versions and versions[-1] == latest, f"latest {latest}, log lists {versions}"
    if not cleaned:
        assert versions == list(range(latest + 1)), (
            f"the log is not contiguous from 0 to the latest version {latest}: {versions}"
        )
        return 0
    start = latest
    while start - 1 in versions and _chained(table, start - 1, start):
        start -= 1
    checkpoints = table.log.listing().checkpoints
    assert start == 0 or start in checkpoints, (
        f"the log has a hole below version {start} that no checkpoint covers: {versions}, "
        f"checkpoints {checkpoints}"
    )
    check_chain(table, start, latest)
    history = [r.version for r in table.history()]
    assert history == list(range(latest, start - 1, -1)), (
        f"history lists versions {history}, the retained log is {start}..{latest}"
    )
    return start


def _chained(table: cl.Table, parent: int, child: int) -> bool:
    a, b = table.log._commit_info(parent), table.log._commit_info(child)
    return a is not None and b is not None and b.parent_commit_id == a.commit_id


def check_chain(table: cl.Table, start: int, end: int) -> None:
    """Each version from ``start + 1`` to ``end`` was built on the one before (no fork)."""
    infos = {v: table.log._commit_info(v) for v in range(start, end + 1)}
    for v in range(start + 1, end + 1):
        parent, info = infos[v - 1], infos[v]
        assert parent is not None and info is not None, f"version {v - 1} or {v} vanished"
        assert info.parent_commit_id == parent.commit_id, (
            f"version {v} was built on commit {info.parent_commit_id!r}, but version {v - 1} is "
            f"commit {parent.commit_id!r}: the log forked"
        )


def check_table(
    uri: str, model: Model, *, cleaned: bool = False, storage_options: dict | None = None
) -> None:
    """Check the table at ``uri`` against ``model`` (see the module's documentation);
    ``cleaned``: a ``clean`` ran, so the log may start after version 0."""
    table = cl.open_table(uri, storage_options=storage_options)
    latest = table.version
    earliest = retained_start(table, cleaned=cleaned)
    uncertain = set().union(*(o.added for o in model.ops if o.uncertain))
    seen_versions: set[int] = set()
    for op in model.acknowledged():
        assert op.version is not None
        assert op.version <= latest, f"{op.actor} was acknowledged at {op.version} > {latest}"
        assert op.version not in seen_versions, f"two actors acknowledged at {op.version}"
        seen_versions.add(op.version)
    final = ids_of(table.to_arrow())
    expected = model.ids_at(latest)
    extra = Counter({i: n for i, n in final.items() if i not in uncertain})
    assert extra == expected, (
        f"latest version {latest}: rows {sorted(extra.elements())} != model "
        f"{sorted(expected.elements())}"
    )
    removed_at = max((o.version or 0 for o in model.acknowledged() if o.removes_data), default=0)
    for v in range(earliest, latest + 1):
        try:
            got = ids_of(table.to_arrow(version=v))
        except DataUnavailableError:
            if v < removed_at:
                continue  # documented: clean removed the data files of older versions
            raise
        except CarbonLiteError as exc:  # an unreadable retained version is a hole
            raise AssertionError(f"time travel to version {v} failed: {exc!r}") from exc
        got = Counter({i: n for i, n in got.items() if i not in uncertain})
        assert got == model.ids_at(v), (
            f"version {v}: rows {sorted(got.elements())} != model {sorted(model.ids_at(v).elements())}"
        )
    for start in range(max(earliest + 1, removed_at), latest + 1):
        _check_changes(table, model, start, latest, uncertain)


def _check_changes(
    table: cl.Table, model: Model, start: int, end: int, uncertain: set[int]
) -> None:
    changes = table.changes(start, end)
    inserted = Counter(
        i
        for i, kind in zip(
            changes.column("id").to_pylist(),
            changes.column("_change_type").to_pylist(),
            strict=True,
        )
        if kind in ("insert", "update_postimage") and i not in uncertain
    )
    before, after = model.ids_at(start - 1), model.ids_at(end)
    wanted = Counter({i: n for i, n in (after - before).items()})
    added_between = Counter(  # an upsert of a key already there reports an update
        i for o in model.acknowledged() if start <= (o.version or -1) <= end for i in o.added
    )
    assert inserted == added_between, (
        f"changes({start}, {end}) inserted {sorted(inserted.elements())}, but the commits "
        f"acknowledged in that range added {sorted(added_between.elements())}"
    )
    assert not (wanted - inserted), f"changes({start}, {end}) missed {sorted(wanted - inserted)}"


def outcome_of(op: Op, result: object) -> None:
    """Fill ``op`` from a ``CommitResult``."""
    version = getattr(result, "version", None)
    skipped = getattr(result, "skipped", False)
    op.version = version
    op.acknowledged = version is not None and not skipped


def counts(values: Sequence[int]) -> Counter[int]:
    return Counter(values)
