"""Split-block bloom filters (format/bloom.py): no false negatives for any supported type (the
oracle is ``pyarrow.compute.equal``), hashes that agree with ``==`` across widths, string
flavours and encodings, the promised false-positive rate and size, the vectorized probe of
many filters at once, and records that round-trip and reject every damaged byte string."""

from __future__ import annotations

import itertools
import math
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from carbonlite.errors import CorruptDataError
from carbonlite.format.bloom import (
    BloomFilter,
    ColumnBloom,
    bloom_domain,
    bloom_hashes,
    bloom_supported,
    build_bloom_record,
    decode_bloom_record,
    distinct_estimate,
    encode_bloom_record,
    probe_located,
)
from carbonlite.format.layout import crc32c
from tests.format.strategies import INT_TYPES, values

SETTINGS = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SMALL = settings(SETTINGS, max_examples=12)

BLOOM_TYPES = [
    *INT_TYPES,
    pa.float32(),
    pa.float64(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.binary(4),
    pa.decimal128(9, 2),
    pa.decimal128(38, 10),
    pa.date32(),
    pa.timestamp("us"),
    pa.timestamp("ns", tz="UTC"),
    pa.dictionary(pa.int32(), pa.string()),
    pa.dictionary(pa.int8(), pa.string()),
]
SPECIAL_FLOATS = [0.0, -0.0, math.nan, math.inf, -math.inf, 1.5, -1.5]
ALL_ONES = np.uint32(0xFFFFFFFF)

# -- helpers ------------------------------------------------------------------------------------


def value_strategy(t: pa.DataType) -> st.SearchStrategy[Any]:
    """Python values of type ``t`` (temporal values as their stored integers)."""
    if pat.is_dictionary(t):
        return value_strategy(t.value_type)
    if pat.is_floating(t):
        return st.one_of(st.floats(width=t.bit_width), st.sampled_from(SPECIAL_FLOATS))
    if pat.is_fixed_size_binary(t):
        return st.binary(min_size=t.byte_width, max_size=t.byte_width)
    return values(t)


def to_array(column: list[Any], t: pa.DataType) -> pa.Array:
    if pat.is_date32(t):
        return pa.array(column, pa.int32()).view(t)
    if pat.is_timestamp(t):
        return pa.array(column, pa.int64()).view(t)
    return pa.array(column, type=t)


def plain(array: pa.Array) -> pa.Array:
    return array.dictionary_decode() if pat.is_dictionary(array.type) else array


def equals_some(array: pa.Array, probe: pa.Array) -> bool:
    """Whether ``probe[0] == v`` (pyarrow.compute.equal) for some value ``v`` of ``array``."""
    return bool(pc.any(pc.equal(plain(array), plain(probe)[0])).as_py())


def lay_end_to_end(
    filters: list[BloomFilter], gaps: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``data``, ``offsets``, ``blocks`` for :func:`probe_located`: filters laid end to end in
    bytes; ``gaps[j]`` blocks of all-ones words go before filter j, so that a probe reading the
    wrong bytes answers True."""
    parts: list[np.ndarray] = []
    starts, blocks = [], []
    pos = 0
    for f, gap in zip(filters, gaps, strict=True):
        parts.append(np.full(gap * 8, ALL_ONES, dtype=np.uint32))
        pos += gap * 8
        starts.append(pos)
        blocks.append(f.num_blocks)
        parts.append(f.words)
        pos += len(f.words)
    parts.append(np.full(8, ALL_ONES, dtype=np.uint32))
    return (
        np.concatenate(parts).astype("<u4").view(np.uint8),
        np.array(starts, dtype=np.int64) * 4,
        np.array(blocks, dtype=np.int64),
    )


def distinct(vs: list[Any]) -> list[Any]:
    """``vs`` without repeats (by repr, so that -0.0 and 0.0 stay apart and NaN stays once)."""
    seen: dict[str, Any] = {}
    for v in vs:
        seen.setdefault(repr(v), v)
    return list(seen.values())


def random_hashes(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**64, size=n, dtype=np.uint64)


# -- 1. no false negatives ----------------------------------------------------------------------


@pytest.mark.parametrize("t", BLOOM_TYPES, ids=str)
@SMALL
@given(data=st.data())
def test_no_false_negatives(t: pa.DataType, data: st.DataObject) -> None:
    assert bloom_supported(t)
    vals = value_strategy(t)
    pool = data.draw(st.lists(vals, min_size=1, max_size=5), label="pool")
    element = st.one_of(st.none(), st.sampled_from(pool), vals)
    columns = data.draw(
        st.lists(st.lists(element, max_size=20), min_size=1, max_size=3), label="columns"
    )
    fpp = data.draw(st.sampled_from([0.5, 0.1, 0.01]), label="fpp")
    gaps = data.draw(st.lists(st.integers(0, 2), min_size=len(columns), max_size=len(columns)))
    extra = data.draw(st.lists(vals, max_size=3), label="extra")

    arrays = [to_array(c, t) for c in columns]
    filters = [BloomFilter.of_hashes(bloom_hashes(a), fpp) for a in arrays]
    data, offsets, blocks = lay_end_to_end(filters, gaps)

    # every value of a column tests positive in its filter, all at once
    for a, f in zip(arrays, filters, strict=True):
        assert f.might_contain(bloom_hashes(a)).all()

    probes = [*pool, *(v for c in columns for v in c), *extra, None]
    if pat.is_floating(t):
        probes += [-v for v in probes if v is not None]  # 0.0 == -0.0
    for p in distinct(probes):
        probe = to_array([p], t)
        h = bloom_hashes(probe)
        anywhere = probe_located(data, offsets, blocks, h)
        assert anywhere.shape == (len(filters),)
        for j, (a, f) in enumerate(zip(arrays, filters, strict=True)):
            answer = f.might_contain(h)
            assert anywhere[j] == bool(answer.any()), (p, j)
            if equals_some(a, probe):
                assert len(h) == 1 and answer.all(), (p, j)
                assert anywhere[j], (p, j)


@SETTINGS
@given(
    st.lists(st.one_of(st.none(), st.integers(-128, 127)), max_size=30),
    st.sampled_from([pa.int16(), pa.int32(), pa.int64()]),
)
def test_no_false_negatives_across_int_widths(column: list[int | None], wide: pa.DataType) -> None:
    """A filter built over an int8 column answers for the same values looked up as a wider
    int (``==`` compares the numbers, not the widths)."""
    f = BloomFilter.of_hashes(bloom_hashes(pa.array(column, pa.int8())), 0.1)
    for v in column:
        if v is not None:
            assert f.might_contain(bloom_hashes(pa.array([v], wide))).all()


# -- bloom_supported ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "t",
    [
        *BLOOM_TYPES,
        pa.float16(),
        pa.large_binary(),
        pa.string_view(),
        pa.binary_view(),
        pa.date64(),
        pa.time32("ms"),
        pa.time64("ns"),
        pa.timestamp("s", tz="Europe/Paris"),
        pa.duration("us"),
        pa.decimal256(50, 3),
        pa.dictionary(pa.int16(), pa.int64()),
    ],
    ids=str,
)
def test_supported_types(t: pa.DataType) -> None:
    assert bloom_supported(t)


@pytest.mark.parametrize(
    "t",
    [
        pa.bool_(),
        pa.null(),
        pa.list_(pa.int64()),
        pa.large_list(pa.string()),
        pa.struct([pa.field("a", pa.int32())]),
        pa.map_(pa.string(), pa.int32()),
        pa.dictionary(pa.int32(), pa.bool_()),
        pa.dictionary(pa.int32(), pa.string_view()),  # pyarrow cannot decode it to hash it
        pa.month_day_nano_interval(),
    ],
    ids=str,
)
def test_unsupported_types(t: pa.DataType) -> None:
    assert not bloom_supported(t)


SUPPORTED_SAMPLES = [
    pytest.param(pa.array([1, None, 3], pa.int16()), id="int16"),
    pytest.param(pa.array([1.5, None, -0.0], pa.float32()), id="float32"),
    pytest.param(pa.array(["a", "b"], pa.string_view()), id="string_view"),
    pytest.param(pa.array([b"a", b""], pa.binary_view()), id="binary_view"),
    pytest.param(pa.array(["a", None], pa.string_view()), id="string_view-null"),
    pytest.param(pa.array([b"a", None], pa.binary_view()), id="binary_view-null"),
    pytest.param(pa.array([b"a", None], pa.large_binary()), id="large_binary"),
    pytest.param(pa.array([1, None], pa.int64()).cast(pa.duration("ms")), id="duration"),
    pytest.param(pa.array([1, None], pa.int32()).cast(pa.time32("s")), id="time32"),
    pytest.param(pa.array([1, None], pa.int64()).cast(pa.date64()), id="date64"),
    pytest.param(pa.array(np.array([1.5, -0.0, np.nan], dtype=np.float16)), id="float16"),
]


@pytest.mark.parametrize("array", SUPPORTED_SAMPLES)
def test_every_supported_type_can_be_hashed_and_found(array: pa.Array) -> None:
    """A column that bloom_supported accepts gets a filter holding its (non-null) values."""
    assert bloom_supported(array.type)
    h = bloom_hashes(array)
    f = BloomFilter.of_hashes(h, 0.01)
    assert f.might_contain(h).all()
    for i in range(len(array)):
        probe = array.slice(i, 1)
        if probe.null_count == 0 and not (
            pat.is_floating(array.type) and math.isnan(probe[0].as_py())
        ):
            assert f.might_contain(bloom_hashes(probe)).all()


# -- 2. equivalences ----------------------------------------------------------------------------


@SETTINGS
@given(st.lists(st.one_of(st.none(), st.integers(0, 127)), max_size=40))
def test_hashes_equal_across_int_widths(column: list[int | None]) -> None:
    expected = bloom_hashes(pa.array(column, pa.int64()))
    assert len(expected) == sum(v is not None for v in column)
    for t in INT_TYPES:
        np.testing.assert_array_equal(bloom_hashes(pa.array(column, t)), expected, err_msg=str(t))


@SETTINGS
@given(st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)), max_size=40))
def test_hashes_equal_int32_int64(column: list[int | None]) -> None:
    np.testing.assert_array_equal(
        bloom_hashes(pa.array(column, pa.int32())), bloom_hashes(pa.array(column, pa.int64()))
    )


@SETTINGS
@given(
    st.lists(st.one_of(st.none(), st.sampled_from(["", "a", "é", "\U0010ffff"]), st.text())),
    st.sampled_from([pa.int8(), pa.int16(), pa.int32(), pa.int64()]),
)
def test_hashes_equal_across_string_flavours(
    column: list[str | None], index_type: pa.DataType
) -> None:
    expected = bloom_hashes(pa.array(column, pa.string()))
    assert len(expected) == sum(v is not None for v in column)
    variants = {
        "large_string": pa.array(column, pa.large_string()),
        "dictionary_encode": pa.array(column, pa.string()).dictionary_encode(),
        "dictionary type": pa.array(column, pa.dictionary(index_type, pa.string())),
        "large dictionary": pa.array(column, pa.dictionary(index_type, pa.large_string())),
        "chunked": pa.chunked_array(
            [pa.array(column[:3], pa.string()), pa.array(column[3:], pa.string())]
        ),
    }
    for name, variant in variants.items():
        np.testing.assert_array_equal(bloom_hashes(variant), expected, err_msg=name)


def test_hashes_dictionary_with_unused_and_repeated_entries() -> None:
    dictionary = pa.array(["x", "y", "x", None, "z"])
    indices = pa.array([2, None, 0, 1, 3, 0], pa.int32())
    array = pa.DictionaryArray.from_arrays(indices, dictionary)
    np.testing.assert_array_equal(bloom_hashes(array), bloom_hashes(pa.array(["x", "x", "y", "x"])))


@pytest.mark.parametrize("t", [pa.float32(), pa.float64()], ids=str)
def test_negative_zero_hashes_as_zero(t: pa.DataType) -> None:
    np.testing.assert_array_equal(
        bloom_hashes(pa.array([-0.0, 1.0, -0.0], t)), bloom_hashes(pa.array([0.0, 1.0, 0.0], t))
    )
    dictionary = pa.array([-0.0, 2.0], t).dictionary_encode()
    np.testing.assert_array_equal(bloom_hashes(dictionary), bloom_hashes(pa.array([0.0, 2.0], t)))


@pytest.mark.parametrize("t", [pa.float32(), pa.float64()], ids=str)
@SETTINGS
@given(data=st.data())
def test_nulls_and_nans_dropped(t: pa.DataType, data: st.DataObject) -> None:
    column = data.draw(
        st.lists(st.one_of(st.none(), st.sampled_from(SPECIAL_FLOATS), st.floats(width=32)))
    )
    kept = [v for v in column if v is not None and not math.isnan(v)]
    canonical = [0.0 if v == 0 else v for v in kept]
    h = bloom_hashes(pa.array(column, t))
    assert len(h) == len(kept)
    np.testing.assert_array_equal(h, bloom_hashes(pa.array(canonical, t)))


@pytest.mark.parametrize(
    "array",
    [
        pa.array([None, None], pa.int64()),
        pa.array([None, math.nan, math.nan], pa.float64()),
        pa.array([], pa.string()),
        pa.array([None], pa.dictionary(pa.int32(), pa.string())),
        pa.chunked_array([], pa.int32()),
    ],
    ids=["nulls", "nans", "empty", "null dictionary", "no chunks"],
)
def test_nothing_to_hash(array: pa.Array) -> None:
    h = bloom_hashes(array)
    assert h.dtype == np.uint64 and len(h) == 0
    f = BloomFilter.of_hashes(h, 0.01)
    assert f.num_blocks == 1
    assert not f.words.any()
    assert f.might_contain(h).shape == (0,)


def test_null_and_nan_probes_never_match() -> None:
    f = BloomFilter.of_hashes(bloom_hashes(pa.array([1.0, math.nan, None])), 0.01)
    assert f.might_contain(bloom_hashes(pa.array([None, math.nan], pa.float64()))).shape == (0,)


# -- 3. false-positive rate and size ------------------------------------------------------------


def _fpp_case(fpp: float) -> tuple[BloomFilter, float]:
    rng = np.random.default_rng(20240611)
    ints = rng.choice(2**62, size=220_000, replace=False).astype(np.int64)
    inserted, absent = ints[:20_000], ints[20_000:]
    f = BloomFilter.of_hashes(bloom_hashes(pa.array(inserted)), fpp)
    assert f.might_contain(bloom_hashes(pa.array(inserted))).all()
    return f, float(f.might_contain(bloom_hashes(pa.array(absent))).mean())


def test_false_positive_rate_one_percent() -> None:
    f, rate = _fpp_case(0.01)
    assert 0.005 <= rate <= 0.015, rate
    assert 1.2 <= f.nbytes / 20_000 <= 1.5, f.nbytes


def test_false_positive_rate_one_per_mille() -> None:
    _, rate = _fpp_case(0.001)
    assert rate < 0.002, rate


def test_false_positive_rate_consecutive_ints() -> None:
    f = BloomFilter.of_hashes(bloom_hashes(pa.array(np.arange(20_000))), 0.01)
    rate = float(f.might_contain(bloom_hashes(pa.array(np.arange(20_000, 220_000)))).mean())
    assert 0.005 <= rate <= 0.015, rate


def test_size_follows_distinct_count_not_length() -> None:
    h = random_hashes(7, 1000)
    repeated = np.concatenate([h] * 10)
    wanted = BloomFilter.blocks_for(1000, 0.01)
    assert abs(BloomFilter.of_hashes(repeated, 0.01).num_blocks - wanted) <= 0.05 * wanted
    assert abs(BloomFilter.of_hashes(h, 0.01).num_blocks - wanted) <= 0.05 * wanted
    assert BloomFilter.of_hashes(repeated, 0.01).might_contain(h).all()


@pytest.mark.parametrize("distinct", [0, 1, 2, 10, 100, 1_000, 65_536, 200_000])
@pytest.mark.parametrize("copies", [1, 3])
def test_the_distinct_estimate_is_close(distinct: int, copies: int) -> None:
    """Linear counting sizes the filters: within 5% of the distinct count (never above the
    number of hashes), whatever the repetition."""
    h = np.concatenate([random_hashes(distinct + copies, distinct)] * copies)
    rng = np.random.default_rng(distinct)
    got = distinct_estimate(rng.permutation(h))
    assert got <= len(h)
    assert abs(got - distinct) <= max(1, 0.05 * distinct), (got, distinct)
    f = BloomFilter.of_hashes(h, 0.01)
    assert f.words.dtype == np.uint32
    assert len(f.words) == 8 * f.num_blocks
    assert f.nbytes == 32 * f.num_blocks


# -- 4. blocks_for ------------------------------------------------------------------------------


@SETTINGS
@given(
    st.integers(0, 10**7),
    st.integers(0, 10**7),
    st.sampled_from([0.5, 0.1, 0.05, 0.01, 0.001, 1e-6]),
)
def test_blocks_for_monotone(a: int, b: int, fpp: float) -> None:
    lo, hi = sorted((a, b))
    assert 1 <= BloomFilter.blocks_for(lo, fpp) <= BloomFilter.blocks_for(hi, fpp)


@pytest.mark.parametrize("fpp", [0.5, 0.01, 1e-9])
def test_blocks_for_small_counts(fpp: float) -> None:
    counts = [BloomFilter.blocks_for(n, fpp) for n in range(0, 2000)]
    assert counts[0] == counts[1] >= 1
    assert all(x <= y for x, y in itertools.pairwise(counts))


def test_blocks_for_grows_as_fpp_shrinks() -> None:
    sizes = [BloomFilter.blocks_for(100_000, fpp) for fpp in (0.5, 0.1, 0.01, 0.001, 1e-4)]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)


@pytest.mark.parametrize("fpp", [0.0, -0.01, -1.0, 1.0, 1.5, math.inf, math.nan])
def test_blocks_for_rejects_bad_fpp(fpp: float) -> None:
    with pytest.raises(ValueError):
        BloomFilter.blocks_for(100, fpp)
    with pytest.raises(ValueError):
        BloomFilter.of_hashes(random_hashes(1, 10), fpp)


# -- 5. records ---------------------------------------------------------------------------------


def _blooms(seed: int, names: list[str], types: list[str]) -> list[ColumnBloom]:
    rng = np.random.default_rng(seed)
    return [
        ColumnBloom(
            name,
            type_,
            BloomFilter.of_hashes(
                random_hashes(seed + i, int(rng.integers(0, 300))), float(rng.uniform(0.01, 0.5))
            ),
        )
        for i, (name, type_) in enumerate(zip(names, types, strict=True))
    ]


def _assert_same(decoded: dict[str, ColumnBloom] | Any, blooms: list[ColumnBloom]) -> None:
    assert list(decoded) == [b.column for b in blooms]
    for b in blooms:
        d = decoded[b.column]
        assert (d.column, d.type) == (b.column, b.type)
        assert d.filter.num_blocks == b.filter.num_blocks
        np.testing.assert_array_equal(d.filter.words, b.filter.words)


@SETTINGS
@given(
    st.lists(st.text(min_size=0, max_size=12), unique=True, max_size=5),
    st.data(),
)
def test_record_round_trip(names: list[str], data: st.DataObject) -> None:
    types = [
        data.draw(st.one_of(st.sampled_from([str(t) for t in BLOOM_TYPES]), st.text(max_size=30)))
        for _ in names
    ]
    seed = data.draw(st.integers(0, 2**32))
    blooms = _blooms(seed, names, types)
    record = encode_bloom_record(blooms)
    _assert_same(decode_bloom_record(record, where="t.bloom"), blooms)
    _assert_same(decode_bloom_record(memoryview(record), where="t.bloom"), blooms)
    _assert_same(decode_bloom_record(bytearray(record), where="t.bloom"), blooms)


def test_record_round_trip_unicode_names() -> None:
    names = ["id", "prénom", "名前", "emoji 🎉", "", "\U0010ffff"]
    types = [
        "int64",
        "string",
        "large_string",
        "dictionary<values=string, indices=int32, ordered=0>",
        "decimal128(9, 2)",
        "timestamp[ns, tz=UTC]",
    ]
    blooms = _blooms(3, names, types)
    decoded = decode_bloom_record(encode_bloom_record(blooms), where="x")
    _assert_same(decoded, blooms)
    for b in blooms:
        # the decoded filters answer like the originals
        h = random_hashes(99, 500)
        np.testing.assert_array_equal(
            decoded[b.column].filter.might_contain(h), b.filter.might_contain(h)
        )


def test_record_layout() -> None:
    f = BloomFilter.of_hashes(random_hashes(5, 10), 0.01)
    record = encode_bloom_record([ColumnBloom("é", "int8", f)])
    body = (
        struct.pack("<I", 1)
        + struct.pack("<H", 2)
        + "é".encode()
        + struct.pack("<H", 4)
        + b"int8"
        + struct.pack("<I", f.num_blocks)
        + f.words.astype("<u4").tobytes()
    )
    assert record == body + struct.pack("<I", crc32c(body))


def test_empty_record() -> None:
    record = encode_bloom_record([])
    assert len(record) == 8
    assert decode_bloom_record(record, where="x") == {}


def _small_record() -> bytes:
    return encode_bloom_record(
        [
            ColumnBloom("a", "int64", BloomFilter.of_hashes(random_hashes(1, 3), 0.5)),
            ColumnBloom("bé", "string", BloomFilter.of_hashes(random_hashes(2, 3), 0.5)),
        ]
    )


def _large_record() -> bytes:
    return encode_bloom_record(
        _blooms(11, ["x", "y", "zz", "ü"], ["int32", "string", "double", "binary"])
    )


def _assert_corrupt(data: bytes, where: str = "blk/00001.bloom") -> None:
    with pytest.raises(CorruptDataError) as info:
        decode_bloom_record(data, where=where)
    assert info.value.path == where
    assert where in str(info.value)


def _flip(record: bytes, bit: int) -> bytes:
    damaged = bytearray(record)
    damaged[bit // 8] ^= 1 << (bit % 8)
    return bytes(damaged)


def test_every_bit_flip_of_a_small_record_is_caught() -> None:
    record = _small_record()
    assert len(record) < 120
    for bit in range(len(record) * 8):
        _assert_corrupt(_flip(record, bit))


def test_every_bit_flip_of_the_empty_record_is_caught() -> None:
    record = encode_bloom_record([])
    for bit in range(len(record) * 8):
        _assert_corrupt(_flip(record, bit))


def test_sampled_bit_flips_of_a_large_record_are_caught() -> None:
    record = _large_record()
    rng = np.random.default_rng(17)
    bits = set(rng.choice(len(record) * 8, size=1500, replace=False).tolist())
    # the headers, the first and last words of the blocks, and the checksum
    bits |= set(range(0, 200)) | set(range(len(record) * 8 - 64, len(record) * 8))
    for bit in sorted(bits):
        _assert_corrupt(_flip(record, bit))


@pytest.mark.parametrize("make", [_small_record, _large_record, lambda: encode_bloom_record([])])
def test_every_truncation_is_caught(make: Any) -> None:
    record = make()
    for n in range(len(record)):
        _assert_corrupt(record[:n])
        _assert_corrupt(memoryview(record)[:n])


def test_appended_bytes_are_caught() -> None:
    record = _small_record()
    for extra in (b"\x00", b"\x00" * 4, b"\xff" * 32):
        _assert_corrupt(record + extra)


def _resealed(body: bytes) -> bytes:
    return body + struct.pack("<I", crc32c(body))


def _body(
    count: int = 1,
    name: bytes = b"a",
    name_len: int | None = None,
    type_: bytes = b"int64",
    blocks: int = 1,
    words: bytes = b"\x00" * 32,
    tail: bytes = b"",
) -> bytes:
    return (
        struct.pack("<I", count)
        + struct.pack("<H", len(name) if name_len is None else name_len)
        + name
        + struct.pack("<H", len(type_))
        + type_
        + struct.pack("<I", blocks)
        + words
        + tail
    )


def test_well_formed_hand_made_record_decodes() -> None:
    decoded = decode_bloom_record(_resealed(_body()), where="x")
    assert list(decoded) == ["a"]
    assert decoded["a"].type == "int64"
    assert decoded["a"].filter.num_blocks == 1


@pytest.mark.parametrize(
    "body",
    [
        _body(count=2),
        _body(count=2**32 - 1),
        _body(count=0),
        _body(blocks=0, words=b""),
        _body(blocks=2),
        _body(blocks=2**32 - 1),
        _body(words=b"\x00" * 31),
        _body(tail=b"\x00"),
        _body(name=b"\xff\xfe"),
        _body(type_=b"\xc3"),
        _body(name_len=200),
        _body(name_len=0),
        b"",
        b"\x00\x00\x00",
    ],
    ids=[
        "count too large",
        "huge count",
        "count too small",
        "zero blocks",
        "blocks past the end",
        "huge block count",
        "short block",
        "trailing byte",
        "name not UTF-8",
        "type not UTF-8",
        "name past the end",
        "name too short",
        "empty body",
        "three-byte body",
    ],
)
def test_bad_structure_under_a_good_checksum_is_caught(body: bytes) -> None:
    _assert_corrupt(_resealed(body))


# -- 6. build_bloom_record ----------------------------------------------------------------------


def _batch() -> pa.RecordBatch:
    return pa.record_batch(
        {
            "id": pa.array([1, 2, None, 4], pa.int64()),
            "name": pa.array(["ann", None, "bob", "émile"], pa.large_string()),
            "score": pa.array([0.5, -0.0, math.nan, None], pa.float64()),
            "tag": pa.array(["x", "y", "x", None], pa.dictionary(pa.int8(), pa.string())),
            "flag": pa.array([True, False, None, True]),
        }
    )


def test_build_record_of_listed_columns() -> None:
    batch = _batch()
    record = build_bloom_record(batch, ["score", "missing", "id", "tag"], 0.01)
    assert record is not None
    decoded = decode_bloom_record(record, where="x")
    assert list(decoded) == ["score", "id", "tag"]
    for name, bloom in decoded.items():
        assert bloom.column == name
        assert bloom.type == bloom_domain(batch.schema.field(name).type)
        column = batch.column(name)
        assert bloom.filter.might_contain(bloom_hashes(column)).all()
        for i in range(len(column)):
            probe = column.slice(i, 1)
            h = bloom_hashes(probe)
            assert bloom.filter.might_contain(h).all()
    score = decoded["score"].filter
    assert score.might_contain(bloom_hashes(pa.array([0.0, -0.0, 0.5]))).all()
    assert decoded["id"].filter.might_contain(bloom_hashes(pa.array([4], pa.int8()))).all()
    assert decoded["tag"].filter.might_contain(bloom_hashes(pa.array(["x", "y"]))).all()


def test_build_record_same_as_encoding_the_filters() -> None:
    batch = _batch()
    expected = encode_bloom_record(
        [
            ColumnBloom(
                n,
                bloom_domain(batch.schema.field(n).type),
                BloomFilter.of_hashes(bloom_hashes(batch.column(n)), 0.05),
            )
            for n in ["name", "id"]
        ]
    )
    assert build_bloom_record(batch, ["name", "id"], 0.05) == expected


def test_build_record_none_without_listed_columns() -> None:
    batch = _batch()
    assert build_bloom_record(batch, ["nope", "Id"], 0.01) is None
    assert build_bloom_record(batch, [], 0.01) is None


def test_build_record_of_empty_batch() -> None:
    batch = _batch().slice(0, 0)
    record = build_bloom_record(batch, ["id", "name"], 0.01)
    assert record is not None
    decoded = decode_bloom_record(record, where="x")
    assert [b.filter.num_blocks for b in decoded.values()] == [1, 1]
    assert not any(b.filter.words.any() for b in decoded.values())


@SMALL
@given(data=st.data())
def test_build_record_no_false_negatives(data: st.DataObject) -> None:
    ts = data.draw(st.lists(st.sampled_from(BLOOM_TYPES), min_size=1, max_size=4))
    n = data.draw(st.integers(0, 25))
    columns = {
        f"c{i}": to_array(
            data.draw(st.lists(st.one_of(st.none(), value_strategy(t)), min_size=n, max_size=n)),
            t,
        )
        for i, t in enumerate(ts)
    }
    batch = pa.record_batch(columns)
    wanted = data.draw(st.lists(st.sampled_from([*columns, "absent"]), unique=True))
    record = build_bloom_record(batch, wanted, data.draw(st.sampled_from([0.5, 0.01])))
    present = [c for c in wanted if c in columns]
    if not present:
        assert record is None
        return
    assert record is not None
    decoded = decode_bloom_record(record, where="x")
    assert list(decoded) == present
    for name in present:
        assert decoded[name].filter.might_contain(bloom_hashes(columns[name])).all()


# -- 7. probe_located ---------------------------------------------------------------------------


def test_probe_located_no_filters() -> None:
    out = probe_located(
        np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int64), random_hashes(1, 5)
    )
    assert out.dtype == np.bool_ and out.shape == (0,)


def test_probe_located_no_hashes() -> None:
    filters = [BloomFilter.of_hashes(random_hashes(i, 50), 0.5) for i in range(4)]
    data, offsets, blocks = lay_end_to_end(filters, [0, 1, 0, 2])
    for empty in (np.zeros(0, np.uint64), bloom_hashes(pa.array([None], pa.int64()))):
        out = probe_located(data, offsets, blocks, empty)
        assert out.dtype == np.bool_
        np.testing.assert_array_equal(out, np.zeros(4, np.bool_))


def test_probe_located_all_ones_filter_always_answers() -> None:
    full = BloomFilter(np.full(16, ALL_ONES, dtype=np.uint32))
    empty = BloomFilter(np.zeros(24, np.uint32))
    data, offsets, blocks = lay_end_to_end([empty, full, empty], [0, 0, 0])
    np.testing.assert_array_equal(
        probe_located(data, offsets, blocks, random_hashes(3, 7)), [False, True, False]
    )


def _many_filters(count: int, fpp: float) -> tuple[list[BloomFilter], list[np.ndarray]]:
    rng = np.random.default_rng(count)
    contents = [random_hashes(1000 + j, int(rng.integers(0, 400))) for j in range(count)]
    return [BloomFilter.of_hashes(c, fpp) for c in contents], contents


def _probe_case(
    n_filters: int, n_hashes: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[BloomFilter], np.ndarray]:
    """Filters at fpp 1e-7 and ``n_hashes`` distinct hashes: mostly values no filter holds,
    plus one value of each filter in a random third of them (the holders)."""
    filters, contents = _many_filters(n_filters, 1e-7)
    rng = np.random.default_rng(seed)
    holders = (rng.random(n_filters) < 1 / 3) & np.array([len(c) > 0 for c in contents])
    present = np.array([c[0] for c, held in zip(contents, holders, strict=True) if held])
    absent = random_hashes(7_000_000 + seed, max(0, n_hashes - len(present)))
    hashes = np.concatenate([absent, present.astype(np.uint64)])[:n_hashes]
    holders &= np.array([np.isin(c, hashes).any() for c in contents])
    data, offsets, blocks = lay_end_to_end(filters, rng.integers(0, 3, n_filters).tolist())
    return data, offsets, blocks, hashes, filters, holders


def test_probe_located_many_pairs_agrees_with_might_contain() -> None:
    """300 filters x 5,000 hashes: more than 2**20 (filter, hash) pairs, so the probe runs in
    several chunks; the hashes are also passed with repeats and out of order."""
    data, offsets, blocks, hashes, filters, holders = _probe_case(300, 5000, 424242)
    assert len(filters) * len(hashes) > 2**20
    assert 50 < holders.sum() < 250
    expected = np.array([f.might_contain(hashes).any() for f in filters])
    got = probe_located(data, offsets, blocks, hashes)
    np.testing.assert_array_equal(got, expected)
    # the filters holding one of the values answer; at fpp 1e-7 the others do not
    np.testing.assert_array_equal(got, holders)
    shuffled = np.random.default_rng(1).permutation(np.concatenate([hashes, hashes[::3]]))
    np.testing.assert_array_equal(probe_located(data, offsets, blocks, shuffled), holders)


@pytest.mark.parametrize(
    ("n_filters", "n_hashes"),
    [(12, 1), (12, 2), (40, 1000), (7, 2**20 // 7), (12, 2**20 // 7 + 1)],
)
def test_probe_located_agrees_with_might_contain_at_chunk_edges(
    n_filters: int, n_hashes: int
) -> None:
    data, offsets, blocks, hashes, filters, holders = _probe_case(n_filters, n_hashes, n_hashes)
    got = probe_located(data, offsets, blocks, hashes)
    np.testing.assert_array_equal(got, [f.might_contain(hashes).any() for f in filters])
    np.testing.assert_array_equal(got, holders)


@SETTINGS
@given(
    st.lists(
        st.tuples(st.integers(0, 200), st.sampled_from([0.5, 0.1, 0.01]), st.integers(0, 3)),
        max_size=8,
    ),
    st.lists(st.integers(0, 2**64 - 1), max_size=30),
    st.integers(0, 2**32),
)
def test_probe_located_agrees_with_might_contain(
    specs: list[tuple[int, float, int]], extra: list[int], seed: int
) -> None:
    contents = [random_hashes(seed + j, n) for j, (n, _, _) in enumerate(specs)]
    filters = [
        BloomFilter.of_hashes(c, fpp) for c, (_, fpp, _) in zip(contents, specs, strict=True)
    ]
    data, offsets, blocks = lay_end_to_end(filters, [gap for _, _, gap in specs])
    picked = [c[: len(c) // 50] for c in contents]
    hashes = np.concatenate([np.array(extra, np.uint64), *picked])
    got = probe_located(data, offsets, blocks, hashes)
    assert got.shape == (len(filters),)
    np.testing.assert_array_equal(
        got, np.array([f.might_contain(hashes).any() for f in filters], np.bool_)
    )
    for j, p in enumerate(picked):
        if len(p):
            assert got[j]
