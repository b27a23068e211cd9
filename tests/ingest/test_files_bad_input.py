"""Bad input to the file ingester, from Python and from the command line: each case is one
clear ``CarbonLiteError`` (``error: ...`` and exit 1 from the command) saying what, where and
how to fix it, raised before anything is read or committed; a file that cannot be ingested
stops the ingester naming it (nothing committed is lost), or goes whole to the bad-records
table exactly once."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
import carbonlite.cli.ingest_cmd  # registers the command
from carbonlite.errors import (
    CarbonLiteError,
    InvalidOptionError,
    SchemaMismatchError,
    TableNotFoundError,
)
from carbonlite.ingest import FileIngester, IngestError
from carbonlite.ingest.files import FILE_BAD_RECORDS_SCHEMA
from carbonlite.ingest.kafka import BAD_RECORDS_SCHEMA as KAFKA_BAD_RECORDS_SCHEMA
from tests.cli.conftest import invoke
from tests.cli.test_errors import assert_one_line_error
from tests.support.file_ingest_data import BASE_MTIME, SCHEMA, WITH_PATH, encode, rows, write


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "t"
    cl.create_table(path, WITH_PATH)
    return path


def _cli(table: Path, source: Path, *extra: str) -> list[str]:
    return ["ingest", "files", str(table), "--source", str(source), *extra]


# --- arguments, from Python ----------------------------------------------------------------------

API_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("format-avro", {"format": "avro"}, "format 'avro' is not one the file ingester reads"),
    ("format-upper", {"format": "PARQUET"}, "use one of parquet, json, csv, arrow"),
    ("format-none", {"format": None}, "format None"),
    ("batch-zero", {"max_batch_rows": 0}, "max_batch_rows must be an integer of at least 1"),
    ("batch-negative", {"max_batch_rows": -3}, "not -3"),
    ("batch-float", {"max_batch_rows": 1.5}, "max_batch_rows"),
    ("batch-bool", {"max_batch_rows": True}, "max_batch_rows"),
    ("latency-zero", {"max_latency": 0}, "max_latency must be a finite number of seconds above 0"),
    ("latency-negative", {"max_latency": -1}, "max_latency"),
    ("latency-nan", {"max_latency": math.nan}, "max_latency"),
    ("latency-inf", {"max_latency": math.inf}, "max_latency"),
    ("latency-str", {"max_latency": "1s"}, "max_latency"),
    ("age-zero", {"max_file_age": 0}, "max_file_age must be a finite number of seconds above 0"),
    ("age-negative", {"max_file_age": -60}, "max_file_age"),
    ("age-nan", {"max_file_age": math.nan}, "max_file_age"),
    ("age-inf", {"max_file_age": math.inf}, "max_file_age"),
    ("glob-empty", {"glob": ""}, "glob must be a pattern of file paths relative to the source"),
    ("glob-absolute", {"glob": "/data/out/*.parquet"}, "relative to the source"),
    ("glob-int", {"glob": 5}, "glob must be a pattern"),
]


@pytest.mark.parametrize(
    ("given", "needle"), [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES]
)
def test_bad_arguments_raise_before_anything_is_read(
    table: Path, source: Path, given: dict[str, Any], needle: str
) -> None:
    write(source, "p", b"not parquet: never read")
    with pytest.raises(InvalidOptionError) as raised:
        FileIngester(str(table), str(source), **given)
    assert needle in str(raised.value), str(raised.value)
    assert "\n" not in str(raised.value)
    assert cl.open_table(table).version == 0


@pytest.mark.parametrize("value", [5, None, b"/tmp/t", ["t"]], ids=["int", "none", "bytes", "list"])
def test_table_not_a_table_or_path(source: Path, value: object) -> None:
    with pytest.raises(InvalidOptionError, match="table must be a Table or the path of one"):
        FileIngester(value, str(source))  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["", "  ", 5, None], ids=["empty", "blank", "int", "none"])
def test_source_not_a_path(table: Path, value: object) -> None:
    with pytest.raises(InvalidOptionError, match="source must be a directory path or URI"):
        FileIngester(str(table), value)  # type: ignore[arg-type]


def test_a_missing_table_says_how_to_make_one(tmp_path: Path, source: Path) -> None:
    with pytest.raises(TableNotFoundError, match="carbonlite create PATH --schema") as raised:
        FileIngester(str(tmp_path / "nope"), str(source))
    assert str(tmp_path / "nope") in str(raised.value)
    assert not (tmp_path / "nope").exists()


def test_a_source_that_is_a_file(table: Path, tmp_path: Path) -> None:
    plain = tmp_path / "part-0.parquet"
    plain.write_bytes(encode("parquet", rows([1])))
    with pytest.raises(InvalidOptionError, match="is a file, not a directory") as raised:
        FileIngester(str(table), str(plain))
    assert str(plain) in str(raised.value)


@pytest.mark.parametrize("where", ["same", "table-in-source", "source-in-table"])
def test_table_and_source_may_not_overlap(tmp_path: Path, where: str) -> None:
    if where == "table-in-source":
        source, table = tmp_path / "out", tmp_path / "out" / "t"
    elif where == "same":
        source = table = tmp_path / "t"
    else:
        table, source = tmp_path / "t", tmp_path / "t" / "segments"
    cl.create_table(table, SCHEMA)
    source.mkdir(parents=True, exist_ok=True)
    with pytest.raises(InvalidOptionError, match="overlap: keep the table out of the directory"):
        FileIngester(str(table), str(source))
    assert cl.open_table(table).version == 0


def test_bad_records_tables_that_cannot_take_the_files(
    tmp_path: Path, table: Path, source: Path
) -> None:
    with pytest.raises(InvalidOptionError, match="is the table being ingested into"):
        FileIngester(str(table), str(source), bad_records=str(table))
    kafka_bad = tmp_path / "kafka-bad"
    cl.create_table(kafka_bad, KAFKA_BAD_RECORDS_SCHEMA)
    with pytest.raises(InvalidOptionError, match="not a bad-records table of this ingester") as e:
        FileIngester(str(table), str(source), bad_records=str(kafka_bad))
    assert "'content' (binary) is missing" in str(e.value)
    plain = tmp_path / "notes.txt"
    plain.write_text("not a table")
    with pytest.raises(InvalidOptionError, match="is a file"):
        FileIngester(str(table), str(source), bad_records=str(plain))
    assert plain.read_text() == "not a table"
    existing = source / "bad"
    cl.create_table(existing, FILE_BAD_RECORDS_SCHEMA)
    with pytest.raises(InvalidOptionError, match=r"the bad_records table .* overlap"):
        FileIngester(str(table), str(source), bad_records=str(existing))


def test_a_bad_records_path_below_the_source_is_refused_before_it_exists(
    table: Path, source: Path
) -> None:
    with pytest.raises(InvalidOptionError, match="overlap"):
        FileIngester(str(table), str(source), bad_records=str(source / "bad"))


def test_a_missing_source_directory_is_an_error(table: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="does not exist"):
        FileIngester(str(table), str(tmp_path / "no-such-dir")).run(stop_at_end=True)


def test_a_map_column_cannot_be_filled_from_json(tmp_path: Path, source: Path) -> None:
    maps = tmp_path / "maps"
    cl.create_table(maps, pa.schema([("id", pa.int64()), ("m", pa.map_(pa.string(), pa.int64()))]))
    with pytest.raises(InvalidOptionError, match="cannot fill") as raised:
        FileIngester(str(maps), str(source), format="json")
    assert "'m' (map<string, int64>)" in str(raised.value)
    FileIngester(str(maps), str(source), format="parquet")  # parquet carries maps


# --- files that cannot be ingested ----------------------------------------------------------------


def _damaged() -> list[tuple[str, str, bytes, type[CarbonLiteError], str]]:
    good_parquet = encode("parquet", rows(range(3)))
    return [
        # (id, format, bytes, error without bad records, in the message)
        ("parquet-truncated", "parquet", good_parquet[: len(good_parquet) // 2], IngestError, ""),
        ("parquet-text", "parquet", b"id,name\n1,a\n", IngestError, "Parquet"),
        (
            "parquet-wrong-type",
            "parquet",
            encode("parquet", pa.table({"id": ["x"], "name": ["a"]})),
            SchemaMismatchError,
            "'id'",
        ),
        (
            "parquet-extra-column",
            "parquet",
            encode("parquet", pa.table({"id": [1], "name": ["a"], "extra": [1.5]})),
            SchemaMismatchError,
            "'extra'",
        ),
        (
            "parquet-missing-column",
            "parquet",
            encode("parquet", pa.table({"id": [1]})),
            SchemaMismatchError,
            "'name'",
        ),
        ("json-not-object", "json", b'{"id": 1, "name": "a"}\n[1, 2]\n', IngestError, ""),
        ("json-wrong-type", "json", b'{"id": "one", "name": "a"}\n', IngestError, ""),
        ("json-broken", "json", b'{"id": 1, "name": "a"}\n{"id": 2, "na', IngestError, ""),
        ("csv-bad-value", "csv", b'"id","name"\n1,"a"\nzwei,"b"\n', IngestError, "zwei"),
        ("csv-wrong-columns", "csv", b'"id","name"\n1,"a",3\n', IngestError, ""),
        ("arrow-random", "arrow", os.urandom(64) + b"\xff" * 64, IngestError, ""),
        ("arrow-truncated", "arrow", encode("arrow-file", rows(range(50)))[:200], IngestError, ""),
    ]


DAMAGED = _damaged()


@pytest.mark.parametrize(
    ("fmt", "content", "error", "needle"),
    [c[1:] for c in DAMAGED],
    ids=[c[0] for c in DAMAGED],
)
def test_a_damaged_file_stops_the_ingester_naming_it(
    table: Path, source: Path, fmt: str, content: bytes, error: type[CarbonLiteError], needle: str
) -> None:
    good = encode(fmt if fmt != "arrow" else "arrow-stream", rows(range(100, 103)))
    write(source, "a-good", good, mtime=BASE_MTIME)
    assert FileIngester(str(table), str(source), format=fmt).run(stop_at_end=True).files == 1
    write(source, "b-also-good", good, mtime=BASE_MTIME + 1)
    write(source, "2026/c-damaged", content, mtime=BASE_MTIME + 2)
    with pytest.raises(error) as raised:
        FileIngester(str(table), str(source), format=fmt).run(stop_at_end=True)
    if error is SchemaMismatchError:
        assert not isinstance(raised.value, IngestError)
    message = str(raised.value)
    assert "file '2026/c-damaged' of" in message and str(source) in message, message
    assert f"as {fmt}:" in message and "give a bad-records table" in message, message
    assert needle in message, message
    assert "\n" not in message
    after = cl.open_table(table)
    assert after.version == 1  # nothing of the batch committed, nothing committed lost
    assert sorted(after.to_arrow()["id"].to_pylist()) == [100, 101, 102]


@pytest.mark.parametrize(("fmt", "content"), [c[1:3] for c in DAMAGED], ids=[c[0] for c in DAMAGED])
def test_a_damaged_file_goes_whole_to_bad_records_once(
    tmp_path: Path, table: Path, source: Path, fmt: str, content: bytes
) -> None:
    good = encode(fmt if fmt != "arrow" else "arrow-file", rows(range(3)))
    write(source, "good", good, mtime=BASE_MTIME)
    write(source, "2026/damaged", content, mtime=BASE_MTIME + 1.5)
    write(
        source,
        "later",
        encode(fmt if fmt != "arrow" else "arrow-stream", rows([7])),
        mtime=BASE_MTIME + 2,
    )
    bad = tmp_path / "bad"
    ingester = FileIngester(str(table), str(source), format=fmt, bad_records=str(bad))
    result = ingester.run(stop_at_end=True)
    assert (result.files, result.rows, result.bad_files, result.commits) == (2, 4, 1, 1)
    got = cl.open_table(table).to_arrow()
    assert sorted(got["id"].to_pylist()) == [0, 1, 2, 7]
    assert set(got["_file_path"].to_pylist()) == {"good", "later"}
    kept = cl.open_table(bad).to_arrow()
    assert kept.schema == FILE_BAD_RECORDS_SCHEMA
    assert kept.num_rows == 1
    row = kept.to_pylist()[0]
    assert row["source"] == ingester.source.uri
    assert row["file"] == "2026/damaged"
    assert row["content"] == content
    assert row["size"] == len(content)
    assert row["modified"].timestamp() == BASE_MTIME + 1.5
    assert row["error"]
    state = cl.open_table(table).state(f"files:{ingester.source.uri}")
    assert sorted(state["file"].to_pylist()) == ["2026/damaged", "good", "later"]
    versions = (cl.open_table(table).version, cl.open_table(bad).version)
    for _ in range(2):  # a restart reads neither the bad file nor the good ones again
        again = FileIngester(str(table), str(source), format=fmt, bad_records=str(bad))
        r = again.run(stop_at_end=True)
        assert (r.files, r.bad_files, r.commits) == (0, 0, 0)
    assert (cl.open_table(table).version, cl.open_table(bad).version) == versions
    assert cl.open_table(bad).count_rows() == 1


def test_a_bad_file_kept_by_a_run_that_died_is_not_kept_twice(
    tmp_path: Path, table: Path, source: Path
) -> None:
    """The bad-records table commits before the table records the file: a run that dies in
    between (here: a crash raised at ``files.after_bad_commit``) leaves the file kept but
    not recorded; the next run records it without keeping it again."""
    from carbonlite.seams import listening

    write(source, "good", encode("parquet", rows(range(3))), mtime=BASE_MTIME)
    write(source, "damaged", b"garbage", mtime=BASE_MTIME + 1)
    bad = tmp_path / "bad"

    class Crash(Exception):
        pass

    def crash(name: str) -> None:
        if name == "files.after_bad_commit":
            raise Crash(name)

    with listening(crash), pytest.raises(Crash):
        FileIngester(str(table), str(source), bad_records=str(bad)).run(stop_at_end=True)
    assert cl.open_table(table).version == 0
    assert cl.open_table(bad).count_rows() == 1
    result = FileIngester(str(table), str(source), bad_records=str(bad)).run(stop_at_end=True)
    assert (result.files, result.bad_files) == (1, 0)
    assert cl.open_table(bad).count_rows() == 1
    assert sorted(cl.open_table(table).to_arrow()["id"].to_pylist()) == [0, 1, 2]


# --- the command ------------------------------------------------------------------------------

CLI_CASES: list[tuple[str, list[str], tuple[str, ...]]] = [
    ("format-avro", ["--format", "avro"], ("InvalidOptionError", "format 'avro'", "parquet")),
    ("batch-zero", ["--max-batch-rows", "0"], ("max_batch_rows", "at least 1")),
    ("batch-negative", ["--max-batch-rows", "-5"], ("max_batch_rows", "-5")),
    ("latency-zero", ["--max-latency", "0s"], ("max_latency", "above 0")),
    ("latency-nan", ["--max-latency", "nan"], ("max_latency", "nan")),
    ("latency-word", ["--max-latency", "soon"], ("--max-latency 'soon'", "not a duration")),
    ("age-zero", ["--max-file-age", "0d"], ("max_file_age", "above 0")),
    ("age-negative", ["--max-file-age", "-1h"], ("max_file_age",)),
    ("age-inf", ["--max-file-age", "inf"], ("max_file_age", "inf")),
    ("age-word", ["--max-file-age", "week"], ("--max-file-age 'week'",)),
    ("glob-empty", ["--glob", ""], ("glob must be a pattern",)),
    ("storage-not-json", ["--storage-options", "{nope"], ("not valid JSON",)),
    ("json-output-too", ["--json", "--format", "xml"], ("format 'xml'",)),
]


@pytest.mark.parametrize(
    ("extra", "needles"), [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES]
)
def test_bad_options_are_one_line(
    table: Path, source: Path, extra: list[str], needles: tuple[str, ...]
) -> None:
    write(source, "p", b"never read")
    run = invoke(*_cli(table, source, *extra))
    assert run.exit_code == 1
    assert_one_line_error(run, *needles)
    assert cl.open_table(table).version == 0


def test_tables_and_sources_the_command_refuses(tmp_path: Path, table: Path, source: Path) -> None:
    missing = tmp_path / "missing"
    assert_one_line_error(
        invoke(*_cli(missing, source)), "TableNotFoundError", str(missing), "carbonlite create"
    )
    assert not missing.exists()
    plain = tmp_path / "part-0"
    plain.write_bytes(b"x")
    assert_one_line_error(
        invoke(*_cli(table, plain)), "InvalidOptionError", str(plain), "is a file, not a directory"
    )
    assert_one_line_error(invoke(*_cli(table, tmp_path)), "InvalidOptionError", "overlap")
    (table / "segments").mkdir(exist_ok=True)
    assert_one_line_error(invoke(*_cli(table, table / "segments")), "InvalidOptionError", "overlap")
    run = invoke(*_cli(table, source, "--bad-records", str(table)))
    assert_one_line_error(run, "InvalidOptionError", "the table being ingested into")
    kafka_bad = tmp_path / "kafka-bad"
    cl.create_table(kafka_bad, KAFKA_BAD_RECORDS_SCHEMA)
    run = invoke(*_cli(table, source, "--bad-records", str(kafka_bad)))
    assert_one_line_error(run, "InvalidOptionError", "not a bad-records table", "'content'")
    maps = tmp_path / "maps"
    cl.create_table(maps, pa.schema([("id", pa.int64()), ("m", pa.map_(pa.string(), pa.int64()))]))
    run = invoke(*_cli(maps, source, "--format", "json"))
    assert_one_line_error(run, "InvalidOptionError", "cannot fill", "'m' (map<string, int64>)")
    assert cl.open_table(table).version == 0


@pytest.mark.parametrize(
    ("fmt", "content", "error", "needle"),
    [c[1:] for c in DAMAGED],
    ids=[c[0] for c in DAMAGED],
)
def test_a_damaged_file_is_one_line_from_the_command(
    table: Path, source: Path, fmt: str, content: bytes, error: type[CarbonLiteError], needle: str
) -> None:
    write(source, "sub/damaged", content)
    run = invoke(*_cli(table, source, "--format", fmt, "--stop-at-end"))
    assert run.exit_code == 1
    assert_one_line_error(run, error.__name__, "file 'sub/damaged'", needle)
    assert cl.open_table(table).version == 0


def test_the_command_json_output(tmp_path: Path, table: Path, source: Path) -> None:
    write(source, "a", encode("parquet", rows(range(4))), mtime=BASE_MTIME)
    write(source, "b/c", encode("parquet", rows(range(4, 6))), mtime=BASE_MTIME + 1)
    write(source, "damaged", b"garbage", mtime=BASE_MTIME + 2)
    write(source, "_SUCCESS", b"")
    bad = tmp_path / "bad"
    run = invoke(*_cli(table, source, "--stop-at-end", "--bad-records", str(bad), "--json"))
    assert run.exit_code == 0, run.stderr
    out = run.json()
    assert set(out) == {
        "files",
        "rows",
        "bad_files",
        "commits",
        "restarts",
        "pending",
        "behind_horizon",
        "replaced_files",
        "future_files",
        "skipped_links",
        "seconds",
    }
    assert {k: v for k, v in out.items() if k != "seconds"} == {
        "files": 2,
        "rows": 6,
        "bad_files": 1,
        "commits": 1,
        "restarts": 0,
        "pending": 0,
        "behind_horizon": 0,
        "replaced_files": 0,
        "future_files": 0,
        "skipped_links": 0,
    }
    assert isinstance(out["seconds"], float | int) and out["seconds"] >= 0
    again = invoke(*_cli(table, source, "--stop-at-end", "--bad-records", str(bad), "--json"))
    assert again.exit_code == 0
    assert again.json()["files"] == 0 and again.json()["bad_files"] == 0
    plain = invoke(*_cli(table, source, "--stop-at-end"))
    assert plain.exit_code == 0 and plain.stderr == ""
    assert plain.stdout.startswith("ingested 0 rows from 0 files of"), plain.stdout
    assert cl.open_table(table).count_rows() == 6
