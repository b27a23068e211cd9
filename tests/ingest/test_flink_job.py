"""Flink end to end (docs/ENGINES.md, "Flink"): the page's PyFlink job writes JSON lines with
Flink's `FileSink`, `carbonlite ingest files` drains the directory beside it, and both are
killed with SIGKILL mid-way, a few times each. The job restarts from its newest checkpoint,
the ingester as it is; afterwards every id is in the final files once and in the table once.

The job runs with the python of a venv of its own (PyFlink 2.3 pins py4j, pyarrow and pandas
below this environment's: ``tests/support/flink_env.py``), made on first use, which needs the
package index. Kills wait for conditions (a checkpoint, files made final, a commit), never for
a time, so they land mid-way on a fast machine and a slow one alike.
``CARBONLITE_CRASH_SEED=<n>`` replays the random choices of a failed run.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from tests.support.flink_env import flink_python
from tests.support.flink_job import (
    ProcessGroup,
    final_files,
    ids_in_files,
    job_script,
    newest_checkpoint,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))]
)
ROWS = 40_000
"""About 20 s of the job's pace (2,000 rows a second), plus a few seconds per start."""
ROUNDS = 2
"""Runs of the job killed mid-way (and as many kills of the ingester) before the last run."""
STEP = 300
"""Seconds any one awaited condition may take before the test fails."""


def test_flink_job_and_ingester_killed_every_row_once(tmp_path: Path) -> None:
    seed = int(os.environ.get("CARBONLITE_CRASH_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    python = flink_python()
    script = tmp_path / "flink_job.py"
    script.write_text(job_script(), encoding="utf-8")
    out, checkpoints, table = tmp_path / "flink-out", tmp_path / "checkpoints", tmp_path / "t"
    out.mkdir()
    checkpoints.mkdir()
    flink_temp = tmp_path / "flink-tmp"
    cl.create_table(table, SCHEMA)
    ingest = [sys.executable, "-m", "carbonlite", "ingest", "files", str(table)]
    ingest += ["--source", str(out), "--format", "json", "--max-latency", "200ms"]

    def job(restore_from: Path | None) -> ProcessGroup:
        restore = [f"file://{restore_from}"] if restore_from else []
        command = [str(python), str(script), str(out), str(checkpoints), str(ROWS), *restore]
        return ProcessGroup(command, tmp_path / "flink.log", temp=flink_temp)

    restore_from = None
    ingester = ProcessGroup(ingest, tmp_path / "ingest.log")
    for round_ in range(ROUNDS):
        run = job(restore_from)
        wait_mid_way(run, out, checkpoints, restore_from, more_files=rng.randint(1, 3))
        assert run.running, f"seed {seed}, round {round_}: the job ended first: {run.tail()}"
        ingester = kill_after_a_commit(ingester, table, pause=rng.uniform(0, 0.5))
        run.kill()  # the driver, its JVM and the Python workers, all at once
        restore_from = newest_checkpoint(checkpoints)
        assert restore_from is not None, f"seed {seed}: no complete checkpoint to restore"

    # the last run ends by itself: a bounded job's final checkpoint finalizes its last files
    last = job(restore_from)
    assert last.wait(timeout=STEP) == 0, f"seed {seed}: {last.tail()}"
    ingester.kill()
    done = subprocess.run([*ingest, "--stop-at-end"], capture_output=True, text=True, timeout=STEP)
    assert done.returncode == 0, f"seed {seed}: {done.stderr[-3000:]}"

    in_files = ids_in_files(out)
    twice = sorted(i for i, n in in_files.items() if n > 1)
    assert not twice, f"seed {seed}: Flink finalized {len(twice)} rows twice, e.g. {twice[:5]}"
    lost = sorted(set(range(ROWS)) - set(in_files))
    assert not lost, f"seed {seed}: Flink lost {len(lost)} rows, e.g. {lost[:5]}"
    t = cl.open_table(table)
    rows = t.to_arrow().sort_by("id")
    ids = rows.column("id").to_pylist()
    twice = sorted(i for i, n in Counter(ids).items() if n > 1)
    assert not twice, f"seed {seed}: {len(twice)} rows committed twice, e.g. {twice[:5]}"
    assert ids == list(range(ROWS)), f"seed {seed}: {ROWS - len(ids)} rows lost"
    assert rows.slice(17, 1).to_pylist() == [
        {"id": 17, "name": "event-17", "ts": datetime(2026, 11, 26, 10, 0, 17, tzinfo=timezone.utc)}
    ]
    assert t.verify().ok
    # every temporary file of the killed runs went to the test's own directory, and goes
    assert any(p.name.startswith("flink-") for p in flink_temp.iterdir()), "Flink's temp moved"
    shutil.rmtree(flink_temp)


def wait_mid_way(
    run: ProcessGroup, out: Path, checkpoints: Path, restore_from: Path | None, *, more_files: int
) -> None:
    """Until ``run`` made a checkpoint of its own and ``more_files`` more files final (or
    ended: the caller says that is too early)."""
    files_before = len(final_files(out))
    wait_for(
        lambda: (
            not run.running
            or (
                newest_checkpoint(checkpoints) != restore_from
                and len(final_files(out)) >= files_before + more_files
            )
        ),
        timeout=STEP,
        what=f"a checkpoint and {more_files} more final files",
    )


def kill_after_a_commit(ingester: ProcessGroup, table: Path, *, pause: float) -> ProcessGroup:
    """SIGKILL ``ingester`` ``pause`` seconds after its next commit; start it again."""
    version = cl.open_table(table).version
    wait_for(
        lambda: cl.open_table(table).version > version or not ingester.running,
        timeout=STEP,
        what="a commit of the ingester",
    )
    assert ingester.running, f"the ingester ended: {ingester.tail()}"
    time.sleep(pause)  # where in its loop the kill lands, not a verdict
    ingester.kill()
    return ProcessGroup(ingester.command, ingester.log)
