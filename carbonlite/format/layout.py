"""Byte layout of a blocklet file (specified in docs/FORMAT.md; keep the two in step).

All integers are little-endian. A file is a file header followed by blocklets, each
self-describing, so the file can grow by appending and needs no footer::

    file header  "CLBF" u16 version u16 flags u32 schema_len <schema> u32 crc32c <pad to 8>
    blocklet     "CLBK" u32 header_len u64 body_len <header, padded> u32 crc32c <body>

The blocklet CRC covers its fixed prefix and header; the header holds each page's CRC, so
together they cover every byte of the blocklet except the zero padding after each page.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import crc32c as _crc32c
import pyarrow as pa

from carbonlite.errors import UnsupportedFormatError
from carbonlite.format.stats import ColumnStats, decode_stat, encode_stat
from carbonlite.format.types import stat_kind

__all__ = [
    "BLOCKLET_MAGIC",
    "BLOCKLET_PREFIX",
    "CODEC_LZ4",
    "CODEC_NONE",
    "CODEC_ZSTD",
    "FILE_MAGIC",
    "FORMAT_VERSION",
    "BlockletHeader",
    "HeaderError",
    "PageMeta",
    "crc32c",
    "decode_blocklet_header",
    "decode_blocklet_prefix",
    "decode_file_header",
    "encode_blocklet_prefix",
    "encode_file_header",
    "file_header_length",
    "pad8",
]

FILE_MAGIC = b"CLBF"
BLOCKLET_MAGIC = b"CLBK"
FORMAT_VERSION = 1
CODEC_NONE = 0
CODEC_ZSTD = 1
CODEC_LZ4 = 2
CODECS = {CODEC_NONE: "none", CODEC_ZSTD: "zstd", CODEC_LZ4: "lz4"}

_FILE_FIXED = struct.Struct("<4sHHI")  # magic, version, flags, schema_len
_CRC = struct.Struct("<I")
_BLOCKLET_FIXED = struct.Struct("<4sIQ")  # magic, header_len, body_len
BLOCKLET_PREFIX = _BLOCKLET_FIXED.size  # 16
_HEADER_FIXED = struct.Struct("<QI")  # row_count, column_count
_COLUMN_FIXED = struct.Struct(
    "<QQQIBBQQ"
)  # offset, length, raw_length, crc, codec, flags, nulls, nans
_LEN = struct.Struct("<I")
_HAS_MIN = 1
_HAS_MAX = 2


class HeaderError(Exception):
    """Bytes that do not decode as a header (turned into CorruptDataError by the reader)."""


def crc32c(data: Any, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of a bytes-like object."""
    return int(_crc32c.crc32c(data, value))


def pad8(n: int) -> int:
    """Bytes of zero padding that bring ``n`` to a multiple of 8."""
    return -n % 8


# --- file header -----------------------------------------------------------------------------


def encode_file_header(schema: pa.Schema) -> bytes:
    schema_bytes = schema.serialize().to_pybytes()
    head = _FILE_FIXED.pack(FILE_MAGIC, FORMAT_VERSION, 0, len(schema_bytes)) + schema_bytes
    head += _CRC.pack(crc32c(head))
    return head + b"\x00" * pad8(len(head))


def file_header_length(schema_len: int) -> int:
    n = _FILE_FIXED.size + schema_len + _CRC.size
    return n + pad8(n)


def decode_file_header(data: bytes) -> tuple[int, pa.Schema, int]:
    """(format version, schema, header length) of a file starting with ``data``.

    Raises :class:`HeaderError` for a damaged header and ``LookupError`` (with the bytes
    needed) when ``data`` is too short to hold the whole header.
    """
    if len(data) < _FILE_FIXED.size:
        raise LookupError(_FILE_FIXED.size)
    magic, version, flags, schema_len = _FILE_FIXED.unpack_from(data)
    if magic != FILE_MAGIC:
        raise HeaderError(
            f"not a CarbonLite blocklet file: magic {magic!r}, expected {FILE_MAGIC!r}"
        )
    total = file_header_length(schema_len)
    if len(data) < total:
        raise LookupError(total)
    crc_at = _FILE_FIXED.size + schema_len
    (stored_crc,) = _CRC.unpack_from(data, crc_at)
    if crc32c(memoryview(data)[:crc_at]) != stored_crc:
        raise HeaderError("file header checksum mismatch")
    if version < 1:
        raise HeaderError(f"format version {version} does not exist (versions start at 1)")
    if flags and version <= FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"the file sets header flags {flags:#06x}, features this CarbonLite does not know: "
            "upgrade carbonlite to read it"
        )
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(bytes(data[_FILE_FIXED.size : crc_at])))
    except (pa.ArrowException, ValueError) as exc:
        raise HeaderError(f"file header schema does not decode: {exc}") from exc
    return version, schema, total


# --- blocklets -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PageMeta:
    """Where one column's page lies in the file, and how it is stored."""

    offset: int
    """Absolute byte offset of the page in the file."""
    length: int
    """Stored (possibly compressed) length in bytes."""
    raw_length: int
    """Length of the uncompressed Arrow IPC message."""
    crc: int
    codec: int


@dataclass(frozen=True, slots=True)
class BlockletHeader:
    num_rows: int
    pages: tuple[PageMeta, ...]
    stats: tuple[ColumnStats, ...]


def encode_blocklet_prefix(header: bytes, body_len: int) -> bytes:
    """Fixed prefix + header (padded) + CRC; ``header`` is from :func:`encode_blocklet_header`."""
    padded = header + b"\x00" * pad8(BLOCKLET_PREFIX + len(header) + _CRC.size)
    head = _BLOCKLET_FIXED.pack(BLOCKLET_MAGIC, len(padded), body_len) + padded
    return head + _CRC.pack(crc32c(head))


def encode_blocklet_header(
    num_rows: int,
    schema: pa.Schema,
    pages: list[tuple[int, int, int, int, int]],
    stats: list[ColumnStats],
) -> bytes:
    """``pages`` holds (body-relative offset, length, raw length, crc, codec) per column."""
    parts = [_HEADER_FIXED.pack(num_rows, len(pages))]
    for field, page, st in zip(schema, pages, stats, strict=True):
        flags = (_HAS_MIN if st.min is not None else 0) | (_HAS_MAX if st.max is not None else 0)
        parts.append(_COLUMN_FIXED.pack(*page, flags, st.null_count, st.nan_count))
        for present, value in ((st.min is not None, st.min), (st.max is not None, st.max)):
            if present:
                encoded = encode_stat(value, field.type)
                parts.append(_LEN.pack(len(encoded)))
                parts.append(encoded)
    return b"".join(parts)


def decode_blocklet_prefix(data: bytes | memoryview) -> tuple[int, int]:
    """(header_len, body_len) from a blocklet's first 16 bytes; HeaderError on bad magic."""
    if len(data) < BLOCKLET_PREFIX:
        raise HeaderError(f"{len(data)} bytes, too few for a blocklet prefix")
    magic, header_len, body_len = _BLOCKLET_FIXED.unpack_from(data)
    if magic != BLOCKLET_MAGIC:
        raise HeaderError(f"no blocklet here: magic {bytes(magic)!r}, expected {BLOCKLET_MAGIC!r}")
    return header_len, body_len


def blocklet_head_length(header_len: int) -> int:
    """Bytes from a blocklet's start to its body: prefix, header, CRC."""
    return BLOCKLET_PREFIX + header_len + _CRC.size


def decode_blocklet_header(
    head: bytes | memoryview, schema: pa.Schema, blocklet_offset: int
) -> BlockletHeader:
    """Decode and check a blocklet's head (prefix + header + CRC) read from the file.

    Page offsets come back absolute (``blocklet_offset`` + head + body-relative offset).
    """
    header_len, body_len = decode_blocklet_prefix(head)
    head_len = blocklet_head_length(header_len)
    if len(head) < head_len:
        raise HeaderError("blocklet header is cut short")
    (stored_crc,) = _CRC.unpack_from(head, BLOCKLET_PREFIX + header_len)
    if crc32c(memoryview(head)[: BLOCKLET_PREFIX + header_len]) != stored_crc:
        raise HeaderError("blocklet header checksum mismatch")
    try:
        return _decode_header_fields(
            memoryview(head)[BLOCKLET_PREFIX : BLOCKLET_PREFIX + header_len],
            schema,
            blocklet_offset + head_len,
            body_len,
        )
    except (struct.error, ValueError) as exc:
        raise HeaderError(f"blocklet header does not decode: {exc}") from exc


def _decode_header_fields(
    data: memoryview, schema: pa.Schema, body_start: int, body_len: int
) -> BlockletHeader:
    num_rows, ncols = _HEADER_FIXED.unpack_from(data)
    if ncols != len(schema):
        raise ValueError(f"header has {ncols} columns, the file schema {len(schema)}")
    pos = _HEADER_FIXED.size
    pages: list[PageMeta] = []
    stats: list[ColumnStats] = []
    for field in schema:
        offset, length, raw_length, crc, codec, flags, nulls, nans = _COLUMN_FIXED.unpack_from(
            data, pos
        )
        pos += _COLUMN_FIXED.size
        if offset + length > body_len:
            raise ValueError(f"page of column {field.name!r} runs past the blocklet body")
        if codec not in CODECS:
            raise ValueError(f"unknown codec {codec} for column {field.name!r}")
        if flags & ~(_HAS_MIN | _HAS_MAX):
            raise ValueError(f"unknown statistics flags {flags:#04x} for column {field.name!r}")
        bounds: list[Any] = []
        for bit in (_HAS_MIN, _HAS_MAX):
            if flags & bit:
                (n,) = _LEN.unpack_from(data, pos)
                pos += _LEN.size
                if pos + n > len(data):
                    raise ValueError("statistics run past the header")
                bounds.append(decode_stat(bytes(data[pos : pos + n]), field.type))
                pos += n
            else:
                bounds.append(None)
        if (flags & (_HAS_MIN | _HAS_MAX)) and stat_kind(field.type) is None:
            raise ValueError(f"column {field.name!r} of type {field.type} cannot have bounds")
        pages.append(PageMeta(body_start + offset, length, raw_length, crc, codec))
        stats.append(ColumnStats(null_count=nulls, min=bounds[0], max=bounds[1], nan_count=nans))
    return BlockletHeader(num_rows=num_rows, pages=tuple(pages), stats=tuple(stats))
