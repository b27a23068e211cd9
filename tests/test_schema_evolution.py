"""Schema evolution through the Python API (issue 27): column ids, rename, drop, widen and
defaults, each one commit with no data rewritten; time travel shows each version's own
schema; pruning keeps working by physical name; refusals say what and how to fix; a writer
whose rows predate a rename or drop commits nothing."""

from __future__ import annotations

import datetime
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.errors import CommitConflictError, InvalidOptionError, SchemaMismatchError
from carbonlite.metadata import LOG_FORMAT_VERSION
from carbonlite.seams import listening
from tests.data.make_golden import jsonable_rows

SCHEMA = pa.schema(
    [
        ("id", pa.int32()),
        ("name", pa.string()),
        ("day", pa.date32()),
        ("score", pa.float32()),
        ("price", pa.decimal128(6, 2)),
        ("small", pa.int8()),
    ]
)
DATA = Path(__file__).parent / "data"


def rows(ids: range, schema: pa.Schema = SCHEMA) -> pa.Table:
    """Rows of ``schema`` (whatever its present names and types) with these ids."""
    values: dict[str, Any] = {
        "id": list(ids),
        "name": [f"n{i}" for i in ids],
        "day": [datetime.date(2024, 1, 1) + datetime.timedelta(days=i) for i in ids],
        "score": [i / 4 for i in ids],
        "price": [Decimal(i).scaleb(-2) for i in ids],
        "small": [i % 100 for i in ids],
    }
    return pa.table(
        {
            f.name: pa.array(values[f.name], SCHEMA.field(f.name).type).cast(f.type)
            for f in schema
            if f.name in values
        }
    )


@pytest.fixture
def table(tmp_path: Path) -> cl.Table:
    """Three appends of 30 rows, blocklets of 10 rows, sorted by id."""
    t = cl.create_table(
        tmp_path / "t",
        SCHEMA,
        sort_columns=["id"],
        properties={"blocklet_max_rows": "10", "checkpoint_interval": "3"},
    )
    for start in (0, 30, 60):
        t.append(rows(range(start, start + 30)))
    return t


def data_files(t: cl.Table) -> dict[str, int]:
    root = Path(t.path)
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*.cblt")}


def test_new_tables_give_columns_ids_under_their_own_names(table: cl.Table) -> None:
    metadata = table.snapshot().metadata
    assert metadata.format_version == LOG_FORMAT_VERSION >= 6
    assert [c.id for c in metadata.columns] == [1, 2, 3, 4, 5, 6]
    assert [c.physical for c in metadata.columns] == SCHEMA.names
    assert metadata.last_column_id == 6


def test_rename_is_one_commit_that_rewrites_no_data(table: cl.Table) -> None:
    before, files = table.version, data_files(table)
    plan_before = table.plan_splits(filter=pc.field("score") >= 20)
    result = table.rename_column("score", "points")
    assert (result.version, result.operation) == (before + 1, "RENAME COLUMN")
    assert data_files(table) == files
    got = table.to_arrow()
    assert got.schema.names == ["id", "name", "day", "points", "price", "small"]
    assert got.column("points").to_pylist() == [i / 4 for i in range(90)]
    # the statistics are found under the column's physical name: the same blocklets pruned
    plan_after = table.plan_splits(filter=pc.field("points") >= 20)
    assert plan_after.blocklets_selected == plan_before.blocklets_selected == 1
    assert table.to_arrow(filter="points >= 20").column("id").to_pylist() == list(range(80, 90))
    # time travel shows each version's own names
    assert table.to_arrow(version=before).schema.names == SCHEMA.names
    entry = table.history(limit=1)[0]
    assert entry.parameters == {"column": "score", "new_name": "points"}
    assert cl.open_table(table.path).schema.names == got.schema.names


def test_rename_keeps_sort_key_and_partition_roles(tmp_path: Path) -> None:
    t = cl.create_table(
        tmp_path / "pk",
        SCHEMA,
        primary_key=["id"],
        partition_by=["bucket(2, small)", "name"],
        sort_columns=["day"],
    )
    t.append(rows(range(0, 6)))
    t.rename_column("id", "key")
    t.rename_column("small", "tiny")
    t.rename_column("day", "when")
    metadata = t.snapshot().metadata
    assert metadata.primary_key == ("key",)
    assert metadata.partition_by == ("bucket(2, tiny)", "name")
    assert metadata.sort_columns == ("when",)
    renamed = pa.schema(
        [
            ("key", pa.int32()),
            ("name", pa.string()),
            ("when", pa.date32()),
            ("score", pa.float32()),
            ("price", pa.decimal128(6, 2)),
            ("tiny", pa.int8()),
        ]
    )
    update = rows(range(3, 8)).rename_columns(renamed.names)
    update = update.set_column(1, "name", pa.array(["n0", "n1", "n2", "n3", "n4"]))
    t.append(update)  # an upsert by the renamed key
    got = t.to_arrow().sort_by("key")
    assert got.column("key").to_pylist() == list(range(8))
    assert got.column("name").to_pylist() == ["n0", "n1", "n2", "n0", "n1", "n2", "n3", "n4"]
    assert t.plan_splits(filter=pc.field("name") == "n3").blocklets_selected == 1
    t.finish_streaming()
    t.handoff()
    assert t.to_arrow().sort_by("key").equals(got)


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("nope", "x", "no such column"),
        ("name", "id", "already exists"),
        ("name", "name", "already has that name"),
        ("name", " ", "name"),
        ("name", "_change_type", "_change_type"),
    ],
)
def test_bad_renames_are_refused_and_commit_nothing(
    table: cl.Table, old: str, new: str, problem: str
) -> None:
    before = table.version
    with pytest.raises(SchemaMismatchError, match=problem):
        table.rename_column(old, new)
    assert table.refresh().version == before


def test_drop_hides_a_column_and_a_new_one_of_its_name_starts_empty(table: cl.Table) -> None:
    before, files = table.version, data_files(table)
    table.drop_columns(["name", "small"])
    assert data_files(table) == files
    assert table.to_arrow().schema.names == ["id", "day", "score", "price"]
    assert table.to_arrow(version=before).column("name").to_pylist()[:2] == ["n0", "n1"]
    table.add_columns([pa.field("name", pa.string())])
    got = table.to_arrow()
    assert got.column("name").null_count == 90  # the dropped values never come back
    physical = table.snapshot().metadata.columns[-1].physical
    assert physical != "name" and physical.startswith("col-")
    table.finish_streaming()
    table.handoff()
    table.compact("major")
    assert table.to_arrow().column("name").null_count == 90
    assert [d.name for d in table.snapshot().metadata.dropped] == ["name", "small"]
    assert [d.version for d in table.snapshot().metadata.dropped] == [before + 1] * 2


@pytest.mark.parametrize(
    ("names", "problem"),
    [
        (["id"], "sort column"),
        (["nope"], "no such column"),
        (["name", "name"], "given twice"),
        ([*SCHEMA.names[1:], "id"], "sort column"),
        ([], "list of column names"),
    ],
)
def test_bad_drops_are_refused(table: cl.Table, names: list[str], problem: str) -> None:
    before = table.version
    with pytest.raises((SchemaMismatchError, InvalidOptionError), match=problem):
        table.drop_columns(names)
    assert table.refresh().version == before


def test_the_last_column_cannot_be_dropped(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "one", pa.schema([("a", pa.int64()), ("b", pa.int64())]))
    with pytest.raises(SchemaMismatchError, match="at least one column"):
        t.drop_columns(["a", "b"])


@pytest.mark.parametrize(
    ("column", "wider", "filter"),
    [
        ("small", pa.int16(), pc.field("small") >= 85),
        ("id", pa.int64(), pc.field("id") >= 85),
        ("score", pa.float64(), pc.field("score") >= 21.25),
        ("price", pa.decimal128(12, 2), pc.field("price") >= Decimal("0.85")),
        ("day", pa.timestamp("us"), pc.field("day") >= pa.scalar(datetime.datetime(2024, 3, 26))),
    ],
)
def test_widening_reads_older_files_cast_up_and_prunes_exactly(
    table: cl.Table, column: str, wider: pa.DataType, filter: pc.Expression
) -> None:
    before = table.to_arrow()
    files = data_files(table)
    version = table.widen_column(column, wider).version
    assert data_files(table) == files
    got = table.to_arrow()
    assert got.schema.field(column).type == wider
    assert got.column(column).to_pylist() == before.column(column).cast(wider).to_pylist()
    assert table.to_arrow(filter=filter).column("id").to_pylist() == list(range(85, 90))
    if column != "day":  # statistics keep their domain: pruning is as before
        assert table.plan_splits(filter=filter).blocklets_selected == 1
    # an older-typed batch still comes in (cast up), a wider one too
    table.append(rows(range(90, 92)))
    table.append(rows(range(92, 93), table.schema))
    assert (
        table.to_arrow().column(column).to_pylist()[-3:]
        == rows(range(90, 93)).column(column).cast(wider).to_pylist()
    )
    assert (
        table.to_arrow(version=version - 1).schema.field(column).type == SCHEMA.field(column).type
    )
    # a table opened from a checkpoint written after the widening prunes as this one does
    log = Path(table.path) / "_carbonlite" / "log"
    assert max(int(p.name.split(".")[0]) for p in log.glob("*.checkpoint.json")) > version
    again = cl.open_table(table.path)
    selected = table.plan_splits(filter=filter).blocklets_selected
    assert again.plan_splits(filter=filter).blocklets_selected == selected
    assert again.to_arrow(filter=filter).column("id").to_pylist() == list(range(85, 93))
    table.finish_streaming()
    table.handoff()
    table.compact("major")
    assert sorted(table.to_arrow(filter=filter).column("id").to_pylist()) == list(range(85, 93))


@pytest.mark.parametrize(
    ("column", "to", "problem"),
    [
        ("id", pa.int16(), "narrowing"),
        ("id", pa.int32(), "already"),
        ("name", pa.int64(), "widenings are"),
        ("price", pa.decimal128(12, 4), "same scale"),
        ("score", pa.int64(), "widenings are"),
        ("day", pa.string(), "widenings are"),
    ],
)
def test_other_type_changes_are_refused(
    table: cl.Table, column: str, to: pa.DataType, problem: str
) -> None:
    before = table.version
    with pytest.raises(SchemaMismatchError, match=problem):
        table.widen_column(column, to)
    assert table.refresh().version == before


def test_partition_and_key_columns_are_not_widened(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "p", SCHEMA, primary_key=["id"], partition_by=["small"])
    with pytest.raises(SchemaMismatchError, match="primary-key column"):
        t.widen_column("id", pa.int64())
    with pytest.raises(SchemaMismatchError, match="partition column"):
        t.widen_column("small", pa.int16())
    with pytest.raises(SchemaMismatchError, match="partition column"):
        t.drop_columns(["small"])


@pytest.mark.parametrize(
    ("field", "default"),
    [
        (pa.field("n", pa.int64()), 7),
        (pa.field("s", pa.string()), "none yet"),
        (pa.field("b", pa.bool_()), True),
        (pa.field("d", pa.date32()), datetime.date(2020, 2, 29)),
        (
            pa.field("t", pa.timestamp("ms", tz="UTC")),
            datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc),
        ),
        (pa.field("m", pa.decimal128(8, 3)), Decimal("1.250")),
        (pa.field("f", pa.float32()), 0.5),
        (pa.field("x", pa.binary()), b"\x00\xff"),
    ],
)
def test_defaults_are_read_by_older_rows_and_filled_by_writers(
    table: cl.Table, field: pa.Field, default: Any
) -> None:
    version = table.add_columns([field], defaults={field.name: default}).version
    assert table.history(limit=1)[0].parameters == {"columns": field.name, "defaults": field.name}
    table.append(rows(range(90, 92)))  # leaves the column out
    given = rows(range(92, 93)).append_column(field, pa.nulls(1, field.type))
    table.append(given)  # gives it (a null)
    got = table.to_arrow().column(field.name).to_pylist()
    assert got == [default] * 92 + [None]
    assert field.name not in table.to_arrow(version=version - 1).schema.names
    reopened = cl.open_table(table.path)  # the default survives the log and its checkpoints
    assert reopened.to_arrow().column(field.name).to_pylist() == got
    table.finish_streaming()
    table.handoff()
    assert table.to_arrow().column(field.name).to_pylist() == got


@pytest.mark.parametrize(
    ("fields", "defaults", "problem"),
    [
        ([pa.field("n", pa.int64())], {"n": None}, "leave it out"),
        ([pa.field("n", pa.int64())], {"m": 1}, "not one of the columns added"),
        ([pa.field("n", pa.int8())], {"n": 1000}, "not a int8"),
        ([pa.field("n", pa.list_(pa.int8()))], {"n": [1]}, "defaults are for"),
        ([pa.field("n", pa.int64())], [("n", 1)], "map column names"),
    ],
)
def test_bad_defaults_are_refused(
    table: cl.Table, fields: list[pa.Field], defaults: Any, problem: str
) -> None:
    before = table.version
    with pytest.raises((SchemaMismatchError, InvalidOptionError), match=problem):
        table.add_columns(fields, defaults=defaults)
    assert table.refresh().version == before


def test_a_writer_that_read_the_old_schema_commits_nothing(table: cl.Table) -> None:
    """The rename lands after the writer wrote its blocklets, before its commit: the commit
    is refused naming the rename and its version, and the table holds none of its rows."""
    renamer = cl.open_table(table.path)
    done: list[int] = []

    def rename_once(name: str) -> None:
        if name == "append.after_data" and not done:
            done.append(renamer.rename_column("name", "label").version or -1)

    with listening(rename_once), pytest.raises(SchemaMismatchError) as info:
        table.append(rows(range(90, 95)))
    message = str(info.value)
    assert f"column 'name' was renamed to 'label' at version {done[0]}" in message
    assert table.refresh().count_rows() == 90
    assert table.verify().ok
    # the same rows under the new name go in
    table.append(
        rows(range(90, 95)).rename_columns(["id", "label", "day", "score", "price", "small"])
    )
    assert table.count_rows() == 95


def test_a_writer_racing_a_drop_commits_nothing_and_one_racing_a_widening_commits(
    table: cl.Table,
) -> None:
    other = cl.open_table(table.path)
    change = iter(
        [lambda: other.drop_columns(["small"]), lambda: other.widen_column("id", pa.int64())]
    )
    pending: list[Any] = []

    def once(name: str) -> None:
        if name == "append.after_data" and pending:
            pending.pop()()

    pending.append(next(change))
    with (
        listening(once),
        pytest.raises(SchemaMismatchError, match="column 'small' was dropped at version"),
    ):
        table.append(rows(range(90, 95)))
    table.refresh()
    pending.append(next(change))
    with listening(once):
        table.append(rows(range(90, 95), table.schema))
    assert table.to_arrow().column("id").to_pylist() == list(range(95))
    assert table.schema.field("id").type == pa.int64()


def test_data_still_using_an_old_name_is_told_why(table: cl.Table) -> None:
    table.rename_column("name", "label")
    table.drop_columns(["small"])
    with pytest.raises(SchemaMismatchError) as info:
        table.append(rows(range(90, 91)))
    message = str(info.value)
    assert "column 'name' was renamed to 'label' at version" in message
    assert "column 'small' was dropped at version" in message
    assert table.count_rows() == 90


def test_changes_across_a_rename_use_the_new_name(table: cl.Table) -> None:
    start = table.version
    table.rename_column("name", "label")
    table.append(
        rows(range(90, 92)).rename_columns(["id", "label", "day", "score", "price", "small"])
    )
    feed = table.changes(start_version=1)
    assert "label" in feed.schema.names and "name" not in feed.schema.names
    assert sorted(feed.column("label").to_pylist()) == sorted(f"n{i}" for i in range(92))
    assert start > 1


def test_a_schema_change_conflicts_with_a_concurrent_metadata_change(table: cl.Table) -> None:
    """Two schema changes planned on the same version: the second to commit is refused and
    commits nothing (it may have been planned against a name the first one changed); planned
    again, it goes in."""
    other = cl.open_table(table.path)
    done: list[bool] = []

    def change_first(name: str) -> None:
        if name == "commit.before_put" and not done:
            done.append(True)
            other.rename_column("score", "points")

    with listening(change_first), pytest.raises(CommitConflictError):
        table.rename_column("name", "label")
    assert table.refresh().schema.names[:4] == ["id", "name", "day", "points"]
    table.rename_column("name", "label")
    assert table.schema.names[:4] == ["id", "label", "day", "points"]


def test_restore_brings_back_the_old_schema(table: cl.Table) -> None:
    version = table.version
    table.rename_column("name", "label")
    table.drop_columns(["small"])
    table.restore(version)
    assert table.to_arrow().equals(table.to_arrow(version=version))


def test_a_column_added_after_a_restore_never_meets_pages_from_before_it(table: cl.Table) -> None:
    """Restoring to a version before a column was added, then adding one of the same name:
    a fresh id and a physical name the restored-away column's pages do not lie under."""
    version = table.version
    table.add_columns([pa.field("extra", pa.int64())])
    table.append(rows(range(90, 95)).append_column("extra", pa.array([1] * 5, pa.int64())))
    first = table.snapshot().metadata.columns[-1]
    table.restore(version)
    table.add_columns([pa.field("extra", pa.int64())])
    again = table.snapshot().metadata.columns[-1]
    assert again.id > first.id and again.physical != first.physical
    assert table.to_arrow().column("extra").null_count == 90


@pytest.mark.parametrize("format_version", [3, 5])
def test_older_tables_get_ids_with_their_first_change_or_upgrade(
    tmp_path: Path, format_version: int
) -> None:
    path = tmp_path / "old"
    shutil.copytree(DATA / f"golden_v{format_version}", path)
    t = cl.open_table(path)
    expected = t.to_arrow()
    t.rename_column("name", "label")
    metadata = t.snapshot().metadata
    assert metadata.format_version == 6
    assert [c.physical for c in metadata.columns] == [
        "name" if n == "label" else n for n in t.schema.names
    ]
    assert jsonable_rows(t.to_arrow().rename_columns(expected.schema.names)) == jsonable_rows(
        expected
    )
    assert jsonable_rows(t.to_arrow(version=t.version - 1)) == jsonable_rows(expected)


def test_tables_before_format_3_are_told_to_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "old"
    shutil.copytree(DATA / "golden_v2", path)
    t = cl.open_table(path)
    with pytest.raises(InvalidOptionError, match="upgrade"):
        t.rename_column("name", "label")
    t.upgrade()
    assert [c.physical for c in t.snapshot().metadata.columns] == t.schema.names
    t.rename_column("name", "label")
    assert "label" in t.to_arrow().schema.names


def test_changes_across_a_restore_that_narrowed_a_column_say_why(table: cl.Table) -> None:
    """A restore to a version before a widening narrows the column again; rows written while
    it was wider cannot be read with the restored type: a change feed reaching back across
    the restore says so instead of failing inside Arrow."""
    version = table.version
    table.widen_column("small", pa.int16())
    table.append(
        rows(range(90, 91), table.schema).set_column(5, "small", pa.array([300], pa.int16()))
    )
    table.restore(version)
    with pytest.raises(
        SchemaMismatchError, match="'small' holds int16, the schema read with has int8"
    ):
        table.changes(start_version=1)
    restored = table.version  # its change rows are the wider rows it removes: the same
    with pytest.raises(SchemaMismatchError, match="do not fit the schema"):
        table.changes(start_version=restored)
    table.append(rows(range(95, 96)))
    assert table.changes(start_version=restored + 1).column("id").to_pylist() == [95]
