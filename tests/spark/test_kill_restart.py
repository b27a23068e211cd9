"""Guarantee 2 against a real SIGKILL of the whole Spark driver.

A driver process (tests/support/spark_kill_driver.py, its own SparkSession) streams files
into a table and is killed with SIGKILL, with its JVM and Python processes, right after the
table committed micro-batch N, before Spark wrote ``commits/N`` to its checkpoint. A normal query restarted
from that checkpoint replays batch N; the sink must recognise the batch the table already
holds, and every source row must end up in the table exactly once.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from carbonlite import open_table
from tests.spark.streams import data_batches, finish, wait_until
from tests.support.spark_data import SOURCE_DDL, assert_same_rows
from tests.support.spark_jobs import KILL_BATCH, KILL_FILES

pytestmark = pytest.mark.spark

JOB_TIMEOUT = 420  # the driver starts its own Spark, next to the session's


def session_processes(sid: int) -> list[int]:
    """Pids of the live (not zombie) processes of session ``sid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(entry))
    return pids


@pytest.mark.slow  # about 90 s of a worker: the driver's run up to its kill, then the restart
@pytest.mark.spark_job("kill_driver")
def test_sigkill_between_table_commit_and_checkpoint_commit(spark: Any, spark_jobs: Any) -> None:
    job = spark_jobs.start("kill_driver")
    result = job.wait(JOB_TIMEOUT)
    source, table, ck = (str(job.directory / name) for name in ("src", "table", "ck"))
    files = [pq.read_table(os.path.join(source, name)) for name in sorted(os.listdir(source))]
    assert len(files) == KILL_FILES
    assert result.returncode == -signal.SIGKILL, (
        f"the driver was not killed (exit {result.returncode}):\n{result.stdout}\n{result.stderr[-3000:]}"
    )
    killed = json.loads((job.directory / "killed.json").read_text())
    assert killed["batch"] == KILL_BATCH
    assert killed["sid"] == job.proc.pid, "the commit ran outside the driver's session"
    assert killed["pid"] != job.proc.pid, "the commit ran in the driver's own Python process"
    wait_until(
        lambda: not session_processes(job.proc.pid), 30, "the killed driver's processes to go"
    )

    # The crash window: the table holds batch N, Spark's checkpoint does not.
    query_id = json.loads((job.directory / "ck" / "metadata").read_text())["id"]
    assert os.path.exists(os.path.join(ck, "offsets", str(KILL_BATCH)))
    assert not os.path.exists(os.path.join(ck, "commits", str(KILL_BATCH)))
    t = open_table(table)
    assert t.transaction_version(query_id) == KILL_BATCH
    before = t.version
    assert t.count_rows() == sum(f.num_rows for f in files[: KILL_BATCH + 1])

    q = finish(
        spark.readStream.schema(SOURCE_DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(source)
        .writeStream.format("carbonlite")
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start(table)
    )
    assert q.id == query_id
    replayed = [p for p in data_batches(q) if p["batchId"] == KILL_BATCH]
    assert replayed, "Spark did not replay the batch whose checkpoint commit was lost"

    t = open_table(table)
    assert_same_rows(t.to_arrow(), pa.concat_tables(files), context="after restart")
    commits = [h for h in reversed(t.history()) if h.operation == "STREAMING UPDATE"]
    epochs = [int(h.parameters["epochId"]) for h in commits]
    assert epochs == list(range(len(files))), f"batches committed: {epochs}"
    assert t.version == before + len(files) - KILL_BATCH - 1, "the replay made a commit"
    assert t.transaction_version(query_id) == len(files) - 1
