"""Manifests: immutable columnar files of blocklet entries that checkpoints reference.

A checkpoint of log format 3 does not copy the table's blocklet entries; it lists
*manifests* (``_carbonlite/manifests/<32 hex>.arrow``, Arrow IPC files of entries, see
``blocklet_index.py``), each written once and reused by every later checkpoint until it is
merged into a bigger one or every file it describes is gone. A checkpoint writes one new
manifest holding only the entries committed since the previous checkpoint, so the metadata
written per commit stays proportional to what the commits changed (Iceberg's manifests and
Delta's v2 checkpoint sidecars work the same way).

Each :class:`ManifestRef` in a checkpoint carries the manifest's checksum, its entry count,
the versions it covers, the segments it holds entries of and a summary of its statistics
(every blocklet's bounds merged), so the planner skips whole manifests before reading them.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.errors import CorruptDataError, UnsupportedFormatError
from carbonlite.format.layout import crc32c
from carbonlite.format.stats import ColumnStats
from carbonlite.format.types import stat_kind
from carbonlite.metadata.actions import BlockletEntry
from carbonlite.metadata.blocklet_index import (
    RESERVED_COLUMNS,
    STATS_PREFIX,
    conform_entries,
    legacy_index_table,
    read_entries,
)

__all__ = [
    "MANIFEST_DIR",
    "MANIFEST_FORMAT",
    "ManifestRef",
    "ManifestSet",
    "ManifestStore",
    "encode_manifest",
    "summarize",
]

MANIFEST_DIR = "_carbonlite/manifests"
MANIFEST_FORMAT = 1
"""Version of the manifest layout (schema metadata ``carbonlite.manifest``)."""
_FORMAT_KEY = b"carbonlite.manifest"


@dataclass(frozen=True, slots=True)
class ManifestRef:
    """What a checkpoint records about one manifest."""

    name: str
    """File name under ``_carbonlite/manifests/``."""
    crc32c: int
    entries: int
    """Blocklet entries (rows) in the manifest."""
    rows: int
    """Table rows in those blocklets."""
    size: int
    """Bytes of the manifest file."""
    min_version: int
    max_version: int
    """The log versions whose entries it holds: all committed by ``max_version``."""
    level: int
    """0 for a manifest of new entries; one more than its inputs' highest for a merge."""
    segments: tuple[str, ...]
    """Segments it holds entries of."""
    stats: Mapping[str, ColumnStats] = field(default_factory=dict)
    """Per column: every entry's statistics merged (absent when some entry has none)."""
    legacy_paths: tuple[str, ...] | None = None
    """Set for the blocklet index of a format 1 or 2 checkpoint seen as a manifest: the
    checkpoint's files in document order, which its ``file`` column numbers."""

    @property
    def is_legacy(self) -> bool:
        return self.legacy_paths is not None


def encode_manifest(table: pa.Table) -> bytes:
    """An entries table as manifest bytes (Arrow IPC file, one record batch)."""
    schema = table.schema.with_metadata({_FORMAT_KEY: str(MANIFEST_FORMAT).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as writer:
        writer.write_table(table.replace_schema_metadata(schema.metadata), max_chunksize=1 << 30)
    return sink.getvalue().to_pybytes()


def decode_manifest(
    data: bytes, ref: ManifestRef, table_schema: pa.Schema, *, where: str
) -> pa.Table:
    """The entries table of a manifest, checked against its reference."""
    if crc32c(data) != ref.crc32c:
        raise CorruptDataError(
            "the manifest fails the checksum its checkpoint records (damaged or replaced)",
            path=where,
        )
    try:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptDataError(f"the manifest does not decode: {exc}", path=where) from None
    declared = (table.schema.metadata or {}).get(_FORMAT_KEY, b"")
    if declared != str(MANIFEST_FORMAT).encode():
        raise UnsupportedFormatError(
            f"{where} is a manifest of layout {declared.decode(errors='replace')!r}; this "
            f"CarbonLite reads layout {MANIFEST_FORMAT}: upgrade carbonlite to read it"
        )
    known = {"file", "offset", "length", "rows", *RESERVED_COLUMNS}
    unknown = [c for c in table.column_names if c not in known and not c.startswith(STATS_PREFIX)]
    if unknown:
        raise UnsupportedFormatError(
            f"{where} has manifest columns {unknown} this CarbonLite does not know: upgrade "
            "carbonlite to read it"
        )
    for name in RESERVED_COLUMNS:
        if name in table.column_names and table.column(name).null_count != table.num_rows:
            raise UnsupportedFormatError(
                f"{where} gives blocklets a {name!r}, which this CarbonLite cannot apply: "
                "upgrade carbonlite to read it"
            )
    if table.num_rows != ref.entries:
        raise CorruptDataError(
            f"the manifest holds {table.num_rows} entries, its checkpoint says {ref.entries}",
            path=where,
        )
    return conform_entries(table, table_schema)


SMALL_SUMMARY_ROWS = 64
"""Manifests of at most this many entries are summarized in Python: a checkpoint's new
manifest usually holds a few, and Arrow's per-call overhead is then most of the cost (1.7 ms
against 0.1 ms for 3 entries of 6 columns). Both ways give the same summary
(``tests/metadata/test_manifests.py``)."""


def summarize(table: pa.Table, schema: pa.Schema) -> dict[str, ColumnStats]:
    """Every entry's statistics merged, per column: a manifest seen as one big blocklet.

    A column gets a summary only when every entry has statistics for it; a bound only when
    every entry that holds a value (rows beyond its nulls and NaNs) has that bound."""
    out: dict[str, ColumnStats] = {}
    if table.num_rows == 0:
        return out
    if table.num_rows <= SMALL_SUMMARY_ROWS:
        return _summarize_rows(table, schema)
    rows = table.column("rows")
    for f in schema:
        name = STATS_PREFIX + f.name
        if name not in table.column_names:
            continue
        column = table.column(name).combine_chunks()
        if column.null_count:
            continue
        nulls = pc.sum(column.field("nulls")).as_py() or 0
        nans = pc.sum(column.field("nans")).as_py() or 0
        low = high = None
        if stat_kind(f.type) is not None:
            valued = pc.greater(
                pc.subtract(
                    rows.combine_chunks(), pc.add(column.field("nulls"), column.field("nans"))
                ),
                0,
            )
            low = _bound(column.field("min"), valued, "min")
            high = _bound(column.field("max"), valued, "max")
        out[f.name] = ColumnStats(null_count=nulls, min=low, max=high, nan_count=nans)
    return out


def _summarize_rows(table: pa.Table, schema: pa.Schema) -> dict[str, ColumnStats]:
    """:func:`summarize` of a small table, entry by entry in Python."""
    out: dict[str, ColumnStats] = {}
    rows = table.column("rows").to_pylist()
    for f in schema:
        name = STATS_PREFIX + f.name
        if name not in table.column_names:
            continue
        entries = table.column(name).to_pylist()
        if any(e is None for e in entries):
            continue
        low = high = None
        if stat_kind(f.type) is not None:
            valued = [
                e for e, n in zip(entries, rows, strict=True) if n - e["nulls"] - e["nans"] > 0
            ]
            lows, highs = [e["min"] for e in valued], [e["max"] for e in valued]
            low = min(lows) if lows and None not in lows else None
            high = max(highs) if highs and None not in highs else None
        nulls = sum(e["nulls"] for e in entries)
        nans = sum(e["nans"] for e in entries)
        out[f.name] = ColumnStats(null_count=nulls, min=low, max=high, nan_count=nans)
    return out


def _bound(values: pa.Array, valued: pa.Array, which: str) -> Any:
    relevant = values.filter(valued)
    if len(relevant) == 0 or relevant.null_count:
        return None  # no value at all, or some entry with values has no such bound
    return pc.min_max(relevant)[which].as_py()


class _Loaded:
    """One decoded manifest and where each file's entries lie in it."""

    __slots__ = ("_runs", "table")

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self._runs: dict[str, list[tuple[int, int]]] | None = None

    def rows_of(self, path: str) -> list[int]:
        if self._runs is None:
            runs: dict[str, list[tuple[int, int]]] = {}
            column = self.table.column("file").combine_chunks()
            indices = column.indices.to_numpy(zero_copy_only=False)
            names = column.dictionary.to_pylist()
            if len(indices):
                starts = np.flatnonzero(np.diff(indices)) + 1
                bounds = [0, *starts.tolist(), len(indices)]
                for a, b in itertools.pairwise(bounds):
                    runs.setdefault(names[indices[a]], []).append((a, b))
            self._runs = runs
        return [i for a, b in self._runs.get(path, ()) for i in range(a, b)]


class ManifestStore:
    """Reads manifests of one table, each once, and keeps them decoded.

    ``read`` gets a manifest's bytes by name; ``where`` gives its full path for errors."""

    def __init__(
        self, read: Callable[[ManifestRef], bytes], where: Callable[[ManifestRef], str]
    ) -> None:
        self._read = read
        self._where = where
        self._loaded: dict[str, _Loaded] = {}
        self._lock = threading.Lock()

    def put(self, ref: ManifestRef, table: pa.Table) -> None:
        """Remember a manifest this process just wrote (no need to read it back)."""
        with self._lock:
            self._loaded[ref.name] = _Loaded(table)

    def load(self, ref: ManifestRef, schema: pa.Schema) -> _Loaded:
        with self._lock:
            loaded = self._loaded.get(ref.name)
        if loaded is not None:
            if loaded.table.schema.names != _names(schema):
                loaded = _Loaded(conform_entries(loaded.table, schema))
            return loaded
        where = self._where(ref)
        try:
            data = self._read(ref)
        except FileNotFoundError:
            raise CorruptDataError(
                "a manifest the checkpoint lists is gone (deleted by hand, or by a clean after "
                "this table was opened: open it again)",
                path=where,
            ) from None
        if ref.legacy_paths is not None:
            if ref.crc32c >= 0 and crc32c(data) != ref.crc32c:
                raise CorruptDataError(
                    "the checkpoint's blocklet index fails the checksum its document records",
                    path=where,
                )
            table = legacy_index_table(data, ref.legacy_paths, schema, where=where)
        else:
            table = decode_manifest(data, ref, schema, where=where)
        loaded = _Loaded(table)
        with self._lock:
            self._loaded.setdefault(ref.name, loaded)
        return loaded

    def forget(self, keep: Sequence[ManifestRef]) -> None:
        """Drop decoded manifests other than ``keep`` (they are read again if needed)."""
        names = {r.name for r in keep}
        with self._lock:
            for name in [n for n in self._loaded if n not in names]:
                del self._loaded[name]


def _names(schema: pa.Schema) -> list[str]:
    return [
        "file",
        "offset",
        "length",
        "rows",
        *RESERVED_COLUMNS,
        *(STATS_PREFIX + n for n in schema.names),
    ]


@dataclass(frozen=True, eq=False)
class ManifestSet:
    """The manifests of one checkpoint: where the entries of its files live."""

    refs: tuple[ManifestRef, ...]
    store: ManifestStore
    schema: pa.Schema
    version: int = -1
    """The version of the checkpoint whose state they hold."""

    def tables(self) -> list[tuple[ManifestRef, pa.Table]]:
        return [(ref, self.store.load(ref, self.schema).table) for ref in self.refs]

    def entries(self, path: str, segment_id: str) -> list[BlockletEntry]:
        """Every entry of the file ``path`` (of ``segment_id``) in these manifests, in file
        order."""
        out: list[BlockletEntry] = []
        for ref in self.refs:
            if ref.legacy_paths is None and segment_id not in ref.segments:
                continue
            loaded = self.store.load(ref, self.schema)
            out += read_entries(loaded.table, loaded.rows_of(path), self.schema)
        out.sort(key=lambda b: b.offset)
        return out
