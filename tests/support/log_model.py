"""The model an interleaving is checked against: what each actor was told, replayed in order.

Every actor records what it did as an :class:`Op` with the version it was acknowledged at
(``None``: it committed nothing, or was told so). :func:`check_table` then opens the table
afresh and checks, against a plain model of row ids:

- the log has no hole and no fork: its versions are contiguous from the earliest retained one
  to the latest, and every acknowledged version is in it as that actor's own commit;
- every acknowledged commit is visible exactly once, and no row of an unacknowledged one is;
- time travel to retained versions (up to ten, spread over the log) equals the model there;
- ``changes`` from retained starts (up to eight of them, spread over the log) delivers each
  row committed since exactly once;
- every acknowledged commit whose commit id was recorded is in the history exactly once, as
  that commit (its version holds that commit id; no commit id appears twice), and no row of an
  uncertain commit appears twice.

:func:`check_reads` and :func:`check_polls` check what actors read while the schedule ran:
each read equals the model at the version it read, never older than a commit acknowledged
before it began; a stream consumer's polls of ``changes`` deliver each committed row once.
"""

from __future__ import annotations

import itertools
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
    commit_id: str | None = None
    """The commit id of the version the actor was acknowledged at, read by the acting thread
    right after the acknowledgement (None: not recorded)."""
    restores: int | None = None
    """For a restore: the version whose rows it brought back."""


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

    def latest_acknowledged(self) -> int:
        """The newest version acknowledged to any actor so far (-1: none)."""
        return max(
            (o.version for o in self.ops if o.acknowledged and o.version is not None), default=-1
        )

    def uncertain_ids(self) -> set[int]:
        """Rows of commits whose outcome their actor could not tell."""
        return set().union(*(o.added for o in self.ops if o.uncertain))

    def ids_at(self, version: int) -> Counter[int]:
        state: Counter[int] = Counter()
        for op in self.acknowledged():
            if op.version is not None and op.version <= version:
                if op.restores is not None:
                    state = Counter(self.ids_at(op.restores))
                    continue
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
    """The earliest version of the history: the floor (docs/LOG.md "One history"). Without a
    clean the log must hold every version from 0 to the latest; after one, every version from
    the floor (0 or a checkpoint) to the latest, chained by commit ids (below the floor, clean's
    leftovers, a clean that failed after raising the floor, and stale writers' forks are
    allowed: they are no longer the history)."""
    latest = table.version
    versions = log_versions(table)
    assert versions and versions[-1] == latest, f"latest {latest}, log lists {versions}"
    floor = table.log.look().floor
    if not cleaned:
        assert floor == 0 and versions == list(range(latest + 1)), (
            f"the log is not contiguous from 0 to the latest version {latest}: {versions} "
            f"(floor {floor})"
        )
        return 0
    missing = sorted(set(range(floor, latest + 1)) - set(versions))
    assert not missing, f"the history from the floor {floor} misses versions {missing}"
    checkpoints = table.log.listing().checkpoints
    assert floor == 0 or floor in checkpoints, (
        f"the floor {floor} is no checkpoint: {versions}, checkpoints {checkpoints}"
    )
    check_chain(table, floor, latest)
    history = [r.version for r in table.history()]
    assert history == list(range(latest, floor - 1, -1)), (
        f"history lists versions {history}, the retained log is {floor}..{latest}"
    )
    return floor


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
    uncertain = model.uncertain_ids()
    seen_versions: dict[int, str] = {}
    for op in model.acknowledged():
        assert op.version is not None
        assert op.version <= latest, f"{op.actor} was acknowledged at {op.version} > {latest}"
        assert op.version not in seen_versions, (
            f"two actors acknowledged at {op.version}: {seen_versions[op.version]} and "
            f"{op.actor} (one was told of a version created where clean had removed the log, "
            "a fork no reader sees)"
        )
        seen_versions[op.version] = op.actor
    check_history(table, model, earliest)
    final = ids_of(table.to_arrow())
    expected = model.ids_at(latest)
    extra = Counter({i: n for i, n in final.items() if i not in uncertain})
    assert extra == expected, (
        f"latest version {latest}: rows {sorted(extra.elements())} != model "
        f"{sorted(expected.elements())}{_whose(model, expected - extra, extra - expected)}"
    )
    twice = sorted(i for i in uncertain if final[i] > max(1, expected[i]))
    assert not twice, f"rows {twice} of an uncertain commit appear more than once"
    removed_at = max((o.version or 0 for o in model.acknowledged() if o.removes_data), default=0)
    if any(o.removes_data and not o.acknowledged for o in model.ops):
        removed_at = latest  # a clean that failed may have deleted data files before it failed
    for v in spread(range(earliest, latest + 1), TRAVELS):
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
    for start in spread(range(max(earliest + 1, removed_at), latest + 1), CHANGE_STARTS):
        _check_changes(table, model, start, latest, uncertain)


TRAVELS = 10
"""Time travel is checked to at most this many retained versions: the first, the latest, and
evenly between (every version of a short log)."""
CHANGE_STARTS = 8
"""``changes`` is checked from at most this many starts (each reads every version after it,
so all of them would cost the square of the log's length): the first, the last, and evenly
between."""


def spread(values: range, most: int) -> list[int]:
    """At most ``most`` of ``values``, the first and the last among them, evenly spaced."""
    if len(values) <= most:
        return list(values)
    step = (len(values) - 1) / (most - 1)
    return sorted({values[round(i * step)] for i in range(most)})


def _whose(model: Model, missing: Counter[int], unexpected: Counter[int]) -> str:
    """Which commits the rows ``missing`` (or ``unexpected``) belong to, for a message."""
    parts = []
    for what, ids in (("missing", missing), ("unexpected", unexpected)):
        owners = sorted({f"{o.actor}@{o.version}" for o in model.ops for i in ids if i in o.added})
        if owners:
            parts.append(f"{what}: rows of {', '.join(owners)}")
        elif ids:
            parts.append(f"{what}: rows of no recorded commit")
    return f" ({'; '.join(parts)})" if parts else ""


def check_history(table: cl.Table, model: Model, earliest: int) -> None:
    """Every acknowledged commit whose commit id its actor recorded is in the history exactly
    once, as that commit: its version, if retained, holds that commit id; if not retained, its
    version file is gone or chains to the floor (one that does not is a fork, which no reader
    sees); and no commit id is in the retained log twice."""
    latest = table.version
    infos = {v: table.log._commit_info(v) for v in range(earliest, latest + 1)}
    ids = [i.commit_id for i in infos.values() if i is not None]
    doubled = sorted({c for c in ids if ids.count(c) > 1})
    assert not doubled, f"commits {doubled} are in the history more than once"
    for op in model.acknowledged():
        if op.commit_id is None or op.version is None:
            continue
        if op.version >= earliest:
            info = infos[op.version]
            found = None if info is None else info.commit_id
            assert found == op.commit_id, (
                f"{op.actor} was acknowledged at version {op.version} as commit {op.commit_id!r}, "
                f"but the history has commit {found!r} there"
            )
            continue
        info = table.log._commit_info(op.version)
        assert (
            info is None
            or info.commit_id != op.commit_id
            or _chains_to(table, op.version, earliest)
        ), (
            f"{op.actor} was acknowledged at version {op.version} (commit {op.commit_id!r}), "
            f"but that version is not in the history (it starts at {earliest}): a fork below "
            "the retained log, which no reader sees"
        )


def _chains_to(table: cl.Table, version: int, floor: int) -> bool:
    """Whether the version file ``version``, below the floor, is the history's (a clean that
    raised the floor has not deleted it yet): each version after it up to the floor names the
    one before as its parent."""
    for v in range(version, floor):
        a, b = table.log._commit_info(v), table.log._commit_info(v + 1)
        if a is None or b is None or b.parent_commit_id != a.commit_id:
            return False
    return True


@dataclass(frozen=True)
class Read:
    """One read an actor made while the schedule ran."""

    actor: str
    version: int
    """The version read: the one asked for (time travel), or the one the refreshed handle
    stood on."""
    ids: Counter[int]
    floor: int
    """The newest version acknowledged to any actor before the read began."""
    travel: bool = False


@dataclass(frozen=True)
class Poll:
    """One poll of a stream consumer: ``changes(start, end)``, the ids it inserted and deleted."""

    actor: str
    start: int
    end: int
    inserted: Counter[int]
    deleted: Counter[int]


def check_reads(model: Model, reads: Sequence[Read], latest: int) -> None:
    """Each read equals the model at the version it read (a state that existed), and a read of
    the latest state began no earlier than a commit acknowledged before it."""
    uncertain = model.uncertain_ids()
    for r in reads:
        assert r.travel or r.version >= r.floor, (
            f"{r.actor} read version {r.version} after version {r.floor} was acknowledged"
        )
        got = Counter({i: n for i, n in r.ids.items() if i not in uncertain})
        want = model.ids_at(r.version)
        if got != want:
            matches = [v for v in range(latest + 1) if model.ids_at(v) == got]
            raise AssertionError(
                f"{r.actor} read {sorted(got.elements())} at version {r.version}"
                f"{' (time travel)' if r.travel else ''}; the model has "
                f"{sorted(want.elements())} there (the read matches versions {matches})"
            )


def check_polls(model: Model, polls: Sequence[Poll]) -> None:
    """A stream consumer's polls follow one another without gap or overlap, and each delivers
    every row committed in its range exactly once."""
    uncertain = model.uncertain_ids()
    for before, after in itertools.pairwise(polls):
        assert after.start == before.end + 1, (
            f"{after.actor} polled changes from {after.start} after a poll up to {before.end}"
        )
    for p in polls:
        check_change_rows(model, p.start, p.end, p.inserted, p.deleted, uncertain, p.actor)


def check_change_rows(
    model: Model,
    start: int,
    end: int,
    inserted: Counter[int],
    deleted: Counter[int],
    uncertain: set[int],
    who: str = "changes",
) -> None:
    """The rows ``changes(start, end)`` reported against the model: inserts are exactly the
    rows the commits acknowledged in the range added; with a restore in the range (which
    inserts the rows it copies back and deletes the rows it drops), inserts minus deletes are
    the difference between the model's states."""
    inserted = Counter({i: n for i, n in inserted.items() if i not in uncertain})
    deleted = Counter({i: n for i, n in deleted.items() if i not in uncertain})
    before, after = model.ids_at(start - 1), model.ids_at(end)
    in_range = [o for o in model.acknowledged() if start <= (o.version or -1) <= end]
    if any(o.restores is not None for o in in_range):
        keys = set(inserted) | set(deleted) | set(before) | set(after)
        off = sorted(i for i in keys if inserted[i] - deleted[i] != after[i] - before[i])
        assert not off, (
            f"{who}({start}, {end}) across a restore: inserts minus deletes differ from the "
            f"model for rows {off}"
        )
        return
    wanted = after - before
    added_between = Counter(i for o in in_range for i in o.added)  # an upsert reports an update
    assert inserted == added_between, (
        f"{who}({start}, {end}) inserted {sorted(inserted.elements())}, but the commits "
        f"acknowledged in that range added {sorted(added_between.elements())}"
    )
    assert not (wanted - inserted), f"{who}({start}, {end}) missed {sorted(wanted - inserted)}"


def change_ids(changes: pa.Table) -> tuple[Counter[int], Counter[int]]:
    """(inserted, deleted) ids of a ``changes`` result (an update's post-image is an insert,
    its pre-image a delete)."""
    pairs = zip(
        changes.column("id").to_pylist(),
        changes.column("_change_type").to_pylist(),
        strict=True,
    )
    inserted: Counter[int] = Counter()
    deleted: Counter[int] = Counter()
    for i, kind in pairs:
        if kind in ("insert", "update_postimage"):
            inserted[i] += 1
        elif kind in ("delete", "update_preimage"):
            deleted[i] += 1
    return inserted, deleted


def _check_changes(
    table: cl.Table, model: Model, start: int, end: int, uncertain: set[int]
) -> None:
    inserted, deleted = change_ids(table.changes(start, end))
    check_change_rows(model, start, end, inserted, deleted, uncertain)


def outcome_of(op: Op, result: object) -> None:
    """Fill ``op`` from a ``CommitResult``."""
    version = getattr(result, "version", None)
    skipped = getattr(result, "skipped", False)
    op.version = version
    op.acknowledged = version is not None and not skipped


def counts(values: Sequence[int]) -> Counter[int]:
    return Counter(values)
