"""Field ids of Parquet columnar files (``PARQUET:field_id``), which Iceberg takes as its own.

A top-level field's id is the CarbonLite column id (``metadata/columns.py``). A nested field
(a struct's child, a list's element, a map's key and value, at any depth) gets an id of its
own, derived from its column's id and its place in the column's type: the fields of one
column's type, depth first in schema order, are numbered 0, 1, 2, ... and field ``k`` of
column ``c`` has id ``NESTED_ID_BASE + c * NESTED_IDS_PER_COLUMN + k``. A column's nested
fields never change (a schema change renames, drops, widens or adds whole columns), so these
ids are stable for the life of the column, and a column added later under a dropped one's
name has another id and so other nested ids. They never meet top-level ids, which stay far
below ``NESTED_ID_BASE``.

This module knows nothing of tables: callers give each top-level field's column id.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.types as pat

from carbonlite.errors import UnsupportedTypeError

__all__ = [
    "FIELD_ID_KEY",
    "MAX_NESTED_COLUMN_ID",
    "NESTED_IDS_PER_COLUMN",
    "NESTED_ID_BASE",
    "field_id",
    "nested_fields",
    "with_field_ids",
]

FIELD_ID_KEY = b"PARQUET:field_id"
"""The field metadata key Arrow's Parquet writer writes as the field id (and reads back)."""

NESTED_ID_BASE = 1 << 24
"""Nested field ids start here; top-level ids (column ids) stay below it."""

NESTED_IDS_PER_COLUMN = 1 << 10
"""How many nested fields one column's type may have."""

MAX_NESTED_COLUMN_ID = (2**31 - 1 - NESTED_ID_BASE) // NESTED_IDS_PER_COLUMN - 1
"""The largest column id whose nested ids fit Parquet's and Iceberg's 32-bit field ids."""


def field_id(field: pa.Field) -> int | None:
    """The field id ``field`` carries, if any."""
    meta = field.metadata or {}
    raw = meta.get(FIELD_ID_KEY)
    return None if raw is None else int(raw)


def _children(t: pa.DataType) -> list[pa.Field]:
    """The nested fields directly under type ``t``, in the order Arrow keeps them."""
    if pat.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pat.is_map(t):
        return [t.key_field, t.item_field]
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        return [t.value_field]
    return []


def nested_fields(t: pa.DataType) -> list[tuple[tuple[int, ...], pa.Field]]:
    """Every nested field of type ``t``, depth first: (its path of child positions, field).
    Its index in this list is its ``k``."""
    out: list[tuple[tuple[int, ...], pa.Field]] = []

    def walk(t: pa.DataType, path: tuple[int, ...]) -> None:
        for i, child in enumerate(_children(t)):
            out.append(((*path, i), child))
            walk(child.type, (*path, i))

    walk(t, ())
    return out


def _nested_id(column_id: int, k: int, where: str) -> int:
    if column_id > MAX_NESTED_COLUMN_ID or k >= NESTED_IDS_PER_COLUMN:
        raise UnsupportedTypeError(
            f"column {where!r} (id {column_id}) cannot be given Parquet field ids for its "
            f"{k + 1} nested fields: at most {NESTED_IDS_PER_COLUMN} nested fields per column "
            f"and column ids up to {MAX_NESTED_COLUMN_ID}"
        )
    return NESTED_ID_BASE + column_id * NESTED_IDS_PER_COLUMN + k


def _with_id(field: pa.Field, fid: int) -> pa.Field:
    meta = dict(field.metadata or {})
    meta[FIELD_ID_KEY] = str(fid).encode()
    return field.with_metadata(meta)


def _typed(t: pa.DataType, column_id: int, counter: list[int], where: str) -> pa.DataType:
    """``t`` with an id on each nested field (``counter``: the next ``k``)."""

    def child(f: pa.Field) -> pa.Field:
        k = counter[0]
        counter[0] += 1
        inner = _typed(f.type, column_id, counter, where)
        return _with_id(f.with_type(inner), _nested_id(column_id, k, where))

    if pat.is_struct(t):
        return pa.struct([child(t.field(i)) for i in range(t.num_fields)])
    if pat.is_map(t):
        key = child(t.key_field)
        item = child(t.item_field)
        return pa.map_(key, item, keys_sorted=t.keys_sorted)
    if pat.is_large_list(t):
        return pa.large_list(child(t.value_field))
    if pat.is_fixed_size_list(t):
        return pa.list_(child(t.value_field), t.list_size)
    if pat.is_list(t):
        return pa.list_(child(t.value_field))
    return t


def with_field_ids(schema: pa.Schema, column_ids: Sequence[int]) -> pa.Schema:
    """``schema`` with ``PARQUET:field_id`` on every field: ``column_ids[i]`` on the i-th
    top-level field, derived ids on nested ones (see the module doc)."""
    if len(column_ids) != len(schema):
        raise ValueError(f"{len(column_ids)} column ids for {len(schema)} fields")
    fields = []
    for f, cid in zip(schema, column_ids, strict=True):
        typed = _typed(f.type, cid, [0], f.name)
        fields.append(_with_id(f.with_type(typed), cid))
    return pa.schema(fields, metadata=schema.metadata)
