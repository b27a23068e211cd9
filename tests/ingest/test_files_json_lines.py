"""Issue 38 §1: the lines of a JSON file are decoded by the decoder the Kafka ingester uses
(``carbonlite/ingest/decode.py``), under one rule: a line is a row when it is one JSON
object whose fields fit the table. A ``null`` line is no all-null row (with or without a
bad-records table); every kind of value the decoder refuses makes the file bad, naming the
line and the decoder's own reason; a ``null`` first line no longer kills the process
(pyarrow's reader dies with SIGSEGV on it, apache/arrow#47409); a field the line leaves out
gets its column's default, as a Kafka message's does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.errors import SchemaMismatchError
from carbonlite.ingest import FileIngester, FileIngestResult, IngestError, file_formats
from carbonlite.ingest.decode import decode_values
from tests.support.file_ingest_data import BASE_MTIME, SCHEMA, encode, ids, rows, write

REPO = Path(__file__).resolve().parents[2]


def ingest(table: cl.Table, source: Path, **kwargs: object) -> FileIngestResult:
    return FileIngester(table, str(source), format="json", **kwargs).run(  # type: ignore[arg-type]
        stop_at_end=True
    )


def test_a_null_line_is_no_row_without_a_bad_records_table(tmp_path: Path, source: Path) -> None:
    """Before the fix the file's three lines became three rows, the second all null."""
    table = cl.create_table(tmp_path / "t", SCHEMA)
    write(source, "a.json", b'{"id": 1, "name": "a"}\nnull\n{"id": 2, "name": "b"}\n')
    with pytest.raises(IngestError) as raised:
        ingest(table, source)
    message = str(raised.value)
    assert "file 'a.json'" in message, message
    assert "line 2: not a JSON object: the value is null" in message, message
    assert table.refresh().version == 0 and table.count_rows() == 0


def test_a_null_line_makes_the_file_bad_with_a_bad_records_table(
    tmp_path: Path, source: Path
) -> None:
    table = cl.create_table(tmp_path / "t", SCHEMA)
    content = b'{"id": 1, "name": "a"}\nnull\n{"id": 2, "name": "b"}\n'
    write(source, "a.json", content, mtime=BASE_MTIME)
    write(source, "b.json", encode("json", rows([3])), mtime=BASE_MTIME + 1)
    bad = tmp_path / "bad"
    result = ingest(table, source, bad_records=str(bad))
    assert (result.files, result.rows, result.bad_files) == (1, 1, 1)
    got = table.refresh().to_arrow()
    assert got.to_pylist() == [{"id": 3, "name": "n3"}]  # no all-null row
    kept = cl.open_table(bad).to_arrow().to_pylist()
    assert [(k["file"], k["content"]) for k in kept] == [("a.json", content)]
    assert kept[0]["error"] == "line 2: not a JSON object: the value is null"


BAD_LINES = [
    ("null", b"null"),
    ("number", b"42"),
    ("string", b'"text"'),
    ("array", b'[{"id": 1}]'),
    ("boolean", b"true"),
    ("nan", b'{"id": 1, "name": NaN}'),
    ("infinity", b'{"id": -Infinity, "name": "x"}'),
    ("repeated-key", b'{"id": 1, "id": 2, "name": "x"}'),
    ("two-values", b'{"id": 1, "name": "x"} {"id": 2, "name": "y"}'),
    ("not-utf8", b'{"id": 1, "name": "\xff"}'),
    ("cut-short", b'{"id": 1, "name": "x'),
    ("wrong-type", b'{"id": "one", "name": "x"}'),
    ("int64-overflow", b'{"id": 9223372036854775808, "name": "x"}'),
]


@pytest.mark.parametrize("line", [c[1] for c in BAD_LINES], ids=[c[0] for c in BAD_LINES])
def test_every_line_the_decoder_refuses_makes_the_file_bad_for_the_same_reason(
    tmp_path: Path, source: Path, line: bytes
) -> None:
    """One rule for both ingesters: the file names the line and gives the reason the Kafka
    ingester's decoder gives for the same value as a message."""
    table = cl.create_table(tmp_path / "t", SCHEMA)
    write(source, "f.json", b'{"id": 1, "name": "ok"}\n\n' + line + b"\n")
    (reason,) = [why for _, why in decode_values([line], SCHEMA, repr(table.path)).bad]
    bad = tmp_path / "bad"
    result = ingest(table, source, bad_records=str(bad))
    assert (result.files, result.bad_files) == (0, 1)
    assert cl.open_table(bad).to_arrow()["error"].to_pylist() == [f"line 3: {reason}"]
    assert table.refresh().count_rows() == 0


def test_blank_lines_and_crlf_endings_hold_no_value(tmp_path: Path, source: Path) -> None:
    table = cl.create_table(tmp_path / "t", SCHEMA)
    write(source, "f.json", b'\r\n{"id": 1, "name": "a"}\r\n  \t\r\n{"id": 2, "name": "b"}')
    result = ingest(table, source)
    assert (result.files, result.rows, result.bad_files) == (1, 2, 0)
    assert ids(table) == [1, 2]


def test_lines_are_numbered_across_blocks(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file read in blocks of 1 KiB (4 MiB normally): every row, and a bad line's number
    counted over the whole file."""
    monkeypatch.setattr(file_formats, "_BLOCK_BYTES", 1024)
    table = cl.create_table(tmp_path / "t", SCHEMA)
    good = encode("json", rows(range(500)))
    write(source, "good.json", good, mtime=BASE_MTIME)
    lines = good.splitlines(keepends=True)
    write(source, "bad.json", b"".join([*lines[:377], b"[]\n", *lines[377:]]), mtime=BASE_MTIME + 1)
    bad = tmp_path / "bad"
    result = ingest(table, source, bad_records=str(bad))
    assert (result.files, result.rows, result.bad_files) == (1, 500, 1)
    assert ids(table) == list(range(500))
    assert cl.open_table(bad).to_arrow()["error"].to_pylist() == [
        "line 378: not a JSON object: the value is an array"
    ]


def test_a_field_left_out_gets_its_columns_default(tmp_path: Path, source: Path) -> None:
    """As a Kafka message's: the default when the field is left out, null when given null."""
    table = cl.create_table(tmp_path / "t", SCHEMA)
    table.add_columns(pa.field("n", pa.int64()), defaults={"n": 7})
    write(source, "f.json", b'{"id": 1, "name": "a"}\n{"id": 2, "name": "b", "n": null}\n')
    ingest(table, source)
    got = table.refresh().to_arrow().sort_by("id").to_pydict()
    assert got == {"id": [1, 2], "name": ["a", "b"], "n": [7, None]}


def test_a_line_naming_a_renamed_column_is_a_schema_mismatch(tmp_path: Path, source: Path) -> None:
    table = cl.create_table(tmp_path / "t", SCHEMA)
    table.rename_column("name", "label")
    write(source, "old.json", b'{"id": 1, "label": "a"}\n{"id": 2, "name": "b"}\n')
    with pytest.raises(SchemaMismatchError) as raised:
        ingest(table, source)
    message = str(raised.value)
    assert "file 'old.json'" in message and "line 2: names a column" in message, message
    assert "'name' was renamed to 'label'" in message, message
    assert table.refresh().count_rows() == 0


def test_a_null_first_line_is_one_line_from_the_command_not_a_crash(
    tmp_path: Path, source: Path
) -> None:
    """pyarrow's JSON reader dies with SIGSEGV on a block whose first line is ``null``: the
    command, in a process of its own, died at every run (exit -11). It reaches the reader no
    more: one error line naming the file and line, exit 1, nothing committed."""
    table = tmp_path / "t"
    cl.create_table(table, SCHEMA)
    write(source, "a.json", b'null\n{"id": 1, "name": "a"}\n')
    args = ["ingest", "files", str(table), "--source", str(source), "--format", "json"]
    done = subprocess.run(
        [sys.executable, "-m", "carbonlite", *args, "--stop-at-end"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert done.stderr.startswith("error: IngestError: file 'a.json' of "), done.stderr
    assert "line 1: not a JSON object: the value is null" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert cl.open_table(table).version == 0
