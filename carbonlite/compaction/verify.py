"""``verify``: read every committed blocklet and check it against the log.

For each live file: it exists and is at least its committed length; its blocklets, scanned
from the file itself, are exactly the ones the log lists (offsets, lengths, rows); every page
passes its checksum and decodes; and the statistics recomputed from the decoded data equal the
statistics the log prunes with; every deletion vector lies where the log says, passes its
checksum, and covers a blocklet of the file with the row and deletion counts the log
records; every bloom filter record lies where the log says, passes its checksum, and holds
every value of its blocklet's column (a filter that misses one would prune a matching row);
every secondary index decodes and holds every value of the blocklets it covers. Problems are reported with file and byte offset, never
raised, so one damaged file does not hide the state of the others.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from carbonlite.compaction.progress import ProgressCallback, ProgressCounter
from carbonlite.errors import CarbonLiteError, CorruptDataError
from carbonlite.format import BlockletMeta
from carbonlite.format.bloom import (
    BLOOM_FILE_MAGIC,
    bloom_domain,
    bloom_hashes,
    decode_bloom_record,
)
from carbonlite.format.data_files import DataFileReader, open_data_file
from carbonlite.format.deletion_vector import DeletionVector
from carbonlite.format.pages import ordered_map
from carbonlite.format.secondary_index import SecondaryIndex, index_keys
from carbonlite.format.stats import compute_column_stats
from carbonlite.metadata import BlockletEntry, FileState, Log, Snapshot
from carbonlite.storage import Storage

__all__ = ["Problem", "VerifyResult", "verify"]


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    offset: int | None
    message: str


@dataclass(frozen=True, slots=True)
class VerifyResult:
    version: int
    files_checked: int
    blocklets_checked: int
    rows_checked: int
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


class _BloomFiles:
    """The bloom and secondary index files of one verify, each read once."""

    def __init__(self, storage: Storage, root: str) -> None:
        self.storage, self.root = storage, root
        self._files: dict[str, bytes | None] = {}
        self._indexes: dict[str, dict[int, np.ndarray] | str] = {}
        self._lock = threading.Lock()

    def index_keys_by_blocklet(
        self, path: str, size: int, domain: str
    ) -> dict[int, np.ndarray] | str:
        """The keys a secondary index file holds for each blocklet (by offset), or what is
        wrong with it (the log gives its ``size``; ``domain`` is its column's hash domain)."""
        with self._lock:
            if path in self._indexes:
                return self._indexes[path]
        data = self.read(path)
        found: dict[int, np.ndarray] | str
        if data is None:
            found = "the secondary index file is missing"
        elif len(data) != size:
            found = f"the secondary index file has {len(data)} bytes; the log says {size}"
        else:
            try:
                index = SecondaryIndex.decode(data, where=path)
                if index.domain != domain:
                    raise CorruptDataError(
                        f"the secondary index holds keys of hash domain {index.domain!r}, its "
                        f"column's is {domain!r}: it is never used (build_index rebuilds it)",
                        path=path,
                    )
                order = np.argsort(index.ids, kind="stable")
                ids, keys = index.ids[order], index.keys[order]
                cuts = np.searchsorted(ids, np.arange(len(index.blocklets) + 1))
                found = {
                    int(offset): keys[cuts[j] : cuts[j + 1]]
                    for j, offset in enumerate(index.blocklets)
                }
            except CorruptDataError as exc:
                found = str(exc)
        with self._lock:
            self._indexes[path] = found
        return found

    def read(self, path: str) -> bytes | None:
        with self._lock:
            if path in self._files:
                return self._files[path]
        try:
            data: bytes | None = self.storage.read(self.storage.join(self.root, path))
        except FileNotFoundError:
            data = None
        with self._lock:
            self._files[path] = data
        return data


def _check_bloom(
    blooms: _BloomFiles, f: FileState, entry: BlockletEntry, batch: pa.RecordBatch
) -> list[Problem]:
    ref = f.blooms.get(entry.offset)
    if ref is None:
        return []
    data = blooms.read(ref.path)
    if data is None:
        return [Problem(ref.path, None, f"the bloom filter file of {f.path!r} is missing")]
    if not data.startswith(BLOOM_FILE_MAGIC) or len(data) != f.bloom_files.get(ref.path):
        return [Problem(ref.path, None, "the bloom filter file is damaged (magic or size)")]
    try:
        record = decode_bloom_record(
            memoryview(data)[ref.offset : ref.offset + ref.length], where=ref.path
        )
    except CorruptDataError as exc:
        return [Problem(ref.path, ref.offset, f"bloom filters of blocklet {entry.offset}: {exc}")]
    problems = []
    for name, bloom in record.items():
        if name not in batch.schema.names:
            continue
        column = batch.column(name)
        if bloom.type != bloom_domain(column.type):
            continue  # a filter of another domain is never used
        if not bloom.filter.might_contain(bloom_hashes(column)).all():
            problems.append(
                Problem(
                    ref.path,
                    ref.offset,
                    f"the bloom filter of column {name!r} of blocklet {entry.offset} of "
                    f"{f.path!r} misses values the blocklet holds",
                )
            )
    return problems


def _check_indexes(
    blooms: _BloomFiles, f: FileState, entry: BlockletEntry, batch: pa.RecordBatch
) -> list[Problem]:
    problems = []
    for column, ref in f.indexes.items():
        if column not in batch.schema.names:
            continue
        found = blooms.index_keys_by_blocklet(
            ref.path, ref.size, bloom_domain(batch.schema.field(column).type)
        )
        if isinstance(found, str):
            if entry.offset == f.blocklets[0].offset:  # once per file
                problems.append(Problem(ref.path, None, found))
            continue
        held = found.get(entry.offset)
        if held is None:
            continue  # a blocklet the index does not cover is read, never pruned
        if not np.isin(index_keys(batch.column(column)), held).all():
            problems.append(
                Problem(
                    ref.path,
                    None,
                    f"the secondary index of column {column!r} of {f.path!r} misses values "
                    f"of blocklet {entry.offset}",
                )
            )
    return problems


def _check_blocklet(
    reader: DataFileReader,
    f: FileState,
    entry: BlockletEntry,
    types: Mapping[str, pa.DataType],
    blooms: _BloomFiles,
) -> list[Problem]:
    try:
        batch = reader.read_blocklet(BlockletMeta(entry.offset, entry.length, entry.num_rows))
    except CarbonLiteError as exc:
        return [Problem(f.path, getattr(exc, "offset", entry.offset), str(exc))]
    problems = _check_bloom(blooms, f, entry, batch) + _check_indexes(blooms, f, entry, batch)
    for name, logged in entry.stats.items():
        if name not in batch.schema.names or name not in types:
            continue
        actual = compute_column_stats(batch.column(name))
        if actual != logged:
            problems.append(
                Problem(
                    f.path,
                    entry.offset,
                    f"statistics of column {name!r} in the log ({_show(logged)}) differ from the "
                    f"data ({_show(actual)})",
                )
            )
    return problems


def _show(s: Any) -> str:
    return f"nulls={s.null_count} nans={s.nan_count} min={s.min!r} max={s.max!r}"


def _check_file(
    log: Log,
    f: FileState,
    types: Mapping[str, pa.DataType],
    storage_options: Mapping[str, Any] | None,
    advance: Callable[[int], None],
) -> Iterator[Problem]:
    """The problems of one file; ``advance(n)`` is told of each blocklet's bytes as it is
    checked (the caller counts the rest of the file's committed length once it is done)."""
    storage, root = log.storage, log.root
    path = storage.join(root, f.path)
    try:
        size = storage.size(path)
    except FileNotFoundError:
        yield Problem(f.path, None, "the file is missing")
        return
    if size < f.committed_length:
        yield Problem(
            f.path,
            size,
            f"the file has {size} bytes, fewer than its committed length {f.committed_length}",
        )
        return
    try:
        reader = open_data_file(
            storage.uri(path),
            end=f.committed_length,
            storage_options=storage_options,
            cached=False,  # every footer as it is in storage now
        )
    except CarbonLiteError as exc:
        yield Problem(f.path, getattr(exc, "offset", None), str(exc))
        return
    with reader:
        try:
            scanned = [(m.offset, m.length, m.num_rows) for m in reader.blocklets()]
        except CarbonLiteError as exc:
            yield Problem(f.path, getattr(exc, "offset", None), str(exc))
            return
        logged = [(b.offset, b.length, b.num_rows) for b in f.blocklets]
        if scanned != logged:
            first = next(
                (i for i, (a, b) in enumerate(zip(scanned, logged, strict=False)) if a != b),
                min(len(scanned), len(logged)),
            )
            at = logged[first][0] if first < len(logged) else None
            yield Problem(
                f.path,
                at,
                f"the file holds {len(scanned)} blocklets up to its committed length but the log lists "
                f"{len(logged)}; they first differ at blocklet {first}",
            )
        blooms = _BloomFiles(storage, root)
        checked = ordered_map(lambda b: _check_blocklet(reader, f, b, types, blooms), f.blocklets)
        for entry, problems in zip(f.blocklets, checked, strict=True):
            advance(entry.length)
            yield from problems
    yield from _check_deletions(storage, root, f)


def _check_deletions(storage: Storage, root: str, f: FileState) -> Iterator[Problem]:
    """The problems of ``f``'s deletion vectors."""
    if not f.deletions:
        return
    rows = {b.offset: b.num_rows for b in f.blocklets}
    for offset, ref in f.deletion_items():
        if offset not in rows:
            yield Problem(f.path, offset, f"a deletion vector names no blocklet at {offset}")
            continue
        try:
            data = storage.read(storage.join(root, ref.path), ref.offset, ref.offset + ref.length)
            vector = DeletionVector.decode(data)
        except FileNotFoundError:
            yield Problem(ref.path, None, f"the deletion-vector file of {f.path!r} is missing")
            continue
        except ValueError as exc:
            yield Problem(ref.path, ref.offset, f"deletion vector of blocklet {offset}: {exc}")
            continue
        if (vector.row_count, vector.cardinality) != (rows[offset], ref.cardinality):
            yield Problem(
                ref.path,
                ref.offset,
                f"deletion vector of blocklet {offset} of {f.path!r} covers "
                f"{vector.row_count} rows and deletes {vector.cardinality}; the log says "
                f"{rows[offset]} rows and {ref.cardinality} deleted",
            )


def verify(
    log: Log,
    snapshot: Snapshot,
    *,
    storage_options: Mapping[str, Any] | None = None,
    progress: ProgressCallback | None = None,
) -> VerifyResult:
    """Check every live file of ``snapshot``. ``progress(done, total)`` counts committed bytes,
    advancing as each blocklet is checked (``carbonlite/compaction/progress.py``)."""
    types = {field.name: field.type for field in snapshot.schema}
    problems: list[Problem] = []
    files = blocklets = rows = 0
    live = list(snapshot.iter_files())
    counter = ProgressCounter(progress, sum(f.committed_length for _, f in live))
    for _seg, f in live:
        files += 1
        blocklets += len(f.blocklets)
        rows += f.num_rows
        before = counter.done
        problems.extend(_check_file(log, f, types, storage_options, counter.advance))
        counter.advance(f.committed_length - (counter.done - before))  # headers, or a bad file
    counter.finish()
    return VerifyResult(snapshot.version, files, blocklets, rows, tuple(problems))
