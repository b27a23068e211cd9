"""Hypothesis strategies for the Arrow types the blocklet format stores."""

from __future__ import annotations

import math
from decimal import Context, Decimal
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

INT_TYPES = [
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint8(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
]
LEAF_TYPES = st.sampled_from(
    [
        *INT_TYPES,
        pa.float32(),
        pa.float64(),
        pa.bool_(),
        pa.string(),
        pa.large_string(),
        pa.binary(),
        pa.large_binary(),
        pa.date32(),
        pa.timestamp("s"),
        pa.timestamp("ms", tz="UTC"),
        pa.timestamp("us"),
        pa.timestamp("ns", tz="Europe/Paris"),
        pa.decimal128(9, 2),
        pa.decimal128(38, 10),
    ]
)


def types(max_depth: int = 1) -> st.SearchStrategy[pa.DataType]:
    if max_depth <= 0:
        return LEAF_TYPES
    child = types(max_depth - 1)
    return st.one_of(
        LEAF_TYPES,
        child.map(pa.list_),
        st.lists(child, min_size=1, max_size=3).map(
            lambda ts: pa.struct([pa.field(f"f{i}", t) for i, t in enumerate(ts)])
        ),
    )


@st.composite
def schemas(draw: st.DrawFn, min_columns: int = 1, max_columns: int = 6) -> pa.Schema:
    column_types = draw(st.lists(types(), min_size=min_columns, max_size=max_columns))
    return pa.schema([pa.field(f"c{i}", t) for i, t in enumerate(column_types)])


def _int_bounds(t: pa.DataType) -> tuple[int, int]:
    bits = t.bit_width
    if pa.types.is_signed_integer(t):
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def values(t: pa.DataType) -> st.SearchStrategy[Any]:
    """Python values of type ``t`` with the awkward cases well represented."""
    if pa.types.is_integer(t):
        lo, hi = _int_bounds(t)
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0]))
    if pa.types.is_float32(t):
        return st.floats(width=32, allow_nan=True, allow_infinity=True)
    if pa.types.is_floating(t):
        return st.one_of(
            st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, -0.0])
        )
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return st.one_of(
            st.text(max_size=20),
            st.just(""),
            st.text(min_size=60, max_size=90),  # crosses the 64-byte stats prefix
            st.just("\U0010ffff" * 30),  # no short upper bound exists
        )
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return st.one_of(
            st.binary(max_size=20),
            st.just(b""),
            st.binary(min_size=60, max_size=90),
            st.just(b"\xff" * 70),
        )
    if pa.types.is_date32(t):
        return st.integers(-100_000, 100_000)
    if pa.types.is_timestamp(t):
        per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[t.unit]
        span = 4 * 10**9 * per_second  # about 1843 to 2096: convertible to datetime
        return st.one_of(st.integers(-span, span), st.sampled_from([-span, span, 0]))
    if pa.types.is_decimal(t):
        top = 10**t.precision - 1
        return st.one_of(st.integers(-top, top), st.sampled_from([-top, top, 0])).map(
            lambda unscaled: Decimal(unscaled).scaleb(-t.scale, context=Context(prec=100))
        )
    if pa.types.is_list(t):
        return st.lists(st.one_of(st.none(), values(t.value_type)), max_size=4)
    if pa.types.is_struct(t):
        return st.fixed_dictionaries(
            {
                t.field(i).name: st.one_of(st.none(), values(t.field(i).type))
                for i in range(t.num_fields)
            }
        )
    raise NotImplementedError(str(t))


def _to_array(column: list[Any], t: pa.DataType) -> pa.Array:
    if pa.types.is_date32(t):
        return pa.array(column, pa.int32()).view(t)
    if pa.types.is_timestamp(t):
        return pa.array(column, pa.int64()).view(t)
    return pa.array(column, type=t)


@st.composite
def record_batches(draw: st.DrawFn, schema: pa.Schema, max_rows: int = 40) -> pa.RecordBatch:
    n = draw(st.integers(0, max_rows))
    arrays = []
    for field in schema:
        nullable = (
            st.one_of(st.none(), values(field.type)) if draw(st.booleans()) else values(field.type)
        )
        column = draw(st.lists(nullable, min_size=n, max_size=n))
        arrays.append(_to_array(column, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def normalize(value: Any) -> Any:
    """A comparable form of a Python value: NaN becomes a marker, containers recurse."""
    if isinstance(value, float) and math.isnan(value):
        return "<NaN>"
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    return value


def _plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with temporal types replaced by their stored integers (exact, no datetime range)."""
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_temporal(t):
        return pa.int64()
    if pa.types.is_list(t):
        return pa.list_(_plain_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain_type(f.type)) for f in t])
    return t


def rows(table: pa.Table | pa.RecordBatch) -> list[dict[str, Any]]:
    """Rows as comparable Python values (temporal values as integers, NaN as a marker)."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    columns = {
        name: table.column(name).cast(_plain_type(table.schema.field(name).type))
        for name in table.column_names
    }
    plain = pa.table(columns) if columns else table
    return [normalize(r) for r in plain.to_pylist()]
