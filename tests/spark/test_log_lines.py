"""What a Spark user can see in the ``carbonlite.spark`` log lines. Spark 4.3 shows a Python
stream's progress with empty metrics, so the stream source logs one line per planned
micro-batch (rows, bytes, blocklets, where it starts and ends), and in the process Spark runs
the source's driver side in (no logging set up) prints it to stderr when
``CARBONLITE_SPARK_LOG`` is set. A batch scan without a filter names the routes that prune."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from typing import Any

import pytest

import carbonlite as cl
from carbonlite.spark.options import SparkOptions
from carbonlite.spark.source import NO_FILTER_HINT, CarbonLiteBatchReader
from carbonlite.spark.stream_source import STREAM_LOG_ENV, CarbonLiteStreamReader
from tests.support.log_model import SCHEMA, rows

pytestmark = pytest.mark.spark

LINE = re.compile(
    r"carbonlite stream batch of '(?P<uri>[^']+)' from (?P<start>.+) to (?P<end>.+): "
    r"(?P<rows>\d+) rows, (?P<bytes>\d+) bytes, (?P<blocklets>\d+) blocklets "
    r"\((?P<part>\d+) read in part\) in (?P<units>\d+) units"
)


def table_of_blocklets(path: str) -> cl.Table:
    table = cl.create_table(path, SCHEMA, properties={"blocklet_max_rows": "100"})
    table.append(rows(range(1000)))  # one file of 10 blocklets of 100 rows
    return table


def test_each_batch_is_logged_with_its_figures(tmp_path: Any, caplog: Any) -> None:
    path = str(tmp_path / "t")
    table_of_blocklets(path)
    reader = CarbonLiteStreamReader(SparkOptions({"path": path, "maxRowsPerTrigger": "250"}), None)
    start = reader.initialOffset()
    delivered = []
    with caplog.at_level(logging.INFO, logger="carbonlite.spark"):
        while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) != start:
            n = sum(b.num_rows for p in reader.partitions(start, end) for b in reader.read(p))
            delivered.append(n)
            start = end
    lines = [m.groupdict() for r in caplog.records if (m := LINE.search(r.getMessage()))]
    assert [int(m["rows"]) for m in lines] == delivered == [250, 250, 250, 250]
    assert [m["end"] for m in lines][:2] == [
        "version 1 of the snapshot unit 0 blocklet 2 row 50",
        "version 1 of the snapshot unit 0 blocklet 5 row 0",
    ]
    assert [int(m["part"]) for m in lines] == [1, 1, 1, 1]  # every batch cuts one blocklet
    assert all(m["uri"] == cl.open_table(path).path for m in lines)
    assert all(int(m["bytes"]) > 0 and int(m["units"]) == 1 for m in lines)


DRIVE = """
import sys
from pyspark.sql.streaming.datasource import ReadAllAvailable
from carbonlite.spark.options import SparkOptions
from carbonlite.spark.stream_source import CarbonLiteStreamReader
reader = CarbonLiteStreamReader(SparkOptions({"path": sys.argv[1]}), None)
start = reader.initialOffset()
reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
"""


@pytest.mark.parametrize("env", [True, False], ids=["with-env", "without"])
def test_a_process_without_logging_prints_the_line_when_asked(tmp_path: Any, env: bool) -> None:
    """As in the Python process Spark runs the stream source's driver calls in."""
    path = str(tmp_path / "t")
    table_of_blocklets(path)
    environ = {k: v for k, v in os.environ.items() if k != STREAM_LOG_ENV}
    if env:
        environ[STREAM_LOG_ENV] = "1"
    done = subprocess.run(
        [sys.executable, "-c", DRIVE, path], env=environ, capture_output=True, text=True, check=True
    )
    found = LINE.search(done.stderr)
    if env:
        assert found and int(found["rows"]) == 1000, done.stderr
    else:
        assert found is None, done.stderr


def test_a_scan_without_a_filter_names_the_routes_that_prune(tmp_path: Any, caplog: Any) -> None:
    path = str(tmp_path / "t")
    table_of_blocklets(path)
    filtered = {"filter": '[["id", ">=", 900]]'}
    with caplog.at_level(logging.INFO, logger="carbonlite.spark"):
        for extra in ({}, filtered):
            CarbonLiteBatchReader(SparkOptions({"path": path, **extra}), None).partitions()
    plain, pruned = [
        r.getMessage() for r in caplog.records if "carbonlite scan of" in r.getMessage()
    ]
    assert plain.endswith(NO_FILTER_HINT) and "10 of 10 blocklets selected" in plain
    assert "option filter" in NO_FILTER_HINT and "filterPushdown=true" in NO_FILTER_HINT
    assert NO_FILTER_HINT not in pruned and "1 of 10 blocklets selected" in pruned
