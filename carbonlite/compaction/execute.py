"""Executing one compaction task: read its inputs, sort, write one new columnar segment.

Runs anywhere the table's storage is reachable (a local thread, a Spark executor) and
returns plain data: the files it wrote, as :class:`BlockletsAppended` actions ready to commit.
Nothing it writes is visible until the plan is committed; on failure its files are orphans
that ``recover`` removes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from carbonlite.compaction.plan import CompactionTask
from carbonlite.format import BlockletFileWriter, BlockletMeta
from carbonlite.format.bloom import BloomSpec
from carbonlite.format.pages import ordered_map
from carbonlite.format.parquet_file import PARQUET_SUFFIX, ParquetBlockletWriter
from carbonlite.metadata import BlockletEntry, BlockletsAppended
from carbonlite.reader.planner import Split
from carbonlite.reader.scan import SplitReader
from carbonlite.storage import Storage, open_storage
from carbonlite.writer.bloom_files import blooms_of
from carbonlite.writer.index_files import write_index_files
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


def _all_deleted(split: Split, blocklet: BlockletEntry) -> bool:
    ref = split.deletion_of(blocklet) if split.deletions else None
    return ref is not None and ref.cardinality >= blocklet.num_rows


class _BlockletFile:
    """A :class:`BlockletFileWriter` with the calls of a :class:`ParquetBlockletWriter`:
    ``write`` gathers the blocklets' metas, ``close`` returns them."""

    def __init__(self, writer: BlockletFileWriter) -> None:
        self._writer = writer
        self._metas: list[BlockletMeta] = []

    @property
    def length(self) -> int:
        return self._writer.length

    def write(self, chunk: pa.Table, *, max_rows: int, blooms: BloomSpec | None) -> None:
        self._metas.extend(self._writer.write(chunk, max_rows=max_rows, blooms=blooms))

    def close(self) -> list[BlockletMeta]:
        self._writer.close()
        return self._metas


def lookup_columns(task: CompactionTask) -> tuple[str, ...]:
    """The columns (physical names) a Parquet output of ``task`` gets Parquet bloom filters
    of: its bloom filter and secondary index columns."""
    blooms = task.blooms.columns if task.blooms is not None else ()
    return tuple(dict.fromkeys((*blooms, *task.indexes)))


def _new_file(
    task: CompactionTask,
    storage: Storage,
    root: str,
    file_schema: pa.Schema,
    storage_options: Mapping[str, Any] | None,
) -> tuple[str, ParquetBlockletWriter | _BlockletFile]:
    """A new output file of ``task`` in its columnar format: (its path, its writer)."""
    stem = f"segments/{task.output_id}/part-{task.task_id}-{uuid.uuid4().hex[:8]}"
    if task.columnar_format == "parquet":
        rel = stem + PARQUET_SUFFIX
        return rel, ParquetBlockletWriter(
            storage.uri(storage.join(root, rel)),
            file_schema,
            task.column_ids,
            compression_level=task.compression_level,
            storage_options=storage_options,
            lookup_columns=lookup_columns(task),
            lookup_fpp=task.lookup_fpp,
            row_group_rows=task.blocklet_rows,
        )
    rel = stem + ".cblt"
    return rel, _BlockletFile(
        BlockletFileWriter(
            storage.uri(storage.join(root, rel)),
            file_schema,
            compression_level=task.compression_level,
            storage_options=storage_options,
        )
    )


def execute_task(
    task: CompactionTask,
    uri: str,
    schema: pa.Schema,
    storage_options: Mapping[str, Any] | None = None,
    *,
    progress: Callable[[int], None] | None = None,
) -> TaskResult:
    """Read every input blocklet of ``task`` (committed bytes only), sort by the table's sort
    columns, and write the rows as large blocklets into new files of segment ``output_id``.

    ``progress(n)`` is told of work as it is done, ``2 * task.num_bytes`` in all: each input
    byte once when it is read, and once more when the rows it held are written out."""
    started = time.perf_counter()
    advance = progress or (lambda _n: None)
    storage, root = open_storage(uri, dict(storage_options or {}) or None)
    reader = SplitReader(storage, root, schema, storage_options=storage_options, layout=task.layout)
    try:
        blocklets = [
            (s, b)
            for i in task.inputs
            for s in i.splits
            for b in s.blocklets
            if not _all_deleted(s, b)
        ]

        def read(item: tuple[Split, BlockletEntry]) -> pa.RecordBatch:
            return reader.read_blocklet(item[0], item[1], schema, None)

        batches = []
        for (_, entry), batch in zip(blocklets, ordered_map(read, blocklets), strict=True):
            if batch.num_rows:
                batches.append(batch)
            advance(entry.length)
        table = pa.Table.from_batches(batches, schema=schema)
    finally:
        reader.close()
    advance(task.num_bytes - sum(entry.length for _, entry in blocklets))  # file headers
    table = _sorted(table, task.sort_columns).combine_chunks()
    file_schema = task.layout.file_schema(schema)
    table = table.rename_columns(file_schema.names)
    reported = 0  # of the task's bytes, for the rows written so far
    files: list[BlockletsAppended] = []
    written = 0
    offset = 0
    step = task.blocklet_rows * _BLOCKLETS_PER_WRITE
    while offset < table.num_rows:
        rel, writer = _new_file(task, storage, root, file_schema, storage_options)
        first_row = offset
        try:
            while offset < table.num_rows and writer.length < MAX_FILE_BYTES:
                chunk = table.slice(offset, step)
                writer.write(chunk, max_rows=task.blocklet_rows, blooms=task.blooms)
                offset += chunk.num_rows
                share = task.num_bytes * offset // table.num_rows
                advance(share - reported)
                reported = share
        finally:
            metas = writer.close()
        files.append(
            BlockletsAppended(
                segment_id=task.output_id,
                file=rel,
                start=0,
                end=writer.length,
                blocklets=tuple(to_entry(m) for m in metas),
                blooms=blooms_of(storage, root, rel, metas, task.blooms),
                indexes=write_index_files(
                    storage,
                    root,
                    rel,
                    table.slice(first_row, offset - first_row),
                    [(m.offset, m.num_rows) for m in metas],
                    task.indexes,
                ),
            )
        )
        written += writer.length
    advance(task.num_bytes - reported)  # a task with no rows writes nothing
    return TaskResult(
        task_id=task.task_id,
        output_id=task.output_id,
        files=tuple(files),
        rows=table.num_rows,
        bytes_read=task.num_bytes,
        bytes_written=written,
        seconds=time.perf_counter() - started,
    )
