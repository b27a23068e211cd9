"""``carbonlite alter PATH ACTION ARGS...`` end to end through the real command: each action
commits one version whose rows read as the Python API's change would make them, ``--json``
is the commit (version, operation, parameters), ``inspect`` and ``history`` show the change;
bad input is one ``error:`` line (status 1; a missing ACTION: status 2, from click), nothing
on stdout, and nothing committed."""

from __future__ import annotations

import datetime
import shutil
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from tests.cli.conftest import TOTAL_ROWS, Run
from tests.compaction.lifecycle import make_rows
from tests.support import REPO

DATA = REPO / "tests" / "data"

UTC = datetime.timezone.utc
WIDE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("n", pa.int32()),
        pa.field("f", pa.float32()),
        pa.field("p", pa.decimal128(5, 2)),
        pa.field("d", pa.date32()),
    ]
)
"""A table with a type of each widening, a partition and a key column."""


@pytest.fixture
def wide(tmp_path: Path) -> Path:
    path = tmp_path / "wide"
    t = cl.create_table(path, WIDE, partition_by=["region"], primary_key=["id"])
    t.append(
        pa.table(
            {
                "id": [1, 2],
                "region": ["eu", "us"],
                "n": pa.array([7, -7], pa.int32()),
                "f": pa.array([1.5, 2.5], pa.float32()),
                "p": pa.array([Decimal("1.25"), Decimal("-3.50")], pa.decimal128(5, 2)),
                "d": pa.array([datetime.date(2024, 1, 2), None], pa.date32()),
            },
            schema=WIDE,
        )
    )
    return path


def ok(run: Run) -> str:
    assert run.exit_code == 0, run.stderr
    assert run.stderr == ""
    return run.stdout


def rows(path: Path) -> dict[str, list[object]]:
    return cl.open_table(path).to_arrow().sort_by("id").to_pydict()


# --- each action ------------------------------------------------------------------------------


def test_rename_column(cli: Callable[..., Run], table: Path) -> None:
    before = cl.open_table(table)
    names = before.to_arrow().sort_by("id").column("name").to_pylist()
    out = ok(cli("alter", table, "rename-column", "name", "label"))
    after = cl.open_table(table)
    assert out == f"renamed column name to label in version {before.version + 1}\n"
    assert after.version == before.version + 1
    assert after.schema.names == ["id", "ts", "label", "value"]
    assert after.to_arrow().sort_by("id").column("label").to_pylist() == names
    assert after.snapshot(before.version).schema.names == ["id", "ts", "name", "value"]
    assert after.history(1)[0].operation == "RENAME COLUMN"


def test_rename_a_sort_column_keeps_its_role(cli: Callable[..., Run], table: Path) -> None:
    ok(cli("alter", table, "rename-column", "ts", "at"))
    assert cl.open_table(table).sort_columns == ("at",)


def test_drop_columns(cli: Callable[..., Run], table: Path) -> None:
    before = cl.open_table(table).version
    out = ok(cli("alter", table, "drop-columns", "value,name"))
    t = cl.open_table(table)
    assert out == f"dropped columns value, name in version {before + 1}\n"
    assert t.version == before + 1 and t.schema.names == ["id", "ts"]
    assert t.to_arrow().num_rows == TOTAL_ROWS
    assert {d.name for d in t.snapshot().metadata.dropped} == {"value", "name"}


def test_drop_columns_as_several_arguments(cli: Callable[..., Run], table: Path) -> None:
    ok(cli("alter", table, "drop-columns", "value", "name"))
    assert cl.open_table(table).schema.names == ["id", "ts"]


@pytest.mark.parametrize(
    ("column", "ddl", "arrow", "values"),
    [
        ("n", "bigint", pa.int64(), [7, -7]),
        ("f", "double", pa.float64(), [1.5, 2.5]),
        ("p", "decimal(10, 2)", pa.decimal128(10, 2), [Decimal("1.25"), Decimal("-3.50")]),
        (
            "d",
            "timestamp",
            pa.timestamp("us", tz="UTC"),
            [datetime.datetime(2024, 1, 2, tzinfo=UTC), None],
        ),
    ],
)
def test_widen_column(
    cli: Callable[..., Run],
    wide: Path,
    column: str,
    ddl: str,
    arrow: pa.DataType,
    values: list[object],
) -> None:
    before = cl.open_table(wide)
    old = before.schema.field(column).type
    out = ok(cli("alter", wide, "widen-column", column, ddl))
    t = cl.open_table(wide)
    assert out == f"widened column {column} from {old} to {arrow} in version {before.version + 1}\n"
    assert t.schema.field(column).type == arrow
    assert rows(wide)[column] == values


def test_add_column_with_a_default_of_each_kind(cli: Callable[..., Run], wide: Path) -> None:
    before = cl.open_table(wide).version
    definition = (
        "c int default -7, note string default 'it\\'s', ok boolean default true, "
        "day date default DATE '2024-02-29', "
        "at timestamp default TIMESTAMP '2024-01-01 12:00:00+02:00', "
        "ntz timestamp_ntz default TIMESTAMP '2024-01-01 12:00:00', "
        "x double default 2.5e3, q decimal(6, 2) default 12.5, plain bigint"
    )
    out = ok(cli("alter", wide, "add-column", definition))
    assert out.startswith("added columns c (int32, default -7), note (string, default ")
    assert out.rstrip().endswith(f"plain (int64) in version {before + 1}")
    got = rows(wide)
    assert got["c"] == [-7, -7] and got["note"] == ["it's", "it's"]
    assert got["ok"] == [True, True] and got["day"] == [datetime.date(2024, 2, 29)] * 2
    assert got["at"] == [datetime.datetime(2024, 1, 1, 10, tzinfo=UTC)] * 2
    assert got["ntz"] == [datetime.datetime(2024, 1, 1, 12)] * 2
    assert got["x"] == [2500.0] * 2 and got["q"] == [Decimal("12.50")] * 2
    assert got["plain"] == [None, None]


def test_writers_fill_an_added_default_in(cli: Callable[..., Run], table: Path) -> None:
    ok(cli("alter", table, "add-column", "c int default 3"))
    cl.open_table(table).append(make_rows(range(1000, 1002)))
    got = cl.open_table(table).to_arrow().column("c").to_pylist()
    assert got == [3] * (TOTAL_ROWS + 2)


def test_add_one_column_without_a_default(cli: Callable[..., Run], table: Path) -> None:
    out = ok(cli("alter", table, "add-column", "score float comment 'later'"))
    assert out.startswith("added column score (float) in version ")  # pyarrow's float32
    assert cl.open_table(table).schema.field("score").type == pa.float32()


# --- --json -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "operation", "parameters"),
    [
        (("rename-column", "n", "m"), "RENAME COLUMN", {"column": "n", "new_name": "m"}),
        (("drop-columns", "f,n"), "DROP COLUMNS", {"columns": "f,n"}),
        (("widen-column", "n", "bigint"), "WIDEN COLUMN", {"column": "n", "from": "int32", "to": "int64"}),
        (("add-column", "a int default 1, b string"), "ADD COLUMNS", {"columns": "a,b", "defaults": "a"}),
    ],
)  # fmt: skip
def test_json_is_the_commit(
    cli: Callable[..., Run],
    wide: Path,
    args: tuple[str, ...],
    operation: str,
    parameters: dict[str, str],
) -> None:
    before = cl.open_table(wide).version
    run = cli("alter", wide, *args, "--json")
    ok(run)
    assert run.json() == {"version": before + 1, "operation": operation, "parameters": parameters}
    assert cl.open_table(wide).history(1)[0].parameters == parameters


def test_storage_options_are_taken(cli: Callable[..., Run], table: Path) -> None:
    ok(cli("alter", table, "drop-columns", "value", "--storage-options", "{}"))
    run = cli("alter", table, "drop-columns", "name", "--storage-options", "[]")
    assert run.exit_code == 1 and "JSON object" in run.stderr
    assert cl.open_table(table).schema.names == ["id", "ts", "name"]


# --- inspect and history ----------------------------------------------------------------------


def _evolved(cli: Callable[..., Run], wide: Path) -> None:
    for args in (
        ("rename-column", "n", "count"),
        ("widen-column", "count", "bigint"),
        ("drop-columns", "f"),
        ("add-column", "f int default 5, note string default 'x'"),
    ):
        ok(cli("alter", wide, *args))


def test_inspect_shows_ids_physical_names_defaults_and_dropped_columns(
    cli: Callable[..., Run], wide: Path
) -> None:
    _evolved(cli, wide)
    info = cli("inspect", wide, "--json").json()
    by_name = {c["name"]: c for c in info["schema"]}
    assert [c["id"] for c in info["schema"]] == [1, 2, 3, 5, 6, 7, 8]
    assert by_name["count"]["physical"] == "n" and by_name["count"]["former_names"] == ["n"]
    assert by_name["count"]["type"] == "int64"
    # the new 'f' is a new column: its pages are never the dropped 'f's
    assert by_name["f"]["id"] == 7 and by_name["f"]["physical"].startswith("col-7-")
    assert (by_name["f"]["default"], by_name["f"]["default_literal"]) == (5, "5")
    assert (by_name["note"]["default"], by_name["note"]["default_literal"]) == ("x", "'x'")
    assert by_name["id"]["default"] is None and not by_name["id"]["has_default"]
    assert info["dropped_columns"] == [
        {"id": 4, "name": "f", "physical": "f", "version": info["version"] - 1}
    ]
    assert info["last_column_id"] == 8
    human = ok(cli("inspect", wide))
    lines = [line.rstrip() for line in human.splitlines()]
    count = next(line for line in lines if " count " in line).split()
    assert count[0] == "3" and count[-1] == "n"  # id first, physical name last
    f = next(line for line in lines if line.split()[:2] == ["7", "f"]).split()
    assert f[-1] == by_name["f"]["physical"] and "5" in f
    assert "'x'" in next(line for line in lines if " note " in line)
    dropped = lines[lines.index("Dropped columns") + 3].split()
    assert dropped == ["4", "f", "f", str(info["version"] - 1)]


def test_inspect_of_a_table_without_changes_has_no_extra_columns(
    cli: Callable[..., Run], table: Path
) -> None:
    human = ok(cli("inspect", table))
    assert "Dropped columns" not in human and "physical name" not in human
    assert "default " not in human.split("Properties")[0]


def operation_cells(out: str) -> list[str]:
    """The ``operation`` cell of each line of ``history``'s table, its wrapped lines joined."""
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("version "))
    begin = lines[header].index("operation")
    end = lines[header].index("rows +")
    cells: list[str] = []
    for line in lines[header + 2 :]:
        if line.startswith("("):  # the note of the columns left out
            break
        text = line[begin:end].strip()
        if line[:7].strip():
            cells.append(text)
        elif text:
            cells[-1] += " " + text
    return cells


@pytest.mark.parametrize("width", [80, 200])
def test_history_shows_what_each_schema_change_did(
    cli: Callable[..., Run], wide: Path, width: int
) -> None:
    _evolved(cli, wide)
    out = ok(cli("history", wide, "-n", "5", columns=width))
    assert operation_cells(out) == [
        "ADD COLUMNS f, note (defaults for f, note)",
        "DROP COLUMNS f",
        "WIDEN COLUMN count: int32 -> int64",
        "RENAME COLUMN n -> count",
        "UPSERT",
    ]
    assert all(len(line) <= width for line in out.splitlines())
    records = cli("history", wide, "-n", "1", "--json").json()
    assert records[0]["parameters"] == {"columns": "f,note", "defaults": "f,note"}


def test_a_table_of_format_5_gets_ids_with_its_first_change(
    cli: Callable[..., Run], tmp_path: Path
) -> None:
    path = tmp_path / "old"
    shutil.copytree(DATA / "golden_v5", path)
    before = cl.open_table(path)
    assert "id  column" not in ok(cli("inspect", path))  # no ids to show yet
    assert {c["id"] for c in cli("inspect", path, "--json").json()["schema"]} == {None}
    ok(cli("alter", path, "rename-column", "name", "label"))
    after = cl.open_table(path)
    assert after.version == before.version + 1
    assert after.snapshot().metadata.format_version == 6
    info = cli("inspect", path, "--json").json()
    assert [c["id"] for c in info["schema"]] == list(range(1, len(before.schema) + 1))
    assert info["schema"][1]["physical"] == "name"
    assert "id  column" in ok(cli("inspect", path))


def test_a_table_of_format_2_needs_upgrade_first(cli: Callable[..., Run], tmp_path: Path) -> None:
    path = tmp_path / "older"
    shutil.copytree(DATA / "golden_v2", path)
    before = cl.open_table(path).version
    run = cli("alter", path, "drop-columns", "name")
    assert run.exit_code == 1 and len(run.stderr.splitlines()) == 1
    assert "carbonlite upgrade PATH" in run.stderr
    assert cl.open_table(path).version == before


# --- bad input --------------------------------------------------------------------------------

SCHEMA = "SchemaMismatchError"
BAD = "InvalidOptionError"
REFUSED = [
    # (arguments after PATH, exit status, what the error line holds)
    (("rename-column", "nope", "x"), 1, f"{SCHEMA}: cannot rename the column 'nope'"),
    (("rename-column", "n", "id"), 1, "column 'id' already exists"),
    (("rename-column", "n", ""), 1, SCHEMA),
    (("drop-columns", "nope"), 1, "'nope' in"),
    (("drop-columns", "n,nope"), 1, "no such column"),
    (("drop-columns", "region"), 1, "'region' is a partition column"),
    (("drop-columns", "id"), 1, "'id' is a primary-key column"),
    (("drop-columns", "id,region,n,f,p,d"), 1, "it cannot be dropped"),
    (("drop-columns", "n,n"), 1, "given twice"),
    (("drop-columns", "n,,f"), 1, "empty column name"),
    (("widen-column", "nope", "bigint"), 1, "no such column"),
    (("widen-column", "n", "bogus"), 1, f"{BAD}: type 'bogus': unknown type 'bogus' for 'n'"),
    (("widen-column", "n", "bigint extra"), 1, "unexpected 'extra' after the type"),
    (("widen-column", "n", "smallint"), 1, "that is a narrowing"),
    (("widen-column", "n", "string"), 1, "cannot widen column 'n'"),
    (("widen-column", "id", "decimal(30, 0)"), 1, "cannot widen column 'id'"),
    (("widen-column", "p", "decimal(10, 3)"), 1, "cannot widen column 'p'"),
    (("add-column", "c int default 'x'"), 1, "bad default 'x' for column 'c' (int32): give a whole number"),
    (("add-column", "c tinyint default 300"), 1, "out of its range, -128 to 127"),
    (("add-column", "c int default 1.5"), 1, "give a whole number"),
    (("add-column", "c decimal(4, 2) default 1.234"), 1, "does not fit"),
    (("add-column", "c date default DATE '2024-02-30'"), 1, "is not a date"),
    (("add-column", "c date default 5"), 1, "give DATE 'yyyy-mm-dd'"),
    (("add-column", "c timestamp default TIMESTAMP 'noon'"), 1, "is not a timestamp"),
    (("add-column", "c timestamp_ntz default TIMESTAMP '2024-01-01 00:00+01:00'"), 1, "offset"),
    (("add-column", "c boolean default maybe"), 1, "expected a literal after DEFAULT"),
    (("add-column", "c boolean default 1"), 1, "give true or false"),
    (("add-column", "c string default 5"), 1, "give 'quoted text'"),
    (("add-column", "c int default null"), 1, "leave DEFAULT out"),
    (("add-column", "c int default"), 1, "found nothing (at the end)"),
    (("add-column", "c array<int> default 1"), 1, "defaults are for"),
    (("add-column", "c int not null"), 1, "must be nullable"),
    (("add-column", "n int"), 1, "column 'n' already exists"),
    (("add-column", "c int, c string"), 1, "more than once"),
    (("add-column", "c int; drop table"), 1, "unexpected character ';'"),
    (("add-column", ""), 1, "no column given"),
    (("add-column", "c", "int", "default", "0"), 1, "quote the definition"),
    (("rename-column", "n"), 1, "rename-column takes 2 arguments, got 1"),
    (("rename-column", "n", "m", "o"), 1, "got 3"),
    (("widen-column", "n"), 1, "widen-column takes 2 arguments"),
    (("drop-columns",), 1, "one or more column names, got 0"),
    (("add-column",), 1, "add-column takes 1 argument, got 0"),
    (("rename-columns", "n", "m"), 1, "unknown action 'rename-columns'; the actions are"),
    (("",), 1, "unknown action ''"),
    ((), 2, "Missing argument 'ACTION'"),
    (("rename-column", "n", "m", "--bogus"), 2, "No such option"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "code", "needle"), REFUSED, ids=lambda v: repr(v)[:60])
def test_bad_input_is_one_line_and_commits_nothing(
    cli: Callable[..., Run], wide: Path, args: tuple[str, ...], code: int, needle: str
) -> None:
    before = cl.open_table(wide)
    run = cli("alter", wide, *args, columns=80)
    assert run.exit_code == code, (run.exit_code, run.stdout, run.stderr)
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    if code == 1:
        assert len(run.stderr.splitlines()) == 1, run.stderr
        assert run.stderr.startswith("error: ") and needle in run.stderr, run.stderr
    else:
        assert run.stderr.startswith("Usage: ") and needle in run.stderr, run.stderr
    after = cl.open_table(wide)
    assert after.version == before.version
    assert after.schema == before.schema


@pytest.mark.parametrize("flag", [(), ("--json",)])
def test_a_missing_table_is_one_line(
    cli: Callable[..., Run], tmp_path: Path, flag: tuple[str, ...]
) -> None:
    run = cli("alter", tmp_path / "missing", "rename-column", "a", "b", *flag)
    assert run.exit_code == 1 and run.stdout == ""
    assert run.stderr.startswith("error: TableNotFoundError: ")
    assert not (tmp_path / "missing").exists()


def test_help_lists_every_action(cli: Callable[..., Run]) -> None:
    text = " ".join(ok(cli("alter", "--help", columns=100)).split())
    for action in ("rename-column OLD NEW", "drop-columns A,B", "widen-column COL TYPE"):
        assert action in text
    assert 'add-column "DEFINITION"' in text
