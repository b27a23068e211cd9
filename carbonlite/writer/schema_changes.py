"""Schema evolution: rename, drop and widen columns, and give added columns defaults.

Each change is one :class:`MetadataCommit`: the table's metadata with its column ids
(``metadata/columns.py``) changed, no data file touched. A change needs column ids (log
format 6): a table of format 3 to 5 is raised to 6 in the same version, with ids given to
its columns (their physical names are their present names); older formats need
``Table.upgrade`` first. The conflict rules (docs/LOG.md, "Schema evolution"): a schema change
conflicts with any concurrent metadata change (``MetadataUnchanged``), and a data commit whose
rows were written before a rename or a drop of one of their columns is refused with
:class:`SchemaMismatchError` (``ColumnsAsWritten``); a widening or an added column lets it in.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from carbonlite.errors import InvalidOptionError, SchemaMismatchError
from carbonlite.format.types import check_schema
from carbonlite.iceberg.schema import check_iceberg_table
from carbonlite.metadata.actions import TableMetadata
from carbonlite.metadata.columns import (
    COLUMN_ID_FORMAT_VERSION,
    PENDING,
    ColumnMapping,
    DroppedColumn,
    fresh_physical_name,
    widening_problem,
    with_column_ids,
)
from carbonlite.metadata.partition_spec import PartitionSpec
from carbonlite.metadata.schema_json import type_to_json
from carbonlite.metadata.snapshot import Snapshot
from carbonlite.names import column_name_problems
from carbonlite.properties import TableProperties
from carbonlite.reader.changes import reserved_name_problems
from carbonlite.writer.bloom_files import INDEXED_PROPERTIES
from carbonlite.writer.table_metadata import MetadataCommit

__all__ = [
    "adding_columns",
    "dropping_columns",
    "renaming_column",
    "widening_column",
    "with_columns",
]

_UPGRADABLE_FROM = 3
"""Tables of this log format or newer get column ids in the version of their first schema
change; older ones need ``upgrade`` (their checkpoints change form)."""


def _mapped(snapshot: Snapshot, what: str, where: str) -> TableMetadata:
    """The table's metadata with column ids, raising its format when it has none yet."""
    metadata = snapshot.metadata
    if metadata.columns:
        return metadata
    if metadata.format_version < _UPGRADABLE_FROM:
        raise InvalidOptionError(
            f"cannot {what} in {where!r}: the table is of log format {metadata.format_version}, "
            f"and column ids need format {COLUMN_ID_FORMAT_VERSION}; run Table.upgrade() "
            "(CLI: carbonlite upgrade PATH) first"
        )
    return with_column_ids(metadata)


def _column_index(metadata: TableMetadata, name: object, what: str, where: str) -> int:
    if not isinstance(name, str):
        raise InvalidOptionError(f"{what} takes a column name (a string), not {name!r}")
    index = metadata.schema.get_field_index(name)
    if index < 0:
        raise SchemaMismatchError(
            f"cannot {what} {name!r} in {where!r}: no such column",
            [f"its columns are {metadata.schema.names}"],
        )
    return index


def _roles(metadata: TableMetadata) -> dict[str, str]:
    """Columns with a role a drop or a widening must keep: sort, partition, key columns."""
    roles = {c: "a sort column" for c in metadata.sort_columns}
    spec = PartitionSpec.parse(list(metadata.partition_by), metadata.schema)
    roles.update({c: "a partition column" for c in spec.source_columns})
    roles.update({c: "a primary-key column" for c in metadata.primary_key})
    return roles


def _bloom_columns_renamed(
    metadata: TableMetadata, names: Mapping[str, str | None]
) -> dict[str, str]:
    """The table's properties with ``bloom_filter_columns`` and ``secondary_index_columns``
    following renamed columns (``names``: old name -> new name) and dropped ones (-> None)."""
    properties = dict(metadata.properties)
    props = TableProperties(properties)
    for key in INDEXED_PROPERTIES:
        listed = getattr(props, key)
        if not any(c in names for c in listed):
            continue
        remaining = [n for c in listed if (n := names.get(c, c)) is not None]
        if remaining:
            properties[key] = ",".join(remaining)
        else:
            del properties[key]
    return properties


def _commit(
    before: TableMetadata,
    after: TableMetadata,
    operation: str,
    parameters: Mapping[str, str],
    where: str,
) -> MetadataCommit:
    """The change; the schema after it must be one the table can store, and publish as
    Iceberg when it does (``iceberg``)."""
    check_schema(after.schema)
    check_iceberg_table(after, repr(where))
    return MetadataCommit(before, after, operation=operation, parameters=dict(parameters))


def renaming_column(snapshot: Snapshot, old: str, new: str, *, where: str) -> MetadataCommit:
    """``old`` renamed to ``new``: its id and physical name stay, so no data is rewritten;
    sort, partition and key columns keep their role under the new name."""
    metadata = _mapped(snapshot, "rename a column", where)
    index = _column_index(metadata, old, "rename the column", where)
    if not isinstance(new, str):
        raise InvalidOptionError(f"the new column name must be a string, not {new!r}")
    problems = column_name_problems([pa.field(new, pa.null())])
    problems += reserved_name_problems([new])
    if new in metadata.schema.names:
        problems.append(
            f"column {new!r} already exists"
            if new != old
            else f"column {old!r} already has that name"
        )
    if problems:
        raise SchemaMismatchError(f"cannot rename column {old!r} of {where!r}", problems)
    schema = metadata.schema.set(index, metadata.schema.field(index).with_name(new))
    column = metadata.columns[index]
    columns = list(metadata.columns)
    columns[index] = dataclasses.replace(
        column, since=PENDING, former_names=(*column.former_names, old)
    )
    spec = PartitionSpec.parse(list(metadata.partition_by), metadata.schema)

    def swap(names: Sequence[str]) -> tuple[str, ...]:
        return tuple(new if n == old else n for n in names)

    partition_by = tuple(
        f.spec.replace(f"({old})", f"({new})").replace(f", {old})", f", {new})")
        if f.source == old and f.transform != "identity"
        else (new if f.source == old else f.spec)
        for f in spec.fields
    )
    after = dataclasses.replace(
        metadata,
        schema=schema,
        columns=tuple(columns),
        sort_columns=swap(metadata.sort_columns),
        primary_key=swap(metadata.primary_key),
        partition_by=partition_by,
        properties=_bloom_columns_renamed(metadata, {old: new}),
    )
    PartitionSpec.parse(list(after.partition_by), after.schema)  # still names its columns
    return _commit(
        snapshot.metadata, after, "RENAME COLUMN", {"column": old, "new_name": new}, where
    )


def dropping_columns(snapshot: Snapshot, names: Sequence[str], *, where: str) -> MetadataCommit:
    """``names`` dropped from the schema (their pages stay in older files, never read again;
    a column added later under one of the names is a new column). Sort, partition and key
    columns cannot be dropped, nor every column."""
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, Sequence) or not names:
        raise InvalidOptionError(f"drop_columns takes a list of column names, not {names!r}")
    metadata = _mapped(snapshot, "drop columns", where)
    indices = [_column_index(metadata, n, "drop the column", where) for n in names]
    roles = _roles(metadata)
    problems = [f"column {n!r} is {roles[n]}; it cannot be dropped" for n in names if n in roles]
    problems += [
        f"column {n!r} is given twice" for n in sorted(set(names)) if list(names).count(n) > 1
    ]
    if len(set(indices)) == len(metadata.schema):
        problems.append("a table keeps at least one column")
    if problems:
        raise SchemaMismatchError(f"cannot drop columns {list(names)} of {where!r}", problems)
    gone = set(indices)
    dropped = tuple(
        DroppedColumn(
            metadata.columns[i].id,
            metadata.schema.field(i).name,
            metadata.columns[i].physical,
            PENDING,
            previous=tuple(name for name, _ in metadata.columns[i].previous),
        )
        for i in sorted(gone)
    )
    after = dataclasses.replace(
        metadata,
        schema=pa.schema(
            [f for i, f in enumerate(metadata.schema) if i not in gone],
            metadata=metadata.schema.metadata,
        ),
        columns=tuple(c for i, c in enumerate(metadata.columns) if i not in gone),
        dropped=(*metadata.dropped, *dropped),
        properties=_bloom_columns_renamed(metadata, dict.fromkeys(names)),
    )
    return _commit(snapshot.metadata, after, "DROP COLUMNS", {"columns": ",".join(names)}, where)


def widening_column(
    snapshot: Snapshot, name: str, new_type: pa.DataType, *, where: str
) -> MetadataCommit:
    """``name``'s type widened to ``new_type`` (int8 to int16 to int32 to int64, float32 to
    float64, decimal precision up at the same scale, date to timestamp): older files are read
    and cast up. A ``date`` becoming a ``timestamp`` gets a new physical name (its statistics
    change domain); the others keep theirs and their statistics."""
    metadata = _mapped(snapshot, "widen a column", where)
    index = _column_index(metadata, name, "widen the column", where)
    if not isinstance(new_type, pa.DataType):
        raise InvalidOptionError(f"widen_column takes a pyarrow.DataType, not {new_type!r}")
    field = metadata.schema.field(index)
    problem = widening_problem(field.type, new_type)
    role = _roles(metadata).get(name)
    if problem is None and role is not None and role != "a sort column":
        problem = f"it is {role}: its values' partitions and keys are kept in its present type"
    if problem is not None:
        raise SchemaMismatchError(
            f"cannot widen column {name!r} of {where!r} from {field.type} to {new_type}", [problem]
        )
    column = metadata.columns[index]
    if pa.types.is_date(field.type):
        column = dataclasses.replace(
            column,
            physical=fresh_physical_name(column.id),
            previous=((column.physical, json.dumps(type_to_json(field.type))), *column.previous),
        )
    if column.has_default:  # the default is a value of the column's type: cast it up too
        column = dataclasses.replace(
            column, default=pa.scalar(column.default, field.type).cast(new_type).as_py()
        )
    columns = list(metadata.columns)
    # ``since`` stays the version of the column's present name: a writer still using a
    # former name is told the rename's version, not the widening's
    columns[index] = dataclasses.replace(column, widened_since=PENDING)
    after = dataclasses.replace(
        metadata,
        schema=metadata.schema.set(index, field.with_type(new_type)),
        columns=tuple(columns),
    )
    return _commit(
        snapshot.metadata,
        after,
        "WIDEN COLUMN",
        {"column": name, "from": str(field.type), "to": str(new_type)},
        where,
    )


def adding_columns(
    snapshot: Snapshot,
    fields: Sequence[pa.Field],
    defaults: Mapping[str, Any],
    *,
    where: str,
) -> TableMetadata:
    """The metadata with nullable ``fields`` added at the end: fresh ids and physical names,
    and ``defaults`` (column -> value) that rows written before read and writers fill in.
    Tables without ids get the new columns under their own names (no defaults)."""
    metadata = snapshot.metadata
    problems = [
        f"column {f.name!r} already exists" for f in fields if f.name in metadata.schema.names
    ]
    problems += column_name_problems(fields)
    problems += [
        f"column {f.name!r} must be nullable to be added" for f in fields if not f.nullable
    ]
    names = [f.name for f in fields]
    problems += [f"column {n!r} is given twice" for n in sorted(set(names)) if names.count(n) > 1]
    problems += reserved_name_problems(names)
    problems += [
        f"defaults name {n!r}, which is not one of the columns added"
        for n in defaults
        if n not in names
    ]
    values = {}
    for f in fields:
        if f.name in defaults:
            value, problem = _default_value(f, defaults[f.name])
            if problem is not None:
                problems.append(problem)
            values[f.name] = value
    if problems:
        raise SchemaMismatchError(f"cannot add columns to {where!r}", problems)
    if defaults or metadata.columns:
        metadata = _mapped(snapshot, "add columns with defaults", where)
    schema = pa.schema([*metadata.schema, *fields], metadata=metadata.schema.metadata)
    check_schema(schema)
    if not metadata.columns:
        return dataclasses.replace(metadata, schema=schema)
    last = metadata.last_column_id
    added = []
    taken = {c.physical for c in metadata.columns}
    for f in fields:
        last += 1
        physical = f.name if f.name not in taken and _never_dropped(metadata, f.name) else None
        added.append(
            ColumnMapping(
                last,
                physical or fresh_physical_name(last),
                default=values.get(f.name),
                has_default=f.name in values,
                since=PENDING,
            )
        )
    return dataclasses.replace(
        metadata, schema=schema, columns=(*metadata.columns, *added), last_column_id=last
    )


def with_columns(
    snapshot: Snapshot,
    fields: pa.Field | Sequence[pa.Field] | pa.Schema,
    *,
    where: str,
    defaults: Mapping[str, Any] | None = None,
) -> MetadataCommit:
    """Nullable columns added at the end of the schema (``Table.add_columns``), with
    ``defaults`` for rows written before them and for writers that leave them out."""
    if isinstance(fields, pa.Field):
        new = [fields]
    elif isinstance(fields, (pa.Schema, Sequence)) and not isinstance(fields, str):
        new = list(fields)
    else:
        new = []
    if not new or not all(isinstance(f, pa.Field) for f in new):
        raise InvalidOptionError(
            f"add_columns needs one or more pyarrow.Field (or a pyarrow.Schema), got {fields!r}"
        )
    if defaults is None:
        defaults = {}
    if not isinstance(defaults, Mapping) or not all(isinstance(k, str) for k in defaults):
        raise InvalidOptionError(
            f"defaults must map column names to values, e.g. {{'n': 0}}, not {defaults!r}"
        )
    after = adding_columns(snapshot, new, defaults, where=where)
    names = ",".join(f.name for f in new)
    parameters = {"columns": names}
    if defaults:
        parameters["defaults"] = ",".join(sorted(defaults))
    check_iceberg_table(after, repr(where))
    return MetadataCommit(snapshot.metadata, after, operation="ADD COLUMNS", parameters=parameters)


def _never_dropped(metadata: TableMetadata, name: str) -> bool:
    """No file can hold pages under ``name`` that are not this new column's: no column now
    or before had it as its physical name (a dropped one, an older name of a widened one)."""
    used = {p for d in metadata.dropped for p in (d.physical, *d.previous)}
    used |= {p for c in metadata.columns for p, _ in c.previous}
    return name not in used


def _default_value(f: pa.Field, value: Any) -> tuple[Any, str | None]:
    """``value`` as the default of ``f`` (a Python value of its type), or why not."""
    t = f.type
    if not (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_date32(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_decimal(t)
    ):
        return None, (
            f"column {f.name!r} is {t}; defaults are for booleans, numbers, strings, binary, "
            "dates, timestamps and decimals"
        )
    if value is None:
        return None, f"the default of {f.name!r} is None; leave it out for a column of nulls"
    try:
        scalar = value if isinstance(value, pa.Scalar) else pa.scalar(value)
        cast = scalar.cast(t, safe=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as exc:
        return None, f"the default {value!r} of {f.name!r} is not a {t}: {exc}"
    return cast.as_py(), None
