"""Guarantee 4 (and 3) with real processes: concurrent writers, a conflicting pair, and
readers during writes. No commit is lost or applied twice, conflicts are detected and either
retried or reported as CommitConflictError, and readers only ever see committed versions.

Workers are ``python -m tests.support.table_worker`` processes that begin at an agreed
moment (a start-time argument) or wait at a gate in front of their first log write.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from carbonlite import create_table, open_table
from carbonlite.errors import CarbonLiteError
from tests.support.batches import (
    PROPERTIES,
    SCHEMA,
    batch_rows,
    diff_rows,
    make_batch,
)
from tests.support.table_worker import finish, spawn

N = 100
START_DELAY = 1.0  # the agreed start; processes that are not ready by then start together
HANG_SECONDS = 600.0
"""How long a test waits for writers that neither progress nor end: a hang, not a speed."""
# Larger blocklets than the crash tests use: these tests read hundreds of versions.
BLOCKLETS = {"blocklet_max_rows": "60"}


def agreed_start(tmp_path, *names: str) -> dict[str, dict[str, Any]]:
    """The start-time (and barrier) arguments that make processes ``names`` begin together."""
    start = time.time() + START_DELAY
    d = tmp_path / "barrier"
    d.mkdir(exist_ok=True)
    return {
        n: {"start": start, "barrier": {"dir": str(d), "me": n, "all": list(names)}} for n in names
    }


def run_all(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    procs = [spawn(s) for s in specs]
    return [finish(p) for p in procs]


def new_table(path, **extra: str) -> str:
    create_table(str(path), SCHEMA, properties={**PROPERTIES, **BLOCKLETS, **extra})
    return str(path)


def assert_holds(path: str, batches: set[int]) -> None:
    table = open_table(path)
    got = table.to_arrow()
    problem = diff_rows(got, batches)
    assert problem is None, problem
    assert table.count_rows() == got.num_rows


def assert_commits_match_data(path: str, version_of: dict[int, int]) -> None:
    """The rows each version inserted are exactly the batch committed as that version."""
    try:
        changes = open_table(path).changes(1)
    except CarbonLiteError as exc:
        raise AssertionError(
            f"Table.changes(1) over {len(version_of)} commits failed: {type(exc).__name__}: {exc}"
        ) from exc
    assert set(pc.unique(changes["_change_type"]).to_pylist()) == {"insert"}
    got = changes.select([*SCHEMA.names, "_commit_version"])
    expected = pa.concat_tables(
        make_batch(b).append_column("_commit_version", pa.array([v] * batch_rows(b), pa.int64()))
        for b, v in version_of.items()
    )
    order = [("_commit_version", "ascending"), ("batch", "ascending"), ("row", "ascending")]
    if got.sort_by(order).equals(expected.cast(got.schema).sort_by(order)):
        return
    for version, batch in sorted((v, b) for b, v in version_of.items()):
        rows = changes.filter(pc.equal(changes["_commit_version"], version))
        problem = diff_rows(rows.select(SCHEMA.names), {batch})
        assert problem is None, f"version {version} should hold batch {batch}: {problem}"
    raise AssertionError("the change feed differs from the commits")


def switches(sequence: list[str]) -> int:
    return sum(1 for a, b in itertools.pairwise(sequence) if a != b)


# --- (a), (b): two writers, distinct batches ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("txn", "shape"),
    [
        pytest.param(False, {}, id="plain-one-segment"),
        pytest.param(
            True,
            {"streaming_segment_max_bytes": "24KB", "checkpoint_interval": "10"},
            id="txn-markers-segments-roll-over",
        ),
    ],
)
def test_two_writers_lose_nothing_and_duplicate_nothing(tmp_path, txn, shape) -> None:
    """(a) two processes, different writer ids, N appends each from the same moment; (b) the
    same with a transaction marker per append, and segments rolling over under the writers
    (so commits that lose a race relocate their blocklets)."""
    path = new_table(tmp_path / "t", **shape)
    names = ["A", "B"]
    sync = agreed_start(tmp_path, *names)
    batches = {"A": list(range(N)), "B": list(range(1000, 1000 + N))}
    specs = [
        {
            "op": "append",
            "table": path,
            "writer_id": f"writer-{w}",
            "batches": batches[w],
            "txn_ids": list(range(N)),
        }
        | sync[w]
        | ({"txn_app": f"app-{w}"} if txn else {})
        for w in names
    ]
    outs = dict(zip(names, run_all(specs), strict=True))

    version_of: dict[int, int] = {}
    who: dict[int, str] = {}
    for w in names:
        results = outs[w]["results"]
        assert [r[0] for r in results] == batches[w]
        assert not any(r[2] for r in results), f"{w} skipped a batch: {results}"
        versions = [r[1] for r in results]
        assert versions == sorted(versions), f"{w}'s appends were committed out of order"
        for b, v, _, _ in results:
            version_of[b] = v
            who[v] = w
    assert sorted(who) == list(range(1, 2 * N + 1)), "versions are not exactly 1..2N"

    table = open_table(path)
    assert table.version == 2 * N
    history = table.history()
    assert [r.version for r in history] == list(range(2 * N, -1, -1))
    assert_holds(path, set(batches["A"]) | set(batches["B"]))
    by_version = {r.version: r for r in history}
    for b, v in version_of.items():  # the log credits each version to its writer and batch
        assert by_version[v].parameters["writer_id"] == f"writer-{who[v]}"
        assert by_version[v].rows == batch_rows(b), f"version {v} (batch {b})"
    for v in range(0, 2 * N + 1, 40):  # time travel sees exactly the batches committed by v
        assert_holds_at(path, v, {b for b, bv in version_of.items() if bv <= v})

    if txn:
        for w in names:
            assert table.transaction_version(f"app-{w}") == N - 1
        for b, v in version_of.items():  # the marker is in the same version as its data
            params = by_version[v].parameters
            assert params["app_id"] == f"app-{who[v]}"
            assert int(params["batch_id"]) == batches[who[v]].index(b)

    # Really concurrent: the commits interleave and some log writes lost a race.
    order = [who[v] for v in sorted(who)]
    lost = sum(outs[w]["lost_races"] for w in names)
    assert switches(order) >= 4, f"the writers barely overlapped: {''.join(order)}"
    assert lost >= 1, "no commit ever lost a race: the test did not exercise a conflict"
    if "streaming_segment_max_bytes" in shape:
        relocated = sum(outs[w]["relocated"] for w in names)
        assert relocated >= 1, "no commit had to move its blocklets to a newer segment"

    # The change feed credits each version with exactly the rows of its own batch.
    assert_commits_match_data(path, version_of)


@pytest.mark.slow
def test_a_busy_writer_does_not_starve_another(tmp_path) -> None:
    """Two writers append small batches as fast as they can. Blind appends never conflict,
    so neither may be starved into CommitConflictError ("could not commit after N attempts")
    or left behind: both must reach M commits before either runs out of its 2,000 batches."""
    path = new_table(tmp_path / "t")
    sync = agreed_start(tmp_path, "A", "B")
    stop = str(tmp_path / "stop")
    small = [b for b in range(100_000, 400_000) if batch_rows(b) <= 12][:4000]
    m = 40
    procs = {
        w: spawn(
            {
                "op": "append",
                "table": path,
                "batches": small[i::2],
                "allow_errors": True,
                "stop_file": stop,
                "progress_file": str(tmp_path / f"{w}.progress"),
            }
            | sync[w]
        )
        for i, w in enumerate("AB")
    }

    def commits(w: str) -> int:
        p = tmp_path / f"{w}.progress"
        return p.stat().st_size if p.exists() else 0

    # Until both reached m commits, or a writer ran out of batches (the other starved, with
    # 2,000 commits of its own): counts, never the clock (HANG_SECONDS only ends a hang).
    deadline = time.monotonic() + HANG_SECONDS
    while min(commits("A"), commits("B")) < m and time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs.values()):
            break
        time.sleep(0.05)
    reached = {w: commits(w) for w in "AB"}
    with open(stop, "w"):
        pass
    outs = {w: finish(p) for w, p in procs.items()}

    errors = {w: [r[3] for r in o["results"] if r[3]] for w, o in outs.items()}
    assert not errors["A"] and not errors["B"], f"blind appends failed: {errors}"
    done = {w: len(o["results"]) for w, o in outs.items()}
    assert min(reached.values()) >= m, f"a writer starved: commits {reached}, in all {done}"
    acknowledged = {r[0] for o in outs.values() for r in o["results"] if r[1] is not None}
    assert_holds(path, acknowledged)


# --- (c): a duplicated stream: same app id, same batch ids ------------------------------------


@pytest.mark.slow
def test_duplicate_stream_commits_each_batch_once(tmp_path) -> None:
    path = new_table(tmp_path / "t", checkpoint_interval="10")
    sync = agreed_start(tmp_path, "first", "second")
    spec = {"op": "append", "table": path, "txn_app": "stream-1", "batches": list(range(N))}
    outs = run_all([spec | sync["first"], spec | sync["second"]])

    committed: dict[int, list[int]] = {b: [] for b in range(N)}
    for out in outs:
        for b, v, skipped, error in out["results"]:
            assert error is None
            if not skipped:
                committed[b].append(v)
            else:
                assert v is None
    twice = {b: vs for b, vs in committed.items() if len(vs) != 1}
    assert not twice, f"batches committed other than once: {twice}"
    assert_holds(path, set(range(N)))
    table = open_table(path)
    assert table.transaction_version("stream-1") == N - 1
    assert table.version == N, "a skipped batch still made a version"
    wins = [sum(1 for _, _, skipped, _ in out["results"] if not skipped) for out in outs]
    assert min(wins) >= 1, f"one stream did all the work ({wins}): they never overlapped"


# --- guarantee 3: two live writers that share a writer id -------------------------------------


@pytest.mark.slow
def test_two_live_writers_sharing_a_writer_id_never_corrupt_the_table(tmp_path) -> None:
    """A retried task that runs while the first attempt is still alive (a speculative
    attempt) reuses the writer id. Each append may fail with a CarbonLiteError, but what is
    committed must stay readable and whole, and nothing acknowledged may be lost."""
    path = new_table(tmp_path / "t")
    sync = agreed_start(tmp_path, "attempt-0", "attempt-1")
    spec = {"op": "append", "table": path, "writer_id": "task-7", "allow_errors": True}
    n = 40
    outs = run_all(
        [
            spec | sync["attempt-0"] | {"batches": list(range(n))},
            spec | sync["attempt-1"] | {"batches": list(range(1000, 1000 + n))},
        ]
    )
    acknowledged = {b for out in outs for b, v, _, _ in out["results"] if v is not None}
    errors = [e for out in outs for _, _, _, e in out["results"] if e]
    table = open_table(path)
    try:
        got = table.to_arrow()
    except Exception as exc:
        raise AssertionError(
            f"the table no longer reads ({type(exc).__name__}: {exc}); "
            f"{len(acknowledged)} appends acknowledged, {len(errors)} failed, e.g. {errors[:2]}"
        ) from exc
    problem = diff_rows(got, acknowledged)
    assert problem is None, f"{problem}; {len(errors)} appends failed, e.g. {errors[:2]}"


# --- (d): conflicting pairs -----------------------------------------------------------------


def gated(path: str, tmp_path, me: str, other: str, after: str | None = None) -> dict:
    gate = {"dir": str(tmp_path), "me": me, "other": other}
    if after:
        gate["after"] = after
    return {"table": path, "gate": gate}


def test_add_columns_from_the_same_version_conflict(tmp_path) -> None:
    path = new_table(tmp_path / "t")
    table = open_table(path)
    table.append(make_batch(0))
    read = table.version
    outs = run_all(
        [
            gated(path, tmp_path, "x", "y") | {"op": "add_column", "column": "x"},
            gated(path, tmp_path, "y", "x") | {"op": "add_column", "column": "y"},
        ]
    )
    winners = [o for o in outs if o["ok"]]
    losers = [o for o in outs if not o["ok"]]
    assert len(winners) == 1 and len(losers) == 1, outs
    lost = losers[0]
    assert lost["error"] == "CommitConflictError", lost
    assert lost["read_version"] == read, lost
    assert lost["conflicting_version"] == read + 1, lost
    assert str(read) in lost["message"] and str(read + 1) in lost["message"], lost
    assert winners[0]["version"] == read + 1

    table = open_table(path)
    added = "x" if outs[0]["ok"] else "y"
    other = "y" if added == "x" else "x"
    assert table.version == read + 1
    assert table.schema.names == [*SCHEMA.names, added]
    got = table.to_arrow()
    assert got[added].null_count == got.num_rows
    assert diff_rows(got, {0}) is None  # nothing lost
    # The loser can simply retry on the new version.
    table.add_columns(pa.field(other, pa.int64()))
    assert open_table(path).schema.names == [*SCHEMA.names, added, other]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("initial", "first"),
    [
        pytest.param("streaming", "append", id="streaming-append-first"),
        pytest.param("streaming", "overwrite", id="streaming-overwrite-first"),
        pytest.param("rolled-over", "append", id="rolled-over-append-first"),
        pytest.param("rolled-over", "overwrite", id="rolled-over-overwrite-first"),
        pytest.param("rolled-over", None, id="rolled-over-free-race"),
    ],
)
def test_overwrite_and_append_race_is_serializable(tmp_path, initial, first) -> None:
    """Both commits were planned on the same version. An overwrite never deletes rows it did
    not see (docs/LOG.md, as Delta): if the append commits first, the overwrite is refused with
    a CommitConflictError and the table holds the append; if the overwrite commits first, the
    append (a blind append) lands after it and the table holds both.
    "rolled-over": no segment takes appends, so both commits create the same new segment id."""
    extra = {"streaming_segment_max_bytes": "1KB"} if initial == "rolled-over" else {}
    path = new_table(tmp_path / "t", **extra)
    table = open_table(path)
    table.append(make_batch(0))
    table.append(make_batch(1))
    live = open_table(path).snapshot()
    assert (live.streaming_segment() is None) == (initial == "rolled-over")
    read = table.version
    ow_after = "a" if first == "append" else None
    ap_after = "o" if first == "overwrite" else None
    ow, ap = run_all(
        [
            gated(path, tmp_path, "o", "a", ow_after) | {"op": "overwrite", "batch": 100},
            gated(path, tmp_path, "a", "o", ap_after) | {"op": "append_one", "batch": 200},
        ]
    )
    assert ap["ok"], ap
    append_first = not ow["ok"] or ap["version"] < ow["version"]
    if first is not None:
        assert append_first == (first == "append")
    if append_first:
        assert not ow["ok"] and ow["error"] == "CommitConflictError", ow
        assert ow["read_version"] == read and ow["conflicting_version"] == read + 1, ow
        assert ap["version"] == read + 1
        assert_holds(path, {0, 1, 200})
        assert open_table(path).version == read + 1  # nothing of the overwrite committed
    else:
        assert ow["ok"] and {ow["version"], ap["version"]} == {read + 1, read + 2}, (ow, ap)
        assert_holds(path, {100, 200})
        assert_holds_at(path, read + 1, {100})
    assert_holds_at(path, read, {0, 1})


@pytest.mark.slow
def test_two_overwrites_race_is_serializable(tmp_path) -> None:
    """Two overwrites planned on the same version (both want the same new segment id): the
    first to commit wins, the other is refused (it would replace rows it never saw), and the
    table holds exactly the winner's data."""
    path = new_table(tmp_path / "t")
    open_table(path).append(make_batch(0))
    first, second = run_all(
        [
            gated(path, tmp_path, "p", "q") | {"op": "overwrite", "batch": 100},
            gated(path, tmp_path, "q", "p") | {"op": "overwrite", "batch": 200},
        ]
    )
    winners = [o for o in (first, second) if o["ok"]]
    losers = [o for o in (first, second) if not o["ok"]]
    assert len(winners) == 1 and len(losers) == 1, (first, second)
    assert losers[0]["error"] == "CommitConflictError", losers
    assert winners[0]["version"] == 2
    kept = 100 if first["ok"] else 200
    assert_holds(path, {kept})
    assert open_table(path).version == 2
    assert_holds_at(path, 1, {0})


@pytest.mark.slow
@pytest.mark.parametrize("first", ["add_column", "append_one"], ids=["add-first", "append-first"])
def test_add_columns_and_append_race_both_commit(tmp_path, first) -> None:
    """A schema change and a blind append planned on the same version do not conflict: both
    commit in either order, and the appended rows read the new column as null."""
    path = new_table(tmp_path / "t")
    table = open_table(path)
    table.append(make_batch(0))
    read = table.version
    add, app = run_all(
        [
            gated(path, tmp_path, "c", "a", "a" if first == "append_one" else None)
            | {"op": "add_column", "column": "x"},
            gated(path, tmp_path, "a", "c", "c" if first == "add_column" else None)
            | {"op": "append_one", "batch": 1},
        ]
    )
    assert add["ok"] and app["ok"], (add, app)
    assert (add["version"] < app["version"]) == (first == "add_column")
    assert {add["version"], app["version"]} == {read + 1, read + 2}
    table = open_table(path)
    assert table.schema.names == [*SCHEMA.names, "x"]
    got = table.to_arrow()
    assert got["x"].null_count == got.num_rows
    assert diff_rows(got, {0, 1}) is None
    # The table goes on taking appends that fill the new column.
    more = make_batch(2)
    table.append(more.append_column("x", pa.array(range(more.num_rows), pa.int64())))
    got = open_table(path).to_arrow()
    assert diff_rows(got, {0, 1, 2}) is None
    assert got.filter(pc.equal(got["batch"], 2))["x"].to_pylist() == list(range(more.num_rows))


def assert_holds_at(path: str, version: int, batches: set[int]) -> None:
    got = open_table(path).to_arrow(version=version)
    problem = diff_rows(got, batches)
    assert problem is None, f"version {version}: {problem}"


# --- (e): readers during writes -------------------------------------------------------------


@pytest.mark.slow
def test_readers_see_only_whole_committed_prefixes(tmp_path) -> None:
    path = new_table(tmp_path / "t", checkpoint_interval="5", streaming_segment_max_bytes="24KB")
    stop = str(tmp_path / "stop")
    sync = agreed_start(tmp_path, "writer", "reader-0", "reader-1")
    scans = str(tmp_path / "scans")
    n = 80
    # the writer keeps pace with the readers (a scan per 3 appends), however fast it runs
    paced = {"pace_file": scans, "pace_every": 3}
    writer = spawn(
        {"op": "append", "table": path, "batches": list(range(n))} | paced | sync["writer"]
    )
    readers = [
        spawn(
            {"op": "read", "table": path, "stop_file": stop, "seed": s, "progress_file": scans}
            | sync[f"reader-{s}"]
        )
        for s in range(2)
    ]
    try:
        results = finish(writer)["results"]
    finally:
        with open(stop, "w"):
            pass
    observations = [o for r in readers for o in finish(r)["observations"]]

    version_of = {b: v for b, v, _, _ in results}
    assert sorted(version_of.values()) == list(range(1, n + 1))
    problems = [o for o in observations if o[2] is not None]
    assert not problems, f"readers saw damaged or partial data: {problems[:5]}"
    for version, ids, _ in observations:
        want = [b for b in range(n) if version_of[b] <= version]
        assert ids == want, f"at version {version} a reader saw {ids}, expected {want}"
    seen = {o[0] for o in observations}
    assert len(observations) >= 20 and len(seen) >= 10, (
        f"the readers barely overlapped the writer: {len(observations)} scans, versions {seen}"
    )
    assert_holds(path, set(range(n)))
