"""The Flight SQL messages the service reads and writes, in protobuf's wire format.

Flight SQL (``format/FlightSql.proto`` of Apache Arrow) puts protobuf messages, each packed
in a ``google.protobuf.Any`` whose ``type_url`` is
``type.googleapis.com/arrow.flight.protocol.sql.<Message>``, into Flight's commands,
tickets, action bodies and results. This module encodes only what the service needs:
varints and length-delimited fields (strings, bytes, embedded messages; ``repeated uint32``
packed or not), and skips fields it does not know, as protobuf readers do. Anything that is
not well-formed protobuf is :class:`ProtocolError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from carbonlite.serve.wire import BadRequestError, quote

__all__ = [
    "TYPE_URL_PREFIX",
    "ActionClosePreparedStatementRequest",
    "ActionCreatePreparedStatementRequest",
    "ActionCreatePreparedStatementResult",
    "CommandGetCatalogs",
    "CommandGetDbSchemas",
    "CommandGetPrimaryKeys",
    "CommandGetSqlInfo",
    "CommandGetTableTypes",
    "CommandGetTables",
    "CommandGetXdbcTypeInfo",
    "CommandPreparedStatementQuery",
    "CommandStatementQuery",
    "DoPutPreparedStatementResult",
    "Message",
    "ProtocolError",
    "TicketStatementQuery",
    "UnknownMessage",
    "decode_any",
    "encode_any",
    "is_flight_sql",
]

TYPE_URL_PREFIX = "type.googleapis.com/arrow.flight.protocol.sql."
"""What every Flight SQL ``Any`` type URL starts with; the message's name follows."""

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10


class ProtocolError(BadRequestError):
    """Bytes that are not the protobuf message a Flight SQL call carries."""


# --- the wire format ----------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # two's complement, as protobuf writes negative int32/int64
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= len(data):
            raise ProtocolError("a protobuf varint runs past the end of the message")
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos + i + 1
    raise ProtocolError(f"a protobuf varint is longer than {_MAX_VARINT_BYTES} bytes")


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Every ``(field number, wire type, value)`` of a message: an int for varints, the bytes
    of fixed and length-delimited fields."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtocolError("a protobuf field has number 0")
        if wire == _VARINT:
            value, pos = _read_varint(data, pos)
            yield number, wire, value
            continue
        if wire == _LEN:
            size, pos = _read_varint(data, pos)
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
        else:
            raise ProtocolError(f"protobuf field {number} has wire type {wire}, not supported")
        if pos + size > len(data):
            raise ProtocolError(f"protobuf field {number} runs past the end of the message")
        yield number, wire, data[pos : pos + size]
        pos += size


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _len_field(number: int, value: bytes) -> bytes:
    return _key(number, _LEN) + _varint(len(value)) + value


def _text(value: int | bytes, name: str) -> str:
    if not isinstance(value, bytes):
        raise ProtocolError(f"protobuf field {name!r} is a number, expected a string")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"protobuf field {name!r} is not UTF-8: {quote(value)}") from None


def _bytes(value: int | bytes, name: str) -> bytes:
    if not isinstance(value, bytes):
        raise ProtocolError(f"protobuf field {name!r} is a number, expected bytes")
    return value


def _uint32s(wire: int, value: int | bytes) -> list[int]:
    """A ``repeated uint32`` field's values: one varint, or a packed run of them."""
    if wire == _VARINT:
        assert isinstance(value, int)
        return [value & 0xFFFFFFFF]
    data = _bytes(value, "info")
    out, pos = [], 0
    while pos < len(data):
        number, pos = _read_varint(data, pos)
        out.append(number & 0xFFFFFFFF)
    return out


# --- Any ----------------------------------------------------------------------------------------


def encode_any(message: Message) -> bytes:
    """``message`` packed in a ``google.protobuf.Any``."""
    type_url = (TYPE_URL_PREFIX + type(message).__name__).encode()
    return _len_field(1, type_url) + _len_field(2, message.encode())


def _any_parts(data: bytes) -> tuple[str, bytes]:
    type_url, value = "", b""
    for number, _, item in _fields(data):
        if number == 1:
            type_url = _text(item, "type_url")
        elif number == 2:
            value = _bytes(item, "value")
    return type_url, value


def is_flight_sql(data: bytes) -> bool:
    """Whether ``data`` is an ``Any`` holding a Flight SQL message (by its type URL)."""
    if not data.startswith(b"\x0a"):  # field 1 (type_url), length-delimited: every Any's start
        return False
    try:
        type_url, _ = _any_parts(data)
    except ProtocolError:
        return False
    return type_url.startswith(TYPE_URL_PREFIX)


def decode_any(data: bytes) -> Message:
    """The Flight SQL message packed in ``data``; :class:`UnknownMessage` for a well-formed
    one the service does not read."""
    type_url, value = _any_parts(data)
    if not type_url.startswith(TYPE_URL_PREFIX):
        raise ProtocolError(f"{quote(type_url)} is not a Flight SQL message's type URL")
    name = type_url[len(TYPE_URL_PREFIX) :]
    kind = _MESSAGES.get(name)
    if kind is None:
        return UnknownMessage(name)
    return kind.decode(value)


# --- the messages -------------------------------------------------------------------------------


class Message:
    """A Flight SQL message (encoded and decoded by its subclass)."""

    @classmethod
    def decode(cls, data: bytes) -> Message:
        for _ in _fields(data):  # checked well-formed; no field of it is read
            pass
        return cls()

    def encode(self) -> bytes:
        return b""


@dataclass(frozen=True, slots=True)
class UnknownMessage(Message):
    """A Flight SQL message the service does not implement (its name)."""

    name: str


@dataclass(frozen=True, slots=True)
class _QueryMessage(Message):
    query: str = ""
    transaction_id: bytes | None = None

    @classmethod
    def decode(cls, data: bytes) -> Message:
        query, transaction = "", None
        for number, _, value in _fields(data):
            if number == 1:
                query = _text(value, "query")
            elif number == 2:
                transaction = _bytes(value, "transaction_id")
        return cls(query, transaction)

    def encode(self) -> bytes:
        out = _len_field(1, self.query.encode())
        if self.transaction_id is not None:
            out += _len_field(2, self.transaction_id)
        return out


class CommandStatementQuery(_QueryMessage):
    """A SQL query to run (GetFlightInfo)."""

    __slots__ = ()


class ActionCreatePreparedStatementRequest(_QueryMessage):
    """The body of the ``CreatePreparedStatement`` action."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class _HandleMessage(Message):
    handle: bytes = b""

    @classmethod
    def decode(cls, data: bytes) -> Message:
        handle = b""
        for number, _, value in _fields(data):
            if number == 1:
                handle = _bytes(value, "handle")
        return cls(handle)

    def encode(self) -> bytes:
        return _len_field(1, self.handle)


class TicketStatementQuery(_HandleMessage):
    """A ticket of a statement's result (``statement_handle``)."""

    __slots__ = ()


class CommandPreparedStatementQuery(_HandleMessage):
    """A prepared statement to bind parameters to (DoPut) or run (GetFlightInfo)."""

    __slots__ = ()


class ActionClosePreparedStatementRequest(_HandleMessage):
    """The body of the ``ClosePreparedStatement`` action."""

    __slots__ = ()


class DoPutPreparedStatementResult(_HandleMessage):
    """What a DoPut binding parameters answers: the handle to run the statement with."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ActionCreatePreparedStatementResult(Message):
    """The result of ``CreatePreparedStatement``: a handle and two IPC-serialized schemas."""

    handle: bytes = b""
    dataset_schema: bytes = b""
    parameter_schema: bytes = b""

    @classmethod
    def decode(cls, data: bytes) -> Message:
        parts = {1: b"", 2: b"", 3: b""}
        for number, _, value in _fields(data):
            if number in parts:
                parts[number] = _bytes(value, "prepared statement result")
        return cls(parts[1], parts[2], parts[3])

    def encode(self) -> bytes:
        out = _len_field(1, self.handle)
        if self.dataset_schema:
            out += _len_field(2, self.dataset_schema)
        if self.parameter_schema:
            out += _len_field(3, self.parameter_schema)
        return out


class CommandGetCatalogs(Message):
    """List the catalogs."""


class CommandGetTableTypes(Message):
    """List the table types."""


@dataclass(frozen=True, slots=True)
class CommandGetSqlInfo(Message):
    """Facts about the server (``info``: the codes asked for; none: every one)."""

    info: tuple[int, ...] = ()

    @classmethod
    def decode(cls, data: bytes) -> Message:
        codes: list[int] = []
        for number, wire, value in _fields(data):
            if number == 1:
                codes.extend(_uint32s(wire, value))
        return cls(tuple(codes))

    def encode(self) -> bytes:
        packed = b"".join(_varint(code) for code in self.info)
        return _len_field(1, packed) if packed else b""


@dataclass(frozen=True, slots=True)
class CommandGetDbSchemas(Message):
    """List the database schemas (of one catalog, names matching a ``LIKE`` pattern)."""

    catalog: str | None = None
    db_schema_filter_pattern: str | None = None

    @classmethod
    def decode(cls, data: bytes) -> Message:
        catalog = pattern = None
        for number, _, value in _fields(data):
            if number == 1:
                catalog = _text(value, "catalog")
            elif number == 2:
                pattern = _text(value, "db_schema_filter_pattern")
        return cls(catalog, pattern)

    def encode(self) -> bytes:
        out = b""
        if self.catalog is not None:
            out += _len_field(1, self.catalog.encode())
        if self.db_schema_filter_pattern is not None:
            out += _len_field(2, self.db_schema_filter_pattern.encode())
        return out


@dataclass(frozen=True, slots=True)
class CommandGetTables(Message):
    """List the tables, optionally with their schemas."""

    catalog: str | None = None
    db_schema_filter_pattern: str | None = None
    table_name_filter_pattern: str | None = None
    table_types: tuple[str, ...] = field(default=())
    include_schema: bool = False

    @classmethod
    def decode(cls, data: bytes) -> Message:
        catalog = schemas = tables = None
        types: list[str] = []
        include = False
        for number, _, value in _fields(data):
            if number == 1:
                catalog = _text(value, "catalog")
            elif number == 2:
                schemas = _text(value, "db_schema_filter_pattern")
            elif number == 3:
                tables = _text(value, "table_name_filter_pattern")
            elif number == 4:
                types.append(_text(value, "table_types"))
            elif number == 5:
                include = bool(value)
        return cls(catalog, schemas, tables, tuple(types), include)

    def encode(self) -> bytes:
        out = b""
        for number, text in (
            (1, self.catalog),
            (2, self.db_schema_filter_pattern),
            (3, self.table_name_filter_pattern),
        ):
            if text is not None:
                out += _len_field(number, text.encode())
        for kind in self.table_types:
            out += _len_field(4, kind.encode())
        if self.include_schema:
            out += _key(5, _VARINT) + _varint(1)
        return out


@dataclass(frozen=True, slots=True)
class CommandGetPrimaryKeys(Message):
    """The primary-key columns of a table (of one catalog and database schema, if given)."""

    catalog: str | None = None
    db_schema: str | None = None
    table: str = ""

    @classmethod
    def decode(cls, data: bytes) -> Message:
        catalog = schema = None
        table = ""
        for number, _, value in _fields(data):
            if number == 1:
                catalog = _text(value, "catalog")
            elif number == 2:
                schema = _text(value, "db_schema")
            elif number == 3:
                table = _text(value, "table")
        return cls(catalog, schema, table)

    def encode(self) -> bytes:
        out = b""
        if self.catalog is not None:
            out += _len_field(1, self.catalog.encode())
        if self.db_schema is not None:
            out += _len_field(2, self.db_schema.encode())
        if self.table:
            out += _len_field(3, self.table.encode())
        return out


@dataclass(frozen=True, slots=True)
class CommandGetXdbcTypeInfo(Message):
    """The SQL types of the server (``data_type``: only those of that XDBC type code)."""

    data_type: int | None = None

    @classmethod
    def decode(cls, data: bytes) -> Message:
        data_type = None
        for number, wire, value in _fields(data):
            if number == 1:
                if wire != _VARINT:
                    raise ProtocolError("protobuf field 'data_type' is not a number")
                assert isinstance(value, int)
                value &= 0xFFFFFFFF  # an int32: negative ones travel as 10-byte varints
                data_type = value - (1 << 32) if value >= 1 << 31 else value
        return cls(data_type)

    def encode(self) -> bytes:
        if self.data_type is None:
            return b""
        return _key(1, _VARINT) + _varint(self.data_type)


_MESSAGES: dict[str, type[Message]] = {
    kind.__name__: kind
    for kind in (
        CommandStatementQuery,
        CommandPreparedStatementQuery,
        TicketStatementQuery,
        ActionCreatePreparedStatementRequest,
        ActionClosePreparedStatementRequest,
        ActionCreatePreparedStatementResult,
        CommandGetCatalogs,
        CommandGetDbSchemas,
        CommandGetTables,
        CommandGetTableTypes,
        CommandGetSqlInfo,
        CommandGetPrimaryKeys,
        CommandGetXdbcTypeInfo,
    )
}
