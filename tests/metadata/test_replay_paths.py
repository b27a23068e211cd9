"""Every way of reaching a version gives the same state: replay from version 0, from any
checkpoint (its manifests), and the incremental state a writer keeps, checked after each step
of random sequences of appends, overwrites, added columns, handoffs, compactions and cleans,
against a plain pyarrow model of the rows."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import carbonlite as cl
from carbonlite.metadata import Snapshot, manifest_plan
from carbonlite.metadata.checkpoint_policy import checkpoint_due
from tests.metadata.strategies import snapshot_state

SCHEMA = pa.schema([("id", pa.int64()), ("key", pa.string())])


def replay_from_zero(t: cl.Table, version: int) -> Snapshot:
    snapshot = Snapshot.from_actions(t.path, 0, t.log.read_actions(0, None))
    for v in range(1, version + 1):
        snapshot = snapshot.apply(v, t.log.read_actions(v, snapshot))
    return snapshot


def due_versions(t: cl.Table, version: int) -> list[int]:
    """The versions up to ``version`` the checkpoint policy makes due, replayed from 0."""
    snapshot = Snapshot.from_actions(t.path, 0, t.log.read_actions(0, None))
    due = []
    for v in range(1, version + 1):
        snapshot = snapshot.apply(v, t.log.read_actions(v, snapshot))
        if checkpoint_due(snapshot):
            due.append(v)
    return due


def plan_of(snapshot: Snapshot, filter: pc.Expression | None = None) -> list[tuple]:
    from carbonlite.reader.expression import parse_filter
    from carbonlite.reader.planner import plan_scan

    parsed = parse_filter(filter, snapshot.schema, where="t") if filter is not None else None
    plan = plan_scan(snapshot, columns=None, filter=parsed)
    return [
        (
            s.segment_id,
            s.file,
            s.committed_length,
            [(b.offset, b.length, b.num_rows) for b in s.blocklets],
        )
        for s in plan.splits
    ]


class ReplayPaths(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="replay-paths-"))
        self.next_id = 0
        self.rows: list[dict] = []
        self.extra: list[str] = []

    @initialize(
        interval=st.integers(2, 6),
        blocklet_rows=st.sampled_from([3, 7, 50]),
        fanin=st.sampled_from([2, 3, manifest_plan.MERGE_FANIN]),
    )
    def create(self, interval: int, blocklet_rows: int, fanin: int) -> None:
        # small fan-ins make manifests merge (and drop entries of cleaned files) within a run
        self.fanin, manifest_plan.MERGE_FANIN = manifest_plan.MERGE_FANIN, fanin
        self.table = cl.create_table(
            self.dir / "t",
            SCHEMA,
            sort_columns=["id"],
            properties={
                "checkpoint_interval": str(interval),
                "blocklet_max_rows": str(blocklet_rows),
                "handoff_blocklet_rows": str(blocklet_rows * 2),
                "streaming_segment_max_bytes": "3KB",
                "compaction_level_threshold": "2,2",
            },
        )

    def teardown(self) -> None:
        if hasattr(self, "fanin"):
            manifest_plan.MERGE_FANIN = self.fanin
        shutil.rmtree(self.dir, ignore_errors=True)

    def _batch(self, n: int) -> pa.Table:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        columns = {"id": pa.array(ids, pa.int64()), "key": [f"k{i % 7}" for i in ids]}
        for name in self.extra:
            columns[name] = pa.array([i * 2 for i in ids], pa.int64())
        rows = [{"id": i, "key": f"k{i % 7}", **{c: i * 2 for c in self.extra}} for i in ids]
        return pa.table(columns), rows

    @rule(n=st.integers(1, 40))
    def append(self, n: int) -> None:
        data, rows = self._batch(n)
        self.table.append(data)
        self.rows += rows

    @rule(n=st.integers(0, 30))
    def overwrite(self, n: int) -> None:
        data, rows = self._batch(n)
        self.table.overwrite(data)
        self.rows = rows

    @rule()
    def add_column(self) -> None:
        name = f"c{len(self.extra)}"
        self.table.add_columns(pa.field(name, pa.int64()))
        self.extra.append(name)
        for r in self.rows:
            r[name] = None

    @rule()
    def finish_and_handoff(self) -> None:
        self.table.finish_streaming()
        self.table.handoff()

    @rule()
    def compact(self) -> None:
        self.table.compact("minor")

    @rule()
    def clean(self) -> None:
        time.sleep(0.002)
        self.table.clean(0, force=True)

    @invariant()
    def every_path_agrees(self) -> None:
        t = self.table
        latest = t.snapshot()
        want = snapshot_state(latest)
        opened = cl.open_table(t.path)
        assert snapshot_state(opened.snapshot()) == want
        assert snapshot_state(replay_from_zero(t, latest.version)) == want
        interval = int(t.properties["checkpoint_interval"])
        checkpoints = t.log.listing().checkpoints
        # every checkpoint was written (a failure would only be logged): at the multiples of
        # the interval, and wherever the entries since the last one made one due
        due = due_versions(t, latest.version)
        assert set(range(interval, latest.version + 1, interval)) <= set(due)
        assert checkpoints == due
        # without crashes, every manifest written is listed by some checkpoint (none is written
        # only to be merged away in the same checkpoint)
        listed = set()
        for c in checkpoints:
            listed |= {r.name for r in t.log.read_checkpoint(c).manifests.refs}
        manifests = self.dir / "t" / "_carbonlite" / "manifests"
        on_disk = {p.name for p in manifests.iterdir()} if manifests.exists() else set()
        assert on_disk <= listed, on_disk - listed
        for c in checkpoints:
            from_checkpoint = t.log.update(t.log.read_checkpoint(c))
            assert snapshot_state(from_checkpoint) == want, f"from checkpoint {c}"
            if c < latest.version:  # time travel through that checkpoint
                assert snapshot_state(t.snapshot(c)) == snapshot_state(replay_from_zero(t, c))
        middle = pc.field("id") >= self.next_id // 2
        for plan_filter in (None, middle):
            assert plan_of(opened.snapshot(), plan_filter) == plan_of(latest, plan_filter)
        # the rows are the model's
        got = opened.to_arrow().sort_by("id").to_pylist()
        assert got == sorted(self.rows, key=lambda r: r["id"])
        some = opened.to_arrow(filter=middle).sort_by("id").to_pylist()
        assert some == [
            r for r in sorted(self.rows, key=lambda r: r["id"]) if r["id"] >= self.next_id // 2
        ]
        # manifests stay few: merged level by level
        if opened.snapshot().manifests is not None:
            levels: dict[int, int] = {}
            for ref in opened.snapshot().manifests.refs:
                levels[ref.level] = levels.get(ref.level, 0) + 1
            assert all(n < manifest_plan.MERGE_FANIN for n in levels.values()), levels


TestReplayPaths = ReplayPaths.TestCase
TestReplayPaths.settings = settings(
    max_examples=3,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.slow
class TestReplayPathsMore(ReplayPaths.TestCase):  # type: ignore[misc,valid-type]
    """The same machine, many more runs (the slow tier)."""

    settings = settings(
        max_examples=20,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
