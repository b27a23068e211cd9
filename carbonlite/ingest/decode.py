"""Kafka message values (JSON objects) to Arrow rows of a table's schema, vectorized.

A batch of values is decoded in one call to pyarrow's JSON reader, with the table's columns
as its explicit schema, then conformed to the table (the casts ``append`` allows). Only when
that fails is each value decoded on its own, to tell the bad ones (not JSON, not an object,
a value that does not fit its column) from the good, so a clean batch never pays per message.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.json as pj

from carbonlite.errors import CarbonLiteError
from carbonlite.format.conform import conform_batch

__all__ = ["METADATA_COLUMNS", "Decoded", "data_schema", "decode_values"]

METADATA_COLUMNS = ("_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_key")
"""Columns an ingester fills from the message rather than its value, when the table has them."""

_BLOCK = 1 << 24


@dataclass(frozen=True, slots=True)
class Decoded:
    """The rows of the good values, and ``(index, error)`` of each bad one."""

    rows: pa.Table
    good: list[int]
    bad: list[tuple[int, str]]


def data_schema(schema: pa.Schema) -> pa.Schema:
    """The table's columns that come from message values."""
    return pa.schema([f for f in schema if f.name not in METADATA_COLUMNS])


def _read(values: Sequence[bytes], schema: pa.Schema) -> pa.Table:
    # A raw newline is never inside a valid JSON string, so it can only be whitespace.
    body = b"\n".join(v.replace(b"\n", b" ").replace(b"\r", b" ") for v in values)
    table = pj.read_json(
        io.BytesIO(body),
        read_options=pj.ReadOptions(block_size=max(_BLOCK, len(body) + 1)),
        parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
    )
    if table.num_rows != len(values):
        raise ValueError(f"{len(values)} values decoded to {table.num_rows} rows")
    return table


def _conformed(table: pa.Table, schema: pa.Schema, where: str) -> pa.Table:
    batches = [
        conform_batch(b, schema, where=where, allow_missing_nullable=True)
        for b in table.to_batches()
    ]
    return pa.Table.from_batches(batches, schema=schema)


def decode_values(values: Sequence[bytes | None], schema: pa.Schema, where: str) -> Decoded:
    """Decode ``values`` into rows of ``schema`` (the table's value columns)."""
    if values and all(v for v in values):
        try:
            rows = _conformed(_read(values, schema), schema, where)  # type: ignore[arg-type]
            return Decoded(rows, list(range(len(values))), [])
        except (pa.ArrowException, ValueError, CarbonLiteError):
            pass  # some value is bad: find which
    good: list[int] = []
    bad: list[tuple[int, str]] = []
    tables = []
    for i, value in enumerate(values):
        if not value:
            bad.append((i, "the message has no value (a tombstone or an empty message)"))
            continue
        try:
            tables.append(_conformed(_read([value], schema), schema, where))
            good.append(i)
        except (pa.ArrowException, ValueError, CarbonLiteError) as exc:
            bad.append((i, _message(exc)))
    rows = pa.concat_tables(tables) if tables else schema.empty_table()
    return Decoded(rows, good, bad)


def _message(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    return first if len(first) <= 500 else first[:497] + "..."
