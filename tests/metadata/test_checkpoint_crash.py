"""SIGKILL a writer at random moments while it commits, checkpoints, writes manifests and
merges them: after every kill the table opens to exactly some committed version, every replay
path agrees, and the next writer goes on. A killed checkpoint leaves at most manifests no
checkpoint lists, which ``clean`` removes once they are old enough."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.metadata import Snapshot
from tests.metadata.strategies import snapshot_state

pytestmark = pytest.mark.slow

TRIALS = 10
SCHEMA = pa.schema([("id", pa.int64()), ("key", pa.string())])
REPO = Path(__file__).resolve().parents[2]

WRITER = """
import itertools, os, sys
import pyarrow as pa
import carbonlite as cl
from carbonlite import seams
from carbonlite.metadata import manifest_plan

manifest_plan.MERGE_FANIN = 2  # merge at almost every checkpoint
seam, nth = sys.argv[2], int(sys.argv[3])
count = itertools.count(1)


def hold(name):  # the nth time the writer reaches the seam: say so, and wait for the kill
    if name == seam and next(count) == nth:
        os.write(1, b"held\\n")
        sys.stdin.readline()
        os._exit(3)


t = cl.open_table(sys.argv[1])
n = t.count_rows()
with seams.listening(hold):
    while True:
        ids = list(range(n, n + 400))
        t.append(pa.table({"id": pa.array(ids, pa.int64()), "key": [str(i % 13) for i in ids]}))
        n += 400
"""
PHASES = (
    "append.after_data",
    "commit.after_put",
    "commit.before_checkpoint",
    "checkpoint.after_manifests",
    "checkpoint.after_document",
)
"""Where a writer is held and killed: every step of a commit and of its checkpoint."""


def replay_from_zero(t: cl.Table) -> Snapshot:
    snapshot = Snapshot.from_actions(t.path, 0, t.log.read_actions(0, None))
    for v in range(1, t.version + 1):
        snapshot = snapshot.apply(v, t.log.read_actions(v, snapshot))
    return snapshot


def test_sigkill_while_writing_and_merging_manifests(tmp_path: Path) -> None:
    path = tmp_path / "t"
    cl.create_table(
        path,
        SCHEMA,
        properties={"checkpoint_interval": "2", "blocklet_max_rows": "4"},  # 100 per commit
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random(7)
    seen_versions = set()
    for _trial in range(TRIALS):
        seam, nth = rng.choice(PHASES), rng.randint(2, 5)
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), seam, str(nth)],
            stdout=subprocess.PIPE,
            stdin=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"held", f"{seam} {nth}"
        child.send_signal(signal.SIGKILL)
        child.wait()
        t = cl.open_table(path)
        seen_versions.add(t.version)
        ids = t.to_arrow(columns=["id"]).column("id").to_pylist()
        assert sorted(ids) == list(range(len(ids))) and len(ids) == 400 * t.version
        assert snapshot_state(t.snapshot()) == snapshot_state(replay_from_zero(t))
        # a checkpoint the kill interrupted was either completed or is missing: never half
        for c in t.log.listing().checkpoints:
            from_checkpoint = t.log.update(t.log.read_checkpoint(c))
            assert snapshot_state(from_checkpoint) == snapshot_state(t.snapshot())
        assert t.verify().ok
    assert len(seen_versions) == TRIALS  # each trial committed, and was killed in a phase
    t = cl.open_table(path)
    manifests = path / "_carbonlite" / "manifests"
    listed = {r.name for r in t.snapshot().manifests.refs}
    for c in t.log.listing().checkpoints:
        listed |= {r.name for r in t.log.read_checkpoint(c).manifests.refs}
    orphans = {p.name for p in manifests.iterdir()} - listed
    old = time.time() - 3600
    for name in orphans:  # as if an hour had passed since the kills
        os.utime(manifests / name, (old, old))
    t.clean(0, force=True)
    assert {p.name for p in manifests.iterdir()} == listed
    assert sorted(t.to_arrow(columns=["id"]).column("id").to_pylist()) == list(
        range(400 * t.version)
    )
