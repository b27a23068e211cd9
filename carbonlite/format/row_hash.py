"""Content hashes of table partitions, for hash-diff publishing.

``content_hash(table)`` is a hex digest that does not depend on row order nor on how the rows
are cut into batches or chunks, and that changes when any value changes, when a row is added,
removed or duplicated, or when a column's name or type changes. Everything is vectorized
(numpy over Arrow buffers, in blocks of ``BLOCK_ROWS`` rows); nothing loops per row or value.

Algorithm (version 1)
=====================

All arithmetic is on unsigned 64-bit integers, modulo 2**64. Arrow buffers are read as
little-endian. ``^`` is xor, ``>>`` a logical shift.

``mix(x)`` is the splitmix64 finalizer, a bijection of the 64-bit integers::

    x ^= x >> 30; x *= 0xBF58476D1CE4E5B9; x ^= x >> 27; x *= 0x94D049BB133111EB; x ^= x >> 31

Constants::

    NULL_HASH = 0xA0761D6478BD642F      the hash of every null, at any nesting level
    CANON_NAN = 0x7FF8000000000000      every NaN is hashed as this float64 bit pattern
    TREE      = 0x5452454548415348      tags the inner nodes of a long sequence
    GOLDEN    = 0x9E3779B97F4A7C15
    ROW_SEED_A = mix(0x524F5741)        first row chain ("ROWA")
    ROW_SEED_B = mix(0x524F5742)        second row chain ("ROWB")
    column_seed(j)  = mix(GOLDEN * (j + 1))       the seed of the j-th column (0-based)
    child_seed(s, i) = mix(s ^ (GOLDEN * (i + 1))) the seed of the i-th child of a nested value

``chain(h, x_0, ..., x_{m-1})``: for each element in order, ``h = mix(h ^ x_k)``; the result
is the last ``h`` (``h`` itself when m = 0).

``seq(s, n, x_0..x_{m-1})`` hashes a sequence of m uint64 elements under seed ``s`` with its
length ``n`` (a byte count for strings, an element count for lists): if m <= 32 it is
``chain(mix(s ^ n), x_0..x_{m-1})``. Otherwise the elements are cut into consecutive blocks of
32 (the last one may be shorter), each block ``b`` becomes ``chain(mix(s ^ TREE ^ len(b)), b)``,
and ``seq(s, n, <the block hashes>)`` is taken (recursively, same ``s`` and ``n``).

Value hash ``hash(s, v)`` of one value ``v`` under seed ``s``; a null (of any type, the
validity bitmap decides, never the bytes under a null slot) is ``NULL_HASH``; otherwise:

* fixed-width values become one 64-bit word ``u`` and hash as ``mix(u ^ s)``:
  bool is 0 or 1; signed integers, date32/64, time32/64, timestamp (any unit and time zone)
  and duration are sign-extended to 64 bits (two's complement); unsigned integers are
  zero-extended; float16/float32/float64 are widened exactly to float64 and ``u`` is its IEEE
  bit pattern, with every NaN replaced by ``CANON_NAN``. -0.0 and 0.0 are different values
  (different bits): a change of sign of a zero counts as a change.
* string, large_string, binary, large_binary, fixed_size_binary, decimal32/64/128/256
  (two's complement little-endian bytes), string_view and binary_view: the value's bytes, of
  length L, are cut into ``ceil(L / 8)`` words (little-endian, the last one zero-padded) and
  hashed as ``seq(s, L, words)``. A trailing NUL byte thus changes the hash (L changes).
* dictionary: the hash of the decoded value (nulls in the indices or in the dictionary are
  nulls), so dictionary-encoded and plain columns hash the same.
* list, large_list, fixed_size_list (n elements): ``seq(s, n, e_0..e_{n-1})`` where
  ``e_i = hash(child_seed(s, 0), element_i)``. A map is a list of struct<key, value> entries.
* struct: ``chain(s, hash(child_seed(s, 0), field_0), hash(child_seed(s, 1), field_1), ...)``.
* null type: ``NULL_HASH``.

Other types (unions, run-end encoded, list_view, extensions, intervals) raise TypeError.

``column_hashes(array)`` is ``hash(column_seed(0), v)`` for each row. Fixed-width values never
collide with one another (``mix`` is a bijection); a value collides with null only if its hash
happens to equal NULL_HASH.

Row hash with a row seed ``R``: ``chain(R, c_0, ..., c_{k-1})`` where ``c_j`` is the value
hash of the row's j-th column (schema order) under ``column_seed(j)``. ``row_hashes(table)``
uses ``R = ROW_SEED_A``. Each step is a bijection of both the state and the column hash, so
changing one value of a row always changes its row hash.

Content hash: ``A`` = sum of the row hashes with ``ROW_SEED_A`` and ``B`` = sum of the row
hashes with ``ROW_SEED_B`` (both modulo 2**64; two independent chains over the same column
hashes), ``N`` the row count. The schema is described as compact JSON, exactly as Python's
``json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("utf-8")`` writes it:
``fields`` is a list of ``[name, type]`` per column, where ``type`` is one of ``"null" "bool" "int8" "int16" "int32" "int64" "uint8"
"uint16" "uint32" "uint64" "float16" "float32" "float64" "date32" "date64" "string"
"large_string" "binary" "large_binary" "string_view" "binary_view"``, ``["time32", unit]``,
``["time64", unit]``, ``["timestamp", unit, tz or null]``, ``["duration", unit]``,
``["decimal32"|"decimal64"|"decimal128"|"decimal256", precision, scale]``,
``["fixed_size_binary", byte_width]``, ``["list", T]``, ``["large_list", T]``,
``["fixed_size_list", T, size]``, ``["map", K, V, keys_sorted]``,
``["struct", [[name, T], ...]]``; a dictionary type is described as its value type. Field
nullability, list/map child field names and metadata are not part of the description. The
digest is the hex of ``blake2b(digest_size=32)`` over::

    b"carbonlite.row_hash.v1\\x00" + u64le(len(desc)) + desc + u64le(N) + u64le(A) + u64le(B)

A change goes unnoticed only if the multiset of 64-bit row hashes does not change (a 64-bit
collision between a changed row and its old self) or if both 64-bit sums happen to cancel.

Implementation
==============

Rows are hashed ``BLOCK_ROWS`` (32768) at a time so that the working arrays stay in cache;
each column's hashes for a block are folded into the two row chains at once, and the blocks
of a large batch are shared between threads (numpy releases the GIL; the sums commute). A
fixed-width column is one pass over its values buffer. Byte strings are hashed word position
by word position, vectorized over rows: rows of one length read their k-th words through a
strided view of the data buffer (no copy); otherwise rows are radix-sorted by word count so
that the rows still running at word k are a prefix, and their words are gathered through an
unaligned 8-byte view of the data buffer. Values over 256 bytes are cut into 256-byte blocks
hashed the same way, then the block hashes are chained (tree levels as needed), so the cost
is O(total bytes) numpy work with a number of Python iterations that depends only on the
longest value's logarithm. Lists use the same machinery over their elements' hashes.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from carbonlite.format.pages import thread_pool
from carbonlite.format.value_hash import (
    _MASK,
    _VERSION_TAG,
    BLOCK_ROWS,
    NULL_HASH,
    ROW_SEED_A,
    ROW_SEED_B,
    U64,
    _Column,
    _hash_array,
    _mix,
    _prepare,
    _type_description,
    column_seed,
)

__all__ = [
    "BLOCK_ROWS",
    "NULL_HASH",
    "ContentSums",
    "column_hashes",
    "content_hash",
    "content_sums",
    "grouped_content_sums",
    "row_hashes",
]


@functools.lru_cache(maxsize=256)
def _described(schema: pa.Schema) -> bytes:
    return schema_description(schema)


def schema_description(schema: pa.Schema) -> bytes:
    """The canonical schema description folded into :func:`content_hash` (UTF-8 JSON)."""
    fields = [[f.name, _type_description(f.type)] for f in schema]
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


# -- public API --------------------------------------------------------------------------------


def column_hashes(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """One uint64 per row of the column; equal values (and nulls) hash equal whatever the
    chunking, offsets or the bytes under null slots.

    Defined for bool, all int/uint widths, float16/32/64, decimals, date32/64, time32/64,
    timestamp (any unit/tz), duration, string, large_string, binary, large_binary,
    fixed_size_binary, string_view, binary_view, null, dictionary arrays of those (hash of the
    decoded value) and lists, large lists, fixed-size lists, maps and structs of those. Other
    types raise TypeError naming the type.
    """
    seed = column_seed(0)
    if isinstance(array, pa.ChunkedArray):
        _type_description(array.type)
        parts = [_hash_array(chunk, seed) for chunk in array.chunks]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)
    _type_description(array.type)
    return _hash_array(array, seed)


def _prepare_batch(batch: pa.RecordBatch) -> list[_Column]:
    return [_prepare(batch.column(j), column_seed(j)) for j in range(batch.num_columns)]


def _row_blocks(
    columns: Sequence[_Column], a0: int, a1: int, seeds: Sequence[int]
) -> Iterator[tuple[int, int, list[U64]]]:
    """Row hashes of rows ``[a0, a1)``, one block at a time, for each row seed."""
    size = min(BLOCK_ROWS, a1 - a0)
    c = np.empty(size, dtype=np.uint64)
    tmp = np.empty(size, dtype=np.uint64)
    states = [np.empty(size, dtype=np.uint64) for _ in seeds]
    for a in range(a0, a1, BLOCK_ROWS):
        b = min(a + BLOCK_ROWS, a1)
        m = b - a
        views = [s[:m] for s in states]
        for view, seed in zip(views, seeds, strict=True):
            view.fill(np.uint64(seed))
        for col in columns:
            col.hash_into(a, b, c[:m], tmp)
            for view in views:
                view ^= c[:m]
                _mix(view, tmp)
        yield a, b, views


def _batches_of(
    data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch], schema: pa.Schema | None
) -> tuple[pa.Schema, Iterable[pa.RecordBatch]]:
    if isinstance(data, pa.Table):
        return (data.schema if schema is None else schema), data.to_batches()
    if isinstance(data, pa.RecordBatch):
        return (data.schema if schema is None else schema), [data]
    it = iter(data)
    if schema is not None:
        return schema, it
    first = next(it, None)
    if first is None:
        raise ValueError("content_hash of an empty batch iterable needs a schema")

    def chained() -> Iterator[pa.RecordBatch]:
        yield first
        yield from it

    return first.schema, chained()


def row_hashes(table: pa.Table | pa.RecordBatch) -> np.ndarray:
    """One uint64 per row combining every column (in schema order) non-linearly, so swapping
    two rows' values of one column changes the multiset of row hashes."""
    schema, batches = _batches_of(table, None)
    schema_description(schema)  # TypeError for unsupported types, even when empty
    out = np.empty(table.num_rows, dtype=np.uint64)
    pos = 0
    for batch in batches:
        columns = _prepare_batch(batch)
        for a, b, (hashes,) in _row_blocks(columns, 0, batch.num_rows, [ROW_SEED_A]):
            out[pos + a : pos + b] = hashes
        pos += batch.num_rows
    return out


def _threads() -> int:
    """Threads for content_hash: numpy releases the GIL in its loops."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


def _sum_range(columns: Sequence[_Column], a0: int, a1: int) -> tuple[int, int]:
    total_a = total_b = 0
    for _, _, (ha, hb) in _row_blocks(columns, a0, a1, [ROW_SEED_A, ROW_SEED_B]):
        total_a += int(ha.sum(dtype=np.uint64))
        total_b += int(hb.sum(dtype=np.uint64))
    return total_a & _MASK, total_b & _MASK


@dataclass(frozen=True, slots=True)
class ContentSums:
    """What a content hash is made of, before the digest: the row count and the two sums of
    row hashes. Sums of disjoint parts of a partition add up to the sums of the whole (so
    workers can each hash the rows they hold)."""

    rows: int
    a: int
    b: int

    def __add__(self, other: ContentSums) -> ContentSums:
        return ContentSums(
            self.rows + other.rows, (self.a + other.a) & _MASK, (self.b + other.b) & _MASK
        )

    def digest(self, schema: pa.Schema) -> str:
        """The content hash of rows of ``schema`` with these sums."""
        description = _described(schema)
        h = hashlib.blake2b(digest_size=32)
        h.update(_VERSION_TAG)
        h.update(struct.pack("<Q", len(description)))
        h.update(description)
        h.update(struct.pack("<QQQ", self.rows, self.a, self.b))
        return h.hexdigest()


def content_hash(
    table: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch], schema: pa.Schema | None = None
) -> str:
    """The partition's content hash: a hex string, independent of row order and of how rows
    are cut into batches/chunks, different for any change of a value, a row added, removed or
    duplicated, or a column name/type change. An empty table has a well-defined hash (which
    depends on the schema). With ``schema``, every batch must have that schema (up to
    dictionary encoding, nullability and metadata); ValueError otherwise."""
    schema, batches = _batches_of(table, schema)
    return content_sums(batches, schema).digest(schema)


def content_sums(
    table: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch], schema: pa.Schema | None = None
) -> ContentSums:
    """The :class:`ContentSums` of ``table`` (arguments as :func:`content_hash`)."""
    schema, batches = _batches_of(table, schema)
    description = schema_description(schema)
    total_a = total_b = rows = 0
    workers = _threads()
    pool = thread_pool() if workers > 1 else None
    for batch in batches:
        if batch.num_columns != len(schema) or (
            batch.schema is not schema and schema_description(batch.schema) != description
        ):
            raise ValueError(
                f"batch schema {batch.schema} does not match the content schema {schema}"
            )
        n = batch.num_rows
        if n == 0:
            continue
        columns = _prepare_batch(batch)
        if pool is None or n < 2 * BLOCK_ROWS:
            parts = [_sum_range(columns, 0, n)]
        else:
            blocks = -(-n // BLOCK_ROWS)
            cuts = [BLOCK_ROWS * (blocks * i // workers) for i in range(workers)] + [n]
            parts = list(pool.map(_sum_range, [columns] * workers, cuts[:-1], cuts[1:]))
        for part_a, part_b in parts:
            total_a += part_a
            total_b += part_b
        rows += n
    return ContentSums(rows, total_a & _MASK, total_b & _MASK)


def grouped_content_sums(
    table: pa.Table, order: np.ndarray, starts: np.ndarray, sizes: np.ndarray
) -> list[ContentSums]:
    """The :class:`ContentSums` of each group of rows of ``table``: group ``g`` is the rows
    ``order[starts[g] : starts[g] + sizes[g]]``. Every row is hashed once, in place (no row is
    moved), and each group's hashes are summed: much faster than hashing each group alone
    when there are many small groups."""
    schema_description(table.schema)  # TypeError for unsupported types
    n = table.num_rows
    ha = np.empty(n, dtype=np.uint64)
    hb = np.empty(n, dtype=np.uint64)

    def hash_range(task: tuple[list[_Column], int, int, int]) -> None:
        columns, pos, a0, a1 = task
        for a, b, (xa, xb) in _row_blocks(columns, a0, a1, [ROW_SEED_A, ROW_SEED_B]):
            ha[pos + a : pos + b] = xa
            hb[pos + a : pos + b] = xb

    tasks: list[tuple[list[_Column], int, int, int]] = []
    pos, workers = 0, _threads()
    for batch in table.to_batches():
        columns, m = _prepare_batch(batch), batch.num_rows
        blocks = -(-m // BLOCK_ROWS)
        cuts = sorted({min(m, BLOCK_ROWS * (blocks * i // workers)) for i in range(workers)} | {m})
        tasks.extend((columns, pos, a0, a1) for a0, a1 in itertools.pairwise(cuts) if a1 > a0)
        pos += m
    if workers > 1 and len(tasks) > 1:
        list(thread_pool().map(hash_range, tasks))
    else:
        for task in tasks:
            hash_range(task)
    if not len(sizes):
        return []
    nonempty = sizes > 0
    sums_a = np.zeros(len(sizes), dtype=np.uint64)
    sums_b = np.zeros(len(sizes), dtype=np.uint64)
    if nonempty.any():
        at = starts[nonempty]
        sums_a[nonempty] = np.add.reduceat(ha[order], at)  # uint64: wraps modulo 2**64
        sums_b[nonempty] = np.add.reduceat(hb[order], at)
    return [
        ContentSums(int(k), int(x), int(y))
        for k, x, y in zip(sizes.tolist(), sums_a.tolist(), sums_b.tolist(), strict=True)
    ]
