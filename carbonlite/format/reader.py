"""BlockletFileReader: read blocklets back, only up to a committed length if one is given."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import IO, Any

import pyarrow as pa
import zstandard

from carbonlite.errors import CorruptDataError, SchemaMismatchError, UnsupportedFormatError
from carbonlite.format.layout import (
    BLOCKLET_MAGIC,
    BLOCKLET_PREFIX,
    FORMAT_VERSION,
    HeaderError,
    PageMeta,
    blocklet_head_length,
    crc32c,
    decode_blocklet_header,
    decode_blocklet_prefix,
    decode_file_header,
)
from carbonlite.format.meta import BlockletMeta, column_schemas
from carbonlite.format.pages import decode_page, ordered_map
from carbonlite.storage import RangeReader, open_storage

__all__ = ["BlockletFileReader", "coalesce_ranges"]

_HEAD_READ = 4096  # bytes read speculatively to get a header in one go
_COALESCE_GAP = 64 * 1024  # page reads closer than this are merged into one read


class _FileObjectReader(RangeReader):
    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self._lock = threading.Lock()
        self.path = str(getattr(f, "name", "<file object>"))

    def size(self) -> int:
        with self._lock:
            here = self._f.tell()
            end = self._f.seek(0, os.SEEK_END)
            self._f.seek(here)
            return int(end)

    def read(self, offset: int, length: int) -> bytes:
        with self._lock:
            self._f.seek(offset)
            return self._f.read(length)


def coalesce_ranges(ranges: Sequence[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    """Merge sorted ``(start, end)`` ranges whose gaps are at most ``gap`` bytes."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start - out[-1][1] <= gap:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


class BlockletFileReader:
    """Reads a blocklet file.

    With ``end=N`` (a committed length) exactly the blocklets ending at or before N are read and
    any bytes after N are ignored; damage inside ``[0, N)`` raises :class:`CorruptDataError`
    naming the file and byte offset. Without ``end`` the file is read up to the first blocklet
    that is torn or fails its header checksum (a crashed writer's tail); page checksums are
    verified as pages are read, and :attr:`valid_length` verifies every byte.
    """

    def __init__(
        self,
        path_or_file: str | os.PathLike[str] | IO[bytes],
        *,
        end: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(path_or_file, (str, os.PathLike)):
            self.path = os.fspath(path_or_file)
            storage, path = open_storage(self.path, dict(storage_options or {}))
            self._source: RangeReader = storage.open_reader(path)
        else:
            self._source = _FileObjectReader(path_or_file)
            self.path = self._source.path
        try:
            self.size = self._source.size()
            self._read_file_header()
            if end is not None and not self.header_length <= end <= self.size:
                raise CorruptDataError(
                    f"committed length {end} does not fit the file: it holds {self.size} bytes "
                    f"and its header ends at {self.header_length} (was the file truncated?)",
                    path=self.path,
                    offset=min(end, self.size),
                )
        except BaseException:
            self._source.close()
            raise
        self.end = end
        self._limit = self.size if end is None else end
        self._blocklets: list[BlockletMeta] | None = None
        self._valid_length: int | None = None
        self._schemas1 = column_schemas(self.schema)

    def _read_file_header(self) -> None:
        if self.size == 0:
            raise CorruptDataError(
                "the file is empty, not a blocklet file", path=self.path, offset=0
            )
        data = self._source.read(0, min(self.size, _HEAD_READ))
        try:
            try:
                version, schema, header_length = decode_file_header(data)
            except LookupError as need:
                wanted = int(need.args[0])
                if wanted > self.size:
                    raise HeaderError(
                        f"the file header needs {wanted} bytes, the file has {self.size}"
                    ) from None
                version, schema, header_length = decode_file_header(self._source.read(0, wanted))
        except HeaderError as exc:
            raise CorruptDataError(str(exc), path=self.path, offset=0) from None
        if version > FORMAT_VERSION:
            raise UnsupportedFormatError(
                f"{self.path!r} is blocklet format version {version}; this CarbonLite reads up "
                f"to version {FORMAT_VERSION}: upgrade carbonlite to read it"
            )
        self.format_version = version
        self.schema: pa.Schema = schema
        self.header_length = header_length

    # --- scanning -----------------------------------------------------------------------------

    def _scan(self, *, verify_pages: bool) -> tuple[list[BlockletMeta], int]:
        """Blocklets from the header on, and where the scan stopped.

        Within a committed ``end`` any damage raises; without one the scan stops at it.
        """
        metas: list[BlockletMeta] = []
        pos = self.header_length
        limit = self._limit
        while pos < limit:
            try:
                meta = self._blocklet_at(pos, limit, verify_pages)
            except HeaderError as exc:
                if self.end is not None:
                    raise CorruptDataError(
                        f"blocklet inside the committed length {self.end} is damaged: {exc}",
                        path=self.path,
                        offset=pos,
                    ) from None
                later = self._later_blocklet(pos)
                if later is not None:
                    raise CorruptDataError(
                        f"blocklet at {pos} is damaged ({exc}) but an intact blocklet follows at "
                        f"{later}: this is damage inside the file, not a torn tail; read with the "
                        "committed length (end=...) or truncate explicitly",
                        path=self.path,
                        offset=pos,
                    ) from None
                break
            metas.append(meta)
            pos = meta.end
        return metas, pos

    def _later_blocklet(self, damaged_at: int) -> int | None:
        """Offset of an intact blocklet header after ``damaged_at``, if there is one.

        A crash only ever tears the end of a file; intact blocklets after damage mean the
        damage is inside the file, which must not be mistaken for (and cut off as) a torn tail.
        """
        pos = damaged_at + 8
        pos += -pos % 8  # blocklets start 8-aligned
        chunk = 8 * 1024 * 1024
        while pos < self.size:
            data = self._source.read(pos, min(chunk, self.size - pos))
            at = data.find(BLOCKLET_MAGIC)
            while at >= 0:
                candidate = pos + at
                if candidate % 8 == 0:
                    try:
                        header_len, _ = decode_blocklet_prefix(
                            self._source.read(candidate, BLOCKLET_PREFIX)
                        )
                        head = self._source.read(candidate, blocklet_head_length(header_len))
                        decode_blocklet_header(head, self.schema, candidate)
                        return candidate
                    except (HeaderError, ValueError):
                        pass
                at = data.find(BLOCKLET_MAGIC, at + 1)
            if len(data) < chunk:
                break
            pos += len(data) - 8  # overlap so a header across the chunk edge is still found
        return None

    def _blocklet_at(self, pos: int, limit: int, verify_pages: bool) -> BlockletMeta:
        if limit - pos < BLOCKLET_PREFIX:
            raise HeaderError(f"{limit - pos} bytes left, too few for a blocklet")
        head = self._source.read(pos, min(limit - pos, _HEAD_READ))
        header_len, body_len = decode_blocklet_prefix(head)
        head_len = blocklet_head_length(header_len)
        total = head_len + body_len
        if pos + total > limit:
            raise HeaderError(f"blocklet of {total} bytes runs past the end at {limit} (torn)")
        if len(head) < head_len:
            head = self._source.read(pos, head_len)
        header = decode_blocklet_header(head, self.schema, pos)
        if verify_pages:
            body_start = pos + head_len
            body = self._source.read(body_start, body_len)
            for i, page in enumerate(header.pages):
                rel = page.offset - body_start
                if crc32c(memoryview(body)[rel : rel + page.length]) != page.crc:
                    raise HeaderError(f"page of column {self.schema.names[i]!r} fails its checksum")
        return BlockletMeta(
            offset=pos,
            length=total,
            num_rows=header.num_rows,
            stats=dict(zip(self.schema.names, header.stats, strict=True)),
            pages=header.pages,
        )

    def blocklets(self) -> list[BlockletMeta]:
        """Every readable blocklet up to ``end`` (or up to the first damaged one)."""
        if self._blocklets is None:
            self._blocklets, _ = self._scan(verify_pages=False)
        return list(self._blocklets)

    @property
    def valid_length(self) -> int:
        """End of the last complete blocklet whose header and pages all pass their checksums."""
        if self._valid_length is None:
            end = self.end
            self.end = None  # stop at damage rather than raise
            try:
                _, self._valid_length = self._scan(verify_pages=True)
            finally:
                self.end = end
        return self._valid_length

    # --- reading ------------------------------------------------------------------------------

    def _column_indices(self, columns: Sequence[str] | None) -> list[int]:
        if columns is None:
            return list(range(len(self.schema)))
        names = self.schema.names
        missing = [c for c in columns if c not in names]
        if missing:
            raise SchemaMismatchError(
                f"cannot read columns {missing} from {self.path!r}", [f"the file has {names}"]
            )
        return [names.index(c) for c in columns]

    def read_blocklet(
        self, meta: BlockletMeta, columns: Sequence[str] | None = None
    ) -> pa.RecordBatch:
        """One blocklet's rows, decoding only the pages of ``columns`` (all by default)."""
        indices = self._column_indices(columns)
        if meta.end > self._limit:
            raise CorruptDataError(
                f"blocklet [{meta.offset}, {meta.end}) lies past the readable end {self._limit}",
                path=self.path,
                offset=meta.offset,
            )
        schema = pa.schema([self.schema.field(i) for i in indices])
        if not indices:  # no columns, but the row count still matters (counting rows)
            return pa.RecordBatch.from_struct_array(pa.nulls(meta.num_rows, pa.struct([])))
        if meta.num_rows == 0:
            return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
        whole = meta.pages is None and len(indices) == len(self.schema)
        blob = self._source.read_buffer(meta.offset, meta.length) if whole else None
        pages = meta.pages
        if pages is None:
            head = (
                blob
                if blob is not None
                else self._source.read(meta.offset, min(meta.length, _HEAD_READ))
            )
            pages = self._decode_head(meta, head).pages
        wanted = [pages[i] for i in indices]
        chunks = self._read_pages(meta, wanted, blob)
        # Pages in parallel only when this blocklet is read alone (not from a pool thread, where
        # ordered_map runs inline: a scan of many blocklets decodes them side by side).
        arrays = list(
            ordered_map(
                lambda job: self._decode(meta, *job), zip(indices, wanted, chunks, strict=True)
            )
        )
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _decode_head(self, meta: BlockletMeta, head: bytes | memoryview) -> Any:
        try:
            header_len, body_len = decode_blocklet_prefix(head)
            if blocklet_head_length(header_len) + body_len != meta.length:
                raise HeaderError(
                    f"blocklet is {blocklet_head_length(header_len) + body_len} bytes long, "
                    f"expected {meta.length}"
                )
            if len(head) < blocklet_head_length(header_len):
                head = self._source.read(meta.offset, blocklet_head_length(header_len))
            header = decode_blocklet_header(head, self.schema, meta.offset)
        except HeaderError as exc:
            raise CorruptDataError(str(exc), path=self.path, offset=meta.offset) from None
        if header.num_rows != meta.num_rows:
            raise CorruptDataError(
                f"blocklet holds {header.num_rows} rows, expected {meta.num_rows}",
                path=self.path,
                offset=meta.offset,
            )
        return header

    def _read_pages(
        self, meta: BlockletMeta, pages: list[PageMeta], blob: memoryview | None
    ) -> list[memoryview]:
        if blob is not None:
            view = blob
            return [view[p.offset - meta.offset : p.offset - meta.offset + p.length] for p in pages]
        ranges = coalesce_ranges([(p.offset, p.offset + p.length) for p in pages], _COALESCE_GAP)
        reads = {start: self._source.read_buffer(start, end - start) for start, end in ranges}
        out = []
        for p in pages:
            start = max(s for s in reads if s <= p.offset)
            out.append(reads[start][p.offset - start : p.offset - start + p.length])
        return out

    def _decode(
        self, meta: BlockletMeta, index: int, page: PageMeta, chunk: memoryview
    ) -> pa.Array:
        name = self.schema.names[index]
        if len(chunk) != page.length or crc32c(chunk) != page.crc:
            raise CorruptDataError(
                f"page of column {name!r} in the blocklet at {meta.offset} fails its checksum",
                path=self.path,
                offset=page.offset,
            )
        try:
            array = decode_page(chunk, page.raw_length, page.codec, self._schemas1[index])
        except (zstandard.ZstdError, pa.ArrowException, ValueError) as exc:
            raise CorruptDataError(
                f"page of column {name!r} does not decode: {exc}",
                path=self.path,
                offset=page.offset,
            ) from None
        if len(array) != meta.num_rows:
            raise CorruptDataError(
                f"page of column {name!r} holds {len(array)} rows, expected {meta.num_rows}",
                path=self.path,
                offset=page.offset,
            )
        return array

    def iter_batches(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """Every blocklet's rows in file order, decoded in parallel."""
        self._column_indices(columns)  # fail before starting threads
        yield from ordered_map(lambda m: self.read_blocklet(m, columns), self.blocklets())

    def read_all(self, columns: Sequence[str] | None = None) -> pa.Table:
        """All rows (of ``columns``) as one table."""
        indices = self._column_indices(columns)
        schema = pa.schema([self.schema.field(i) for i in indices])
        return pa.Table.from_batches(list(self.iter_batches(columns)), schema=schema)

    def close(self) -> None:
        self._source.close()

    def __enter__(self) -> BlockletFileReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
