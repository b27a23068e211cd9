"""Iceberg v3 deletion vectors in Puffin files.

A ``deletion-vector-v1`` blob holds the deleted positions of one data file: its length (4
bytes, big-endian) of what follows but the CRC, the magic ``D1 D3 39 64``, the positions as a
64-bit roaring bitmap in the portable form (the count of 32-bit bitmaps, 8 bytes little-endian,
then each one's key, 4 bytes little-endian, and its portable serialization), and a CRC-32 of
magic and bitmap (4 bytes, big-endian). A Puffin file is ``PFA1``, the blobs, then the footer:
``PFA1``, the footer's JSON, its length (4 bytes little-endian), 4 flag bytes (0: not
compressed) and ``PFA1`` again (footer-less files broke pyiceberg and DuckDB: duckdb-iceberg
#1248).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from pyroaring import BitMap

__all__ = ["MAGIC", "PuffinBlob", "deletion_vector_blob", "puffin_blobs", "puffin_file"]

MAGIC = b"PFA1"
_DV_MAGIC = bytes([0xD1, 0xD3, 0x39, 0x64])
ROW_POSITION_FIELD_ID = 2147483645
"""Iceberg's reserved id of the row position metadata column, the field a deletion vector is
of."""


def deletion_vector_blob(positions: np.ndarray) -> bytes:
    """The ``deletion-vector-v1`` blob of deleted row ``positions`` of one data file."""
    keys = (positions >> 32).astype(np.int64)
    parts = []
    unique = np.unique(keys)
    parts.append(struct.pack("<q", len(unique)))
    for key in unique:
        low = (positions[keys == key] & 0xFFFFFFFF).astype(np.uint32)
        parts.append(struct.pack("<I", int(key)))
        parts.append(BitMap(low.tolist()).serialize())
    body = _DV_MAGIC + b"".join(parts)
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


@dataclass(frozen=True)
class PuffinBlob:
    """Where a blob lies in the Puffin file written."""

    offset: int
    length: int


def puffin_file(
    blobs: Sequence[tuple[bytes, Mapping[str, str]]],
) -> tuple[bytes, list[PuffinBlob]]:
    """A Puffin file of ``deletion-vector-v1`` blobs (each with its properties:
    ``referenced-data-file`` and ``cardinality``), and where each lies."""
    out = bytearray(MAGIC)
    placed = []
    footer_blobs = []
    for data, properties in blobs:
        placed.append(PuffinBlob(len(out), len(data)))
        footer_blobs.append(
            {
                "type": "deletion-vector-v1",
                "fields": [ROW_POSITION_FIELD_ID],
                "snapshot-id": -1,
                "sequence-number": -1,
                "offset": len(out),
                "length": len(data),
                "properties": dict(properties),
            }
        )
        out += data
    footer = json.dumps({"blobs": footer_blobs, "properties": {"created-by": "CarbonLite"}})
    payload = footer.encode()
    out += MAGIC + payload + struct.pack("<i", len(payload)) + b"\x00\x00\x00\x00" + MAGIC
    return bytes(out), placed


FOOTER_TAIL = 12
"""The bytes after a Puffin footer's JSON: its length, the flags and the magic."""


def puffin_blobs(tail: bytes) -> dict[str, PuffinBlob]:
    """Where each blob of a Puffin file :func:`puffin_file` wrote lies, by its
    ``referenced-data-file``; ``tail``: the file's last bytes, enough to hold the footer
    (``ValueError`` otherwise: ask again with more)."""
    if len(tail) < FOOTER_TAIL or tail[-4:] != MAGIC:
        raise ValueError("not the end of a Puffin file")
    (length,) = struct.unpack("<i", tail[-FOOTER_TAIL : -FOOTER_TAIL + 4])
    start = len(tail) - FOOTER_TAIL - length
    if start < 4 or tail[start - 4 : start] != MAGIC:
        raise ValueError(f"the footer of {length} bytes is not within the last {len(tail)}")
    footer = json.loads(tail[start : len(tail) - FOOTER_TAIL])
    return {
        b["properties"]["referenced-data-file"]: PuffinBlob(int(b["offset"]), int(b["length"]))
        for b in footer["blobs"]
    }
