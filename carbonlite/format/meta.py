"""What a reader or writer reports about a blocklet."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from carbonlite.format.layout import PageMeta
from carbonlite.format.stats import ColumnStats

__all__ = ["BlockletMeta", "column_schemas"]


@dataclass(frozen=True, slots=True)
class BlockletMeta:
    """One blocklet: where it lies in its file, its row count, and per-column statistics."""

    offset: int
    """Absolute byte offset of the blocklet in its file."""
    length: int
    """Total length of the blocklet in bytes."""
    num_rows: int
    stats: Mapping[str, ColumnStats] = field(default_factory=dict)
    """Statistics by column name."""
    pages: tuple[PageMeta, ...] | None = None
    """Page locations, in file-schema order; None when only the table log's summary is known."""
    bloom: bytes | None = None
    """The record of its bloom filters (``format/bloom.py``) when the writer was asked for
    them; kept beside the file, not in it."""

    @property
    def end(self) -> int:
        """Offset just past the blocklet: the committed length once it is committed."""
        return self.offset + self.length


def column_schemas(schema: pa.Schema) -> list[pa.Schema]:
    """The one-field schema of each column, as its pages are encoded against."""
    return [pa.schema([f]) for f in schema]
