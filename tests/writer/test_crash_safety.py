"""Guarantees 1 and 3 against real SIGKILLs: a commit is atomic, uncommitted bytes are
invisible and are truncated away by the next writer, and a writer that restarts under the
same writer id (a retried task) never leaves visible partial data.

Writers are real processes forked from a fork server (tests/support/crash_writer.py), so a
trial costs milliseconds instead of a Python start-up. Every check reads the table from this
process and compares every cell with the deterministic batches (tests/support/batches.py).

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
from concurrent.futures import ThreadPoolExecutor

import pytest

from carbonlite import create_table, open_table
from carbonlite.metadata.log import LOG_DIR
from tests.support.batches import (
    PROPERTIES,
    SCHEMA,
    batch_ids,
    batch_rows,
    diff_rows,
    ends_in_whole_blocklets,
    log_temp_files,
    rows_past,
    stream_files,
)
from tests.support.crash_writer import CRASH_POINTS, WriterRun, WriterServer
from tests.support.table_worker import finish as finish_worker
from tests.support.table_worker import spawn as spawn_worker
from tests.support.table_worker import wait_until_ready

WRITER = "crash-writer"  # the fixed writer id every restarted writer reuses
SIGKILLED = -9


@pytest.fixture(scope="module")
def servers() -> Iterator[list[WriterServer]]:
    pool = [WriterServer(), WriterServer()]
    yield pool
    for server in pool:
        server.close()


@pytest.fixture
def server(servers: list[WriterServer]) -> WriterServer:
    return servers[0]


def new_table(path: str, **extra: str) -> str:
    create_table(path, SCHEMA, properties={**PROPERTIES, **extra})
    return path


def assert_holds(path: str, batches: set[int], context: str) -> None:
    """The table reads without error and holds exactly ``batches``, each whole, once."""
    table = open_table(path)
    got = table.to_arrow()
    problem = diff_rows(got, batches)
    assert problem is None, f"{context}: {problem}"
    assert table.count_rows() == got.num_rows, f"{context}: the log's row count differs"


def assert_files_clean(path: str, writer_id: str, context: str, *, everywhere: bool) -> None:
    """Every stream file of ``writer_id`` in the STREAMING segment (``everywhere``: in every
    segment) ends exactly at its committed length in the log. A tail left in a segment that
    stopped taking appends (another writer rolled it over) is for ``recover``."""
    streaming = open_table(path).snapshot().streaming_segment()
    for f in stream_files(path, writer_id):
        in_streaming = streaming is not None and f.rel.startswith(
            f"segments/{streaming.segment_id}/"
        )
        if not (everywhere or in_streaming):
            continue
        assert f.committed is not None, f"{context}: {f.rel} ({f.size} bytes) is not in the log"
        assert f.size == f.committed, (
            f"{context}: {f.rel} is {f.size} bytes but its committed length is {f.committed}: "
            "the garbage tail was not truncated"
        )


def assert_log_whole(path: str, context: str) -> None:
    """Every version from 0 to the latest is in the log and decodes."""
    table = open_table(path)
    versions = [r.version for r in table.history()]
    assert versions == list(range(table.version, -1, -1)), f"{context}: history {versions}"


def recover_and_check(
    server: WriterServer,
    path: str,
    expected: set[int],
    first_batch: int,
    context: str,
    *,
    everywhere: bool = True,
    replay: int | None = None,
) -> WriterRun:
    """A new writer process with the SAME writer id appends one batch and waits; then the table
    must hold everything plus that batch, the garbage tail must be gone, and a writer with a
    NEW writer id appends too. With ``replay``, the writer is a restarted exactly-once stream
    that first sends that batch again: it must be skipped exactly when it is committed."""
    spec = {
        "table": path,
        "writer_id": WRITER,
        "first_batch": first_batch,
        "before": 1,
        "new_writer": True,
        "wait_go": True,
    }
    if replay is not None:
        spec |= {"txn_app": "stream", "replay": replay}
    run = server.start(spec)
    run.wait_for("ready")
    assert run.batches == {first_batch, first_batch + 1}
    if replay is not None:
        assert run.replay_skipped == (replay in expected), (
            f"{context}: the replayed batch {replay} was "
            f"{'skipped' if run.replay_skipped else 'written again'}"
        )
        expected = expected | {replay}
    assert_holds(path, expected | run.batches, f"{context}, after the restarted writer appended")
    assert_files_clean(
        path, WRITER, f"{context}, after the restarted writer appended", everywhere=everywhere
    )
    server.send("stop")
    assert run.wait_exit() == 0
    assert_log_whole(path, context)
    return run


# --- random kills ---------------------------------------------------------------------------

TABLE_SHAPES = [
    {"checkpoint_interval": "3"},  # kills land in checkpoint writes too
    {"streaming_segment_max_bytes": "12KB", "checkpoint_interval": "7"},  # segments roll over
    {},
]


def classify(path: str, run: WriterRun, ids: set[int], temps_before: set[str]) -> str:
    """Where, judging by what is on disk, the kill landed."""
    if run.in_flight in ids and run.in_flight not in run.batches:
        return "after the commit, before append() returned"
    tails = [f for f in stream_files(path) if f.committed is None or f.size > f.committed]
    new_temps = set(log_temp_files(path)) - temps_before
    if tails:
        torn = not all(ends_in_whole_blocklets(path, f.rel) for f in tails)
        if torn or sum(rows_past(path, f) for f in tails) < batch_rows(run.in_flight):
            return "while writing blocklets (part of the append on disk)"
        if new_temps:
            return "inside the log put (whole append on disk, log temp file)"
        return "after writing, at fsync or before the log put (whole append on disk)"
    if new_temps:
        return "inside a log put, nothing appended"
    return "between appends (no trace)"


def run_chain(server: WriterServer, base: str, seed: int, trials: int) -> collections.Counter:
    """``trials`` kills, ten per table; each trial's writer is also the recovery of the last."""
    rng = random.Random(seed)
    where: collections.Counter = collections.Counter()
    done = 0
    while done < trials:
        shape = rng.choice(TABLE_SHAPES)
        path = new_table(os.path.join(base, f"t{done}"), **shape)
        # Half the tables get exactly-once streams: every append carries txn=(app, batch), and
        # each restarted writer first replays the batch that was in flight when it was killed.
        txn = rng.random() < 0.5
        expected: set[int] = set()
        next_batch = 0
        replay: int | None = None
        for _ in range(min(10, trials - done)):
            done += 1
            context = f"seed {seed}, trial {done}, table {path} {shape}, txn {txn}"
            temps_before = set(log_temp_files(path))
            spec = {
                "table": path,
                "writer_id": WRITER,
                "first_batch": next_batch,
                "before": 1,
                "new_writer": rng.random() < 0.3,
                "wait_go": True,
                "loop": 400,
            }
            if txn:
                spec |= {"txn_app": "stream", "replay": replay}
            run = server.start(spec)
            if rng.random() < 0.15:
                # Kill the restarted writer itself, while it truncates or makes its first append.
                time.sleep(rng.uniform(0, 0.04))
                run.kill()
            else:
                run.wait_for("ready")
                if replay is not None:
                    assert run.replay_skipped == (replay in expected), (
                        f"{context}: replayed batch {replay} was "
                        f"{'skipped' if run.replay_skipped else 'written'}; it was "
                        f"{'' if replay in expected else 'not '}committed before"
                    )
                    where[f"replay: {'skipped' if run.replay_skipped else 'written'}"] += 1
                    expected = expected | {replay}
                assert_holds(path, expected | run.batches, f"{context}: restarted writer")
                assert_files_clean(path, WRITER, f"{context}: restarted writer", everywhere=True)
                run.go()
                run.wait_committed(rng.choice([0, 0, 1, 2, 3]))
                time.sleep(rng.uniform(0, 0.03))
                run.kill()
            context += f", writer reported {run.committed}, in flight {run.in_flight}"
            assert run.exit_code == SIGKILLED, f"{context}: exit code {run.exit_code}"
            # (a) it opens and reads; (b) committed batches plus maybe the one in flight, whole
            table = open_table(path)
            got = table.to_arrow()
            ids = batch_ids(got)
            reported = expected | run.batches
            if run.replay_skipped is not None:
                reported.add(spec["replay"])
            assert reported <= ids, f"{context}: committed batches lost: {reported - ids}"
            assert ids - reported <= {run.in_flight}, f"{context}: extra batches {ids - reported}"
            problem = diff_rows(got, ids)  # each batch whole and once, every cell right
            assert problem is None, f"{context}: {problem}"
            assert table.count_rows() == got.num_rows, f"{context}: the log's row count differs"
            where[classify(path, run, ids, temps_before)] += 1
            expected = ids
            next_batch = max(next_batch, run.in_flight + 1)
            replay = run.in_flight if txn else None
        # (c) the last kill of this table gets its restarted writer too
        recover_and_check(server, path, expected, next_batch, f"seed {seed}, table {path}")
    return where


@pytest.mark.slow
def test_random_sigkill_trials(servers: list[WriterServer], tmp_path) -> None:
    """100 writers with one fixed writer id, each SIGKILLed at a random moment (two chains of
    tables at a time). After every kill the table reads, and holds exactly the acknowledged
    batches plus perhaps the one in flight, each whole and once; the next writer (same id)
    truncates the garbage tail before its first commit; a writer with a new id works too."""
    seed = int(os.environ.get("CARBONLITE_CRASH_SEED", random.randrange(2**31)))
    trials = 100
    per_chain = [trials // len(servers)] * len(servers)
    with ThreadPoolExecutor(len(servers)) as pool:
        futures = [
            pool.submit(run_chain, server, str(tmp_path / f"chain{i}"), seed + i, n)
            for i, (server, n) in enumerate(zip(servers, per_chain, strict=True))
        ]
        where: collections.Counter = collections.Counter()
        for f in futures:
            try:
                where += f.result()
            except BaseException as exc:
                raise AssertionError(f"CARBONLITE_CRASH_SEED={seed}: {exc}") from exc
    summary = json.dumps(dict(where.most_common()), indent=1)
    print(f"CARBONLITE_CRASH_SEED={seed}; where the {trials} kills landed: {summary}")
    assert sum(n for k, n in where.items() if not k.startswith("replay")) == trials
    assert where["replay: written"] >= 1, summary  # (test_kill_at_crash_point: skipped ones)
    # The kills must really hit the interesting windows, not only the gaps between appends.
    assert where["while writing blocklets (part of the append on disk)"] >= 3, summary
    assert sum(n for k, n in where.items() if "whole append on disk" in k) >= 3, summary


@pytest.mark.slow
def test_kills_while_another_writer_and_readers_run(server: WriterServer, tmp_path) -> None:
    """A writer is SIGKILLed and restarted under the same id again and again while a second
    writer appends and a reader scans: the survivor loses nothing, the killed writer's
    acknowledged batches stay, and readers never see a torn or uncommitted batch."""
    path = new_table(
        str(tmp_path / "t"), checkpoint_interval="5", streaming_segment_max_bytes="24KB"
    )
    rng = random.Random(int(os.environ.get("CARBONLITE_CRASH_SEED", random.randrange(2**31))))
    stop = str(tmp_path / "stop")
    barrier = {"dir": str(tmp_path), "all": ["other", "reader", "test"]}
    other_batches = list(range(10_000, 10_050))
    other = spawn_worker(
        {"op": "append", "table": path, "batches": other_batches}
        | {"barrier": barrier | {"me": "other"}}
    )
    reader = spawn_worker(
        {"op": "read", "table": path, "stop_file": stop, "barrier": barrier | {"me": "reader"}}
    )
    wait_until_ready(barrier, "test")
    acked: dict[int, int] = {}
    in_flight: set[int] = set()
    next_batch = 0
    try:
        for _ in range(12):
            run = server.start(
                {"table": path, "writer_id": WRITER, "first_batch": next_batch, "loop": 400}
            )
            run.wait_committed(rng.randint(1, 3))
            time.sleep(rng.uniform(0, 0.03))
            run.kill()
            assert run.exit_code == SIGKILLED
            acked.update(run.committed)
            in_flight.add(run.in_flight)
            next_batch = run.in_flight + 1
        other_results = finish_worker(other)["results"]
    finally:
        with open(stop, "w"):
            pass
    observations = finish_worker(reader)["observations"]

    acked.update((b, v) for b, v, _, _ in other_results)
    ids = batch_ids(open_table(path).to_arrow())
    assert set(acked) <= ids, f"acknowledged batches lost: {set(acked) - ids}"
    assert ids - set(acked) <= in_flight, f"batches nobody appended: {ids - set(acked) - in_flight}"
    assert_holds(path, ids, "after the kills")
    recover_and_check(server, path, ids, next_batch, "after the kills", everywhere=False)

    problems = [o for o in observations if o[2] is not None]
    assert not problems, f"readers saw damaged or partial data: {problems[:5]}"
    committed_in_flight = in_flight & ids  # committed, but killed before append() returned
    for version, seen, _ in observations:
        want = {b for b, v in acked.items() if v <= version}
        unexplained = set(seen) - want - committed_in_flight
        assert want <= set(seen) and not unexplained, (
            f"at version {version} a reader saw {sorted(seen)}; committed by then: {sorted(want)}"
        )
    assert len({o[0] for o in observations}) >= 10, "the reader barely overlapped the writers"


# --- kills at chosen points -----------------------------------------------------------------

COMMITTED_AT = {"after_log_link", "before_checkpoint_pointer"}
FIRST = 6  # batches 6, 7, 8 have 210, 153, 181 rows: four or five blocklets each


@pytest.mark.parametrize(
    ("prior", "txn"),
    [(0, False), (2, True)],
    ids=["first-append", "third-append-with-txn-replay"],
)
@pytest.mark.parametrize("point", [p for p in CRASH_POINTS if p != "after_truncate"])
def test_kill_at_crash_point(
    server: WriterServer, tmp_path, point: str, prior: int, txn: bool
) -> None:
    """A writer kills itself at ``point`` of its (prior+1)-th append; the table is at a
    committed version (the append IS committed once its log version is linked), and a
    restarted writer with the same id truncates the garbage and carries on. With ``txn``
    every append carries txn=(app, batch) and the restarted writer replays the killed batch:
    skipped when it was committed, written when it was not."""
    # the killed append is the first to checkpoint (by versions only)
    path = new_table(
        str(tmp_path / "t"), checkpoint_interval=str(prior + 1), checkpoint_max_entries="100000"
    )
    spec = {
        "table": path,
        "writer_id": WRITER,
        "first_batch": FIRST,
        "before": prior,
        "loop": 1,
        "inject": point,
    }
    run = server.start(spec | ({"txn_app": "stream"} if txn else {}))
    assert run.wait_exit() == SIGKILLED, f"the crash point {point} was never reached"
    armed = FIRST + prior
    if point == "before_checkpoint_pointer":
        # a post-commit step: written in the background, after the append was acknowledged
        assert run.in_flight == armed or run.batches == set(range(FIRST, armed + 1))
    else:
        assert run.in_flight == armed
    committed = point in COMMITTED_AT
    assert_holds(path, run.batches | ({armed} if committed else set()), f"killed at {point}")
    assert open_table(path).version == prior + committed

    files = stream_files(path, WRITER)
    tails = [f for f in files if f.committed is None or f.size > f.committed]
    if committed:
        assert not tails, f"{point}: bytes past the committed length: {files}"
    else:
        assert len(tails) == 1, f"{point}: expected the killed append's bytes on disk: {files}"
        assert (tails[0].committed is None) == (prior == 0), tails
        assert ends_in_whole_blocklets(path, tails[0].rel) == (point != "mid_write"), tails

    temps = log_temp_files(path)
    log_dir = os.path.join(path, LOG_DIR)
    if point in ("torn_log_temp", "after_log_link"):
        assert len(temps) == 1, f"{point}: the log put's temp file should be left: {temps}"
        with open(os.path.join(log_dir, temps[0]), "rb") as f:
            assert f.read(), f"{point}: the temp file should hold what was written of it"
    else:
        assert temps == []
    if point == "before_checkpoint_pointer":
        assert os.path.exists(os.path.join(log_dir, f"{prior + 1:020d}.checkpoint.json"))
        assert not os.path.exists(os.path.join(path, "_carbonlite", "_last_checkpoint"))

    recover_and_check(
        server,
        path,
        run.batches | ({armed} if committed else set()),
        armed + 1,
        point,
        replay=armed if txn else None,
    )


def test_restarted_writer_killed_after_truncating(server: WriterServer, tmp_path) -> None:
    """A writer dies leaving a tail; its restart dies right after cutting the tail off; the
    next restart still finds everything committed and nothing else."""
    path = new_table(str(tmp_path / "t"))
    first = server.start(
        {"table": path, "writer_id": WRITER, "first_batch": FIRST, "before": 2, "loop": 1}
        | {"inject": "before_fsync"}
    )
    assert first.wait_exit() == SIGKILLED
    (tail,) = stream_files(path, WRITER)
    assert tail.committed is not None and tail.size > tail.committed
    second = server.start(
        {"table": path, "writer_id": WRITER, "first_batch": 20, "before": 0, "loop": 1}
        | {"inject": "after_truncate"}
    )
    assert second.wait_exit() == SIGKILLED, "the restarted writer never truncated"
    assert second.committed == []
    assert_files_clean(path, WRITER, "after the truncating writer died", everywhere=True)
    assert_holds(path, first.batches, "after the truncating writer died")
    recover_and_check(server, path, first.batches, 30, "after_truncate")


# --- storage level: log versions appear whole or not at all ----------------------------------


def test_garbage_temp_files_in_the_log_are_ignored(server: WriterServer, tmp_path) -> None:
    """Half-written temp files of put-if-absent (left by a crash) are never read as versions,
    and do not block the versions a writer creates next."""
    path = new_table(str(tmp_path / "t"), checkpoint_interval="2")
    run = server.start({"table": path, "writer_id": WRITER, "first_batch": 0, "before": 3})
    assert run.wait_exit() == 0
    log_dir = os.path.join(path, LOG_DIR)
    with open(os.path.join(log_dir, f"{2:020d}.json"), "rb") as f:
        whole = f.read()
    garbage = {
        ".tmp-0123456789abcdef0123456789abcdef": whole[: len(whole) // 2],
        ".tmp-" + "f" * 32: b"",
        ".tmp-" + "e" * 32: whole,  # even a complete copy under a temp name is not a version
        ".tmp-" + "d" * 32: os.urandom(300),
    }
    for name, data in garbage.items():
        with open(os.path.join(log_dir, name), "wb") as f:
            f.write(data)
    assert_holds(path, run.batches, "with garbage temp files in the log")
    assert open_table(path).version == 3
    assert_log_whole(path, "with garbage temp files in the log")
    recover_and_check(server, path, run.batches, 10, "with garbage temp files in the log")
    assert set(garbage) <= set(log_temp_files(path))
    for name in os.listdir(log_dir):
        if name.endswith(".json"):
            with open(os.path.join(log_dir, name), "rb") as f:
                for line in f.read().splitlines():
                    json.loads(line)
