"""A model-based test of row-level changes: delete, update and merge by deletion vectors,
mixed with appends, overwrites and the whole segment lifecycle.

Hypothesis runs random sequences of append / overwrite / delete (pyarrow expressions and DNF
tuples) / update (scalars and expressions of the old row) / merge (on ``id`` or on ``id`` and
``s``; every ``when_*`` choice; sources of any column subset and order, with existing, new,
re-used and null keys) / a merge whose source repeats a matched key (``DuplicateKeyError``,
nothing committed, no file left) / finish_streaming / handoff / compact minor and major /
clean(retention=0, force=True) against a plain pyarrow model (``tests/support/row_model.py``)
that keeps the rows of every version.

After every step every version is read again (time travel) and compared, as a multiset of
rows, with the model's rows of that version, and so is ``count_rows``; a version whose files
``clean`` deleted must say so (``DataUnavailableError``) instead. A data-changing step must
commit exactly when the model says something changes, report the model's counts (in its
result and in ``history``), and ``changes()`` of its version must show the model's rows per
change type; the versions of handoff, compaction and clean must show no change at all.
Blocklets hold a few rows, so deletions span blocklets, whole blocklets are deleted, and
handoff and compaction meet deletion vectors of every shape.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import carbonlite as cl
from carbonlite.errors import DataUnavailableError, DuplicateKeyError
from tests.support.row_model import (
    SCHEMA,
    Assign,
    Change,
    apply_delete,
    apply_merge,
    apply_update,
    change_rows,
    diff,
    rows_of,
)
from tests.support.tables import drop_memory, memory_uri

V = st.one_of(st.none(), st.integers(-3, 12))
S = st.sampled_from([None, "a", "b", "c", "dd"])


@st.composite
def filters(draw: st.DrawFn, top: int) -> object:
    """A filter in one of the forms ``Table.delete`` / ``update`` take, over ``id`` (0..top),
    ``v`` or ``s``; None (every row) now and then."""
    kind = draw(
        st.sampled_from(
            ["range", "range", "dnf_and", "dnf_or", "in", "not_in", "s", "s_null", "ne", "all"]
        )
    )
    column = draw(st.sampled_from(["id", "id", "v"]))
    high = top if column == "id" else 12
    lo = draw(st.integers(-2, max(high, 0)))
    hi = lo + draw(st.integers(0, 8 if column == "id" else 5))
    event(f"filter: {kind}")
    if kind == "range":
        return (pc.field(column) >= lo) & (pc.field(column) < hi)
    if kind == "dnf_and":
        return [(column, ">=", lo), (column, "<=", hi)]
    if kind == "dnf_or":
        return [[(column, "<", lo - 3)], [("s", "==", draw(S.filter(bool)))]]
    if kind in ("in", "not_in"):
        values = draw(st.lists(st.integers(-2, max(high, 0)), min_size=1, max_size=6))
        return [(column, "in" if kind == "in" else "not in", values)]
    if kind == "s":
        return [("s", "==", draw(S.filter(bool)))]
    if kind == "s_null":
        return pc.field("s").is_null() & (pc.field(column) <= hi)
    if kind == "ne":
        return (pc.field(column) != lo) & (pc.field("v") > draw(st.integers(-3, 12)))
    return None


ASSIGNMENTS = st.sampled_from(
    [
        {"v": Assign("const", 7)},
        {"v": Assign("const", None)},
        {"v": Assign("add", 1, "v")},
        {"v": Assign("mul", 2, "id")},
        {"s": Assign("const", "u")},
        {"s": Assign("const", None)},
        {"v": Assign("add", 100, "v"), "s": Assign("const", "w")},
        {"id": Assign("add", 1000, "id")},
        {"id": Assign("add", 0, "v"), "v": Assign("add", 0, "id")},  # a swap: old values
    ]
)


class RowChanges(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.uri = memory_uri("row-changes")
        self.table: cl.Table | None = None
        self.versions: list[pa.Table] = []
        """versions[v]: the rows the table holds at version v, by the model."""
        self.gone: set[str] = set()
        """Files (data and deletion vectors) ``clean`` deleted."""
        self.next_id = 0

    # --- set-up -----------------------------------------------------------------------------

    @initialize(
        blocklet_rows=st.sampled_from(["2", "4", "5"]),
        checkpoint=st.sampled_from(["3", "7"]),
        thresholds=st.sampled_from(["2,2", "2,3"]),
    )
    def create(self, blocklet_rows: str, checkpoint: str, thresholds: str) -> None:
        self.table = cl.create_table(
            self.uri,
            SCHEMA,
            properties={
                "blocklet_max_rows": blocklet_rows,
                "handoff_blocklet_rows": "6",
                "streaming_segment_max_bytes": "2KB",
                "checkpoint_interval": checkpoint,
                "compaction_level_threshold": thresholds,
                "major_compaction_size": "64KB",
            },
        )
        self.versions.append(SCHEMA.empty_table())

    def teardown(self) -> None:
        if self.table is not None:
            result = self.table.verify()
            assert result.ok, result.problems
        drop_memory(self.uri)

    @property
    def t(self) -> cl.Table:
        assert self.table is not None
        return self.table

    @property
    def rows(self) -> pa.Table:
        return self.versions[-1]

    def _live_keys(self) -> list[int]:
        return sorted({k for k in self.rows.column("id").to_pylist() if k is not None})

    def _files(self) -> list[str]:
        return sorted(MemoryFileSystem().find(self.uri))

    # --- checks of one step -----------------------------------------------------------------

    def _committed(self, change: Change, version: int | None, before: int, what: str) -> None:
        """A data-changing step: it committed exactly one version when the model says it
        changes something, and ``changes()`` of that version are the model's."""
        if not change.commits:
            assert version is None, f"{what} changed nothing, yet committed version {version}"
            assert self.t.refresh().version == before
            return
        assert version == before + 1, f"{what}: version {version}, expected {before + 1}"
        self.versions.append(change.table)
        record = self.t.history(limit=1)[0]
        written = change.updated + change.inserted
        assert (record.rows, record.rows_removed) == (written, change.updated + change.deleted), (
            f"{what}: history says {record.rows} rows added, {record.rows_removed} removed"
        )
        got = change_rows(self.t.changes(version, version))
        want = change.expected_changes()
        for kind, rows in want.items():
            problem = diff(got[kind], rows)
            assert problem is None, f"{what}: changes() of version {version}, {kind}: {problem}"

    def _no_data_change(self, versions: tuple[int, ...] | list[int], before: int) -> None:
        """Maintenance: the versions it reports, each holding the rows it found, no changes."""
        assert list(versions) == list(range(before + 1, self.t.refresh().version + 1))
        self.versions.extend([self.rows] * len(versions))
        if versions:
            changes = self.t.changes(versions[0], versions[-1])
            assert changes.num_rows == 0, changes.to_pylist()[:5]

    # --- data rules -------------------------------------------------------------------------

    @rule(
        n=st.integers(1, 12),
        reuse=st.integers(0, 2),
        nulls=st.integers(0, 1),
        data=st.data(),
    )
    def append(self, n: int, reuse: int, nulls: int, data: st.DataObject) -> None:
        """New ids, now and then an id the table holds already (a duplicate key) or null."""
        ids: list[int | None] = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        live = self._live_keys()
        if live and reuse:
            ids += data.draw(st.lists(st.sampled_from(live), min_size=reuse, max_size=reuse))
        ids += [None] * nulls
        v = data.draw(st.lists(V, min_size=len(ids), max_size=len(ids)))
        s = data.draw(st.lists(S, min_size=len(ids), max_size=len(ids)))
        rows = pa.table(
            {"id": pa.array(ids, pa.int64()), "v": pa.array(v, pa.int64()), "s": s}, schema=SCHEMA
        )
        before = self.t.version
        result = self.t.append(rows)
        assert result.version == before + 1
        self.versions.append(pa.concat_tables([self.rows, rows]))
        got = change_rows(self.t.changes(result.version))
        assert diff(got["insert"], rows_of(rows)) is None

    @rule(n=st.integers(0, 6), data=st.data())
    def overwrite(self, n: int, data: st.DataObject) -> None:
        """Every segment marked for delete, deleted rows and all; time travel keeps them."""
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        rows = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "v": pa.array(data.draw(st.lists(V, min_size=n, max_size=n)), pa.int64()),
                "s": pa.array(data.draw(st.lists(S, min_size=n, max_size=n)), pa.string()),
            },
            schema=SCHEMA,
        )
        before = self.t.version
        result = self.t.overwrite(rows)
        assert result.version == before + 1
        got = change_rows(self.t.changes(result.version))
        assert diff(got["delete"], rows_of(self.rows)) is None, diff(
            got["delete"], rows_of(self.rows)
        )
        assert diff(got["insert"], rows_of(rows)) is None
        self.versions.append(rows)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        filter = data.draw(filters(self.next_id))
        change = apply_delete(self.rows, filter)
        before = self.t.version
        result = self.t.delete(filter)
        assert result.rows == change.deleted, f"delete {filter}: {result}"
        event(f"delete: {'some' if change.deleted else 'no'} rows")
        self._committed(change, result.version, before, f"delete {filter}")

    @rule(data=st.data(), assignments=ASSIGNMENTS)
    def update(self, data: st.DataObject, assignments: dict[str, Assign]) -> None:
        filter = data.draw(filters(self.next_id))
        change = apply_update(self.rows, filter, assignments)
        before = self.t.version
        result = self.t.update(filter, {c: a.expression() for c, a in assignments.items()})
        what = f"update {filter} set {assignments}"
        assert result.rows == change.updated, f"{what}: {result}"
        self._committed(change, result.version, before, what)

    def _source(
        self, data: st.DataObject, keys: list[int | None], on: list[str], s_keys: list | None
    ) -> pa.Table:
        """A source with ids ``keys`` (and s ``s_keys`` when s is a key column too): the key
        columns and perhaps others, in any order."""
        n = len(keys)
        columns = {"id": pa.array(keys, pa.int64())}
        if data.draw(st.booleans()):
            columns["v"] = pa.array(data.draw(st.lists(V, min_size=n, max_size=n)), pa.int64())
        if "s" in on or data.draw(st.booleans()):
            values = (
                s_keys if s_keys is not None else data.draw(st.lists(S, min_size=n, max_size=n))
            )
            columns["s"] = pa.array(values, pa.string())
        order = data.draw(st.permutations(list(columns)))
        return pa.table({name: columns[name] for name in order})

    def _keys(
        self, data: st.DataObject, on: list[str], ids: list[int | None]
    ) -> tuple[list[int | None], list | None]:
        """The source's key columns for ``ids``: with ``on`` = id and s, s drawn so that
        some (id, s) pairs are live ones; drawn keys that repeat are dropped."""
        if "s" not in on:
            return ids, None
        live = {
            i: s
            for i, s in zip(*(self.rows.column(c).to_pylist() for c in ("id", "s")), strict=True)
        }
        out_ids, out_s, seen = [], [], set()
        for i in ids:
            s = live.get(i) if data.draw(st.booleans()) else data.draw(S)
            if i is not None and (i, s) in seen:
                continue
            seen.add((i, s))
            out_ids.append(i)
            out_s.append(s)
        return out_ids, out_s

    @rule(
        data=st.data(),
        when_matched=st.sampled_from(["update", "update", "delete", "ignore"]),
        when_not_matched=st.sampled_from(["insert", "insert", "ignore"]),
        when_not_matched_by_source=st.sampled_from(["ignore", "ignore", "ignore", "delete"]),
    )
    def merge(
        self,
        data: st.DataObject,
        when_matched: str,
        when_not_matched: str,
        when_not_matched_by_source: str,
    ) -> None:
        """A source of unique keys: some the table holds, some new or deleted before, and
        perhaps null keys (which match nothing)."""
        live = self._live_keys()
        keys: list[int | None] = []
        if live:
            keys += data.draw(st.lists(st.sampled_from(live), max_size=4, unique=True))
        for k in data.draw(st.lists(st.integers(0, self.next_id + 3), max_size=4)):
            if k not in keys:
                keys.append(k)
        keys += [None] * data.draw(st.integers(0, 2))
        keys = data.draw(st.permutations(keys))
        if not keys:
            keys = [self.next_id]
        self.next_id = max([self.next_id, *(k + 1 for k in keys if k is not None)])
        on = data.draw(st.sampled_from([["id"], ["id"], ["id", "s"], ["s", "id"]]))
        keys, s_keys = self._keys(data, on, keys)
        source = self._source(data, keys, on, s_keys)
        options = {
            "when_matched": when_matched,
            "when_not_matched": when_not_matched,
            "when_not_matched_by_source": when_not_matched_by_source,
        }
        change = apply_merge(self.rows, source, on, **options)
        before = self.t.version
        result = self.t.merge(source, on, **options)
        what = f"merge on {on} {source.to_pylist()} {options}"
        assert (result.rows_updated, result.rows_inserted, result.rows_deleted) == (
            change.updated,
            change.inserted,
            change.deleted,
        ), f"{what}: {result}"
        event(f"merge: {when_matched}/{when_not_matched}/{when_not_matched_by_source}")
        self._committed(change, result.version, before, what)

    @precondition(lambda self: self.table is not None and self._live_keys())
    @rule(
        data=st.data(),
        when_matched=st.sampled_from(["update", "delete"]),
        when_not_matched=st.sampled_from(["insert", "ignore"]),
        when_not_matched_by_source=st.sampled_from(["ignore", "delete"]),
    )
    def merge_duplicate_key(
        self,
        data: st.DataObject,
        when_matched: str,
        when_not_matched: str,
        when_not_matched_by_source: str,
    ) -> None:
        """A source key that matches a row, twice: DuplicateKeyError, and nothing written."""
        key = data.draw(st.sampled_from(self._live_keys()))
        others = data.draw(st.lists(st.integers(0, self.next_id + 3), max_size=3, unique=True))
        keys: list[int | None] = [key, *(k for k in others if k != key), key]
        source = self._source(data, data.draw(st.permutations(keys)), ["id"], None)
        before, files = self.t.version, self._files()
        with pytest.raises(DuplicateKeyError):
            self.t.merge(
                source,
                ["id"],
                when_matched=when_matched,
                when_not_matched=when_not_matched,
                when_not_matched_by_source=when_not_matched_by_source,
            )
        assert self.t.refresh().version == before
        assert self._files() == files, "a refused merge left files behind"

    # --- maintenance rules ------------------------------------------------------------------

    @rule()
    def finish_streaming(self) -> None:
        before = self.t.version
        closed = self.t.finish_streaming()
        self._no_data_change([before + 1] if closed is not None else [], before)

    @rule()
    def handoff(self) -> None:
        before = self.t.version
        result = self.t.handoff()
        event(f"handoff: {len(result.versions)} versions")
        self._no_data_change(result.versions, before)

    @rule()
    def finish_and_handoff(self) -> None:
        """The streaming segment, deleted rows and all, into a columnar one at once."""
        self.finish_streaming()
        self.handoff()

    @rule(kind=st.sampled_from(["minor", "major"]))
    def compact(self, kind: str) -> None:
        before = self.t.version
        result = self.t.compact(kind)
        event(f"compact {kind}: {len(result.versions)} versions")
        self._no_data_change(result.versions, before)

    @precondition(
        lambda self: (
            self.table is not None
            and any(s.status in ("COMPACTED", "MARKED_FOR_DELETE") for s in self.t.segments())
        )
    )
    @rule()
    def clean(self) -> None:
        time.sleep(0.003)  # every status change is now older than "now" in milliseconds
        before = self.t.version
        result = self.t.clean(0, force=True)
        self.gone |= set(result.files)
        event(f"clean: {len(result.files)} files")
        self._no_data_change([] if result.version is None else [result.version], before)

    # --- invariants -------------------------------------------------------------------------

    def _needs_gone_files(self, version: int) -> list[str]:
        """Files version ``version`` reads that ``clean`` deleted. A blocklet whose rows are
        all deleted is not read at all (nor is its vector)."""
        if not self.gone:
            return []
        needed = set()
        for seg in self.t.snapshot(version).segments.values():
            if not seg.is_live:
                continue
            for f in seg.files.values():
                for b in f.blocklets:
                    ref = f.deletions.get(b.offset)
                    if ref is None or ref.cardinality < b.num_rows:
                        needed.add(f.path)
                        needed.update([ref.path] if ref is not None else [])
        return sorted(needed & self.gone)

    @invariant()
    def every_version_reads_as_the_model(self) -> None:
        if self.table is None:
            return
        latest = self.t.refresh().version
        assert latest == len(self.versions) - 1, "versions out of step with the model"
        assert self.t.count_rows() == self.rows.num_rows
        for version, want in enumerate(self.versions):
            count = self.t.count_rows(version=version)
            assert count == want.num_rows, f"count_rows(version={version}) = {count}"
            gone = self._needs_gone_files(version)
            if gone:
                assert version < latest, f"clean deleted files the latest version reads: {gone}"
                with pytest.raises(DataUnavailableError):
                    self.t.to_arrow(version=version)
                continue
            problem = diff(rows_of(self.t.to_arrow(version=version)), rows_of(want))
            assert problem is None, f"version {version} of {latest}: {problem}"

    @invariant()
    def filtered_scans_skip_deleted_rows(self) -> None:
        """Pruning and deletion vectors together: a filtered scan of the latest version."""
        if self.table is None:
            return
        for filter in ([("v", ">=", 5)], pc.field("s").is_null() | (pc.field("id") < 10)):
            got = rows_of(self.t.to_arrow(filter=filter))
            want = rows_of(apply_delete(self.rows, filter).rows["delete"])
            assert diff(got, want) is None, f"scan with {filter}: {diff(got, want)}"


TestRowChanges = RowChanges.TestCase
TestRowChanges.settings = settings(
    max_examples=8,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.slow
class TestRowChangesMore(RowChanges.TestCase):  # type: ignore[misc,valid-type]
    """The same machine, many more runs (the slow tier)."""

    settings = settings(
        max_examples=40,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
