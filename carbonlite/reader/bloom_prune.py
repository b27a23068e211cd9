"""Pruning blocklets with their bloom filters: what min/max cannot do for unordered values.

A filter's conjuncts of the form ``column == v``, ``column.isin([...])`` and ORs of them on
columns with bloom filters are tested against each blocklet min/max left; a blocklet whose
filters hold none of a conjunct's values is skipped. A filter never proves presence, only
absence, so pruning stays exact: a false positive costs a read, never a row.

A blocklet's filter is used only when it was built over the same *hash domain* as the
column has now (:func:`bloom_domain`: integer widths share one, a widened decimal of the
same byte width too); the literal is converted to the column's type exactly, and anything
that cannot be converted exactly, a filter that is missing or damaged, or a bloom file that
cannot be read, leaves the blocklet in (the scan reads it). Bloom files are immutable, so
they are read once per process (:class:`BloomFileCache`) in one request each.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.types as pat

from carbonlite.errors import CarbonLiteError, CorruptDataError
from carbonlite.format.bloom import (
    BLOOM_FILE_MAGIC,
    FilterAt,
    bloom_domain,
    bloom_hashes,
    locate_bloom_record,
    probe_located,
)
from carbonlite.format.secondary_index import SecondaryIndex
from carbonlite.metadata import BloomRef, FileState
from carbonlite.reader.predicate import And, Compare, IsIn, Or, Predicate
from carbonlite.storage import Storage

__all__ = ["BloomFileCache", "BloomPruner", "bloom_clauses", "bloom_pruner"]

_logger = logging.getLogger(__name__)

_NS_PER = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class _Leaf:
    column: str
    values: tuple[Any, ...]


_Clause = tuple[_Leaf, ...]
"""Leaves ORed together: the clause is false for a blocklet when every leaf is."""


def _leaf(p: Predicate, columns: frozenset[str]) -> _Leaf | None:
    if isinstance(p, Compare) and p.op == "==" and p.column in columns:
        return _Leaf(p.column, (p.value,))
    if isinstance(p, IsIn) and p.column in columns and not p.nulls_may_match:
        if p.nans_may_match:
            return None
        return _Leaf(p.column, p.values)
    return None


def _or_leaves(p: Predicate, columns: frozenset[str]) -> list[_Leaf] | None:
    if isinstance(p, And) and len(p.parts) == 1:  # DNF and SQL filters wrap each term
        return _or_leaves(p.parts[0], columns)
    if isinstance(p, Or):
        out: list[_Leaf] = []
        for q in p.parts:
            more = _or_leaves(q, columns)
            if more is None:
                return None
            out.extend(more)
        return out
    leaf = _leaf(p, columns)
    return None if leaf is None else [leaf]


def bloom_clauses(predicate: Predicate | None, columns: frozenset[str]) -> list[_Clause]:
    """The conjuncts of ``predicate`` that bloom filters of ``columns`` can refute: each an
    equality or membership test, or an OR of them."""
    if predicate is None or not columns:
        return []
    parts = predicate.parts if isinstance(predicate, And) else (predicate,)
    out = []
    for part in parts:
        if isinstance(part, And):
            out.extend(bloom_clauses(part, columns))
            continue
        leaves = _or_leaves(part, columns)
        if leaves:
            out.append(tuple(leaves))
    return out


# --- literals as the column's type ------------------------------------------------------------


class _Inexact(Exception):
    """A literal that cannot be put in the column's type exactly: the filter is not used."""


def _integer_array(values: Sequence[Any]) -> pa.Array:
    if any(not isinstance(v, int) or isinstance(v, bool) for v in values):
        raise _Inexact
    if all(-(1 << 63) <= v < (1 << 63) for v in values):
        return pa.array(values, pa.int64())
    if all(0 <= v < (1 << 64) for v in values):
        return pa.array(values, pa.uint64())
    # values beyond 64 bits equal no row: hash the rest (both halves hash alike)
    small = [v for v in values if -(1 << 63) <= v < (1 << 63)]
    large = [v for v in values if (1 << 63) <= v < (1 << 64)]
    return pa.chunked_array(
        [pa.array(small, pa.int64()), pa.array(large, pa.uint64()).cast(pa.int64(), safe=False)]
    ).combine_chunks()


def _raw(value: Any, per: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value % per:
        raise _Inexact
    return value // per


def literal_hashes(values: Sequence[Any], column_type: pa.DataType) -> npt.NDArray[np.uint64]:
    """The bloom hashes of predicate literals (in the comparable domain of
    ``reader/predicate.py``) put in ``column_type``; raises ``_Inexact``."""
    t = column_type.value_type if pat.is_dictionary(column_type) else column_type
    if pat.is_integer(t):
        array = _integer_array(values)
    elif pat.is_timestamp(t) or pat.is_time(t) or pat.is_duration(t):
        array = pa.array([_raw(v, _NS_PER[t.unit]) for v in values], pa.int64())
    elif pat.is_date32(t):
        array = pa.array([_raw(v, _DAY_MS) for v in values], pa.int64())
    elif pat.is_date64(t):
        array = pa.array([_raw(v, 1) for v in values], pa.int64())
    elif pat.is_floating(t):
        if any(not isinstance(v, float) for v in values):
            raise _Inexact
        array = pa.array(values, pa.float64())
    elif pat.is_decimal(t):
        if any(not isinstance(v, (Decimal, int)) or isinstance(v, bool) for v in values):
            raise _Inexact
        try:
            array = pa.array([Decimal(v) for v in values], t)
        except (pa.ArrowException, ValueError, ArithmeticError):
            raise _Inexact from None
    elif pat.is_string(t) or pat.is_large_string(t) or pat.is_string_view(t):
        if any(not isinstance(v, str) for v in values):
            raise _Inexact
        array = pa.array(values, pa.large_string())
    elif pat.is_binary(t) or pat.is_large_binary(t) or pat.is_binary_view(t):
        if any(not isinstance(v, bytes) for v in values):
            raise _Inexact
        array = pa.array(values, pa.large_binary())
    elif pat.is_fixed_size_binary(t):
        if any(not isinstance(v, bytes) for v in values):
            raise _Inexact
        array = pa.array([v for v in values if len(v) == t.byte_width], t)
    else:
        raise _Inexact
    return bloom_hashes(array)


# --- reading bloom files ---------------------------------------------------------------------


class _BloomFile:
    """A bloom file read once: its bytes, and its records located as they are asked for
    (each checked once; None for a damaged one)."""

    __slots__ = ("bytes", "data", "records", "where")

    def __init__(self, data: bytes, where: str) -> None:
        self.data = data
        self.bytes = np.frombuffer(data, dtype=np.uint8)
        self.records: dict[int, Mapping[str, FilterAt] | None] = {}
        self.where = where

    def record(self, offset: int, length: int) -> Mapping[str, FilterAt] | None:
        if offset in self.records:
            return self.records[offset]
        found: Mapping[str, FilterAt] | None
        try:
            found = locate_bloom_record(self.data, offset, length, where=self.where)
        except CorruptDataError as exc:
            _logger.warning("%s: not pruning with it", exc)
            found = None
        self.records[offset] = found
        return found


def _path(key: str) -> str:
    """The file a cache key (table, NUL, file) names."""
    return key.rpartition("\0")[2]


class BloomFileCache:
    """Bloom filter and secondary index files, each read once (one request), decoded once and
    kept, least recently used first out, while they hold fewer than ``max_bytes`` together:
    they never change once written. A file that is gone or damaged is remembered as such (its
    blocklets are read, not pruned); a read error that may pass is not remembered."""

    def __init__(self, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, tuple[object | None, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """The bytes of the files held (damaged ones count none)."""
        with self._lock:
            return self._bytes

    def read(self, key: str, size: int, fetch: Callable[[], bytes]) -> _BloomFile | None:
        """The bloom file ``key`` of ``size`` bytes; None when it cannot be read or is not a
        bloom file (its blocklets are then read, not pruned)."""

        def decode(data: bytes) -> _BloomFile:
            if not data.startswith(BLOOM_FILE_MAGIC):
                raise CorruptDataError("not a bloom filter file", path=_path(key))
            return _BloomFile(data, _path(key))

        found = self._get(key, size, fetch, decode, "bloom filter file")
        return found if isinstance(found, _BloomFile) else None

    def index(self, key: str, size: int, fetch: Callable[[], bytes]) -> SecondaryIndex | None:
        """The secondary index file ``key`` of ``size`` bytes, decoded; None when it cannot
        be read or is damaged."""
        found = self._get(
            key,
            size,
            fetch,
            lambda data: SecondaryIndex.decode(data, where=_path(key)),
            "secondary index",
        )
        return found if isinstance(found, SecondaryIndex) else None

    def _get(
        self,
        key: str,
        size: int,
        fetch: Callable[[], bytes],
        decode: Callable[[bytes], object],
        what: str,
    ) -> object | None:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key][0]
        decoded: object | None = None
        try:
            data = fetch()
        except FileNotFoundError:
            _logger.warning("%s %s is gone: not pruning with it", what, _path(key))
        except (OSError, CarbonLiteError) as exc:
            _logger.warning("%s %s cannot be read (%s): not pruning with it", what, _path(key), exc)
            return None
        else:
            try:
                if len(data) != size:
                    raise CorruptDataError(
                        f"the {what} has {len(data)} bytes, not {size}", path=_path(key)
                    )
                decoded = decode(data)
            except CarbonLiteError as exc:
                _logger.warning("%s is damaged (%s): not pruning with it", what, exc)
        with self._lock:
            if key not in self._entries:
                held = size if decoded is not None else 0
                self._entries[key] = (decoded, held)
                self._bytes += held
                while self._bytes > self.max_bytes and len(self._entries) > 1:
                    _, (_, freed) = self._entries.popitem(last=False)
                    self._bytes -= freed
        return decoded


SHARED_CACHE = BloomFileCache()


@dataclass
class BloomPruner:
    """Tests blocklets against the bloom filters of one table (``read(path)`` reads a file
    of it, relative to its root; ``table`` names it in the cache)."""

    table: str
    read: Callable[[str], bytes]
    cache: BloomFileCache | None = None
    """The bloom files read so far (None: the process's shared cache)."""
    unreadable: int = 0
    """Blocklets whose filters could not be used because their bytes are damaged or gone."""
    unreadable_indexes: int = 0
    """Secondary index files (once per leaf) that could not be used."""

    def index_may_match(
        self,
        clauses: Sequence[_Clause],
        files: Sequence[FileState | None],
        offsets: npt.NDArray[np.int64],
        types: Mapping[str, pa.DataType],
    ) -> npt.NDArray[np.bool_]:
        """For each blocklet (of ``files[i]`` at ``offsets[i]``): False when the secondary
        index of its file shows that some clause is false for it."""
        n = len(files)
        keep = np.ones(n, dtype=np.bool_)
        if not clauses or n == 0 or not any(f is not None and f.indexes for f in files):
            return keep
        groups: dict[str, list[int]] = {}
        for i, f in enumerate(files):
            if f is not None and f.indexes:
                groups.setdefault(f.path, []).append(i)
        for clause in clauses:
            may = np.zeros(n, dtype=np.bool_)
            for leaf in clause:
                may |= self._index_leaf(leaf, groups, files, offsets, types.get(leaf.column))
            keep &= may
        return keep

    def _index_leaf(
        self,
        leaf: _Leaf,
        groups: Mapping[str, list[int]],
        files: Sequence[FileState | None],
        offsets: npt.NDArray[np.int64],
        column_type: pa.DataType | None,
    ) -> npt.NDArray[np.bool_]:
        may = np.ones(len(files), dtype=np.bool_)
        if column_type is None:
            return may
        try:
            hashes = literal_hashes(leaf.values, column_type)
        except _Inexact:
            return may
        domain = bloom_domain(column_type)
        cache = self.cache if self.cache is not None else SHARED_CACHE
        for members in groups.values():
            f = files[members[0]]
            assert f is not None
            ref = f.indexes.get(leaf.column)
            if ref is None:
                continue
            path = ref.path
            index = cache.index(f"{self.table}\0{path}", ref.size, partial(self.read, path))
            if index is None or index.domain != domain:
                self.unreadable_indexes += index is None
                continue
            rows = np.array(members, dtype=np.int64)
            at = offsets[rows]
            covered = np.isin(at, index.blocklets)
            may[rows] = ~covered | np.isin(at, index.lookup(hashes))
        return may

    def _file(self, path: str, size: int) -> _BloomFile | None:
        cache = self.cache if self.cache is not None else SHARED_CACHE
        return cache.read(f"{self.table}\0{path}", size, lambda: self.read(path))

    def may_match(
        self,
        clauses: Sequence[_Clause],
        blocklets: Sequence[tuple[BloomRef, int] | None],
        types: Mapping[str, pa.DataType],
    ) -> npt.NDArray[np.bool_]:
        """For each blocklet (its filters' ref and the size of their file; None: it has
        none): False when some clause is false for it."""
        n = len(blocklets)
        keep = np.ones(n, dtype=np.bool_)
        if not clauses or n == 0:
            return keep
        groups: dict[str, list[int]] = {}
        for i, b in enumerate(blocklets):
            if b is not None:
                groups.setdefault(b[0].path, []).append(i)
        located: list[tuple[_BloomFile, list[int], list[Mapping[str, FilterAt] | None]]] = []
        for path, members in groups.items():
            loaded = self._file(path, blocklets[members[0]][1])  # type: ignore[index]
            if loaded is None:
                self.unreadable += len(members)
                continue
            records = []
            for i in members:
                ref = blocklets[i][0]  # type: ignore[index]
                record = loaded.record(ref.offset, ref.length)
                self.unreadable += record is None
                records.append(record)
            located.append((loaded, members, records))
        for clause in clauses:
            may = np.zeros(n, dtype=np.bool_)
            for leaf in clause:
                may |= self._leaf(leaf, located, n, types.get(leaf.column))
            keep &= may
        return keep

    def _leaf(
        self,
        leaf: _Leaf,
        located: Sequence[tuple[_BloomFile, list[int], list[Mapping[str, FilterAt] | None]]],
        n: int,
        column_type: pa.DataType | None,
    ) -> npt.NDArray[np.bool_]:
        may = np.ones(n, dtype=np.bool_)
        if column_type is None:
            return may
        domain = bloom_domain(column_type)
        try:
            hashes = literal_hashes(leaf.values, column_type)
        except _Inexact:
            return may
        for loaded, members, records in located:
            rows, offsets, blocks = [], [], []
            for i, record in zip(members, records, strict=True):
                at = record.get(leaf.column) if record is not None else None
                if at is not None and at.domain == domain:
                    rows.append(i)
                    offsets.append(at.offset)
                    blocks.append(at.blocks)
            if rows:
                may[np.array(rows, dtype=np.int64)] = probe_located(
                    loaded.bytes,
                    np.array(offsets, dtype=np.int64),
                    np.array(blocks, dtype=np.int64),
                    hashes,
                )
        return may


def bloom_pruner(storage: Storage, root: str) -> BloomPruner:
    """The pruner of the table at ``root`` of ``storage``."""
    return BloomPruner(storage.uri(root), lambda path: storage.read(storage.join(root, path)))
