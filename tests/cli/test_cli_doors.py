"""Careless and hostile invocations of every command (issue 25): each is refused with a short
error on stderr, exit status 1 (CarbonLite's ``error:`` line) or 2 (a usage error, from
click), nothing on stdout (not even with ``--json``), no traceback, and nothing committed or
created.

``ingest`` and ``serve`` are here only for their argument parsing; what they do once running
is tested with them (tests/ingest, tests/serve)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import carbonlite as cl
from tests.cli.conftest import Run, command_paths, invoke, make_table
from tests.support import REPO

WIDTH = 80
USAGE_LINES = 6
"""A usage error at 80 columns: ``Usage:``, ``Try ...``, and a box of one or two lines."""


@dataclass(frozen=True)
class Places:
    table: Path
    file: Path
    dir: Path
    missing: Path


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Places:
    root = tmp_path_factory.mktemp("doors")
    (root / "notes.txt").write_text("not a table")
    (root / "empty").mkdir()
    make_table(root / "events")
    return Places(root / "events", root / "notes.txt", root / "empty", root / "no-such-table")


def door(code: int, *args: str, needle: str = "") -> Any:
    """An invocation (``{table}``, ``{file}``, ``{dir}``, ``{missing}`` stand for the places),
    the exit status it must end with and, for status 1, a word its error line must hold."""
    name = " ".join(a if len(a) <= 40 else f"{a[:12]}...({len(a)} chars)" for a in args)
    return pytest.param(code, args, needle, id=name)


T, F, D, M = "{table}", "{file}", "{dir}", "{missing}"
NOT_FOUND = "TableNotFoundError"
BAD = "InvalidOptionError"
NO_VERSION = "VersionNotFoundError"
KAFKA = ("ingest", "kafka", T, "--bootstrap-servers", "x", "--topic", "t")

DOORS = [
    # a missing argument, an unknown command or option
    door(2, "inspect"),
    door(2, "segments", "--json"),
    door(2, "files"),
    door(2, "history"),
    door(2, "partitions"),
    door(2, "compact", "--json"),
    door(2, "handoff"),
    door(2, "clean"),
    door(2, "recover"),
    door(2, "verify"),
    door(2, "upgrade"),
    door(2, "properties", "show"),
    door(2, "properties", "set", T),
    door(2, "properties", "unset", T),
    door(2, "properties", "rename", T),
    door(2, "index", "build"),
    door(2, "index", "show"),
    door(2, "index", "rebuild", T),
    door(2, "index", "show", T, "--bogus"),
    door(2, "iceberg", "sync"),
    door(2, "iceberg", "show", T, "--bogus"),
    door(2, "no-such-command"),
    door(2, "--bogus"),
    door(2, "inspect", T, "--bogus"),
    door(2, "handoff", T, "--finish", "--bogus"),
    door(2, "upgrade", T, "--version", "3"),
    # a path with no table: missing, a plain file, a directory that is no table, empty
    door(1, "inspect", M, needle=NOT_FOUND),
    door(1, "segments", M, "--json", needle=NOT_FOUND),
    door(1, "files", M, needle=NOT_FOUND),
    door(1, "history", M, "--json", needle=NOT_FOUND),
    door(1, "partitions", M, needle=NOT_FOUND),
    door(1, "compact", M, needle=NOT_FOUND),
    door(1, "handoff", M, "--json", needle=NOT_FOUND),
    door(1, "clean", M, needle=NOT_FOUND),
    door(1, "recover", M, "--json", needle=NOT_FOUND),
    door(1, "verify", M, needle=NOT_FOUND),
    door(1, "upgrade", M, "--json", needle=NOT_FOUND),
    door(1, "properties", "show", M, needle=NOT_FOUND),
    door(1, "properties", "set", M, "checkpoint_interval=5", needle=NOT_FOUND),
    door(1, "properties", "unset", M, "checkpoint_interval", needle=NOT_FOUND),
    door(1, "index", "build", M, "id", needle=NOT_FOUND),
    door(1, "index", "show", M, "--json", needle=NOT_FOUND),
    door(1, "iceberg", "sync", M, needle=NOT_FOUND),
    door(1, "iceberg", "show", M, "--json", needle=NOT_FOUND),
    door(1, "iceberg", "sync", T, needle="iceberg=v2"),
    door(1, "inspect", F, "--json", needle="is a file"),
    door(1, "history", F, needle="is a file"),
    door(1, "compact", F, "--type", "major", needle="is a file"),
    door(1, "properties", "show", F, "--json", needle="is a file"),
    door(1, "index", "build", F, "id", needle="is a file"),
    door(1, "index", "show", D, needle=NOT_FOUND),
    door(1, "properties", "set", F, "user.a=1", needle="is a file"),
    door(1, "inspect", D, needle=NOT_FOUND),
    door(1, "verify", D, "--json", needle=NOT_FOUND),
    door(1, "clean", D, "--dry-run", needle=NOT_FOUND),
    door(1, "properties", "show", D, needle=NOT_FOUND),
    door(1, "inspect", "", needle="is empty"),
    door(1, "segments", "", "--json", needle="is empty"),
    door(1, "properties", "show", "", needle="is empty"),
    door(1, "inspect", "ünïcødé-表", needle=NOT_FOUND),
    door(1, "inspect", "nosuchproto://x/y", needle="not supported"),
    door(1, "verify", "http://example.invalid/t", needle="not supported"),
    # versions: negative, not a number, huge, a timestamp (the command line takes numbers)
    door(1, "inspect", T, "--version", "-1", needle=NO_VERSION),
    door(2, "inspect", T, "--version", "abc"),
    door(2, "inspect", T, "--version", ""),
    door(1, "inspect", T, "--version", "99999999999999999999999", needle=NO_VERSION),
    door(2, "segments", T, "-v", "1.5"),
    door(1, "files", T, "--version", "-5", "--json", needle=NO_VERSION),
    door(1, "verify", T, "--version", "1000000", "--json", needle=NO_VERSION),
    door(2, "inspect", T, "--version", "2026-11-22T18:00:00Z"),
    door(2, "segments", T, "--version", "yesterday"),
    # limits
    door(1, "history", T, "--limit", "0", needle="1 or more"),
    door(1, "history", T, "--limit", "-1", "--json", needle="1 or more"),
    door(2, "history", T, "--limit", "abc"),
    door(2, "history", T, "-n", ""),
    door(2, "history", T, "-n", "1.5"),
    # durations and times
    door(1, "clean", T, "--retention", "soon", "--json", needle="not a duration"),
    door(1, "clean", T, "--retention", "30m", needle="1 hour"),
    door(1, "clean", T, "--retention", "", needle="not a duration"),
    door(1, "clean", T, "--retention", "nan", "--force", needle="not a duration"),
    door(1, "clean", T, "--retention", "2026-01-01", needle="not a duration"),
    door(1, "clean", T, "--retention", "9" * 400 + "d", "--force", needle="longest duration"),
    door(1, "clean", T, "--retention", "9" * 30 + "d", "--force", needle="longest duration"),
    door(1, "recover", T, "--min-age", "-1h", needle="not a duration"),
    door(1, "recover", T, "--min-age", "forever", "--json", needle="not a duration"),
    # compaction types and segments, and options that do not go together
    door(1, "compact", T, "--type", "sideways", needle="--type"),
    door(1, "compact", T, "--type", "", needle="--type"),
    door(1, "compact", T, "--type", "custom", needle="needs the ids"),
    door(1, "compact", T, "--type", "custom", "--segments", "nope", "--json", needle="nope"),
    door(1, "compact", T, "--type", "custom", "--segments", "../x", needle="contains '/'"),
    door(1, "compact", T, "--type", "minor", "--segments", "0", needle="custom"),
    door(1, "compact", T, "--type", "handoff", "--segments", "0", needle="custom"),
    door(1, "compact", T, "--type", "major", "--segments", "0,1", "--json", needle="custom"),
    # storage options and protocols
    door(1, "inspect", T, "--storage-options", "{not json", needle="not valid JSON"),
    door(1, "inspect", T, "--storage-options", "[]", needle="JSON object"),
    door(1, "segments", T, "--storage-options", '{"x": 1}', needle="storage_options"),
    door(1, "properties", "show", T, "--storage-options", "null", needle="JSON object"),
    # partitions of a table that has none
    door(1, "partitions", T, needle="not partitioned"),
    door(1, "partitions", T, "--json", "--version", "-1", needle="not partitioned"),
    # properties: no '=', unknown keys, values of the wrong kind, keys that are not set
    door(1, "properties", "set", T, "checkpoint_interval", needle="not KEY=VALUE"),
    door(1, "properties", "set", T, "", needle="not KEY=VALUE"),
    door(1, "properties", "set", T, "checkpoint_interval=abc", "--json", needle="whole number"),
    door(1, "properties", "set", T, "checkpoint_interval=-1", needle="at least 1"),
    door(1, "properties", "set", T, "blocklet_max_bytes=-5MB", needle="not a size"),
    door(1, "properties", "set", T, "auto_handoff=perhaps", needle="true or false"),
    door(1, "properties", "set", T, "streaming_segment_max_bytes=" + "9" * 400, needle="largest"),
    door(1, "properties", "set", T, "log_retention=" + "9" * 400, needle="longest duration"),
    door(1, "properties", "set", T, "handoff_blocklet_rows=99999999999", needle="32 bits"),
    door(1, "properties", "set", T, "checkpoint_interval=" + "9" * 30, needle="at most"),
    door(1, "properties", "set", T, "colour=blue", needle="not a table property"),
    door(1, "properties", "set", T, "ключ=значение", needle="not a table property"),
    door(1, "properties", "set", T, "=5", needle="not a table property"),
    door(1, "properties", "set", T, "user.=5", needle="needs a name"),
    door(1, "properties", "set", T, "user.a=1", "user.a=2", needle="given twice"),
    door(1, "properties", "unset", T, "checkpoint_interval", needle="not set"),
    door(1, "properties", "unset", T, "colour", "--missing-ok", needle="not table properties"),
    door(1, "properties", "unset", T, "", "--json", needle="not table properties"),
    # index: columns it cannot index, a table that lists none
    door(1, "index", "build", T, needle="bloom_filter_columns"),
    door(1, "index", "build", T, "nope", "--json", needle="'nope'"),
    door(1, "index", "build", T, "name", "ünïcødé", needle="'ünïcødé'"),
    door(1, "index", "build", T, "id", "--storage-options", "{x", needle="not valid JSON"),
    # demo, ingest, serve: their arguments only
    door(2, "demo", "--rows", "0"),
    door(2, "demo", "--rows", "abc"),
    door(2, "demo", "--rows", "-5", "--json"),
    door(1, "demo", "--dir", F, needle="is a file"),
    door(2, "ingest", "kafka"),
    door(2, "ingest", "kafka", T, "--topic", "t"),
    door(2, *KAFKA, "--max-batch-rows", "abc"),
    door(1, *KAFKA, "--partitions", "a,b", needle="--partitions"),
    door(1, *KAFKA, "--max-latency", "soon", needle="--max-latency"),
    door(2, "ingest", "files"),
    door(2, "ingest", "files", T),
    door(1, "ingest", "files", T, "--source", M, needle="does not exist"),
    door(1, "ingest", "files", T, "--source", F, needle="is a file"),
    door(1, "ingest", "files", T, "--source", D, "--format", "xml", needle="format 'xml'"),
    door(1, "ingest", "files", M, "--source", D, needle=NOT_FOUND),
    door(1, "ingest", "files", T, "--source", D, "--max-latency", "soon", needle="--max-latency"),
    door(2, "ingest", "files", T, "--source", D, "--max-batch-rows", "abc"),
    door(1, "ingest", "files", T, "--source", T, needle="overlap"),
    door(2, "create"),
    door(1, "create", M, "--schema", "id bogus", needle="unknown type"),
    door(1, "create", M, "--schema", "id bigint, id int", needle="more than once"),
    door(1, "create", M, "--schema", "id bigint,", needle="column name"),
    door(1, "create", M, "--schema", "id bigint", "--partition-by", "nope", needle="nope"),
    door(1, "create", M, "--schema", "id bigint", "--primary-key", "nope", needle="nope"),
    door(1, "create", M, "--schema", "id bigint", "--property", "bogus=1", needle="bogus"),
    door(1, "create", T, "--schema", "id bigint", needle="exists"),
    door(1, "create", F, "--schema", "id bigint", needle="file"),
    door(2, "alter"),
    door(2, "alter", T),
    door(2, "alter", T, "rename-column", "a", "b", "--bogus"),
    door(1, "alter", M, "rename-column", "a", "b", needle=NOT_FOUND),
    door(1, "alter", F, "drop-columns", "name", needle="is a file"),
    door(1, "alter", D, "widen-column", "id", "bigint", "--json", needle=NOT_FOUND),
    door(1, "alter", T, "sideways", "a", needle="unknown action 'sideways'"),
    door(1, "alter", T, "", needle="unknown action ''"),
    door(1, "alter", T, "rename-column", "name", needle="takes 2 arguments"),
    door(1, "alter", T, "rename-column", "nope", "x", "--json", needle="no such column"),
    door(1, "alter", T, "rename-column", "name", "id", needle="already exists"),
    door(1, "alter", T, "drop-columns", needle="one or more column names"),
    door(1, "alter", T, "drop-columns", "ts", needle="sort column"),
    door(1, "alter", T, "drop-columns", ",", needle="empty column name"),
    door(1, "alter", T, "widen-column", "id", "int", "--json", needle="narrowing"),
    door(1, "alter", T, "widen-column", "id", "decimal(", needle="type 'decimal('"),
    door(1, "alter", T, "widen-column", "value", "ünïcødé", needle="unexpected character"),
    door(1, "alter", T, "add-column", "c int default 'x'", needle="bad default"),
    door(1, "alter", T, "add-column", "c int default 9" + "9" * 400, needle="out of its range"),
    door(1, "alter", T, "add-column", "c", "int", needle="quote the definition"),
    door(1, "alter", T, "add-column", "c int", "--storage-options", "{x", needle="not valid JSON"),
    door(2, "serve"),
    door(1, "serve", D, "--port", "abc", needle="--port"),
    door(1, "serve", D, "--flush-interval", "0", needle="--flush-interval"),
    door(1, "serve", D, "--flush-rows", "0", needle="--flush-rows"),
    door(1, "serve", D, "--tls-cert", F, needle="--tls-key"),
    door(1, "serve", D, "--tls-key", F, needle="--tls-cert"),
    door(1, "serve", D, "--tls-cert", M, "--tls-key", M, needle="cannot be read"),
    door(1, "serve", D, "--tls-cert", F, "--tls-key", F, needle="not a PEM file"),
    door(1, "serve", D, "--sql-timeout", "0", needle="SQL timeout"),
    door(1, "serve", D, "--sql-timeout", "inf", needle="SQL timeout"),
    door(1, "serve", D, "--sql-memory-limit", "lots", needle="SQL memory limit"),
    door(2, "serve", D, "--sql-timeout", "soon"),
]


def _fill(args: tuple[str, ...], places: Places) -> list[str]:
    named = {T: places.table, F: places.file, D: places.dir, M: places.missing}
    return [str(named.get(a, a)) for a in args]


def assert_short_error(run: Run, code: int, needle: str) -> None:
    assert run.exit_code == code, (run.exit_code, run.stdout, run.stderr)
    assert run.stdout == "", run.stdout
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    if code == 1:
        assert len(lines) == 1, run.stderr
        assert lines[0].startswith("error: ") and needle in lines[0], lines[0]
    else:
        assert lines[0].startswith("Usage: ") and "Error" in run.stderr, run.stderr
        assert len(lines) <= USAGE_LINES, run.stderr
    assert max(len(line) for line in lines) <= WIDTH or code == 1  # error lines are not cut


@pytest.mark.parametrize(("code", "args", "needle"), DOORS)
def test_a_careless_invocation_is_refused_cleanly(
    places: Places, code: int, args: tuple[str, ...], needle: str
) -> None:
    before = cl.open_table(places.table)
    run = invoke(*_fill(args, places), columns=WIDTH)
    assert_short_error(run, code, needle)
    after = cl.open_table(places.table)
    assert (after.version, after.properties) == (before.version, before.properties)
    assert places.file.read_text() == "not a table"
    assert list(places.dir.iterdir()) == [], "a refused command left files behind"
    assert not places.missing.exists(), "a command on a missing table created it"


def test_the_sweep_covers_every_command() -> None:
    tried = {tuple(door.values[1][:n]) for door in DOORS for n in (1, 2)}
    untried = [" ".join(path) for path in command_paths()[1:] if path not in tried]
    assert not untried, f"no careless invocation of {untried}"
    assert len(DOORS) >= 60


def test_ingest_with_storage_options_that_are_not_json(places: Places) -> None:
    args = ["ingest", "kafka", str(places.table), "--bootstrap-servers", "x", "--topic", "t"]
    try:
        run = invoke(*args, "--storage-options", "{not json", columns=WIDTH)
    except ValueError:
        raise AssertionError("a raw ValueError escaped") from None
    assert_short_error(run, 1, "--storage-options")


@pytest.mark.parametrize("port", ["-1", "99999"])
def test_serve_on_a_port_that_cannot_be(tmp_path: Path, port: str) -> None:
    """In a process of its own: the failing service leaves its write-ahead log open."""
    done = subprocess.run(
        [sys.executable, "-m", "carbonlite", "serve", str(tmp_path), "--port", port],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": str(WIDTH)},
    )
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) <= USAGE_LINES and done.stdout == ""
    assert not (tmp_path / ".carbonlite-serve").exists(), "a refused serve made its log"
