"""Per-column statistics of a blocklet: null count, NaN count, and min/max bounds.

Bounds are kept as plain Python values in the column's *physical* domain:

======================  =========================================================
column type             min/max value
======================  =========================================================
signed integers         ``int``
unsigned integers       ``int``
date/time/timestamp     ``int``: the stored integer (days, or units since epoch/midnight)
float32/float64         ``float``, NaN excluded (see ``nan_count``)
bool                    ``bool``
string                  ``str``, truncated to a prefix of about 64 UTF-8 bytes (*)
binary                  ``bytes``, truncated to at most 64 bytes (*)
decimal                 ``decimal.Decimal``
other types             none (null count only)
======================  =========================================================

(*) A min is cut to at most 64 bytes. A cut max has its last character incremented, which
can lengthen that character's UTF-8 encoding by a byte (so a string max may take 65 bytes).
A truncated bound still bounds: a truncated min is a prefix (<= every value) and a
truncated max is a prefix whose last character was incremented (>= every value). When no
upper bound that short exists (all bytes 0xFF), the max is None: unbounded.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.format.types import StatKind, physical_type, stat_kind

__all__ = [
    "STAT_PREFIX_BYTES",
    "ColumnStats",
    "compute_column_stats",
    "decode_stat",
    "encode_stat",
    "stat_decoder",
    "stat_from_json",
    "stat_to_json",
    "truncate_lower",
    "truncate_upper",
]

STAT_PREFIX_BYTES = 64
"""String and binary bounds are cut to at most this many bytes."""

_MAX_CODE_POINT = 0x10FFFF
_EXACT = Context(prec=100)  # enough digits for decimal256: scaling must never round


@dataclass(frozen=True, slots=True)
class ColumnStats:
    """Statistics of one column in one blocklet."""

    null_count: int
    min: Any = None
    """Lower bound of the non-null, non-NaN values; None when there is none."""
    max: Any = None
    """Upper bound of the non-null, non-NaN values; None when there is none (or unbounded)."""
    nan_count: int = 0
    """How many values are NaN (floating-point columns only)."""


# --- truncation ------------------------------------------------------------------------------


def truncate_lower(value: str | bytes, limit: int = STAT_PREFIX_BYTES) -> str | bytes:
    """A prefix of ``value`` of at most ``limit`` bytes: still <= ``value``."""
    if isinstance(value, str):
        data = value.encode("utf-8")
        if len(data) <= limit:
            return value
        return data[:limit].decode("utf-8", "ignore")
    return value if len(value) <= limit else value[:limit]


def truncate_upper(value: str | bytes, limit: int = STAT_PREFIX_BYTES) -> str | bytes | None:
    """A short value >= ``value`` and >= every value sharing its prefix; None if none exists."""
    if isinstance(value, str):
        if len(value.encode("utf-8")) <= limit:
            return value
        chars = list(str(truncate_lower(value, limit)))
        while chars:
            code = ord(chars[-1]) + 1
            if 0xD800 <= code <= 0xDFFF:  # surrogates are not characters
                code = 0xE000
            if code <= _MAX_CODE_POINT:
                chars[-1] = chr(code)
                return "".join(chars)
            chars.pop()
        return None
    if len(value) <= limit:
        return value
    data = bytearray(value[:limit])
    while data:
        if data[-1] < 0xFF:
            data[-1] += 1
            return bytes(data)
        data.pop()
    return None


# --- computing -------------------------------------------------------------------------------


def compute_column_stats(array: pa.Array, kind: StatKind | None = None) -> ColumnStats:
    """Statistics of one column of a batch (``kind`` defaults to the array type's)."""
    if kind is None:
        kind = stat_kind(array.type)
    null_count = array.null_count
    if kind is None or null_count == len(array):
        return ColumnStats(null_count=null_count)
    nan_count = 0
    values = array
    if kind == "int":
        values = array.view(physical_type(array.type))
    elif kind == "float":
        nan_count = int(pc.sum(pc.is_nan(array)).as_py() or 0)
    result = pc.min_max(values)
    lo = result["min"].as_py()
    hi = result["max"].as_py()
    if kind == "float" and (lo is None or math.isnan(lo)):
        return ColumnStats(null_count=null_count, nan_count=nan_count)
    if kind in ("string", "binary"):
        lo = truncate_lower(lo)
        hi = truncate_upper(hi)
    return ColumnStats(null_count=null_count, min=lo, max=hi, nan_count=nan_count)


# --- binary encoding (blocklet headers) ------------------------------------------------------


def _decimal_width(t: pa.DataType) -> int:
    return int(t.bit_width // 8)


def encode_stat(value: Any, t: pa.DataType) -> bytes:
    """The canonical bytes of a bound (see docs/FORMAT.md, "Statistics values")."""
    kind = stat_kind(t)
    if kind == "int":
        return struct.pack("<q", value)
    if kind == "uint":
        return struct.pack("<Q", value)
    if kind == "float":
        return struct.pack("<d", value)
    if kind == "bool":
        return b"\x01" if value else b"\x00"
    if kind == "string":
        return str(value).encode("utf-8")
    if kind == "binary":
        return bytes(value)
    if kind == "decimal":
        unscaled = int(Decimal(value).scaleb(t.scale, context=_EXACT))
        return unscaled.to_bytes(_decimal_width(t), "little", signed=True)
    raise TypeError(f"type {t} keeps no statistics")


def decode_stat(data: bytes, t: pa.DataType) -> Any:
    """Inverse of :func:`encode_stat`; raises ``ValueError`` on malformed bytes."""
    kind = stat_kind(t)
    try:
        if kind == "int":
            return struct.unpack("<q", data)[0]
        if kind == "uint":
            return struct.unpack("<Q", data)[0]
        if kind == "float":
            return struct.unpack("<d", data)[0]
        if kind == "bool":
            if len(data) != 1:
                raise ValueError("a bool bound is one byte")
            return data != b"\x00"
        if kind == "string":
            return data.decode("utf-8")
        if kind == "binary":
            return bytes(data)
        if kind == "decimal":
            if len(data) != _decimal_width(t):
                raise ValueError(f"a {t} bound is {_decimal_width(t)} bytes")
            return Decimal(int.from_bytes(data, "little", signed=True)).scaleb(
                -t.scale, context=_EXACT
            )
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed {t} bound: {exc}") from exc
    raise ValueError(f"type {t} keeps no statistics")


# --- JSON encoding (the transaction log) -----------------------------------------------------


def stat_to_json(value: Any, t: pa.DataType) -> Any:
    """A JSON-safe form of a bound: numbers stay numbers, bytes become base64, decimals text."""
    if value is None:
        return None
    kind = stat_kind(t)
    if kind == "binary":
        return base64.b64encode(value).decode("ascii")
    if kind == "decimal":
        return str(value)
    if kind == "float" and math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def stat_from_json(value: Any, t: pa.DataType) -> Any:
    """Inverse of :func:`stat_to_json`."""
    if value is None:
        return None
    decode = stat_decoder(t)
    return value if decode is None else decode(value)


_JSON_DECODERS: dict[StatKind, Callable[[Any], Any]] = {
    "binary": base64.b64decode,
    "decimal": Decimal,
    "float": float,  # also "Infinity" and "-Infinity"
}


def stat_decoder(t: pa.DataType) -> Callable[[Any], Any] | None:
    """What :func:`stat_from_json` applies to a non-null bound of a column of type ``t``
    (None: the JSON value is the bound as it is). Decoders of many bounds look it up once per
    column, not once per value."""
    kind = stat_kind(t)
    return None if kind is None else _JSON_DECODERS.get(kind)
