"""Whole Spark applications in their own processes: a streaming write and batch read on
``local-cluster[2,1,1024]`` (separate executor JVMs with their own Python workers), and the
``carbonlite demo`` command.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from carbonlite import open_table
from tests.support.spark_data import assert_same_rows, source_rows
from tests.support.spark_jobs import CLUSTER_FILES, CLUSTER_ROWS, DEMO_JSON_ROWS, DEMO_ROWS

pytestmark = pytest.mark.spark

JOB_TIMEOUT = 600  # these start their own Spark next to the session's


@pytest.mark.slow
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
    assert summary["rows_after_filter"] == total, "the reused DataFrame kept the filter"
    assert summary["native_plan"], "after the handoff, Spark's Parquet scan reads the rows"
    assert summary["native_rows"] == total
    assert summary["native_filtered_rows"] == CLUSTER_ROWS
    assert summary["native_sum_ids"] == total * (total - 1) // 2

    t = open_table(str(job.directory / "table"))
    assert_same_rows(t.to_arrow(), source_rows(0, total), context="the table, read here")
    commits = [h for h in t.history() if h.operation == "STREAMING UPDATE"]
    assert len(commits) == CLUSTER_FILES
    assert {h.parameters["queryId"] for h in commits} == {summary["query_id"]}


@pytest.mark.slow
@pytest.mark.spark_job("demo")
def test_demo_command(spark_jobs: Any) -> None:
    """The demo's output: its steps, a line per micro-batch committed (output to a file is
    not a terminal), no Spark log lines, and at the end where the tables are and what to
    run next on them."""
    job = spark_jobs.start("demo")
    result = job.wait(JOB_TIMEOUT)
    assert result.returncode == 0, (
        f"exit {result.returncode}:\n{result.stdout}\n{result.stderr[-4000:]}"
    )
    out = result.stdout
    assert "OK" in out and "MISMATCH" not in out, out
    assert f"{DEMO_ROWS:,} events in" in out
    assert "WARN" not in out and "WARN" not in result.stderr, result.stderr
    assert result.stderr == ""
    directory = job.directory / "demo"
    table = directory / "events"
    events = open_table(str(table))
    assert events.count_rows() == DEMO_ROWS
    counts = open_table(str(directory / "kind_counts")).to_arrow()
    assert sum(counts.column("count").to_pylist()) == DEMO_ROWS
    # progress while streaming: rows in and micro-batches committed, growing to the end
    progress = re.findall(r"micro-batch (\d+) of (\d+) committed: ([\d,]+) rows in", out)
    assert progress, out
    batches = [int(b) for b, _, _ in progress]
    rows_in = [int(r.replace(",", "")) for _, _, r in progress]
    assert batches == sorted(batches) and rows_in == sorted(rows_in)
    assert (batches[-1], rows_in[-1]) == (10, DEMO_ROWS)
    assert {int(total) for _, total, _ in progress} == {10}
    # the end: the table, that it is kept, and the commands to look at it
    tail = out[out.index("events in") :]
    assert f"The data is kept in {directory}" in tail
    assert f"The table: {table}\n" in tail
    for command in ("inspect", "history"):
        assert f"\n  carbonlite {command} {table}\n" in tail
    assert "WARNING: Using incubator modules" in (directory / "spark.log").read_text()
    # the Spark sink records its writer and the duration; its task files grow batch by batch
    batches_in = [h for h in events.history() if h.operation == "STREAMING UPDATE"]
    assert len(batches_in) == 10
    assert all(h.writer_id.endswith("-driver") and h.duration is not None for h in batches_in)
    files = sum(len(s.files) for s in events.snapshot().segments.values())
    assert sum(h.files_added or 0 for h in batches_in) == files


@pytest.mark.slow
@pytest.mark.spark_job("demo_json")
def test_demo_json(spark_jobs: Any) -> None:
    """``demo --json``: one JSON document on stdout, nothing else, with the counts."""
    job = spark_jobs.start("demo_json")
    result = job.wait(JOB_TIMEOUT)
    assert result.returncode == 0, (
        f"exit {result.returncode}:\n{result.stdout}\n{result.stderr[-4000:]}"
    )
    assert result.stderr == ""
    report = json.loads(result.stdout)
    directory = job.directory / "demo"
    table = str(directory / "events")
    assert (report["ok"], report["rows"], report["kept"]) == (True, DEMO_JSON_ROWS, True)
    assert (report["directory"], report["table"]) == (str(directory), table)
    events = open_table(table)
    assert report["ingested_rows"] == events.count_rows() == DEMO_JSON_ROWS
    assert report["commits"] == events.version
    assert report["micro_batches"] == 10
    counts = open_table(str(directory / "kind_counts")).to_arrow().to_pylist()
    assert report["counts"] == {r["kind"]: r["count"] for r in counts}
    assert sum(report["counts"].values()) == report["counted_rows"] == DEMO_JSON_ROWS
    assert report["next"][:2] == [f"carbonlite inspect {table}", f"carbonlite history {table}"]
    assert [s["step"][:2] for s in report["steps"]] == ["1.", "2.", "3.", "4.", "5."]
    assert report["seconds"] == pytest.approx(sum(s["seconds"] for s in report["steps"]))
