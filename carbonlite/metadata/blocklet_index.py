"""Blocklet entries as Arrow columns: the codec shared by manifests and legacy checkpoints.

An *entries table* has one row per blocklet: ``file`` (the data file's path,
dictionary-encoded), ``offset``, ``length``, ``rows``, the reserved ``partition`` and
``deletion_vector`` columns, and for each table column a struct ``stats.<name>``
``{nulls, nans, min, max}`` (null when the blocklet has no statistics for the column, e.g. a
column added after it was written). Bounds are typed in the column's statistics domain:
int64 / uint64 / float64 / bool / string / binary / the column's decimal type. Statistics
columns are named ``stats.<column>``, so a table column named like a fixed column cannot clash.

The planner prunes over these columns with Arrow compute; only the blocklets a caller needs
as objects (a file being compacted, verified) are turned into :class:`BlockletEntry`.

Checkpoints of log format 1 and 2 stored every entry in one *blocklet index* whose ``file``
column is the file's position in the checkpoint document; :func:`legacy_index_table` turns
one into an entries table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.errors import CorruptDataError
from carbonlite.format.stats import ColumnStats
from carbonlite.format.types import StatKind, stat_kind
from carbonlite.metadata.actions import BlockletEntry

__all__ = [
    "RESERVED_COLUMNS",
    "STATS_PREFIX",
    "conform_entries",
    "encode_blocklet_index",
    "entries_table",
    "legacy_index_table",
    "read_entries",
    "stats_type",
]

STATS_PREFIX = "stats."
"""Statistics columns are named ``stats.<column>``: a table column may be named ``file``."""

RESERVED_COLUMNS = ("partition", "deletion_vector")
"""Per-blocklet columns kept for what comes next (partition values, deletion vectors).
Always null in log format 3; a reader refuses a value it does not know how to apply."""

_BOUND_TYPES: dict[str, pa.DataType] = {
    "int": pa.int64(),
    "uint": pa.uint64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
}
_FILE_TYPE = pa.dictionary(pa.int32(), pa.string())


def _bound_type(kind: StatKind | None, column_type: pa.DataType) -> pa.DataType | None:
    if kind is None:
        return None
    if kind == "decimal":
        return column_type
    return _BOUND_TYPES[kind]


def stats_type(column_type: pa.DataType) -> pa.DataType:
    """The struct type of the statistics column of a table column of ``column_type``."""
    fields = [
        pa.field("nulls", pa.int64(), nullable=False),
        pa.field("nans", pa.int64(), nullable=False),
    ]
    bound = _bound_type(stat_kind(column_type), column_type)
    if bound is not None:
        fields += [pa.field("min", bound), pa.field("max", bound)]
    return pa.struct(fields)


def _entries_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema(
        [
            pa.field("file", _FILE_TYPE, nullable=False),
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("length", pa.int64(), nullable=False),
            pa.field("rows", pa.int64(), nullable=False),
            pa.field("partition", pa.string()),
            pa.field("deletion_vector", pa.string()),
            *(pa.field(STATS_PREFIX + f.name, stats_type(f.type)) for f in schema),
        ]
    )


def entries_table(
    groups: Iterable[tuple[str, Sequence[BlockletEntry]]], schema: pa.Schema
) -> pa.Table:
    """The entries table of ``groups`` (a file's path and its entries, in order)."""
    paths: list[str] = []
    position: list[int] = []
    offset: list[int] = []
    length: list[int] = []
    rows: list[int] = []
    stats: dict[str, list[dict[str, object] | None]] = {f.name: [] for f in schema}
    bounded = {f.name: stat_kind(f.type) is not None for f in schema}
    for path, entries in groups:
        if not entries:
            continue
        i = len(paths)
        paths.append(path)
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
    n = len(position)
    target = _entries_schema(schema)
    arrays = [
        pa.DictionaryArray.from_arrays(
            pa.array(position, pa.int32()), pa.array(paths, pa.string())
        ),
        pa.array(offset, pa.int64()),
        pa.array(length, pa.int64()),
        pa.array(rows, pa.int64()),
        pa.nulls(n, pa.string()),
        pa.nulls(n, pa.string()),
        *(pa.array(stats[f.name], stats_type(f.type)) for f in schema),
    ]
    return pa.Table.from_arrays(arrays, schema=target)


def conform_entries(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly the columns of an entries table for ``schema``: statistics of a
    column it lacks (added later) are null, of a column ``schema`` does not have are dropped."""
    target = _entries_schema(schema)
    arrays = []
    for field in target:
        have = table.schema.field(field.name).type if field.name in table.column_names else None
        if have == field.type:
            arrays.append(table.column(field.name))
        elif field.name == "file":
            arrays.append(pc.dictionary_encode(table.column("file")).cast(_FILE_TYPE))
        elif have is not None and _widened_decimal_bounds(have, field.type):
            arrays.append(table.column(field.name).cast(field.type))
        else:
            arrays.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(arrays, schema=target)


def _widened_decimal_bounds(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether statistics of type ``have`` are those of a decimal column widened to ``want``
    (more precision, the same scale: a widening that keeps the column's physical name), so
    casting the bounds keeps every value exactly."""
    if not (pa.types.is_struct(have) and pa.types.is_struct(want)):
        return False
    if [f.name for f in have] != [f.name for f in want] or "min" not in have.names:
        return False
    old, new = have.field("min").type, want.field("min").type
    return (
        pa.types.is_decimal(old)
        and pa.types.is_decimal(new)
        and old.scale == new.scale
        and old.precision <= new.precision
    )


def read_entries(table: pa.Table, rows: Sequence[int], schema: pa.Schema) -> list[BlockletEntry]:
    """The blocklets at ``rows`` of an entries table, as objects with their statistics."""
    if not rows:
        return []
    taken = table.take(pa.array(rows, pa.int64()))
    offsets = taken.column("offset").to_pylist()
    lengths = taken.column("length").to_pylist()
    counts = taken.column("rows").to_pylist()
    columns = [
        (f.name, taken.column(STATS_PREFIX + f.name).to_pylist())
        for f in schema
        if STATS_PREFIX + f.name in taken.column_names
    ]
    out = []
    for i in range(len(offsets)):
        stats = {}
        for name, values in columns:
            v = values[i]
            if v is not None:
                stats[name] = ColumnStats(
                    null_count=v["nulls"], min=v.get("min"), max=v.get("max"), nan_count=v["nans"]
                )
        out.append(BlockletEntry(offsets[i], lengths[i], counts[i], stats))
    return out


def encode_blocklet_index(files: Sequence[Sequence[BlockletEntry]], schema: pa.Schema) -> bytes:
    """A blocklet index of log format 1 and 2 (one row per blocklet, ``file`` numbering
    ``files``) as Arrow IPC file bytes: what checkpoints of tables not yet upgraded hold."""
    table = entries_table(((str(i), entries) for i, entries in enumerate(files)), schema)
    used = [int(p) for p in table.column("file").combine_chunks().dictionary.to_pylist()]
    indices = table.column("file").combine_chunks().indices
    position = pa.array(used, pa.int32()).take(indices) if used else pa.array([], pa.int32())
    columns = [position, *(table.column(n) for n in ("offset", "length", "rows"))]
    names = ["file", "offset", "length", "rows"]
    for f in schema:
        columns.append(table.column(STATS_PREFIX + f.name))
        names.append(STATS_PREFIX + f.name)
    legacy = pa.Table.from_arrays(columns, names=names)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, legacy.schema) as writer:
        writer.write_table(legacy)
    return sink.getvalue().to_pybytes()


_stats_type = stats_type  # the name the legacy index tests know


def legacy_index_table(
    data: bytes, paths: Sequence[str], schema: pa.Schema, *, where: str
) -> pa.Table:
    """A blocklet index of log format 1 or 2 (its ``file`` column numbers the checkpoint's
    files, ``paths`` in document order) as an entries table for ``schema``."""
    try:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
        positions = table.column("file").cast(pa.int32()).combine_chunks()
        if len(positions) and pc.max(positions).as_py() >= len(paths):
            raise ValueError("a blocklet names a file position past the checkpoint's files")
        files = pa.DictionaryArray.from_arrays(positions, pa.array(list(paths), pa.string()))
        table = table.set_column(0, "file", files)
        return conform_entries(table, schema)
    except (pa.ArrowException, KeyError, OSError, ValueError) as exc:
        raise CorruptDataError(
            f"the checkpoint's blocklet index does not decode: {exc}", path=where
        ) from None
