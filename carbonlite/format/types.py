"""Which Arrow types the blocklet format stores, and which of them carry min/max statistics."""

from __future__ import annotations

import functools
from typing import Literal

import pyarrow as pa
import pyarrow.types as pat

from carbonlite.errors import UnsupportedTypeError

__all__ = ["StatKind", "check_schema", "physical_type", "stat_kind"]

StatKind = Literal["int", "uint", "float", "bool", "string", "binary", "decimal"]
"""How a column's min/max values are kept: temporal types keep their stored integers."""


def _is_temporal(t: pa.DataType) -> bool:
    return bool(pat.is_date(t) or pat.is_timestamp(t) or pat.is_time(t) or pat.is_duration(t))


@functools.lru_cache(maxsize=1024)
def stat_kind(t: pa.DataType) -> StatKind | None:
    """The statistics kind of a column type, or None when only null counts are kept."""
    if pat.is_signed_integer(t) or _is_temporal(t):
        return "int"
    if pat.is_unsigned_integer(t):
        return "uint"
    if pat.is_float32(t) or pat.is_float64(t):
        return "float"
    if pat.is_boolean(t):
        return "bool"
    if pat.is_string(t) or pat.is_large_string(t):
        return "string"
    if pat.is_binary(t) or pat.is_large_binary(t) or pat.is_fixed_size_binary(t):
        return "binary"
    if pat.is_decimal128(t) or pat.is_decimal256(t):
        return "decimal"
    return None


def physical_type(t: pa.DataType) -> pa.DataType:
    """The integer type a temporal column's values are stored as (the type itself otherwise)."""
    if _is_temporal(t):
        return pa.int32() if t.bit_width == 32 else pa.int64()
    return t


def _is_supported_leaf(t: pa.DataType) -> bool:
    return bool(
        pat.is_integer(t)
        or pat.is_floating(t)
        or pat.is_boolean(t)
        or pat.is_string(t)
        or pat.is_large_string(t)
        or pat.is_binary(t)
        or pat.is_large_binary(t)
        or pat.is_fixed_size_binary(t)
        or pat.is_decimal(t)
        or _is_temporal(t)
        or pat.is_null(t)
    )


def _check_type(t: pa.DataType, where: str, problems: list[str]) -> None:
    if _is_supported_leaf(t):
        return
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        _check_type(t.value_type, f"{where}.item", problems)
        return
    if pat.is_map(t):
        _check_type(t.key_type, f"{where}.key", problems)
        _check_type(t.item_type, f"{where}.value", problems)
        return
    if pat.is_struct(t):
        for i in range(t.num_fields):
            child = t.field(i)
            _check_type(child.type, f"{where}.{child.name}", problems)
        return
    if pat.is_dictionary(t):
        hint = f"cast it to its value type {t.value_type} first"
    else:
        hint = (
            "use a supported type (integers, floats, bool, strings, binary, dates, "
            "timestamps, times, durations, decimals, or lists/structs/maps of them)"
        )
    problems.append(f"column {where!r}: type {t} is not supported; {hint}")


def check_schema(schema: pa.Schema) -> None:
    """Raise :class:`UnsupportedTypeError` listing every column the format cannot store."""
    problems: list[str] = []
    names = schema.names
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        problems.append(f"duplicate column names {dupes}; every column needs a unique name")
    for field in schema:
        _check_type(field.type, field.name, problems)
    if problems:
        raise UnsupportedTypeError("schema cannot be stored in a blocklet file", problems)
