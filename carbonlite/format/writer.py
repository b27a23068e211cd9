"""BlockletFileWriter: append blocklets to a blocklet file, reopening it to append more."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from types import TracebackType
from typing import IO, Any

import pyarrow as pa

from carbonlite.errors import (
    CarbonLiteError,
    CorruptDataError,
    InvalidOptionError,
    SchemaMismatchError,
    StorageError,
)
from carbonlite.format.bloom import BloomSpec, build_bloom_record
from carbonlite.format.conform import conform_batch
from carbonlite.format.layout import (
    PageMeta,
    crc32c,
    encode_blocklet_header,
    encode_blocklet_prefix,
    encode_file_header,
    pad8,
)
from carbonlite.format.meta import BlockletMeta, column_schemas
from carbonlite.format.pages import (
    DEFAULT_COMPRESSION_LEVEL,
    PAGE_CODECS,
    PageCodec,
    encode_page,
    ordered_map,
)
from carbonlite.format.stats import ColumnStats, compute_column_stats
from carbonlite.format.types import check_schema, stat_kind
from carbonlite.storage import Appender, open_storage

__all__ = [
    "DEFAULT_BLOCKLET_BYTES",
    "DEFAULT_BLOCKLET_ROWS",
    "BlockletFileWriter",
    "EncodedBlocklet",
    "encode_blocklet",
    "rebatch",
    "split_into_blocklets",
]

DEFAULT_BLOCKLET_ROWS = 65_536
"""Rows per blocklet when cutting larger data (docs/BENCHMARKS.md has the measurement)."""
DEFAULT_BLOCKLET_BYTES = 64 * 1024 * 1024
"""Upper bound on the in-memory Arrow size of one blocklet."""

# Below this many bytes a blocklet's columns are encoded on the calling thread.
_PARALLEL_COLUMNS_BYTES = 4 * 1024 * 1024


@dataclass(slots=True)
class EncodedBlocklet:
    """A blocklet's bytes, ready to be written at any offset."""

    num_rows: int
    parts: list[Any]
    """Bytes-like pieces to write in order: prefix/header, then each page and its padding."""
    length: int
    head_length: int
    pages: list[tuple[int, int, int, int, int]]
    """Per column: (body-relative offset, length, raw length, crc, codec)."""
    stats: list[ColumnStats]

    def meta(self, offset: int, schema: pa.Schema) -> BlockletMeta:
        body = offset + self.head_length
        return BlockletMeta(
            offset=offset,
            length=self.length,
            num_rows=self.num_rows,
            stats={f.name: s for f, s in zip(schema, self.stats, strict=True)},
            pages=tuple(
                PageMeta(body + o, n, raw, crc, codec) for o, n, raw, crc, codec in self.pages
            ),
        )


def encode_blocklet(
    batch: pa.RecordBatch,
    schema: pa.Schema,
    *,
    compression_level: int = DEFAULT_COMPRESSION_LEVEL,
    codec: PageCodec = "zstd",
    schemas1: list[pa.Schema] | None = None,
) -> EncodedBlocklet:
    """Encode one conformed batch (columns exactly ``schema``'s) as a blocklet."""
    schemas1 = schemas1 or column_schemas(schema)

    def encode_column(i: int) -> tuple[Any, int, int, int, ColumnStats]:
        array = batch.column(i)
        stored, raw_len, number = encode_page(array, schemas1[i], compression_level, codec)
        return (
            stored,
            raw_len,
            number,
            crc32c(stored),
            compute_column_stats(array, stat_kind(schema.field(i).type)),
        )

    indices = range(batch.num_columns)
    if batch.nbytes >= _PARALLEL_COLUMNS_BYTES:
        encoded = list(ordered_map(encode_column, indices))
    else:
        encoded = [encode_column(i) for i in indices]
    pages: list[tuple[int, int, int, int, int]] = []
    body: list[Any] = []
    pos = 0
    for stored, raw_len, number, crc, _ in encoded:
        n = len(stored) if not isinstance(stored, pa.Buffer) else stored.size
        pages.append((pos, n, raw_len, crc, number))
        body.append(stored)
        pad = pad8(n)
        if pad:
            body.append(b"\x00" * pad)
        pos += n + pad
    stats = [e[4] for e in encoded]
    header = encode_blocklet_header(batch.num_rows, schema, pages, stats)
    head = encode_blocklet_prefix(header, pos)
    head_length = len(head)
    return EncodedBlocklet(
        num_rows=batch.num_rows,
        parts=[head, *body],
        length=head_length + pos,
        head_length=head_length,
        pages=pages,
        stats=stats,
    )


def _combine(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    if len(batches) == 1:
        return batches
    return pa.Table.from_batches(batches).combine_chunks().to_batches()


_CHEAP_SIZE = 1 << 20


def batch_bytes(batch: pa.RecordBatch) -> int:
    """About the bytes ``batch`` holds: the total size of its buffers while that is small (an
    upper bound, read in a fraction of a microsecond), else the exact size of its slice
    (``nbytes``, several microseconds: too slow to ask of every small batch)."""
    total = batch.get_total_buffer_size()
    return total if total <= _CHEAP_SIZE else batch.nbytes


def rebatch(
    batches: Iterable[pa.RecordBatch], *, max_rows: int, max_bytes: int
) -> Iterator[pa.RecordBatch]:
    """Merge runs of small batches so a blocklet is not made of a handful of rows.

    Batches are combined until the next one would pass ``max_rows`` or ``max_bytes``; larger
    batches pass through (:func:`split_into_blocklets` cuts them).
    """
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        nbytes = batch_bytes(batch)
        if pending and (rows + batch.num_rows > max_rows or size + nbytes > max_bytes):
            yield from _combine(pending)
            pending, rows, size = [], 0, 0
        pending.append(batch)
        rows += batch.num_rows
        size += nbytes
    if pending:
        yield from _combine(pending)


def split_into_blocklets(
    batches: Iterable[pa.RecordBatch],
    *,
    max_rows: int = DEFAULT_BLOCKLET_ROWS,
    max_bytes: int = DEFAULT_BLOCKLET_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Cut batches into blocklet-sized ones (at most ``max_rows`` rows and about ``max_bytes``).

    Small batches are passed through, not merged (:func:`rebatch` merges them).
    """
    if max_rows < 1 or max_bytes < 1:
        raise InvalidOptionError(f"blocklet limits must be positive, got {max_rows=} {max_bytes=}")
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        per_row = max(1.0, batch_bytes(batch) / n)
        step = max(1, min(max_rows, int(max_bytes / per_row)))
        if n <= step:
            yield batch
        else:
            for start in range(0, n, step):
                yield batch.slice(start, step)


class BlockletFileWriter:
    """Appends blocklets to a blocklet file.

    ``path_or_file`` is a path or URI (local, ``memory://``, ``s3://``) or a writable binary file
    object positioned at its start. An existing non-empty file is reopened for appending: its
    header must hold ``schema`` (or ``schema`` may be omitted), and bytes past ``truncate_to``
    (default: the file's valid length) are cut away first, so a torn tail left by a crash never
    hides later blocklets.

    Each :meth:`write_batch` appends exactly one blocklet; :meth:`write` cuts larger data into
    blocklets. Bytes are durable after :meth:`flush` (or :meth:`close`).

    ``truncate_to`` must be the end of a blocklet (a committed length, ``BlockletMeta.end``);
    the blocklet headers up to it are walked to check that, unless ``verify=False`` (for a
    length read from a trusted commit record). Without ``truncate_to``, a torn tail is cut
    off, but damage inside the file (intact blocklets after it) raises instead of cutting
    them away.
    """

    def __init__(
        self,
        path_or_file: str | os.PathLike[str] | IO[bytes],
        schema: pa.Schema | None = None,
        *,
        compression_level: int = DEFAULT_COMPRESSION_LEVEL,
        codec: PageCodec = "zstd",
        truncate_to: int | None = None,
        verify: bool = True,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not 0 <= compression_level <= 22:
            raise InvalidOptionError(
                f"compression_level must be 0 (none) to 22 (zstd max), got {compression_level}"
            )
        if codec not in PAGE_CODECS:
            raise InvalidOptionError(
                f"codec must be one of {', '.join(PAGE_CODECS)}, got {codec!r}"
            )
        self.compression_level = compression_level
        self.codec: PageCodec = codec
        self._failed: BaseException | None = None
        self._closed = False
        self._file: IO[bytes] | None = None
        self._appender: Appender | None = None
        if isinstance(path_or_file, (str, os.PathLike)):
            self.path = os.fspath(path_or_file)
            self._open_path(schema, truncate_to, verify, dict(storage_options or {}))
        else:
            self.path = str(getattr(path_or_file, "name", "<file object>"))
            if schema is None:
                raise InvalidOptionError("a schema is needed to write a new blocklet file")
            self._open_file_object(path_or_file, schema)

    # --- opening ------------------------------------------------------------------------------

    def _set_schema(self, schema: pa.Schema) -> None:
        check_schema(schema)
        self.schema = schema
        self._schemas1 = column_schemas(schema)

    def _open_path(
        self,
        schema: pa.Schema | None,
        truncate_to: int | None,
        verify: bool,
        storage_options: dict[str, Any],
    ) -> None:
        storage, path = open_storage(self.path, storage_options)
        exists = storage.exists(path)
        if exists and storage.size(path) > 0 and not storage.supports_append:
            raise StorageError(
                f"{self.path!r} exists and {storage.protocol!r} storage cannot append to it; "
                "write a new object instead"
            )
        if exists and storage.size(path) > 0:
            from carbonlite.format.reader import BlockletFileReader

            reader = BlockletFileReader(self.path, storage_options=storage_options)
            with reader:
                if schema is not None and not reader.schema.equals(schema):
                    raise SchemaMismatchError(
                        f"{self.path!r} holds a different schema than the one given",
                        [
                            f"file: {reader.schema}".replace("\n", "; "),
                            f"given: {schema}".replace("\n", "; "),
                        ],
                    )
                self._set_schema(reader.schema)
                size = reader.size
                if truncate_to is None:
                    target = reader.valid_length
                else:
                    if not reader.header_length <= truncate_to <= size:
                        raise InvalidOptionError(
                            f"truncate_to={truncate_to} is outside {self.path!r}: it must lie "
                            f"between the header end {reader.header_length} and the size {size}"
                        )
                    if verify:
                        self._check_boundary(truncate_to, storage_options)
                    target = truncate_to
            if target < size:
                if not storage.supports_append:
                    raise StorageError(
                        f"{self.path!r} has {size - target} bytes past its valid length and "
                        f"{storage.protocol!r} storage cannot truncate-and-append; write a new object"
                    )
                storage.truncate(path, target)
            self._appender = storage.open_appender(path)
        else:
            if schema is None:
                raise InvalidOptionError(
                    f"{self.path!r} does not exist (or is empty): a schema is needed to create it"
                )
            self._set_schema(schema)
            self._appender = storage.open_appender(path)
            self._write_parts([encode_file_header(schema)])

    def _check_boundary(self, length: int, storage_options: dict[str, Any]) -> None:
        from carbonlite.format.reader import BlockletFileReader

        try:
            with BlockletFileReader(self.path, end=length, storage_options=storage_options) as r:
                r.blocklets()
        except CorruptDataError as exc:
            raise InvalidOptionError(
                f"truncate_to={length} is not the end of a blocklet of {self.path!r} ({exc}); "
                "use a committed length (BlockletMeta.end)"
            ) from None

    def _open_file_object(self, f: IO[bytes], schema: pa.Schema) -> None:
        self._set_schema(schema)
        try:
            position = f.tell()
        except (OSError, AttributeError):
            position = 0
        if position != 0:
            raise InvalidOptionError(
                f"the file object is at position {position}; a blocklet file must start at 0"
            )
        self._file = f
        self._size = 0
        self._write_parts([encode_file_header(schema)])

    # --- writing ------------------------------------------------------------------------------

    @property
    def length(self) -> int:
        """Bytes in the file, including everything written so far."""
        return self._appender.size if self._appender is not None else self._size

    def _check_open(self) -> None:
        if self._closed:
            raise CarbonLiteError(f"the writer of {self.path!r} is closed")
        if self._failed is not None:
            raise CarbonLiteError(
                f"an earlier write to {self.path!r} failed ({self._failed}); the file may end in "
                "a torn blocklet: reopen it to truncate the tail and append again"
            ) from self._failed

    def _write_parts(self, parts: list[Any]) -> None:
        try:
            if self._appender is not None:
                for part in parts:
                    self._appender.write(part)
            else:
                assert self._file is not None
                for part in parts:
                    self._file.write(part)
                    self._size += len(part) if not isinstance(part, pa.Buffer) else part.size
        except BaseException as exc:
            self._failed = exc
            raise

    def write_batch(self, batch: pa.RecordBatch) -> BlockletMeta:
        """Append ``batch`` as one blocklet and return where it went and its statistics."""
        self._check_open()
        batch = conform_batch(batch, self.schema, where=repr(self.path))
        encoded = encode_blocklet(
            batch,
            self.schema,
            compression_level=self.compression_level,
            codec=self.codec,
            schemas1=self._schemas1,
        )
        return self._append_encoded(encoded)

    def write(
        self,
        data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch],
        *,
        max_rows: int = DEFAULT_BLOCKLET_ROWS,
        max_bytes: int = DEFAULT_BLOCKLET_BYTES,
        blooms: BloomSpec | None = None,
    ) -> list[BlockletMeta]:
        """Append ``data`` cut into blocklets; encodes several blocklets in parallel. With
        ``blooms``, each blocklet's :attr:`BlockletMeta.bloom` is the record of its filters."""
        self._check_open()
        if isinstance(data, pa.Table):
            batches: Iterable[pa.RecordBatch] = data.to_batches()
        elif isinstance(data, pa.RecordBatch):
            batches = [data]
        else:
            batches = data

        def conformed() -> Iterator[pa.RecordBatch]:
            for b in batches:
                yield conform_batch(b, self.schema, where=repr(self.path))

        def encode(b: pa.RecordBatch) -> tuple[EncodedBlocklet, bytes | None]:
            encoded = encode_blocklet(
                b,
                self.schema,
                compression_level=self.compression_level,
                codec=self.codec,
                schemas1=self._schemas1,
            )
            bloom = None if blooms is None else build_bloom_record(b, blooms.columns, blooms.fpp)
            return encoded, bloom

        blocklets = split_into_blocklets(
            rebatch(conformed(), max_rows=max_rows, max_bytes=max_bytes),
            max_rows=max_rows,
            max_bytes=max_bytes,
        )
        out = []
        for encoded, bloom in ordered_map(encode, blocklets):
            meta = self._append_encoded(encoded)
            out.append(meta if bloom is None else replace(meta, bloom=bloom))
        return out

    def append_blocklet_bytes(self, data: bytes) -> tuple[int, int]:
        """Append blocklets copied verbatim from another file of the same schema.

        Returns the byte range they now occupy. The caller vouches that ``data`` is a run of
        whole blocklets (their offsets move with them; blocklets hold no absolute offsets).
        """
        self._check_open()
        start = self.length
        self._write_parts([data])
        return start, self.length

    def _append_encoded(self, encoded: EncodedBlocklet) -> BlockletMeta:
        offset = self.length
        self._write_parts(encoded.parts)
        return encoded.meta(offset, self.schema)

    def flush(self) -> None:
        """Make everything written so far durable (fsync on local disk)."""
        self._check_open()
        try:
            if self._appender is not None:
                self._appender.flush()
            elif self._file is not None:
                self._file.flush()
                fileno = getattr(self._file, "fileno", None)
                if fileno is not None:
                    # In-memory file objects have no descriptor to sync.
                    with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
                        os.fsync(fileno())
        except BaseException as exc:
            self._failed = exc
            raise

    def close(self) -> None:
        """Flush and release the file (a file object passed in is left open)."""
        if self._closed:
            return
        try:
            if self._failed is None:
                self.flush()
        finally:
            self._closed = True
            if self._appender is not None:
                try:
                    self._appender.close()
                except BaseException:
                    if self._failed is None:
                        raise

    def __enter__(self) -> BlockletFileWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
