"""Reading a client's DoPut stream with a bound on its size (a put's rows, a prepared
statement's parameter rows): the bytes are counted as the batches arrive, so a stream past
the bound is refused before the rest of it is held."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.flight as flight

__all__ = ["bounded_batches"]


def bounded_batches(
    reader: flight.MetadataRecordBatchReader,
    max_bytes: int,
    too_big: Callable[[], Exception],
) -> list[pa.RecordBatch]:
    """Every record batch of ``reader`` (metadata-only messages skipped); ``too_big()`` is
    raised as soon as they hold more than ``max_bytes``."""
    batches: list[pa.RecordBatch] = []
    size = 0
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            return batches
        if chunk.data is None:
            continue
        size += chunk.data.nbytes
        if size > max_bytes:
            raise too_big()
        batches.append(chunk.data)
