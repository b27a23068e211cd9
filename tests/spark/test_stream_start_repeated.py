"""The outside reproductions of a stream source whose start moved between Spark's calls
(issue 24), run as they were found and ten times each: a default-start query started while
another *process* appends 10 rows every 30 ms. Before the start was decided once, 4 of 4
processing-time runs lost the starting snapshot and batch 0's commits, and 2 of 2
availableNow runs delivered nothing. Slow tier: twenty Spark queries.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from carbonlite import create_table
from tests.spark.streams import data_batches, finish, ids_delivered, memory_name, wait_until
from tests.support import REPO
from tests.support.spark_data import SOURCE_SCHEMA, source_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]

START_ROWS = 1_000
STEP = 10
RUNS = 3


class PacedAppender:
    """``tests/support/paced_appender.py`` in its own process."""

    def __init__(self, path: str, work: Path) -> None:
        self.count_file, self.stop_file = work / "commits", work / "stop"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.paced_appender",
                path,
                str(START_ROWS),
                str(STEP),
                str(self.count_file),
                str(self.stop_file),
            ],
            cwd=REPO,
        )

    def commits(self) -> int:
        return int(self.count_file.read_text()) if self.count_file.exists() else 0

    def stop(self) -> int:
        """Stop it; the table's row count."""
        self.stop_file.touch()
        assert self.proc.wait(60) == 0, "the appender failed"
        return START_ROWS + self.commits() * STEP


def started_table(tmp_path: Path) -> tuple[str, PacedAppender]:
    path = str(tmp_path / "t")
    create_table(path, SOURCE_SCHEMA).append(source_rows(0, START_ROWS))
    appender = PacedAppender(path, tmp_path)
    wait_until(
        lambda: appender.commits() >= 3 or appender.proc.poll() is not None,
        what="the appender's first commits",
    )
    return path, appender


@pytest.mark.parametrize("run", range(RUNS))
def test_processing_time_default_start_races_a_writer_process(
    spark: Any, tmp_path: Path, run: int, stop_queries: None
) -> None:
    path, appender = started_table(tmp_path)
    name = memory_name()
    q = (
        spark.readStream.format("carbonlite")
        .load(path)
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: len(data_batches(q)) >= 4 or not q.isActive, what="four batches")
    finally:
        total = appender.stop()
    q.processAllAvailable()
    q.stop()
    assert q.exception() is None
    ids = ids_delivered(spark, name)
    assert ids == list(range(total)), f"{len(ids)} rows delivered of {total}"


@pytest.mark.parametrize("run", range(RUNS))
def test_available_now_default_start_races_a_writer_process(
    spark: Any, tmp_path: Path, run: int, stop_queries: None
) -> None:
    path, appender = started_table(tmp_path)
    before = START_ROWS + appender.commits() * STEP
    name = memory_name()
    q = (
        spark.readStream.format("carbonlite")
        .load(path)
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    try:
        finish(q)
    finally:
        appender.stop()
    ids = ids_delivered(spark, name)
    assert len(ids) >= before, f"{len(ids)} rows delivered, the table had {before} at the start"
    assert ids == list(range(len(ids))), "not the rows of one version, each once"
