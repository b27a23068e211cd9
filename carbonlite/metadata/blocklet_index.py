"""The columnar blocklet index of a checkpoint (docs/LOG.md, "Checkpoints").

One Arrow IPC file, one row per blocklet of every file the checkpoint lists, in checkpoint
order: ``file`` (position of the file in the checkpoint), ``offset``, ``length``, ``rows``, and
for each table column a struct ``stats.<name>`` ``{nulls, nans, min, max}`` (null when the blocklet has no
statistics for the column, e.g. a column added after it was written). Bounds are typed in the
column's statistics domain: int64 / uint64 / float64 / bool / string / binary / the column's
decimal type. Statistics columns are named ``stats.<column>``, so a table column named like a
fixed column cannot clash. The checkpoint document records the index's CRC-32C. Reading it is one Arrow decode, done only when a scan needs the entries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pyarrow as pa

from carbonlite.errors import CorruptDataError
from carbonlite.format.layout import crc32c
from carbonlite.format.stats import ColumnStats
from carbonlite.format.types import StatKind, stat_kind
from carbonlite.metadata.actions import BlockletEntry

__all__ = ["STATS_PREFIX", "BlockletIndex", "encode_blocklet_index"]

STATS_PREFIX = "stats."
"""Statistics columns are named ``stats.<column>``: a table column may be named ``file``."""

_BOUND_TYPES: dict[str, pa.DataType] = {
    "int": pa.int64(),
    "uint": pa.uint64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
}


def _bound_type(kind: StatKind | None, column_type: pa.DataType) -> pa.DataType | None:
    if kind is None:
        return None
    if kind == "decimal":
        return column_type
    return _BOUND_TYPES[kind]


def _stats_type(column_type: pa.DataType) -> pa.DataType:
    fields = [
        pa.field("nulls", pa.int64(), nullable=False),
        pa.field("nans", pa.int64(), nullable=False),
    ]
    bound = _bound_type(stat_kind(column_type), column_type)
    if bound is not None:
        fields += [pa.field("min", bound), pa.field("max", bound)]
    return pa.struct(fields)


def encode_blocklet_index(files: Sequence[Sequence[BlockletEntry]], schema: pa.Schema) -> bytes:
    """The index of ``files`` (each a sequence of entries) as Arrow IPC file bytes."""
    position: list[int] = []
    offset: list[int] = []
    length: list[int] = []
    rows: list[int] = []
    stats: dict[str, list[dict[str, object] | None]] = {f.name: [] for f in schema}
    bounded = {f.name: stat_kind(f.type) is not None for f in schema}
    for i, entries in enumerate(files):
        for b in entries:
            position.append(i)
            offset.append(b.offset)
            length.append(b.length)
            rows.append(b.num_rows)
            for name, column in stats.items():
                s = b.stats.get(name)
                if s is None:
                    column.append(None)
                elif bounded[name]:
                    column.append(
                        {"nulls": s.null_count, "nans": s.nan_count, "min": s.min, "max": s.max}
                    )
                else:
                    column.append({"nulls": s.null_count, "nans": s.nan_count})
    arrays = [
        pa.array(position, pa.int32()),
        pa.array(offset, pa.int64()),
        pa.array(length, pa.int64()),
        pa.array(rows, pa.int64()),
        *(pa.array(stats[f.name], _stats_type(f.type)) for f in schema),
    ]
    names = ["file", "offset", "length", "rows", *(STATS_PREFIX + n for n in schema.names)]
    table = pa.Table.from_arrays(arrays, names=names)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


class BlockletIndex:
    """Lazily decodes an index file once; hands out each file's entries."""

    def __init__(
        self, read: Callable[[], bytes], schema: pa.Schema, *, where: str, crc: int | None = None
    ) -> None:
        self._read = read
        self._crc = crc
        self._schema = schema
        self._where = where
        self._files: list[tuple[BlockletEntry, ...]] | None = None
        self._lock = threading.Lock()

    def file(self, position: int) -> tuple[BlockletEntry, ...]:
        with self._lock:
            if self._files is None:
                self._files = self._decode()
        return self._files[position] if position < len(self._files) else ()

    def loader(self, position: int) -> Callable[[], tuple[BlockletEntry, ...]]:
        return lambda: self.file(position)

    def _decode(self) -> list[tuple[BlockletEntry, ...]]:
        try:
            data = self._read()
        except FileNotFoundError:
            raise CorruptDataError(
                "the checkpoint's blocklet index is gone (deleted after the table was opened)",
                path=self._where,
            ) from None
        if self._crc is not None and crc32c(data) != self._crc:
            raise CorruptDataError(
                "the checkpoint's blocklet index fails the checksum its document records",
                path=self._where,
            )
        try:
            table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
            positions = table.column("file").to_pylist()
            offsets = table.column("offset").to_pylist()
            lengths = table.column("length").to_pylist()
            rows = table.column("rows").to_pylist()
            columns = [
                (name, table.column(STATS_PREFIX + name).to_pylist())
                for name in self._schema.names
                if STATS_PREFIX + name in table.column_names
            ]
        except (pa.ArrowException, KeyError, OSError, ValueError) as exc:
            raise CorruptDataError(
                f"the checkpoint's blocklet index does not decode: {exc}", path=self._where
            ) from None
        count = (positions[-1] + 1) if positions else 0
        files: list[list[BlockletEntry]] = [[] for _ in range(count)]
        for i, pos in enumerate(positions):
            stats = {}
            for name, values in columns:
                v = values[i]
                if v is not None:
                    stats[name] = ColumnStats(
                        null_count=v["nulls"],
                        min=v.get("min"),
                        max=v.get("max"),
                        nan_count=v["nans"],
                    )
            files[pos].append(BlockletEntry(offsets[i], lengths[i], rows[i], stats))
        return [tuple(f) for f in files]
