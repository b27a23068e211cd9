"""Content hashes of partitions (format/row_hash.py): independent of row order and chunking,
sensitive to every change, and equal to a plain-Python implementation of the documented
algorithm."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import struct
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from carbonlite.format import row_hash
from carbonlite.format.row_hash import column_hashes, content_hash, row_hashes

SETTINGS = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- an independent plain-Python implementation of the documented algorithm -------------------

M64 = (1 << 64) - 1
NULL = 0xA0761D6478BD642F
NAN = 0x7FF8000000000000
TREE = 0x5452454548415348
GOLDEN = 0x9E3779B97F4A7C15


def mix(x: int) -> int:
    x &= M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def chain(h: int, xs: list[int]) -> int:
    for x in xs:
        h = mix(h ^ x)
    return h


def seq(s: int, n: int, xs: list[int]) -> int:
    if len(xs) <= 32:
        return chain(mix(s ^ n), xs)
    blocks = [xs[i : i + 32] for i in range(0, len(xs), 32)]
    return seq(s, n, [chain(mix(s ^ TREE ^ len(b)), b) for b in blocks])


def byte_hash(s: int, b: bytes) -> int:
    padded = b + b"\0" * (-len(b) % 8)
    words = [int.from_bytes(padded[i : i + 8], "little") for i in range(0, len(padded), 8)]
    return seq(s, len(b), words)


def child_seed(s: int, i: int) -> int:
    return mix(s ^ ((GOLDEN * (i + 1)) & M64))


def ref_value_hash(s: int, v: Any, t: pa.DataType) -> int:
    """The value hash; temporal values are given as their integers."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if v is None:
        return NULL
    if pa.types.is_boolean(t):
        return mix(int(v) ^ s)
    if pa.types.is_integer(t) or pa.types.is_temporal(t):
        return mix((v & M64) ^ s)
    if pa.types.is_floating(t):
        bits = NAN if math.isnan(v) else struct.unpack("<Q", struct.pack("<d", v))[0]
        return mix(bits ^ s)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return byte_hash(s, v.encode("utf-8"))
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return byte_hash(s, v)
    if pa.types.is_decimal(t):
        unscaled = int(v.scaleb(t.scale, context=Context(prec=100)))
        return byte_hash(s, unscaled.to_bytes(t.byte_width, "little", signed=True))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        elements = [ref_value_hash(child_seed(s, 0), e, t.value_type) for e in v]
        return seq(s, len(v), elements)
    if pa.types.is_struct(t):
        h = s
        for i, f in enumerate(t):
            h = mix(h ^ ref_value_hash(child_seed(s, i), v[f.name], f.type))
        return h
    raise NotImplementedError(str(t))


def ref_type(t: pa.DataType) -> Any:
    if pa.types.is_dictionary(t):
        return ref_type(t.value_type)
    if pa.types.is_timestamp(t):
        return ["timestamp", t.unit, t.tz]
    if pa.types.is_decimal(t):
        return ["decimal128", t.precision, t.scale]
    if pa.types.is_fixed_size_binary(t):
        return ["fixed_size_binary", t.byte_width]
    if pa.types.is_list(t):
        return ["list", ref_type(t.value_type)]
    if pa.types.is_large_list(t):
        return ["large_list", ref_type(t.value_type)]
    if pa.types.is_struct(t):
        return ["struct", [[f.name, ref_type(f.type)] for f in t]]
    names = {pa.bool_(): "bool", pa.float32(): "float32", pa.float64(): "float64"}
    names[pa.date32()] = "date32"
    return names.get(t, str(t))


def plain_values(column: pa.ChunkedArray) -> list[Any]:
    """Python values of a column, temporal ones as their integers."""
    t = column.type
    if pa.types.is_dictionary(t):
        column = column.cast(t.value_type)
        t = t.value_type
    if pa.types.is_temporal(t):
        column = column.cast(pa.int32() if t.bit_width == 32 else pa.int64())
    return column.to_pylist()


def ref_content_hash(table: pa.Table) -> str:
    desc = json.dumps(
        [[f.name, ref_type(f.type)] for f in table.schema],
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8")
    columns = [plain_values(c) for c in table.columns]
    types = table.schema.types
    sums = [0, 0]
    for r in range(table.num_rows):
        hashes = [
            ref_value_hash(mix(GOLDEN * (j + 1)), columns[j][r], types[j])
            for j in range(len(columns))
        ]
        for k, seed in enumerate((mix(0x524F5741), mix(0x524F5742))):
            sums[k] = (sums[k] + chain(seed, hashes)) & M64
    digest = hashlib.blake2b(digest_size=32)
    digest.update(b"carbonlite.row_hash.v1\x00" + struct.pack("<Q", len(desc)) + desc)
    digest.update(struct.pack("<QQQ", table.num_rows, *sums))
    return digest.hexdigest()


# -- random tables ----------------------------------------------------------------------------


def _float_key(v: float) -> tuple[str, bytes]:
    return ("nan", b"") if math.isnan(v) else ("f", struct.pack("<d", v))


def key(v: Any) -> Any:
    """A comparable form of a value: NaNs are equal, -0.0 and 0.0 are not (like the hash)."""
    if isinstance(v, float):
        return _float_key(v)
    if isinstance(v, list):
        return ("l", tuple(key(e) for e in v))
    if isinstance(v, dict):  # a struct: its fields by name (a dict's order is not the value's)
        return ("s", tuple((k, key(v[k])) for k in sorted(v)))
    return (type(v).__name__, v)


@dataclass(frozen=True)
class Spec:
    type: pa.DataType
    values: st.SearchStrategy[Any]
    storage: pa.DataType | None = None  # temporal types: built from these integers


def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, 1]))


_TEXT = st.one_of(
    st.text(max_size=12),
    st.just(""),
    st.sampled_from(["a", "a\x00", "\x00", "é", "ü" * 4, "abcdefgh", "abcdefgh\x00"]),
    st.text(min_size=20, max_size=40),
    st.builds(lambda c, n: c * n, st.sampled_from("xé\U0001f600"), st.integers(250, 2200)),
)
_BYTES = st.one_of(
    st.binary(max_size=20),
    st.builds(lambda b, n: b * n, st.sampled_from([b"\0", b"\x01\x02"]), st.integers(0, 9000)),
)
_INT32 = _ints(-(2**31), 2**31 - 1)

SPECS = [
    Spec(pa.int8(), _ints(-128, 127)),
    Spec(pa.int32(), _INT32),
    Spec(pa.int64(), _ints(-(2**63), 2**63 - 1)),
    Spec(pa.uint64(), _ints(0, 2**64 - 1)),
    Spec(
        pa.float64(),
        st.one_of(st.floats(allow_nan=True), st.sampled_from([math.nan, -0.0, 0.0, math.inf])),
    ),
    Spec(pa.float32(), st.floats(width=32, allow_nan=True)),
    Spec(pa.bool_(), st.booleans()),
    Spec(pa.string(), _TEXT),
    Spec(pa.large_string(), _TEXT),
    Spec(pa.binary(), _BYTES),
    Spec(pa.binary(3), st.binary(min_size=3, max_size=3)),
    Spec(pa.date32(), _ints(-100_000, 100_000), pa.int32()),
    Spec(pa.timestamp("ms", tz="UTC"), _ints(-(10**15), 10**15), pa.int64()),
    Spec(
        pa.decimal128(12, 3),
        _ints(-(10**12) + 1, 10**12 - 1).map(lambda u: Decimal(u).scaleb(-3)),
    ),
    Spec(pa.list_(pa.int32()), st.lists(st.one_of(st.none(), _INT32), max_size=70)),
    Spec(
        pa.struct([("a", pa.int32()), ("b", pa.string())]),
        st.fixed_dictionaries(
            {"a": st.one_of(st.none(), _INT32), "b": st.one_of(st.none(), st.text(max_size=10))}
        ),
    ),
]


def to_array(values: list[Any], spec: Spec) -> pa.Array:
    if spec.storage is not None:
        return pa.array(values, spec.storage).view(spec.type)
    return pa.array(values, spec.type)


@dataclass
class Data:
    specs: list[Spec]
    columns: list[list[Any]]

    @property
    def num_rows(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def table(self) -> pa.Table:
        arrays = [to_array(c, s) for c, s in zip(self.columns, self.specs, strict=True)]
        return pa.table(arrays, names=[f"c{j}" for j in range(len(arrays))])

    def row_key(self, i: int, skip: int = -1) -> Any:
        return tuple(key(c[i]) for j, c in enumerate(self.columns) if j != skip)


@st.composite
def column_values(draw: st.DrawFn, spec: Spec, n: int) -> list[Any]:
    values = st.one_of(st.none(), spec.values) if draw(st.booleans()) else spec.values
    # a small pool of values makes duplicates (and equal-length strings) common
    pool = draw(st.lists(values, min_size=1, max_size=4))
    return draw(st.lists(st.one_of(values, st.sampled_from(pool)), min_size=n, max_size=n))


@st.composite
def datas(draw: st.DrawFn, min_rows: int = 0, max_rows: int = 25, min_columns: int = 1) -> Data:
    specs = draw(st.lists(st.sampled_from(SPECS), min_size=min_columns, max_size=5))
    n = draw(st.integers(min_rows, max_rows))
    return Data(specs, [draw(column_values(s, n)) for s in specs])


def rechunk(table: pa.Table, cuts: list[int]) -> pa.Table:
    bounds = [0, *sorted(min(c, table.num_rows) for c in cuts), table.num_rows]
    return pa.concat_tables([table.slice(a, b - a) for a, b in itertools.pairwise(bounds)])


def dictionary_encoded(table: pa.Table) -> pa.Table:
    for j, t in enumerate(table.schema.types):
        if pa.types.is_string(t) or pa.types.is_binary(t):
            table = table.set_column(j, table.field(j).name, table.column(j).dictionary_encode())
    return table


# -- equal content, equal hash ----------------------------------------------------------------


@SETTINGS
@given(datas(), st.data())
def test_order_chunking_offsets_and_encoding_do_not_matter(data: Data, draw: st.DataObject) -> None:
    table = data.table()
    expected = content_hash(table)
    assert len(expected) == 64
    n = table.num_rows

    permutation = draw.draw(st.permutations(range(n)))
    assert content_hash(table.take(pa.array(permutation, pa.int64()))) == expected

    cuts = draw.draw(st.lists(st.integers(0, n), max_size=5))
    chunked = rechunk(table, cuts)
    assert content_hash(chunked) == expected
    assert content_hash(iter(chunked.to_batches()), schema=table.schema) == expected
    assert content_hash(chunked.to_batches(max_chunksize=3), schema=table.schema) == expected
    # every column cut differently
    columns = []
    for column in table.columns:
        own_cuts = draw.draw(st.lists(st.integers(0, n), max_size=4))
        columns.append(rechunk(pa.table({"c": column}), own_cuts).column(0))
    assert content_hash(pa.Table.from_arrays(columns, schema=table.schema)) == expected
    pieces = [row_hashes(batch) for batch in chunked.to_batches()]
    assert np.array_equal(np.concatenate([np.empty(0, np.uint64), *pieces]), row_hashes(table))
    assert np.array_equal(row_hashes(chunked), row_hashes(table))

    # the same rows in the middle of bigger arrays (non-zero offsets everywhere)
    before = Data(data.specs, [draw.draw(column_values(s, 3)) for s in data.specs]).table()
    after = Data(data.specs, [draw.draw(column_values(s, 2)) for s in data.specs]).table()
    middle = pa.concat_tables([before, table, after]).combine_chunks().slice(3, n)
    assert n == 0 or all(c.chunks[0].offset == 3 for c in middle.columns)
    assert content_hash(middle) == expected
    for j in range(table.num_columns):
        assert np.array_equal(column_hashes(middle.column(j)), column_hashes(table.column(j)))
        assert np.array_equal(column_hashes(chunked.column(j)), column_hashes(table.column(j)))

    assert content_hash(dictionary_encoded(chunked)) == expected
    assert content_hash(dictionary_encoded(middle)) == expected


@SETTINGS
@given(datas(max_rows=12))
def test_the_digest_is_the_documented_algorithm(data: Data) -> None:
    """A plain-Python implementation of the module docstring gives the same digest."""
    table = data.table()
    assert content_hash(table) == ref_content_hash(table)
    assert content_hash(dictionary_encoded(table)) == ref_content_hash(table)


def test_the_documented_algorithm_on_long_values_and_big_lists() -> None:
    """Values long enough for two and three tree levels, lengths around the 256-byte edge."""
    lengths = [0, 1, 7, 8, 9, 255, 256, 257, 263, 264, 8191, 8192, 8193, 8200, 70_000, 300_000]
    rng = np.random.default_rng(7)
    blobs = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in lengths]
    lists = [list(range(n)) for n in (0, 31, 32, 33, 1024, 1025, 40_000)]
    table = pa.table(
        {
            "b": pa.array(blobs, pa.large_binary()),
            "s": pa.array(["é" * (n // 2) for n in lengths]),
            "l": pa.array(lists + [None] * (len(lengths) - len(lists)), pa.list_(pa.int32())),
        }
    )
    assert content_hash(table) == ref_content_hash(table)
    for j in range(3):
        column = table.column(j)
        ref = [ref_value_hash(mix(GOLDEN), v, column.type) for v in column.to_pylist()]
        assert column_hashes(column).tolist() == ref
    # uniform lengths take the strided path, also for long values
    for n in (5, 40, 256, 300, 9000):
        same = pa.array([bytes([i]) * n for i in range(5)], pa.binary())
        ref = [ref_value_hash(mix(GOLDEN), v, pa.binary()) for v in same.to_pylist()]
        assert column_hashes(same).tolist() == ref
        assert column_hashes(same.slice(2)).tolist() == ref[2:]


def test_threads_and_blocks_do_not_matter(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 3 * row_hash.BLOCK_ROWS + 17
    rng = np.random.default_rng(1)
    table = pa.table(
        {
            "id": np.arange(n),
            "s": pa.array([f"k{i}" * (i % 5) for i in range(n)]),
            "f": rng.normal(size=n),
        }
    )
    expected = content_hash(table)
    shuffled = table.take(rng.permutation(n))
    assert content_hash(shuffled) == expected
    monkeypatch.setattr(row_hash, "_threads", lambda: 1)
    assert content_hash(shuffled) == expected
    monkeypatch.setattr(row_hash, "BLOCK_ROWS", 1000)
    assert content_hash(table) == expected
    assert np.array_equal(np.sort(row_hashes(shuffled)), np.sort(row_hashes(table)))


# -- any change, a different hash -------------------------------------------------------------


@SETTINGS
@given(datas(min_rows=1), st.data())
def test_changing_one_value_changes_the_hash(data: Data, draw: st.DataObject) -> None:
    j = draw.draw(st.integers(0, len(data.specs) - 1))
    i = draw.draw(st.integers(0, data.num_rows - 1))
    new = draw.draw(st.one_of(st.none(), data.specs[j].values))
    assume(key(new) != key(data.columns[j][i]))
    before = content_hash(data.table())
    data.columns[j][i] = new
    assert content_hash(data.table()) != before


@SETTINGS
@given(datas(min_rows=2, min_columns=2), st.data())
def test_swapping_values_of_one_column_changes_the_hash(data: Data, draw: st.DataObject) -> None:
    j = draw.draw(st.integers(0, len(data.specs) - 1))
    i1, i2 = draw.draw(
        st.lists(st.integers(0, data.num_rows - 1), min_size=2, max_size=2, unique=True)
    )
    column = data.columns[j]
    # the multiset of rows changes only if the values and the rest of the rows differ
    assume(key(column[i1]) != key(column[i2]))
    assume(data.row_key(i1, skip=j) != data.row_key(i2, skip=j))
    table = data.table()
    column[i1], column[i2] = column[i2], column[i1]
    swapped = data.table()
    assert content_hash(swapped) != content_hash(table)
    assert not np.array_equal(np.sort(row_hashes(swapped)), np.sort(row_hashes(table)))


@SETTINGS
@given(datas(min_rows=1), st.data())
def test_duplicating_or_removing_a_row_changes_the_hash(data: Data, draw: st.DataObject) -> None:
    table = data.table()
    i = draw.draw(st.integers(0, table.num_rows - 1))
    expected = content_hash(table)
    assert content_hash(pa.concat_tables([table, table.slice(i, 1)])) != expected
    removed = pa.concat_tables([table.slice(0, i), table.slice(i + 1)])
    assert content_hash(removed) != expected


@SETTINGS
@given(datas(), st.data())
def test_renaming_a_column_changes_the_hash(data: Data, draw: st.DataObject) -> None:
    table = data.table()
    j = draw.draw(st.integers(0, table.num_columns - 1))
    old = table.column_names[j]
    same_length = st.text(min_size=len(old), max_size=len(old))
    new = draw.draw(st.one_of(st.text(max_size=5), same_length).filter(lambda s: s != old))
    names = table.column_names
    names[j] = new
    assert content_hash(table.rename_columns(names)) != content_hash(table)
    names[j] = old[:-1] + chr(ord(old[-1]) + 1)  # one character changed
    assert content_hash(table.rename_columns(names)) != content_hash(table)


@SETTINGS
@given(st.lists(st.one_of(st.none(), _INT32), max_size=20))
def test_changing_a_type_changes_the_hash(values: list[int | None]) -> None:
    int32 = pa.table({"v": pa.array(values, pa.int32())})
    int64 = pa.table({"v": pa.array(values, pa.int64())})
    assert content_hash(int32) != content_hash(int64)
    assert content_hash(int32) != content_hash(int32.cast(pa.schema([("v", pa.date32())])))
    strings = pa.table({"v": pa.array([None if v is None else str(v) for v in values])})
    assert content_hash(strings) != content_hash(strings.cast(pa.schema([("v", pa.binary())])))


def test_empty_tables_hash_by_their_schema() -> None:
    a = pa.schema([("a", pa.int32())])
    b = pa.schema([("a", pa.int64())])
    empty_a = content_hash(a.empty_table())
    assert empty_a == content_hash(iter([]), schema=a)
    assert empty_a == content_hash(a.empty_table().to_batches(), schema=a)
    assert empty_a != content_hash(b.empty_table())
    assert empty_a != content_hash(pa.schema([("b", pa.int32())]).empty_table())
    assert empty_a != content_hash(pa.table({"a": pa.array([None], pa.int32())}))
    assert content_hash(pa.schema([]).empty_table()) != content_hash(
        pa.table({"a": [1]}).drop(["a"])
    )
    with pytest.raises(ValueError):
        content_hash(iter([]))
    with pytest.raises(ValueError):
        content_hash(pa.table({"a": pa.array([1], pa.int32())}), schema=b)


@pytest.mark.parametrize("index_type", [pa.int8(), pa.uint8(), pa.int32(), pa.uint64()])
def test_dictionaries_hash_their_decoded_values(index_type: pa.DataType) -> None:
    plain = pa.array(["a", None, "b", "a", None])
    indices = pa.array([0, None, 1, 0, 2], index_type)  # the last one: a null in the dictionary
    encoded = pa.DictionaryArray.from_arrays(indices, pa.array(["a", "b", None]))
    assert column_hashes(encoded).tolist() == column_hashes(plain).tolist()
    assert column_hashes(encoded.slice(1)).tolist() == column_hashes(plain.slice(1)).tolist()
    assert content_hash(pa.table({"c": encoded})) == content_hash(pa.table({"c": plain}))


# -- nulls: the validity bitmap decides, never the bytes under a null slot --------------------


def _bitmap(valid: list[bool]) -> pa.Buffer:
    return pa.py_buffer(np.packbits(np.array(valid, dtype=bool), bitorder="little").tobytes())


def _garbage_arrays() -> list[tuple[pa.Array, pa.Array]]:
    """Pairs (array whose null slots hold garbage, the same values built cleanly)."""
    valid = [True, False, True, False, False, True]
    validity = _bitmap(valid)
    n = len(valid)
    pairs = []
    ints = np.array([5, -(2**62), 7, 123456789, -1, 9], dtype=np.int64)
    clean_ints = [int(v) if ok else None for v, ok in zip(ints, valid, strict=True)]
    pairs.append(
        (
            pa.Array.from_buffers(pa.int64(), n, [validity, pa.py_buffer(ints.tobytes())]),
            pa.array(clean_ints, pa.int64()),
        )
    )
    i32 = ints.astype(np.int32) ^ 0x5A5A
    pairs.append(
        (
            pa.Array.from_buffers(pa.int32(), n, [validity, pa.py_buffer(i32.tobytes())]),
            pa.array(
                [int(v) if ok else None for v, ok in zip(i32, valid, strict=True)], pa.int32()
            ),
        )
    )
    floats = np.array([1.5, np.nan, -0.0, 3.25, 1e300, 2.0])
    pairs.append(
        (
            pa.Array.from_buffers(pa.float64(), n, [validity, pa.py_buffer(floats.tobytes())]),
            pa.array([float(v) if ok else None for v, ok in zip(floats, valid, strict=True)]),
        )
    )
    bools = _bitmap([True, True, False, True, True, False])
    pairs.append(
        (
            pa.Array.from_buffers(pa.bool_(), n, [validity, bools]),
            pa.array([True, None, False, None, None, False]),
        )
    )
    # strings: null slots with non-empty garbage bytes
    pieces = [b"abc", b"GARBAGE", b"", b"\x00\xff junk", b"x" * 300, b"hello world!"]
    offsets = np.cumsum([0] + [len(p) for p in pieces]).astype(np.int32)
    pairs.append(
        (
            pa.Array.from_buffers(
                pa.string(),
                n,
                [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(pieces))],
            ),
            pa.array([p.decode() if ok else None for p, ok in zip(pieces, valid, strict=True)]),
        )
    )
    fixed = b"".join(bytes([i] * 4) for i in range(n))
    pairs.append(
        (
            pa.Array.from_buffers(pa.binary(4), n, [validity, pa.py_buffer(fixed)]),
            pa.array(
                [fixed[4 * i : 4 * i + 4] if ok else None for i, ok in enumerate(valid)],
                pa.binary(4),
            ),
        )
    )
    decimals = b"".join(struct.pack("<qq", i * 1000 + 1, -i) for i in range(n))
    unscaled = [
        int.from_bytes(decimals[16 * i : 16 * i + 16], "little", signed=True) for i in range(n)
    ]
    pairs.append(
        (
            pa.Array.from_buffers(pa.decimal128(38, 2), n, [validity, pa.py_buffer(decimals)]),
            pa.array(
                [
                    Decimal(u).scaleb(-2) if ok else None
                    for u, ok in zip(unscaled, valid, strict=True)
                ],
                pa.decimal128(38, 2),
            ),
        )
    )
    # lists: null slots covering garbage elements
    elements = pa.array(range(20), pa.int32())
    list_offsets = np.array([0, 2, 9, 9, 12, 20, 20], dtype=np.int32)
    pairs.append(
        (
            pa.Array.from_buffers(
                pa.list_(pa.int32()),
                n,
                [validity, pa.py_buffer(list_offsets.tobytes())],
                children=[elements],
            ),
            pa.array([[0, 1], None, [], None, None, []], pa.list_(pa.int32())),
        )
    )
    # structs: null slots over garbage children
    child = pa.array([1, 2, 3, 4, 5, 6], pa.int64())
    pairs.append(
        (
            pa.Array.from_buffers(pa.struct([("x", pa.int64())]), n, [validity], children=[child]),
            pa.array(
                [{"x": 1}, None, {"x": 3}, None, None, {"x": 6}], pa.struct([("x", pa.int64())])
            ),
        )
    )
    # dictionaries: garbage (even out of range) indices under nulls
    indices = np.array([1, 99, 0, -5, 7, 1], dtype=np.int32)
    pairs.append(
        (
            pa.DictionaryArray.from_arrays(
                pa.Array.from_buffers(pa.int32(), n, [validity, pa.py_buffer(indices.tobytes())]),
                pa.array(["a", "b"]),
            ),
            pa.array(["b", None, "a", None, None, "b"]),
        )
    )
    return pairs


@pytest.mark.parametrize("pair", _garbage_arrays(), ids=lambda p: str(p[1].type))
def test_bytes_under_null_slots_do_not_matter(pair: tuple[pa.Array, pa.Array]) -> None:
    garbage, clean = pair
    garbage.validate(full=True)
    assert garbage.to_pylist() == clean.to_pylist()
    assert column_hashes(garbage).tolist() == column_hashes(clean).tolist()
    assert column_hashes(garbage.slice(1, 4)).tolist() == column_hashes(clean.slice(1, 4)).tolist()
    hashes = column_hashes(garbage)
    assert hashes[1] == hashes[3] == hashes[4] == row_hash.NULL_HASH
    assert content_hash(pa.table({"c": garbage})) == content_hash(pa.table({"c": clean}))


# -- collisions --------------------------------------------------------------------------------


def test_distinct_ints_and_short_strings_hash_distinct() -> None:
    n = 1_000_000
    assert len(np.unique(column_hashes(pa.array(np.arange(n))))) == n
    keys = pa.array([f"k{i}" for i in range(n)])
    assert len(np.unique(column_hashes(keys))) == n
    assert len(np.unique(column_hashes(keys.cast(pa.large_binary())))) == n
    # structured: one bit, one byte, or two swapped words apart
    bits = np.uint64(1) << np.arange(64, dtype=np.uint64)
    patterns = np.concatenate([bits, ~bits, np.arange(-(2**15), 2**15).astype(np.uint64)])
    assert len(np.unique(column_hashes(pa.array(patterns)))) == len(set(patterns.tolist()))
    floats = pa.array([0.0, -0.0, math.nan, math.inf, -math.inf, 1.0, -1.0])
    assert len(set(column_hashes(floats).tolist())) == 7


def test_all_nans_hash_equal() -> None:
    payloads = [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FFFFFFFFFFFFFFF]
    bits = np.array(payloads, dtype=np.uint64)
    nans = pa.Array.from_buffers(
        pa.float64(), 4, [None, pa.py_buffer(bits.astype("<u8").tobytes())]
    )
    assert len(set(column_hashes(nans).tolist())) == 1
    bits32 = np.array([0x7FC00000, 0xFFC00000, 0x7F800001], dtype="<u4")
    nans32 = pa.Array.from_buffers(pa.float32(), 3, [None, pa.py_buffer(bits32.tobytes())])
    assert len(set(column_hashes(nans32).tolist())) == 1
    assert content_hash(pa.table({"f": nans})) == content_hash(pa.table({"f": [math.nan] * 4}))


def test_trailing_zero_bytes_and_lengths_matter() -> None:
    values = [b"", b"a", b"ab", b"abcdefgh", b"abcdefghi", b"x" * 256, b"x" * 257, b"x" * 8192]
    values += [v + b"\x00" * k for v in values for k in (1, 7, 8, 9)]
    values += [b"\x00" * k for k in range(1, 300)]
    distinct = sorted(set(values))
    for t in (pa.binary(), pa.large_binary()):
        hashes = column_hashes(pa.array(distinct, t)).tolist()
        assert len(set(hashes)) == len(distinct)
        # alone, each value has a uniform length (another code path): the same hashes
        assert [column_hashes(pa.array([v], t))[0] for v in distinct] == hashes
    texts = pa.array(["a", "a\x00", "\x00a", "", "\x00", "\x00\x00"])
    assert len(set(column_hashes(texts).tolist())) == 6


def test_thue_morse_and_one_char_differences_do_not_collide() -> None:
    # all 2**14 sequences of 14 words, each word one of two patterns (Thue-Morse style)
    words = [b"ABABABAB", b"BABABABA"]
    seqs = [b"".join(words[(i >> k) & 1] for k in range(14)) for i in range(2**14)]
    assert len(set(column_hashes(pa.array(seqs, pa.binary())).tolist())) == len(seqs)
    # Thue-Morse strings and their complements, at every length up to 600
    tm = "".join("ab"[bin(i).count("1") & 1] for i in range(600))
    flipped = tm.translate(str.maketrans("ab", "ba"))
    strings = [tm[:n] for n in range(600)] + [flipped[:n] for n in range(1, 600)]
    assert len(set(column_hashes(pa.array(strings)).tolist())) == len(set(strings))
    # a 3000-byte value with each single byte changed in turn (long values: the tree path)
    base = bytearray(b"q" * 3000)
    variants = []
    for i in range(3000):
        v = bytearray(base)
        v[i] ^= 1
        variants.append(bytes(v))
    assert len(set(column_hashes(pa.array([*variants, bytes(base)])).tolist())) == 3001


# -- pinned values -----------------------------------------------------------------------------


def _pinned_table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([1, 2, None, -3], pa.int64()),
            "small": pa.array([7, None, -1, 0], pa.int8()),
            "f": pa.array([1.5, math.nan, -0.0, None]),
            "ok": pa.array([True, False, None, True]),
            "name": pa.array(["héllo", "", None, "x" * 300]),
            "ts": pa.array([0, 1_700_000_000_000_000, None, -1], pa.timestamp("us", tz="UTC")),
            "d": pa.array(
                [Decimal("1.25"), None, Decimal("-0.01"), Decimal("0")], pa.decimal128(10, 2)
            ),
            "l": pa.array([[1, None], [], None, list(range(40))], pa.list_(pa.int32())),
            "s": pa.array([{"a": 1, "b": "x"}, None, {"a": None, "b": None}, {"a": 2, "b": ""}]),
        }
    )


def test_pinned_digest() -> None:
    """The definition must not drift: a change here is a format change (bump the version)."""
    table = _pinned_table()
    assert content_hash(table) == PINNED_DIGEST
    assert content_hash(table) == ref_content_hash(table)
    assert column_hashes(pa.array([0, 1, None], pa.int64())).tolist() == PINNED_INTS
    assert column_hashes(pa.array(["", "abc", "abcdefghij"])).tolist() == PINNED_STRINGS


PINNED_DIGEST = "444a10994790d038534c70b6dff90be27b6508733fabf2f86503c998a93246e6"
PINNED_INTS = [0x48218226FF3CD4BF, 0x9E0160293A33AAF7, 0xA0761D6478BD642F]
PINNED_STRINGS = [0x48218226FF3CD4BF, 0x05476900547043C0, 0xC550C712CC5922E4]


# -- unsupported types -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "array",
    [
        pa.array([(1, 2, 3)], pa.month_day_nano_interval()),
        pa.UnionArray.from_sparse(
            pa.array([0, 1], pa.int8()), [pa.array([1, 2]), pa.array(["a", "b"])]
        ),
    ],
    ids=["interval", "union"],
)
def test_unsupported_types_raise_type_error(array: pa.Array) -> None:
    with pytest.raises(TypeError, match=str(array.type).split("<")[0].split("[")[0]):
        column_hashes(array)
    with pytest.raises(TypeError):
        content_hash(pa.table({"c": array}))
    with pytest.raises(TypeError):
        content_hash(iter([]), schema=pa.schema([("c", array.type)]))
