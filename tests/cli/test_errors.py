"""Errors from the command line: one line on stderr starting with ``error:`` that says what
and where, no traceback, a non-zero exit status, and nothing on stdout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import carbonlite as cl
from tests.cli.conftest import Run


def assert_one_line_error(run: Run, *needles: str) -> str:
    assert run.exit_code != 0
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{run.stderr}"
    assert lines[0].startswith("error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["inspect"],
        ["inspect", "--json"],
        ["segments"],
        ["history"],
        ["compact"],
        ["handoff"],
        ["clean"],
        ["recover"],
        ["verify", "--json"],
    ],
)
def test_missing_table(cli: Callable[..., Run], tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "no-such-table"
    run = cli(command[0], missing, *command[1:])
    assert run.exit_code == 1
    assert_one_line_error(run, "TableNotFoundError", str(missing))
    assert not missing.exists(), "a command on a missing table must not create it"


def test_error_names_a_path_with_brackets_verbatim(cli: Callable[..., Run], tmp_path: Path) -> None:
    """Error messages are printed as text: a path such as ``events[bold]`` or ``x[/y]`` must not
    be taken for console markup (dropped from the message, or crashing the printer)."""
    for name in ("events[bold]", "x[/y]"):
        missing = tmp_path / name
        run = cli("inspect", missing)
        assert_one_line_error(run, "TableNotFoundError", str(missing))


def test_bad_compaction_type(cli: Callable[..., Run], table: Path) -> None:
    version = cl.open_table(table).version
    run = cli("compact", table, "--type", "sideways")
    assert run.exit_code == 1
    assert_one_line_error(run, "InvalidOptionError", "'sideways'", "minor")
    assert cl.open_table(table).version == version


@pytest.mark.parametrize("retention", ["0s", "30m", "59 minutes"])
def test_retention_too_short(cli: Callable[..., Run], table: Path, retention: str) -> None:
    version = cl.open_table(table).version
    run = cli("clean", table, "--retention", retention)
    assert run.exit_code == 1
    assert_one_line_error(run, "InvalidOptionError", "1 hour", "--force")
    assert cl.open_table(table).version == version


def test_bad_values(cli: Callable[..., Run], table: Path) -> None:
    assert_one_line_error(cli("clean", table, "--retention", "soon"), "not a duration")
    assert_one_line_error(cli("recover", table, "--min-age", "soon"), "not a duration")
    assert_one_line_error(cli("inspect", table, "--version", 99), "no version 99")
    assert_one_line_error(
        cli("inspect", table, "--storage-options", "{not json"), "storage-options"
    )


def test_custom_compaction_with_bad_ids(cli: Callable[..., Run], table: Path) -> None:
    run = cli("compact", table, "--type", "custom", "--segments", "0,nope,5")
    assert run.exit_code == 1
    assert run.stdout == "" and "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert lines[0].startswith("error: InvalidOptionError: cannot compact segments")
    assert [line for line in lines if line.startswith("error:")] == [lines[0]]
    details = "\n".join(lines[1:])
    assert "'nope' does not exist" in details and "'5' is STREAMING" in details
    assert "'0'" not in details  # segment 0 is fine (STREAMING_FINISH)


def test_usage_errors_exit_2(cli: Callable[..., Run], table: Path) -> None:
    run = cli("inspect")
    assert run.exit_code == 2
    run = cli("inspect", table, "--no-such-option")
    assert run.exit_code == 2
    assert "Traceback" not in run.stderr
