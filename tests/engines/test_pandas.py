"""``Table.to_pandas``: the rows pyarrow computes, as pandas makes them, pruned as ``scan``."""

from __future__ import annotations

import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from tests.engines.conftest import SCHEMA, N, make_data

pd = pytest.importorskip("pandas")
from pandas.testing import assert_frame_equal  # noqa: E402

TS = pa.scalar(1_767_400_000_000_000, pa.timestamp("us", "UTC"))


@pytest.mark.parametrize(
    ("columns", "filter", "expression"),
    [
        (None, None, None),
        (["id", "x"], pc.field("id") < 1200, pc.field("id") < 1200),
        (
            ["k", "ts"],
            [("k", "in", ["k1", "k5"]), ("i32", ">=", 0)],  # DNF, as pyarrow.parquet takes
            pc.field("k").isin(["k1", "k5"]) & (pc.field("i32") >= 0),
        ),
        (
            ["d", "flag"],
            pc.field("x").is_null() | pc.field("flag"),
            pc.field("x").is_null() | pc.field("flag"),
        ),
        (["x"], pc.field("ts") >= TS, pc.field("ts") >= TS),
    ],
)
def test_to_pandas_is_pyarrows_result_in_pandas(table, everything, columns, filter, expression):
    got = table.to_pandas(columns=columns, filter=filter)
    want = everything if expression is None else everything.filter(expression)
    assert isinstance(got, pd.DataFrame)
    assert_frame_equal(got, want.select(columns or SCHEMA.names).to_pandas())


def test_to_pandas_keeps_nulls_and_nan_apart(table):
    got = table.to_pandas(columns=["id", "x", "k"], filter=pc.field("id") < 200, version=1)
    data = make_data(200)
    assert got["x"].isna().sum() == data.column("x").null_count + 3  # NaN rows 0, 97, 194
    assert got["k"].isna().tolist() == [v is None for v in data.column("k").to_pylist()]
    assert got["id"].tolist() == list(range(200))


def test_to_pandas_prunes_and_travels_in_time(table, blocklets_read):
    frame = table.to_pandas(columns=["id"], filter=[("id", ">=", N)])
    assert frame["id"].tolist() == list(range(N, N + 10))
    assert len(blocklets_read) == 1  # the last blocklet only, of 11
    assert len(table.to_pandas(columns=["id"], version=1)) == N


def test_to_pandas_of_an_empty_table(tmp_path):
    frame = cl.create_table(str(tmp_path / "e"), SCHEMA).to_pandas()
    assert len(frame) == 0 and list(frame.columns) == SCHEMA.names


def test_a_missing_pandas_says_how_to_install_it(table, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now fails
    with pytest.raises(cl.MissingDependencyError, match=r"pip install 'carbonlite\[pandas\]'"):
        table.to_pandas()
