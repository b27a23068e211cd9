"""A pyarrow filter expression as a small tree, read from its Substrait form.

pyarrow has no public way to walk an ``Expression``, but it has a public, typed serialization:
``pyarrow.substrait.serialize_expressions`` binds the expression to a schema (inserting the
implicit casts Arrow itself would use) and writes it as a Substrait ``ExtendedExpression``
protobuf message. Substrait is a published, versioned specification whose field numbers never
change meaning, so this module reads the handful of messages a filter needs with a minimal
protobuf wire-format decoder (no protobuf dependency; pyarrow ships no Python classes for it).

Only what is understood exactly becomes a node: column references, literals of known types,
comparisons, ``and``/``or``/``not``, null and NaN checks, and ``IN`` lists. Anything else (an
unknown function, a function option, a field number not expected, a nested reference, a literal
type not mapped) becomes :class:`Opaque`, which pruning treats as "may be true or false".
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "Call",
    "Field",
    "InList",
    "Literal",
    "Node",
    "Opaque",
    "SubstraitUnavailable",
    "read_expression",
]


@dataclass(frozen=True, slots=True)
class Field:
    name: str


@dataclass(frozen=True, slots=True)
class Literal:
    value: pa.Scalar


@dataclass(frozen=True, slots=True)
class Call:
    function: str
    """One of ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``and``, ``or``, ``not``,
    ``is_null``, ``is_not_null``, ``is_nan``."""
    args: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class InList:
    """``value IN (options...)``. Arrow writes ``is_in`` this way; its null-matching behaviour
    is not kept, so a null among the options only tells that null rows *may* match."""

    value: Node
    options: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Opaque:
    """A part of the expression this reader does not interpret."""

    reason: str


Node = Field | Literal | Call | InList | Opaque


class SubstraitUnavailable(Exception):
    """pyarrow cannot serialize the expression against the schema (``reason`` says why)."""


class _Malformed(Exception):
    pass


# --- protobuf wire format -------------------------------------------------------------------

_Value = int | bytes


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Malformed("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pos


def _fields(data: bytes) -> dict[int, list[_Value]]:
    """Every field of one message: number -> values in order (varints as int, rest as bytes)."""
    out: dict[int, list[_Value]] = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: _Value
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = data[pos : pos + size], pos + size
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        else:
            raise _Malformed(f"wire type {wire}")
        if pos > len(data) or number == 0:
            raise _Malformed("truncated field")
        out.setdefault(number, []).append(value)
    return out


def _one(fields: dict[int, list[_Value]], number: int) -> _Value | None:
    values = fields.get(number)
    if not values:
        return None
    if len(values) != 1:
        raise _Malformed(f"field {number} repeated")
    return values[0]


def _bytes(fields: dict[int, list[_Value]], number: int) -> bytes:
    value = _one(fields, number)
    if value is None:
        return b""
    if not isinstance(value, bytes):
        raise _Malformed(f"field {number} is not length-delimited")
    return value


def _int(fields: dict[int, list[_Value]], number: int) -> int:
    value = _one(fields, number)
    if value is None:
        return 0
    if not isinstance(value, int):
        raise _Malformed(f"field {number} is not a varint")
    return value


def _signed(value: int, bits: int = 64) -> int:
    value &= (1 << 64) - 1
    if value >= 1 << 63:
        value -= 1 << 64
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise _Malformed(f"{value} is out of range for int{bits}")
    return value


def _only(fields: dict[int, list[_Value]], allowed: set[int]) -> str | None:
    """Why a message cannot be interpreted: a field number this reader does not know."""
    unknown = sorted(set(fields) - allowed)
    return f"unexpected field(s) {unknown}" if unknown else None


# --- the extension declarations --------------------------------------------------------------

_COMPARISON = "functions_comparison"
_BOOLEAN = "functions_boolean"
_ARROW_TYPES = "arrow_types"

_FUNCTIONS = {
    (_COMPARISON, "equal"): "==",
    (_COMPARISON, "not_equal"): "!=",
    (_COMPARISON, "lt"): "<",
    (_COMPARISON, "lte"): "<=",
    (_COMPARISON, "gt"): ">",
    (_COMPARISON, "gte"): ">=",
    (_COMPARISON, "is_null"): "is_null",
    (_COMPARISON, "is_not_null"): "is_not_null",
    (_COMPARISON, "is_nan"): "is_nan",
    (_BOOLEAN, "and"): "and",
    (_BOOLEAN, "or"): "or",
    (_BOOLEAN, "not"): "not",
}

_WRAPPER = "type.googleapis.com/google.protobuf."
_ARROW_EXTENSION_TYPES: dict[str, tuple[str, pa.DataType]] = {
    # Arrow's extension types (format/substrait/extension_types.yaml): name -> (the
    # google.protobuf wrapper its literals are written in, the Arrow type)
    "u8": ("UInt64Value", pa.uint8()),
    "u16": ("UInt64Value", pa.uint16()),
    "u32": ("UInt64Value", pa.uint32()),
    "u64": ("UInt64Value", pa.uint64()),
    "date_millis": ("Int64Value", pa.date64()),
    "time_seconds": ("Int32Value", pa.time32("s")),
    "time_millis": ("Int32Value", pa.time32("ms")),
    "large_string": ("StringValue", pa.large_string()),
    "large_binary": ("BytesValue", pa.large_binary()),
}


def _source(uri: str) -> str | None:
    """Which known extension file a URI (or URN) names."""
    if uri.endswith("/extensions/functions_comparison.yaml") or uri.endswith(
        ":functions_comparison"
    ):
        return _COMPARISON
    if uri.endswith("/extensions/functions_boolean.yaml") or uri.endswith(":functions_boolean"):
        return _BOOLEAN
    if uri.endswith("/format/substrait/extension_types.yaml"):
        return _ARROW_TYPES
    return None


@dataclass(frozen=True, slots=True)
class _Context:
    names: tuple[str, ...]
    functions: dict[int, str]
    """Function anchor -> canonical function name, for known functions only."""
    types: dict[int, str]
    """Type anchor -> Arrow extension type name (``u8``, ``u64``, ...)."""


def _context(message: dict[int, list[_Value]], names: tuple[str, ...]) -> _Context:
    sources: dict[int, str | None] = {}
    for number in (1, 8):  # extension_uris (older releases), extension_urns
        for raw in message.get(number, []):
            if not isinstance(raw, bytes):
                raise _Malformed("extension URI")
            uri = _fields(raw)
            sources[_int(uri, 1)] = _source(_bytes(uri, 2).decode("utf-8"))
    functions: dict[int, str] = {}
    types: dict[int, str] = {}
    for raw in message.get(2, []):
        if not isinstance(raw, bytes):
            raise _Malformed("extension declaration")
        declaration = _fields(raw)
        for kind in (1, 3):  # extension_type, extension_function
            body = _bytes(declaration, kind)
            if not body:
                continue
            decl = _fields(body)
            reference = _int(decl, 4) if 4 in decl else _int(decl, 1)
            source = sources.get(reference)
            name = _bytes(decl, 3).decode("utf-8").split(":", 1)[0]
            anchor = _int(decl, 2)
            if kind == 3 and source is not None and (source, name) in _FUNCTIONS:
                functions[anchor] = _FUNCTIONS[(source, name)]
            elif kind == 1 and source == _ARROW_TYPES:
                types[anchor] = name
    return _Context(names, functions, types)


# --- expressions -----------------------------------------------------------------------------


def _expression(data: bytes, ctx: _Context) -> Node:
    fields = _fields(data)
    if len(fields) != 1:
        return Opaque(f"expression with fields {sorted(fields)}")
    number = next(iter(fields))
    body = _bytes(fields, number)
    if number == 1:
        return _literal(body, ctx)
    if number == 2:
        return _selection(body, ctx)
    if number == 3:
        return _scalar_function(body, ctx)
    if number == 8:
        return _singular_or_list(body, ctx)
    return Opaque(f"expression kind {number}")


def _selection(data: bytes, ctx: _Context) -> Node:
    ref = _fields(data)
    why = _only(ref, {1, 4})
    if why or 4 not in ref or _bytes(ref, 4):
        return Opaque(f"field reference: {why or 'not from the root'}")
    segment = _fields(_bytes(ref, 1))
    if _only(segment, {2}) or 2 not in segment:
        return Opaque("field reference: not a struct field")
    struct_field = _fields(_bytes(segment, 2))
    if _only(struct_field, {1}):
        return Opaque("a nested field")
    index = _int(struct_field, 1)
    if index >= len(ctx.names):
        raise _Malformed(f"field {index} of {len(ctx.names)}")
    return Field(ctx.names[index])


def _scalar_function(data: bytes, ctx: _Context) -> Node:
    call = _fields(data)
    why = _only(call, {1, 3, 4})  # function_reference, output_type, arguments
    if why:
        return Opaque(f"function call: {why}")
    function = ctx.functions.get(_int(call, 1))
    if function is None:
        return Opaque("a function this reader does not interpret")
    args: list[Node] = []
    for raw in call.get(4, []):
        if not isinstance(raw, bytes):
            raise _Malformed("function argument")
        argument = _fields(raw)
        if _only(argument, {3}) or 3 not in argument:
            return Opaque(f"{function}: an argument that is not a value")
        args.append(_expression(_bytes(argument, 3), ctx))
    arity = {"and": None, "or": None, "not": 1, "is_null": 1, "is_not_null": 1, "is_nan": 1}
    expected = arity.get(function, 2)
    if (expected is not None and len(args) != expected) or not args:
        return Opaque(f"{function} with {len(args)} arguments")
    return Call(function, tuple(args))


def _singular_or_list(data: bytes, ctx: _Context) -> Node:
    fields = _fields(data)
    if _only(fields, {1, 2}) or 1 not in fields:
        return Opaque("an IN list this reader does not interpret")
    options = []
    for raw in fields.get(2, []):
        if not isinstance(raw, bytes):
            raise _Malformed("IN list option")
        options.append(_expression(raw, ctx))
    return InList(_expression(_bytes(fields, 1), ctx), tuple(options))


_TIMESTAMP_UNITS = {0: "s", 3: "ms", 6: "us", 9: "ns"}


def _literal(data: bytes, ctx: _Context) -> Node:
    fields = _fields(data)
    fields.pop(50, None)  # nullable: says nothing about the value
    if _int(fields, 51):
        return Opaque("a literal with a type variation")
    fields.pop(51, None)
    if len(fields) != 1:
        return Opaque(f"literal with fields {sorted(fields)}")
    kind = next(iter(fields))
    raw = _one(fields, kind)
    try:
        scalar = _scalar(kind, raw, ctx)
    except (pa.ArrowException, ValueError, OverflowError, struct.error) as exc:
        raise _Malformed(f"literal kind {kind}: {exc}") from None
    return Literal(scalar) if scalar is not None else Opaque(f"literal kind {kind}")


def _scalar(kind: int, raw: _Value | None, ctx: _Context) -> pa.Scalar | None:
    if isinstance(raw, int):
        ints = {2: (pa.int8(), 8), 3: (pa.int16(), 16), 5: (pa.int32(), 32), 7: (pa.int64(), 64)}
        if kind == 1:
            if raw not in (0, 1):
                raise _Malformed("boolean literal")
            return pa.scalar(bool(raw))
        if kind in ints:
            t, bits = ints[kind]
            return pa.scalar(_signed(raw, bits), t)
        if kind == 16:  # date: days since the epoch
            return pa.scalar(_signed(raw, 32), pa.int32()).cast(pa.date32())
        # timestamp, timestamp_tz (UTC), time: microseconds. Deprecated in Substrait (their
        # numbers are reserved now, so never reused), but what pyarrow writes today.
        micros = {14: pa.timestamp("us"), 27: pa.timestamp("us", tz="UTC"), 17: pa.time64("us")}
        if kind in micros:
            return pa.scalar(_signed(raw), pa.int64()).cast(micros[kind])
        return None
    if raw is None:
        raw = b""
    if kind == 10:
        return pa.scalar(struct.unpack("<f", raw)[0], pa.float32())
    if kind == 11:
        return pa.scalar(struct.unpack("<d", raw)[0], pa.float64())
    if kind == 12:
        return pa.scalar(raw.decode("utf-8"), pa.string())
    if kind == 13:
        return pa.scalar(raw, pa.binary())
    if kind == 23:
        return pa.scalar(raw, pa.binary(len(raw)))
    if kind == 24:
        return _decimal(raw)
    if kind in (34, 35):  # precision_timestamp, precision_timestamp_tz (UTC)
        body = _fields(raw)
        if _only(body, {1, 2}):
            return None
        unit = _TIMESTAMP_UNITS.get(_int(body, 1))
        if unit is None:
            return None
        value = _signed(_int(body, 2))
        return pa.scalar(value, pa.int64()).cast(
            pa.timestamp(unit, tz="UTC" if kind == 35 else None)
        )
    if kind == 29:  # a typed null: compares as null to everything
        return pa.scalar(None)
    if kind == 33:
        return _user_defined(raw, ctx)
    return None


def _decimal(raw: bytes) -> pa.Scalar | None:
    body = _fields(raw)
    if _only(body, {1, 2, 3}):
        return None
    value = _bytes(body, 1)
    precision, scale = _int(body, 2), _signed(_int(body, 3), 32)
    if len(value) != 16 or not 1 <= precision <= 38:
        return None
    unscaled = int.from_bytes(value, "little", signed=True)
    return pa.scalar(Decimal(unscaled).scaleb(-scale), pa.decimal128(precision, scale))


def _user_defined(raw: bytes, ctx: _Context) -> pa.Scalar | None:
    body = _fields(raw)
    if _only(body, {1, 2}):
        return None
    known = _ARROW_EXTENSION_TYPES.get(ctx.types.get(_int(body, 1), ""))
    if known is None:
        return None
    wrapper, arrow_type = known
    wrapped = _fields(_bytes(body, 2))  # google.protobuf.Any
    if _only(wrapped, {1, 2}) or _bytes(wrapped, 1).decode("utf-8") != _WRAPPER + wrapper:
        return None
    inner = _fields(_bytes(wrapped, 2))
    if _only(inner, {1}):
        return None
    if wrapper == "StringValue":
        return pa.scalar(_bytes(inner, 1).decode("utf-8"), arrow_type)
    if wrapper == "BytesValue":
        return pa.scalar(_bytes(inner, 1), arrow_type)
    value = _int(inner, 1)
    if wrapper == "Int64Value":
        value = _signed(value)
    elif wrapper == "Int32Value":
        value = _signed(value, 32)
    if pa.types.is_temporal(arrow_type):
        storage = pa.int32() if arrow_type.bit_width == 32 else pa.int64()
        return pa.scalar(value, storage).cast(arrow_type)
    return pa.scalar(value, arrow_type)


# --- public entry ----------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _serializable(t: pa.DataType) -> bool:
    try:
        pa.substrait.serialize_schema(pa.schema([pa.field("c", t)]))
    except (pa.ArrowException, TypeError, ValueError):
        return False
    return True


def read_expression(expression: pc.Expression, schema: pa.Schema) -> Node:
    """``expression`` bound to ``schema``, as a tree; raises :class:`SubstraitUnavailable` when
    pyarrow cannot serialize it (a column of a type Substrait lacks, an implicit cast of a
    column, a literal type it cannot write...)."""
    try:
        import pyarrow.substrait  # noqa: F401  (imported lazily: it loads the Acero engine)
    except ImportError as exc:  # a pyarrow built without Substrait: filters do not prune
        raise SubstraitUnavailable(f"pyarrow.substrait is not available: {exc}") from None

    usable = pa.schema([f for f in schema if _serializable(f.type)])
    try:
        buffer = pa.substrait.serialize_expressions([expression], ["filter"], usable)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise SubstraitUnavailable(str(exc).splitlines()[0] if str(exc) else repr(exc)) from None
    try:
        message = _fields(bytes(buffer))
        ctx = _context(message, tuple(usable.names))
        references = message.get(3, [])
        if len(references) != 1 or not isinstance(references[0], bytes):
            raise _Malformed("expected one expression")
        reference = _fields(references[0])
        if _only(reference, {1, 3}) or 1 not in reference:
            return Opaque("not a scalar expression")
        return _expression(_bytes(reference, 1), ctx)
    except (_Malformed, UnicodeDecodeError) as exc:
        raise SubstraitUnavailable(f"unreadable Substrait message: {exc}") from None
