"""Running the ``carbonlite`` command in-process (typer's CliRunner) on small local tables."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

import carbonlite as cl
from carbonlite.cli import app
from tests.compaction.lifecycle import SCHEMA, make_rows

COMMANDS = (
    "inspect",
    "segments",
    "partitions",
    "history",
    "files",
    "compact",
    "handoff",
    "clean",
    "recover",
    "verify",
    "upgrade",
    "demo",
    "properties",
    "ingest",
    "serve",
    "create",
    "alter",
    "index",
    "iceberg",
)
"""Every command (or group of commands) at the top of the ``carbonlite`` app."""
GROUPS = ("properties", "ingest", "index", "iceberg")
TABLE_COMMANDS = (
    *(c for c in COMMANDS if c not in ("demo", "serve", "create", "alter", *GROUPS)),
    "properties show",
    "index show",
    "index build",
    "iceberg show",
)
"""The commands that take a table's PATH and nothing else that is required."""
SEGMENT_ROWS = 40
FINISHED = 5
STREAMING_ROWS = 30
TOTAL_ROWS = FINISHED * SEGMENT_ROWS + STREAMING_ROWS


@dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def invoke(*args: object, columns: int | None = None) -> Run:
    """Run ``carbonlite *args``; ``columns``: as if ``COLUMNS`` said the output is that wide."""
    env = {"COLUMNS": None if columns is None else str(columns)}  # None: unset, a pipe's width
    result = CliRunner().invoke(app, [str(a) for a in args], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a crash, not an error the command reported
    return Run(result.exit_code, result.stdout, result.stderr)


def command_paths() -> list[tuple[str, ...]]:
    """Every command and group of the app as the words that name it, the app itself first
    (``()``), then ``("inspect",)``, ..., ``("ingest",)``, ``("ingest", "kafka")``."""
    paths: list[tuple[str, ...]] = [()]

    def walk(group: TyperGroup, prefix: tuple[str, ...]) -> None:
        for name, command in group.commands.items():
            paths.append((*prefix, name))
            if isinstance(command, TyperGroup):
                walk(command, (*prefix, name))

    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    walk(root, ())
    return paths


@pytest.fixture
def cli() -> Callable[..., Run]:
    return invoke


def make_table(path: Path) -> cl.Table:
    """Segments 0..4 STREAMING_FINISH (40 rows each, two appends), segment 5 STREAMING (30)."""
    t = cl.create_table(
        path,
        SCHEMA,
        sort_columns=["ts"],
        properties={"blocklet_max_rows": "25", "handoff_blocklet_rows": "64"},
    )
    n = 0
    for _ in range(FINISHED):
        for _ in range(2):
            t.append(make_rows(range(n, n + SEGMENT_ROWS // 2)))
            n += SEGMENT_ROWS // 2
        t.finish_streaming()
    t.append(make_rows(range(n, n + STREAMING_ROWS)))
    return t


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "events"
    make_table(path)
    return path
