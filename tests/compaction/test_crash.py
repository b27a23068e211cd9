"""SIGKILL a handoff or minor compaction at random moments: while it reads its inputs, while it
writes its outputs, and while it commits. After every kill the table reads exactly the same
rows at its latest version and verifies clean; running the same operation again completes;
and ``recover(min_age=0)`` removes what the killed run left behind without touching a single
byte any version references.

Each trial starts from a fresh copy of a prepared table, so the trials are independent.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from tests.compaction.lifecycle import SCHEMA, canonical, data_files, file_digests, make_rows
from tests.support.compaction_worker import CompactionRun, CompactionServer
from tests.support.places import expire_leases

pytestmark = pytest.mark.slow

SEGMENTS = 4
ROWS = 320_000  # enough for a run of about 0.4 s: reading, writing and committing all show
STREAMING_ROWS = 1_000  # a STREAMING segment no compaction may touch
TRIALS = 24
PHASES = ("reading", "writing", "committing")
OUTPUTS = {"handoff": ("0.0", "1.0", "2.0", "3.0"), "minor": ("0.1",)}


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``handoff``: four STREAMING_FINISH segments (plus a STREAMING one); ``minor``: the
    same table after the handoff (four level-0 SUCCESS segments)."""
    root = tmp_path_factory.mktemp("crash-templates")
    path = root / "handoff"
    t = cl.create_table(
        path,
        SCHEMA,
        sort_columns=["ts"],
        properties={"blocklet_max_rows": "4096", "handoff_blocklet_rows": "16384"},
    )
    per = ROWS // SEGMENTS
    for s in range(SEGMENTS):
        for a in range(8):
            first = s * per + a * (per // 8)
            t.append(make_rows(range(first, first + per // 8)))
        t.finish_streaming()
    t.append(make_rows(range(ROWS, ROWS + STREAMING_ROWS)))
    shutil.copytree(path, root / "minor")
    assert cl.open_table(root / "minor").handoff().segments_created == OUTPUTS["handoff"]
    return {"handoff": path, "minor": root / "minor"}


@pytest.fixture(scope="module")
def expected() -> pa.Table:
    return canonical(make_rows(range(ROWS + STREAMING_ROWS)))


@pytest.fixture(scope="module")
def server() -> Iterator[CompactionServer]:
    s = CompactionServer()
    yield s
    s.close()


def referenced(t: cl.Table) -> dict[str, int]:
    return {
        rel: f.committed_length
        for seg in t.refresh().snapshot().segments.values()
        for rel, f in seg.files.items()
    }


def committed_bytes(path: Path, files: dict[str, int]) -> dict[str, bytes]:
    out = {}
    for rel, length in files.items():
        with open(path / rel, "rb") as f:
            out[rel] = f.read(length)
    return out


def log_temps(path: Path) -> set[str]:
    log = path / "_carbonlite" / "log"
    return {f"_carbonlite/log/{n}" for n in os.listdir(log) if n.startswith(".tmp-")}


def segment_states(t: cl.Table) -> list[tuple[str, str, str | None]]:
    return [(s.id, s.status, s.merged_into) for s in t.segments()]


class Trial:
    def __init__(self, server: CompactionServer, template: Path, kind: str, where: Path) -> None:
        shutil.copytree(template, where)
        self.path = where
        self.kind = kind
        before = cl.open_table(where)
        self.version = before.version
        self.segments = segment_states(before)
        self.files = file_digests(str(where), data_files(str(where)))
        self.run: CompactionRun = server.start({"table": str(where), "kind": kind})

    def kill_after(self, seconds: float) -> None:
        left = self.run.started + seconds - time.monotonic()
        if left > 0:
            time.sleep(left)
        self.run.kill()

    def kill_on_commit(self, seconds: float) -> None:
        if self.run.wait_for_phase("committing") and seconds:
            time.sleep(seconds)
        self.run.kill()


def check_after_kill(trial: Trial, expected: pa.Table) -> str:
    """The table as of a committed version, same rows; returns where the kill landed."""
    run, path = trial.run, trial.path
    assert run.exit_code in (-9, 0), run.exit_code
    t = cl.open_table(path)
    committed = t.version > trial.version
    if committed:
        assert t.version == trial.version + 1
        assert run.phases and run.phases[-1][0].startswith(("committing", "committed 1")), (
            run.phases
        )
        assert set(OUTPUTS[trial.kind]) <= {s.id for s in t.segments()}
    else:
        assert segment_states(t) == trial.segments, "an uncommitted run changed segments"
    assert canonical(t.to_arrow()).equals(expected), f"rows changed ({run.phases})"
    assert canonical(t.to_arrow(version=trial.version)).equals(expected)
    result = t.verify()
    assert result.ok, result.problems
    # Files that were there before the run are unchanged, byte for byte.
    now = file_digests(str(path), trial.files)
    assert now == trial.files, "a killed compaction changed an existing file"
    return run.last_phase if run.exit_code == -9 else "finished"


def rerun_and_recover(trial: Trial, expected: pa.Table) -> None:
    path = trial.path
    t = cl.open_table(path)
    was_committed = t.version > trial.version
    orphans = (data_files(str(path)) - set(referenced(t))) | log_temps(path)
    if not was_committed and trial.run.last_phase == "committing":
        assert orphans, "a run killed while committing leaves its outputs behind"
    result = t.compact(trial.kind)  # type: ignore[arg-type]
    if was_committed:
        assert result.versions == ()
    else:
        assert result.segments_created == OUTPUTS[trial.kind]
        assert len(result.versions) == 1
    assert canonical(t.to_arrow()).equals(expected)
    assert t.verify().ok
    live = referenced(t)
    keep = committed_bytes(path, live)
    # Log temp files younger than a minute are never touched (a commit may be linking them):
    # age the killed run's ones as if the operator ran recover a while after the crash.
    old = time.time() - 120
    for rel in log_temps(path):
        os.utime(path / rel, (old, old))
    if not was_committed and trial.run.exit_code == -9:
        # The killed run's lease protects its outputs for a whole term, then expires.
        leased = set(t.recover(min_age=0, dry_run=True).skipped_recent)
        assert orphans - log_temps(path) <= leased
        assert expire_leases(t) <= 1
    recovered = t.recover(min_age=0)
    assert set(recovered.orphans) == orphans
    assert recovered.truncated == (), "a compaction never leaves debris in referenced files"
    assert not (data_files(str(path)) | log_temps(path)) & orphans, "orphans survived recover"
    assert set(live) <= data_files(str(path))
    assert committed_bytes(path, live) == keep, "recover changed referenced bytes"
    assert canonical(t.to_arrow()).equals(expected)
    assert canonical(t.to_arrow(version=trial.version)).equals(expected)
    assert t.verify().ok


def test_sigkill_during_handoff_and_minor_compaction(
    templates: dict[str, Path], expected: pa.Table, server: CompactionServer, tmp_path: Path
) -> None:
    rng = random.Random(20261122)
    # One undisturbed run of each, to learn when its phases begin on this machine.
    timing: dict[str, dict[str, float]] = {}
    for kind in ("handoff", "minor"):
        trial = Trial(server, templates[kind], kind, tmp_path / f"calibrate-{kind}")
        assert trial.run.wait() == 0 and trial.run.done is not None
        timing[kind] = {p.split()[0]: at for p, at in trial.run.phases}
        timing[kind]["end"] = time.monotonic() - trial.run.started

    landed: Counter[str] = Counter()
    plan = ["reading", "writing", "committing", "anywhere"] * (TRIALS // 4)
    n = 0
    while plan:
        target = plan.pop(0)
        kind = ("handoff", "minor")[n % 2]
        trial = Trial(server, templates[kind], kind, tmp_path / f"trial-{n}")
        n += 1
        at = timing[kind]
        if target == "reading":
            trial.kill_after(rng.uniform(at["reading"], at["writing"]))
        elif target == "writing":
            trial.kill_after(rng.uniform(at["writing"], at["committing"]))
        elif target == "committing":
            trial.kill_on_commit(rng.choice([0.0, 0.0, rng.uniform(0, 0.002)]))
        else:
            trial.kill_after(rng.uniform(0, at["end"] * 1.1))
        phase = check_after_kill(trial, expected)
        landed[phase.split()[0]] += 1
        rerun_and_recover(trial, expected)
        shutil.rmtree(trial.path)
        # Timing on a busy machine varies: retry a phase no kill has landed in yet.
        if not plan and n < 3 * TRIALS:
            plan = [p for p in PHASES if not landed[p]]
    assert n >= TRIALS
    missing = [p for p in PHASES if not landed[p]]
    assert not missing, f"no kill landed while {missing}: {dict(landed)}"
    print(f"{n} kills landed: {dict(landed)}")
