"""A Table object reads the version it loaded until ``refresh()`` or its own write moves it
(issue 25: ``history()``, ``version_at()``, ``partitions()`` and ``changes()`` moved it,
so ``b.to_arrow()`` went from 0 rows to 2 after ``b.history(limit=1)``)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.errors import StaleSchemaError
from tests.support.column_moves import drop_and_add_again, swap_by_renames

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])
UTC = datetime.timezone.utc

READS: dict[str, Callable[[cl.Table], Any]] = {
    "history": lambda b: b.history(limit=1),
    "history-all": lambda b: b.history(),
    "version_at-now": lambda b: b.version_at(datetime.datetime.now(UTC)),
    "version_at-iso": lambda b: b.version_at(datetime.datetime.now(UTC).isoformat()),
    "version_at-int": lambda b: b.version_at(2),
    "partitions": lambda b: b.partitions(),
    "partitions-at": lambda b: b.partitions(2),
    "changes": lambda b: b.changes(0),
    "changes-by-time": lambda b: b.changes(datetime.datetime(2000, 1, 1, tzinfo=UTC)),
    "segments": lambda b: b.segments(),
    "transaction_version": lambda b: b.transaction_version("app"),
    "verify": lambda b: b.verify(),
    "recover-dry-run": lambda b: b.recover(dry_run=True),
    "snapshot-at-time": lambda b: b.snapshot(datetime.datetime.now(UTC)),
    "to_arrow-at-time": lambda b: b.to_arrow(version=datetime.datetime.now(UTC)),
    "to_arrow-newer-version": lambda b: b.to_arrow(version=2),
    "count_rows-newer": lambda b: b.count_rows(version=2),
    "scan-newer": lambda b: b.scan(version=2).read_all(),
    "plan_splits-newer": lambda b: b.plan_splits(version=2),
    "state-missing": lambda b: b.state("nothing"),
    "effective_properties": lambda b: b.effective_properties,
    "schema": lambda b: b.schema,
}


@pytest.fixture
def handles(tmp_path: Path) -> tuple[cl.Table, cl.Table]:
    """``a`` wrote versions 1 and 2 after ``b`` was opened at version 0 (no rows)."""
    a = cl.create_table(tmp_path / "t", SCHEMA, partition_by=["region"])
    b = cl.open_table(a.path)
    a.append(pa.table({"id": [1], "region": ["eu"]}, schema=SCHEMA), txn=("app", 1))
    a.append(pa.table({"id": [2], "region": ["us"]}, schema=SCHEMA))
    return a, b


@pytest.mark.parametrize("read", list(READS), ids=list(READS))
def test_reads_never_move_a_handle(handles: tuple[cl.Table, cl.Table], read: str) -> None:
    _, b = handles
    try:
        answer = READS[read](b)
    except cl.InvalidOptionError:  # state(): no publish stored it
        answer = None
    assert b.version == 0 and b.to_arrow().num_rows == 0, f"{read} moved the handle"
    assert pa.table(b).num_rows == 0
    if read in ("history", "partitions", "transaction_version", "segments"):
        assert answer  # the newest state of the log, all the same
    b.refresh()
    assert b.version == 2 and b.to_arrow().num_rows == 2


def test_the_reported_case(handles: tuple[cl.Table, cl.Table]) -> None:
    _, b = handles
    assert b.history(limit=1)[0].version == 2  # the newest commit, read from the log
    assert b.to_arrow().num_rows == 0  # still version 0's rows
    assert [p.value for p in b.partitions()] == [("eu",), ("us",)]
    assert b.changes(1).num_rows == 2
    assert b.version_at(datetime.datetime.now(UTC)) == 2
    assert b.to_arrow().num_rows == 0
    assert b.refresh().to_arrow().num_rows == 2


def test_writes_move_the_handle_that_writes(handles: tuple[cl.Table, cl.Table]) -> None:
    a, b = handles
    b.append(pa.table({"id": [3], "region": ["eu"]}, schema=SCHEMA))
    assert b.version == 3 and b.to_arrow().num_rows == 3
    assert a.version == 2 and a.to_arrow().num_rows == 2  # a read nothing since


# --- issue 38 §2: a handle writes to the columns it shows -----------------------------------

COLUMNS = pa.schema([("id", pa.int64()), ("a", pa.string()), ("b", pa.string())])
ROW = {"id": [1], "a": ["OLD-A"], "b": ["OLD-B"]}


CHANGED: dict[str, tuple[Callable[[cl.Table], Any], str]] = {
    "drop-and-add-again": (
        drop_and_add_again,
        r"column 'a' was dropped at version 1; the table's 'a' is another column now "
        r"\(since version 2\)",
    ),
    "swap-by-renames": (
        swap_by_renames,
        r"column 'a' was renamed to 'b' at version 3\n  column 'b' was renamed to 'a' at version 2",
    ),
    "rename": (lambda t: t.rename_column("a", "c"), r"column 'a' was renamed to 'c' at version 1"),
}
WRITES: dict[str, Callable[[cl.Table, pa.Table], Any]] = {
    "append": lambda t, rows: t.append(rows),
    "overwrite": lambda t, rows: t.overwrite(rows),
    "append-merge": lambda t, rows: t.append(rows, schema_mode="merge"),
}


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("change", list(CHANGED))
def test_a_stale_handle_is_refused_after_its_columns_moved(
    tmp_path: Path, change: str, write: str
) -> None:
    """``b`` shows version 0; another handle then drops 'a' and adds a new 'a', or swaps 'a'
    and 'b' by renames, or renames 'a'. ``b``'s rows, named as it shows its columns, are
    refused naming the change, nothing is written and ``b`` still shows version 0 (a retry
    is refused again); once refreshed, the names mean the present columns."""
    a = cl.create_table(tmp_path / "t", COLUMNS)
    b = cl.open_table(a.path)
    apply, message = CHANGED[change]
    apply(a)
    latest = a.version
    with pytest.raises(cl.SchemaMismatchError, match=message) as refused:
        WRITES[write](b, pa.table(ROW, schema=COLUMNS))
    assert isinstance(refused.value, StaleSchemaError)
    assert "refresh()" in str(refused.value)
    assert b.version == 0 and b.schema == COLUMNS  # it still shows what it showed
    with pytest.raises(StaleSchemaError):
        WRITES[write](b, pa.table(ROW, schema=COLUMNS))
    assert a.refresh().version == latest and a.count_rows() == 0  # nothing was written
    b.refresh()
    fresh = {n: [2] if n == "id" else [f"NEW-{n.upper()}"] for n in b.schema.names}
    WRITES[write](b, pa.table(fresh, schema=b.schema))
    assert b.to_arrow().to_pylist() == [{n: v[0] for n, v in fresh.items()}]


@pytest.mark.parametrize("change", ["drop-and-add-again", "swap-by-renames"])
def test_a_stale_handle_of_a_primary_key_table_is_refused_too(tmp_path: Path, change: str) -> None:
    """An append to a primary-key table is an upsert: the same rule, checked on the version
    it plans on."""
    a = cl.create_table(tmp_path / "t", COLUMNS, primary_key=["id"])
    b = cl.open_table(a.path)
    CHANGED[change][0](a)
    with pytest.raises(StaleSchemaError, match=CHANGED[change][1]):
        b.append(pa.table(ROW, schema=COLUMNS))
    assert b.version == 0 and a.refresh().count_rows() == 0


def test_columns_as_of_names_the_snapshot_the_rows_were_made_for(tmp_path: Path) -> None:
    """A writer sharing its Table object (another thread refreshes it meanwhile) says which
    snapshot its rows name columns of."""
    t = cl.create_table(tmp_path / "t", COLUMNS)
    made_for = t.snapshot()
    drop_and_add_again(cl.open_table(t.path))
    t.refresh()  # as another thread sharing ``t`` would
    rows = pa.table(ROW, schema=COLUMNS)
    with pytest.raises(StaleSchemaError, match="column 'a' was dropped at version 1"):
        t.append(rows, columns_as_of=made_for)
    assert t.count_rows() == 0
    t.append(rows.select(["id", "b", "a"]), columns_as_of=t.snapshot())  # the present 'a'
    assert t.to_arrow().to_pylist() == [{"id": 1, "b": "OLD-B", "a": "OLD-A"}]
    other = cl.create_table(tmp_path / "other", COLUMNS)
    for wrong in (other.snapshot(), "version 0"):
        with pytest.raises(cl.InvalidOptionError, match="columns_as_of must be a snapshot of"):
            t.append(rows.select(["id", "b", "a"]), columns_as_of=wrong)  # type: ignore[arg-type]
