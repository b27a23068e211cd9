"""``carbonlite demo`` around its pipeline, without Spark: the pipeline (``run_demo``) is
replaced by one that reports what a run did, so these check what the command makes of it:
the end of the output, ``--json``, ``--keep``/``--cleanup``, the progress line and the exit
status. The real pipeline runs in tests/spark/test_drivers.py."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.progress import Progress

import carbonlite.spark.demo as pipeline
from carbonlite.cli import demo_cmd
from carbonlite.cli.app import console
from tests.cli.conftest import Run

ROWS = 500
STREAM_LINE = re.compile(
    r"    micro-batch (?P<batch>\d+) of 3 committed: (?P<rows>[\d,]+) rows in the table "
    r"after (?P<seconds>\d+\.\d) s"
)
"""A line of the demo's progress while the events stream in (output to a file or a pipe)."""


@pytest.fixture
def fake_pipeline(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """``run_demo`` replaced: it makes the directory's files, reports progress for three
    micro-batches and returns a report; each call's arguments are recorded."""
    calls: list[dict[str, Any]] = []

    def run_demo(directory: str, rows: int, **kwargs: Any) -> pipeline.DemoReport:
        calls.append({"directory": directory, "rows": rows, **kwargs})
        os.makedirs(os.path.join(directory, "events"), exist_ok=True)
        with open(os.path.join(directory, pipeline.SPARK_LOG), "w") as log:
            log.write("WARNING: Using incubator modules: jdk.incubator.vector\n")
        kwargs["say"]("[bold]3. stream the files[/bold] ...")
        display = kwargs["progress"]
        if display is not None:
            with display() as progress:
                for batch in range(4):  # 0: the table exists, nothing committed yet
                    progress(batch * rows // 3, batch, 3)
        report = pipeline.DemoReport(directory)
        report.steps[:] = [("1. generate", 0.5), ("3. stream", 2.0)]
        counted = rows if "mismatch" not in directory else rows - 1
        report.facts.update(
            ingested_rows=rows, micro_batches=3, commits=3, counted_rows=counted, counts={}
        )
        return report

    monkeypatch.setattr(pipeline, "run_demo", run_demo)
    return calls


def test_human_output_ends_with_the_table_and_what_to_try(
    cli: Callable[..., Run], tmp_path: Path, fake_pipeline: list[dict[str, Any]]
) -> None:
    directory = tmp_path / "demo"
    run = cli("demo", "--dir", directory, "--rows", ROWS)
    assert run.exit_code == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"CarbonLite demo in {directory}"
    # not a terminal: one line per micro-batch committed, none before the first, each a whole
    # sentence: the rows in the table, and the seconds since the stream started (it read
    # "committed: 500 rows in", cut off)
    progress = [STREAM_LINE.fullmatch(line) for line in lines if "micro-batch" in line]
    assert all(progress), lines
    assert [(m["batch"], m["rows"]) for m in progress if m] == [
        (str(n), f"{n * ROWS // 3:,}") for n in (1, 2, 3)
    ]
    seconds = [float(m["seconds"]) for m in progress if m]
    assert seconds == sorted(seconds)
    end = lines[lines.index(next(line for line in lines if line.startswith("OK: "))) :]
    assert end == [
        f"OK: {ROWS:,} events in, {ROWS:,} in the table, {ROWS:,} streamed out; 2.5 s in all",
        f"The data is kept in {directory} (delete it when done, or run with --cleanup).",
        f"The table: {directory / 'events'}",
        "Next, try:",
        *(f"  carbonlite {c} {directory / 'events'}" for c in demo_cmd.NEXT_COMMANDS),
    ]
    assert run.stderr == ""
    assert directory.is_dir()
    assert fake_pipeline[0]["rows"] == ROWS


def test_json_is_one_document(
    cli: Callable[..., Run], tmp_path: Path, fake_pipeline: list[dict[str, Any]]
) -> None:
    directory = tmp_path / "demo"
    run = cli("demo", "--dir", directory, "--rows", ROWS, "--json")
    assert run.exit_code == 0 and run.stderr == ""
    document = json.loads(run.stdout)
    table = str(directory / "events")
    assert document["ok"] is True
    assert (document["rows"], document["ingested_rows"], document["counted_rows"]) == (
        ROWS,
        ROWS,
        ROWS,
    )
    assert (document["directory"], document["table"], document["kept"]) == (
        str(directory),
        table,
        True,
    )
    assert document["spark_log"] == str(directory / "spark.log")
    assert document["steps"] == [
        {"step": "1. generate", "seconds": 0.5},
        {"step": "3. stream", "seconds": 2.0},
    ]
    assert document["seconds"] == 2.5
    assert document["next"] == [f"carbonlite {c} {table}" for c in demo_cmd.NEXT_COMMANDS]
    assert fake_pipeline[0]["progress"] is None  # no progress output with --json


def test_cleanup_deletes_the_directory(
    cli: Callable[..., Run], tmp_path: Path, fake_pipeline: list[dict[str, Any]]
) -> None:
    directory = tmp_path / "demo"
    run = cli("demo", "--dir", directory, "--rows", ROWS, "--cleanup")
    assert run.exit_code == 0
    assert not directory.exists()
    assert run.stdout.splitlines()[-1] == f"Deleted {directory} (--cleanup)."
    assert "carbonlite inspect" not in run.stdout
    document = cli("demo", "--dir", tmp_path / "again", "--cleanup", "--json").json()
    assert (document["kept"], document["next"], document["spark_log"]) == (False, [], None)
    assert not (tmp_path / "again").exists()


def test_a_mismatch_exits_1(
    cli: Callable[..., Run], tmp_path: Path, fake_pipeline: list[dict[str, Any]]
) -> None:
    run = cli("demo", "--dir", tmp_path / "mismatch", "--rows", ROWS, "--json")
    assert run.exit_code == 1
    assert json.loads(run.stdout)["ok"] is False


def test_a_spark_failure_is_one_error_line(
    cli: Callable[..., Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(directory: str, rows: int, **kwargs: Any) -> pipeline.DemoReport:
        raise RuntimeError("Java gateway process exited before sending its port number\nmore")

    monkeypatch.setattr(pipeline, "run_demo", failing)
    run = cli("demo", "--dir", tmp_path / "demo", "--json")
    assert run.exit_code == 1 and run.stdout == ""
    assert run.stderr.splitlines() == [
        "error: CarbonLiteError: the demo failed: RuntimeError: Java gateway process exited "
        f"before sending its port number; Spark's log is {tmp_path / 'demo' / 'spark.log'}"
    ]


def test_on_a_terminal_the_progress_line_changes_in_place(
    cli: Callable[..., Run],
    tmp_path: Path,
    fake_pipeline: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(console, "_force_terminal", True)
    seen: list[tuple[Any, Any, Any]] = []
    real_update = Progress.update

    def update(self: Progress, task_id: Any, **kwargs: Any) -> None:
        seen.append((kwargs.get("completed"), kwargs.get("total"), kwargs.get("rows")))
        real_update(self, task_id, **kwargs)

    monkeypatch.setattr(Progress, "update", update)
    run = cli("demo", "--dir", tmp_path / "demo", "--rows", ROWS)
    assert run.exit_code == 0
    assert seen == [(n, 3, n * ROWS // 3) for n in range(4)]
    assert "micro-batch 1 of 3" not in run.stdout  # no line per batch on a terminal
