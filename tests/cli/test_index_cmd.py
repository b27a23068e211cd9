"""``carbonlite index build|show``: bloom filters of a table's blocklets on the command line
(docs/CLI.md, "index"; docs/FILTERS.md, "Bloom filters").

The ``table`` fixture (tests/cli/conftest.py) has 16 versions: five finished segments and a
streaming one, 25 rows a blocklet, no bloom filters. ``build`` gives its blocklets filters in
one commit, ``show`` reads the log alone; bad columns are refused with one ``error:`` line
naming them, and nothing is committed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from tests.cli.conftest import TOTAL_ROWS, Run
from tests.cli.test_errors import assert_one_line_error
from tests.compaction.lifecycle import make_rows

BUILD_KEYS = {"version", "columns", "blocklets", "files", "bytes_written", "rows_read", "kind"}
SHOW_KEYS = {
    "columns",
    "fpp",
    "blocklets",
    "blocklets_with_filters",
    "bloom_bytes",
    "secondary_index_columns",
    "blocklets_with_secondary_index",
    "secondary_index_bytes",
}


def state(path: Path) -> tuple[int, dict[str, str]]:
    t = cl.open_table(path)
    return t.version, t.properties


def live_blocklets(path: Path) -> tuple[int, int]:
    """(live blocklets, those with a filter of every listed column), from the log."""
    snap = cl.open_table(path).snapshot()
    wanted = set(cl.open_table(path).properties.get("bloom_filter_columns", "").split(","))
    total = with_all = 0
    for _, f in snap.iter_files():
        for b in f.blocklets:
            total += 1
            ref = f.blooms.get(b.offset)
            with_all += ref is not None and wanted <= set(ref.columns)
    return total, with_all


def test_show_before_any_filter(cli: Callable[..., Run], table: Path) -> None:
    total, _ = live_blocklets(table)
    document = cli("index", "show", table, "--json").json()
    assert document == {
        "columns": [],
        "fpp": 0.01,
        "blocklets": total,
        "blocklets_with_filters": 0,
        "bloom_bytes": 0,
        "secondary_index_columns": [],
        "blocklets_with_secondary_index": 0,
        "secondary_index_bytes": 0,
    }
    run = cli("index", "show", table)
    assert run.exit_code == 0, run.stderr
    line = " ".join(run.stdout.split())
    assert line == (
        f"bloom_filter_columns: (none) (fpp 0.01); 0 of {total} live blocklet(s) have "
        f"filters (0 B of bloom files) secondary_index_columns: (none); 0 of {total} live "
        "blocklet(s) lie in files with a secondary index (0 B of index files)"
    )


def test_build_json_then_nothing_to_do(cli: Callable[..., Run], table: Path) -> None:
    version, _ = state(table)
    total, _ = live_blocklets(table)
    files = sum(1 for _ in cl.open_table(table).snapshot().iter_files())
    run = cli("index", "build", table, "name", "--json")
    assert run.exit_code == 0, run.stderr
    built = run.json()
    assert set(built) == BUILD_KEYS
    assert built["version"] == version + 1
    assert built["columns"] == ["name"]
    assert built["blocklets"] == total and built["files"] == files
    assert built["rows_read"] == TOTAL_ROWS
    t = cl.open_table(table)
    assert t.version == version + 1 and t.properties["bloom_filter_columns"] == "name"
    record = t.history(1)[0]
    assert record.operation == "BUILD INDEX" and not record.data_change
    assert record.parameters == {"kind": "bloom", "columns": "name", "files": str(files)}
    assert live_blocklets(table) == (total, total)
    shown = cli("index", "show", table, "--json").json()
    assert shown["blocklets"] == shown["blocklets_with_filters"] == total
    assert shown["bloom_bytes"] == built["bytes_written"] > 0
    assert shown["columns"] == ["name"]
    # a second run (no columns: those the table lists) has nothing to do and commits nothing
    again = cli("index", "build", table)
    assert again.exit_code == 0, again.stderr
    assert (
        " ".join(again.stdout.split()) == "every live blocklet has filters of name; nothing to do"
    )
    as_json = cli("index", "build", table, "name", "--json")
    assert as_json.exit_code == 0
    assert as_json.json() == {
        "kind": "bloom",
        "version": None,
        "columns": ["name"],
        "blocklets": 0,
        "files": 0,
        "bytes_written": 0,
        "rows_read": 0,
    }
    assert cl.open_table(table).version == version + 1


def test_build_human_output_and_a_second_column(cli: Callable[..., Run], table: Path) -> None:
    version, _ = state(table)
    total, _ = live_blocklets(table)
    run = cli("index", "build", table, "id")
    assert run.exit_code == 0, run.stderr
    line = " ".join(run.stdout.split())
    pattern = (
        rf"indexed id \(bloom\): {total} blocklet\(s\) given filters in (\d+) file\(s\) "
        rf"\(([\d.]+ (?:B|KiB)) written, {TOTAL_ROWS} rows read\) in version {version + 1}"
    )
    assert re.fullmatch(pattern, line), line
    # a second column: every blocklet's record is rebuilt with both
    more = cli("index", "build", table, "value", "--json").json()
    assert more["columns"] == ["id", "value"] and more["version"] == version + 2
    assert more["blocklets"] == total and more["rows_read"] == TOTAL_ROWS
    assert live_blocklets(table) == (total, total)
    shown = cli("index", "show", table)
    assert shown.exit_code == 0
    assert f"bloom_filter_columns: id, value (fpp 0.01); {total} of {total} live" in " ".join(
        shown.stdout.split()
    )
    # superseded bloom files are counted too (clean deletes them with their data files)
    document = cli("index", "show", table, "--json").json()
    snap = cl.open_table(table).snapshot()
    assert document["bloom_bytes"] == sum(sum(f.bloom_files.values()) for _, f in snap.iter_files())
    assert document["bloom_bytes"] > more["bytes_written"]


def test_lookups_after_build_are_exact_and_pruned(cli: Callable[..., Run], table: Path) -> None:
    assert cli("index", "build", table, "name").exit_code == 0
    t = cl.open_table(table)
    everything = t.to_arrow()
    for value in ["name-17", "name-229", "name-3", "nobody"]:
        got = t.to_arrow(filter=pc.field("name") == value)
        want = everything.filter(pc.field("name") == value)
        assert sorted(got.column("id").to_pylist()) == sorted(want.column("id").to_pylist())
    plan = t.plan_splits(filter=pc.field("name") == "name-100x")
    assert plan.blocklets_pruned_by_stats + plan.blocklets_pruned_by_bloom >= (
        plan.blocklets_total - 1
    )
    assert plan.blocklets_pruned_by_bloom > 0


@pytest.mark.parametrize(
    ("columns", "named"),
    [
        (["nope"], "'nope'"),
        (["name", "nope"], "'nope'"),
        (["Name"], "'Name'"),
        (["ünïcødé"], "'ünïcødé'"),
    ],
)
def test_an_unknown_column_commits_nothing(
    cli: Callable[..., Run], table: Path, columns: list[str], named: str
) -> None:
    before = state(table)
    run = cli("index", "build", table, *columns)
    assert run.exit_code == 1
    assert_one_line_error(run, "InvalidOptionError", named, "is not a column")
    assert state(table) == before
    assert live_blocklets(table)[1] == 0
    assert not list(table.rglob("*.bloom")), "a refused build left bloom files behind"


def test_a_table_listing_no_column_needs_one(cli: Callable[..., Run], table: Path) -> None:
    before = state(table)
    run = cli("index", "build", table, "--json")
    assert run.exit_code == 1
    assert_one_line_error(run, "InvalidOptionError", "bloom_filter_columns", "index build")
    assert state(table) == before


@pytest.fixture
def flagged(tmp_path: Path) -> Path:
    path = tmp_path / "flagged"
    t = cl.create_table(
        path,
        pa.schema([("id", pa.int64()), ("ok", pa.bool_()), ("tags", pa.list_(pa.string()))]),
        properties={"blocklet_max_rows": "4"},
    )
    t.append(pa.table({"id": range(10), "ok": [True, False] * 5, "tags": [["a"]] * 10}))
    return path


@pytest.mark.parametrize("column", ["ok", "tags"])
def test_a_column_without_bloom_filters_commits_nothing(
    cli: Callable[..., Run], flagged: Path, column: str
) -> None:
    before = state(flagged)
    run = cli("index", "build", flagged, "id", column)
    assert run.exit_code == 1
    line = assert_one_line_error(run, "InvalidOptionError", f"'{column}'")
    assert "indexes serve equality lookups" in line
    assert state(flagged) == before
    assert not list(flagged.rglob("*.bloom"))
    # the good column alone goes through
    assert cli("index", "build", flagged, "id", "--json").json()["blocklets"] == 3


@pytest.mark.parametrize("args", [("build", "id"), ("show",), ("show", "--json")])
def test_a_missing_table_is_a_clean_error(
    cli: Callable[..., Run], tmp_path: Path, args: tuple[str, ...]
) -> None:
    missing = tmp_path / "no-such-table"
    run = cli("index", args[0], missing, *args[1:])
    assert run.exit_code == 1
    assert_one_line_error(run, "TableNotFoundError", str(missing))
    assert not missing.exists()


def test_storage_options_are_parsed(cli: Callable[..., Run], table: Path) -> None:
    before = state(table)
    run = cli("index", "build", table, "id", "--storage-options", "{oops")
    assert_one_line_error(run, "not valid JSON")
    assert state(table) == before
    ok = cli("index", "show", table, "--storage-options", "{}", "--json")
    assert ok.exit_code == 0 and ok.json()["columns"] == []


def test_an_empty_column_name_on_a_table_listing_none_is_refused(
    cli: Callable[..., Run], table: Path
) -> None:
    before = state(table)
    run = cli("index", "build", table, "")  # CliRunner re-raises a crash: it fails here
    assert run.exit_code == 1
    assert_one_line_error(run, "InvalidOptionError", "''")
    assert state(table) == before


@pytest.mark.parametrize("blank", ["", " "])
def test_a_blank_column_name_beside_a_real_one_is_refused(
    cli: Callable[..., Run], table: Path, blank: str
) -> None:
    before = state(table)
    run = cli("index", "build", table, "name", blank, "--json")
    assert run.exit_code == 1, run.stdout
    assert state(table) == before


def test_blocklets_written_later_have_filters_already(cli: Callable[..., Run], table: Path) -> None:
    assert cli("index", "build", table, "name", "--json").json()["version"] is not None
    t = cl.open_table(table)
    t.append(make_rows(range(TOTAL_ROWS, TOTAL_ROWS + 60)))  # 3 blocklets, into the stream
    t.finish_streaming()
    t.handoff()
    total, with_all = live_blocklets(table)
    assert total == with_all
    shown = cli("index", "show", table, "--json").json()
    assert shown["blocklets"] == shown["blocklets_with_filters"] == total
    version = cl.open_table(table).version
    again = cli("index", "build", table, "--json").json()
    assert again["version"] is None and again["blocklets"] == 0
    assert cl.open_table(table).version == version


# --- --kind secondary ------------------------------------------------------------------------


def columnar_blocklets(path: Path) -> tuple[int, int, int]:
    """(blocklets of files with an index, index files in force, bytes of all index files)."""
    snap = cl.open_table(path).snapshot()
    blocklets = files = nbytes = 0
    for _, f in snap.iter_files():
        blocklets += f.num_blocklets if f.indexes else 0
        files += len(f.indexes)
        nbytes += sum(f.index_files.values())
    return blocklets, files, nbytes


def test_secondary_build_human_json_and_show(cli: Callable[..., Run], table: Path) -> None:
    t = cl.open_table(table)
    t.handoff()
    version = cl.open_table(table).version
    snap = cl.open_table(table).snapshot()
    total, _ = live_blocklets(table)
    columnar = [f for _, f in snap.iter_files() if "." in f.path.split("/")[1]]
    assert columnar, [f.path for _, f in snap.iter_files()]
    blocklets = sum(f.num_blocklets for f in columnar)
    rows_in = sum(f.num_rows for f in columnar)
    run = cli("index", "build", table, "name", "--kind", "secondary")
    assert run.exit_code == 0, run.stderr
    line = " ".join(run.stdout.split())
    pattern = (
        rf"indexed name \(secondary\): {blocklets} blocklet\(s\) given secondary indexes in "
        rf"{len(columnar)} file\(s\) \(([\d.]+ (?:B|KiB)) written, {rows_in} rows read\) in "
        rf"version {version + 1}"
    )
    assert re.fullmatch(pattern, line), line
    record = cl.open_table(table).history(1)[0]
    assert record.operation == "BUILD INDEX" and record.parameters["kind"] == "secondary"
    more = cli("index", "build", table, "id", "--kind", "secondary", "--json")
    assert more.exit_code == 0, more.stderr
    built = more.json()
    assert set(built) == BUILD_KEYS
    assert built["kind"] == "secondary" and built["version"] == version + 2
    assert built["columns"] == ["name", "id"]
    assert built["files"] == len(columnar) and built["blocklets"] == blocklets
    assert built["bytes_written"] > 0
    t = cl.open_table(table)
    assert t.properties["secondary_index_columns"] == "name,id"
    assert "bloom_filter_columns" not in t.properties
    assert not list(table.rglob("*.bloom"))
    with_index, in_force, nbytes = columnar_blocklets(table)
    assert with_index == blocklets and in_force == 2 * len(columnar)
    assert nbytes == sum(p.stat().st_size for p in table.rglob("*.sidx"))
    document = cli("index", "show", table, "--json").json()
    assert set(document) == SHOW_KEYS
    assert document["secondary_index_columns"] == ["name", "id"]
    assert document["blocklets_with_secondary_index"] == blocklets
    assert document["secondary_index_bytes"] == nbytes
    assert document["columns"] == [] and document["blocklets_with_filters"] == 0
    assert document["blocklets"] == total
    shown = " ".join(cli("index", "show", table).stdout.split())
    assert (
        f"secondary_index_columns: name, id; {blocklets} of {total} live blocklet(s) lie in "
        "files with a secondary index (" in shown
    ), shown
    # nothing left to do: no commit
    again = cli("index", "build", table, "--kind", "secondary")
    assert again.exit_code == 0, again.stderr
    assert " ".join(again.stdout.split()) == (
        "every live columnar file has indexes of name, id; nothing to do"
    )
    as_json = cli("index", "build", table, "id", "--kind", "secondary", "--json").json()
    assert as_json["version"] is None and as_json["kind"] == "secondary"
    assert as_json["files"] == 0 and as_json["bytes_written"] == 0
    assert cl.open_table(table).version == version + 2
    # lookups: exact, and pruned by the indexes
    t = cl.open_table(table)
    everything = t.to_arrow()
    for value in ["name-17", "name-3", "nobody"]:
        got = t.to_arrow(filter=pc.field("name") == value)
        want = everything.filter(pc.field("name") == value)
        assert sorted(got.column("id").to_pylist()) == sorted(want.column("id").to_pylist())
    plan = t.plan_splits(filter=pc.field("name").isin(["nobody", "no-one"]))
    assert plan.blocklets_pruned_by_index + plan.blocklets_pruned_by_stats >= blocklets


@pytest.mark.parametrize("kind", ["bogus", "Secondary", "", "bloom,secondary"])
def test_an_unknown_kind_is_refused(cli: Callable[..., Run], table: Path, kind: str) -> None:
    cl.open_table(table).handoff()
    before = state(table)
    run = cli("index", "build", table, "name", "--kind", kind)
    assert run.exit_code in (1, 2), run.stdout
    assert kind in run.stderr or "kind" in run.stderr
    assert state(table) == before
    assert not list(table.rglob("*.sidx")) and not list(table.rglob("*.bloom"))


@pytest.mark.parametrize("columns", [["nope"], ["name", "nope"], ["name", " "]])
def test_a_bad_secondary_column_commits_nothing(
    cli: Callable[..., Run], table: Path, columns: list[str]
) -> None:
    cl.open_table(table).handoff()
    before = state(table)
    run = cli("index", "build", table, *columns, "--kind", "secondary")
    assert run.exit_code == 1, run.stdout
    assert "InvalidOptionError" in run.stderr
    assert state(table) == before
    assert not list(table.rglob("*.sidx"))


def test_secondary_on_a_table_listing_none_needs_a_column(
    cli: Callable[..., Run], table: Path
) -> None:
    before = state(table)
    run = cli("index", "build", table, "--kind", "secondary")
    assert run.exit_code == 1
    assert_one_line_error(run, "InvalidOptionError", "secondary_index_columns")
    assert state(table) == before
