"""Split-block bloom filters of a blocklet's columns, and the records that hold them.

A filter answers "may this blocklet hold a value equal to one of these?" with no false
negatives: a value that was added always tests positive; a value that was not tests positive
with about the target false-positive rate. It is the split-block bloom filter of Parquet
(and of Impala and Kudu): ``num_blocks`` blocks of 256 bits, each eight 32-bit words.

A value is hashed with :func:`carbonlite.format.row_hash.column_hashes` (64 bits, the same for
every integer width, for ``string`` and ``large_string``, for dictionary and plain columns),
after two canonical steps that make hash equality agree with ``==``: ``-0.0`` is hashed as
``0.0``, and nulls and NaNs are left out (``==`` is never true for them). With ``h`` a value's
hash, its block is ``((h >> 32) * num_blocks) >> 32`` and, with ``key = h & 0xFFFFFFFF``, bit
``(key * SALT[i] mod 2**32) >> 27`` of the block's word ``i`` is set for each i in 0..7.

A filter is sized for the number of distinct values it holds, so that the expected
false-positive rate is the target: about 10.5 bits per value for 1% (Parquet's closed form,
9.7 bits, gives 1.4%: it ignores how unevenly values fall into blocks).

Record of one blocklet (all integers little-endian; docs/FORMAT.md, "Bloom filter files")::

    u32 column count
    per column: u16 name length, name (UTF-8), u16 domain length, the hash domain of the
                column's type (UTF-8, :func:`bloom_domain`), u32 block count, the blocks
                (32 bytes each)
    u32 CRC-32C of every byte of the record before it
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from carbonlite.errors import CorruptDataError
from carbonlite.format.layout import crc32c
from carbonlite.format.row_hash import column_hashes

__all__ = [
    "BLOOM_FILE_MAGIC",
    "DEFAULT_BLOOM_FPP",
    "BloomFilter",
    "BloomSpec",
    "ColumnBloom",
    "FilterAt",
    "bloom_domain",
    "bloom_hashes",
    "bloom_supported",
    "build_bloom_record",
    "decode_bloom_record",
    "distinct_estimate",
    "encode_bloom_record",
    "locate_bloom_record",
    "probe_located",
]

BLOOM_FILE_MAGIC = b"CLBLOOM1"
"""The first 8 bytes of a bloom filter file (records follow)."""
DEFAULT_BLOOM_FPP = 0.01
"""The target false-positive rate when the table does not set ``bloom_filter_fpp``."""

_SALT = np.array(
    [
        0x47B6137B,
        0x44974D91,
        0x8824AD5B,
        0xA2B7289D,
        0x705495C7,
        0x2DF1424B,
        0x9EFC4947,
        0x5C6BFB31,
    ],
    dtype=np.uint32,
)
_WORDS = 8  # per block
_BLOCK_BYTES = 32
_LANES_INTP = np.arange(_WORDS, dtype=np.intp) * 32  # the first bit of each word of a block
_BUILD_CHUNK = 8192  # values set at a time
_PROBE_PAIRS = 1 << 20  # (filter, value) pairs tested at a time: bounds the working memory

U64 = npt.NDArray[np.uint64]
Bools = npt.NDArray[np.bool_]


def bloom_supported(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` can have a bloom filter: integers, floats, decimals,
    strings, binaries, dates, times, timestamps, durations, and dictionaries of those.
    (Not bool, whose two values min/max already prune, nor nested types.)"""
    if pat.is_dictionary(t) and (
        pat.is_string_view(t.value_type) or pat.is_binary_view(t.value_type)
    ):
        return False  # pyarrow cannot decode such a dictionary to hash it
    try:
        bloom_domain(t)
    except TypeError:
        return False
    return True


def bloom_domain(t: pa.DataType) -> str:
    """The *hash domain* of a column type: values of two types of the same domain that are
    equal hash equal (every integer width and signedness; string, large_string and
    string_view; every binary; decimals of one byte width and scale; one temporal unit).
    A record keeps its filters' domain, so a filter built before a column was widened is used
    only while the domain is unchanged."""
    if pat.is_dictionary(t):
        return bloom_domain(t.value_type)
    if pat.is_integer(t):
        return "int"
    if pat.is_floating(t):
        return "float"
    if pat.is_decimal(t):
        return f"decimal{t.bit_width}(scale={t.scale})"
    if pat.is_string(t) or pat.is_large_string(t) or pat.is_string_view(t):
        return "string"
    if (
        pat.is_binary(t)
        or pat.is_large_binary(t)
        or pat.is_binary_view(t)
        or pat.is_fixed_size_binary(t)
    ):
        return "binary"
    if pat.is_date32(t):
        return "date32"
    if pat.is_date64(t):
        return "date64"
    if pat.is_timestamp(t):
        return f"timestamp[{t.unit}]"
    if pat.is_time(t):
        return f"time[{t.unit}]"
    if pat.is_duration(t):
        return f"duration[{t.unit}]"
    raise TypeError(f"a column of type {t} has no bloom filter")


def bloom_hashes(values: pa.Array | pa.ChunkedArray) -> U64:
    """The hash of every value of ``values`` that ``==`` can match: nulls and NaNs left out,
    ``-0.0`` hashed as ``0.0``."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    t = values.type
    if pat.is_dictionary(t):
        values = values.cast(t.value_type)
        t = values.type
    if pat.is_string_view(t) or pat.is_binary_view(t):  # few kernels take views
        values = values.cast(pa.large_string() if pat.is_string_view(t) else pa.large_binary())
        t = values.type
    if pat.is_float16(t):  # widened exactly, as column_hashes widens every float
        values = values.cast(pa.float32())
        t = values.type
    if pat.is_floating(t):
        values = pc.if_else(pc.equal(values, pa.scalar(0, t)), pa.scalar(0, t), values)
        values = pc.filter(values, pc.invert(pc.is_nan(values)))
    if values.null_count:
        values = values.drop_null()
    return column_hashes(values)


@dataclass(frozen=True, slots=True, eq=False)
class BloomFilter:
    """A split-block bloom filter: ``words`` holds ``8 * num_blocks`` 32-bit words."""

    words: npt.NDArray[np.uint32]

    @property
    def num_blocks(self) -> int:
        return len(self.words) // _WORDS

    @property
    def nbytes(self) -> int:
        return len(self.words) * 4

    @staticmethod
    def blocks_for(ndv: int, fpp: float) -> int:
        """Blocks a filter of ``ndv`` distinct values needs for a false-positive rate ``fpp``."""
        return max(1, math.ceil(max(ndv, 1) / _values_per_block(fpp)))

    @classmethod
    def of_hashes(cls, hashes: U64, fpp: float) -> BloomFilter:
        """A filter holding ``hashes`` (see :func:`bloom_hashes`), sized by their distinct
        count (estimated: :func:`distinct_estimate`)."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        num_blocks = cls.blocks_for(distinct_estimate(hashes), fpp)
        bits = np.zeros(num_blocks * _WORDS * 32, dtype=np.bool_)
        # in chunks: the (n, 8) temporaries of a whole blocklet would be fresh pages each time
        for a in range(0, len(hashes), _BUILD_CHUNK):
            part = hashes[a : a + _BUILD_CHUNK]
            block = ((part >> np.uint64(32)) * np.uint64(num_blocks)) >> np.uint64(32)
            base = block.astype(np.intp)
            base *= _WORDS * 32
            with np.errstate(over="ignore"):
                bit = np.multiply(part.astype(np.uint32)[:, None], _SALT)
            bit >>= np.uint32(27)  # the bit of each word, in 32-bit arithmetic
            # word i of block b holds bits [b*256 + 32*i, b*256 + 32*(i+1)); intp indices
            # scatter faster than uint32 ones (numpy would convert those first)
            index = np.add(base[:, None], _LANES_INTP)
            index += bit
            bits[index.ravel()] = True
        packed = np.packbits(bits, bitorder="little")
        return cls(packed.view("<u4").astype(np.uint32, copy=False))

    def might_contain(self, hashes: U64) -> Bools:
        """For each hash: False when the value is surely absent."""
        block, bit = _positions(np.asarray(hashes, dtype=np.uint64), self.num_blocks)
        words = self.words.reshape(-1, _WORDS)[block]
        return np.all((words >> bit.astype(np.uint32)) & np.uint32(1) == 1, axis=1)


def distinct_estimate(hashes: U64) -> int:
    """About how many distinct values ``hashes`` holds, by linear counting: the hashes set
    bits of a bitmap of at least twice their number, and ``m * ln(m / empty)`` estimates the
    distinct ones (within about 2%; far cheaper than sorting)."""
    n = len(hashes)
    if n < 2:
        return n
    m = 1 << max(10, (2 * n - 1).bit_length())
    bits = np.zeros(m, dtype=np.bool_)
    bits[(hashes & np.uint64(m - 1)).astype(np.intp)] = True
    empty = m - int(np.count_nonzero(bits))
    return n if empty == 0 else min(n, math.ceil(m * math.log(m / empty)))


@functools.lru_cache(maxsize=64)
def _values_per_block(fpp: float) -> float:
    """The most values per block (on average) that keep the false-positive rate at ``fpp``.

    Values fall into blocks as a Poisson process of mean ``lam``; a block holding ``k``
    values answers a missing value positively with probability ``(1 - (31/32)**k) ** 8``.
    Parquet's closed form ignores that spread between blocks and overshoots its target (1.4%
    for 1%); this solves for the mean exactly, by bisection."""
    if not 0.0 < fpp < 1.0:
        raise ValueError(f"a false-positive rate must be between 0 and 1, got {fpp}")
    k = np.arange(0, 4096, dtype=np.float64)
    miss = (1.0 - (31.0 / 32.0) ** k) ** _WORDS
    log_k_fact = np.concatenate([[0.0], np.cumsum(np.log(k[1:]))])

    def rate(lam: float) -> float:
        return float(np.sum(np.exp(k * math.log(lam) - lam - log_k_fact) * miss))

    lo, hi = 1e-6, 4000.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rate(mid) <= fpp else (lo, mid)
    return lo


def _positions(
    hashes: U64, num_blocks: int | npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(block of each hash, the bit each of its 8 words tests: shape (n, 8))."""
    blocks = np.asarray(num_blocks, dtype=np.uint64)
    block = (((hashes >> np.uint64(32)) * blocks) >> np.uint64(32)).astype(np.int64)
    key = (hashes & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    with np.errstate(over="ignore"):
        bit = (key[:, None] * _SALT[None, :]) >> np.uint32(27)
    return block, bit.astype(np.int64)


@dataclass(frozen=True, slots=True)
class BloomSpec:
    """Which columns (as the file names them) get bloom filters, at which false-positive
    rate."""

    columns: tuple[str, ...]
    fpp: float = DEFAULT_BLOOM_FPP


@dataclass(frozen=True, slots=True, eq=False)
class ColumnBloom:
    """The filter of one column of a blocklet. ``type`` is the hash domain of the column's
    type when the filter was built (:func:`bloom_domain`): values are looked up only in it."""

    column: str
    type: str
    filter: BloomFilter


def build_bloom_record(batch: pa.RecordBatch, columns: Sequence[str], fpp: float) -> bytes | None:
    """The record of one blocklet's filters of ``columns`` (those ``batch`` has)."""
    blooms = [
        ColumnBloom(
            name,
            bloom_domain(batch.schema.field(name).type),
            BloomFilter.of_hashes(bloom_hashes(batch.column(name)), fpp),
        )
        for name in columns
        if name in batch.schema.names
    ]
    return encode_bloom_record(blooms) if blooms else None


def encode_bloom_record(blooms: Sequence[ColumnBloom]) -> bytes:
    parts = [struct.pack("<I", len(blooms))]
    for b in blooms:
        name, type_ = b.column.encode("utf-8"), b.type.encode("utf-8")
        parts += [
            struct.pack("<H", len(name)),
            name,
            struct.pack("<H", len(type_)),
            type_,
            struct.pack("<I", b.filter.num_blocks),
            b.filter.words.astype("<u4", copy=False).tobytes(),
        ]
    body = b"".join(parts)
    return body + struct.pack("<I", crc32c(body))


@dataclass(frozen=True, slots=True)
class FilterAt:
    """Where one column's filter lies in a buffer of records: ``blocks`` blocks from byte
    ``offset``, built over hash domain ``domain``."""

    offset: int
    blocks: int
    domain: str


def locate_bloom_record(
    data: bytes | memoryview, offset: int, length: int, *, where: str
) -> Mapping[str, FilterAt]:
    """The filters of the record of ``length`` bytes at ``offset`` of ``data`` (a bloom file),
    by column, with their positions in ``data``; :class:`CorruptDataError` naming ``where``
    when the bytes are damaged (checksum, lengths)."""
    view = memoryview(data)
    if offset < 0 or length < 8 or offset + length > len(view):
        raise CorruptDataError(
            f"a bloom filter record of {length} bytes at {offset} does not fit the "
            f"{len(view)} bytes of its file",
            path=where,
        )
    end = offset + length - 4
    (stored,) = struct.unpack_from("<I", view, end)
    if crc32c(view[offset:end]) != stored:
        raise CorruptDataError("a bloom filter record fails its checksum", path=where)
    out: dict[str, FilterAt] = {}
    try:
        (count,) = struct.unpack_from("<I", view, offset)
        pos = offset + 4
        for _ in range(count):
            (n,) = struct.unpack_from("<H", view, pos)
            name = bytes(view[pos + 2 : pos + 2 + n]).decode("utf-8")
            pos += 2 + n
            (n,) = struct.unpack_from("<H", view, pos)
            domain = bytes(view[pos + 2 : pos + 2 + n]).decode("utf-8")
            pos += 2 + n
            (blocks,) = struct.unpack_from("<I", view, pos)
            pos += 4
            size = blocks * _BLOCK_BYTES
            if blocks < 1 or pos + size > end:
                raise ValueError(f"{blocks} blocks run past the record")
            out[name] = FilterAt(pos, blocks, domain)
            pos += size
        if pos != end:
            raise ValueError(f"{end - pos} bytes follow the last filter")
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise CorruptDataError(
            f"a bloom filter record does not decode: {exc}", path=where
        ) from None
    return out


def decode_bloom_record(data: bytes | memoryview, *, where: str) -> Mapping[str, ColumnBloom]:
    """The filters of a record, by column; :class:`CorruptDataError` naming ``where`` when the
    bytes are damaged (checksum, lengths)."""
    view = memoryview(data)
    if len(view) < 8:
        raise CorruptDataError(
            f"a bloom filter record of {len(view)} bytes is too short", path=where
        )
    out = {}
    for name, at in locate_bloom_record(view, 0, len(view), where=where).items():
        words = np.frombuffer(view, dtype="<u4", count=at.blocks * _WORDS, offset=at.offset)
        out[name] = ColumnBloom(name, at.domain, BloomFilter(words.astype(np.uint32, copy=False)))
    return out


def probe_located(
    data: npt.NDArray[np.uint8],
    offsets: npt.NDArray[np.int64],
    blocks: npt.NDArray[np.int64],
    hashes: U64,
) -> Bools:
    """For filters lying in the bytes ``data`` (filter j: ``blocks[j]`` blocks from byte
    ``offsets[j]``, as :func:`locate_bloom_record` finds them): True where filter j may hold
    at least one of ``hashes``. Reads only the one 32-byte block each value falls in."""
    n = len(offsets)
    out = np.zeros(n, dtype=np.bool_)
    hashes = np.unique(np.asarray(hashes, dtype=np.uint64))
    if n == 0 or len(hashes) == 0:
        return out
    per = max(1, _PROBE_PAIRS // len(hashes))
    span = np.arange(_BLOCK_BYTES, dtype=np.int64)
    for a in range(0, n, per):
        b = min(a + per, n)
        f = np.repeat(np.arange(a, b), len(hashes))
        h = np.tile(hashes, b - a)
        block, bit = _positions(h, blocks[f])
        first = offsets[f] + block * _BLOCK_BYTES
        w = data[first[:, None] + span].view("<u4")
        hit = np.all((w >> bit.astype(np.uint32)) & np.uint32(1) == 1, axis=1)
        out[a:b] = hit.reshape(b - a, len(hashes)).any(axis=1)
    return out
