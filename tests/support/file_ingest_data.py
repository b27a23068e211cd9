"""Files for the file ingester's tests: rows of a small schema written as each format the
ingester reads, on a local disk or under an S3 prefix, and what an ingested table holds."""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

import carbonlite as cl
from carbonlite.storage import open_storage

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
WITH_PATH = pa.schema([*SCHEMA, ("_file_path", pa.string())])
"""``SCHEMA`` with the column the ingester fills with each row's file."""
KINDS = ("parquet", "json", "csv", "arrow-file", "arrow-stream")
"""How a file is written: the ingester's formats, Arrow IPC both ways."""
BASE_MTIME = 1_790_000_000.0
"""A fixed modification time (seconds) tests give files, so their order is known."""


def rows(ids: range | list[int], schema: pa.Schema = SCHEMA) -> pa.Table:
    ids = list(ids)
    data: dict[str, Any] = {"id": ids, "name": [f"n{i}" for i in ids]}
    return pa.table({f.name: data[f.name] for f in schema}, schema=schema)


def format_of(kind: str) -> str:
    return "arrow" if kind.startswith("arrow") else kind


def encode(kind: str, table: pa.Table, *, row_group_size: int | None = None) -> bytes:
    """``table`` as the bytes of a file of ``kind``."""
    if kind == "json":
        return "".join(json.dumps(r) + "\n" for r in table.to_pylist()).encode()
    sink = io.BytesIO()
    if kind == "parquet":
        pq.write_table(table, sink, row_group_size=row_group_size)
    elif kind == "csv":
        pa_csv.write_csv(table, sink)
    elif kind == "arrow-file":
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=max(1, table.num_rows // 3 or 1))
    elif kind == "arrow-stream":
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=max(1, table.num_rows // 3 or 1))
    else:
        raise AssertionError(kind)
    return sink.getvalue()


def write(source: Path, relative: str, data: bytes | str, *, mtime: float | None = None) -> Path:
    """Write ``data`` at ``relative`` below the local ``source`` (directories made), with
    modification time ``mtime`` when given."""
    path = source / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def put(source: str, relative: str, data: bytes, storage_options: dict[str, Any] | None) -> None:
    """Write ``data`` at ``relative`` below ``source`` (a local path or an S3 prefix)."""
    storage, root = open_storage(source, storage_options)
    storage.put(storage.join(root, relative), data)


def ids(table: cl.Table, version: int | None = None) -> list[int]:
    return sorted(table.refresh().to_arrow(columns=["id"], version=version)["id"].to_pylist())


def rows_per_file(table: cl.Table, version: int | None = None) -> Counter[str]:
    """Rows per ``_file_path`` at ``version``."""
    paths = table.refresh().to_arrow(columns=["_file_path"], version=version)["_file_path"]
    return Counter(paths.to_pylist())


def record(table: cl.Table, source_uri: str) -> dict[str, int]:
    """The table's record of the files ingested from ``source_uri``: path -> mtime (ms)."""
    state = table.refresh().state(f"files:{source_uri}")
    return dict(zip(state["file"].to_pylist(), state["modified_ms"].to_pylist(), strict=True))
