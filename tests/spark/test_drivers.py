"""Whole Spark applications in their own processes: a streaming write and batch read on
``local-cluster[2,1,1024]`` (separate executor JVMs with their own Python workers), and the
``carbonlite demo`` command.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from carbonlite import open_table
from tests.support.spark_data import assert_same_rows, source_rows
from tests.support.spark_jobs import CLUSTER_FILES, CLUSTER_ROWS, DEMO_ROWS

pytestmark = pytest.mark.spark

JOB_TIMEOUT = 600  # these start their own Spark next to the session's


@pytest.mark.spark_job("cluster_driver")
def test_local_cluster_stream_write_then_batch_read(spark_jobs: Any) -> None:
    job = spark_jobs.start("cluster_driver")
    result = job.wait(JOB_TIMEOUT)
    assert result.returncode == 0, (
        f"exit {result.returncode}:\n{result.stdout}\n{result.stderr[-4000:]}"
    )
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    total = CLUSTER_FILES * CLUSTER_ROWS
    assert summary["executors"] == 2
    assert summary["worker_parents"] == 2, "the tasks did not run in two executors' Python workers"
    assert summary["batches"] == CLUSTER_FILES
    assert summary["same_rows"], summary.get("problem")
    assert summary["rows"] == summary["distinct_ids"] == total
    assert summary["sum_ids"] == total * (total - 1) // 2
    assert summary["filtered_rows"] == CLUSTER_ROWS

    t = open_table(str(job.directory / "table"))
    assert_same_rows(t.to_arrow(), source_rows(0, total), context="the table, read here")
    commits = [h for h in t.history() if h.operation == "STREAMING UPDATE"]
    assert len(commits) == CLUSTER_FILES
    assert {h.parameters["queryId"] for h in commits} == {summary["query_id"]}


@pytest.mark.slow
@pytest.mark.spark_job("demo")
def test_demo_command(spark_jobs: Any) -> None:
    job = spark_jobs.start("demo")
    result = job.wait(JOB_TIMEOUT)
    assert result.returncode == 0, (
        f"exit {result.returncode}:\n{result.stdout}\n{result.stderr[-4000:]}"
    )
    assert "OK" in result.stdout and "MISMATCH" not in result.stdout, result.stdout
    assert f"{DEMO_ROWS:,} events in" in result.stdout
    events = open_table(str(job.directory / "demo" / "events"))
    assert events.count_rows() == DEMO_ROWS
    counts = open_table(str(job.directory / "demo" / "kind_counts")).to_arrow()
    assert sum(counts.column("count").to_pylist()) == DEMO_ROWS
