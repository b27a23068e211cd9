"""Executing one compaction task: read its inputs, sort, write one new columnar segment.

Runs anywhere the table's storage is reachable (a local thread, a Spark executor) and
returns plain data: the files it wrote, as :class:`BlockletsAppended` actions ready to commit.
Nothing it writes is visible until the plan is committed; on failure its files are orphans
that ``recover`` removes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from carbonlite.compaction.plan import CompactionTask
from carbonlite.format import BlockletFileWriter
from carbonlite.metadata import BlockletsAppended
from carbonlite.reader.scan import SplitReader, read_splits
from carbonlite.storage import open_storage
from carbonlite.writer.stream_file import to_entry

__all__ = ["MAX_FILE_BYTES", "TaskResult", "execute_task"]

MAX_FILE_BYTES = 1024 * 1024 * 1024
"""A compaction output file is closed and a new one started past this size."""
_BLOCKLETS_PER_WRITE = 8  # blocklets handed to the writer at once, encoded in parallel


@dataclass(frozen=True, slots=True)
class TaskResult:
    task_id: str
    output_id: str
    files: tuple[BlockletsAppended, ...]
    rows: int
    bytes_read: int
    bytes_written: int
    seconds: float


def _sorted(table: pa.Table, sort_columns: tuple[str, ...]) -> pa.Table:
    if not sort_columns or table.num_rows < 2:
        return table
    return table.sort_by([(c, "ascending") for c in sort_columns])


def execute_task(
    task: CompactionTask,
    uri: str,
    schema: pa.Schema,
    storage_options: Mapping[str, Any] | None = None,
) -> TaskResult:
    """Read every input blocklet of ``task`` (committed bytes only), sort by the table's sort
    columns, and write the rows as large blocklets into new files of segment ``output_id``."""
    started = time.perf_counter()
    storage, root = open_storage(uri, dict(storage_options or {}) or None)
    reader = SplitReader(storage, root, schema, storage_options=storage_options)
    try:
        splits = [s for i in task.inputs for s in i.splits]
        table = pa.Table.from_batches(
            list(read_splits(reader, splits, schema, None)), schema=schema
        )
    finally:
        reader.close()
    table = _sorted(table, task.sort_columns).combine_chunks()
    files: list[BlockletsAppended] = []
    written = 0
    offset = 0
    step = task.blocklet_rows * _BLOCKLETS_PER_WRITE
    while offset < table.num_rows:
        rel = f"segments/{task.output_id}/part-{task.task_id}-{uuid.uuid4().hex[:8]}.cblt"
        writer = BlockletFileWriter(
            storage.uri(storage.join(root, rel)),
            schema,
            compression_level=task.compression_level,
            storage_options=storage_options,
        )
        metas = []
        try:
            while offset < table.num_rows and writer.length < MAX_FILE_BYTES:
                chunk = table.slice(offset, step)
                metas.extend(writer.write(chunk, max_rows=task.blocklet_rows))
                offset += chunk.num_rows
        finally:
            writer.close()
        files.append(
            BlockletsAppended(
                segment_id=task.output_id,
                file=rel,
                start=0,
                end=writer.length,
                blocklets=tuple(to_entry(m) for m in metas),
            )
        )
        written += writer.length
    return TaskResult(
        task_id=task.task_id,
        output_id=task.output_id,
        files=tuple(files),
        rows=table.num_rows,
        bytes_read=task.num_bytes,
        bytes_written=written,
        seconds=time.perf_counter() - started,
    )
