"""Issue 38 §1: a final file replaced under the same name is a new file. The record keeps the
version of each file it read (modification time, size, and on S3 the ETag); a file listed as
another version is read whole and recorded again, with a warning, and the rows of the file
it replaced stay. Each version is read once: a file replaced while it is read is left for
the next listing; one replaced after it was read and before its commit lands as two versions;
on S3 the ETag tells a replacement within one second of the same size, and the same bytes
uploaded again are no new file. From Python and from the command."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

import carbonlite as cl
import carbonlite.cli.ingest_cmd  # registers the command
from carbonlite.ingest import FileIngester, FileIngestResult
from carbonlite.ingest.file_notes import LOGGER_NAME
from carbonlite.seams import listening
from carbonlite.storage import open_storage
from tests.cli.conftest import invoke
from tests.support.file_ingest_data import (
    BASE_MTIME,
    SCHEMA,
    WITH_PATH,
    encode,
    ids,
    put,
    rows,
    rows_per_file,
    write,
)
from tests.support.s3_server import S3Server


def ingest(table: cl.Table | str, source: str | Path, **kwargs: Any) -> FileIngestResult:
    return FileIngester(table, str(source), format="json", **kwargs).run(stop_at_end=True)


def replace(source: Path, relative: str, data: bytes, mtime: float) -> None:
    """Replace a final file the way an engine publishes one: a hidden name renamed into
    place."""
    hidden = source / f".{relative}.inprogress"
    hidden.write_bytes(data)
    os.utime(hidden, (mtime, mtime))
    os.replace(hidden, source / relative)


def versions(table: cl.Table, uri: str) -> dict[str, tuple[int, int | None]]:
    state = table.refresh().state(f"files:{uri}")
    return {
        f: (m, s)
        for f, m, s in zip(
            state["file"].to_pylist(),
            state["modified_ms"].to_pylist(),
            state["size"].to_pylist(),
            strict=True,
        )
    }


def test_a_replaced_file_is_read_as_a_new_file(
    tmp_path: Path, source: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's case: ``a.json`` (id 1) ingested, then replaced by one of ids 2 and 3.
    Before the fix the second run read nothing (``files=0``, exit 0)."""
    table = cl.create_table(tmp_path / "t", WITH_PATH)
    first = encode("json", rows([1]))
    write(source, "a.json", first, mtime=BASE_MTIME)
    assert ingest(table, source).files == 1
    second = encode("json", rows([2, 3]))
    replace(source, "a.json", second, BASE_MTIME + 5)
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        result = ingest(table, source)
    assert (result.files, result.rows, result.replaced_files) == (1, 2, 1)
    assert ids(table) == [1, 2, 3]
    assert rows_per_file(table) == {"a.json": 3}
    uri = FileIngester(table, str(source)).source.uri
    assert versions(table, uri) == {"a.json": (int((BASE_MTIME + 5) * 1000), len(second))}
    (warning,) = [r.getMessage() for r in caplog.records if r.name == LOGGER_NAME]
    assert "file 'a.json'" in warning and "was replaced since it was ingested" in warning
    assert f"{len(first)} bytes modified at 2026-09-21T14:13:20.000+00:00 then" in warning
    assert "ingested as a new file; the rows of the file it replaced stay" in warning
    again = ingest(table, source)
    assert (again.files, again.replaced_files) == (0, 0)


def test_a_replacement_with_the_same_time_is_told_by_its_size(tmp_path: Path, source: Path) -> None:
    """Replaced within the same millisecond (or by a copy that kept the time): another size
    is another file."""
    table = cl.create_table(tmp_path / "t", SCHEMA)
    write(source, "a.json", encode("json", rows([1])), mtime=BASE_MTIME)
    ingest(table, source)
    replace(source, "a.json", encode("json", rows([2, 3])), BASE_MTIME)
    result = ingest(table, source)
    assert (result.files, result.replaced_files) == (1, 1)
    assert ids(table) == [1, 2, 3]


def test_a_file_replaced_after_it_was_read_lands_as_two_versions(
    tmp_path: Path, source: Path
) -> None:
    """Replaced once it was read and found unchanged, before its commit: the version read is
    committed, and the next listing reads the new one. Each version once."""
    table = cl.create_table(tmp_path / "t", WITH_PATH)
    write(source, "a.json", encode("json", rows([1])), mtime=BASE_MTIME)
    done: list[str] = []

    def replace_after_read(name: str) -> None:
        if name == "files.after_file" and not done:
            done.append(name)
            replace(source, "a.json", encode("json", rows([2, 3])), BASE_MTIME + 1)

    with listening(replace_after_read):
        result = ingest(table, source)
    assert (result.files, result.rows, result.commits, result.replaced_files) == (2, 3, 2, 1)
    assert ids(table) == [1, 2, 3]
    assert rows_per_file(table, 1) == {"a.json": 1}


def test_a_file_replaced_while_it_is_read_is_read_once_as_the_new_version(
    tmp_path: Path, source: Path
) -> None:
    """Replaced between the listing and the read: what is read is not the version listed,
    so it is left for the next listing, which reads the new one (never both)."""
    table = cl.create_table(tmp_path / "t", WITH_PATH)
    write(source, "a.json", encode("json", rows([1])), mtime=BASE_MTIME)
    listings: list[str] = []

    def replace_after_list(name: str) -> None:
        if name == "files.after_list":
            listings.append(name)
            if len(listings) == 1:
                replace(source, "a.json", encode("json", rows([2, 3])), BASE_MTIME + 1)

    with listening(replace_after_list):
        result = ingest(table, source)
    assert (result.files, result.rows, result.not_ready, result.replaced_files) == (1, 2, 1, 0)
    assert ids(table) == [2, 3]


def test_a_bad_file_replaced_by_a_good_one_is_ingested(tmp_path: Path, source: Path) -> None:
    """A file kept as bad is fixed in place: the fixed version is a new file, read."""
    table = cl.create_table(tmp_path / "t", SCHEMA)
    bad = tmp_path / "bad"
    write(source, "a.json", b'{"id": 1, "name": "a"}\nnull\n', mtime=BASE_MTIME)
    first = ingest(table, source, bad_records=str(bad))
    assert (first.files, first.bad_files) == (0, 1)
    replace(source, "a.json", encode("json", rows([1, 2])), BASE_MTIME + 60)
    fixed = ingest(table, source, bad_records=str(bad))
    assert (fixed.files, fixed.rows, fixed.bad_files, fixed.replaced_files) == (1, 2, 0, 1)
    assert ids(table) == [1, 2]
    assert cl.open_table(bad).count_rows() == 1


def test_the_command_reads_a_replaced_file_and_warns(tmp_path: Path, source: Path) -> None:
    table = tmp_path / "t"
    cl.create_table(table, SCHEMA)
    write(source, "a.json", encode("json", rows([1])), mtime=BASE_MTIME)
    args = ["ingest", "files", table, "--source", source, "--format", "json", "--stop-at-end"]
    assert invoke(*args).exit_code == 0
    replace(source, "a.json", encode("json", rows([2, 3])), BASE_MTIME + 5)
    run = invoke(*args, "--json")
    assert run.exit_code == 0, run.stderr
    out = run.json()
    assert (out["files"], out["rows"], out["replaced_files"]) == (1, 2, 1)
    assert run.stderr.startswith("warning: file 'a.json' of "), run.stderr
    assert "was replaced since it was ingested" in run.stderr and "Traceback" not in run.stderr
    assert ids(cl.open_table(table)) == [1, 2, 3]
    again = invoke(*args, "--json")
    assert again.json()["files"] == 0 and again.stderr == ""


# --- S3: the ETag ---------------------------------------------------------------------------


@pytest.mark.s3
def test_an_object_replaced_within_a_second_with_the_same_size_is_told_by_its_etag(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """S3 times have whole seconds: an object put again at once with other bytes of the same
    size looks the same by time and size; its ETag tells. The same bytes put again are the
    same file (not read twice)."""
    options = s3_server.storage_options
    src = f"s3://{s3_server.new_bucket()}/out"
    table = cl.create_table(tmp_path / "t", WITH_PATH)
    one, two = encode("json", rows([1])), encode("json", rows([2]))
    assert len(one) == len(two)
    put(src, "a.json", one, options)
    first = ingest(table, src, storage_options=options)
    assert first.files == 1
    storage, root = open_storage(src, options)
    listed = storage.status(storage.join(root, "a.json"))
    put(src, "a.json", two, options)
    now = storage.status(storage.join(root, "a.json"))
    assert (now.size, now.etag != listed.etag) == (listed.size, True)
    result = ingest(table, src, storage_options=options)
    assert (result.files, result.replaced_files) == (1, 1)
    assert ids(table) == [1, 2]
    time.sleep(1.1)  # S3 times have whole seconds: the next put has another time
    put(src, "a.json", two, options)
    later = storage.status(storage.join(root, "a.json"))
    assert (later.etag, later.mtime > now.mtime) == (now.etag, True)
    again = ingest(table, src, storage_options=options)
    assert (again.files, again.replaced_files) == (0, 0)
    assert ids(table) == [1, 2]


@pytest.mark.s3
def test_an_object_replaced_after_listing_with_the_same_size_is_read_once(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """Listed as one version, read as another (same size: the size check cannot tell): its
    ETag after the read is not the one listed, so it is left for the next listing, and the
    version read is recorded by its own ETag (never read twice)."""
    options = s3_server.storage_options
    src = f"s3://{s3_server.new_bucket()}/out"
    table = cl.create_table(tmp_path / "t", WITH_PATH)
    put(src, "a.json", encode("json", rows([1])), options)
    listings: list[str] = []

    def replace_after_list(name: str) -> None:
        if name == "files.after_list":
            listings.append(name)
            if len(listings) == 1:
                put(src, "a.json", encode("json", rows([2])), options)

    with listening(replace_after_list):
        result = ingest(table, src, storage_options=options)
    assert (result.files, result.not_ready) == (1, 1)
    assert ids(table) == [2]
    again = ingest(table, src, storage_options=options)
    assert (again.files, again.replaced_files) == (0, 0)
    assert ids(table) == [2]
