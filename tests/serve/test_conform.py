"""Where held rows go (``serve/conform.py``), on real tables: by column id; a log record of
an earlier release (no ids) by name only where no name can have moved between columns, which
the table's metadata shows (renames, drops) or the record's own column order does (a restore
that undid a swap of two names leaves no rename behind)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.serve.conform import UnplacedPutError, conformed_put, held_rows

SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.string()), ("b", pa.string())])


@pytest.fixture
def table(tmp_path: Path) -> cl.Table:
    return cl.create_table(tmp_path / "t", SCHEMA)


def test_a_put_is_held_with_the_ids_of_the_columns_it_was_conformed_to(table: cl.Table) -> None:
    table.drop_columns(["a"])
    table.add_columns(pa.field("a", pa.string()))  # a new column: id 4
    rows, ids = conformed_put(pa.table({"a": ["x"], "id": [1]}), table.snapshot().metadata, "t")
    assert rows.to_pylist() == [{"id": 1, "b": None, "a": "x"}]
    assert ids == (1, 3, 4)


def test_a_record_without_ids_goes_by_name_while_no_name_moved(table: cl.Table) -> None:
    logged = pa.table({"id": [1], "a": ["A"], "b": ["B"]})  # taken at version 0
    table.add_columns(pa.field("n", pa.int64()), defaults={"n": 3})
    got = held_rows(logged, None, table.refresh().snapshot().metadata, "t")
    assert got.to_pylist() == [{"id": 1, "a": "A", "b": "B", "n": 3}]


def test_a_record_without_ids_waits_once_a_column_was_renamed_or_dropped(
    table: cl.Table,
) -> None:
    logged = pa.table({"id": [1], "a": ["A"], "b": ["B"]})
    table.rename_column("b", "c")
    table.rename_column("c", "b")  # back under its name: the rename is still on record
    with pytest.raises(UnplacedPutError, match=r"the columns now named \['b'\] were renamed"):
        held_rows(logged, None, table.refresh().snapshot().metadata, "table 't'")
    table.drop_columns(["a"])
    with pytest.raises(UnplacedPutError, match=r"the columns \['a'\] were dropped"):
        held_rows(logged, None, table.refresh().snapshot().metadata, "table 't'")


def test_a_record_without_ids_taken_between_a_swap_and_a_restore_waits(table: cl.Table) -> None:
    """Acknowledged after 'a' and 'b' swapped names (its rows: 'b' before 'a', as the columns
    stood then); the table then restored to version 0, whose metadata has no rename: by name
    alone the values would cross over. Their order gives them away."""
    table.rename_column("a", "tmp")
    table.rename_column("b", "a")
    table.rename_column("tmp", "b")
    logged = pa.table({"id": [1], "b": ["first"], "a": ["second"]})
    table.restore(0)
    metadata = table.refresh().snapshot().metadata
    assert not any(c.former_names for c in metadata.columns) and not metadata.dropped
    with pytest.raises(UnplacedPutError, match="do not stand in the table's order"):
        held_rows(logged, None, metadata, "table 't'")
    # with the ids it was acknowledged against, each value finds its column
    got = held_rows(logged, (1, 2, 3), metadata, "table 't'")
    assert got.to_pylist() == [{"id": 1, "a": "first", "b": "second"}]


def test_ids_the_table_never_gave_are_refused(table: cl.Table) -> None:
    rows = pa.table({"id": [1], "a": ["A"], "b": ["B"]})
    with pytest.raises(UnplacedPutError, match=r"columns \['b'\] whose ids the table never gave"):
        held_rows(rows, (1, 2, 9), table.snapshot().metadata, "table 't'")
