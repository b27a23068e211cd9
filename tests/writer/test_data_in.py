"""What append accepts: pandas, Polars, Arrow C streams, safe casts, schema_mode="merge"."""

from __future__ import annotations

import datetime

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import given, settings

import carbonlite as cl
from carbonlite.format.casts import incompatibility

pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")

UTC = datetime.timezone.utc
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("score", pa.float64()),
    ]
)


@pytest.fixture
def table(tmp_path):
    return cl.create_table(str(tmp_path / "t"), SCHEMA)


def _rows(t: cl.Table) -> list[dict]:
    return sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])


def test_pandas_dataframe(table):
    df = pd.DataFrame(
        {
            "id": [2, 1],
            "name": ["b", None],
            "ts": pd.to_datetime(
                ["2026-01-02 03:04:05.123456", "2026-01-01 00:00:00.000000"], utc=True
            ),
            "score": [0.5, 1.5],
        },
        index=[10, 20],  # not data: never a column
    )
    table.append(df)
    assert table.schema == SCHEMA
    assert _rows(table) == [
        {"id": 1, "name": None, "ts": datetime.datetime(2026, 1, 1, tzinfo=UTC), "score": 1.5},
        {
            "id": 2,
            "name": "b",
            "ts": datetime.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
            "score": 0.5,
        },
    ]


def test_polars_dataframe_and_arrow_c_stream(table):
    df = pl.DataFrame(
        {
            "id": pl.Series([1, 2], dtype=pl.Int32),
            "name": ["x", "y"],  # string_view on the Arrow side
            "ts": [datetime.datetime(2026, 5, 1, tzinfo=UTC)] * 2,
            "score": [1.0, None],
        }
    )
    table.append(df)

    class Stream:  # any object with __arrow_c_stream__ (the PyCapsule interface)
        def __arrow_c_stream__(self, requested_schema=None):
            data = pa.table({"id": [3], "name": pa.array(["z"], pa.large_string())})
            return data.__arrow_c_stream__(requested_schema)

    table.append(Stream(), schema_mode="merge")  # lacks ts and score: merge fills them
    rows = _rows(table)
    assert [r["id"] for r in rows] == [1, 2, 3]
    assert [r["name"] for r in rows] == ["x", "y", "z"]
    assert rows[1]["score"] is None and rows[2]["ts"] is None
    assert rows[0]["ts"] == datetime.datetime(2026, 5, 1, tzinfo=UTC)


def test_polars_lazyframe_is_refused_with_the_fix(table):
    with pytest.raises(cl.InvalidOptionError, match=r"collect\(\)"):
        table.append(pl.LazyFrame({"id": [1]}))
    assert table.version == 0


@pytest.mark.parametrize(
    ("column", "array", "expected"),
    [
        ("id", pa.array([1, 2], pa.int8()), [1, 2]),
        ("id", pa.array([4_000_000_000], pa.uint32()), [4_000_000_000]),
        ("name", pa.array(["a", "b"], pa.string_view()), ["a", "b"]),
        ("name", pa.array(["a", "b", "a"]).dictionary_encode(), ["a", "b", "a"]),
        ("name", pa.nulls(2), [None, None]),
        ("score", pa.array([3], pa.int32()), [3.0]),
        ("score", pa.array([1.5], pa.float32()), [1.5]),
        (
            "ts",
            pa.array([1_000], pa.timestamp("s")),  # no zone: read as UTC
            [datetime.datetime(1970, 1, 1, 0, 16, 40, tzinfo=UTC)],
        ),
        (
            "ts",
            pa.array([2_000_000_000], pa.timestamp("ns", tz="Asia/Tokyo")),  # same instant
            [datetime.datetime(1970, 1, 1, 0, 0, 2, tzinfo=UTC)],
        ),
    ],
)
def test_safe_casts_keep_every_value(table, column, array, expected):
    table.append(pa.table({column: array}), schema_mode="merge")  # the other columns null
    assert table.to_arrow(columns=[column])[column].to_pylist() == expected
    assert table.schema == SCHEMA


@pytest.mark.parametrize(
    ("column", "array", "why"),
    [
        ("id", pa.array([1.0]), "expected type int64, found double"),
        ("id", pa.array([1], pa.uint64()), "narrowing"),
        ("score", pa.array([1], pa.int64()), "narrowing"),
        ("name", pa.array([1]), "expected type string, found int64"),
        ("ts", pa.array([1_500], pa.timestamp("ns")), "without changing values"),
    ],
)
def test_unsafe_casts_name_the_column_and_commit_nothing(table, column, array, why):
    table.append(pa.table({"id": [7]}), schema_mode="merge")
    with pytest.raises(cl.SchemaMismatchError, match=rf"column '{column}'.*{why}") as info:
        table.append(pa.table({column: array}), schema_mode="merge")
    assert table.refresh().version == 1
    assert table.to_arrow()["id"].to_pylist() == [7]
    assert column in str(info.value)


def test_spark_timestamp_ntz_into_a_utc_column(table):
    """Spark's timestamp_ntz arrives as a zone-less timestamp: the same wall time in UTC."""
    naive = datetime.datetime(2026, 3, 4, 5, 6, 7)
    table.append(
        pa.table({"id": [1], "ts": pa.array([naive], pa.timestamp("us"))}), schema_mode="merge"
    )
    assert table.to_arrow()["ts"].to_pylist() == [naive.replace(tzinfo=UTC)]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16(), pa.uint32()]),
    st.sampled_from([pa.int16(), pa.int32(), pa.int64(), pa.uint16(), pa.uint32(), pa.uint64()]),
    st.data(),
)
def test_integer_rule_matches_the_values(found, expected, data):
    """An accepted integer cast keeps every value of the incoming type; a refused one has a
    value of the incoming type the table type cannot hold."""
    info = pa.types
    lo = -(2 ** (found.bit_width - 1)) if info.is_signed_integer(found) else 0
    hi = 2 ** (found.bit_width - (1 if info.is_signed_integer(found) else 0)) - 1
    elo = -(2 ** (expected.bit_width - 1)) if info.is_signed_integer(expected) else 0
    ehi = 2 ** (expected.bit_width - (1 if info.is_signed_integer(expected) else 0)) - 1
    accepted = incompatibility(found, expected) is None
    assert accepted == (elo <= lo and hi <= ehi)
    if accepted:
        values = data.draw(st.lists(st.integers(lo, hi), max_size=20))
        cast = pa.array(values, found).cast(expected, safe=True)
        assert cast.to_pylist() == values


def test_schema_mode_merge_adds_columns_in_the_same_commit(table):
    table.append(pa.table({"id": [1]}), schema_mode="merge")
    df = pd.DataFrame({"id": [2], "country": ["fr"], "tags": pd.Categorical(["a"])})
    result = table.append(df, schema_mode="merge")
    assert result.version == 2  # one commit: the schema and the rows
    assert table.schema.names == [*SCHEMA.names, "country", "tags"]
    assert table.schema.field("country").type == pa.string()
    assert table.schema.field("tags").type == pa.string()  # a dictionary's value type
    assert all(table.schema.field(n).nullable for n in ("country", "tags"))
    got = table.to_arrow(columns=["id", "country", "tags"]).sort_by("id").to_pylist()
    assert got == [
        {"id": 1, "country": None, "tags": None},
        {"id": 2, "country": "fr", "tags": "a"},
    ]
    assert table.history(1)[0].parameters["new_columns"] == "country,tags"
    assert table.snapshot(1).schema == SCHEMA  # time travel sees the old schema


def test_schema_mode_merge_refuses_what_it_cannot_type(table):
    with pytest.raises(cl.SchemaMismatchError, match="'empty' holds only nulls"):
        table.append(pa.table({"id": [1], "empty": pa.nulls(1)}), schema_mode="merge")
    with pytest.raises(cl.SchemaMismatchError, match="column 'id'"):
        table.append(pa.table({"id": ["x"], "new": [1]}), schema_mode="merge")
    with pytest.raises(cl.InvalidOptionError, match="schema_mode"):
        table.append(pa.table({"id": [1]}), schema_mode="mergeSchema")
    assert table.refresh().version == 0 and table.schema == SCHEMA


def test_strict_mode_refuses_new_columns(table):
    with pytest.raises(cl.SchemaMismatchError, match=r"'extra'.*not in the schema"):
        table.append(pa.table({"id": [1], "extra": [1]}))


def test_a_named_pandas_index_is_written_as_its_column(table):
    """Issue 25: ``append(df.set_index("id"))`` committed id = NULL for every row. A named
    index level is data, the column of its name (issue 38: one the table lacks was dropped
    silently); an unnamed index only numbers rows."""
    df = pd.DataFrame(
        {
            "id": [1, 2],
            "name": ["a", "b"],
            "ts": pd.to_datetime(["2026-01-01", "2026-01-02"], utc=True),
        },
        index=[5, 6],  # unnamed: not data
    ).assign(score=[0.5, 1.5])
    table.append(df.set_index("id"))
    table.append(df.assign(id=[3, 4]).set_index(["id", "name"]))  # a MultiIndex of columns
    with pytest.raises(cl.SchemaMismatchError, match=r"'row' \(int64\) is not in the schema"):
        table.append(df.assign(id=[5, 6]).rename_axis("row"))  # a named level the table lacks
    table.append(df.assign(id=[5, 6]))
    got = _rows(table)
    assert [r["id"] for r in got] == [1, 2, 3, 4, 5, 6]
    assert [r["name"] for r in got] == ["a", "b"] * 3
    assert table.schema == SCHEMA


def test_a_named_index_is_the_key_of_a_merge_and_of_an_upsert(tmp_path):
    keyed = cl.create_table(str(tmp_path / "pk"), SCHEMA, primary_key=["id"])
    df = pd.DataFrame(
        {
            "id": [1, 2],
            "name": ["a", "b"],
            "ts": pd.to_datetime(["2026-01-01", "2026-01-02"], utc=True),
        }
    ).assign(score=[0.5, 1.5])
    keyed.append(df.set_index("id"))
    keyed.merge(pd.DataFrame({"id": [2], "name": ["B"]}).set_index("id"), on=["id"])
    assert [(r["id"], r["name"]) for r in _rows(keyed)] == [(1, "a"), (2, "B")]


def test_missing_nullable_columns_are_written_as_nulls(table):
    df = pd.DataFrame({"id": [1], "name": ["a"]})
    table.append(df)
    table.append(df.assign(id=[2]).set_index("name"))  # name is data, ts and score missing
    table.append(df.assign(id=[3]), schema_mode="merge")
    assert _rows(table) == [{"id": i, "name": "a", "ts": None, "score": None} for i in (1, 2, 3)]


def test_an_upsert_writes_whole_rows_by_the_columns_rule(tmp_path):
    """An upsert replaces whole rows: a nullable column the data lacks is null in the row it
    writes (issue 38: one rule for a missing column at every door; Spark's and Flight's
    upserts did this already). merge(data, on=keys) is the way to change some columns."""
    keyed = cl.create_table(str(tmp_path / "pk"), SCHEMA, primary_key=["id"])
    keyed.append(pa.table({"id": [1], "name": ["a"], "ts": [None], "score": [2.0]}))
    keyed.merge(pa.table({"id": [1], "name": ["b"]}), on=["id"])
    assert _rows(keyed) == [{"id": 1, "name": "b", "ts": None, "score": 2.0}]
    keyed.append(pa.table({"id": [1], "name": ["c"]}))
    assert _rows(keyed) == [{"id": 1, "name": "c", "ts": None, "score": None}]
    keyed.overwrite(pa.table({"id": [2], "score": [3.0]}))
    assert _rows(keyed) == [{"id": 2, "name": None, "ts": None, "score": 3.0}]


def test_list_views_are_written_as_lists(tmp_path):
    """pyarrow's own cast of a list view builds invalid offsets; CarbonLite converts list
    views from their lengths and values (format/casts.py), for appends and new tables."""
    schema = pa.schema([("l", pa.list_(pa.int64())), ("m", pa.large_list(pa.string()))])
    views = pa.ListViewArray.from_arrays(
        pa.array([3, 0, 0], pa.int32()),
        pa.array([2, 3, 0], pa.int32()),
        pa.array([1, 2, 3, 4, 5]),
        mask=pa.array([False, False, True]),
    )
    large = pa.array([["a"], None, ["b", "c"]], type=pa.large_list_view(pa.string()))
    data = pa.table(
        {
            "l": pa.chunked_array([views, views.slice(1)]),
            "m": pa.chunked_array([large, large.slice(1)]),
        }
    )
    expected = [[4, 5], [1, 2, 3], None, [1, 2, 3], None]
    table = cl.create_table(tmp_path / "t", schema)
    table.append(data)
    assert table.to_arrow().column("l").to_pylist() == expected
    made = cl.write_table(tmp_path / "new", data)
    assert made.schema.field("l").type == pa.list_(pa.int64())
    assert made.to_arrow().column("m").to_pylist() == [["a"], None, ["b", "c"], None, ["b", "c"]]
