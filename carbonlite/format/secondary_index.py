"""Secondary index files: for one column of one data file, which blocklets hold which values.

CarbonData's secondary index tables map a column's values to the blocklets holding them, so a
lookup reads exactly those. Here the map is a sorted array beside the data file, written
when the file is (handoff, compaction) or later by ``build_index``: for every distinct
(value, blocklet) pair, the value's *key* (the upper 32 bits of its bloom hash,
``format/bloom.py``: the same hash domains, nulls and NaNs left out, ``-0.0`` as ``0.0``) and
the blocklet's ordinal in the file, sorted by key. A lookup hashes its literals, binary-searches
the keys and gets the blocklets; a 32-bit key that two values share only costs a read (the
rows are filtered exactly), so the index is exact for pruning purposes: it never drops a
blocklet holding the value, and with ``n`` distinct values in a file a missing value hits a
blocklet with probability about ``n / 2**32``.

File layout (integers little-endian; docs/FORMAT.md, "Secondary index files")::

    8 bytes   magic "CLSIDX01"
    u32       header length H
    H bytes   header, UTF-8 JSON: {"column", "domain", "entries", "id_width" (2 or 4),
              "blocklets": [offset of each blocklet in the data file, in file order]}
    4*n       keys, u32, ascending
    w*n       blocklet ordinals, u16 or u32 (``id_width``), in key order
    u32       CRC-32C of every byte before it
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from carbonlite.errors import CorruptDataError
from carbonlite.format.bloom import bloom_domain, bloom_hashes
from carbonlite.format.layout import crc32c

__all__ = [
    "SECONDARY_INDEX_MAGIC",
    "SecondaryIndex",
    "build_secondary_index",
    "index_keys",
]

SECONDARY_INDEX_MAGIC = b"CLSIDX01"


def index_keys(values: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.uint32]:
    """The key of every value ``==`` can match (nulls and NaNs left out)."""
    return (bloom_hashes(values) >> np.uint64(32)).astype(np.uint32)


@dataclass(frozen=True, slots=True, eq=False)
class SecondaryIndex:
    """A decoded index file: ``keys`` ascending, ``ids[i]`` the ordinal of the blocklet
    holding a value of key ``keys[i]``, ``blocklets[j]`` the offset of blocklet j."""

    column: str
    domain: str
    keys: npt.NDArray[np.uint32]
    ids: npt.NDArray[np.uint32]
    blocklets: npt.NDArray[np.int64]

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.ids.nbytes + self.blocklets.nbytes)

    def lookup(self, hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """Offsets of the blocklets that may hold a value of one of the (bloom) ``hashes``."""
        keys = np.unique((np.asarray(hashes, dtype=np.uint64) >> np.uint64(32)).astype(np.uint32))
        lo = np.searchsorted(self.keys, keys, side="left")
        hi = np.searchsorted(self.keys, keys, side="right")
        hit = hi > lo
        if not hit.any():
            return np.zeros(0, dtype=np.int64)
        lo, hi = lo[hit], hi[hit]
        counts = hi - lo
        starts = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        positions = starts + np.arange(int(counts.sum()))
        return np.unique(self.blocklets[self.ids[positions]])

    def encode(self) -> bytes:
        width = 2 if len(self.blocklets) <= 1 << 16 else 4
        header = json.dumps(
            {
                "column": self.column,
                "domain": self.domain,
                "entries": len(self.keys),
                "id_width": width,
                "blocklets": [int(b) for b in self.blocklets],
            },
            separators=(",", ":"),
        ).encode("utf-8")
        body = b"".join(
            [
                SECONDARY_INDEX_MAGIC,
                struct.pack("<I", len(header)),
                header,
                self.keys.astype("<u4").tobytes(),
                self.ids.astype("<u2" if width == 2 else "<u4").tobytes(),
            ]
        )
        return body + struct.pack("<I", crc32c(body))

    @classmethod
    def decode(cls, data: bytes, *, where: str) -> SecondaryIndex:
        """:class:`CorruptDataError` naming ``where`` when the bytes are damaged."""
        view = memoryview(data)
        try:
            if len(view) < 16 or bytes(view[:8]) != SECONDARY_INDEX_MAGIC:
                raise ValueError("it does not start with the magic CLSIDX01")
            (stored,) = struct.unpack_from("<I", view, len(view) - 4)
            if crc32c(view[:-4]) != stored:
                raise ValueError("it fails its checksum")
            (size,) = struct.unpack_from("<I", view, 8)
            header = json.loads(bytes(view[12 : 12 + size]).decode("utf-8"))
            n, width = int(header["entries"]), int(header["id_width"])
            if width not in (2, 4) or 12 + size + n * (4 + width) + 4 != len(view):
                raise ValueError("its lengths do not add up")
            pos = 12 + size
            keys = np.frombuffer(view, dtype="<u4", count=n, offset=pos).astype(np.uint32)
            ids = np.frombuffer(
                view, dtype="<u2" if width == 2 else "<u4", count=n, offset=pos + 4 * n
            ).astype(np.uint32)
            blocklets = np.array(header["blocklets"], dtype=np.int64)
            if n and (int(ids.max()) >= len(blocklets) or np.any(keys[1:] < keys[:-1])):
                raise ValueError("an entry names no blocklet, or the keys are not sorted")
            return cls(str(header["column"]), str(header["domain"]), keys, ids, blocklets)
        except (ValueError, KeyError, TypeError, struct.error, UnicodeDecodeError) as exc:
            raise CorruptDataError(
                f"a secondary index file is damaged: {exc}", path=where
            ) from None


def build_secondary_index(
    column: str, values: Sequence[pa.Array | pa.ChunkedArray], offsets: Sequence[int]
) -> SecondaryIndex:
    """The index of ``column`` over blocklets at ``offsets`` whose values are ``values``
    (one array per blocklet, in file order)."""
    domain = bloom_domain(values[0].type) if values else "int"
    parts = [
        (index_keys(v).astype(np.uint64) << np.uint64(32)) | np.uint64(ordinal)
        for ordinal, v in enumerate(values)
    ]
    pairs = np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)
    if len(pairs) > 1:
        pairs = pairs[np.concatenate([[True], pairs[1:] != pairs[:-1]])]
    all_keys = (pairs >> np.uint64(32)).astype(np.uint32)
    all_ids = (pairs & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    return SecondaryIndex(column, domain, all_keys, all_ids, np.array(offsets, dtype=np.int64))
