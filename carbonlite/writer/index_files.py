"""Secondary index files: for each indexed column of a data file, which blocklets hold which
values (``format/secondary_index.py``), in ``<data file>.<token>.<column>.sidx`` beside it.

Written with the files of a columnar segment (handoff and compaction), whose files never
change after, and by ``build_index`` for files written before the table asked for them. The
``appendBlocklets`` action that commits the data file names them (``IndexFile``); nothing
refers to one before that commit.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence

import pyarrow as pa

from carbonlite.errors import CommitConflictError
from carbonlite.format.bloom import bloom_supported
from carbonlite.format.secondary_index import build_secondary_index
from carbonlite.metadata.actions import IndexFile
from carbonlite.metadata.columns import ColumnLayout
from carbonlite.properties import TableProperties
from carbonlite.storage import Storage

__all__ = ["INDEX_SUFFIX", "index_columns", "index_path", "write_index_files"]

INDEX_SUFFIX = ".sidx"


def index_columns(
    properties: Mapping[str, str], schema: pa.Schema, layout: ColumnLayout
) -> tuple[str, ...]:
    """The physical names of the columns a columnar file of this table gets indexes of."""
    return tuple(
        layout.physical(n)
        for n in TableProperties(properties).secondary_index_columns
        if n in schema.names and bloom_supported(schema.field(n).type)
    )


def index_path(data_file: str, column: str) -> str:
    """A new name for the index file of ``column`` of ``data_file``."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", column)[:40]
    return f"{data_file}.{uuid.uuid4().hex[:16]}.{safe}{INDEX_SUFFIX}"


def write_index_files(
    storage: Storage,
    root: str,
    data_file: str,
    rows: pa.Table,
    blocklets: Sequence[tuple[int, int]],
    columns: Sequence[str],
) -> tuple[IndexFile, ...]:
    """Write the index of each of ``columns`` (physical names, columns of ``rows``) of
    ``data_file``, whose blocklets ``(offset, rows)`` hold ``rows`` in order."""
    out = []
    for column in columns:
        if column not in rows.column_names:
            continue
        values = rows.column(column)
        parts, start = [], 0
        for _, count in blocklets:
            parts.append(values.slice(start, count))
            start += count
        index = build_secondary_index(column, parts, [offset for offset, _ in blocklets])
        data = index.encode()
        path = index_path(data_file, column)
        if not storage.put_if_absent(storage.join(root, path), data):
            raise CommitConflictError(
                f"secondary index file {path!r} exists already (a name clash); nothing was "
                "committed, run the operation again"
            )
        out.append(IndexFile(path, len(data), column))
    return tuple(out)
