"""A version's columnar Parquet files as other engines read them: the files, the rows each
one's deletion vectors delete, and which of the table's columns each file holds.

A table whose ``columnar_format`` is ``parquet`` keeps its handed-off and compacted rows in
plain Parquet files (``format/parquet_file.py``) whose fields carry the column ids. An engine
that reads Parquet itself (Spark's vectorized reader, an Iceberg reader) reads those files
directly: each column under the name it has in the file (renamed columns keep their physical
name; every field also carries the column id), at the table's types (widened ones), with a
column's default where a file predates it, and without the rows deleted by deletion vectors
(positions in the whole file). Everything else of the version (streaming segments, blocklet
files of columnar segments) is the *tail*, read by CarbonLite's own scan with
``plan_scan(..., skip=is_parquet_columnar)``. The Iceberg view and the Spark source take
the files from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from carbonlite.format.data_files import open_data_file
from carbonlite.format.deletion_vector import DeletionVector
from carbonlite.format.parquet_file import is_parquet
from carbonlite.metadata.columns import layout_of
from carbonlite.storage import Storage

__all__ = [
    "ParquetFileRead",
    "ParquetView",
    "deleted_positions",
    "is_parquet_columnar",
    "parquet_files",
    "parquet_view",
]


def is_parquet_columnar(segment: Any, file: Any) -> bool:
    """Whether ``file`` of ``segment`` is a live columnar Parquet file: a file engines read
    themselves (the rest of a version is its tail)."""
    return segment.format == "COLUMNAR" and segment.status == "SUCCESS" and is_parquet(file.path)


def parquet_files(snapshot: Any) -> list[tuple[Any, Any]]:
    """(segment, file) of every live columnar Parquet file of ``snapshot``, in segment and
    file order."""
    return [
        (seg, f)
        for seg in sorted(snapshot.segments.values(), key=lambda s: s.segment_id)
        for f in sorted(seg.files.values(), key=lambda f: f.path)
        if is_parquet_columnar(seg, f)
    ]


def deleted_positions(storage: Storage, root: str, file: Any) -> np.ndarray:
    """The positions (in the whole file, from 0) of the rows ``file``'s deletion vectors
    delete, ascending."""
    starts, first = {}, 0
    for b in file.blocklets:
        starts[b.offset] = first
        first += b.num_rows
    out = []
    cache: dict[str, bytes] = {}
    for offset, ref in file.deletion_items():
        data = cache.get(ref.path)
        if data is None:
            data = cache[ref.path] = storage.read(storage.join(root, ref.path))
        vector = DeletionVector.decode(memoryview(data)[ref.offset : ref.offset + ref.length])
        keep = vector.keep_mask().to_numpy(zero_copy_only=False)
        out.append(np.flatnonzero(~keep).astype(np.int64) + starts[offset])
    return np.concatenate(out) if out else np.zeros(0, np.int64)


@dataclass(frozen=True)
class ParquetFileRead:
    """One columnar Parquet file of a version, as an engine reads it."""

    path: str
    """Relative to the table (``segments/<segment>/<name>.parquet``)."""
    uri: str
    deleted: np.ndarray | None
    """Positions (in the file) of its deleted rows; None: none deleted."""
    names: Mapping[str, str]
    """Column name -> the name its values have in the file (its physical name). A column
    of the version's schema the file does not hold (it was written before the column was
    added) is absent: its rows read as the column's default, or null."""


@dataclass(frozen=True)
class ParquetView:
    """The columnar Parquet files of one version, and whether it has rows anywhere else."""

    version: int
    schema: pa.Schema
    """The version's schema (logical names)."""
    defaults: Mapping[str, Any]
    """Column name -> the value rows of a file without the column read (else null)."""
    files: tuple[ParquetFileRead, ...]
    tail_files: int
    """Live files of the version that are not columnar Parquet files (its tail)."""


def parquet_view(
    storage: Storage,
    root: str,
    snapshot: Any,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> ParquetView:
    """The :class:`ParquetView` of ``snapshot``. Each file's footer tells which columns it
    holds (footers are cached per process: ``format/parquet_file.py``)."""
    metadata = snapshot.metadata
    layout = layout_of(metadata)
    files = []
    for _seg, f in parquet_files(snapshot):
        if f.num_rows and f.num_deleted >= f.num_rows:
            continue  # every row deleted
        uri = storage.uri(storage.join(root, f.path))
        with open_data_file(uri, end=f.committed_length, storage_options=storage_options) as r:
            in_file = set(r.schema.names)
        names = {}
        for column in metadata.schema.names:
            name = next((n for n in layout.file_names(column) if n in in_file), None)
            if name is not None:
                names[column] = name
        files.append(
            ParquetFileRead(
                path=f.path,
                uri=uri,
                deleted=deleted_positions(storage, root, f) if f.deletions else None,
                names=names,
            )
        )
    tail = sum(
        1
        for seg in snapshot.live_segments()
        for f in seg.files.values()
        if not is_parquet_columnar(seg, f)
    )
    return ParquetView(
        version=snapshot.version,
        schema=snapshot.schema,
        defaults=dict(layout.defaults),
        files=tuple(files),
        tail_files=tail,
    )
