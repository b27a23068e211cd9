"""``carbonlite create``: a table from Spark DDL, with its layout; bad DDL and bad options are
one ``error:`` line and exit 1 (2 for usage), and leave nothing behind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from tests.cli.conftest import Run
from tests.cli.test_errors import assert_one_line_error

DDL = "id bigint not null, ts timestamp, name string, price decimal(10,2), tags array<string>"


def test_create_with_every_option(cli: Callable[..., Run], tmp_path: Path) -> None:
    path = tmp_path / "events"
    run = cli(
        "create",
        path,
        "--schema",
        DDL,
        "--partition-by",
        "bucket(4, id), day(ts)",
        "--primary-key",
        "id",
        "--sort-by",
        "ts",
        "--property",
        "blocklet_max_rows=1000",
        "--property",
        "user.owner=ingest",
        "--json",
    )
    assert run.exit_code == 0, run.stderr
    info = run.json()
    t = cl.open_table(path)
    assert t.schema == pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("name", pa.string()),
            ("price", pa.decimal128(10, 2)),
            ("tags", pa.list_(pa.string())),
        ]
    )
    assert list(t.partition_by) == info["partition_by"] == ["bucket(4, id)", "day(ts)"]
    assert list(t.primary_key) == info["primary_key"] == ["id"]
    assert list(t.sort_columns) == info["sort_columns"] == ["ts"]
    assert t.properties["blocklet_max_rows"] == "1000"
    assert info["properties"]["user.owner"] == "ingest"
    assert info["version"] == t.version == 0
    t.append(
        pa.table(
            {
                "id": pa.array([1], pa.int64()),
                "ts": pa.array([0], pa.timestamp("us", tz="UTC")),
                "name": ["a"],
                "price": pa.array([None], pa.decimal128(10, 2)),
                "tags": [["x"]],
            }
        )
    )
    assert cl.open_table(path).count_rows() == 1


def test_create_human_output_and_repeated_options(cli: Callable[..., Run], tmp_path: Path) -> None:
    path = tmp_path / "t"
    run = cli("create", path, "--schema", "a int, b string", "--sort-by", "a", "--sort-by", "b")
    assert run.exit_code == 0, run.stderr
    assert run.stdout.startswith(f"Created table {path} (version 0, id ")
    assert "sorted by: a, b" in run.stdout and "int32" in run.stdout
    assert list(cl.open_table(path).sort_columns) == ["a", "b"]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--schema", "id integr"], ("InvalidOptionError", "unknown type 'integr' for 'id'")),
        (["--schema", "bigint"], ("column 'bigint' has no type",)),
        (["--schema", ", id bigint"], ("expected a column name",)),
        (["--schema", "id int, id string"], ("names 'id' more than once",)),
        (["--schema", "tags array<string"], ("expected '>' to close array<",)),
        (["--schema", "p decimal(10,2"], ("expected ')' to close decimal(",)),
        (["--schema", "id int)"], ("unbalanced ')'",)),
        (["--schema", ""], ("the schema is empty",)),
        (["--schema", "p decimal(40,2)"], ("out of range",)),
        (["--schema", "x interval year to month"], ("only day-time intervals",)),
        (["--schema", "id int", "--partition-by", "region"], ("unknown column 'region'",)),
        (["--schema", "id int", "--partition-by", "bucket(4, nope)"], ("'nope'",)),
        (["--schema", "id int", "--partition-by", "day(id)"], ("needs a date or timestamp",)),
        (["--schema", "id int", "--primary-key", "key"], ("primary key column 'key'",)),
        (["--schema", "id int", "--primary-key", "id,"], ("--primary-key", "empty name")),
        (["--schema", "id int", "--sort-by", "x", "--sort-by", "y"], ("'x'", "'y'")),
        (["--schema", "m map<string,int>", "--sort-by", "m"], ("has no order",)),
        (["--schema", "id int", "--property", "nope=1"], ("'nope' is not a table property",)),
        (["--schema", "id int", "--property", "blocklet_max_rows=x"], ("blocklet_max_rows",)),
        (["--schema", "id int", "--property", "novalue"], ("'novalue' is not KEY=VALUE",)),
        (["--schema", "id int", "--property", "a=1", "--property", "a=2"], ("'a' twice",)),
        (["--schema", "id int", "--storage-options", "{bad"], ("not valid JSON",)),
        (["--schema", "id int", "--storage-options", "[]"], ("a JSON object",)),
    ],
)
def test_bad_ddl_and_options_are_one_line(
    cli: Callable[..., Run], tmp_path: Path, args: list[str], needles: tuple[str, ...]
) -> None:
    path = tmp_path / "t"
    run = cli("create", path, *args)
    assert run.exit_code == 1
    assert_one_line_error(run, *needles)
    assert not path.exists(), "a failed create must leave nothing"


def test_where_a_table_cannot_go(cli: Callable[..., Run], tmp_path: Path) -> None:
    path = tmp_path / "t"
    assert cli("create", path, "--schema", "id int").exit_code == 0
    run = cli("create", path, "--schema", "id bigint")
    assert_one_line_error(run, "TableExistsError", str(path))
    assert cl.open_table(path).schema == pa.schema([("id", pa.int32())])
    plain = tmp_path / "notes.txt"
    plain.write_text("not a table")
    assert_one_line_error(cli("create", plain, "--schema", "id int"), "is a file")
    assert plain.read_text() == "not a table"


def test_usage_errors_exit_2(cli: Callable[..., Run], tmp_path: Path) -> None:
    run = cli("create", tmp_path / "t")
    assert run.exit_code == 2 and "Missing option '--schema'" in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "t").exists()
