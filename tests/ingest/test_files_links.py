"""Issue 38 §1: a local source is a boundary, as ``carbonlite serve``'s root is
(``carbonlite/nofollow.py``): a symbolic link below it is never followed, to a file or a
directory, outside the source or inside it, dangling or not, and neither is anything that
is not a regular file (a named pipe); each is named in a warning once and counted
(``skipped_links``). A link put in a file's place after the listing is refused at the read.
From Python and from the command."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

import carbonlite as cl
import carbonlite.cli.ingest_cmd  # registers the command
from carbonlite.ingest import FileIngester, FileIngestResult
from carbonlite.ingest.file_notes import LOGGER_NAME
from carbonlite.seams import listening
from tests.cli.conftest import invoke
from tests.support.file_ingest_data import (
    BASE_MTIME,
    SCHEMA,
    WITH_PATH,
    encode,
    rows,
    rows_per_file,
    write,
)

SECRET = 666


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """``out/`` with one good file; beside it (outside the source) a secret file and a
    directory of files."""
    path = tmp_path / "out"
    path.mkdir()
    write(path, "a.json", encode("json", rows([1])), mtime=BASE_MTIME)
    write(tmp_path, "secret.json", encode("json", rows([SECRET])))
    write(tmp_path, "elsewhere/part-0.json", encode("json", rows([SECRET + 1])))
    return path


def ingest(table: cl.Table, source: Path, **kwargs: object) -> FileIngestResult:
    return FileIngester(table, str(source), format="json", **kwargs).run(  # type: ignore[arg-type]
        stop_at_end=True
    )


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER_NAME]


def test_a_link_to_a_file_outside_the_source_is_not_read(
    tmp_path: Path, source: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's case: ``src/link.json -> ../secret.json`` was ingested."""
    table = cl.create_table(tmp_path / "t", WITH_PATH)
    (source / "link.json").symlink_to("../secret.json")
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        result = ingest(table, source)
    assert (result.files, result.skipped_links) == (1, 1)
    assert rows_per_file(table) == {"a.json": 1}
    (warning,) = warnings_of(caplog)
    assert warning.startswith("'link.json' in the source ") and str(source) in warning
    assert "is a symbolic link: not followed, not read" in warning, warning
    again = ingest(table, source)  # a new run warns again; the link is still not read
    assert (again.files, again.skipped_links) == (0, 1)


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("2026-11-28", "../elsewhere"),  # a directory outside
        ("alias.json", "a.json"),  # a file inside the source: still a link
        ("sub/deep.json", "../../secret.json"),  # in a directory below the source
        ("dangling.json", "../no-such-file.json"),
    ],
    ids=["dir-outside", "file-inside", "nested", "dangling"],
)
def test_no_link_is_followed(tmp_path: Path, source: Path, name: str, target: str) -> None:
    table = cl.create_table(tmp_path / "t", WITH_PATH)
    link = source / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    result = ingest(table, source)
    assert (result.files, result.rows, result.skipped_links) == (1, 1, 1)
    assert rows_per_file(table) == {"a.json": 1}


def test_links_that_could_not_be_final_files_are_passed_over_silently(
    tmp_path: Path, source: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A hidden or temporary name, or one the glob does not take, is never read anyway."""
    table = cl.create_table(tmp_path / "t", WITH_PATH)
    for name in (".hidden.json", "_temporary/x.json", "copy.json.tmp", "notes.txt"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).symlink_to(tmp_path / "secret.json")
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        result = ingest(table, source, glob="*.json")
    assert (result.files, result.skipped_links) == (1, 0)
    assert warnings_of(caplog) == []


def test_a_named_pipe_is_not_read(
    tmp_path: Path, source: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: listed as an empty file and recorded (or a reader left waiting on it)."""
    table = cl.create_table(tmp_path / "t", WITH_PATH)
    os.mkfifo(source / "pipe.json")
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        result = ingest(table, source)
    assert (result.files, result.skipped_links) == (1, 1)
    (warning,) = warnings_of(caplog)
    assert "'pipe.json'" in warning and "is not a regular file" in warning, warning
    uri = FileIngester(table, str(source)).source.uri
    assert table.refresh().state(f"files:{uri}")["file"].to_pylist() == ["a.json"]


def test_a_link_put_in_a_files_place_after_listing_is_not_followed(
    tmp_path: Path, source: Path
) -> None:
    """Listed as a file, then swapped for a link to the secret before it is read: the read
    reaches it without following links, so it is left for the next listing, which skips
    the link."""
    table = cl.create_table(tmp_path / "t", WITH_PATH)
    write(source, "b.json", encode("json", rows([2])), mtime=BASE_MTIME + 1)
    swapped: list[str] = []

    def swap(name: str) -> None:
        if name == "files.after_list" and not swapped:
            swapped.append(name)
            (source / "b.json").unlink()
            (source / "b.json").symlink_to("../secret.json")

    with listening(swap):
        result = ingest(table, source)
    assert result.not_ready == 1
    assert (result.files, result.skipped_links) == (1, 1)
    assert rows_per_file(table) == {"a.json": 1}


def test_a_directory_swapped_for_a_link_after_listing_is_not_followed(
    tmp_path: Path, source: Path
) -> None:
    table = cl.create_table(tmp_path / "t", WITH_PATH)
    write(source, "d/part-0.json", encode("json", rows([2])), mtime=BASE_MTIME + 1)
    write(tmp_path, "elsewhere2/part-0.json", encode("json", rows([SECRET + 2])))
    swapped: list[str] = []

    def swap(name: str) -> None:
        if name == "files.after_list" and not swapped:
            swapped.append(name)
            (source / "d").rename(tmp_path / "moved-away")
            (source / "d").symlink_to(tmp_path / "elsewhere2")

    with listening(swap):
        result = ingest(table, source)
    assert result.not_ready == 1 and result.skipped_links == 1
    assert rows_per_file(table) == {"a.json": 1}


def test_the_command_warns_of_a_link_and_does_not_read_it(tmp_path: Path, source: Path) -> None:
    table = tmp_path / "t"
    cl.create_table(table, SCHEMA)
    (source / "link.json").symlink_to("../secret.json")
    args = ["ingest", "files", table, "--source", source, "--format", "json", "--stop-at-end"]
    run = invoke(*args, "--json")
    assert run.exit_code == 0, run.stderr
    out = run.json()
    assert (out["files"], out["rows"], out["skipped_links"]) == (1, 1, 1)
    assert run.stderr.startswith("warning: 'link.json' in the source "), run.stderr
    assert "is a symbolic link: not followed, not read" in run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    got = cl.open_table(table).to_arrow()["id"].to_pylist()
    assert got == [1] and SECRET not in got
