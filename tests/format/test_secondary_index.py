"""Secondary index files (``format/secondary_index.py``, docs/FORMAT.md "Secondary index
files"): a lookup never misses a blocklet holding the value (ints, strings, floats with
``-0.0`` and NaN, nulls), rarely hits one that does not, the bytes round-trip, every
single-bit flip and every truncation of an encoded index is refused as damaged, ordinals
widen to 4 bytes past 65,536 blocklets, and an empty index is an index.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbonlite.errors import CorruptDataError
from carbonlite.format.bloom import bloom_domain, bloom_hashes
from carbonlite.format.layout import crc32c
from carbonlite.format.secondary_index import (
    SECONDARY_INDEX_MAGIC,
    SecondaryIndex,
    build_secondary_index,
    index_keys,
)

TYPES: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "int32": (pa.int32(), st.integers(-50, 50)),
    "string": (pa.string(), st.text(max_size=6)),
    "float64": (
        pa.float64(),
        st.one_of(st.sampled_from([-0.0, 0.0, math.nan, 1.5]), st.floats(allow_nan=True)),
    ),
}


def lookup_one(index: SecondaryIndex, value: Any, t: pa.DataType) -> set[int]:
    return set(index.lookup(bloom_hashes(pa.array([value], t))).tolist())


def matchable(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def same(a: SecondaryIndex, b: SecondaryIndex) -> None:
    assert (a.column, a.domain) == (b.column, b.domain)
    assert a.keys.tolist() == b.keys.tolist()
    assert a.ids.tolist() == b.ids.tolist()
    assert a.blocklets.tolist() == b.blocklets.tolist()


@st.composite
def blocklets(draw: st.DrawFn) -> tuple[str, list[list[Any]], list[int]]:
    kind = draw(st.sampled_from(sorted(TYPES)))
    values = TYPES[kind][1]
    pool = draw(st.lists(values, min_size=1, max_size=12))
    parts = draw(
        st.lists(
            st.lists(st.one_of(st.none(), st.sampled_from(pool)), max_size=10),
            min_size=1,
            max_size=8,
        )
    )
    gaps = draw(st.lists(st.integers(1, 10_000), min_size=len(parts), max_size=len(parts)))
    offsets = list(np.cumsum(gaps) + 8)
    return kind, parts, [int(o) for o in offsets]


@settings(max_examples=150, deadline=None)
@given(blocklets())
def test_lookup_never_misses_and_round_trips(case: tuple[str, list[list[Any]], list[int]]) -> None:
    kind, parts, offsets = case
    t = TYPES[kind][0]
    index = build_secondary_index("c", [pa.array(p, t) for p in parts], offsets)
    assert index.domain == bloom_domain(t)
    assert len(index.keys) == len(index.ids)
    assert np.all(index.keys[1:] >= index.keys[:-1])
    for ordinal, part in enumerate(parts):
        for v in part:
            if not matchable(v):
                continue
            hit = lookup_one(index, v, t)
            assert offsets[ordinal] in hit, (v, ordinal)
            assert hit <= set(offsets)
            if isinstance(v, float) and v == 0.0:  # -0.0 and 0.0 are one value to ==
                assert offsets[ordinal] in lookup_one(index, -v, t)
    # distinct (key, blocklet) pairs, no more
    pairs = {
        (int(k), ordinal)
        for ordinal, part in enumerate(parts)
        for k in index_keys(pa.array(part, t)).tolist()
    }
    assert len(index.keys) == len(pairs)
    # NaN and null are never indexed: looking them up hits nothing
    assert index.lookup(bloom_hashes(pa.array([None], t))).size == 0
    if kind == "float64":
        assert index.lookup(bloom_hashes(pa.array([math.nan], t))).size == 0
    data = index.encode()
    assert data[:8] == SECONDARY_INDEX_MAGIC
    back = SecondaryIndex.decode(data, where="x.sidx")
    same(index, back)
    assert back.encode() == data
    for ordinal, part in enumerate(parts):
        for v in filter(matchable, part):
            assert offsets[ordinal] in lookup_one(back, v, t)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 10**6), max_size=20), min_size=1, max_size=6),
    st.lists(st.integers(0, 10**6), min_size=1, max_size=30),
)
def test_lookup_of_many_values_is_the_union(parts: list[list[int]], wanted: list[int]) -> None:
    offsets = [100 * (i + 1) for i in range(len(parts))]
    index = build_secondary_index("c", [pa.array(p, pa.int64()) for p in parts], offsets)
    got = set(index.lookup(bloom_hashes(pa.array(wanted, pa.int64()))).tolist())
    expected = {offsets[i] for i, p in enumerate(parts) if set(p) & set(wanted)}
    assert expected <= got
    union = set()
    for v in wanted:
        union |= lookup_one(index, v, pa.int64())
    assert got == union


def test_absent_values_rarely_hit() -> None:
    """With n distinct values a missing one hits with probability about n / 2**32."""
    n = 20_000
    parts = [pa.array(range(i, n, 50), pa.int64()) for i in range(50)]
    index = build_secondary_index("c", parts, [10 * (i + 1) for i in range(50)])
    assert len(index.keys) == n
    absent = bloom_hashes(pa.array(range(n, 3 * n), pa.int64()))
    hits = sum(1 for h in absent if index.lookup(np.array([h], np.uint64)).size)
    assert hits <= 2
    strings = build_secondary_index("s", [pa.array([f"v{i}" for i in range(n)])], [8])
    misses = bloom_hashes(pa.array([f"w{i}" for i in range(n)]))
    assert sum(1 for h in misses if strings.lookup(np.array([h], np.uint64)).size) <= 2
    assert strings.lookup(misses[:0]).size == 0


def small_index() -> bytes:
    parts = [pa.array([1, 2, None]), pa.array([2, 3]), pa.array([7])]
    data = build_secondary_index("col", parts, [8, 60, 200]).encode()
    assert len(data) < 200
    return data


def test_every_bit_flip_is_refused() -> None:
    data = small_index()
    for i in range(len(data)):
        for bit in range(8):
            bad = data[:i] + bytes([data[i] ^ (1 << bit)]) + data[i + 1 :]
            with pytest.raises(CorruptDataError) as caught:
                SecondaryIndex.decode(bad, where="d.cblt.ab.col.sidx")
            assert caught.value.path == "d.cblt.ab.col.sidx"


def test_every_truncation_and_extension_is_refused() -> None:
    data = small_index()
    for n in range(len(data)):
        with pytest.raises(CorruptDataError):
            SecondaryIndex.decode(data[:n], where="t.sidx")
    with pytest.raises(CorruptDataError):
        SecondaryIndex.decode(data + b"\x00", where="t.sidx")


def reseal(body: bytes) -> bytes:
    """``body`` (everything before the checksum) with a valid checksum."""
    return body + struct.pack("<I", crc32c(body))


def rewrite(
    data: bytes, *, header: dict[str, Any] | None = None, tail: bytes | None = None
) -> bytes:
    (size,) = struct.unpack_from("<I", data, 8)
    old = json.loads(data[12 : 12 + size])
    new = json.dumps(header if header is not None else old).encode()
    rest = data[12 + size : -4] if tail is None else tail
    return reseal(SECONDARY_INDEX_MAGIC + struct.pack("<I", len(new)) + new + rest)


def test_checksummed_nonsense_is_refused() -> None:
    """Bytes that pass the checksum but do not describe an index."""
    data = small_index()
    (size,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[12 : 12 + size])
    n = header["entries"]
    for bad in [
        {**header, "id_width": 3},
        {**header, "entries": n + 1},
        {**header, "blocklets": header["blocklets"][:1]},  # an id names no blocklet
        {k: v for k, v in header.items() if k != "blocklets"},
        {k: v for k, v in header.items() if k != "entries"},
    ]:
        with pytest.raises(CorruptDataError):
            SecondaryIndex.decode(rewrite(data, header=bad), where="n.sidx")
    not_json = reseal(SECONDARY_INDEX_MAGIC + struct.pack("<I", 3) + b"{x}" + b"")
    with pytest.raises(CorruptDataError):
        SecondaryIndex.decode(not_json, where="n.sidx")
    with pytest.raises(CorruptDataError):
        SecondaryIndex.decode(reseal(SECONDARY_INDEX_MAGIC + b"\xff\xff\xff\xff"), where="n.sidx")


def test_unsorted_keys_are_refused() -> None:
    index = build_secondary_index("c", [pa.array([1, 2, 3, 4])], [8])
    data = index.encode()
    n = len(index.keys)
    (size,) = struct.unpack_from("<I", data, 8)
    pos = 12 + size
    keys = index.keys[::-1].astype("<u4").tobytes()
    bad = reseal(data[:pos] + keys + data[pos + 4 * n : -4])
    with pytest.raises(CorruptDataError):
        SecondaryIndex.decode(bad, where="u.sidx")


def test_id_width_widens_past_65536_blocklets() -> None:
    t = pa.int64()
    empty = pa.array([], t)
    many = 65_537
    # many tiny blocklets, cheaply: all empty but the first and the last two
    parts = [pa.array([5], t)] + [empty] * (many - 3) + [pa.array([6], t), pa.array([7, 5], t)]
    offsets = list(range(8, 8 + many))
    index = build_secondary_index("c", parts, offsets)
    data = index.encode()
    (size,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[12 : 12 + size])
    assert header["id_width"] == 4 and header["entries"] == 4
    assert len(data) == 12 + size + 4 * 4 + 4 * 4 + 4
    back = SecondaryIndex.decode(data, where="w.sidx")
    same(index, back)
    assert lookup_one(back, 5, t) == {offsets[0], offsets[-1]}
    assert lookup_one(back, 6, t) == {offsets[-2]}
    # exactly 65,536 blocklets still fit u16 ordinals (the last is 65,535)
    parts = parts[1:65_537]
    assert len(parts) == 65_536
    index = build_secondary_index("c", parts, offsets[:65_536])
    data = index.encode()
    (size,) = struct.unpack_from("<I", data, 8)
    assert json.loads(data[12 : 12 + size])["id_width"] == 2
    back = SecondaryIndex.decode(data, where="w.sidx")
    assert lookup_one(back, 5, t) == {offsets[65_535]}
    assert lookup_one(back, 6, t) == {offsets[65_534]}


@pytest.mark.parametrize(
    "parts",
    [[], [pa.array([], pa.string())], [pa.array([None, None], pa.int64())], [pa.array([math.nan])]],
)
def test_empty_index(parts: list[pa.Array]) -> None:
    offsets = [8 * (i + 1) for i in range(len(parts))]
    index = build_secondary_index("c", parts, offsets)
    assert len(index.keys) == len(index.ids) == 0
    data = index.encode()
    back = SecondaryIndex.decode(data, where="e.sidx")
    same(index, back)
    assert back.lookup(bloom_hashes(pa.array([1]))).size == 0
    assert back.lookup(np.zeros(0, np.uint64)).size == 0
    for n in range(len(data)):
        with pytest.raises(CorruptDataError):
            SecondaryIndex.decode(data[:n], where="e.sidx")
