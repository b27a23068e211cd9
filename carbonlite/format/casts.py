"""Which incoming column types a table column accepts, and the cast that brings them in.

Data comes from pandas (``large_string``, nanosecond timestamps), Polars (``string_view``),
Spark (``timestamp`` labelled with the session time zone, ``timestamp_ntz``) and plain Arrow
code (``int32`` literals, dictionaries). A column is accepted when every value it can hold
has one exact value in the table's type:

- integers that widen (``int32`` into ``int64``, ``uint16`` into ``int32``), floats that
  widen, small integers into floats that hold them exactly;
- ``string``/``large_string``/``string_view`` (and the three binary layouts) into each other;
- a dictionary into a column of its value type;
- ``null`` (a column of nothing but nulls) into any nullable type;
- timestamps of any unit into any unit, and between time zones (the instant is kept; a
  timestamp without a time zone is read as UTC, as Spark's ``timestamp_ntz`` is written);
  dates, times and durations of other units; decimals that widen;
- lists, maps and structs whose parts are accepted.

Casts that depend on the values (a nanosecond timestamp into microseconds, a date64 into
date32) are checked value by value: a value that would lose anything is refused with the
column named, and nothing is written. Anything else (``int64`` into ``int32``, ``float`` into
``int``, ``string`` into ``int``) is refused up front.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

__all__ = ["cast_column", "incompatibility", "storage_type"]

_STRINGS = (pat.is_string, pat.is_large_string, pat.is_string_view)
_BINARIES = (pat.is_binary, pat.is_large_binary, pat.is_binary_view)
_LISTS = (pat.is_list, pat.is_large_list, pat.is_list_view, pat.is_large_list_view)


def _any(checks: tuple[Callable[[pa.DataType], bool], ...], t: pa.DataType) -> bool:
    return any(check(t) for check in checks)


def _int_widens(found: pa.DataType, expected: pa.DataType) -> bool:
    if pat.is_signed_integer(found):
        return pat.is_signed_integer(expected) and expected.bit_width >= found.bit_width
    if pat.is_signed_integer(expected):  # unsigned into signed needs one more bit
        return expected.bit_width > found.bit_width
    return bool(pat.is_unsigned_integer(expected)) and expected.bit_width >= found.bit_width


def _float_holds(found: pa.DataType, expected: pa.DataType) -> bool:
    """Floats that widen, and integers a float represents exactly (its mantissa bits)."""
    mantissa = {16: 11, 32: 24, 64: 53}[expected.bit_width]
    if pat.is_floating(found):
        return bool(expected.bit_width >= found.bit_width)
    bits = found.bit_width - 1 if pat.is_signed_integer(found) else found.bit_width
    return bool(bits <= mantissa)


def _decimal_widens(found: pa.DataType, expected: pa.DataType) -> bool:
    return bool(
        expected.scale >= found.scale
        and expected.precision - expected.scale >= found.precision - found.scale
    )


def incompatibility(found: pa.DataType, expected: pa.DataType) -> str | None:
    """None when a column of type ``found`` is accepted into ``expected`` (possibly after a
    value-checked cast); otherwise why not, in a few words."""
    if found.equals(expected) or pat.is_null(found):
        return None
    if pat.is_dictionary(found):
        return incompatibility(found.value_type, expected)
    if pat.is_integer(found) and pat.is_integer(expected):
        return None if _int_widens(found, expected) else "a narrowing cast could lose values"
    if (pat.is_integer(found) or pat.is_floating(found)) and pat.is_floating(expected):
        return None if _float_holds(found, expected) else "a narrowing cast could lose values"
    if _any(_STRINGS, found) and _any(_STRINGS, expected):
        return None
    if _any(_BINARIES, found) and _any(_BINARIES, expected):
        return None
    if pat.is_decimal(found) and pat.is_decimal(expected):
        return None if _decimal_widens(found, expected) else "a narrowing cast could lose values"
    for same_kind in (pat.is_timestamp, pat.is_date, pat.is_time, pat.is_duration):
        if same_kind(found) and same_kind(expected):
            return None  # units are checked value by value when cast
    if (_any(_LISTS, found) or pat.is_fixed_size_list(found)) and _any(_LISTS, expected):
        return incompatibility(found.value_type, expected.value_type)
    if pat.is_map(found) and pat.is_map(expected):
        return incompatibility(found.key_type, expected.key_type) or incompatibility(
            found.item_type, expected.item_type
        )
    if pat.is_struct(found) and pat.is_struct(expected):
        names = [found.field(i).name for i in range(found.num_fields)]
        wanted = [expected.field(i).name for i in range(expected.num_fields)]
        if names != wanted:
            return f"struct fields {names} are not {wanted}"
        for i in range(found.num_fields):
            why = incompatibility(found.field(i).type, expected.field(i).type)
            if why is not None:
                return f"field {names[i]!r}: {why}"
        return None
    return "no cast keeps every value"


def cast_column(
    column: pa.Array | pa.ChunkedArray, expected: pa.DataType
) -> pa.Array | pa.ChunkedArray:
    """``column`` in type ``expected`` (accepted by :func:`incompatibility`). Raises
    ``pyarrow.ArrowInvalid`` when a value would change (a timestamp finer than the unit, a
    value out of range) and ``pyarrow.ArrowNotImplementedError`` when Arrow has no such cast."""
    if column.type.equals(expected):
        return column
    if pat.is_list_view(column.type) or pat.is_large_list_view(column.type):
        column = _as_list(column)
    if pat.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if pat.is_timestamp(column.type) and column.type.tz != expected.tz:
        # Relabel first (the stored integers are UTC instants, with or without a zone), so
        # the unit cast below is the only one that can touch the values.
        column = column.cast(pa.timestamp(column.type.unit, tz=expected.tz))
    return column.cast(expected, safe=True)


def _as_list(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A list view as the list of the same values, built from its lengths and flattened
    values: pyarrow's own cast of a list view builds a list with invalid offsets
    (pyarrow 26), so it is never asked for."""
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([_as_list(c) for c in column.chunks], _list_type(column.type))
    large = pat.is_large_list_view(column.type)
    sizes = pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64 if large else np.int32)
    build = pa.LargeListArray if large else pa.ListArray
    return build.from_arrays(
        pa.array(offsets),
        pc.list_flatten(column),
        type=_list_type(column.type),
        mask=column.is_null(),
    )


def _list_type(t: pa.DataType) -> pa.DataType:
    field = t.value_field
    return pa.large_list(field) if pat.is_large_list_view(t) else pa.list_(field)


def storage_type(t: pa.DataType) -> pa.DataType | None:
    """The type a new column of incoming type ``t`` gets in a table: one layout per kind
    (``string`` for the string layouts, a dictionary's value type, ``list`` for list views);
    None for ``null``, whose type cannot be told from its values."""
    if pat.is_null(t):
        return None
    if pat.is_dictionary(t):
        return storage_type(t.value_type)
    if _any(_STRINGS, t):
        return pa.string()
    if _any(_BINARIES, t):
        return pa.binary()
    if _any(_LISTS, t):
        value = storage_type(t.value_type)
        return None if value is None else pa.list_(t.value_field.with_type(value))
    if pat.is_struct(t):
        fields = []
        for i in range(t.num_fields):
            child = storage_type(t.field(i).type)
            if child is None:
                return None
            fields.append(t.field(i).with_type(child))
        return pa.struct(fields)
    return t
