"""Columnar data files in Parquet: one row group per blocklet.

Handoff and compaction write a table's columnar segments in Parquet when its
``columnar_format`` is ``parquet`` (docs/FORMAT.md, "Columnar files in Parquet"), so that every
engine reads them. A blocklet of such a file is a row group: the log records its first byte
and its length (from the first page of its first column chunk to the end of its last), its
rows and CarbonLite's statistics of it, exactly as for a blocklet of a ``.cblt`` file; bloom
filters, secondary indexes and deletion vectors name it by that offset. Every field carries
``PARQUET:field_id`` (``format/field_ids.py``) and the columns have their physical names.

:class:`ParquetBlockletWriter` and :class:`ParquetBlockletReader` have the methods of
:class:`~carbonlite.format.BlockletFileWriter` and
:class:`~carbonlite.format.BlockletFileReader` that columnar files are written and read with.
Both go through :mod:`carbonlite.storage`, so a file lies wherever the table does.
"""

from __future__ import annotations

import base64
import io
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from carbonlite.errors import CarbonLiteError, CorruptDataError, InvalidOptionError
from carbonlite.format.bloom import DEFAULT_BLOOM_FPP, BloomSpec, build_bloom_record
from carbonlite.format.conform import conform_batch
from carbonlite.format.field_ids import FIELD_ID_KEY, with_field_ids
from carbonlite.format.meta import BlockletMeta
from carbonlite.format.stats import compute_column_stats
from carbonlite.format.types import check_schema, stat_kind
from carbonlite.format.writer import (
    DEFAULT_BLOCKLET_BYTES,
    DEFAULT_BLOCKLET_ROWS,
    rebatch,
    split_into_blocklets,
)
from carbonlite.storage import Appender, RangeReader, open_storage

__all__ = [
    "PARQUET_SUFFIX",
    "WRITER_SETTINGS",
    "ParquetBlockletReader",
    "ParquetBlockletWriter",
    "is_parquet",
    "parquet_bloom_settings",
    "row_group_spans",
]

PARQUET_SUFFIX = ".parquet"
"""The name ending of a columnar file in Parquet (a ``.cblt`` file is a blocklet file)."""

WRITER_SETTINGS: Mapping[str, Any] = {
    "write_statistics": True,
    "write_page_index": True,
    "data_page_size": 1024 * 1024,
    "store_schema": True,
    "write_page_checksum": True,
}
"""Parquet writer settings (docs/BENCHMARKS.md, "Columnar files in Parquet", says why):
statistics and the page index for engines that prune by
them, 1 MiB pages, the Arrow schema so every Arrow type reads back as written, and a CRC of
every page, which CarbonLite checks as it reads (a damaged page is an error, never wrong
values).
Compression is zstd at the table's ``compression_level`` (0: none). Dictionary encoding
is chosen per column from the file's first blocklet (:func:`dictionary_columns`)."""

DICTIONARY_MAX_SHARE = 0.1
"""A column is dictionary-encoded when its first blocklet's distinct values are at most this
share of its rows: below it a dictionary makes pages smaller and faster to read; above it
Arrow builds a dictionary it then abandons, which costs half the write time of a file whose
keys and timestamps are unique."""


def dictionary_columns(batch: pa.RecordBatch) -> list[str]:
    """The columns of ``batch`` (top level, not nested) worth a dictionary."""
    out = []
    limit = max(1, int(batch.num_rows * DICTIONARY_MAX_SHARE))
    for field, column in zip(batch.schema, batch.columns, strict=True):
        t = field.type
        if pa.types.is_nested(t) or pa.types.is_boolean(t) or pa.types.is_null(t):
            continue
        if pc.count_distinct(column, mode="all").as_py() <= limit:
            out.append(field.name)
    return out


def parquet_bloom_settings(
    schema: pa.Schema, columns: Sequence[str], fpp: float, rows: int
) -> dict[str, Any]:
    """The Parquet writer setting that gives each of ``columns`` of ``schema`` (top level, of
    a type Parquet keeps a bloom filter for: not nested, not boolean) a Parquet bloom filter
    per row group of up to ``rows`` distinct values at false-positive rate ``fpp``."""
    options = {
        name: {"ndv": max(1, rows), "fpp": fpp}
        for name in columns
        if name in schema.names
        and not pa.types.is_nested(schema.field(name).type)
        and not pa.types.is_boolean(schema.field(name).type)
        and not pa.types.is_null(schema.field(name).type)
    }
    return {"bloom_filter_options": options} if options else {}


_READ_SETTINGS: Mapping[str, Any] = {"pre_buffer": True, "page_checksum_verification": True}


def is_parquet(path: str) -> bool:
    """Whether ``path`` names a columnar file in Parquet."""
    return path.endswith(PARQUET_SUFFIX)


def row_group_spans(metadata: pq.FileMetaData) -> list[tuple[int, int, int]]:
    """(first byte, length, rows) of each row group: from the first page of its first
    column chunk (the dictionary page when it has one) to the end of its last."""
    spans = []
    for i in range(metadata.num_row_groups):
        group = metadata.row_group(i)
        start = end = None
        for c in range(group.num_columns):
            chunk = group.column(c)
            first = chunk.data_page_offset
            if chunk.has_dictionary_page and chunk.dictionary_page_offset is not None:
                first = min(first, chunk.dictionary_page_offset)
            last = first + chunk.total_compressed_size
            start = first if start is None else min(start, first)
            end = last if end is None else max(end, last)
        if start is None or end is None:  # a row group of no columns
            start = end = 4
        spans.append((start, end - start, group.num_rows))
    return spans


class _AppenderFile(io.RawIOBase):
    """An :class:`Appender` as the writable stream Arrow's Parquet writer writes to."""

    def __init__(self, appender: Appender) -> None:
        self._appender = appender

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._appender.write(view)
        return view.nbytes

    def tell(self) -> int:
        return self._appender.size


class _RangeFile(io.RawIOBase):
    """A :class:`RangeReader` as the seekable stream Arrow's Parquet reader reads."""

    def __init__(self, source: RangeReader, size: int) -> None:
        self._source = source
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        return self._size

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(view.nbytes)
        view[: len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> Any:
        """The next ``size`` bytes, in memory of Arrow's pool (``RangeReader.read_buffer``),
        which Arrow takes without a copy."""
        if size is None or size < 0:
            size = self._size - self._pos
        data = self._source.read_buffer(self._pos, min(size, max(self._size - self._pos, 0)))
        self._pos += len(data)
        return data


class ParquetBlockletWriter:
    """Writes one new columnar Parquet file, a row group per blocklet.

    ``schema``: the file's schema (physical names); ``column_ids``: the id of each of its
    fields (``PARQUET:field_id``). The file is complete once :meth:`close` returns; until then
    it is not a Parquet file (its footer is written last)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: pa.Schema,
        column_ids: Sequence[int],
        *,
        compression_level: int = 1,
        storage_options: Mapping[str, Any] | None = None,
        settings: Mapping[str, Any] | None = None,
        lookup_columns: Sequence[str] = (),
        lookup_fpp: float = DEFAULT_BLOOM_FPP,
        row_group_rows: int = DEFAULT_BLOCKLET_ROWS,
    ) -> None:
        """``settings``: Parquet writer settings in place of :data:`WRITER_SETTINGS` and the
        compression (``benchmarks/bench_columnar_format.py`` compares them).

        ``lookup_columns`` (physical names) get Parquet's own bloom filter in every row group,
        sized for ``row_group_rows`` distinct values at ``lookup_fpp``: the table's bloom
        filter and secondary index columns, so that engines reading the file as plain Parquet
        (Spark's own scan, DuckDB, Trino) skip row groups on an equality with them too.
        CarbonLite's planning uses its own filters and indexes, not these."""
        if not 0 <= compression_level <= 22:
            raise InvalidOptionError(
                f"compression_level must be 0 (none) to 22 (zstd max), got {compression_level}"
            )
        check_schema(schema)
        self.path = os.fspath(path)
        self.schema = schema
        self._file_schema = with_field_ids(schema, column_ids)
        storage, p = open_storage(self.path, dict(storage_options or {}))
        self._appender = storage.open_appender(p)
        self._stream = _AppenderFile(self._appender)
        self._settings: dict[str, Any] = {
            "compression": "zstd" if compression_level > 0 else "none",
            "compression_level": compression_level if compression_level > 0 else None,
            **WRITER_SETTINGS,
            **parquet_bloom_settings(schema, lookup_columns, lookup_fpp, row_group_rows),
            **(settings or {}),
        }
        self._writer: pq.ParquetWriter | None = None  # made at the first rows (see _open)
        self._storage_options = dict(storage_options or {})
        self._metas: list[BlockletMeta] = []
        self._pending: list[tuple[int, Mapping[str, Any], bytes | None]] = []
        self._closed = False
        self.metadata: pq.FileMetaData | None = None

    @property
    def length(self) -> int:
        """Bytes written so far (the whole file once closed)."""
        return self._appender.size

    def write(
        self,
        data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch],
        *,
        max_rows: int = DEFAULT_BLOCKLET_ROWS,
        max_bytes: int = DEFAULT_BLOCKLET_BYTES,
        blooms: BloomSpec | None = None,
    ) -> None:
        """Append ``data`` cut into blocklets, one row group each; their metas (offsets are
        known once the footer is written) come from :meth:`close`."""
        if self._closed:
            raise CarbonLiteError(f"the writer of {self.path!r} is closed")
        if isinstance(data, pa.Table):
            batches: Iterable[pa.RecordBatch] = data.to_batches()
        elif isinstance(data, pa.RecordBatch):
            batches = [data]
        else:
            batches = data
        conformed = (conform_batch(b, self.schema, where=repr(self.path)) for b in batches)
        for batch in split_into_blocklets(
            rebatch(conformed, max_rows=max_rows, max_bytes=max_bytes),
            max_rows=max_rows,
            max_bytes=max_bytes,
        ):
            stats = {
                f.name: compute_column_stats(batch.column(i), stat_kind(f.type))
                for i, f in enumerate(self.schema)
            }
            bloom = (
                None if blooms is None else build_bloom_record(batch, blooms.columns, blooms.fpp)
            )
            typed = pa.RecordBatch.from_arrays(batch.columns, schema=self._file_schema)
            self._open(batch).write_batch(typed, row_group_size=batch.num_rows)
            self._pending.append((batch.num_rows, stats, bloom))

    def _open(self, first: pa.RecordBatch | None) -> pq.ParquetWriter:
        """The Parquet writer, made at the first blocklet (whose values choose the columns
        with dictionaries) or at the close of a file of none."""
        if self._writer is None:
            settings = dict(self._settings)
            if "use_dictionary" not in settings:
                settings["use_dictionary"] = (
                    dictionary_columns(first) if first is not None else False
                )
            try:
                self._writer = pq.ParquetWriter(self._stream, self._file_schema, **settings)
            except BaseException:
                self._closed = True
                self._appender.close()
                raise
        return self._writer

    def close(self) -> list[BlockletMeta]:
        """Write the footer, make the file durable and return its blocklets."""
        if self._closed:
            return self._metas
        self._closed = True
        try:
            writer = self._open(None)
            writer.close()
            self.metadata = writer.metadata if hasattr(writer, "metadata") else None
        finally:
            self._appender.close()
        spans = self._spans()
        if len(spans) != len(self._pending):
            raise CorruptDataError(
                f"{self.path!r} was written with {len(spans)} row groups for "
                f"{len(self._pending)} blocklets",
                path=self.path,
            )
        self._metas = [
            BlockletMeta(offset, length, rows, stats=stats, bloom=bloom)
            for (offset, length, rows), (_, stats, bloom) in zip(spans, self._pending, strict=True)
        ]
        return self._metas

    def _spans(self) -> list[tuple[int, int, int]]:
        metadata = self.metadata
        if metadata is None or metadata.num_row_groups != len(self._pending):
            with ParquetBlockletReader(self.path, storage_options=self._storage_options) as reader:
                metadata = reader.metadata
        return row_group_spans(metadata)

    def __enter__(self) -> ParquetBlockletWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _stored_schema(metadata: pq.FileMetaData) -> pa.Schema | None:
    """The Arrow schema the writer stored in the file (``store_schema``): the exact types it
    was given (a ``timestamp[s]`` column, which Parquet keeps as milliseconds, reads back in
    seconds); None in a file without one."""
    raw = (metadata.metadata or {}).get(b"ARROW:schema")
    if raw is None:
        return None
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(raw)))
    except (ValueError, pa.ArrowException):
        return None


def _without_field_ids(field: pa.Field) -> pa.Field:
    """``field`` without the field ids Arrow reads back from Parquet (nested ones too)."""
    t = field.type
    if pa.types.is_struct(t):
        t = pa.struct([_without_field_ids(t.field(i)) for i in range(t.num_fields)])
    elif pa.types.is_map(t):
        t = pa.map_(
            _without_field_ids(t.key_field), _without_field_ids(t.item_field), t.keys_sorted
        )
    elif pa.types.is_large_list(t):
        t = pa.large_list(_without_field_ids(t.value_field))
    elif pa.types.is_fixed_size_list(t):
        t = pa.list_(_without_field_ids(t.value_field), t.list_size)
    elif pa.types.is_list(t):
        t = pa.list_(_without_field_ids(t.value_field))
    meta = {k: v for k, v in (field.metadata or {}).items() if k != FIELD_ID_KEY}
    return pa.field(field.name, t, field.nullable, meta or None)


@dataclass(frozen=True)
class _Footer:
    """What a reader takes from a file's footer: the metadata, the Arrow schema (without
    field ids) and the row group starting at each blocklet offset."""

    metadata: pq.FileMetaData
    schema: pa.Schema
    groups: Mapping[int, int]

    @classmethod
    def of(cls, file: pq.ParquetFile) -> _Footer:
        arrow = _stored_schema(file.metadata) or file.schema_arrow
        spans = row_group_spans(file.metadata)
        return cls(
            file.metadata,
            pa.schema([_without_field_ids(f) for f in arrow]),
            {offset: i for i, (offset, _, _) in enumerate(spans)},
        )


class _FooterCache:
    """Footers of columnar files read lately, by path, size and storage options.

    A columnar Parquet file is written whole under a new name and never changed, so its footer
    is read and parsed once per process rather than once per scan (a 1% range read of a
    handed-off table spent more on its file's footer than on its rows). The size is part of
    the key and is read from storage at every open, so a file replaced by one of another size
    is read again (and refused by its committed length); the pages' checksums are checked at
    every read."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[str, int, str], _Footer] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(path: str, size: int, options: Mapping[str, Any] | None) -> tuple[str, int, str]:
        return path, size, json.dumps(dict(options or {}), sort_keys=True, default=repr)

    def get(self, path: str, size: int, options: Mapping[str, Any] | None) -> _Footer | None:
        key = self._key(path, size, options)
        with self._lock:
            footer = self._entries.get(key)
            if footer is not None:
                self._entries.move_to_end(key)
            return footer

    def put(self, path: str, size: int, options: Mapping[str, Any] | None, f: _Footer) -> None:
        with self._lock:
            self._entries[self._key(path, size, options)] = f
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)


_FOOTERS = _FooterCache(512)


class ParquetBlockletReader:
    """Reads the blocklets (row groups) of a columnar Parquet file.

    ``end``: the committed length, which for a columnar file is its whole size; a file of
    another size is damaged or not the one committed (:class:`CorruptDataError`)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        end: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        cached: bool = True,
    ) -> None:
        """``cached``: take the footer from the process's cache of footers when it holds this
        file's (``verify`` reads every footer from storage)."""
        self.path = os.fspath(path)
        storage, p = open_storage(self.path, dict(storage_options or {}))
        self._source = storage.open_reader(p)
        try:
            self.size = self._source.size()
            if end is not None and end != self.size:
                raise CorruptDataError(
                    f"the columnar file holds {self.size} bytes and its committed length is "
                    f"{end} (was it replaced or truncated?)",
                    path=self.path,
                    offset=min(end, self.size),
                )
            footer = _FOOTERS.get(self.path, self.size, storage_options) if cached else None
            if footer is None:
                with self._open(None) as first:
                    footer = _Footer.of(first)
                _FOOTERS.put(self.path, self.size, storage_options, footer)
        except CarbonLiteError:
            self._source.close()
            raise
        except (OSError, ValueError, pa.ArrowException) as exc:
            self._source.close()
            raise CorruptDataError(
                f"not a readable Parquet file: {exc}", path=self.path, offset=None
            ) from None
        self.end = self.size
        self.metadata: pq.FileMetaData = footer.metadata
        self.schema: pa.Schema = footer.schema
        self._groups = footer.groups
        self._blocklets: list[BlockletMeta] | None = None

    def _open(self, metadata: pq.FileMetaData | None) -> pq.ParquetFile:
        """A reader of the file (one per read: a ``ParquetFile`` is not safe to share between
        threads, and blocklets are read side by side); ``metadata``: the footer, read once.
        Its bytes come through the table's storage (its ranges coalesced by ``pre_buffer``),
        as a blocklet file's do, wherever the file lies."""
        source = pa.PythonFile(_RangeFile(self._source, self.size), mode="r")
        return pq.ParquetFile(source, metadata=metadata, **_READ_SETTINGS)

    def blocklets(self) -> list[BlockletMeta]:
        """The row groups as blocklets (offset, length, rows; no statistics)."""
        if self._blocklets is None:
            self._blocklets = [
                BlockletMeta(offset, length, rows)
                for offset, length, rows in row_group_spans(self.metadata)
            ]
        return self._blocklets

    @property
    def valid_length(self) -> int:
        return self.size

    def read_blocklet(
        self, meta: BlockletMeta, columns: Sequence[str] | None = None
    ) -> pa.RecordBatch:
        """The rows of the row group at ``meta.offset``, only ``columns`` (all by default)."""
        group = self._groups.get(meta.offset)
        if group is None:
            raise CorruptDataError(
                f"no row group starts at byte {meta.offset} (the log's blocklet)",
                path=self.path,
                offset=meta.offset,
            )
        names = self.schema.names if columns is None else list(columns)
        schema = pa.schema([self.schema.field(n) for n in names])
        if not names:
            rows = self.metadata.row_group(group).num_rows
            return pa.RecordBatch.from_struct_array(pa.nulls(rows, pa.struct([])))
        try:
            with self._open(self.metadata) as file:
                table = file.read_row_group(group, columns=names, use_threads=True)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise CorruptDataError(
                f"row group {group} does not decode: {exc}", path=self.path, offset=meta.offset
            ) from None
        if table.num_rows != meta.num_rows:
            raise CorruptDataError(
                f"row group {group} holds {table.num_rows} rows, the log says {meta.num_rows}",
                path=self.path,
                offset=meta.offset,
            )
        arrays = [c.combine_chunks() if c.num_chunks != 1 else c.chunk(0) for c in table.columns]
        arrays = [
            a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, schema, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def iter_batches(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        for meta in self.blocklets():
            yield self.read_blocklet(meta, columns)

    def read_all(self, columns: Sequence[str] | None = None) -> pa.Table:
        names = self.schema.names if columns is None else list(columns)
        schema = pa.schema([self.schema.field(n) for n in names])
        return pa.Table.from_batches(list(self.iter_batches(columns)), schema=schema)

    def close(self) -> None:
        self._source.close()

    def __enter__(self) -> ParquetBlockletReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
