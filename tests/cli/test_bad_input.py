"""Bad input on the command line: every command answers with one ``error:`` line and a non-zero
exit status, never a traceback, and leaves the table's committed content as it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import carbonlite as cl
from carbonlite.errors import StorageError
from carbonlite.storage.local import LocalStorage
from tests.cli.conftest import COMMANDS, TOTAL_ROWS, Run
from tests.cli.test_errors import assert_one_line_error
from tests.support.tables import rows


def committed(path: Path) -> tuple[int, list[dict[str, Any]]]:
    t = cl.open_table(path)
    return t.version, rows(t.to_arrow().sort_by("id"))


TABLE_COMMANDS = [c for c in COMMANDS if c not in ("demo", "create")]  # create: test_create


@pytest.mark.parametrize("command", TABLE_COMMANDS)
def test_every_command_on_a_plain_file(
    cli: Callable[..., Run], tmp_path: Path, table: Path, command: str
) -> None:
    """Was ``NotADirectoryError`` with a traceback-like message."""
    before = committed(table)
    plain = tmp_path / "notes.txt"
    plain.write_text("not a table")
    run = cli(command, plain)
    assert run.exit_code == 1
    assert_one_line_error(run, "TableNotFoundError", str(plain), "is a file, not a directory")
    assert plain.read_text() == "not a table"
    assert committed(table) == before


def test_demo_into_a_plain_file(cli: Callable[..., Run], tmp_path: Path) -> None:
    plain = tmp_path / "notes.txt"
    plain.write_text("not a directory")
    run = cli("demo", "--dir", plain, "--rows", 10)
    assert_one_line_error(run, "InvalidOptionError", str(plain), "is a file")
    assert plain.read_text() == "not a directory"


@pytest.mark.parametrize("limit", ["-1", "0"])
def test_history_limit_below_one(cli: Callable[..., Run], table: Path, limit: str) -> None:
    """``history --limit -1`` exited 0 with an empty list. A limit is 1 or more; leave it out
    to list every commit."""
    before = committed(table)
    run = cli("history", table, "--limit", limit)
    assert run.exit_code == 1
    assert_one_line_error(run, "InvalidOptionError", "limit", "1 or more", limit)
    assert len(cli("history", table, "--limit", "2", "--json").json()) == 2
    assert committed(table) == before


def test_segment_ids_that_are_paths(cli: Callable[..., Run], table: Path) -> None:
    before = committed(table)
    run = cli("compact", table, "--type", "custom", "--segments", "0,../1")
    assert_one_line_error(run, "InvalidOptionError", "segment id '../1'", "contains '/'")
    assert committed(table) == before


def test_unreachable_s3_endpoint(cli: Callable[..., Run]) -> None:
    """The reported case: a traceback. Whichever way the S3 layer fails (connection refused,
    or no S3 support installed) the command prints one line."""
    options = '{"endpoint_url": "http://127.0.0.1:1", "key": "k", "secret": "s"}'
    run = cli("inspect", "s3://bucket/t", "--storage-options", options)
    assert run.exit_code == 1
    assert_one_line_error(run, "StorageError")


def test_a_storage_error_is_one_line(
    cli: Callable[..., Run], table: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = committed(table)

    def refuse(self: LocalStorage, path: str, start: int = 0, end: int | None = None) -> bytes:
        raise StorageError(f"read of {path!r} failed: endpoint unreachable")

    with monkeypatch.context() as patched:
        patched.setattr(LocalStorage, "read", refuse)
        for command in ("inspect", "history", "verify"):
            run = cli(command, table)
            assert run.exit_code == 1
            assert_one_line_error(run, "StorageError", "endpoint unreachable")
    assert committed(table) == before


def test_an_unexpected_os_error_from_storage_is_one_line(
    cli: Callable[..., Run], table: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``OSError`` the storage layer did not translate (network, permissions, disk) names
    the table and what to check, on one line."""
    before = committed(table)

    def reset(self: LocalStorage, path: str, start: int = 0, end: int | None = None) -> bytes:
        raise ConnectionResetError(104, "Connection reset by peer")

    with monkeypatch.context() as patched:
        patched.setattr(LocalStorage, "read", reset)
        for command in ("inspect", "segments", "clean", "recover"):
            run = cli(command, table)
            assert run.exit_code == 1
            assert_one_line_error(
                run,
                "ConnectionResetError",
                f"storage failed for {str(table)!r}",
                "Connection reset by peer",
                "--storage-options",
            )
    assert committed(table) == before
    assert committed(table)[0] == cl.open_table(table).version
    assert len(committed(table)[1]) == TOTAL_ROWS
