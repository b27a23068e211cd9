"""Column ids: how a table's columns lie in its data files (schema evolution, format 6).

A table of format 6 gives each top-level column a stable ``id`` and a ``physical`` name, the
name its pages carry in data files and its statistics carry in the log. A column keeps both
for life: a rename changes only the table's (logical) name, a drop removes the column from
the schema while its pages stay in old files, unread, and a column added later gets a fresh
id and a physical name no other column had (``col-<id>-<random>``), so the pages of a dropped
column of the same name never come back. Columns of tables created with ids start with their
own names as physical names, so files look as they did.

A widening keeps the physical name when the statistics keep their domain (integers, floats,
decimals of one scale); ``date`` to ``timestamp`` changes it, and the old name goes into
``previous``: files written before are read under it and cast, while their statistics, in
days, are no longer found for the column (no pruning by them, never a wrong one).

A column may have a ``default`` (Iceberg's ``initial-default`` and ``write-default``, the
same value): rows of files written before it existed read it, and writers fill it for rows
that leave the column out. Tables without ids (format 5 and older, until ``Table.upgrade``)
map every column to its own name, with no defaults.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from carbonlite.format.stats import stat_from_json, stat_to_json

__all__ = [
    "COLUMN_ID_FORMAT_VERSION",
    "IDENTITY",
    "ColumnLayout",
    "ColumnMapping",
    "ColumnNow",
    "DroppedColumn",
    "column_ids",
    "columns_now",
    "fresh_physical_name",
    "layout_of",
    "moved_columns",
    "physical_schema",
    "physical_to_logical",
    "retired_names",
    "with_column_ids",
]

COLUMN_ID_FORMAT_VERSION = 6
"""The first log format whose tables give columns ids (rename, drop, widen, defaults)."""


@dataclass(frozen=True, slots=True)
class ColumnMapping:
    """Where one column of the schema lies: its id, its name in data files and statistics,
    the older physical names its data may still be under, its default."""

    id: int
    physical: str
    previous: tuple[tuple[str, str], ...] = ()
    """Older physical names with the type written under each (a widening that changed the
    statistics' domain), newest first: ``(name, type as JSON text)``."""
    default: Any = None
    """The default as a Python value of the column's type (``has_default`` says if set)."""
    has_default: bool = False
    since: int | None = None
    """The version at which the column got its present name (by a rename, or being added;
    None: at the table's creation, or unknown). A widening leaves it (tables written before
    this rule may hold a widening's version)."""
    former_names: tuple[str, ...] = ()
    """Names it had before, oldest first (so a writer still using one is told of the rename)."""
    widened_since: int | None = None
    """The version of its last widening (None: never widened)."""


@dataclass(frozen=True, slots=True)
class DroppedColumn:
    """A column dropped from the schema: its pages stay in older files, never read again."""

    id: int
    name: str
    physical: str
    version: int | None = None
    previous: tuple[str, ...] = ()
    """Older physical names its pages are under in older files (it was a date widened to a
    timestamp): no column added later may take one of them either."""


@dataclass(frozen=True, slots=True)
class ColumnLayout:
    """What a reader of data files needs: for each column of the schema, the names to look
    for in a file (the physical name, then older ones) and the value of rows of a file that
    has none of them."""

    names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Logical name -> physical names, newest first. A column absent here is under its own
    name (tables without ids)."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """Logical name -> the value rows read where a file lacks the column (else null)."""

    is_identity: bool = field(init=False)
    """Every column under its own name and no defaults: files are read and written as they
    are (computed once)."""

    def __post_init__(self) -> None:
        identity = not self.defaults and all(
            names == (logical,) for logical, names in self.names.items()
        )
        object.__setattr__(self, "is_identity", identity)

    def file_names(self, logical: str) -> tuple[str, ...]:
        return self.names.get(logical, (logical,))

    def physical(self, logical: str) -> str:
        return self.file_names(logical)[0]

    def file_schema(self, schema: pa.Schema) -> pa.Schema:
        """``schema`` (logical names) with the physical names data files are written with."""
        if self.is_identity:
            return schema
        return pa.schema(
            [f.with_name(self.physical(f.name)) for f in schema], metadata=schema.metadata
        )

    def to_file(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` (logical names) as written into data files."""
        if self.is_identity:
            return batch
        return batch.rename_columns([self.physical(n) for n in batch.schema.names])

    def read_column(
        self, logical: pa.Field, file_schema: pa.Schema, read: Any, num_rows: int
    ) -> pa.Array | None:
        """The column ``logical`` of a blocklet, given its file's schema and ``read(name)``
        returning the pages of a file column: found under its newest physical name the file
        has (in the file's type: the reader casts the batch up), or its default (None: the
        caller reads nulls)."""
        for name in self.file_names(logical.name):
            index = file_schema.get_field_index(name)
            if index >= 0:
                array = read(name)  # of an older type: cast up as the batch is built
                return array
        if logical.name in self.defaults:
            return pa.repeat(pa.scalar(self.defaults[logical.name], logical.type), num_rows)
        return None


IDENTITY = ColumnLayout()


_last_layout: tuple[Any, ColumnLayout] = (None, IDENTITY)
"""The last metadata asked for and its layout (one tuple: threads read it whole)."""


def layout_of(metadata: Any) -> ColumnLayout:
    """The :class:`ColumnLayout` of a table's metadata (``TableMetadata``); the same object
    for the same metadata."""
    columns: Sequence[ColumnMapping] = metadata.columns
    if not columns:
        return IDENTITY
    global _last_layout
    last = _last_layout
    if last[0] is metadata:
        return last[1]
    layout = _layout(metadata, columns)
    _last_layout = (metadata, layout)
    return layout


def _layout(metadata: Any, columns: Sequence[ColumnMapping]) -> ColumnLayout:
    names, defaults = {}, {}
    for f, c in zip(metadata.schema, columns, strict=True):
        names[f.name] = (c.physical, *(name for name, _ in c.previous))
        if c.has_default:
            defaults[f.name] = c.default
    return ColumnLayout(names, defaults)


_last_physical: tuple[Any, pa.Schema | None] = (None, None)
"""The last metadata asked for and its physical schema (one tuple: threads read it whole)."""


def physical_schema(metadata: Any) -> pa.Schema:
    """The schema data files are written with and statistics are keyed by (the same object
    for the same metadata, so per-schema caches of statistics decoders hold)."""
    global _last_physical
    last = _last_physical
    if last[0] is metadata and last[1] is not None:
        return last[1]
    schema = layout_of(metadata).file_schema(metadata.schema)
    _last_physical = (metadata, schema)
    return schema


def physical_to_logical(metadata: Any) -> dict[str, str]:
    """Physical name -> logical name of every column of the schema."""
    columns: Sequence[ColumnMapping] = metadata.columns
    if not columns:
        return {n: n for n in metadata.schema.names}
    return {c.physical: f.name for f, c in zip(metadata.schema, columns, strict=True)}


def fresh_physical_name(column_id: int) -> str:
    """A physical name no column of any table had: the id and a random part."""
    return f"col-{column_id}-{uuid.uuid4().hex[:12]}"


# --- the log's JSON form ------------------------------------------------------------------------


def _int_type(t: pa.DataType) -> pa.DataType | None:
    """The integer type a temporal default is written as (its physical domain), else None."""
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return pa.int32()
    if pa.types.is_temporal(t):
        return pa.int64()
    return None


def default_to_json(value: Any, t: pa.DataType) -> Any:
    """A default (a Python value of type ``t``) as JSON: temporal values as integers in the
    column's unit, the rest as statistics bounds are written (decimals as text, binary as
    base64, infinities as text), and NaN as ``"NaN"``."""
    if value is None:
        return None
    as_int = _int_type(t)
    if as_int is not None:
        return pa.scalar(value, t).cast(as_int).as_py()
    if pa.types.is_floating(t) and value != value:
        return "NaN"
    return stat_to_json(value, t)


def default_from_json(obj: Any, t: pa.DataType) -> Any:
    """Inverse of :func:`default_to_json`."""
    if obj is None:
        return None
    as_int = _int_type(t)
    if as_int is not None:
        return pa.scalar(obj, as_int).cast(t).as_py()
    return stat_from_json(obj, t)


def columns_to_json(columns: Sequence[ColumnMapping], schema: pa.Schema) -> list[dict[str, Any]]:
    out = []
    for f, c in zip(schema, columns, strict=True):
        obj: dict[str, Any] = {"id": c.id, "physical": c.physical}
        if c.previous:
            obj["previous"] = [list(p) for p in c.previous]
        if c.has_default:
            obj["default"] = default_to_json(c.default, f.type)
        if c.since is not None:
            obj["since"] = c.since
        if c.former_names:
            obj["former_names"] = list(c.former_names)
        if c.widened_since is not None:
            obj["widened_since"] = c.widened_since
        out.append(obj)
    return out


def columns_from_json(
    obj: Sequence[Mapping[str, Any]], schema: pa.Schema
) -> tuple[ColumnMapping, ...]:
    if len(obj) != len(schema):
        raise ValueError(f"{len(obj)} column ids for a schema of {len(schema)} columns")
    return tuple(
        ColumnMapping(
            id=int(c["id"]),
            physical=str(c["physical"]),
            previous=tuple((str(n), str(t)) for n, t in c.get("previous", ())),
            default=default_from_json(c.get("default"), f.type),
            has_default="default" in c,
            since=c.get("since"),
            former_names=tuple(str(n) for n in c.get("former_names", ())),
            widened_since=c.get("widened_since"),
        )
        for f, c in zip(schema, obj, strict=True)
    )


def dropped_to_json(dropped: Sequence[DroppedColumn]) -> list[dict[str, Any]]:
    out = []
    for d in dropped:
        obj: dict[str, Any] = {
            "id": d.id,
            "name": d.name,
            "physical": d.physical,
            "version": d.version,
        }
        if d.previous:
            obj["previous"] = list(d.previous)
        out.append(obj)
    return out


def dropped_from_json(obj: Sequence[Mapping[str, Any]]) -> tuple[DroppedColumn, ...]:
    return tuple(
        DroppedColumn(
            int(d["id"]),
            str(d["name"]),
            str(d["physical"]),
            d.get("version"),
            tuple(str(p) for p in d.get("previous", ())),
        )
        for d in obj
    )


# --- changes -------------------------------------------------------------------------------------

PENDING = -1
"""``since``/``version`` of a change not committed yet: the commit puts its version there."""


def stamped(metadata: Any, version: int) -> Any:
    """``metadata`` with the pending versions of its changes set to ``version``."""
    columns = tuple(
        dataclasses.replace(
            c,
            since=version if c.since == PENDING else c.since,
            widened_since=version if c.widened_since == PENDING else c.widened_since,
        )
        if PENDING in (c.since, c.widened_since)
        else c
        for c in metadata.columns
    )
    dropped = tuple(
        dataclasses.replace(d, version=version) if d.version == PENDING else d
        for d in metadata.dropped
    )
    if columns == metadata.columns and dropped == metadata.dropped:
        return metadata
    return dataclasses.replace(metadata, columns=columns, dropped=dropped)


_INT_ORDER = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UINT_ORDER = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


def widening_problem(old: pa.DataType, new: pa.DataType) -> str | None:
    """None when ``old`` widens to ``new`` (every value of ``old`` is exactly a value of
    ``new``), else why not."""
    if old == new:
        return f"it is already {new}"
    for order in (_INT_ORDER, _UINT_ORDER):
        if old in order and new in order:
            return None if order.index(new) > order.index(old) else "that is a narrowing"
    if pa.types.is_float32(old) and pa.types.is_float64(new):
        return None
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        if old.scale != new.scale:
            return "a decimal widens only at the same scale"
        return None if new.precision > old.precision else "that is a narrowing"
    if pa.types.is_date32(old) and pa.types.is_timestamp(new):
        return None
    return (
        "the widenings are int8 -> int16 -> int32 -> int64, float32 -> float64, decimal "
        "precision up at the same scale, and date -> timestamp"
    )


def _columns_by_physical(metadata: Any) -> dict[str, tuple[str, pa.DataType, Any]]:
    """Physical name -> (logical name, type, mapping or None) of every column."""
    columns: Sequence[ColumnMapping] = metadata.columns
    if not columns:
        return {f.name: (f.name, f.type, None) for f in metadata.schema}
    return {
        name: (f.name, f.type, c)
        for f, c in zip(metadata.schema, columns, strict=True)
        for name in (c.physical, *(p for p, _ in c.previous))
    }


def _at(version: int | None) -> str:
    return f" at version {version}" if version is not None and version >= 0 else ""


def schema_change_problems(written: Any, latest: Any, *, widened: bool = False) -> list[str]:
    """What makes rows written with table metadata ``written`` unfit for a table whose
    metadata is now ``latest``: a column of theirs renamed or dropped since (named, with the
    version). Widened and added columns are fine: older files are read cast up, or read the
    default. With ``widened``, widenings are listed too (a stream's schema is fixed when it
    starts: a reader with ``written`` cannot read a widened column; added columns are simply
    not read)."""
    if written.schema.equals(latest.schema) and written.columns == latest.columns:
        return []
    now = _columns_by_physical(latest)
    dropped = {p: d for d in latest.dropped for p in (d.physical, *d.previous)}
    problems = []
    for physical, (name, t, _) in _columns_by_physical(written).items():
        if physical not in now:
            d = dropped.get(physical)
            problems.append(f"column {name!r} was dropped{_at(d.version if d else None)}")
            continue
        new_name, new_type, mapping = now[physical]
        if new_name != name:
            problems.append(
                f"column {name!r} was renamed to {new_name!r}{_at(mapping.since if mapping else None)}"
            )
        elif new_type != t and widening_problem(t, new_type) is not None:
            problems.append(f"column {name!r} changed type from {t} to {new_type}")
        elif new_type != t and widened:
            since = mapping.widened_since if mapping else None
            problems.append(f"column {name!r} was widened from {t} to {new_type}{_at(since)}")
    return problems


def former_name_problems(names: Sequence[str], metadata: Any) -> list[str]:
    """For columns of incoming data the table lacks: the rename or drop that explains it."""
    renamed = {
        old: (f.name, c.since)
        for f, c in zip(metadata.schema, metadata.columns, strict=False)
        for old in c.former_names
    }
    dropped = {d.name: d.version for d in metadata.dropped}
    out = []
    for n in names:
        if n in metadata.schema.names:
            continue
        if n in renamed:
            out.append(f"column {n!r} was renamed to {renamed[n][0]!r}{_at(renamed[n][1])}")
        elif n in dropped:
            out.append(f"column {n!r} was dropped{_at(dropped[n])}")
    return out


def column_ids(metadata: Any) -> tuple[int, ...]:
    """The id of each column of the schema, in schema order. A table without ids (format 5
    and older) has the ids it will get (:func:`with_column_ids`: 1, 2, ... in schema order;
    until then columns are only ever added at the end, so these never change)."""
    columns: Sequence[ColumnMapping] = metadata.columns
    if columns:
        return tuple(c.id for c in columns)
    return tuple(range(1, len(metadata.schema) + 1))


@dataclass(frozen=True, slots=True)
class ColumnNow:
    """What became of a column, known by its id: its present name (None: dropped) and the
    version of the change (its rename or drop; None: none, or unknown)."""

    name: str | None
    version: int | None = None


def columns_now(ids: Sequence[int], metadata: Any) -> list[ColumnNow | None]:
    """For each column id: what became of the column in ``metadata`` (None: an id the table
    never gave, so the rows were taken for another table of the same path)."""
    present: dict[int, ColumnNow] = {}
    for f, i, c in zip(metadata.schema, column_ids(metadata), _mappings(metadata), strict=True):
        present[i] = ColumnNow(f.name, c.since if c is not None and c.former_names else None)
    gone = {d.id: ColumnNow(None, d.version) for d in metadata.dropped}
    return [present.get(i) or gone.get(i) for i in ids]


def _mappings(metadata: Any) -> Sequence[ColumnMapping | None]:
    columns: Sequence[ColumnMapping] = metadata.columns
    return columns if columns else [None] * len(metadata.schema)


def moved_columns(names: Sequence[str], shown: Any, now: Any) -> list[str]:
    """For each of ``names`` that is a column of ``shown`` (the metadata a writer saw when it
    named its columns): the rename or drop of that very column (by id) since, in ``now``,
    one line each; a name another column holds now says so too. Names ``shown`` lacks, and
    columns only widened or added since, are fine."""
    if shown is now or (shown.schema.equals(now.schema) and shown.columns == now.columns):
        return []
    then = dict(zip(shown.schema.names, column_ids(shown), strict=True))
    named = [n for n in dict.fromkeys(names) if n in then]
    since = {f.name: c.since for f, c in zip(now.schema, now.columns, strict=False)}
    out = []
    for n, column in zip(named, columns_now([then[n] for n in named], now), strict=True):
        if column is not None and column.name == n:
            continue
        if column is None or column.name is None:
            line = f"column {n!r} was dropped{_at(column.version if column else None)}"
            if n in now.schema.names:
                at = since.get(n)
                line += f"; the table's {n!r} is another column now" + (
                    f" (since version {at})" if at is not None and at >= 0 else ""
                )
        else:
            line = f"column {n!r} was renamed to {column.name!r}{_at(column.version)}"
        out.append(line)
    return out


def retired_names(metadata: Any) -> dict[str, str]:
    """Names of columns renamed or dropped (and not taken again by a present column) ->
    the change, as :func:`former_name_problems` words it (for writers that match by name)."""
    names = [n for c in metadata.columns for n in c.former_names]
    names += [d.name for d in metadata.dropped]
    return {n: p for n in dict.fromkeys(names) for p in former_name_problems([n], metadata)}


def with_column_ids(metadata: Any) -> Any:
    """``metadata`` with an id for every column (1, 2, ...; physical names: their present
    names) and format 6; unchanged when it has ids."""
    if metadata.columns:
        return metadata
    columns = tuple(ColumnMapping(i + 1, f.name) for i, f in enumerate(metadata.schema))
    return dataclasses.replace(
        metadata,
        columns=columns,
        last_column_id=len(columns),
        format_version=max(metadata.format_version, COLUMN_ID_FORMAT_VERSION),
    )


def widened_from_dates(metadata: Any) -> frozenset[str]:
    """Columns widened from date to timestamp (writers may still send dates)."""
    return frozenset(
        f.name
        for f, c in zip(metadata.schema, metadata.columns, strict=False)
        if any(t in ('"date32"', "date32") for _, t in c.previous)
    )
