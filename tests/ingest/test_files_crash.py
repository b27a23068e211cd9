"""SIGKILL of the file ingester (``carbonlite ingest files --stop-at-end``) at its seams and the
commit protocol's, again and again, while files keep arriving: after a last run to the end
every row of every file is in the table exactly once, each file's rows in the version that
recorded it, every damaged file in the bad-records table exactly once, and the record of
ingested files lists every final file.

Each run is a forked child (``tests/support/file_ingest_worker.py``) held the n-th time it
reaches a random seam, and killed there: the kill lands in that phase on any machine, however
fast or loaded. While it is held, new files are sometimes renamed into place (files arriving
while the ingester runs), and sometimes another ingester runs past it to the end (a racer
that moves the record under the held one, whatever phase it is in); a run that ends before its seam comes (nothing left to do) gets
new files and the loop goes on until the kills are in.
``CARBONLITE_CRASH_SEED=<n>`` replays the seams, files and arrivals of a failed run.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import carbonlite as cl
from tests.support import REPO
from tests.support.file_ingest_source import SCHEMA, Source, check_ingested
from tests.support.file_ingest_worker import IngestServer

PHASES = (
    "files.after_list",
    "files.after_file",
    "append.after_data",
    "commit.before_put",
    "commit.after_put",
    "commit.before_checkpoint",
    "files.after_commit",
    "files.after_bad_commit",
)
"""Where a run is held and killed: before a batch is read, within it, before and after its
version lands, and between a bad file's commit to the bad-records table and the record's."""


@pytest.fixture(scope="module")
def server() -> Iterator[IngestServer]:
    server = IngestServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def other() -> Iterator[IngestServer]:
    """A second server: an ingester that runs while the first is held."""
    server = IngestServer()
    yield server
    server.close()


def command(table: Path, source: Path, bad: Path, *, batch_rows: int) -> list[str]:
    return [
        "ingest",
        "files",
        str(table),
        "--source",
        str(source),
        "--bad-records",
        str(bad),
        "--max-batch-rows",
        str(batch_rows),
        "--max-latency",
        "10ms",
        "--stop-at-end",
        "--json",
    ]


def run_kills(
    server: IngestServer, other: IngestServer, tmp_path: Path, kills: int
) -> dict[str, int]:
    seed = int(os.environ.get("CARBONLITE_CRASH_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    table, bad = tmp_path / "t", tmp_path / "bad"
    cl.create_table(table, SCHEMA, properties={"checkpoint_interval": "3"})
    source = Source(str(tmp_path / "src"))
    source.add_never_final()
    for _ in range(16):
        source.add_random(rng)
    source.add_bad("half_good")
    source.add_bad("garbage")
    args = command(table, tmp_path / "src", bad, batch_rows=rng.choice([100, 200, 300]))
    killed, runs, raced, at = 0, 0, 0, Counter[str]()
    while killed < kills:
        runs += 1
        assert runs <= 4 * kills + 10, f"seed {seed}: {runs} runs and only {killed} kills"
        if rng.random() < 0.4:
            for _ in range(rng.randint(1, 3)):
                source.add_random(rng)
        seam, nth = rng.choice(PHASES), rng.randint(1, 3)
        run = server.start({"args": args, "seam": seam, "nth": nth})
        if run.held_or_ended():
            if rng.random() < 0.5:  # files arriving while it runs
                for _ in range(rng.randint(1, 2)):
                    source.add_random(rng)
            if killed % 4 == 3:  # another ingester goes past it, to the end
                racer = other.start({"args": args, "seam": None})
                assert racer.wait() == 0 and racer.code == 0, f"seed {seed}: {racer.errors}"
                raced += 1
            run.kill()
            assert run.exit_code == -9, f"seed {seed}: exit {run.exit_code} {run.errors}"
            killed += 1
            at[seam] += 1
        else:
            assert run.code == 0 and not run.errors, (
                f"seed {seed}: the run held at {seam} #{nth} failed ({run.code}): {run.errors}"
            )
            assert run.summary is not None and run.summary["pending"] == 0, run.summary
            for _ in range(rng.randint(4, 8)):  # nothing was left: more files
                source.add_random(rng)
    # the last run, the command itself, to the end
    done = subprocess.run(
        [sys.executable, "-m", "carbonlite", *args],
        cwd=REPO,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"seed {seed}: {done.stderr.decode()[-2000:]}"
    summary = json.loads(done.stdout)
    assert summary["pending"] == 0 and summary["behind_horizon"] == 0, summary
    try:
        landed = check_ingested(str(table), [source], str(bad))
    except AssertionError as exc:
        raise AssertionError(f"seed {seed} (kills at {dict(at)}): {exc}") from exc
    assert len(at) >= min(kills // 5, len(PHASES) - 2), f"seed {seed}: kills only at {dict(at)}"
    assert raced == kills // 4, f"seed {seed}: {raced} ingesters ran past a held one"
    return landed


@pytest.mark.slow
def test_sigkills_at_every_seam_ingest_every_file_exactly_once(
    server: IngestServer, other: IngestServer, tmp_path: Path
) -> None:
    landed = run_kills(server, other, tmp_path, kills=12)
    assert len(landed) >= 10


@pytest.mark.slow
def test_fifty_sigkills(server: IngestServer, other: IngestServer, tmp_path: Path) -> None:
    run_kills(server, other, tmp_path, kills=50)


def test_a_kill_between_the_bad_records_commit_and_the_record_keeps_the_file_once(
    server: IngestServer, tmp_path: Path
) -> None:
    """The run is killed right after a bad file is committed to the bad-records table, before
    the table records it; the next run finds it kept there, goes on without keeping it again,
    and is killed after keeping the second; the last run keeps neither again and records
    both."""
    table, bad = tmp_path / "t", tmp_path / "bad"
    cl.create_table(table, SCHEMA)
    source = Source(str(tmp_path / "src"))
    source.add_good(30)
    first = source.add_bad("truncated")
    source.add_good(30)
    second = source.add_bad("wrong_type")
    args = command(table, tmp_path / "src", bad, batch_rows=1000)
    for kept in ([first], [first, second]):
        run = server.start({"args": args, "seam": "files.after_bad_commit", "nth": 1})
        assert run.held_or_ended(), "the run never got to the bad file"
        run.kill()
        assert cl.open_table(table).count_rows() == 0
        assert sorted(cl.open_table(bad).to_arrow().column("file").to_pylist()) == kept
    run = server.start({"args": args, "seam": "files.after_bad_commit", "nth": 1})
    assert not run.held_or_ended(), "a bad file was kept again"
    assert run.code == 0, run.errors
    assert run.summary is not None and run.summary["bad_files"] == 0, run.summary
    assert run.summary["files"] == 2 and run.summary["commits"] == 1, run.summary
    landed = check_ingested(str(table), [source], str(bad))
    assert set(landed) == set(source.good)
