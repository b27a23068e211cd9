"""The blocklet file format: an appendable file of self-describing column blocklets.

Usable on its own, without any table::

    from carbonlite.format import BlockletFileWriter, BlockletFileReader

    with BlockletFileWriter("events.cblt", schema) as w:
        meta = w.write_batch(batch)          # one blocklet; meta.offset/length/stats
    r = BlockletFileReader("events.cblt", end=meta.end)
    table = r.read_all(columns=["ts"])

This package knows nothing of tables or logs (it never imports ``carbonlite.metadata``).
The byte layout is specified in docs/FORMAT.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from carbonlite.format.layout import FORMAT_VERSION, PageMeta
from carbonlite.format.meta import BlockletMeta
from carbonlite.format.reader import BlockletFileReader
from carbonlite.format.stats import STAT_PREFIX_BYTES, ColumnStats
from carbonlite.format.types import check_schema, stat_kind
from carbonlite.format.writer import (
    DEFAULT_BLOCKLET_BYTES,
    DEFAULT_BLOCKLET_ROWS,
    BlockletFileWriter,
    split_into_blocklets,
)
from carbonlite.storage import open_storage

__all__ = [
    "DEFAULT_BLOCKLET_BYTES",
    "DEFAULT_BLOCKLET_ROWS",
    "FORMAT_VERSION",
    "STAT_PREFIX_BYTES",
    "BlockletFileReader",
    "BlockletFileWriter",
    "BlockletMeta",
    "ColumnStats",
    "PageMeta",
    "check_schema",
    "split_into_blocklets",
    "stat_kind",
    "truncate_to",
]


def truncate_to(
    path: str | os.PathLike[str], length: int, *, storage_options: Mapping[str, Any] | None = None
) -> None:
    """Roll a blocklet file back to ``length`` bytes (a committed length), durably."""
    storage, p = open_storage(os.fspath(path), dict(storage_options or {}))
    storage.truncate(p, length)
