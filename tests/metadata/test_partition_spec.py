"""Partition specs: parsing, split/transform against a slow pure-Python reference, bounds,
JSON round trips, key normalization and buckets."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbonlite.errors import InvalidOptionError, SchemaMismatchError
from carbonlite.format.row_hash import column_hashes
from carbonlite.metadata.partition_spec import PartitionField, PartitionSpec

UTC = dt.timezone.utc
NY = "America/New_York"
US_DAY = 86_400 * 10**6
US_HOUR = 3_600 * 10**6
EPOCH = dt.datetime(1970, 1, 1)

SCHEMA = pa.schema(
    [
        ("row", pa.int64()),
        ("id", pa.int64()),
        ("region", pa.string()),
        ("ts", pa.timestamp("us", NY)),
        ("ts_naive", pa.timestamp("us")),
        ("ts_ns", pa.timestamp("ns", "UTC")),
        ("d", pa.date32()),
        ("d64", pa.date64()),
    ]
)

# one bucket per column at most, so that field names stay unique
SPECS = [
    "id",
    "region",
    "ts",
    "ts_naive",
    "d",
    "d64",
    "bucket(3, id)",
    "bucket(5, region)",
    "bucket(4, ts)",
    "bucket(2, d)",
    "year(ts)",
    "month(ts)",
    "day(ts)",
    "hour(ts)",
    "day(ts_naive)",
    "hour(ts_naive)",
    "year(ts_ns)",
    "hour(ts_ns)",
    "day(ts_ns)",
    "month(d)",
    "year(d)",
    "day(d)",
    "day(d64)",
    "month(d64)",
]


# -- tables ------------------------------------------------------------------------------------

micros = st.one_of(
    st.builds(
        lambda day, off: day * US_DAY + off,
        st.integers(-3, 3) | st.integers(-25_000, 40_000) | st.integers(-719_000, 2_900_000),
        st.sampled_from([0, 1, US_DAY - 1, US_HOUR - 1, US_HOUR, 5 * US_HOUR])
        | st.integers(0, US_DAY - 1),
    ),
    st.integers(-(6 * 10**16), 6 * 10**16),
)
ns_micros = st.integers(-3, 3).map(lambda d: d * US_DAY) | st.integers(-(9 * 10**15), 9 * 10**15)
rows = st.tuples(
    st.none() | st.integers(-20, 20) | st.integers(-(2**63), 2**63 - 1),
    st.none() | st.sampled_from(["eu", "us", "", "a/b", "é", "z"]) | st.text(max_size=3),
    st.none() | micros,  # ts
    st.none() | micros,  # ts_naive
    st.none() | st.tuples(ns_micros, st.integers(0, 999)),  # ts_ns: micros and extra ns
    st.none() | st.dates(dt.date(1800, 1, 1), dt.date(2200, 12, 31)),
    st.none()
    | st.integers(-80_000, 80_000).map(lambda d: d * 86_400_000)
    # date64 also off midnight: its value is the day it falls in
    | st.integers(-(10**13), 10**13),
)


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    data = draw(st.lists(rows, max_size=40))
    cols: list[list[Any]] = [list(c) for c in zip(*data, strict=True)] or [[] for _ in range(7)]
    ns = [None if v is None else v[0] * 1000 + v[1] for v in cols[4]]
    arrays = [
        pa.array(range(len(data)), pa.int64()),
        pa.array(cols[0], pa.int64()),
        pa.array(cols[1], pa.string()),
        pa.array(cols[2], pa.int64()).view(SCHEMA.field("ts").type),
        pa.array(cols[3], pa.int64()).view(SCHEMA.field("ts_naive").type),
        pa.array(ns, pa.int64()).view(SCHEMA.field("ts_ns").type),
        pa.array(cols[5], pa.date32()),
        pa.array(cols[6], pa.int64()).view(pa.date64()),
    ]
    table = pa.Table.from_arrays(arrays, schema=SCHEMA)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=3)))
    pieces = [table.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return pa.concat_tables(pieces)  # a random chunking


@st.composite
def specs(draw: st.DrawFn) -> PartitionSpec:
    chosen = draw(st.lists(st.sampled_from(SPECS), unique=True, max_size=3))
    return PartitionSpec.parse(chosen, SCHEMA)


# -- the slow reference ------------------------------------------------------------------------


def ints(table: pa.Table, column: str) -> list[int | None]:
    """The stored integers of a temporal column (days, ms or ticks)."""
    col = table.column(column).combine_chunks()
    return col.view(pa.int32() if col.type.bit_width == 32 else pa.int64()).to_pylist()


def wall(field: PartitionField, stored: int) -> dt.datetime:
    """The UTC (or naive) wall clock of a stored temporal integer, floored to microseconds."""
    t = field.source_type
    if pa.types.is_date32(t):
        return EPOCH + dt.timedelta(days=stored)
    if pa.types.is_date64(t):
        return EPOCH + dt.timedelta(milliseconds=stored)
    per_us = {"s": 10**-6, "ms": 10**-3, "us": 1, "ns": 1000}[t.unit]
    us = stored // per_us if per_us >= 1 else stored * round(1 / per_us)
    return EPOCH + dt.timedelta(microseconds=us)


def reference(field: PartitionField, table: pa.Table, i: int) -> Any:
    """The partition value of row ``i`` for one field, one row at a time in plain Python."""
    value = table.column(field.source)[i]
    if not value.is_valid:
        return None
    if field.transform == "bucket":
        one = table.column(field.source).slice(i, 1)  # another chunking of the same value
        return int(column_hashes(one)[0]) % field.buckets
    if field.transform == "identity" and not pa.types.is_date64(field.source_type):
        return value.as_py()
    w = wall(field, ints(table.slice(i, 1), field.source)[0])
    if field.transform == "year":
        return w.year
    if field.transform == "month":
        return f"{w.year:04d}-{w.month:02d}"
    if field.transform == "hour":
        return f"{w.date().isoformat()}T{w.hour:02d}"  # strftime's %Y does not pad years < 1000
    return w.date()  # day, and identity on date64


def sort_key(value: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is not None, v) for v in value)


# -- parse -------------------------------------------------------------------------------------

PARSE_SCHEMA = pa.schema(
    [
        ("region", pa.string()),
        ("ts", pa.timestamp("us", "UTC")),
        ("ts_ns", pa.timestamp("ns")),
        ("id", pa.int64()),
        ("d", pa.date32()),
        ("d64", pa.date64()),
        ("price", pa.float64()),
        ("flag", pa.bool_()),
        ("tags", pa.list_(pa.string())),
        ("point", pa.struct([("x", pa.int32())])),
        ("cat", pa.dictionary(pa.int32(), pa.string())),
        ("t", pa.time64("us")),
        ("amount", pa.decimal128(10, 2)),
        ("blob", pa.binary()),
    ]
)


@pytest.mark.parametrize(
    ("text", "spec", "name", "transform", "buckets"),
    [
        ("region", "region", "region", "identity", None),
        ("  region ", "region", "region", "identity", None),
        ("identity(region)", "region", "region", "identity", None),
        ("day( ts )", "day(ts)", "ts_day", "day", None),
        ("DAY(ts)", "day(ts)", "ts_day", "day", None),
        ("Year (d)", "year(d)", "d_year", "year", None),
        ("month(d64)", "month(d64)", "d64_month", "month", None),
        ("hour(ts_ns)", "hour(ts_ns)", "ts_ns_hour", "hour", None),
        ("bucket(16,id)", "bucket(16, id)", "id_bucket", "bucket", 16),
        (" BUCKET( 16 , id ) ", "bucket(16, id)", "id_bucket", "bucket", 16),
        (
            "bucket(2147483647, region)",
            "bucket(2147483647, region)",
            "region_bucket",
            "bucket",
            2**31 - 1,
        ),
        ("bucket(1, amount)", "bucket(1, amount)", "amount_bucket", "bucket", 1),
        ("flag", "flag", "flag", "identity", None),
        ("blob", "blob", "blob", "identity", None),
    ],
)
def test_parse_valid_forms(
    text: str, spec: str, name: str, transform: str, buckets: int | None
) -> None:
    (field,) = PartitionSpec.parse([text], PARSE_SCHEMA).fields
    assert (field.spec, field.name, field.transform, field.buckets) == (
        spec,
        name,
        transform,
        buckets,
    )
    assert field.source_type == PARSE_SCHEMA.field(field.source).type
    again = PartitionSpec.parse([field.spec], PARSE_SCHEMA)
    assert again.fields == (field,)


@pytest.mark.parametrize(
    ("specs", "words"),
    [
        (
            ["truncate(ts)"],
            ["unknown partition transform", "'truncate'", "bucket(n, col)", "day(col)"],
        ),
        (["regoin"], ["unknown column", "'regoin'", "did you mean", "'region'"]),
        (["day(tss)"], ["unknown column", "'tss'", "'ts'"]),
        (["day(region)"], ["'region'", "string", "day()", "date or timestamp"]),
        (["year(id)"], ["'id'", "int64", "year()"]),
        (["hour(d)"], ["'d'", "date32", "hour() needs a timestamp"]),
        (["hour(d64)"], ["'d64'", "hour() needs a timestamp"]),
        (["bucket(0, id)"], ["bucket count", "1..2147483647", "'0'"]),
        (["bucket(-1, id)"], ["bucket count", "'-1'"]),
        (["bucket(2147483648, id)"], ["bucket count", "'2147483648'"]),
        (["bucket(x, id)"], ["bucket count", "'x'"]),
        (["bucket(1.5, id)"], ["bucket count", "'1.5'"]),
        (["bucket(id, 16)"], ["count first", "'id'"]),
        (["bucket(id)"], ["two arguments", "bucket(n, col)"]),
        (["bucket(16, nope)"], ["unknown column", "'nope'"]),
        (["day(ts, 3)"], ["exactly one column"]),
        (["region", "region"], ["duplicate", "'region'"]),
        (["day(ts)", " DAY( ts ) "], ["duplicate", "'day(ts)'"]),
        (
            ["bucket(16, id)", "bucket(8, id)"],
            ["'bucket(8, id)'", "'id_bucket'", "'bucket(16, id)'"],
        ),
        (["price"], ["'price'", "float", "NaN", "-0.0", "integer or decimal"]),
        (["bucket(4, price)"], ["'price'", "float", "NaN"]),
        (["tags"], ["'tags'", "list", "flat"]),
        (["bucket(4, point)"], ["'point'", "struct", "flat"]),
        (["cat"], ["'cat'", "dictionary"]),
        (["t"], ["'t'", "time64", "identity takes"]),
        (["bucket(3, flag)"], ["'flag'", "bool", "bucket takes"]),
        (["ts_ns"], ["'ts_ns'", "microseconds", "timestamp[us]"]),
        ([""], ["empty partition spec"]),
        (["   "], ["empty partition spec"]),
        ([3], ["a partition spec is a string", "3"]),
        ("region", ["a list of specs", "'region'"]),
    ],
)
def test_parse_errors(specs: Any, words: list[str]) -> None:
    with pytest.raises(InvalidOptionError) as info:
        PartitionSpec.parse(specs, PARSE_SCHEMA)
    for word in words:
        assert word in str(info.value)


def test_empty_spec_is_unpartitioned() -> None:
    spec = PartitionSpec.parse([], PARSE_SCHEMA)
    assert not spec
    assert not spec.is_partitioned
    assert spec.source_columns == ()
    assert spec.to_json() == []
    table = pa.table({"region": ["a", "b"]})
    assert spec.split(table) == [((), table)]
    assert spec.transform(table) == []
    assert spec.normalize(()) == ()
    assert spec.describe(()) == "(unpartitioned)"
    assert spec.bounds(()) == {}


def test_spec_properties_and_json() -> None:
    spec = PartitionSpec.parse(["region", "day(ts)", "year(ts)", "bucket(16, id)"], PARSE_SCHEMA)
    assert spec and spec.is_partitioned and len(spec) == 4
    assert spec.source_columns == ("region", "ts", "id")
    assert spec.to_json() == ["region", "day(ts)", "year(ts)", "bucket(16, id)"]
    assert PartitionSpec.from_json(json.loads(json.dumps(spec.to_json())), PARSE_SCHEMA) == spec
    assert spec.partition_schema() == pa.schema(
        [
            ("region", pa.string()),
            ("ts_day", pa.date32()),
            ("ts_year", pa.int32()),
            ("id_bucket", pa.int32()),
        ]
    )
    with pytest.raises(InvalidOptionError, match="unknown column 'region'"):
        PartitionSpec.from_json(["region"], pa.schema([("other", pa.string())]))


# -- split and transform -----------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(table=tables(), spec=specs())
def test_split_groups_rows_by_reference_value(table: pa.Table, spec: PartitionSpec) -> None:
    groups = spec.split(table)
    seen: list[int] = []
    for value, group in groups:
        assert group.schema == table.schema
        assert group.num_rows > 0
        assert spec.normalize(value) == value
        order = group.column("row").to_pylist()
        assert order == sorted(order)  # rows keep their relative order
        seen.extend(order)
        for i in order:
            assert tuple(reference(f, table, i) for f in spec.fields) == value
        # the group holds exactly the input's rows
        assert group.equals(table.take(pa.array(order, pa.int64())))
    assert sorted(seen) == list(range(table.num_rows))
    values = [v for v, _ in groups]
    assert len(set(values)) == len(values)
    assert values == sorted(values, key=sort_key)
    # transform agrees with the reference row by row
    arrays = spec.transform(table)
    assert [a.type for a in arrays] == list(spec.partition_schema().types)
    for f, arr in zip(spec.fields, arrays, strict=True):
        assert len(arr) == table.num_rows
        py = arr.to_pylist()
        for i in range(table.num_rows):
            assert py[i] == reference(f, table, i)


@settings(max_examples=100, deadline=None)
@given(table=tables(), spec=specs(), copies=st.integers(260, 400))
def test_split_of_a_repeated_table_repeats_each_group(
    table: pa.Table, spec: PartitionSpec, copies: int
) -> None:
    # many rows per group: identity columns are rebuilt as repeated values, not moved
    big = pa.concat_tables([table] * copies)
    small, large = spec.split(table), spec.split(big)
    assert [v for v, _ in large] == [v for v, _ in small]
    for (_, one), (_, many) in zip(small, large, strict=True):
        assert many.schema == big.schema
        assert many.equals(pa.concat_tables([one] * copies))


def test_split_orders_groups_none_first_and_keeps_row_order() -> None:
    table = pa.table({"region": ["b", None, "a", "b", "é", None, "a", "Z"], "n": list(range(8))})
    spec = PartitionSpec.parse(["region"], table.schema)
    groups = spec.split(table)
    assert [v for v, _ in groups] == [(None,), ("Z",), ("a",), ("b",), ("é",)]
    assert [g.column("n").to_pylist() for _, g in groups] == [[1, 5], [7], [2, 6], [0, 3], [4]]
    batch = table.to_batches()[0]
    assert [v for v, _ in spec.split(batch)] == [v for v, _ in groups]
    assert spec.split(table.slice(0, 0)) == []


def test_split_many_groups_and_multiple_radix_passes() -> None:
    n = 30_000
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 6_000, n)
    table = pa.table({"id": ids, "k": rng.integers(0, 3, n), "row": np.arange(n)})
    spec = PartitionSpec.parse(["k", "id"], table.schema)
    groups = spec.split(table)
    pairs = sorted(set(zip(table.column("k").to_pylist(), ids.tolist(), strict=True)))
    assert [v for v, _ in groups] == pairs
    for value, group in groups:
        assert set(
            zip(group.column("k").to_pylist(), group.column("id").to_pylist(), strict=True)
        ) == {value}
        rows = group.column("row").to_numpy()
        assert (np.diff(rows) > 0).all()
    assert sum(g.num_rows for _, g in groups) == n


def test_split_rejects_data_without_the_source_column() -> None:
    spec = PartitionSpec.parse(["day(ts)"], PARSE_SCHEMA)
    with pytest.raises(SchemaMismatchError, match=r"needs column 'ts'.*no such column"):
        spec.split(pa.table({"x": [1]}))
    with pytest.raises(SchemaMismatchError, match="timestamp\\[ms\\]"):
        spec.split(pa.table({"ts": pa.array([1], pa.timestamp("ms"))}))


def test_temporal_values_outside_years_1_to_9999_are_refused() -> None:
    schema = pa.schema([("ts", pa.timestamp("s"))])
    far = 400 * 366 * 86_400 * 30  # about year 14000
    table = pa.table({"ts": pa.array([0, far], pa.int64()).view(pa.timestamp("s"))})
    with pytest.raises(InvalidOptionError, match=r"outside years 1\.\.9999"):
        PartitionSpec.parse(["day(ts)"], schema).split(table)


def test_split_of_many_rows_into_a_thousand_partitions() -> None:
    """The fast paths (identity columns repeated, not taken) on a table large enough to take
    them: every group holds exactly its rows (the speed is measured in benchmarks/)."""
    n = 200_000
    rng = np.random.default_rng(3)
    start = np.datetime64("2026-01-01", "us").astype(np.int64)
    table = pa.table(
        {
            "region": pa.array(
                np.array([f"region-{i}" for i in range(10)])[rng.integers(0, 10, n)]
            ),
            "ts": pa.array(start + rng.integers(0, 100 * US_DAY, n)).view(
                pa.timestamp("us", "UTC")
            ),
            "v": rng.random(n),
        }
    )
    spec = PartitionSpec.parse(["region", "day(ts)"], table.schema)
    groups = spec.split(table)
    assert len(groups) == 1000
    assert sum(g.num_rows for _, g in groups) == n
    for (region, day), rows in groups[::97]:
        assert set(rows.column("region").to_pylist()) == {region}
        days = pc.cast(rows.column("ts"), pa.timestamp("us")).cast(pa.date32())
        assert set(days.to_pylist()) == {day}


# -- bounds ------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(table=tables(), spec=specs())
def test_every_row_lies_inside_its_partition_bounds(table: pa.Table, spec: PartitionSpec) -> None:
    for value, group in spec.split(table):
        bounds, raw = spec.bounds(value), spec.raw_bounds(value)
        nulls = spec.null_columns(value)
        assert set(bounds) == set(raw)
        assert not nulls & set(bounds)
        for column in nulls:
            assert group.column(column).null_count == group.num_rows
        for column, (lo, hi) in raw.items():
            stored = ints(group, column) if column not in ("id", "region") else None
            for i in range(group.num_rows):
                py = group.column(column)[i].as_py() if column != "ts_ns" else None
                assert stored is None or lo <= stored[i] <= hi
                if stored is None:
                    assert lo <= py <= hi
                if py is not None:
                    assert bounds[column][0] <= py <= bounds[column][1]
            if column == "ts_ns":  # bounds widened to whole microseconds, still safe
                b_lo = pa.scalar(bounds[column][0], pa.timestamp("us", "UTC")).value * 1000
                b_hi = pa.scalar(bounds[column][1], pa.timestamp("us", "UTC")).value * 1000
                assert b_lo <= lo and hi <= b_hi and b_hi - hi <= 1000


@pytest.mark.parametrize("tz", [None, "UTC", NY])
def test_day_bounds_are_tight_to_the_microsecond(tz: str | None) -> None:
    schema = pa.schema([("ts", pa.timestamp("us", tz))])
    spec = PartitionSpec.parse(["day(ts)"], schema)
    day = dt.date(2026, 11, 24)
    first = (day.toordinal() - dt.date(1970, 1, 1).toordinal()) * US_DAY
    stored = [first - 1, first, first + US_DAY - 1, first + US_DAY]
    table = pa.table({"ts": pa.array(stored, pa.int64()).view(schema.field("ts").type)})
    groups = dict(spec.split(table))
    assert groups[(day,)].column("ts").to_pylist() == table.column("ts").to_pylist()[1:3]
    lo, hi = spec.bounds((day,))["ts"]
    zone = None if tz is None else (UTC if tz == "UTC" else ZoneInfo(tz))
    want_lo = dt.datetime(2026, 11, 24)
    want_hi = dt.datetime(2026, 11, 24, 23, 59, 59, 999_999)
    if zone is not None:
        want_lo = want_lo.replace(tzinfo=UTC).astimezone(zone)
        want_hi = want_hi.replace(tzinfo=UTC).astimezone(zone)
    assert (lo, hi) == (want_lo, want_hi)
    assert lo.tzinfo is None if tz is None else lo.utcoffset() == want_lo.utcoffset()
    assert spec.raw_bounds((day,))["ts"] == (first, first + US_DAY - 1)
    outside_lo, inside_lo, inside_hi, outside_hi = table.column("ts").to_pylist()
    assert lo <= inside_lo <= inside_hi <= hi
    assert outside_lo < lo and outside_hi > hi


def test_bounds_per_transform_and_unit() -> None:
    schema = pa.schema(
        [
            ("ms", pa.timestamp("ms")),
            ("ns", pa.timestamp("ns")),
            ("d", pa.date32()),
            ("d64", pa.date64()),
        ]
    )
    spec = PartitionSpec.parse(["day(ms)", "hour(ns)", "month(d)", "year(d64)"], schema)
    value = spec.normalize((dt.date(2024, 2, 29), "2024-02-29T23", "2024-02", 2024))
    bounds = spec.bounds(value)
    assert bounds["ms"] == (dt.datetime(2024, 2, 29), dt.datetime(2024, 2, 29, 23, 59, 59, 999_000))
    # ns: the max is widened to the next whole microsecond; raw bounds are exact
    assert bounds["ns"] == (dt.datetime(2024, 2, 29, 23), dt.datetime(2024, 3, 1))
    hour = (dt.datetime(2024, 2, 29, 23) - EPOCH) // dt.timedelta(hours=1)
    assert spec.raw_bounds(value)["ns"] == (hour * 3_600 * 10**9, (hour + 1) * 3_600 * 10**9 - 1)
    assert bounds["d"] == (dt.date(2024, 2, 1), dt.date(2024, 2, 29))
    assert bounds["d64"] == (dt.date(2024, 1, 1), dt.date(2024, 12, 31))
    first = (dt.date(2024, 1, 1) - EPOCH.date()).days * 86_400_000
    last = (dt.date(2025, 1, 1) - EPOCH.date()).days * 86_400_000 - 1
    assert spec.raw_bounds(value)["d64"] == (first, last)


def test_bounds_of_identity_bucket_null_and_shared_columns() -> None:
    spec = PartitionSpec.parse(["region", "bucket(4, id)", "year(ts)", "day(ts)"], PARSE_SCHEMA)
    value = ("eu", 3, 2026, dt.date(2026, 11, 24))
    bounds = spec.bounds(value)
    assert bounds["region"] == ("eu", "eu")
    assert "id" not in bounds  # bucket gives no bound
    assert bounds["ts"] == (
        dt.datetime(2026, 11, 24, tzinfo=UTC),
        dt.datetime(2026, 11, 24, 23, 59, 59, 999_999, tzinfo=UTC),
    )  # year and day intersected
    assert spec.null_columns(value) == set()
    impossible = spec.bounds(("eu", 3, 2025, dt.date(2026, 11, 24)))["ts"]
    assert impossible[0] > impossible[1]
    nulls = (None, None, None, None)
    assert spec.bounds(nulls) == {}
    assert spec.null_columns(nulls) == {"region", "id", "ts"}
    assert spec.null_columns(("eu", None, 2026, None)) == {"id", "ts"}
    assert "ts" not in spec.bounds(("eu", None, 2026, None))


# -- JSON --------------------------------------------------------------------------------------

JSON_SCHEMA = pa.schema(
    [
        ("i8", pa.int8()),
        ("u64", pa.uint64()),
        ("flag", pa.bool_()),
        ("s", pa.string()),
        ("ls", pa.large_string()),
        ("b", pa.binary()),
        ("fb", pa.binary(3)),
        ("dec", pa.decimal128(10, 2)),
        ("big", pa.decimal256(40, 5)),
        ("d", pa.date32()),
        ("d64", pa.date64()),
        ("sec", pa.timestamp("s")),
        ("paris", pa.timestamp("us", "Europe/Paris")),
        ("plus", pa.timestamp("ms", "+05:30")),
        ("ts", pa.timestamp("ns", "UTC")),
    ]
)
JSON_SPEC = PartitionSpec.parse(
    [*JSON_SCHEMA.names[:-1], "year(ts)", "month(ts)", "day(ts)", "hour(ts)", "bucket(9, s)"],
    JSON_SCHEMA,
)
datetimes = st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9999, 12, 30))
FIELD_VALUES = {
    "i8": st.integers(-128, 127),
    "u64": st.integers(0, 2**64 - 1),
    "flag": st.booleans(),
    "s": st.text(),
    "ls": st.text(),
    "b": st.binary(),
    "fb": st.binary(min_size=3, max_size=3),
    "dec": st.decimals(-(10**8) + 1, 10**8 - 1, places=2, allow_nan=False),
    "big": st.decimals(-(10**35) + 1, 10**35 - 1, places=5, allow_nan=False),
    "d": st.dates(),
    "d64": st.dates(),
    "sec": datetimes.map(lambda v: v.replace(microsecond=0)),
    "paris": datetimes.map(lambda v: v.replace(tzinfo=UTC)),
    "plus": datetimes.map(
        lambda v: v.replace(microsecond=v.microsecond // 1000 * 1000, tzinfo=UTC)
    ),
    "ts_year": st.integers(1, 9999),
    "ts_month": st.dates().map(lambda d: f"{d.year:04d}-{d.month:02d}"),
    "ts_day": st.dates(),
    "ts_hour": st.tuples(st.dates(), st.integers(0, 23)).map(lambda p: f"{p[0]}T{p[1]:02d}"),
    "s_bucket": st.integers(0, 8),
}


@st.composite
def json_values(draw: st.DrawFn) -> tuple[Any, ...]:
    out = []
    for f in JSON_SPEC.fields:
        v = draw(st.none() | FIELD_VALUES[f.name])
        if v is not None and f.transform == "identity":
            v = pa.scalar(v, f.source_type).as_py()  # the canonical (as_py) value
        out.append(v)
    return tuple(out)


@settings(max_examples=300, deadline=None)
@given(value=json_values())
def test_value_json_round_trip_is_exact(value: tuple[Any, ...]) -> None:
    assert JSON_SPEC.normalize(value) == value
    obj = json.loads(json.dumps(JSON_SPEC.value_to_json(value)))
    back = JSON_SPEC.value_from_json(obj)
    assert back == value
    for a, b in zip(back, value, strict=True):
        assert type(a) is type(b)
        if isinstance(a, Decimal):
            assert str(a) == str(b)
        if isinstance(a, dt.datetime):
            assert a.tzinfo == b.tzinfo and a.utcoffset() == b.utcoffset()
            assert (a.year, a.hour, a.minute) == (b.year, b.hour, b.minute)
    text = JSON_SPEC.describe(value)
    assert (
        text.startswith("i8=")
        and text.count("/ls=") == 1
        and text.endswith(f"/s_bucket={obj[-1]}".replace("None", "null"))
    )


def test_value_json_forms() -> None:
    spec = PartitionSpec.parse(["b", "dec", "paris", "d"], JSON_SCHEMA)
    paris = dt.datetime(2026, 3, 29, 3, 30, tzinfo=ZoneInfo("Europe/Paris"))
    value = (b"\x00\xff", Decimal("1.50"), paris, dt.date(2026, 11, 24))
    assert spec.value_to_json(value) == ["00ff", "1.50", "2026-03-29T03:30:00+02:00", "2026-11-24"]
    assert (
        spec.value_from_json(["00ff", "1.50", "2026-03-29T03:30:00+02:00", "2026-11-24"]) == value
    )
    for bad, words in [
        (["zz", None, None, None], "'zz' of field 'b': not hex"),
        ([None, "x", None, None], "'x' of field 'dec': not decimal"),
        ([None, None, 5, None], "5 of field 'paris': not str"),
        ([None] * 3, "not 4 values"),
    ]:
        with pytest.raises(InvalidOptionError, match=words):
            spec.value_from_json(bad)
    with pytest.raises(InvalidOptionError, match="not int"):
        PartitionSpec.parse(["i8"], JSON_SCHEMA).value_from_json(["5"])
    with pytest.raises(InvalidOptionError, match="not int"):
        PartitionSpec.parse(["bucket(4, i8)"], JSON_SCHEMA).value_from_json([True])


def test_times_inside_a_dst_fold_round_trip_both_hours() -> None:
    """Both hours of the night Paris leaves summer time: Python's ``==`` across two zones is
    False inside a fold (PEP 495), so exactness is checked on the instant."""
    spec = PartitionSpec.parse(["paris"], JSON_SCHEMA)
    for fold, text in [(0, "2026-10-25T02:30:00+02:00"), (1, "2026-10-25T02:30:00+01:00")]:
        value = (dt.datetime(2026, 10, 25, 2, 30, tzinfo=ZoneInfo("Europe/Paris"), fold=fold),)
        assert spec.normalize(value) == value
        assert spec.value_to_json(value) == [text]
        (back,) = spec.value_from_json([text])
        assert back.utcoffset() == value[0].utcoffset() and back.fold == fold


def test_describe() -> None:
    spec = PartitionSpec.parse(["region", "day(ts)", "bucket(16, id)"], PARSE_SCHEMA)
    assert (
        spec.describe(("eu", dt.date(2026, 11, 24), 3)) == "region=eu/ts_day=2026-11-24/id_bucket=3"
    )
    assert spec.describe((None, None, None)) == "region=null/ts_day=null/id_bucket=null"
    assert spec.describe(("a/b", None, 0)) == 'region="a/b"/ts_day=null/id_bucket=0'
    assert spec.describe(("null", None, 0)).startswith('region="null"/')
    other = PartitionSpec.parse(["flag", "blob", "amount"], PARSE_SCHEMA)
    assert other.describe((True, b"\x01", Decimal("2.50"))) == "flag=true/blob=0x01/amount=2.50"


# -- normalize ---------------------------------------------------------------------------------

NORM_SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us", "UTC")),
        ("naive", pa.timestamp("s")),
        ("paris", pa.timestamp("us", "Europe/Paris")),
        ("id", pa.int8()),
        ("region", pa.string()),
        ("blob", pa.binary()),
        ("amount", pa.decimal128(10, 2)),
        ("d", pa.date32()),
        ("flag", pa.bool_()),
    ]
)


@pytest.mark.parametrize(
    ("spec", "key", "value"),
    [
        ("day(ts)", dt.date(2026, 11, 24), dt.date(2026, 11, 24)),
        ("day(ts)", "2026-11-24", dt.date(2026, 11, 24)),
        ("day(ts)", dt.datetime(2026, 11, 24), dt.date(2026, 11, 24)),
        ("day(ts)", dt.datetime(2026, 11, 24, tzinfo=UTC), dt.date(2026, 11, 24)),
        ("day(ts)", (dt.date(2026, 11, 24),), dt.date(2026, 11, 24)),
        ("day(ts)", [dt.date(2026, 11, 24)], dt.date(2026, 11, 24)),
        ("day(ts)", None, None),
        ("month(ts)", "2026-11", "2026-11"),
        ("year(ts)", 2026, 2026),
        ("year(ts)", np.int64(2026), 2026),
        ("hour(ts)", "2026-11-24T05", "2026-11-24T05"),
        ("bucket(16, id)", 0, 0),
        ("bucket(16, id)", 15, 15),
        ("id", 5, 5),
        ("id", -128, -128),
        ("region", "eu", "eu"),
        ("region", "", ""),
        ("blob", bytearray(b"x"), b"x"),
        ("amount", Decimal("1.5"), Decimal("1.50")),
        ("amount", 3, Decimal("3.00")),
        ("d", dt.date(2026, 1, 1), dt.date(2026, 1, 1)),
        ("d", "2026-01-01", dt.date(2026, 1, 1)),
        ("naive", dt.datetime(2026, 1, 1, 5, 6, 7), dt.datetime(2026, 1, 1, 5, 6, 7)),
        ("naive", "2026-01-01T05:06:07", dt.datetime(2026, 1, 1, 5, 6, 7)),
        ("ts", dt.datetime(2026, 1, 1, tzinfo=UTC), dt.datetime(2026, 1, 1, tzinfo=UTC)),
        (
            "paris",
            "2026-01-01T00:00:00+01:00",
            dt.datetime(2026, 1, 1, tzinfo=ZoneInfo("Europe/Paris")),
        ),
        ("flag", False, False),
    ],
)
def test_normalize_accepts(spec: str, key: Any, value: Any) -> None:
    out = PartitionSpec.parse([spec], NORM_SCHEMA).normalize(key)
    assert out == (value,)
    assert type(out[0]) is type(value)


@pytest.mark.parametrize(
    ("spec", "key", "words"),
    [
        ("day(ts)", dt.datetime(2026, 11, 24, 10), ["ts_day", "midnight"]),
        (
            "day(ts)",
            dt.datetime(2026, 11, 24, tzinfo=ZoneInfo("Europe/Paris")),
            ["midnight", "UTC"],
        ),
        ("day(ts)", "2026-13-01", ["ts_day", "'2026-13-01'"]),
        ("day(ts)", "2026/11/24", ["YYYY-MM-DD"]),
        ("day(ts)", 20261124, ["datetime.date", "20261124"]),
        ("month(ts)", "2026-1", ["YYYY-MM", "ts_month"]),
        ("month(ts)", "2026-13", ["YYYY-MM"]),
        ("month(ts)", (2026, 11), ["a value or a 1-tuple"]),
        ("year(ts)", "2026", ["ints in 1..9999", "'2026'"]),
        ("year(ts)", True, ["ints in 1..9999"]),
        ("year(ts)", 0, ["ints in 1..9999"]),
        ("year(ts)", 10_000, ["ints in 1..9999"]),
        ("hour(ts)", "2026-11-24T24", ["YYYY-MM-DDTHH"]),
        ("hour(ts)", "2026-11-24 05", ["YYYY-MM-DDTHH"]),
        ("hour(ts)", "2026-02-30T05", ["ISO"]),
        ("bucket(16, id)", 16, ["ints in 0..15", "id_bucket"]),
        ("bucket(16, id)", -1, ["ints in 0..15"]),
        ("bucket(16, id)", True, ["ints in 0..15"]),
        ("id", 300, ["int8", "300"]),
        ("id", "5", ["int8", "'5'"]),
        ("id", 5.0, ["int8"]),
        ("id", True, ["int8"]),
        ("region", b"eu", ["string", "b'eu'"]),
        ("region", 3, ["string"]),
        ("blob", "x", ["binary"]),
        ("amount", Decimal("1.555"), ["decimal128(10, 2)"]),
        ("amount", 1.5, ["decimal128"]),
        ("d", dt.datetime(2026, 1, 1), ["date32", "give a date"]),
        ("d", "yesterday", ["ISO"]),
        ("naive", dt.datetime(2026, 1, 1, tzinfo=UTC), ["naive"]),
        ("naive", dt.datetime(2026, 1, 1, 0, 0, 0, 5), ["cannot hold it exactly"]),
        ("ts", dt.datetime(2026, 1, 1), ["aware"]),
        ("ts", dt.date(2026, 1, 1), ["give a datetime"]),
        ("flag", 1, ["bool"]),
    ],
)
def test_normalize_refuses(spec: str, key: Any, words: list[str]) -> None:
    with pytest.raises(InvalidOptionError) as info:
        PartitionSpec.parse([spec], NORM_SCHEMA).normalize(key)
    for word in words:
        assert word in str(info.value)


def test_normalize_several_fields() -> None:
    spec = PartitionSpec.parse(["region", "day(ts)"], NORM_SCHEMA)
    want = ("eu", dt.date(2026, 11, 24))
    assert spec.normalize(("eu", "2026-11-24")) == want
    assert spec.normalize(["eu", dt.date(2026, 11, 24)]) == want
    for bad in ("eu", ("eu",), ("eu", "2026-11-24", 3)):
        with pytest.raises(InvalidOptionError, match="a tuple of 2 values"):
            spec.normalize(bad)
    with pytest.raises(InvalidOptionError):
        PartitionSpec.parse([], NORM_SCHEMA).normalize("eu")


# -- buckets -----------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), max_size=60),
    n=st.integers(1, 50),
    cuts=st.lists(st.integers(0, 60), max_size=4),
)
def test_buckets_are_in_range_and_independent_of_chunking(
    values: list[int | None], n: int, cuts: list[int]
) -> None:
    schema = pa.schema([("id", pa.int64())])
    spec = PartitionSpec.parse([f"bucket({n}, id)"], schema)
    whole = pa.table({"id": pa.array(values, pa.int64())})
    cuts = sorted(min(c, len(values)) for c in cuts)
    bounds = list(zip([0, *cuts], [*cuts, len(values)], strict=True))
    chunked = pa.concat_tables([whole.slice(a, b - a) for a, b in bounds])
    (one,) = spec.transform(whole)
    (other,) = spec.transform(chunked)
    assert one.to_pylist() == other.to_pylist()
    by_value: dict[int, int] = {}
    for v, b in zip(values, one.to_pylist(), strict=True):
        if v is None:
            assert b is None
            continue
        assert 0 <= b < n
        assert by_value.setdefault(v, b) == b  # the same value, the same bucket
    grouped = {value[0]: g.num_rows for value, g in spec.split(chunked)}
    assert sum(grouped.values()) == len(values)


def test_buckets_are_roughly_uniform() -> None:
    table = pa.table({"id": pa.array(np.arange(100_000, dtype=np.int64))})
    (buckets,) = PartitionSpec.parse(["bucket(16, id)"], table.schema).transform(table)
    counts = np.bincount(buckets.to_numpy(), minlength=16)
    expected = 100_000 / 16
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 50, counts  # 15 degrees of freedom: p = 0.001 at 37.7
    assert counts.min() > 0.95 * expected and counts.max() < 1.05 * expected


def test_buckets_of_other_types_and_widths() -> None:
    schema = pa.schema(
        [
            ("s", pa.string()),
            ("ls", pa.large_string()),
            ("i32", pa.int32()),
            ("i64", pa.int64()),
            ("d", pa.date32()),
            ("amount", pa.decimal128(10, 2)),
            ("b", pa.binary()),
        ]
    )
    table = pa.table(
        {
            "s": ["a", "bb", None, "a"],
            "ls": pa.array(["a", "bb", None, "a"], pa.large_string()),
            "i32": pa.array([1, -5, None, 1], pa.int32()),
            "i64": pa.array([1, -5, None, 1], pa.int64()),
            "d": pa.array([dt.date(2026, 1, 1), None, dt.date(1900, 5, 5), dt.date(2026, 1, 1)]),
            "amount": pa.array(
                [Decimal("1.00"), None, Decimal("-3.50"), Decimal("1.00")], pa.decimal128(10, 2)
            ),
            "b": [b"x", b"", None, b"x"],
        },
        schema=schema,
    )
    spec = PartitionSpec.parse([f"bucket(7, {c})" for c in schema.names], schema)
    arrays = [a.to_pylist() for a in spec.transform(table)]
    for column, arr in zip(schema.names, arrays, strict=True):
        assert arr[0] == arr[3] and all(v is None or 0 <= v < 7 for v in arr)
        assert [v is None for v in arr] == [v is None for v in table.column(column).to_pylist()]
    assert arrays[0] == arrays[1]  # string and large_string hash alike
    assert arrays[2] == arrays[3]  # so do int32 and int64
