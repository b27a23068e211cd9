"""Opening a data file of either kind: a blocklet file (``.cblt``: streaming segments, and
columnar segments of tables whose ``columnar_format`` is ``carbonlite``) or a columnar Parquet
file (``.parquet``, ``format/parquet_file.py``). Both readers list the file's blocklets and
read one by its offset, some columns of it or all."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from carbonlite.format.parquet_file import ParquetBlockletReader, is_parquet
from carbonlite.format.reader import BlockletFileReader

__all__ = ["DataFileReader", "open_data_file"]

DataFileReader = BlockletFileReader | ParquetBlockletReader


def open_data_file(
    path: str | os.PathLike[str],
    *,
    end: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    cached: bool = True,
) -> DataFileReader:
    """A reader of the data file ``path`` (its kind from its name) up to ``end``, its
    committed length; ``cached``: a Parquet file's footer may come from the process's cache
    (``format/parquet_file.py``), else it is read from storage."""
    if is_parquet(os.fspath(path)):
        return ParquetBlockletReader(path, end=end, storage_options=storage_options, cached=cached)
    return BlockletFileReader(path, end=end, storage_options=storage_options)
