"""Turning what users pass to ``append`` into conformed, blocklet-sized record batches."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from carbonlite.errors import InvalidOptionError
from carbonlite.format.conform import conform_batch

__all__ = ["TableData", "conformed_batches", "iter_record_batches"]

TableData = Any
"""``pyarrow.Table``, ``RecordBatch``, ``RecordBatchReader`` or an iterable of batches."""


def iter_record_batches(data: TableData) -> Iterator[pa.RecordBatch]:
    """The record batches of ``data``, lazily for readers and iterables."""
    if isinstance(data, pa.Table):
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
            "data must be a pyarrow Table, RecordBatch, RecordBatchReader or an iterable of "
            f"RecordBatches, not {type(data).__name__}"
        )


def conformed_batches(
    data: TableData, schema: pa.Schema, *, where: str
) -> Iterator[pa.RecordBatch]:
    """Batches of ``data`` in ``schema``'s exact shape (missing nullable columns become null)."""
    for batch in iter_record_batches(data):
        yield conform_batch(batch, schema, where=where, allow_missing_nullable=True)
