"""A model-based test of the whole segment lifecycle.

Hypothesis runs random sequences of append / finish_streaming / handoff / compact (minor, major,
custom of random eligible segments) / clean(retention=0, force=True) against a model that
predicts, independently of the implementation, which segments exist with which id, level,
status and ``merged_into``, which rows every version holds, and which versions can no longer
be read after ``clean``. The only facts the model takes from the table are the ones it cannot
know: segment sizes in bytes (for roll-over and major compaction's size grouping).

After every operation every version of the table is read again (time travel) and compared
with the rows it held when it was committed, so a compaction or clean that changes any
version's rows, loses a row or duplicates one is caught.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import carbonlite as cl
from carbonlite.errors import DataUnavailableError, InvalidOptionError
from tests.compaction.lifecycle import SCHEMA, make_rows, rows_differ, sorted_file
from tests.support.tables import drop_memory, memory_uri

pytestmark = pytest.mark.slow

STREAM_LIMIT = 3 * 1024  # streaming_segment_max_bytes: a segment rolls every few appends


@dataclass
class Seg:
    """The model of one segment."""

    id: str
    status: str
    level: int
    rows: int
    merged_into: str | None = None
    cleaned: bool = False

    @property
    def order(self) -> tuple[int, int]:
        root, _, level = self.id.partition(".")
        return int(root), int(level or -1)

    @property
    def root(self) -> int:
        return int(self.id.split(".")[0])


class Lifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.uri = memory_uri("lifecycle")
        self.table: cl.Table | None = None
        self.segs: dict[str, Seg] = {}
        self.next_row = 0
        self.rows_at: list[int] = []
        """rows_at[v]: the table holds the rows of ids range(rows_at[v]) at version v."""
        self.live_at: list[frozenset[str]] = []
        """live_at[v]: the segments readers see at version v."""
        self.checked = 0
        """Versions 0..checked-1 have been read since the last operation that could change them."""

    # --- set-up -----------------------------------------------------------------------------

    @initialize(
        thresholds=st.sampled_from(["4,3", "2,2", "3"]),
        preserve=st.integers(0, 2),
        major_size=st.sampled_from(["4KB", "16KB"]),
    )
    def create(self, thresholds: str, preserve: int, major_size: str) -> None:
        self.thresholds = tuple(int(p) for p in thresholds.split(","))
        self.preserve = preserve
        self.table = cl.create_table(
            self.uri,
            SCHEMA,
            sort_columns=["ts"],
            properties={
                "blocklet_max_rows": "32",
                "handoff_blocklet_rows": "32",
                "streaming_segment_max_bytes": str(STREAM_LIMIT),
                "compaction_level_threshold": thresholds,
                "compaction_preserve_segments": str(preserve),
                "major_compaction_size": major_size,
                "checkpoint_interval": "5",
            },
        )
        self._committed()

    def teardown(self) -> None:
        if self.table is not None:
            result = self.table.verify()
            assert result.ok, result.problems
        drop_memory(self.uri)

    # --- model helpers ----------------------------------------------------------------------

    @property
    def t(self) -> cl.Table:
        assert self.table is not None
        return self.table

    def _committed(self) -> None:
        """Record one new version as the model sees the table now."""
        self.rows_at.append(self.next_row)
        self.live_at.append(
            frozenset(
                s.id
                for s in self.segs.values()
                if s.status in ("STREAMING", "STREAMING_FINISH", "SUCCESS")
            )
        )

    def _streaming(self) -> Seg | None:
        for s in reversed(self.segs.values()):
            if s.status == "STREAMING":
                return s
        return None

    def _next_root(self) -> int:
        return max((s.root for s in self.segs.values()), default=-1) + 1

    def _candidates(self) -> list[Seg]:
        done = sorted(
            (s for s in self.segs.values() if s.status == "SUCCESS"), key=lambda s: s.order
        )
        return done[: len(done) - self.preserve] if self.preserve else done

    def _output_id(self, inputs: list[Seg], level: int, taken: set[str]) -> str:
        root = min(s.root for s in inputs)
        while f"{root}.{level}" in self.segs or f"{root}.{level}" in taken:
            level += 1
        return f"{root}.{level}"

    def _apply_round(self, tasks: list[tuple[list[Seg], int]]) -> list[str]:
        """Commit one round of merge tasks in the model; returns the output ids in order."""
        created = []
        outputs: list[Seg] = []
        taken: set[str] = set()
        for inputs, level in tasks:
            out = self._output_id(inputs, level, taken)
            taken.add(out)
            outputs.append(Seg(out, "SUCCESS", level, sum(s.rows for s in inputs)))
            for s in inputs:
                s.status, s.merged_into = "COMPACTED", out
            created.append(out)
        for o in outputs:
            self.segs[o.id] = o
        self._committed()
        return created

    def _check_outputs(self, result: cl.compaction.CompactionResult, first_version: int) -> None:
        """Outputs are sorted by ts; every version committed is data_change=false."""
        for sid in result.segments_created:
            snap_seg = self.t.snapshot().segments[sid]
            assert snap_seg.format == "COLUMNAR" and snap_seg.sorted_by == ("ts",)
            rows = 0
            for rel in snap_seg.files:
                n, ordered = sorted_file(self.t, rel)
                assert ordered, f"{rel} of segment {sid} is not sorted by ts"
                rows += n
            assert rows == self.segs[sid].rows
        history = {h.version: h for h in self.t.history()}
        for v in range(first_version, self.t.version + 1):
            assert history[v].data_change is False, history[v]
            assert history[v].operation in ("HANDOFF", "COMPACT")

    # --- rules ------------------------------------------------------------------------------

    @rule(n=st.integers(1, 60))
    def append(self, n: int) -> None:
        self._append(n)

    @rule(sizes=st.lists(st.integers(1, 60), min_size=2, max_size=6))
    def stream(self, sizes: list[int]) -> None:
        """Several appends in a row: segments fill up and roll over."""
        for n in sizes:
            self._append(n)

    def _append(self, n: int) -> None:
        target = self._streaming()
        expected_id = target.id if target is not None else str(self._next_root())
        self.t.append(make_rows(range(self.next_row, self.next_row + n)))
        self.next_row += n
        seg = {s.id: s for s in self.t.segments()}[expected_id]
        if target is None:
            target = self.segs[expected_id] = Seg(expected_id, "STREAMING", 0, 0)
        target.rows += n
        assert seg.rows == target.rows
        rolled = seg.bytes >= STREAM_LIMIT
        assert seg.status == ("STREAMING_FINISH" if rolled else "STREAMING"), (seg, rolled)
        if rolled:
            target.status = "STREAMING_FINISH"
        self._committed()

    @rule()
    def finish_streaming(self) -> None:
        self.checked = 0  # every version is read again after this operation
        target = self._streaming()
        closed = self.t.finish_streaming()
        assert closed == (target.id if target is not None else None)
        if target is not None:
            target.status = "STREAMING_FINISH"
            self._committed()

    @rule()
    def handoff(self) -> None:
        self.checked = 0  # every version is read again after this operation
        first = self.t.version + 1
        finished = sorted(
            (s for s in self.segs.values() if s.status == "STREAMING_FINISH"), key=lambda s: s.order
        )
        result = self.t.handoff()
        assert list(result.segments_compacted) == [s.id for s in finished]
        if finished:
            created = self._apply_round([([s], 0) for s in finished])
            assert list(result.segments_created) == created
            assert len(result.versions) == 1
        else:
            assert result.versions == ()
        self._check_outputs(result, first)

    @rule()
    def compact_minor(self) -> None:
        self.checked = 0  # every version is read again after this operation
        first = self.t.version + 1
        result = self.t.compact("minor")
        compacted: list[str] = []
        created: list[str] = []
        rounds = 0
        while True:
            candidates = self._candidates()
            tasks = []
            for level, threshold in enumerate(self.thresholds):
                at_level = [s for s in candidates if s.level == level]
                for start in range(0, len(at_level) - threshold + 1, threshold):
                    tasks.append((at_level[start : start + threshold], level + 1))
            if not tasks:
                break
            compacted += [s.id for inputs, _ in tasks for s in inputs]
            created += self._apply_round(tasks)
            rounds += 1
        assert list(result.segments_compacted) == compacted
        assert list(result.segments_created) == created
        assert len(result.versions) == rounds
        self._check_outputs(result, first)
        event(f"minor compaction rounds: {rounds}")

    @rule()
    def compact_major(self) -> None:
        self.checked = 0  # every version is read again after this operation
        first = self.t.version + 1
        limit = cl.properties.TableProperties(self.t.properties).major_compaction_size
        size = {s.id: s.bytes for s in self.t.segments()}
        tasks: list[tuple[list[Seg], int]] = []
        group: list[Seg] = []
        total = 0
        for s in self._candidates():
            if size[s.id] >= limit or (group and total + size[s.id] > limit):
                if len(group) >= 2:
                    tasks.append((group, max(g.level for g in group) + 1))
                group, total = [], 0
                if size[s.id] >= limit:
                    continue
            group.append(s)
            total += size[s.id]
        if len(group) >= 2:
            tasks.append((group, max(g.level for g in group) + 1))
        result = self.t.compact("major")
        event(f"major compaction tasks: {len(tasks)}")
        assert list(result.segments_compacted) == [s.id for inputs, _ in tasks for s in inputs]
        if tasks:
            assert list(result.segments_created) == self._apply_round(tasks)
            assert len(result.versions) == 1
        else:
            assert result.versions == ()
        self._check_outputs(result, first)

    @rule(data=st.data())
    def compact_custom(self, data: st.DataObject) -> None:
        self.checked = 0  # every version is read again after this operation
        eligible = [s for s in self.segs.values() if s.status in ("SUCCESS", "STREAMING_FINISH")]
        if not eligible:
            with pytest.raises(InvalidOptionError):
                self.t.compact("custom", segments=[])
            return
        chosen = data.draw(
            st.lists(st.sampled_from(eligible), min_size=1, max_size=4, unique_by=lambda s: s.id)
        )
        first = self.t.version + 1
        result = self.t.compact("custom", segments=[s.id for s in chosen])
        inputs = sorted(chosen, key=lambda s: s.order)
        assert list(result.segments_compacted) == [s.id for s in inputs]
        created = self._apply_round([(inputs, max(s.level for s in inputs) + 1)])
        assert list(result.segments_created) == created
        self._check_outputs(result, first)

    @precondition(lambda self: any(s.status == "COMPACTED" for s in self.segs.values()))
    @rule()
    def clean(self) -> None:
        self.checked = 0  # every version is read again after this operation
        time.sleep(0.003)  # every status change is now older than "now" in milliseconds
        expected = {s.id for s in self.segs.values() if s.status == "COMPACTED" and not s.cleaned}
        result = self.t.clean(0, force=True)
        assert {f.split("/")[1] for f in result.files} == expected
        assert result.log_files == ()
        if expected:
            for sid in expected:
                self.segs[sid].cleaned = True
            self._committed()
            assert result.version == self.t.version
        else:
            assert result.version is None

    # --- invariants -------------------------------------------------------------------------

    @invariant()
    def segments_match_the_model(self) -> None:
        if self.table is None:
            return
        assert self.t.refresh().version == len(self.rows_at) - 1, "versions out of step"
        got = [(s.id, s.status, s.level, s.rows, s.merged_into) for s in self.t.segments()]
        # Once clean deleted a segment's files, the state forgets the segment.
        want = [
            (s.id, s.status, s.level, s.rows, s.merged_into)
            for s in self.segs.values()
            if not s.cleaned
        ]
        assert got == want

    @invariant()
    def every_version_reads_what_it_held(self) -> None:
        """Time travel to every version: the same rows as when it was committed, or, once
        clean removed files it needs, a DataUnavailableError naming the missing file."""
        if self.table is None:
            return
        cleaned = {s.id for s in self.segs.values() if s.cleaned}
        for v, (count, live) in enumerate(zip(self.rows_at, self.live_at, strict=True)):
            if v < self.checked:
                continue
            assert self.t.count_rows(version=v) == count
            if live & cleaned:
                with pytest.raises(DataUnavailableError, match="is gone from storage"):
                    self.t.to_arrow(version=v)
                continue
            problem = rows_differ(self.t.to_arrow(version=v), range(count))
            assert problem is None, f"version {v}: {problem}"
        self.checked = len(self.rows_at)


TestLifecycle = Lifecycle.TestCase
TestLifecycle.settings = settings(
    max_examples=10,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class LifecycleWithUncertainWrites(Lifecycle):
    """The same lifecycle while, at random, a version write lands but its caller hears of a
    failure ("exists", as a client retry of a landed conditional PUT reports it; or an error
    after landing), or fails before landing. Every commit must recognise its own version or
    write it again, so the model's predictions hold unchanged: no row lost, none twice, no
    compaction output deleted."""

    def __init__(self) -> None:
        super().__init__()
        self.armed: str | None = None
        self._restore: tuple[object, object] | None = None

    def _install(self) -> None:
        storage = self.t.storage
        real = storage.put_if_absent

        def put_if_absent(path: str, data: bytes) -> bool:
            name = path.rsplit("/", 1)[-1]
            fault, self.armed = self.armed, None
            if fault is None or "/_carbonlite/log/" not in path or "checkpoint" in name:
                self.armed = fault  # not a version write: keep it armed
                return real(path, data)
            event(f"uncertain write: {fault}")
            if fault == "fails before landing":
                raise OSError("connection refused")
            assert real(path, data)
            if fault == "lands, reports exists":
                return False
            raise OSError("connection reset after the request was sent")

        storage.put_if_absent = put_if_absent  # type: ignore[method-assign]
        self._restore = (storage, real)

    @precondition(lambda self: self.table is not None)
    @rule(
        fault=st.sampled_from(
            ["lands, reports exists", "lands, then raises", "fails before landing"]
        )
    )
    def arm(self, fault: str) -> None:
        """The next version write of any operation meets ``fault``."""
        if self._restore is None:
            self._install()
        self.armed = fault

    def teardown(self) -> None:
        if self._restore is not None:
            storage, real = self._restore
            storage.put_if_absent = real  # type: ignore[attr-defined]
        super().teardown()


TestLifecycleWithUncertainWrites = LifecycleWithUncertainWrites.TestCase
TestLifecycleWithUncertainWrites.settings = settings(TestLifecycle.settings, max_examples=8)
