"""Check that data matches a schema, and bring it into the schema's exact shape (the casts
accepted on the way are in ``casts.py``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from carbonlite.errors import SchemaMismatchError
from carbonlite.format.casts import cast_column, incompatibility

__all__ = ["conform_batch", "conform_value", "schema_differences"]

_CONVERSION_ERRORS = (pa.ArrowException, OverflowError, TypeError, ValueError)
"""What pyarrow raises for a Python value it cannot hold (``OverflowError`` for an int past
64 bits, ``ArrowInvalid`` for an object it does not know)."""


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


def _numeric(t: pa.DataType) -> bool:
    return bool(pat.is_integer(t) or pat.is_floating(t) or pat.is_decimal(t))


def _checked_by_value(found: pa.DataType, expected: pa.DataType) -> bool:
    """Whether a value of type ``found`` may go into ``expected`` after a value-checked cast:
    the types ``casts.incompatibility`` accepts, and numbers of any width or kind (also inside
    lists and structs), since one value either fits or the cast refuses it."""
    if incompatibility(found, expected) is None or (_numeric(found) and _numeric(expected)):
        return True
    if pat.is_list(found) and (pat.is_list(expected) or pat.is_large_list(expected)):
        return _checked_by_value(found.value_type, expected.value_type)
    if pat.is_struct(found) and pat.is_struct(expected):
        names = [found.field(i).name for i in range(found.num_fields)]
        if names != [expected.field(i).name for i in range(expected.num_fields)]:
            return False
        return all(
            _checked_by_value(found.field(i).type, expected.field(i).type)
            for i in range(found.num_fields)
        )
    return False


def _became_infinite(before: pa.Array, after: pa.Array) -> bool:
    """A finite number that a cast into a narrower float turned into an infinity."""
    if not (pat.is_floating(after.type) and _numeric(before.type)):
        return False
    finite = pc.is_finite(before.cast(pa.float64()))
    return bool(pc.any(pc.and_(finite, pc.invert(pc.is_finite(after)))).as_py())


def _scalar_of(value: object, expected: pa.DataType) -> pa.Scalar:
    """``value`` as an Arrow scalar of its own type (a pyarrow scalar as it is); in
    ``expected`` when Arrow infers no type for it (a dict for a map column, say)."""
    if isinstance(value, pa.Scalar):
        return value
    try:
        return pa.scalar(value)
    except _CONVERSION_ERRORS as inferred:
        try:
            return pa.scalar(value, type=expected)
        except _CONVERSION_ERRORS:
            raise inferred from None


def conform_value(value: object, field: pa.Field, *, where: str) -> pa.Scalar:
    """``value`` (a Python value or a pyarrow scalar) as a scalar of ``field``'s type: the
    casts :func:`conform_batch` accepts, and a number into a narrower numeric type when this
    value fits it exactly (``2`` into ``int8``, ``2.0`` into ``int64``). Raises
    :class:`SchemaMismatchError` naming the column and the value otherwise: a value out of
    range, a fraction into an integer column, a string into a number column, None into a
    non-nullable column."""

    def refused(why: str) -> SchemaMismatchError:
        return SchemaMismatchError(
            f"value {value!r} does not fit column {field.name!r} ({field.type}) of {where}",
            [f"{why}; give a value of type {field.type}"],
        )

    if value is None or (isinstance(value, pa.Scalar) and not value.is_valid):
        if not field.nullable:
            raise refused("the column is declared non-nullable")
        return pa.scalar(None, type=field.type)
    try:
        found = _scalar_of(value, field.type)
    except _CONVERSION_ERRORS as exc:
        raise refused(f"Arrow cannot hold it ({' '.join(str(exc).split())})") from None
    if not _checked_by_value(found.type, field.type):
        raise refused(f"a value of type {found.type} is not one of type {field.type}")
    before = pa.repeat(found, 1)
    try:
        after = cast_column(before, field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        exact = _converted_exactly(value, field.type)  # 3 into decimal(10, 2): no type cast
        if exact is not None:
            return exact
        raise refused(f"the cast would change it ({' '.join(str(exc).split())})") from None
    if _became_infinite(before, after):
        raise refused(f"it is out of the range of {field.type}")
    return after[0]


def _converted_exactly(value: object, expected: pa.DataType) -> pa.Scalar | None:
    """``value`` converted by pyarrow straight into ``expected`` when that gives back an
    equal value (an ``int`` into a decimal column whose type cast Arrow refuses for the whole
    range of ``int64``); None otherwise."""
    if isinstance(value, pa.Scalar):
        return None
    try:
        exact = pa.scalar(value, type=expected)
        same = bool(exact.as_py() == value)
    except _CONVERSION_ERRORS:
        return None
    return exact if same else None
