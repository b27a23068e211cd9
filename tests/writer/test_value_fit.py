"""A value that does not fit its column (issue 25): out of range, a fraction into an integer,
a string into a number, None into a non-nullable column, a timestamp past its unit's range.
Update, merge and append all raise SchemaMismatchError naming the column and the value, never
a raw OverflowError or ArrowInvalid, and commit nothing."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl

pd = pytest.importorskip("pandas")

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("price", pa.int64()),
        ("small", pa.int8()),
        ("ratio", pa.float32()),
        ("name", pa.string()),
        ("ts", pa.timestamp("ns", tz="UTC")),
        ("amount", pa.decimal128(10, 2)),
        ("tags", pa.list_(pa.int16())),
    ]
)
UTC = datetime.timezone.utc


def first_rows() -> pa.Table:
    return pa.table(
        {
            "id": [1, 2],
            "price": [10, 20],
            "small": [1, 2],
            "ratio": [0.5, 1.5],
            "name": ["a", "b"],
            "ts": [datetime.datetime(2026, 1, 1, tzinfo=UTC)] * 2,
            "amount": [decimal.Decimal("1.25")] * 2,
            "tags": [[1], [2]],
        },
        schema=SCHEMA,
    )


@pytest.fixture
def table(tmp_path: Path) -> cl.Table:
    t = cl.create_table(tmp_path / "t", SCHEMA)
    t.append(first_rows())
    return t


def _unchanged(t: cl.Table) -> None:
    assert t.refresh().version == 1
    assert cl.open_table(t.path).to_arrow() == first_rows()


@pytest.mark.parametrize(
    ("column", "value", "why"),
    [
        ("price", 2**70, "Arrow cannot hold it"),
        ("price", -(2**64), "Arrow cannot hold it"),
        ("price", "abc", "string"),
        ("price", "5", "string"),  # no parsing of strings into numbers
        ("price", 1.5, "truncated"),
        ("price", float("nan"), "truncated"),
        ("price", True, "bool"),
        ("price", [1, 2], "list"),
        ("price", {"a": 1}, "struct"),
        ("price", np.array([1]), "list"),
        ("price", object(), "Arrow cannot hold it"),
        ("small", 300, "not in range"),
        ("small", np.int64(-129), "not in range"),
        ("ratio", 1e300, "out of the range"),
        ("ratio", "x", "string"),
        ("name", 5, "int64"),
        ("name", b"bytes", "binary"),
        ("id", None, "non-nullable"),
        ("ts", datetime.datetime(2300, 1, 1), "out of bounds"),
        ("ts", "2026-01-01", "string"),
        ("ts", 5, "int64"),
        ("amount", decimal.Decimal("1.255"), "data loss"),
        ("amount", decimal.Decimal("1e40"), "precision"),
        ("tags", [1, 70_000], "not in range"),
        ("tags", ["x"], "list<item: string>"),
    ],
)
def test_update_refuses_a_value_that_does_not_fit(
    table: cl.Table, column: str, value: Any, why: str
) -> None:
    with pytest.raises(cl.SchemaMismatchError, match=why) as info:
        table.update(pc.field("id") == 1, {column: value})
    message = str(info.value)
    assert f"column {column!r}" in message and repr(value)[:20] in message
    assert table.path in message
    _unchanged(table)


@pytest.mark.parametrize(
    ("column", "value", "stored"),
    [
        ("price", 2.0, 2),  # a whole float is that integer
        ("price", np.int32(7), 7),
        ("small", 127, 127),
        ("ratio", 3, 3.0),
        ("ts", datetime.datetime(2026, 2, 1), datetime.datetime(2026, 2, 1, tzinfo=UTC)),
        (
            "ts",
            datetime.datetime(2026, 2, 1, 9, tzinfo=datetime.timezone(datetime.timedelta(hours=9))),
            datetime.datetime(2026, 2, 1, tzinfo=UTC),  # the same instant
        ),
        ("amount", 3, decimal.Decimal("3.00")),
        ("tags", [1, 2], [1, 2]),
        ("name", None, None),
        ("name", pa.scalar("z", pa.large_string()), "z"),
    ],
)
def test_update_takes_a_value_that_fits_exactly(
    table: cl.Table, column: str, value: Any, stored: Any
) -> None:
    table.update(pc.field("id") == 1, {column: value})
    got = table.to_arrow(filter=pc.field("id") == 1).column(column).to_pylist()
    assert got == [stored]


def test_an_expression_that_overflows_is_refused(table: cl.Table) -> None:
    with pytest.raises(cl.InvalidOptionError, match="overflow"):
        table.update(None, {"price": pc.field("price") * 2**62})
    _unchanged(table)


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (
            pa.table({"id": [1], "price": ["x"]}),
            "column 'price': expected type int64, found string",
        ),
        (
            pa.table({"id": [1], "price": pa.array([2**63], pa.uint64())}),
            "column 'price'.*narrowing",
        ),
        (pa.table({"id": [9], "small": [300]}), "column 'small'.*narrowing"),
        (pd.DataFrame({"id": [1], "price": [2**70]}), "column 'price'.*too large"),
        (pd.DataFrame({"id": [1], "name": [object()]}), "column 'name'"),
        (pa.table({"id": [1], "ts": pa.array([2**62], pa.timestamp("s"))}), "column 'ts'"),
    ],
    ids=[
        "string-into-int",
        "uint64-into-int64",
        "int64-into-int8",
        "pandas-big-int",
        "pandas-object",
        "timestamp-overflow",
    ],
)
def test_merge_refuses_source_values_that_do_not_fit(
    table: cl.Table, source: Any, why: str
) -> None:
    with pytest.raises(cl.SchemaMismatchError, match=why):
        table.merge(source, on=["id"])
    _unchanged(table)


@pytest.mark.parametrize(
    ("column", "values", "why"),
    [
        ("price", pd.Series([2**70], dtype=object), "column 'price'.*too large"),
        ("price", pd.Series([1.5]), "column 'price': expected type int64, found double"),
        ("small", pd.Series([300]), "column 'small'.*narrowing"),
        ("ts", pd.Series([pd.Timestamp("2026-01-01 00:00:00.5")]), None),
        ("name", pd.Series([1, "x"], dtype=object), "column 'name'"),
        ("id", pd.Series([None], dtype=object), "column 'id'"),
    ],
)
def test_append_refuses_values_that_do_not_fit(
    table: cl.Table, column: str, values: Any, why: str | None
) -> None:
    frame = first_rows().slice(0, 1).to_pandas()
    frame[column] = values
    if why is None:  # a value that fits (ns into ns): the control case
        table.append(frame)
        assert table.refresh().version == 2
        return
    with pytest.raises(cl.SchemaMismatchError, match=why):
        table.append(frame)
    _unchanged(table)


def test_append_refuses_a_timestamp_out_of_range_of_the_column(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "us", pa.schema([("ts", pa.timestamp("ns"))]))
    seconds = pa.table({"ts": pa.array([2**40], pa.timestamp("s"))})  # year ~36800
    with pytest.raises(cl.SchemaMismatchError, match=r"column 'ts'.*without changing values"):
        t.append(seconds)
    assert t.refresh().version == 0
