"""Check that data matches a schema, and bring it into the schema's exact shape."""

from __future__ import annotations

import pyarrow as pa

from carbonlite.errors import SchemaMismatchError

__all__ = ["conform_batch", "schema_differences"]


def schema_differences(
    expected: pa.Schema, found: pa.Schema, *, allow_missing_nullable: bool = False
) -> list[str]:
    """One line per column where ``found`` does not fit ``expected`` (order is not compared)."""
    problems: list[str] = []
    found_by_name = {f.name: f for f in found}
    for field in expected:
        other = found_by_name.get(field.name)
        if other is None:
            if not (allow_missing_nullable and field.nullable):
                problems.append(f"column {field.name!r} ({field.type}) is missing")
        elif not other.type.equals(field.type):
            problems.append(
                f"column {field.name!r}: expected type {field.type}, found {other.type}"
            )
    expected_names = set(expected.names)
    for field in found:
        if field.name not in expected_names:
            problems.append(f"column {field.name!r} ({field.type}) is not in the schema")
    if len(set(found.names)) != len(found.names):
        dupes = sorted({n for n in found.names if found.names.count(n) > 1})
        problems.append(f"columns {dupes} appear more than once")
    return problems


def conform_batch(
    batch: pa.RecordBatch,
    schema: pa.Schema,
    *,
    where: str,
    allow_missing_nullable: bool = False,
) -> pa.RecordBatch:
    """``batch`` with ``schema``'s columns in ``schema``'s order and exact fields.

    Columns may come in any order; with ``allow_missing_nullable`` a missing nullable column is
    filled with nulls. Raises :class:`SchemaMismatchError` naming every differing column, and
    for nulls in a non-nullable column.
    """
    if batch.schema.equals(schema):
        arrays = batch.columns
    else:
        problems = schema_differences(
            schema, batch.schema, allow_missing_nullable=allow_missing_nullable
        )
        if problems:
            raise SchemaMismatchError(f"data does not match the schema of {where}", problems)
        names = batch.schema.names
        arrays = [
            batch.column(names.index(f.name))
            if f.name in names
            else pa.nulls(batch.num_rows, type=f.type)
            for f in schema
        ]
    nulls = [
        f"column {f.name!r} is declared non-nullable but has {a.null_count} null(s)"
        for f, a in zip(schema, arrays, strict=True)
        if not f.nullable and a.null_count
    ]
    if nulls:
        raise SchemaMismatchError(f"data does not match the schema of {where}", nulls)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
