"""One rule for the data's columns at every door (issue 38 §3; docs/ENGINES.md, "Data in"):
a named pandas index level is the column of its name for ``write_table``, ``append``,
``overwrite`` and ``merge`` alike, never dropped; a nullable column the data lacks is null (a
non-nullable one is refused), also for an upsert, ``publish`` and a Flight put; data with no
columns is refused everywhere, and data with no rows is checked as any data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.serve.conform import conformed_put

pd = pytest.importorskip("pandas")

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("score", pa.float64())]
)


def rows_of(t: cl.Table) -> list[dict[str, Any]]:
    return sorted(cl.open_table(t.path).to_arrow().to_pylist(), key=lambda r: r["id"])


@pytest.fixture
def t(tmp_path: Path) -> cl.Table:
    table = cl.create_table(tmp_path / "t", SCHEMA)
    table.append(pa.table({"id": [1, 2], "name": ["a", "b"], "score": [1.0, 2.0]}, SCHEMA))
    return table


@pytest.fixture
def pk(tmp_path: Path) -> cl.Table:
    table = cl.create_table(tmp_path / "pk", SCHEMA, primary_key=["id"])
    table.append(pa.table({"id": [1, 2], "name": ["a", "b"], "score": [1.0, 2.0]}, SCHEMA))
    return table


def unchanged(t: cl.Table, before: tuple[int, list[dict[str, Any]]]) -> bool:
    return (cl.open_table(t.path).version, rows_of(t)) == before


# --- a named pandas index ------------------------------------------------------------------------


def frame(ids: list[int], **columns: list[Any]) -> Any:
    return pd.DataFrame({"id": ids, **columns})


@pytest.mark.parametrize(
    "write",
    [
        lambda t, df: t.append(df),
        lambda t, df: t.overwrite(df),
        lambda t, df: cl.write_table(t.path, df, mode="append"),
        lambda t, df: cl.write_table(t.path, df, mode="overwrite"),
        lambda t, df: t.merge(df, on=["id"]),
    ],
    ids=["append", "overwrite", "write_table-append", "write_table-overwrite", "merge"],
)
def test_a_named_index_the_table_lacks_is_refused_not_dropped(t: cl.Table, write: Any) -> None:
    before = (t.version, rows_of(t))
    df = frame([3], name=["c"]).set_index(pd.Index(["x"], name="origin"))
    with pytest.raises(cl.SchemaMismatchError, match="'origin'"):
        write(t, df)
    assert unchanged(t, before)


@pytest.mark.parametrize(
    "write",
    [
        lambda t, df: t.append(df, schema_mode="merge"),
        lambda t, df: t.overwrite(df, schema_mode="merge"),
        lambda t, df: cl.write_table(t.path, df, mode="append", schema_mode="merge"),
    ],
    ids=["append", "overwrite", "write_table-append"],
)
def test_schema_mode_merge_adds_a_named_index_as_a_column(t: cl.Table, write: Any) -> None:
    write(t, frame([3], name=["c"]).set_index(pd.Index(["x"], name="origin")))
    table = cl.open_table(t.path)
    assert table.schema.names == ["id", "name", "score", "origin"]
    assert [r for r in rows_of(t) if r["id"] == 3] == [
        {"id": 3, "name": "c", "score": None, "origin": "x"}
    ]


def test_a_named_index_is_a_column_of_a_new_table_and_an_unnamed_one_is_not(
    tmp_path: Path,
) -> None:
    df = pd.DataFrame({"name": ["a"]}, index=pd.Index([7], name="id"))
    made = cl.write_table(tmp_path / "new", df)
    assert made.schema.names == ["id", "name"]
    assert made.to_arrow().to_pylist() == [{"id": 7, "name": "a"}]
    made.append(pd.DataFrame({"name": ["b"], "id": [8]}, index=[100]))  # unnamed: numbers rows
    assert made.refresh().schema.names == ["id", "name"]
    assert made.count_rows() == 2


def test_an_index_level_named_as_a_column_is_that_column_unless_they_differ(t: cl.Table) -> None:
    before = (t.version, rows_of(t))
    same = frame([3], name=["c"]).set_index("id", drop=False)
    differ = same.copy()
    differ["id"] = [4]  # the level still says 3
    with pytest.raises(cl.SchemaMismatchError, match=r"index level and a column .* 'id'"):
        t.append(differ)
    assert unchanged(t, before)
    t.append(same)
    assert rows_of(t)[-1] == {"id": 3, "name": "c", "score": None}


# --- a missing column ---------------------------------------------------------------------------


def test_a_missing_nullable_column_is_null_at_every_door(t: cl.Table, tmp_path: Path) -> None:
    partial = pa.table({"id": [3], "name": ["c"]})  # no score
    t.append(partial)
    cl.write_table(t.path, pa.table({"id": [4]}), mode="append")
    assert rows_of(t)[2:] == [
        {"id": 3, "name": "c", "score": None},
        {"id": 4, "name": None, "score": None},
    ]
    t.overwrite(partial, schema_mode="merge")
    assert rows_of(t) == [{"id": 3, "name": "c", "score": None}]
    daily = cl.create_table(tmp_path / "daily", SCHEMA, partition_by=["name"])
    daily.publish(partial)
    assert rows_of(daily) == [{"id": 3, "name": "c", "score": None}]
    # a Flight put is conformed by the same rule (carbonlite/serve/conform.py)
    put, _ids = conformed_put(partial, t.snapshot().metadata, "put")
    assert put.to_pylist() == [{"id": 3, "name": "c", "score": None}]


def test_a_missing_required_column_is_refused_at_every_door(t: cl.Table) -> None:
    before = (t.version, rows_of(t))
    no_id = pa.table({"name": ["c"], "score": [3.0]})
    for write in (
        lambda: t.append(no_id),
        lambda: t.append(no_id, schema_mode="merge"),
        lambda: t.overwrite(no_id),
        lambda: cl.write_table(t.path, no_id, mode="append"),
        lambda: conformed_put(no_id, t.snapshot().metadata, "put"),
    ):
        with pytest.raises(cl.SchemaMismatchError, match=r"'id'.*not nullable|'id' \(int64\) is"):
            write()
    assert unchanged(t, before)


def test_an_upsert_replaces_whole_rows_by_the_same_rule(pk: cl.Table) -> None:
    """An append to a primary-key table writes whole rows: a nullable column it lacks is null
    in the row it writes, as an append's is (and as Spark's and Flight's upserts were);
    merge(data, on=keys) changes only the columns it has."""
    pk.merge(pa.table({"id": [1], "name": ["A"]}), on=["id"])
    assert rows_of(pk) == [
        {"id": 1, "name": "A", "score": 1.0},
        {"id": 2, "name": "b", "score": 2.0},
    ]
    pk.append(pd.DataFrame({"name": ["B", "C"]}, index=pd.Index([2, 3], name="id")))
    assert rows_of(pk)[1:] == [
        {"id": 2, "name": "B", "score": None},
        {"id": 3, "name": "C", "score": None},
    ]
    before = (pk.version, rows_of(pk))
    with pytest.raises(cl.SchemaMismatchError, match=r"lacks the key columns \['id'\]"):
        pk.append(pa.table({"name": ["D"]}))
    assert unchanged(pk, before)


# --- empty data ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "write",
    [
        lambda t, pk: t.append(pd.DataFrame()),
        lambda t, pk: t.append(pd.DataFrame(), schema_mode="merge"),
        lambda t, pk: t.overwrite(pd.DataFrame()),
        lambda t, pk: t.merge(pd.DataFrame(), on=["id"]),
        lambda t, pk: pk.append(pd.DataFrame()),
        lambda t, pk: cl.write_table(t.path, pd.DataFrame(), mode="append"),
        lambda t, pk: cl.write_table(t.path, pd.DataFrame(), mode="overwrite"),
        lambda t, pk: t.append(pa.table({"x": [1]}).drop_columns(["x"])),
    ],
    ids=[
        "append",
        "append-merge",
        "overwrite",
        "merge",
        "upsert",
        "write_table-append",
        "write_table-overwrite",
        "arrow",
    ],
)
def test_data_with_no_columns_is_refused(t: cl.Table, pk: cl.Table, write: Any) -> None:
    """``t.append(pd.DataFrame())`` committed nothing and said nothing; an overwrite with it
    emptied the table."""
    before = (t.version, rows_of(t)), (pk.version, rows_of(pk))
    with pytest.raises(cl.SchemaMismatchError, match=r"no columns|lacks the key columns"):
        write(t, pk)
    assert unchanged(t, before[0]) and unchanged(pk, before[1])


def test_data_with_no_rows_is_checked_and_commits_nothing(t: cl.Table) -> None:
    before = (t.version, rows_of(t))
    empty = pa.table({"id": pa.array([], pa.int64()), "name": pa.array([], pa.string())})
    assert t.append(empty).version is None
    assert t.append(empty.to_pandas()).version is None
    assert t.append(pa.RecordBatchReader.from_batches(empty.schema, [])).version is None
    assert unchanged(t, before)
    with pytest.raises(cl.SchemaMismatchError, match=r"lacks the columns \['id'\]"):
        t.append(empty.drop_columns(["id"]))
    with pytest.raises(cl.SchemaMismatchError, match=r"'x' \(int64\) is not in the schema"):
        t.append(empty.append_column("x", pa.array([], pa.int64())))
    assert unchanged(t, before)
    with_x = empty.append_column("x", pa.array([], pa.int64()))
    assert t.append(with_x, schema_mode="merge").version == before[0] + 1  # adds x, no rows
    assert cl.open_table(t.path).schema.names == ["id", "name", "score", "x"]
    assert rows_of(t) == [{**r, "x": None} for r in before[1]]
    assert t.overwrite(empty).version == before[0] + 2  # an overwrite with no rows empties it
    assert rows_of(t) == []
