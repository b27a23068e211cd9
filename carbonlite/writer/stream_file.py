"""Writing blocklets into one stream file of a segment, ready to commit.

A stream file has one owner at a time. Before appending, the owner cuts the file back to its
committed length, so the bytes of an earlier failed attempt vanish; then it appends, makes
the bytes durable, and describes them as a :class:`BlockletsAppended` action. Nothing is
visible until that action is committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from carbonlite.format import BlockletFileWriter, BlockletMeta
from carbonlite.format.bloom import BloomSpec
from carbonlite.format.pages import PageCodec
from carbonlite.metadata.actions import BlockletEntry, BlockletsAppended, BloomRef
from carbonlite.metadata.columns import IDENTITY, ColumnLayout
from carbonlite.storage import Storage
from carbonlite.writer.bloom_files import blooms_of, copy_blooms

__all__ = ["copy_blocklets", "to_entry", "write_blocklets"]


def to_entry(meta: BlockletMeta) -> BlockletEntry:
    return BlockletEntry(
        offset=meta.offset, length=meta.length, num_rows=meta.num_rows, stats=meta.stats
    )


def _prepare(storage: Storage, path: str, committed_length: int) -> None:
    """Remove a file that holds nothing committed (a failed first attempt left it). Only where
    files are appended to (and so reused by their owner): an object store's writers always
    create new objects, and one that exists is someone else's, never to be replaced."""
    if committed_length == 0 and storage.supports_append and storage.exists(path):
        storage.delete(path)


def write_blocklets(
    storage: Storage,
    root: str,
    *,
    segment_id: str,
    file: str,
    committed_length: int,
    schema: pa.Schema,
    batches: Iterable[pa.RecordBatch],
    storage_options: Mapping[str, Any] | None,
    compression_level: int,
    codec: PageCodec,
    max_rows: int,
    max_bytes: int,
    layout: ColumnLayout = IDENTITY,
    blooms: BloomSpec | None = None,
) -> BlockletsAppended | None:
    """Append ``batches`` as blocklets to ``file`` (relative to ``root``) after its committed
    length, pages compressed with ``codec`` (the table's ``stream_codec``; ``compression_level``
    for zstd); None when there were no rows (nothing written, file untouched). ``schema`` and
    ``batches`` have the table's column names; the file gets their physical names
    (``layout``, ``metadata/columns.py``), and so do the blocklets' statistics. With
    ``blooms`` (physical names), their bloom filters go into a bloom file beside it."""
    schema = layout.file_schema(schema)
    batches = iter(batches) if layout.is_identity else map(layout.to_file, batches)
    first = next((b for b in batches if b.num_rows), None)
    if first is None:
        return None
    path = storage.join(root, file)
    uri = storage.uri(path)
    _prepare(storage, path, committed_length)
    writer = BlockletFileWriter(
        uri,
        schema,
        compression_level=compression_level,
        codec=codec,
        truncate_to=committed_length or None,
        verify=False,  # the committed length comes from the log
        storage_options=storage_options,
    )
    try:

        def all_batches() -> Iterable[pa.RecordBatch]:
            yield first
            yield from batches

        metas = writer.write(all_batches(), max_rows=max_rows, max_bytes=max_bytes, blooms=blooms)
    finally:
        writer.close()
    return BlockletsAppended(
        segment_id=segment_id,
        file=file,
        start=committed_length,
        end=writer.length,
        blocklets=tuple(to_entry(m) for m in metas),
        blooms=blooms_of(storage, root, file, metas, blooms),
    )


def copy_blocklets(
    storage: Storage,
    root: str,
    sources: Sequence[BlockletsAppended],
    *,
    segment_id: str,
    file: str,
    committed_length: int,
    schema: pa.Schema,
    storage_options: Mapping[str, Any] | None,
) -> BlockletsAppended:
    """Move uncommitted blocklets into another file: used when their segment stopped taking
    appends before they could be committed. Bytes are copied as they are (blocklets carry no
    absolute offsets); every source file must have ``schema``, which the destination gets."""
    dst_path = storage.join(root, file)
    _prepare(storage, dst_path, committed_length)
    writer = BlockletFileWriter(
        storage.uri(dst_path),
        schema,
        truncate_to=committed_length or None,
        verify=False,
        storage_options=storage_options,
    )
    entries: list[BlockletEntry] = []
    moved: list[tuple[BloomRef, int]] = []
    try:
        for source in sources:
            first, last = source.blocklets[0].offset, source.blocklets[-1].end
            body = storage.read(storage.join(root, source.file), first, last)
            start, _ = writer.append_blocklet_bytes(body)
            shift = start - first
            entries.extend(
                BlockletEntry(b.offset + shift, b.length, b.num_rows, b.stats)
                for b in source.blocklets
            )
            moved.extend((ref, ref.blocklet + shift) for bf in source.blooms for ref in bf.filters)
    finally:
        writer.close()
    return BlockletsAppended(
        segment_id=segment_id,
        file=file,
        start=committed_length,
        end=writer.length,
        blocklets=tuple(entries),
        blooms=copy_blooms(storage, root, file, moved),
    )


_COPY_BYTES = 64 * 1024 * 1024
"""Bytes a whole-file copy reads at once."""


def copy_whole_file(
    storage: Storage,
    root: str,
    source: BlockletsAppended,
    *,
    segment_id: str,
    file: str,
) -> BlockletsAppended:
    """Copy a committed file whose blocklets cannot move one by one (a columnar Parquet file:
    its footer names every row group's offset) whole into ``file``: its blocklets keep their
    offsets, and its bloom filters are copied beside it."""
    src, dst = storage.join(root, source.file), storage.join(root, file)
    size = storage.size(src)
    with storage.open_appender(dst) as appender:
        for start in range(0, size, _COPY_BYTES):
            appender.write(storage.read(src, start, min(size, start + _COPY_BYTES)))
    moved = [(ref, ref.blocklet) for bf in source.blooms for ref in bf.filters]
    return BlockletsAppended(
        segment_id=segment_id,
        file=file,
        start=0,
        end=size,
        blocklets=source.blocklets,
        blooms=copy_blooms(storage, root, file, moved),
    )
