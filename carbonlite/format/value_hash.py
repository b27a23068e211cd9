"""Hashing values column by column, vectorized: the per-value half of ``row_hash``.

Each supported Arrow type becomes a :class:`_Column` whose ``hash_into`` writes one uint64 per
row under a seed (nulls as ``NULL_HASH``, never the bytes under a null slot); the algorithm and
every constant are defined in ``carbonlite/format/row_hash.py``'s docstring. Everything is
numpy over Arrow buffers, in blocks of ``BLOCK_ROWS`` rows; nothing loops per row or value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.types as pat

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

_MASK = (1 << 64) - 1
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_GOLDEN = 0x9E3779B97F4A7C15


def _mix_int(x: int) -> int:
    """``mix`` on one Python integer."""
    x &= _MASK
    x ^= x >> 30
    x = (x * _M1) & _MASK
    x ^= x >> 27
    x = (x * _M2) & _MASK
    return x ^ (x >> 31)


NULL_HASH = 0xA0761D6478BD642F
_CANON_NAN = 0x7FF8000000000000
_TREE = 0x5452454548415348
ROW_SEED_A = _mix_int(0x524F5741)
ROW_SEED_B = _mix_int(0x524F5742)
_FANOUT = 32  # elements per chain before a sequence is hashed as a tree
BLOCK_ROWS = 1 << 15
"""Rows hashed at a time (bounds the working memory of the row loop)."""
_LONG_GROUP_BLOCKS = 1 << 18  # 256-byte blocks of long strings processed at a time
_VERSION_TAG = b"carbonlite.row_hash.v1\x00"

_U1 = np.uint64(_M1)
_U2 = np.uint64(_M2)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_ALL = np.uint64(_MASK)
_NULL = np.uint64(NULL_HASH)


def column_seed(j: int) -> int:
    """The seed of the j-th column of a table."""
    return _mix_int(_GOLDEN * (j + 1))


def _child_seed(seed: int, i: int) -> int:
    return _mix_int(seed ^ ((_GOLDEN * (i + 1)) & _MASK))


def _mix(x: U64, tmp: U64) -> None:
    """``mix`` in place on every element of ``x``; ``tmp`` is scratch at least as long."""
    t = tmp[: len(x)]
    np.right_shift(x, _S30, out=t)
    np.bitwise_xor(x, t, out=x)
    np.multiply(x, _U1, out=x)
    np.right_shift(x, _S27, out=t)
    np.bitwise_xor(x, t, out=x)
    np.multiply(x, _U2, out=x)
    np.right_shift(x, _S31, out=t)
    np.bitwise_xor(x, t, out=x)


def _tail_masks(nbytes: I64) -> U64:
    """For a word holding the last ``nbytes`` bytes of a value (mod 8; 0 means 8): its mask."""
    shift = (((8 - (nbytes & 7)) & 7) << 3).astype(np.uint64)
    return np.right_shift(_ALL, shift)


# -- validity ----------------------------------------------------------------------------------


class _Validity:
    """The validity bitmap of an array with nulls."""

    __slots__ = ("bits", "offset")

    def __init__(self, buf: pa.Buffer, offset: int) -> None:
        self.bits = np.frombuffer(buf, dtype=np.uint8)
        self.offset = offset

    def valid(self, a: int, b: int) -> Bools:
        s = self.offset + a
        e = self.offset + b
        unpacked = np.unpackbits(self.bits[s >> 3 : (e + 7) >> 3], bitorder="little")
        return unpacked[s & 7 : (s & 7) + (b - a)].view(np.bool_)


def _validity(arr: pa.Array) -> _Validity | None:
    if arr.null_count == 0:
        return None
    buf = arr.buffers()[0]
    if buf is None:  # pragma: no cover - every supported type with nulls has a bitmap
        raise TypeError(f"cannot hash column type {arr.type}: nulls without a validity bitmap")
    return _Validity(buf, arr.offset)


# -- prepared columns --------------------------------------------------------------------------


class _Column:
    """An array prepared for hashing row ranges."""

    validity: _Validity | None = None

    def hash_into(self, a: int, b: int, out: U64, tmp: U64) -> None:
        """Write the value hashes of rows ``[a, b)`` to ``out`` (``tmp``: scratch >= b - a)."""
        self._hash_values(a, b, out, tmp)
        if self.validity is not None:
            valid = self.validity.valid(a, b)
            np.copyto(out, _NULL, where=~valid)

    def _hash_values(self, a: int, b: int, out: U64, tmp: U64) -> None:
        raise NotImplementedError


class _NullColumn(_Column):
    def hash_into(self, a: int, b: int, out: U64, tmp: U64) -> None:
        out.fill(_NULL)


class _FixedColumn(_Column):
    """Integers, temporal types and floats: one 64-bit word per value."""

    def __init__(self, values: npt.NDArray[Any], kind: str, seed: int, validity: _Validity | None):
        self.values = values
        self.kind = kind  # "u64" (8-byte ints), "int", "uint", "f64", "float"
        self.seed = np.uint64(seed)
        self.validity = validity

    def _hash_values(self, a: int, b: int, out: U64, tmp: U64) -> None:
        v = self.values[a:b]
        if self.kind == "u64":
            np.bitwise_xor(v.view(np.uint64), self.seed, out=out)
        elif self.kind == "int":
            out.view(np.int64)[:] = v
            out ^= self.seed
        elif self.kind == "uint":
            out[:] = v
            out ^= self.seed
        else:
            if self.kind == "f64":
                nan = np.isnan(v)
                np.bitwise_xor(v.view(np.uint64), self.seed, out=out)
            else:
                f = out.view(np.float64)
                with np.errstate(invalid="ignore"):  # signalling NaNs
                    f[:] = v  # exact widening
                nan = np.isnan(f)
                out ^= self.seed
            if nan.any():
                np.copyto(out, np.uint64(_CANON_NAN) ^ self.seed, where=nan)
        _mix(out, tmp)


class _BoolColumn(_Column):
    def __init__(self, buf: pa.Buffer, offset: int, seed: int, validity: _Validity | None):
        self.bits = _Validity(buf, offset)
        self.seed = np.uint64(seed)
        self.validity = validity

    def _hash_values(self, a: int, b: int, out: U64, tmp: U64) -> None:
        out[:] = self.bits.valid(a, b)
        out ^= self.seed
        _mix(out, tmp)


def _chain_segments(
    h: U64,
    tmp: U64,
    load: Callable[[I64], U64],
    base: I64,
    count: I64,
    step: int,
    nbytes: I64 | None = None,
) -> None:
    """``h[i] = chain(h[i], x_i0, ..., x_i(count[i]-1))``, element k of segment i being
    ``load(base[i] + k * step)``; with ``nbytes`` the elements are words of byte strings of
    those lengths and the last word of each is masked to its bytes.

    Segments are ordered by decreasing length (a radix sort), so that the ones still running at
    step k are a prefix: the loop is over word positions, vectorized over segments.
    """
    n = len(h)
    if n == 0:
        return
    cmax = int(count.max())
    if cmax == 0:
        return
    if int(count.min()) == cmax:
        order = None
        hs, bs, nbs = h, base, nbytes
        running = [n] * cmax + [0]
    else:
        order = np.argsort((cmax - count).astype(np.uint8), kind="stable")
        hs, bs = h[order], base[order]
        nbs = None if nbytes is None else nbytes[order]
        per_length = np.bincount(count, minlength=cmax + 1)
        running = (n - np.cumsum(per_length)).tolist()
    for k in range(cmax):
        nk, ending = running[k], running[k + 1]
        w = load(bs[:nk] + k * step) if k else load(bs[:nk])
        if nbs is not None and ending < nk:
            w[ending:nk] &= _tail_masks(nbs[ending:nk])
        hk = hs[:nk]
        hk ^= w
        _mix(hk, tmp)
    if order is not None:
        h[order] = hs


def _blocks(first: I64, count: I64, size: int) -> tuple[I64, I64, I64, I64]:
    """Cut segments ``(first, count)`` into blocks of ``size`` elements.

    Returns the blocks' first elements and counts, and per segment its first block and
    number of blocks.
    """
    nblk = (count + (size - 1)) // size
    blk_first = np.cumsum(nblk) - nblk
    total = int(nblk.sum())
    j = np.arange(total, dtype=np.int64) - np.repeat(blk_first, nblk)
    bfirst = np.repeat(first, nblk) + size * j
    bcount = np.minimum(size, np.repeat(count, nblk) - size * j)
    return bfirst, bcount, blk_first, nblk


def _tree_top(h: U64, seed: int, seq: U64, first: I64, count: I64) -> None:
    """Finish ``seq(seed, n, ...)`` for segments ``(first, count)`` of the flat ``seq``; ``h``
    holds ``mix(seed ^ n)`` per segment. Segments longer than the fan-out are first reduced to
    their block hashes, one tree level at a time."""
    big = count > _FANOUT
    if not big.any():
        _chain_segments(h, np.empty_like(h), seq.__getitem__, first, count, 1)
        return
    small = np.flatnonzero(~big)
    if len(small):
        hs = h[small]
        _chain_segments(hs, np.empty_like(hs), seq.__getitem__, first[small], count[small], 1)
        h[small] = hs
    rows = np.flatnonzero(big)
    bfirst, bcount, blk_first, nblk = _blocks(first[rows], count[rows], _FANOUT)
    g = bcount.astype(np.uint64)
    g ^= np.uint64(seed ^ _TREE)
    tmp = np.empty_like(g)
    _mix(g, tmp)
    _chain_segments(g, tmp, seq.__getitem__, bfirst, bcount, 1)
    hb = h[rows]
    _tree_top(hb, seed, g, blk_first, nblk)
    h[rows] = hb


def _length_init(seed: int, n: I64, out: U64, tmp: U64) -> None:
    """``out = mix(seed ^ n)``: the start of ``seq(seed, n, ...)``."""
    np.bitwise_xor(
        np.ascontiguousarray(n, dtype=np.int64).view(np.uint64), np.uint64(seed), out=out
    )
    _mix(out, tmp)


class _BytesColumn(_Column):
    """Strings, binaries, fixed-size binaries and decimals: ``seq(s, L, words)``."""

    def __init__(
        self,
        data: pa.Buffer | None,
        offsets: npt.NDArray[Any] | None,
        width: int,
        offset: int,
        seed: int,
        validity: _Validity | None,
    ) -> None:
        raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.empty(0, np.uint8)
        if len(raw) < 64:  # small: pad so that every word load stays inside the buffer
            padded = np.zeros(len(raw) + 8, dtype=np.uint8)
            padded[: len(raw)] = raw
            raw = padded
        self.data = raw
        self.lim = len(raw) - 8  # the last position an 8-byte load may start at
        self.win: U64 = np.ndarray(
            shape=(len(raw) - 7,), dtype="<u8", buffer=raw, offset=0, strides=(1,)
        )
        self.offsets = offsets  # n + 1 entries for this array, or None for fixed width
        self.width = width
        self.offset = offset
        self.seed = seed
        self.validity = validity

    def load(self, pos: I64) -> U64:
        """The 8 bytes at each byte position, little-endian (zeros past the buffer's end)."""
        if len(pos) == 0:
            return np.empty(0, dtype=np.uint64)
        if int(pos.max()) <= self.lim:
            return self.win[pos]
        clipped = np.minimum(pos, self.lim)
        w = self.win[clipped]
        w >>= ((pos - clipped) << 3).astype(np.uint64)
        return w

    def _hash_values(self, a: int, b: int, out: U64, tmp: U64) -> None:
        n = b - a
        if n == 0:
            return
        if self.offsets is None:
            width = self.width
            base = (self.offset + a) * width
            self._uniform(out, tmp, base, width, n)
            return
        o = self.offsets[a : b + 1].astype(np.int64)
        starts = o[:-1]
        lengths = o[1:] - starts
        if self.validity is not None:
            lengths[~self.validity.valid(a, b)] = 0  # nulls: skip their bytes
        lmin, lmax = int(lengths.min()), int(lengths.max())
        if lmin == lmax:
            self._uniform(out, tmp, int(starts[0]), lmin, n)
            return
        _length_init(self.seed, lengths, out, tmp)
        if lmax <= 8 * _FANOUT:
            _chain_segments(out, tmp, self.load, starts, (lengths + 7) >> 3, 8, lengths)
            return
        long = lengths > 8 * _FANOUT
        short = np.flatnonzero(~long)
        hs = out[short]
        _chain_segments(
            hs, tmp, self.load, starts[short], (lengths[short] + 7) >> 3, 8, lengths[short]
        )
        out[short] = hs
        rows = np.flatnonzero(long)
        hl = out[rows]
        self._long(hl, starts[rows], lengths[rows])
        out[rows] = hl

    def _uniform(self, out: U64, tmp: U64, base: int, length: int, n: int) -> None:
        """Rows of one length ``length``, contiguous from byte ``base``: strided word loads."""
        out.fill(np.uint64(_mix_int(self.seed ^ length)))
        if length > 8 * _FANOUT:
            starts = base + length * np.arange(n, dtype=np.int64)
            self._long(out, starts, np.full(n, length, dtype=np.int64))
            return
        for k in range((length + 7) >> 3):
            pos = base + 8 * k
            rest = length - 8 * k
            if pos + (n - 1) * length + 8 <= len(self.data):
                w = np.ndarray(
                    shape=(n,), dtype="<u8", buffer=self.data, offset=pos, strides=(length,)
                )
                if rest >= 8:
                    out ^= w
                else:
                    t = tmp[:n]
                    np.bitwise_and(w, np.right_shift(_ALL, np.uint64(64 - 8 * rest)), out=t)
                    out ^= t
            else:  # the last word of the last row would reach past the buffer
                w = self.load(pos + length * np.arange(n, dtype=np.int64))
                if rest < 8:
                    w &= np.right_shift(_ALL, np.uint64(64 - 8 * rest))
                out ^= w
            _mix(out, tmp)

    def _long(self, h: U64, starts: I64, lengths: I64) -> None:
        """Values longer than 256 bytes: blocks of 256 bytes, then the tree (see ``seq``)."""
        tree = np.uint64(self.seed ^ _TREE)
        nblk = (lengths + 255) >> 8
        ends = np.cumsum(nblk)
        lo = 0
        while lo < len(h):
            # a group of rows with a bounded number of blocks (at least one row)
            limit = int(ends[lo] - nblk[lo]) + _LONG_GROUP_BLOCKS
            hi = max(lo + 1, int(np.searchsorted(ends, limit, side="right")))
            hi = min(hi, len(h))
            bstart, bbytes, blk_first, nb = _blocks(starts[lo:hi], lengths[lo:hi], 256)
            bwords = (bbytes + 7) >> 3
            g = bwords.astype(np.uint64)
            g ^= tree
            tmp = np.empty_like(g)
            _mix(g, tmp)
            _chain_segments(g, tmp, self.load, bstart, bwords, 8, bbytes)
            hv = h[lo:hi]
            hv[:] = lengths[lo:hi].astype(np.uint64)
            hv ^= np.uint64(self.seed)
            _mix(hv, np.empty_like(hv))
            _tree_top(hv, self.seed, g, blk_first, nb)
            lo = hi


class _DictionaryColumn(_Column):
    def __init__(self, arr: pa.DictionaryArray, seed: int) -> None:
        dictionary = arr.dictionary
        self.hashes = _hash_array(dictionary, seed)
        indices = arr.indices
        self.indices = _primitive_values(indices)
        self.validity = _validity(indices)

    def _hash_values(self, a: int, b: int, out: U64, tmp: U64) -> None:
        if len(self.hashes) == 0:
            out.fill(_NULL)  # only nulls can index an empty dictionary
            return
        np.take(self.hashes, self.indices[a:b], out=out, mode="clip")


class _StructColumn(_Column):
    def __init__(self, arr: pa.StructArray, seed: int) -> None:
        self.seed = np.uint64(seed)
        self.children: list[_Column] = []
        for i in range(arr.type.num_fields):
            child = arr.field(i)
            if len(child) != len(arr):  # pragma: no cover - older pyarrow: unsliced children
                child = child.slice(arr.offset, len(arr))
            self.children.append(_prepare(child, _child_seed(seed, i)))
        self.validity = _validity(arr)

    def _hash_values(self, a: int, b: int, out: U64, tmp: U64) -> None:
        out.fill(self.seed)
        if not self.children:
            return
        c = np.empty(b - a, dtype=np.uint64)
        for child in self.children:
            child.hash_into(a, b, c, tmp)
            out ^= c
            _mix(out, tmp)


class _ListColumn(_Column):
    def __init__(self, arr: pa.Array, seed: int) -> None:
        self.seed = seed
        t = arr.type
        if pat.is_fixed_size_list(t):
            self.size = t.list_size
            self.offsets: npt.NDArray[Any] | None = None
        else:
            self.size = 0
            self.offsets = np.asarray(arr.offsets)
        self.offset = arr.offset
        self.child = _prepare(arr.values, _child_seed(seed, 0))
        self.validity = _validity(arr)

    def _hash_values(self, a: int, b: int, out: U64, tmp: U64) -> None:
        if self.offsets is None:
            o = (self.offset + np.arange(a, b + 1, dtype=np.int64)) * self.size
        else:
            o = self.offsets[a : b + 1].astype(np.int64)
        lo, hi = int(o[0]), int(o[-1])
        elements = np.empty(hi - lo, dtype=np.uint64)
        child_tmp = np.empty(min(hi - lo, BLOCK_ROWS), dtype=np.uint64)
        for start in range(lo, hi, BLOCK_ROWS):
            stop = min(start + BLOCK_ROWS, hi)
            self.child.hash_into(start, stop, elements[start - lo : stop - lo], child_tmp)
        first = o[:-1] - lo
        count = o[1:] - o[:-1]
        if self.validity is not None:
            count[~self.validity.valid(a, b)] = 0
        nmax = int(count.max()) if len(count) else 0
        _length_init(self.seed, count, out, tmp)
        if nmax <= _FANOUT:
            _chain_segments(out, tmp, elements.__getitem__, first, count, 1)
            return
        _tree_top(out, self.seed, elements, first, count)


# -- dispatch ----------------------------------------------------------------------------------

_INT_KINDS: dict[pa.DataType, tuple[str, str]] = {
    pa.int8(): ("<i1", "int"),
    pa.int16(): ("<i2", "int"),
    pa.int32(): ("<i4", "int"),
    pa.int64(): ("<i8", "u64"),
    pa.uint8(): ("<u1", "uint"),
    pa.uint16(): ("<u2", "uint"),
    pa.uint32(): ("<u4", "uint"),
    pa.uint64(): ("<u8", "u64"),
    pa.float16(): ("<f2", "float"),
    pa.float32(): ("<f4", "float"),
    pa.float64(): ("<f8", "f64"),
    pa.date32(): ("<i4", "int"),
    pa.date64(): ("<i8", "u64"),
}


def _fixed_kind(t: pa.DataType) -> tuple[str, str] | None:
    kind = _INT_KINDS.get(t)
    if kind is not None:
        return kind
    if pat.is_time32(t):
        return ("<i4", "int")
    if pat.is_time64(t) or pat.is_timestamp(t) or pat.is_duration(t):
        return ("<i8", "u64")
    return None


def _primitive_values(arr: pa.Array) -> npt.NDArray[Any]:
    kind = _fixed_kind(arr.type)
    assert kind is not None
    dtype = np.dtype(kind[0])
    buf = arr.buffers()[1]
    return np.frombuffer(buf, dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)


def _prepare(arr: pa.Array, seed: int) -> _Column:
    t = arr.type
    if arr.null_count == len(arr) and _supported(t):
        return _NullColumn()  # also empty arrays, whose buffers may be missing
    kind = _fixed_kind(t)
    if kind is not None:
        return _FixedColumn(_primitive_values(arr), kind[1], seed, _validity(arr))
    if pat.is_boolean(t):
        return _BoolColumn(arr.buffers()[1], arr.offset, seed, _validity(arr))
    if pat.is_string(t) or pat.is_binary(t):
        offsets = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, 4 * arr.offset)
        return _BytesColumn(arr.buffers()[2], offsets, 0, 0, seed, _validity(arr))
    if pat.is_large_string(t) or pat.is_large_binary(t):
        offsets = np.frombuffer(arr.buffers()[1], np.int64, len(arr) + 1, 8 * arr.offset)
        return _BytesColumn(arr.buffers()[2], offsets, 0, 0, seed, _validity(arr))
    if pat.is_fixed_size_binary(t) or pat.is_decimal(t):
        return _BytesColumn(arr.buffers()[1], None, t.byte_width, arr.offset, seed, _validity(arr))
    if pat.is_string_view(t) or pat.is_binary_view(t):
        target = pa.large_string() if pat.is_string_view(t) else pa.large_binary()
        return _prepare(arr.cast(target), seed)
    if pat.is_dictionary(t):
        return _DictionaryColumn(arr, seed)
    if pat.is_null(t):
        return _NullColumn()
    if pat.is_struct(t):
        return _StructColumn(arr, seed)
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t) or pat.is_map(t):
        return _ListColumn(arr, seed)
    raise TypeError(f"cannot hash a column of type {t}")


def _supported(t: pa.DataType) -> bool:
    try:
        _type_description(t)
    except TypeError:
        return False
    return True


def _hash_array(arr: pa.Array, seed: int) -> U64:
    out = np.empty(len(arr), dtype=np.uint64)
    if len(arr) == 0:
        return out
    col = _prepare(arr, seed)
    tmp = np.empty(min(len(arr), BLOCK_ROWS), dtype=np.uint64)
    for a in range(0, len(arr), BLOCK_ROWS):
        b = min(a + BLOCK_ROWS, len(arr))
        col.hash_into(a, b, out[a:b], tmp)
    return out


# -- schema description ------------------------------------------------------------------------

_SIMPLE_NAMES = {
    pa.null(): "null",
    pa.bool_(): "bool",
    pa.int8(): "int8",
    pa.int16(): "int16",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.uint8(): "uint8",
    pa.uint16(): "uint16",
    pa.uint32(): "uint32",
    pa.uint64(): "uint64",
    pa.float16(): "float16",
    pa.float32(): "float32",
    pa.float64(): "float64",
    pa.date32(): "date32",
    pa.date64(): "date64",
    pa.string(): "string",
    pa.large_string(): "large_string",
    pa.binary(): "binary",
    pa.large_binary(): "large_binary",
    pa.string_view(): "string_view",
    pa.binary_view(): "binary_view",
}


def _type_description(t: pa.DataType) -> Any:
    """The JSON description of a type (see the module docstring)."""
    simple = _SIMPLE_NAMES.get(t)
    if simple is not None:
        return simple
    if pat.is_dictionary(t):
        return _type_description(t.value_type)
    if pat.is_time32(t):
        return ["time32", t.unit]
    if pat.is_time64(t):
        return ["time64", t.unit]
    if pat.is_timestamp(t):
        return ["timestamp", t.unit, t.tz]
    if pat.is_duration(t):
        return ["duration", t.unit]
    if pat.is_decimal(t):
        return [f"decimal{t.bit_width}", t.precision, t.scale]
    if pat.is_fixed_size_binary(t):
        return ["fixed_size_binary", t.byte_width]
    if pat.is_map(t):
        key, item = _type_description(t.key_type), _type_description(t.item_type)
        return ["map", key, item, bool(t.keys_sorted)]
    if pat.is_list(t):
        return ["list", _type_description(t.value_type)]
    if pat.is_large_list(t):
        return ["large_list", _type_description(t.value_type)]
    if pat.is_fixed_size_list(t):
        return ["fixed_size_list", _type_description(t.value_type), t.list_size]
    if pat.is_struct(t):
        return ["struct", [[f.name, _type_description(f.type)] for f in t]]
    raise TypeError(f"cannot hash a column of type {t}")
