"""Schemas between Spark and CarbonLite.

Spark -> table: pyspark's own Arrow mapping, with Spark's TimestampType stored as
``timestamp[us, tz=UTC]`` (an instant; Spark sends it labelled with the session time zone,
which is only a label). Table -> Spark: the table's Arrow types, widened where Spark has no
equal type (unsigned integers, large strings), so every batch can be cast losslessly.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.types as pat

from carbonlite.errors import SchemaMismatchError, UnsupportedTypeError

__all__ = [
    "arrow_schema_from_spark",
    "cast_for_spark",
    "relabel_from_spark",
    "spark_arrow_schema",
    "spark_schema",
]


def _normalize_from_spark(t: pa.DataType) -> pa.DataType:
    if pat.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz is not None else None)
    if pat.is_large_string(t):
        return pa.string()
    if pat.is_large_binary(t):
        return pa.binary()
    if pat.is_list(t) or pat.is_large_list(t):
        return pa.list_(t.value_field.with_type(_normalize_from_spark(t.value_type)))
    if pat.is_map(t):
        return pa.map_(
            t.key_field.with_type(_normalize_from_spark(t.key_type)),
            t.item_field.with_type(_normalize_from_spark(t.item_type)),
        )
    if pat.is_struct(t):
        return pa.struct([f.with_type(_normalize_from_spark(f.type)) for f in t])
    return t


def arrow_schema_from_spark(spark_schema: Any) -> pa.Schema:
    """The table schema for a Spark ``StructType``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        schema = to_arrow_schema(
            spark_schema, timezone="UTC", error_on_duplicated_field_names_in_struct=True
        )
    except Exception as exc:
        raise UnsupportedTypeError(
            f"the Spark schema {spark_schema.simpleString()} has no CarbonLite equivalent: {exc}"
        ) from None
    return pa.schema([f.with_type(_normalize_from_spark(f.type)) for f in schema])


def _spark_type(t: pa.DataType) -> pa.DataType:
    if pat.is_uint8(t):
        return pa.int16()
    if pat.is_uint16(t):
        return pa.int32()
    if pat.is_uint32(t):
        return pa.int64()
    if pat.is_uint64(t):
        return pa.decimal128(20, 0)
    if pat.is_float16(t):
        return pa.float32()
    if pat.is_large_string(t):
        return pa.string()
    if pat.is_large_binary(t) or pat.is_fixed_size_binary(t):
        return pa.binary()
    if pat.is_date64(t):
        return pa.date32()
    if pat.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    if pat.is_time(t):
        return pa.time64("ns")
    if pat.is_duration(t):
        return pa.duration("us")
    if pat.is_decimal256(t):
        if t.precision > 38:
            raise UnsupportedTypeError(f"{t} does not fit Spark's DecimalType (precision <= 38)")
        return pa.decimal128(t.precision, t.scale)
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_spark_type(t.value_type)))
    if pat.is_map(t):
        return pa.map_(
            t.key_field.with_type(_spark_type(t.key_type)),
            t.item_field.with_type(_spark_type(t.item_type)),
        )
    if pat.is_struct(t):
        return pa.struct([f.with_type(_spark_type(f.type)) for f in t])
    return t


def spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema batches take on their way into Spark."""
    return pa.schema([f.with_type(_spark_type(f.type)) for f in schema])


def spark_schema(schema: pa.Schema) -> Any:
    """The Spark ``StructType`` of a table schema."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(spark_arrow_schema(schema), prefer_timestamp_ntz=True)


def relabel_from_spark(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with the table's types where Spark sent the same values under another label
    (session time zone on timestamps, large strings), or in the wider type Spark reads the
    table's type as (:func:`spark_arrow_schema`: ``uint32`` as ``int64``), narrowed back
    with a checked cast. Other differences are left for the schema check to report."""
    if batch.schema.equals(schema):
        return batch
    types = {f.name: f.type for f in schema}
    fields, arrays = [], []
    for f, column in zip(batch.schema, batch.columns, strict=True):
        t = types.get(f.name)
        if t is not None and not f.type.equals(t):
            sent = _normalize_from_spark(f.type)
            if sent.equals(_normalize_from_spark(t)):
                column, f = column.cast(t), f.with_type(t)
            elif sent.equals(_normalize_from_spark(_spark_type(t))):
                column, f = _narrowed(column, f, t), f.with_type(t)
        fields.append(f)
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _narrowed(column: pa.Array, field: pa.Field, t: pa.DataType) -> pa.Array:
    """``column``, sent by Spark in the wider type it reads ``t`` as, cast back to ``t``;
    a value ``t`` cannot hold refused."""
    try:
        return column.cast(t, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaMismatchError(
            f"column {field.name!r} is {t} in the table, which Spark reads as {field.type}; "
            f"a value Spark gave it does not fit {t}",
            [str(exc).splitlines()[0]],
        ) from None


def cast_for_spark(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` cast to ``schema`` (from :func:`spark_arrow_schema`: widening only)."""
    return batch if batch.schema.equals(schema) else batch.cast(schema)
