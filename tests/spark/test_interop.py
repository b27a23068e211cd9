"""Interop both ways, compared as sorted Arrow tables: what Spark writes (batch and stream)
the Python API reads, and what the Python API writes (several appends, many types) Spark
reads.
"""

from __future__ import annotations

import datetime
import decimal
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from carbonlite import create_table, open_table
from tests.spark.streams import finish
from tests.support.spark_data import assert_same_rows

pytestmark = pytest.mark.spark

UTC = datetime.timezone.utc

TYPES = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("i", pa.int32()),
        pa.field("d", pa.float64()),
        pa.field("s", pa.string()),
        pa.field("b", pa.bool_()),
        pa.field("day", pa.date32()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("local", pa.timestamp("us")),
        pa.field("amount", pa.decimal128(12, 3)),
        pa.field("raw", pa.binary()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("point", pa.struct([("a", pa.int32()), ("b", pa.string())])),
    ]
)
SPARK_DDL = (
    "id long, i int, d double, s string, b boolean, day date, ts timestamp, "
    "local timestamp_ntz, amount decimal(12,3), raw binary, tags array<string>, "
    "point struct<a: int, b: string>"
)


def typed_rows(first: int, count: int) -> pa.Table:
    """Rows of every type in TYPES, with nulls (and a NaN, an empty list, a null struct)."""
    base = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    rows = []
    for i in range(first, first + count):
        null = i % 5 == 4
        rows.append(
            {
                "id": i,
                "i": None if null else i * 3 - 7,
                "d": float("nan") if i % 7 == 3 else i / 4,
                "s": None if null else f"s-{i}-\u00e9",
                "b": None if null else i % 2 == 0,
                "day": datetime.date(2026, 1, 1) + datetime.timedelta(days=i),
                "ts": None if null else base + datetime.timedelta(seconds=i, microseconds=i),
                "local": datetime.datetime(2025, 6, 1) + datetime.timedelta(minutes=i),
                "amount": None if null else decimal.Decimal(i * 1001).scaleb(-3),
                "raw": bytes([i % 256, 0, 255]),
                "tags": None if null else [f"t{j}" for j in range(i % 3)],
                "point": None if null else {"a": i, "b": None if i % 3 == 0 else str(i)},
            }
        )
    return pa.Table.from_pylist(rows, schema=TYPES)


def test_python_writes_spark_reads(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    t = create_table(path, TYPES, properties={"blocklet_max_rows": "7"})
    chunks = [typed_rows(0, 20), typed_rows(100, 15), typed_rows(200, 9)]
    for chunk in chunks:
        t.append(chunk)
    df = spark.read.format("carbonlite").load(path)
    assert _ddl_types(df) == _expected_types()
    got = df.toArrow()
    assert_same_rows(got, pa.concat_tables(chunks), context="Spark reading Python's table")
    assert_same_rows(got, open_table(path).to_arrow(), context="Spark vs Python reader")


def _ddl_types(df: Any) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]


def _expected_types() -> list[tuple[str, str]]:
    return [
        ("id", "bigint"),
        ("i", "int"),
        ("d", "double"),
        ("s", "string"),
        ("b", "boolean"),
        ("day", "date"),
        ("ts", "timestamp"),
        ("local", "timestamp_ntz"),
        ("amount", "decimal(12,3)"),
        ("raw", "binary"),
        ("tags", "array<string>"),
        ("point", "struct<a:int,b:string>"),
    ]


def test_spark_batch_write_python_reads(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    first, second = typed_rows(0, 25), typed_rows(500, 12)
    spark.createDataFrame(first, SPARK_DDL).repartition(2).write.format("carbonlite").mode(
        "append"
    ).save(path)
    spark.createDataFrame(second, SPARK_DDL).write.format("carbonlite").mode("append").save(path)
    t = open_table(path)
    assert t.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert t.schema.field("local").type == pa.timestamp("us")
    assert t.schema.field("amount").type == pa.decimal128(12, 3)
    assert_same_rows(
        t.to_arrow(), pa.concat_tables([first, second]), context="Python reading Spark's table"
    )


def test_spark_stream_write_python_reads(spark: Any, tmp_path: Any) -> None:
    source, path = str(tmp_path / "src"), str(tmp_path / "t")
    os.makedirs(source)
    chunks = [typed_rows(0, 10), typed_rows(50, 10)]
    for n, chunk in enumerate(chunks):
        pq.write_table(chunk, os.path.join(source, f"part-{n}.parquet"))
    finish(
        spark.readStream.schema(SPARK_DDL)
        .parquet(source)
        .writeStream.format("carbonlite")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(path)
    )
    t = open_table(path)
    assert_same_rows(
        t.to_arrow(), pa.concat_tables(chunks), context="Python reading a streamed table"
    )
    assert t.schema.field("tags").type.value_type == pa.string()
