"""Guarantee 4 for row-level changes, with real processes at once on one table: a merger
upserting by ``merge(on=["id"])`` (and appending, and finishing its streaming segment now and
then), a deleter deleting by predicate, and a maintainer running handoff and compaction, all
in loops.

Each worker (``python -m tests.support.row_change_worker run``) runs a list of operations the
test made (``tests/support/row_ops.py``) and reports the versions each one committed. The test
then replays the committed data operations serially, in version order, on the pyarrow model
(``tests/support/row_model.py``): each must do on the model exactly what it reported (rows
deleted, updated, inserted), every version must read as the model at that version (so no
deleted row comes back and none is lost), and the final table must equal the model. Every
data-changing version in the history must be claimed by exactly one reported operation, no
key may appear twice, and the workers must really have raced (lost log writes, re-planned
changes).

Then deterministic races of two real processes held at gates in front of their log writes:
two changes planned on one version and committed one after the other, and a ``recover``
between a delete's deletion-vector write and its commit. These found four gaps, since
closed: a row-level change now conflicts with every row-level change committed after it read
(``RowsUnchangedSince``), and a lease covers its deletion-vector files until the commit,
which also checks that they are still there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from carbonlite import create_table, open_table
from tests.support import REPO
from tests.support.row_model import SCHEMA, diff, rows_of
from tests.support.row_ops import DATA_OPS, OpMaker, apply_op, counts_of, run_op

INITIAL = 300
PROPERTIES = {
    "blocklet_max_rows": "8",
    "handoff_blocklet_rows": "32",
    "streaming_segment_max_bytes": "16KB",
    "checkpoint_interval": "10",
    "compaction_level_threshold": "2,2",
    "major_compaction_size": "1MB",
}


def spawn(spec: dict[str, Any], spec_file: str) -> subprocess.Popen:
    with open(spec_file, "w") as f:
        json.dump(spec, f)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.row_change_worker", "run", f"@{spec_file}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 240) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err}"
    return json.loads(out)


def new_table(path: str, seed: int) -> tuple[pa.Table, int]:
    """A table of INITIAL rows, some in a handed-off columnar segment and some streaming."""
    table = create_table(path, SCHEMA, properties=PROPERTIES)
    maker = OpMaker(seed)
    rows = SCHEMA.empty_table()
    for n, op in enumerate([maker.append(INITIAL // 3) for _ in range(3)]):
        run_op(table, op)
        change = apply_op(rows, op)
        assert change is not None
        rows = change.table
        if n == 1:
            table.finish_streaming()
            table.handoff()
    return rows, table.refresh().version


def merger_ops(seed: int, n: int) -> list[dict[str, Any]]:
    """Upserts of keys from INITIAL up (new keys and ones it inserted before), appends of new
    keys, and merges that update, delete or leave rows of any key but insert nothing; a
    finish_streaming every ten operations, so the maintainer has segments to hand off.

    No operation inserts a key below INITIAL, where the deleter deletes: with CarbonLite's
    conflict rule a delete does not see a row inserted meanwhile (see
    ``test_row_changes_planned_on_one_version``), and this test checks everything else."""
    maker = OpMaker(seed, next_id=INITIAL)
    ops: list[dict[str, Any]] = []
    for i in range(n):
        if i % 10 == 9:
            ops.append({"op": "finish_streaming"})
        kind = maker.rng.random()
        if kind < 0.1:
            ops.append(maker.append())
        elif kind < 0.55:
            matched = maker.rng.choice(["update"] * 6 + ["delete", "ignore"])
            ops.append(maker.merge(low=INITIAL, when_matched=matched, when_not_matched="insert"))
        else:
            matched = maker.rng.choice(["update"] * 4 + ["delete", "ignore"])
            ops.append(maker.merge(when_matched=matched, when_not_matched="ignore", nulls=False))
    return ops


def deleter_ops(seed: int, n: int) -> list[dict[str, Any]]:
    """Deletes by predicates on the key (id ranges, lists of ids) below INITIAL: merges
    change rows there, but never their keys."""
    maker = OpMaker(seed, next_id=INITIAL)
    return [maker.delete(key_only=True) for _ in range(n)]


def maintainer_ops(n: int) -> list[dict[str, Any]]:
    cycle = [
        {"op": "handoff"},
        {"op": "compact", "kind": "minor"},
        {"op": "handoff"},
        {"op": "compact", "kind": "major"},
    ]
    return [cycle[i % len(cycle)] for i in range(n)]


def replay(
    path: str,
    initial: pa.Table,
    base: int,
    outs: dict[str, dict[str, Any]],
    ops: dict[str, list[dict[str, Any]]],
) -> None:
    """Check the reports against the history, then replay the data operations in version
    order on the model, checking each version and the final table."""
    table = open_table(path)
    history = {r.version: r for r in table.history()}
    claimed: dict[int, tuple[str, int, dict[str, Any], dict[str, Any]]] = {}
    for role, out in outs.items():
        for i, result in out["results"]:
            op = ops[role][i]
            if op["op"] not in DATA_OPS:
                continue
            for v in result["versions"]:
                assert v not in claimed, f"version {v} claimed by {role} {i} and {claimed[v][:2]}"
                claimed[v] = (role, i, op, result)
    data_versions = sorted(v for v, r in history.items() if v > base and r.data_change)
    assert sorted(claimed) == data_versions, (
        f"data versions in the history {data_versions}, reported {sorted(claimed)}"
    )
    model = initial
    for v in range(base + 1, table.version + 1):
        if v in claimed:
            role, i, op, result = claimed[v]
            assert history[v].operation == op["op"].upper(), (v, history[v], op)
            change = apply_op(model, op)
            assert change is not None and change.commits, f"version {v}: {op} changes nothing"
            assert result["counts"] == counts_of(change, op), (
                f"version {v} ({role} op {i}, {op}) reported {result['counts']}; replayed in "
                f"version order it does {counts_of(change, op)}"
            )
            model = change.table
        problem = diff(rows_of(table.to_arrow(version=v)), rows_of(model))
        assert problem is None, f"version {v} ({history[v].operation}): {problem}"
    final = table.to_arrow()
    assert diff(rows_of(final), rows_of(model)) is None
    assert table.count_rows() == model.num_rows
    ids = Counter(final.column("id").to_pylist())
    twice = {k: n for k, n in ids.items() if n > 1 and k is not None}
    assert not twice, f"keys held by more than one row: {twice}"
    result = table.verify()
    assert result.ok, result.problems


@pytest.mark.parametrize(
    "seed",  # 9-12 s each: the slow tier (the default tier keeps the file's other orders)
    [pytest.param(n, marks=pytest.mark.slow) for n in (1, 2, 3)],
)
def test_merge_delete_and_compaction_at_once(tmp_path, seed: int) -> None:
    """The three workers at once until the merger's 80-odd operations are done and the
    others committed ten deletes and three maintenance operations; then the replay. The deleter's predicates are on the key and below INITIAL, where no operation
    inserts a key: a delete does not conflict with a blind append's new rows (the
    write-serializable rule, as in Delta: such a delete commutes with the append), so with
    predicates on other columns a strict version-order replay could fail for that reason
    alone."""
    path = str(tmp_path / "t")
    initial, base = new_table(path, seed)
    stop = str(tmp_path / "stop")
    barrier = {"dir": str(tmp_path), "all": ["merger", "deleter", "maintainer"]}
    ops = {
        "merger": merger_ops(seed * 1000 + 1, 400),
        "deleter": deleter_ops(seed * 1000 + 2, 2000),
        "maintainer": maintainer_ops(2000),
    }
    # The merger runs 80 operations, and on until the others committed their share.
    quotas = {role: str(tmp_path / f"{role}.quota") for role in ("deleter", "maintainer")}
    specs = {
        "merger": {"writer_id": "merger", "done_file": stop, "min_ops": 80}
        | {"stop_file": list(quotas.values())},
        "deleter": {"writer_id": "deleter", "stop_file": stop, "pause": 0.01}
        | {"quota": {"commits": 10, "file": quotas["deleter"]}},
        "maintainer": {"writer_id": "maintainer", "stop_file": stop, "pause": 0.02}
        | {"quota": {"commits": 3, "file": quotas["maintainer"]}},
    }
    began = time.monotonic()
    procs = {
        role: spawn(
            {"table": path, "ops": ops[role], "barrier": barrier | {"me": role}} | specs[role],
            str(tmp_path / f"{role}.json"),
        )
        for role in specs
    }
    outs = {role: finish(p) for role, p in procs.items()}
    seconds = time.monotonic() - began
    # A change that lost its rows to other commits MAX_ROW_CHANGE_ATTEMPTS times in a row
    # gives up with RowsChangedError (a compaction round likewise): allowed, if it committed
    # nothing (replay checks that every data version is claimed by an operation that
    # returned) and if it stays rare.
    for role, out in outs.items():
        failed = [e for e in out["errors"] if not e[1].startswith("RowsChangedError")]
        assert not failed, f"{role}: operations failed: {failed}"
        assert len(out["errors"]) <= max(2, len(out["results"]) // 5), out["errors"]
    replay(path, initial, base, outs, ops)

    done = {role: (len(out["results"]), len(out["errors"])) for role, out in outs.items()}
    committed = {
        role: sum(1 for _, r in out["results"] if r["versions"]) for role, out in outs.items()
    }
    races = {
        k: sum(out[k] for out in outs.values())
        for k in ("lost_races", "replanned", "compaction_rounds_discarded")
    }
    print(f"seed {seed}: {seconds:.1f} s, operations {done}, committing {committed}, {races}")
    assert committed["deleter"] >= 10 and committed["maintainer"] >= 3, committed
    assert races["lost_races"] >= 1 and races["replanned"] >= 1, "the workers never raced"


# --- two changes planned on one version, committed one after the other -------------------------

DELETE_V_AT_LEAST_50 = {"op": "delete", "filter": {"dnf": [["v", ">=", 50]]}}
SET_V_OF_ID_1 = {
    "op": "update",
    "filter": {"dnf": [["id", "==", 1]]},
    "set": {"v": ["const", 60, None]},
}


def upsert(key: int, v: int) -> dict[str, Any]:
    return {
        "op": "merge",
        "keys": [key],
        "v": [v],
        "s": None,
        "when_matched": "update",
        "when_not_matched": "insert",
        "when_not_matched_by_source": "ignore",
    }


SCENARIO_NAMES = [
    "same-file",
    "update-then-delete",
    "two-upserts-of-a-new-key",
    "merge-ignore-then-delete",
]
SCENARIOS = {
    # name: (layout of rows 1 and 2, the change committed first, the change committed second)
    "same-file": ("one file", SET_V_OF_ID_1, DELETE_V_AT_LEAST_50),
    "update-then-delete": ("two files", SET_V_OF_ID_1, DELETE_V_AT_LEAST_50),
    "two-upserts-of-a-new-key": ("one file", upsert(5, 2), upsert(5, 1)),
    "merge-ignore-then-delete": (
        "two files",
        {
            "op": "merge",
            "keys": [2, 7],
            "v": [99, 70],
            "s": None,
            "when_matched": "ignore",
            "when_not_matched": "insert",
            "when_not_matched_by_source": "ignore",
        },
        {"op": "delete", "filter": {"dnf": [[["id", "==", 2]], [["v", ">=", 50]]]}},
    ),
}


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_row_changes_planned_on_one_version(tmp_path, scenario: str) -> None:
    """Two processes plan a change each on the same version; one commits, then the other
    (gates hold their first log writes: ``table_worker._install_gate``). Replayed in version
    order on the model, each must do what it reported, and the table must be the model.

    - same-file: an update of row 1, then a delete of ``v >= 50`` that read rows 1 and 2 of
      the same file: the delete must plan again and delete the updated row too.
    - update-then-delete: the same with rows 1 and 2 in different files (row 1 handed off).
    - two-upserts-of-a-new-key: two merges on id of key 5, which neither saw: the second must
      update the first's row, not insert key 5 again.
    - merge-ignore-then-delete: a merge that leaves row 2 (``when_matched="ignore"``) and
      inserts row 7 (v 70), then a delete of ``id == 2 or v >= 50``: no serial order at all
      gives the table "row 7 and not row 2" (merge first: the delete takes row 7 too; delete
      first: the merge inserts row 2).
    """
    layout, first, second = SCENARIOS[scenario]
    path = str(tmp_path / "t")
    table = create_table(path, SCHEMA, properties=PROPERTIES)
    rows = [
        {"op": "append", "ids": [1], "v": [0], "s": ["a"]},
        {"op": "append", "ids": [2], "v": [60], "s": ["b"]},
    ]
    model = SCHEMA.empty_table()
    for n, op in enumerate(rows):
        run_op(table, op)
        change = apply_op(model, op)
        assert change is not None
        model = change.table
        if n == 0 and layout == "two files":  # row 1 into a columnar file of its own
            table.finish_streaming()
            table.handoff()
    base = table.refresh().version
    gates = str(tmp_path / "gates")
    os.mkdir(gates)
    ops = {"first": [first], "second": [second]}
    gate = {
        "first": {"dir": gates, "me": "first", "other": "second"},
        "second": {"dir": gates, "me": "second", "other": "first", "after": "first"},
    }
    procs = {
        role: spawn(
            {"table": path, "writer_id": role, "ops": ops[role], "gate": gate[role]},
            str(tmp_path / f"{role}.json"),
        )
        for role in ops
    }
    outs = {role: finish(p) for role, p in procs.items()}
    history = {r.version: r for r in open_table(path).history()}
    if sorted(history) != list(range(base + 3)) or history[base + 1].read_version != base:
        raise RuntimeError(f"the gates did not make the changes race: {history}")
    if scenario == "same-file":
        assert outs["second"]["replanned"] == 1, outs
    replay(path, model, base, outs, ops)


def test_recover_between_deletion_vectors_and_commit(tmp_path) -> None:
    """``recover(min_age=0)`` runs while a delete (a real process, held at a gate in front
    of its log write) has written its deletion vectors and not committed them. The table must
    stay whole: the delete either refuses to commit (CommitConflictError, as an append whose
    file recover removed does) or commits vectors that exist."""
    path = str(tmp_path / "t")
    table = create_table(path, SCHEMA, properties=PROPERTIES)
    op = OpMaker(0).append(20)
    run_op(table, op)
    change = apply_op(SCHEMA.empty_table(), op)
    assert change is not None
    base = table.refresh().version
    gates = tmp_path / "gates"
    gates.mkdir()
    ops = {"deleter": [{"op": "delete", "filter": {"range": ["id", 3, 7]}}]}
    gate = {"dir": str(gates), "me": "deleter", "other": "janitor", "after": "janitor"}
    proc = spawn(
        {"table": path, "writer_id": "deleter", "ops": ops["deleter"], "gate": gate},
        str(tmp_path / "deleter.json"),
    )
    deadline = time.monotonic() + 60
    while not (gates / "deleter.ready").exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the delete never reached its log write")
        time.sleep(0.005)
    recovered = open_table(path).recover(min_age=0)
    (gates / "janitor.ready").touch()
    (gates / "janitor.done").touch()
    out = finish(proc)
    refused = [e for e in out["errors"] if not e[1].startswith("RowsChangedError")]
    assert all(e[1].startswith("CommitConflictError") for e in refused), out["errors"]
    result = open_table(path).verify()
    assert result.ok, f"recover removed {recovered.orphans}; then: {result.problems}"
    replay(path, change.table, base, {"deleter": out}, ops)
