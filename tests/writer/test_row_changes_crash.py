"""Guarantee 1 for row-level changes, against real SIGKILLs: a process killed during a delete
(or update), during a merge, or during the handoff or compaction that applies deletion
vectors leaves the table exactly as of some committed version.

Workers are processes forked from a fork server (``tests/support/row_change_worker.py``)
that run a list of random operations the test made (``tests/support/row_ops.py``), saying
which versions each one committed. The test kills each worker at a random moment, or right
as a chosen phase begins (deletion vectors written, a compaction output file created, a log
version about to be put, or just put: the worker waits there for the kill, so it lands in
that window however busy the machine is), then checks, from this process:

- the operations that committed are exactly those reported, plus perhaps the one in flight
  (then the newest version is that operation's, by the table's history), and every version
  holds exactly the model's rows of that version (time travel): nothing lost, no deleted row
  back, no row twice;
- ``verify()`` finds no problem;
- after ``recover(min_age=0)`` the rows are the same, and every file under ``segments/`` is
  one the log references, at its committed length (the dead worker's deletion vectors,
  stream-file tail and compaction outputs are gone). Some trials skip ``recover``: the next
  worker, with the same writer id, must cope with the debris itself.

``CARBONLITE_CRASH_SEED=<n>`` replays the random decisions of a failed run (the timing of a
kill on a busy machine still varies).
"""

from __future__ import annotations

import collections
import json
import os
import random
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from carbonlite import create_table, open_table
from carbonlite.writer.append import owner_lock_paths
from carbonlite.writer.lease import read_leases
from tests.support.places import expire_leases
from tests.support.row_change_worker import RowChangeRun, RowChangeServer
from tests.support.row_model import SCHEMA, diff, rows_of
from tests.support.row_ops import OpMaker, apply_op, counts_of, run_op

WRITER = "row-crash"  # every restarted worker reuses it (and so its stream file)
SIGKILLED = -9
PROPERTIES = {
    "blocklet_max_rows": "4",  # deletions span blocklets, and delete whole ones
    "handoff_blocklet_rows": "16",
    "streaming_segment_max_bytes": "6KB",  # segments roll over under the workers
    "checkpoint_interval": "4",
    "compaction_level_threshold": "2,2",
    "major_compaction_size": "1MB",
}
INITIAL_ROWS = 160


@pytest.fixture(scope="module")
def server() -> Iterator[RowChangeServer]:
    s = RowChangeServer()
    yield s
    s.close()


def seed_of() -> int:
    return int(os.environ.get("CARBONLITE_CRASH_SEED", random.randrange(2**31)))


# --- what each kind of worker does -------------------------------------------------------------


def delete_ops(maker: OpMaker, n: int) -> list[dict[str, Any]]:
    """Deletes, with an update now and then, and appends so the table does not run dry."""
    ops = []
    for _ in range(n):
        p = maker.rng.random()
        ops.append(maker.append() if p < 0.12 else maker.update() if p < 0.3 else maker.delete())
    return ops


def merge_ops(maker: OpMaker, n: int) -> list[dict[str, Any]]:
    """Merges of every kind (rarely deleting what the source lacks: that empties the table)."""
    return [maker.merge(by_source_delete=0.03) for _ in range(n)]


def maintain_ops(maker: OpMaker, n: int) -> list[dict[str, Any]]:
    """Ingestion with deletes, and the handoffs and compactions that apply the deletion
    vectors: streaming segments with deleted rows are finished and handed off, columnar ones
    with deleted rows compacted."""
    cycle = [
        lambda: maker.append(16),
        maker.delete,
        lambda: {"op": "finish_streaming"},
        maker.delete,
        lambda: {"op": "handoff"},
        maker.update,
        maker.delete,
        lambda: {"op": "compact", "kind": "minor"},
        lambda: maker.append(16),
        maker.delete,
        lambda: {"op": "compact", "kind": maker.rng.choice(["minor", "major"])},
    ]
    start = maker.rng.randrange(len(cycle))
    return [cycle[(start + i) % len(cycle)]() for i in range(n)]


HELD_PER_PHASE = 3
"""Kills held at each phase before a held worker may also be let go a moment past it."""
MODES = {
    # ops maker, the operations a phase-targeted kill aims at, and the phases it aims at
    "delete": (delete_ops, {"delete", "update"}, {"dv", "committing", "committed"}),
    "merge": (merge_ops, {"merge"}, {"dv", "committing", "committed"}),
    "maintain": (maintain_ops, {"handoff", "compact"}, {"writing", "committing", "committed"}),
}


# --- the model of one table --------------------------------------------------------------------


class Chain:
    """One table, the model of its rows at every version, and the checks after each kill."""

    def __init__(self, path: str, seed: int) -> None:
        self.path = path
        self.maker = OpMaker(seed)
        self.versions: list[pa.Table] = [SCHEMA.empty_table()]
        self.checked = 0
        """Versions below this were read and found right already."""
        table = create_table(path, SCHEMA, properties=PROPERTIES)
        for _ in range(4):
            op = self.maker.append(INITIAL_ROWS // 4)
            self.reported(op, run_op(table, op), "initial data")
        op = {"op": "finish_streaming"}  # a finished streaming segment with rows to delete
        self.reported(op, run_op(table, op), "initial data")

    @property
    def latest(self) -> int:
        return len(self.versions) - 1

    def reported(self, op: dict[str, Any], result: dict[str, Any], context: str) -> None:
        """A worker said ``op`` returned ``result``: it must be what the model predicts."""
        versions = result["versions"]
        change = apply_op(self.versions[-1], op)
        if change is None:
            assert versions == list(range(self.latest + 1, self.latest + 1 + len(versions))), (
                f"{context}: {op['op']} reported versions {versions} after {self.latest}"
            )
            self.versions += [self.versions[-1]] * len(versions)
            return
        if not change.commits:
            assert versions == [], f"{context}: {op} changed nothing yet committed {versions}"
            return
        assert versions == [self.latest + 1], f"{context}: {op} committed {versions}"
        assert result["counts"] == counts_of(change, op), f"{context}: {op}: {result}"
        self.versions.append(change.table)

    def after_kill(self, run: RowChangeRun, ops: list[dict[str, Any]], context: str) -> str:
        """Account for what the killed worker did; returns where the kill landed."""
        for i, result in run.done:
            self.reported(ops[i], result, f"{context}, op {i}")
        table = open_table(self.path)
        records = {r.version: r for r in table.history(limit=max(1, table.version - self.latest))}
        new = list(range(self.latest + 1, table.version + 1))
        flight = run.in_flight
        if flight is None:
            assert not new, f"{context}: versions {new} nobody reported"
            return "between operations" if not run.finished else "after the last operation"
        op = ops[flight]
        phases = {p for i, p in run.phases if i == flight}
        change = apply_op(self.versions[-1], op)
        for v in new:
            assert records[v].data_change == (change is not None), (
                f"{context}: version {v} ({records[v].operation}) while op {flight} {op} ran"
            )
        if change is None:  # a compaction may have committed some of its rounds
            self.versions += [self.versions[-1]] * len(new)
            if new:
                return f"{op['op']}: {len(new)} versions committed, unreported"
            return f"{op['op']}: nothing committed, phases {sorted(phases)}"
        assert len(new) <= 1, f"{context}: {op} in flight, yet versions {new} appeared"
        if new:
            assert change.commits, f"{context}: {op} changes nothing, yet version {new} appeared"
            assert records[new[0]].operation == op["op"].upper(), records[new[0]]
            self.versions.append(change.table)
            return f"{op['op']}: committed, unreported"
        if "committing" in phases:
            return f"{op['op']}: at the log put, not committed"
        if "dv" in phases:
            return f"{op['op']}: deletion vectors written, not committed"
        if "writing" in phases:
            return f"{op['op']}: writing, not committed"
        return f"{op['op']}: early, nothing written"

    def check(self, context: str, *, every_version: bool = False) -> None:
        """The table holds the model's rows at every version not checked yet (every one when
        ``every_version``), and ``verify`` finds nothing wrong."""
        table = open_table(self.path)
        assert table.version == self.latest, f"{context}: version {table.version}"
        assert table.count_rows() == self.versions[-1].num_rows, context
        for v in range(0 if every_version else self.checked, self.latest + 1):
            problem = diff(rows_of(table.to_arrow(version=v)), rows_of(self.versions[v]))
            assert problem is None, f"{context}: version {v} of {self.latest}: {problem}"
            assert table.count_rows(version=v) == self.versions[v].num_rows, f"{context}: {v}"
        self.checked = self.latest + 1
        result = table.verify()
        assert result.ok, f"{context}: verify found {result.problems}"

    def debris(self) -> list[str]:
        """Files under segments/ the latest version does not reference at that length."""
        snap = open_table(self.path).snapshot()
        want: dict[str, int | None] = {}
        for seg in snap.segments.values():
            for f in seg.files.values():
                want[f.path] = f.committed_length
                want.update(dict.fromkeys(f.dv_files))  # any length: written whole
        out = []
        for dirpath, _, names in os.walk(os.path.join(self.path, "segments")):
            for name in names:
                rel = os.path.relpath(os.path.join(dirpath, name), self.path)
                size = os.path.getsize(os.path.join(dirpath, name))
                if rel not in want:
                    out.append(f"{rel} (unreferenced, {size} bytes)")
                elif want[rel] is not None and size != want[rel]:
                    out.append(f"{rel} ({size} bytes, committed {want[rel]})")
        return sorted(out)

    def recover(self, context: str) -> int:
        """``recover(min_age=0)`` (again once the dead compaction's lease expired, if one
        protects its outputs): same rows, and no debris left. Returns the debris count."""
        before = self.debris()
        table = open_table(self.path)
        skipped = table.recover(min_age=0).skipped_recent
        if skipped:  # outputs of a killed compaction: its lease protects them until it expires
            leases, _ = read_leases(table.storage, table.root)
            unleased = [f for f in skipped if not any(lease.covers(f) for lease in leases)]
            assert not unleased, f"{context}: recover skipped {unleased}"
            expire_leases(table)
            skipped = table.recover(min_age=0).skipped_recent
            assert skipped == (), (
                f"{context}: recover skipped {skipped} past the lease term: "
                f"{why_skipped(table, skipped)}"
            )
        left = self.debris()
        assert not left, f"{context}: recover left {left} (debris before: {before})"
        self.check(f"{context}, after recover")
        return len(before)


def why_skipped(table: Any, files: tuple[str, ...]) -> dict[str, str]:
    """What may have kept ``recover`` from each file: its age, leases, owner locks."""
    leases, _ = read_leases(table.storage, table.root)
    now = time.time()
    out = {}
    for rel in files:
        path = table.storage.join(table.root, rel)
        age = now - os.path.getmtime(path) if os.path.exists(path) else None
        covering = [(x.lease_id, x.expires_ms - now * 1000) for x in leases if x.covers(rel)]
        locks = owner_lock_paths(table.storage, table.root, rel)
        held = [p for p in locks if table.storage.is_locked(p)]
        out[rel] = f"age {age}, leases (id, ms left) {covering}, held locks {held} of {locks}"
    return out


def run_trials(server: RowChangeServer, base: str, mode: str, seed: int, trials: int) -> dict:
    """``trials`` kills of ``mode`` workers, one table per ten trials."""
    rng = random.Random(seed)
    make_ops, target_ops, target_phases = MODES[mode]
    where: collections.Counter = collections.Counter()
    held: collections.Counter = collections.Counter()
    chain: Chain | None = None
    for trial in range(trials):
        if trial % 10 == 0:
            if chain is not None:
                chain.recover(f"seed {seed}, end of table")
            chain = Chain(os.path.join(base, f"{mode}-{trial}"), seed + trial)
        assert chain is not None
        context = f"CARBONLITE_CRASH_SEED={seed}, {mode} trial {trial}, table {chain.path}"
        ops = make_ops(chain.maker, 24)
        spec: dict[str, Any] = {"table": chain.path, "writer_id": WRITER, "ops": ops}
        skip = rng.choice([0, 0, 1, 2, 4])
        if rng.random() < 0.5:  # at a phase: the worker waits there until killed (or let go)
            targets = {i for i, op in enumerate(ops) if op["op"] in target_ops and i >= skip}
            # the phase held fewest times so far: every phase gets its kills, whatever the
            # seed's operations and however fast the machine (a merge that matches nothing
            # never reaches "dv", so a random pick could leave it out)
            phase = min(sorted(target_phases), key=lambda p: held[p])
            run = server.start(spec | {"hold": {"phases": [phase], "ops": sorted(targets)}})
            if run.wait_phase({phase}, targets):
                if held[phase] >= HELD_PER_PHASE and rng.random() < 0.5:
                    run.go()  # a moment past the phase instead
                    time.sleep(rng.uniform(0, 0.003))
                else:
                    held[phase] += 1
        else:
            run = server.start(spec)
            run.wait_done(skip)
            time.sleep(rng.uniform(0, 0.02))
        run.kill()
        assert run.exit_code in (SIGKILLED, 0), f"{context}: exit code {run.exit_code}"
        context += f", done {[i for i, _ in run.done]}, in flight {run.in_flight}"
        where[chain.after_kill(run, ops, context)] += 1
        chain.check(context)
        if rng.random() < 0.5 and chain.recover(context):
            where["recover removed debris"] += 1
    assert chain is not None
    chain.check(f"seed {seed}, {mode}, last table", every_version=True)
    chain.recover(f"seed {seed}, {mode}, last table")
    return where


def report(where: collections.Counter, seed: int) -> str:
    summary = json.dumps(dict(where.most_common()), indent=1)
    print(f"CARBONLITE_CRASH_SEED={seed}; where the kills landed: {summary}")
    return summary


@pytest.mark.parametrize("mode", sorted(MODES))
def test_kill_during_row_changes(server: RowChangeServer, tmp_path, mode: str) -> None:
    """(a) delete/update, (b) merge, (c) handoff and compaction applying deletion vectors:
    a few workers killed at random moments or at chosen phases."""
    seed = seed_of()
    report(run_trials(server, str(tmp_path), mode, seed, 6), seed)


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_many_kills_during_row_changes(server: RowChangeServer, tmp_path, mode: str) -> None:
    """The same, 40 kills per mode; the kills must land in the interesting windows."""
    seed = seed_of()
    where = run_trials(server, str(tmp_path), mode, seed, 40)
    summary = report(where, seed)
    committed = sum(n for k, n in where.items() if k.endswith("unreported"))
    assert committed >= 1, summary
    if mode == "maintain":
        assert sum(n for k, n in where.items() if k.startswith(("handoff", "compact"))) >= 5
        assert sum(n for k, n in where.items() if "'writing'" in k) >= 2, summary
    else:
        assert sum(n for k, n in where.items() if "deletion vectors written" in k) >= 2, summary
    assert where["recover removed debris"] >= 3, summary
