"""Check that data matches a schema, and bring it into the schema's exact shape (the casts
accepted on the way are in ``casts.py``)."""

from __future__ import annotations

import pyarrow as pa

from carbonlite.errors import SchemaMismatchError
from carbonlite.format.casts import cast_column, incompatibility

__all__ = ["conform_batch", "schema_differences"]


def schema_differences(
    expected: pa.Schema, found: pa.Schema, *, allow_missing_nullable: bool = False
) -> list[str]:
    """One line per column where ``found`` does not fit ``expected`` (order is not compared;
    a type :func:`~carbonlite.format.casts.incompatibility` accepts fits)."""
    problems: list[str] = []
    found_by_name = {f.name: f for f in found}
    for field in expected:
        other = found_by_name.get(field.name)
        if other is None:
            if not (allow_missing_nullable and field.nullable):
                problems.append(f"column {field.name!r} ({field.type}) is missing")
        else:
            why = incompatibility(other.type, field.type)
            if why is not None:
                problems.append(
                    f"column {field.name!r}: expected type {field.type}, found {other.type} "
                    f"({why}; cast it explicitly if that is intended)"
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

    Columns may come in any order and in any type ``casts.py`` accepts; with
    ``allow_missing_nullable`` a missing nullable column is filled with nulls. Raises
    :class:`SchemaMismatchError` naming every differing column, a value a cast would change,
    and nulls in a non-nullable column.
    """
    if batch.schema.equals(schema):
        arrays = batch.columns
        if batch.schema.metadata == schema.metadata and not any(
            not f.nullable and a.null_count for f, a in zip(schema, arrays, strict=True)
        ):
            return batch  # already in ``schema``'s exact shape
    else:
        problems = schema_differences(
            schema, batch.schema, allow_missing_nullable=allow_missing_nullable
        )
        if problems:
            raise SchemaMismatchError(f"data does not match the schema of {where}", problems)
        names = batch.schema.names
        arrays, failures = [], []
        for f in schema:
            if f.name not in names:
                arrays.append(pa.nulls(batch.num_rows, type=f.type))
                continue
            column = batch.column(names.index(f.name))
            try:
                arrays.append(cast_column(column, f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                failures.append(
                    f"column {f.name!r}: cannot cast {column.type} to {f.type} without changing "
                    f"values ({' '.join(str(exc).split())})"
                )
        if failures:
            raise SchemaMismatchError(f"data does not match the schema of {where}", failures)
    nulls = [
        f"column {f.name!r} is declared non-nullable but has {a.null_count} null(s)"
        for f, a in zip(schema, arrays, strict=True)
        if not f.nullable and a.null_count
    ]
    if nulls:
        raise SchemaMismatchError(f"data does not match the schema of {where}", nulls)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
