"""Turning what users pass to ``append`` into conformed, blocklet-sized record batches."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from carbonlite.errors import InvalidOptionError, SchemaMismatchError
from carbonlite.format.casts import storage_type
from carbonlite.format.conform import conform_batch
from carbonlite.format.types import check_schema

__all__ = ["TableData", "conformed_batches", "iter_record_batches", "merged_schema"]

TableData = Any
"""``pyarrow.Table``, ``RecordBatch``, ``RecordBatchReader``, an iterable of batches, a pandas
or Polars DataFrame, or any object with ``__arrow_c_stream__``."""


def _is_frame(data: object, module: str) -> bool:
    kind = type(data)
    return kind.__name__ in ("DataFrame", "LazyFrame") and kind.__module__.split(".")[0] == module


def _from_pandas(data: Any) -> pa.Table:
    """A pandas DataFrame's columns (its index is not data: reset_index() to keep it)."""
    try:
        return pa.Table.from_pandas(data, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise SchemaMismatchError(
            "cannot convert the pandas DataFrame to Arrow", [" ".join(str(exc).split())]
        ) from None


def iter_record_batches(data: TableData) -> Iterator[pa.RecordBatch]:
    """The record batches of ``data``, lazily for readers and iterables."""
    if _is_frame(data, "pandas"):
        yield from _from_pandas(data).to_batches()
    elif _is_frame(data, "polars") and type(data).__name__ == "LazyFrame":
        raise InvalidOptionError(
            "a Polars LazyFrame is a query, not data: append lazy_frame.collect() (or "
            "collect(engine='streaming')) instead"
        )
    elif isinstance(data, pa.Table):
        yield from data.to_batches()
    elif isinstance(data, pa.RecordBatch):
        yield data
    elif isinstance(data, pa.RecordBatchReader):
        yield from data
    elif hasattr(data, "__arrow_c_stream__") and not isinstance(data, (str, bytes)):
        yield from pa.RecordBatchReader.from_stream(data)
    elif isinstance(data, Iterable) and not isinstance(data, (str, bytes, dict)):
        for item in data:
            if isinstance(item, pa.RecordBatch):
                yield item
            elif isinstance(item, pa.Table):
                yield from item.to_batches()
            else:
                raise InvalidOptionError(
                    f"expected pyarrow RecordBatches in the iterable, found {type(item).__name__}"
                )
    else:
        raise InvalidOptionError(
            "data must be a pyarrow Table, RecordBatch, RecordBatchReader, an iterable of "
            "RecordBatches, a pandas or Polars DataFrame or an object with __arrow_c_stream__, "
            f"not {type(data).__name__}"
        )


def conformed_batches(
    data: TableData, schema: pa.Schema, *, where: str
) -> Iterator[pa.RecordBatch]:
    """Batches of ``data`` in ``schema``'s exact shape (missing nullable columns become null)."""
    for batch in iter_record_batches(data):
        yield conform_batch(batch, schema, where=where, allow_missing_nullable=True)


def merged_schema(schema: pa.Schema, incoming: pa.Schema, *, where: str) -> pa.Schema:
    """``schema`` with the columns of ``incoming`` it lacks added at the end, nullable, in
    their storage types (``schema_mode="merge"``, Delta's ``mergeSchema``). Existing columns
    keep their types: incoming ones must still cast into them."""
    new, problems = [], []
    for field in incoming:
        if field.name in schema.names:
            continue
        t = storage_type(field.type)
        if t is None:
            problems.append(
                f"new column {field.name!r} holds only nulls, so its type is unknown: give it a "
                "type in the data or add it first with add_columns"
            )
        else:
            new.append(pa.field(field.name, t, nullable=True))
    if problems:
        raise SchemaMismatchError(f"cannot merge the data's schema into {where}", problems)
    if not new:
        return schema
    merged = pa.schema([*schema, *new], metadata=schema.metadata)
    check_schema(merged)
    return merged
