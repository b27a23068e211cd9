"""Table schemas written as Spark SQL DDL: ``"id bigint, ts timestamp, tags array<string>"``.

    from carbonlite.ddl import parse_schema
    schema = parse_schema("id bigint not null, price decimal(10,2), tags array<string>")

Columns are ``NAME TYPE [NOT NULL] [COMMENT 'text']``, separated by commas; a name with other
characters goes in backquotes (```my col```). Type names are Spark's, in any case:

=========================================  ==========================================
Spark DDL                                   Arrow (the table's column type)
=========================================  ==========================================
``boolean``                                 ``bool``
``tinyint``/``byte``, ``smallint``/``short``  ``int8``, ``int16``
``int``/``integer``, ``bigint``/``long``      ``int32``, ``int64``
``float``/``real``, ``double``                ``float32``, ``float64``
``decimal(p, s)`` (also ``dec``, ``numeric``; ``decimal128(p, s)``; ``decimal`` alone is
``decimal(10, 0)``, as in Spark; p is 1..38)
``string``, ``varchar(n)``, ``char(n)``       ``string`` (the length is not kept)
``binary``                                  ``binary``
``date``                                    ``date32``
``timestamp`` (also ``timestamp_ltz``)        ``timestamp[us, tz=UTC]`` (an instant, as the
                                            Spark source stores it)
``timestamp_ntz``                           ``timestamp[us]`` (no time zone)
``interval day to second`` (any day-time)   ``duration[us]``
``void``                                    ``null``
``array<T>``                                ``list<T>``
``map<K, V>``                               ``map<K, V>``
``struct<a: T, b T>``                       ``struct<a: T, b: T>``
=========================================  ==========================================

Anything else (year-month intervals, ``variant``, an unknown name) is an
:class:`InvalidOptionError` saying where, as is a syntax error: a missing type or name, a
column given twice, an unclosed ``<`` or ``(``.

Columns added to a table (:func:`parse_columns`, ``carbonlite alter PATH add-column``) may also
have ``DEFAULT <literal>`` (before or after the comment): a number (``0``, ``-1.5``, ``2e3``),
``'quoted text'`` (backslash escapes), ``true``/``false``, ``DATE '2024-01-01'`` or
``TIMESTAMP '2024-01-01 00:00:00'`` (UTC unless it names an offset), read as a value of the
column's type; a literal of another kind, or out of the type's range, is an error.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from carbonlite.errors import InvalidOptionError
from carbonlite.format.types import check_schema

__all__ = ["ColumnDefinition", "parse_columns", "parse_schema", "parse_type"]

_TOKEN = re.compile(
    r"\s*(?:(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<quoted>`(?:[^`]|``)*`)"
    r"|(?P<real>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)|(?P<number>\d+)"
    r"|(?P<string>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")|(?P<punct>[<>(),:])|(?P<other>\S))",
    re.S,
)

_SIMPLE: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "bool": pa.bool_(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ltz": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "void": pa.null(),
}
_DECIMALS = ("decimal", "dec", "numeric", "decimal128")
_LENGTHS = ("varchar", "char")
_DAY_TIME = ("day", "hour", "minute", "second")
_MAX_DEPTH = 64
"""Nested types deeper than this are refused (the parser recurses once per level)."""
_KNOWN = sorted({*_SIMPLE, *_DECIMALS, *_LENGTHS, "array", "map", "struct", "interval"})


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    text: str
    at: int
    """Character offset in the DDL (0-based)."""

    @property
    def word(self) -> str:
        return self.text.lower() if self.kind == "word" else ""


def _tokens(ddl: str) -> list[_Token]:
    out = []
    position = 0
    while True:
        match = _TOKEN.match(ddl, position)
        if match is None:  # only whitespace is left
            break
        kind = match.lastgroup or "other"
        out.append(_Token(kind, match.group(kind), match.start(kind)))
        position = match.end()
    return out


_LITERALS = "a number, 'text', true, false, DATE '...' or TIMESTAMP '...'"


@dataclass(frozen=True, slots=True)
class ColumnDefinition:
    """A column to add to a table (:func:`parse_columns`) and its default, if it has one."""

    field: pa.Field
    default: Any = None
    """A Python value of the field's type (``has_default`` says whether there is one)."""
    has_default: bool = False


class _Parser:
    def __init__(self, ddl: str, what: str = "schema") -> None:
        self.ddl = ddl
        self.what = what
        self.tokens = _tokens(ddl)
        self.i = 0
        self.depth = 0

    # --- tokens ---------------------------------------------------------------------------------

    def fail(self, problem: str, token: _Token | None = None) -> InvalidOptionError:
        token = token or self.peek()
        where = "at the end" if token is None else f"at character {token.at + 1}"
        return InvalidOptionError(f"{self.what} {_shown(self.ddl)}: {problem} ({where})")

    def peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> _Token | None:
        token = self.peek()
        self.i += token is not None
        return token

    def at(self, text: str) -> bool:
        token = self.peek()
        return token is not None and (token.word or token.text) == text

    def expect(self, text: str, why: str) -> None:
        if not self.at(text):
            token = self.peek()
            found = "nothing" if token is None else repr(token.text)
            raise self.fail(f"expected {text!r} {why}, found {found}")
        self.take()

    def number(self, what: str) -> int:
        token = self.take()
        if token is None or token.kind != "number":
            raise self.fail(f"expected {what}, a number", token)
        return int(token.text)

    # --- grammar --------------------------------------------------------------------------------

    def name(self, what: str) -> str:
        token = self.peek()
        if token is None or token.kind not in ("word", "quoted"):
            found = "nothing" if token is None else repr(token.text)
            raise self.fail(f"expected {what}, found {found}")
        self.take()
        return token.text[1:-1].replace("``", "`") if token.kind == "quoted" else token.text

    def field(self, label: str) -> pa.Field:
        """``NAME [:] TYPE [NOT NULL] [COMMENT 'text']``; ``label`` says what it is."""
        name = self.name(f"a {label} name")
        if self.at(":"):
            self.take()
        if self.peek() is None or self.at(",") or self.at(">"):
            raise self.fail(f"{label} {name!r} has no type (give NAME TYPE, e.g. 'id bigint')")
        kind = self.type(name)
        nullable = True
        if self.at("not"):
            not_null = self.take()
            self.expect("null", "after NOT")
            if pa.types.is_null(kind):
                raise self.fail(
                    f"{label} {name!r} is void (always null): it cannot be NOT NULL", not_null
                )
            nullable = False
        if self.at("comment"):
            self.take()
            token = self.take()
            if token is None or token.kind != "string":
                raise self.fail("expected a quoted comment after COMMENT", token)
        return pa.field(name, kind, nullable=nullable)

    def type(self, column: str) -> pa.DataType:
        token = self.take()
        if token is None or token.kind != "word":
            raise self.fail(f"expected the type of {column!r}", token)
        word = token.word
        if word in _SIMPLE:
            return _SIMPLE[word]
        if word in _DECIMALS:
            return self.decimal()
        if word in _LENGTHS:
            self.expect("(", f"after {word}")
            self.number(f"the length of {word}")
            self.expect(")", f"to close {word}(")
            return pa.string()
        if word in ("array", "map", "struct"):
            return self.nested(word, column)
        if word == "interval":
            return self.interval()
        raise self.fail(
            f"unknown type {token.text!r} for {column!r}; known types: {', '.join(_KNOWN)}", token
        )

    def decimal(self) -> pa.DataType:
        if not self.at("("):
            return pa.decimal128(10, 0)
        self.take()
        precision = self.number("the precision of decimal(p, s)")
        scale = 0
        if self.at(","):
            self.take()
            scale = self.number("the scale of decimal(p, s)")
        self.expect(")", "to close decimal(")
        if not 1 <= precision <= 38 or scale > precision:
            raise self.fail(
                f"decimal({precision}, {scale}) is out of range: precision 1 to 38, scale 0 to "
                "the precision"
            )
        return pa.decimal128(precision, scale)

    def nested(self, word: str, column: str) -> pa.DataType:
        self.expect("<", f"after {word}")
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.fail(f"types nest more than {_MAX_DEPTH} levels deep in {column!r}")
        if word == "array":
            kind: pa.DataType = pa.list_(self.type(f"{column}.element"))
        elif word == "map":
            key = self.type(f"{column}.key")
            self.expect(",", "between the key and value types of map<K, V>")
            kind = pa.map_(key, self.type(f"{column}.value"))
        else:
            kind = pa.struct(self.struct_fields(column))
        self.expect(">", f"to close {word}<")
        self.depth -= 1
        return kind

    def struct_fields(self, column: str) -> list[pa.Field]:
        fields: list[pa.Field] = []
        while not self.at(">"):
            if fields:
                self.expect(",", f"between the fields of struct {column!r}")
            fields.append(self.field(f"field of struct {column!r}"))
        _no_duplicates([f.name for f in fields], f"struct {column!r}", self)
        return fields

    def interval(self) -> pa.DataType:
        start = self.take()
        if start is None or start.word not in _DAY_TIME:
            raise self.fail(
                "only day-time intervals are supported (e.g. interval day to second); "
                "year-month intervals have no Arrow type here",
                start,
            )
        if self.at("to"):
            self.take()
            end = self.take()
            if end is None or end.word not in _DAY_TIME:
                raise self.fail("expected day, hour, minute or second after TO", end)
        return pa.duration("us")

    def schema(self) -> pa.Schema:
        if self.peek() is None:
            raise self.fail("the schema is empty; give columns such as 'id bigint, name string'")
        fields = [self.field("column")]
        while (token := self.peek()) is not None:
            if token.text in (")", ">"):
                raise self.fail(f"unbalanced {token.text!r}: nothing is open to close")
            self.expect(",", "between columns")
            fields.append(self.field("column"))
        _no_duplicates([f.name for f in fields], "the schema", self)
        return pa.schema(fields)

    # --- columns added to a table ---------------------------------------------------------------

    def definitions(self) -> list[ColumnDefinition]:
        """``NAME TYPE [NOT NULL] [DEFAULT literal] [COMMENT 'text']``, separated by commas."""
        if self.peek() is None:
            raise self.fail("no column given; give one such as 'c int default 0'")
        out = [self.definition()]
        while (token := self.peek()) is not None:
            if token.text in (")", ">"):
                raise self.fail(f"unbalanced {token.text!r}: nothing is open to close")
            self.expect(",", "between columns")
            out.append(self.definition())
        _no_duplicates([d.field.name for d in out], "the columns", self)
        return out

    def definition(self) -> ColumnDefinition:
        field = self.field("column")
        if not self.at("default"):
            return ColumnDefinition(field)
        self.take()
        value = self.literal(field)
        if self.at("comment"):
            self.take()
            token = self.take()
            if token is None or token.kind != "string":
                raise self.fail("expected a quoted comment after COMMENT", token)
        return ColumnDefinition(field, value, has_default=True)

    def literal(self, field: pa.Field) -> Any:
        """The literal after DEFAULT, as a value of ``field``'s type."""
        start = self.take()
        if start is None or start.kind in ("punct", "quoted"):
            found = "nothing" if start is None else repr(start.text)
            raise self.fail(f"expected a literal after DEFAULT ({_LITERALS}), found {found}", start)
        kind, text = start.kind, start.text
        if start.text in ("-", "+"):
            number = self.take()
            if number is None or number.kind not in ("number", "real"):
                raise self.fail(f"expected a number after {start.text!r}", number)
            kind, text = number.kind, start.text + number.text
        elif start.word in ("date", "timestamp"):
            quoted = self.take()
            if quoted is None or quoted.kind != "string":
                raise self.fail(f"expected a quoted value after {start.text.upper()}", quoted)
            kind, text = start.word, _unquoted(quoted.text)
        elif kind == "string":
            text = _unquoted(text)
        elif start.word in ("true", "false", "null"):
            kind = start.word
        elif kind not in ("number", "real"):
            raise self.fail(
                f"expected a literal after DEFAULT ({_LITERALS}), found {start.text!r}", start
            )
        shown = f"{kind.upper()} {text!r}" if kind in ("date", "timestamp") else start.text
        if kind == "string":
            shown = start.text
        elif start.text in ("-", "+"):
            shown = text
        try:
            return _value_of(kind, text, field.type)
        except ValueError as exc:
            raise self.fail(
                f"bad default {shown} for column {field.name!r} ({field.type}): {exc}",
                start,
            ) from None


def _shown(ddl: str) -> str:
    """``ddl`` quoted for a message, cut short past 200 characters."""
    return repr(ddl if len(ddl) <= 200 else ddl[:197] + "...")


def _no_duplicates(names: list[str], where: str, parser: _Parser) -> None:
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidOptionError(
            f"{parser.what} {_shown(parser.ddl)}: {where} names {', '.join(map(repr, twice))} more than "
            "once"
        )


def parse_schema(ddl: str) -> pa.Schema:
    """The Arrow schema of a Spark DDL column list (see the module's table of types);
    :class:`InvalidOptionError` naming the problem and where it is."""
    if not isinstance(ddl, str):
        raise InvalidOptionError(f"a schema is DDL text, not {type(ddl).__name__} {ddl!r}")
    parser = _Parser(ddl)
    for token in parser.tokens:
        if token.kind == "other":
            raise parser.fail(f"unexpected character {token.text!r}", token)
    schema = parser.schema()
    check_schema(schema)
    return schema


def parse_type(ddl: str, *, column: str = "the type") -> pa.DataType:
    """The Arrow type of one Spark DDL type, such as ``"array<decimal(10, 2)>"``; ``column``:
    the column it is for, as errors name it."""
    if not isinstance(ddl, str):
        raise InvalidOptionError(f"a type is DDL text, not {type(ddl).__name__} {ddl!r}")
    parser = _Parser(ddl, "type")
    for token in parser.tokens:
        if token.kind == "other":
            raise parser.fail(f"unexpected character {token.text!r}", token)
    kind = parser.type(column)
    extra = parser.peek()
    if extra is not None:
        raise parser.fail(f"unexpected {extra.text!r} after the type")
    return kind


def parse_columns(ddl: str) -> list[ColumnDefinition]:
    """Columns to add to a table, as Spark's ``ALTER TABLE ... ADD COLUMNS`` takes them:
    ``"c int default 0, note string default 'none'"``, each column as in
    :func:`parse_schema` with an optional ``DEFAULT <literal>`` read as a value of its type."""
    if not isinstance(ddl, str):
        raise InvalidOptionError(f"columns are DDL text, not {type(ddl).__name__} {ddl!r}")
    parser = _Parser(ddl, "columns")
    for token in parser.tokens:
        if token.kind == "other" and token.text not in ("-", "+"):
            raise parser.fail(f"unexpected character {token.text!r}", token)
    definitions = parser.definitions()
    check_schema(pa.schema([d.field for d in definitions]))
    return definitions


def _unquoted(text: str) -> str:
    """A quoted string token's text: the quotes off, backslash escapes read."""
    escapes = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), text[1:-1], flags=re.S)


def _value_of(kind: str, text: str, t: pa.DataType) -> Any:
    """A literal (``kind``: a token kind, ``date``, ``timestamp``, ``true``, ``false`` or
    ``null``; ``text``: its text) as a Python value of type ``t``; ValueError saying why not."""
    if kind == "null":
        raise ValueError("a column without a default reads nulls; leave DEFAULT out")
    if pa.types.is_boolean(t):
        if kind not in ("true", "false"):
            raise ValueError("give true or false")
        return kind == "true"
    if pa.types.is_integer(t):
        if kind != "number":
            raise ValueError("give a whole number")
        value = int(text)
        bits = t.bit_width
        low, high = (
            (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            if pa.types.is_signed_integer(t)
            else (
                0,
                2**bits - 1,
            )
        )
        if not low <= value <= high:
            raise ValueError(f"out of its range, {low} to {high}")
        return value
    if pa.types.is_floating(t):
        if kind not in ("number", "real"):
            raise ValueError("give a number")
        return float(text)
    if pa.types.is_decimal(t):
        if kind not in ("number", "real"):
            raise ValueError("give a number")
        try:
            scalar = pa.scalar(Decimal(text)).cast(t, safe=True)
        except (InvalidOperation, pa.ArrowInvalid) as exc:
            raise ValueError(
                f"it does not fit (at most {t.precision - t.scale} digits before the point and "
                f"{t.scale} after)"
            ) from exc
        return scalar.as_py()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if kind != "string":
            raise ValueError("give 'quoted text'")
        return text
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        if kind != "string":
            raise ValueError("give 'quoted text' (its UTF-8 bytes are the value)")
        return text.encode("utf-8")
    if pa.types.is_date32(t):
        if kind not in ("date", "string"):
            raise ValueError("give DATE 'yyyy-mm-dd'")
        try:
            return datetime.date.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a date yyyy-mm-dd") from None
    if pa.types.is_timestamp(t):
        return _timestamp_of(kind, text, t)
    raise ValueError("defaults are for booleans, numbers, strings, binary, dates and timestamps")


def _timestamp_of(kind: str, text: str, t: pa.TimestampType) -> datetime.datetime:
    if kind not in ("timestamp", "date", "string"):
        raise ValueError("give TIMESTAMP 'yyyy-mm-dd hh:mm:ss'")
    try:
        value = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a timestamp yyyy-mm-dd hh:mm:ss[.ffffff][+hh:mm]"
        ) from None
    if t.tz is None:
        if value.tzinfo is not None:
            raise ValueError("it names an offset; a timestamp_ntz column has none")
        return value
    if value.tzinfo is None:
        return value.replace(tzinfo=datetime.timezone.utc)
    return value.astimezone(datetime.timezone.utc)
