"""Kafka message values (JSON objects) to Arrow rows of a table's schema, vectorized, and safe
on any bytes.

A value is a row when it is one JSON object (RFC 8259: UTF-8 text, no ``NaN`` or
``Infinity``) whose fields fit the table's columns; anything else is a bad record, with the
reason. Fields the table lacks are ignored, and so is a key such a field repeats; a key
repeated for one of the table's columns is bad (which one was meant?).

After a schema change, a value with a field named as a column that was renamed or dropped
since is bad, its reason naming the change and its version (``retired``): its value would
otherwise be dropped silently. A column added with a default gets it in the rows of values
that leave its field out (``defaults``; a field given as ``null`` stays null).

Decoding takes two steps:

1. **Screening**, each value by its bytes alone: not empty, one ``{...}`` between JSON
   whitespace, valid UTF-8, no ``NaN``/``Infinity`` literal, no raw line break inside a
   string (the batch is one value a line: other line breaks become spaces). About 0.1 µs a
   value: one check per value, and a few scans of the whole batch. It also keeps pyarrow's
   JSON reader away from what crashes it: a block whose first row is not an object (a
   top-level ``null``) makes the reader dereference an empty builder stack, a SIGSEGV
   (apache/arrow#47409). After screening every line starts with ``{``.
2. **Reading** the screened values in one call to pyarrow's JSON reader, with the table's
   columns as its explicit schema, then conforming them to the table (the casts ``append``
   allows). A float that came out infinite fails the read too (the reader turns an integer
   past a double's range into infinity). When the read fails, each half is read again, down
   to single values: ``k`` bad values among ``n`` cost about ``k * log2(n)`` small reads,
   not ``n``.

The verdict on a value never depends on the other values of its batch, since a restart may
read the same messages in batches of another shape and must sort them the same way (or a
message could become both a row and a bad record). Screening looks at one value at a time;
and a batch the reader accepts is one whose every value it accepts alone: each value is one
line that starts with ``{`` and ends with ``}``, so none can continue or close another, and
each gives at least one row, so as many rows as values means one row each.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from carbonlite.errors import CarbonLiteError, InvalidOptionError
from carbonlite.format.conform import conform_batch

__all__ = [
    "METADATA_COLUMNS",
    "Decoded",
    "braced_lines",
    "check_json_columns",
    "data_schema",
    "decode_values",
    "screen_value",
]

METADATA_COLUMNS = ("_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_key")
"""Columns an ingester fills from the message rather than its value, when the table has them."""

_BLOCK = 1 << 24
_WHITESPACE = b" \t\n\r"
_STRING = re.compile(rb'"(?:[^"\\]|\\.?)*(?:"|\Z)', re.S)
"""A JSON string, or an unterminated one up to the end: linear on any bytes."""
_LITERAL = re.compile(rb"NaN|Inf")
"""What pyarrow's reader (RapidJSON with its NaN-and-Infinity flag) takes for a number:
``NaN``, ``Inf``, ``Infinity``, each with an optional ``-``. Never valid JSON."""
_ERRORS = (pa.ArrowException, ValueError, CarbonLiteError)


@dataclass(frozen=True, slots=True)
class Decoded:
    """The rows of the good values, and ``(index, error)`` of each bad one, by index."""

    rows: pa.Table
    good: list[int]
    bad: list[tuple[int, str]]
    schema_changes: frozenset[int] = frozenset()
    """Indices of the bad values that name a renamed or dropped column."""


def data_schema(schema: pa.Schema) -> pa.Schema:
    """The table's columns that come from message values."""
    return pa.schema([f for f in schema if f.name not in METADATA_COLUMNS])


def check_json_columns(schema: pa.Schema, where: str) -> None:
    """Raise :class:`InvalidOptionError` naming every column of ``schema`` (a table's value
    columns) that pyarrow's JSON reader cannot fill: maps, durations, fixed-size binaries and
    lists, large lists, half floats, dictionaries; and when there is no column at all."""
    if not len(schema):
        raise InvalidOptionError(
            f"{where} has no column for message values (only {', '.join(METADATA_COLUMNS)})"
        )
    unreadable = []
    for field in schema:
        try:  # nullable here: "{}" lacks the column, a message need not
            _read([b"{}"], pa.schema([field.with_nullable(True)]))
        except pa.ArrowNotImplementedError:
            unreadable.append(f"{field.name!r} ({field.type})")
        except pa.ArrowException:
            pass  # a value is required inside (a struct's field that is not nullable)
    if unreadable:
        raise InvalidOptionError(
            f"{where} has columns that JSON messages cannot fill: {', '.join(unreadable)}; "
            "ingest into a table whose columns are numbers, strings, binaries, booleans, dates, "
            "times, timestamps, decimals, or lists and structs of them"
        )


# --- screening ----------------------------------------------------------------------------------


def _braced(value: bytes | None) -> bool:
    """Whether ``value`` starts with ``{`` and ends with ``}`` (JSON whitespace aside)."""
    if not value:
        return False
    if value[:1] == b"{" and value[-1:] == b"}":
        return True
    inner = value.strip(_WHITESPACE)
    return inner[:1] == b"{" and inner[-1:] == b"}"


def _not_an_object(value: bytes | None) -> str:
    """Why a value that is not braced is bad, in words (the standard library tells what it is)."""
    if not value:
        return "the message has no value (a tombstone or an empty message)"
    try:
        parsed = json.loads(value)
    except UnicodeDecodeError as exc:
        return _not_utf8(exc)
    except RecursionError:
        return "not a JSON object: nested too deeply to read"
    except ValueError as exc:  # not JSON, or an integer of more digits than Python reads
        return f"not a JSON object: {exc}"
    if isinstance(parsed, dict):  # the standard library also takes a BOM, UTF-16 and UTF-32
        return "not a JSON object in UTF-8 text (a byte-order mark, or another encoding)"
    return f"not a JSON object: the value is {_KINDS.get(type(parsed), 'another JSON value')}"


_KINDS = {
    type(None): "null",
    bool: "true or false",
    int: "a number",
    float: "a number",
    str: "a string",
    list: "an array",
}


def _not_utf8(exc: UnicodeDecodeError) -> str:
    return f"not UTF-8 text: {exc.reason} at byte {exc.start}"


def _utf8_error(value: bytes) -> str | None:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _not_utf8(exc)
    return None


def _literal_error(value: bytes) -> str | None:
    """Whether ``value`` has a ``NaN`` or ``Infinity`` literal (outside its strings)."""
    if b"N" not in value and b"I" not in value:
        return None
    found = _LITERAL.search(_STRING.sub(b'""', value))
    if found is None:
        return None
    return f"not JSON: {found.group().decode()} is not a JSON number (JSON has no NaN or Infinity)"


def _line_break_error(value: bytes) -> str | None:
    """Whether ``value`` has a raw line break inside a string (JSON writes ``\\n``): the
    batch is one value a line, so line breaks elsewhere become spaces, but not these."""
    if b"\n" not in value and b"\r" not in value:
        return None
    for string in _STRING.findall(value):
        if b"\n" in string or b"\r" in string:
            return "not JSON: a raw line break inside a string (JSON escapes it as \\n)"
    return None


def screen_value(value: bytes | None) -> str | None:
    """Why ``value`` cannot be one JSON object, judged from its bytes alone (None: it may be,
    the JSON reader decides)."""
    if not _braced(value):
        return _not_an_object(value)
    assert value is not None
    return _utf8_error(value) or _literal_error(value) or _line_break_error(value)


def _one_line(value: bytes) -> bytes:
    """A screened value on one line: its line breaks (all between tokens) made spaces."""
    return value.replace(b"\n", b" ").replace(b"\r", b" ")


def _may_have_literal(body: bytes) -> bool:
    # ``in`` for one byte is a memchr: most batches have no capital N or I at all
    return (b"N" in body and b"NaN" in body) or (b"I" in body and b"Inf" in body)


@dataclass(slots=True)
class _Screened:
    """The values that may be objects (``indices``, each as one line in ``lines``), and
    ``(index, error)`` of the others."""

    indices: list[int]
    lines: list[bytes]
    bad: list[tuple[int, str]]
    body: bytes | None = None
    """``lines`` joined, when screening joined them already."""


def braced_lines(joined: bytes, count: int) -> bool:
    """Whether ``joined`` is ``count`` values joined by ``\n``, each starting with ``{`` and
    ending with ``}`` (nothing around them), told by whole-batch scans: every line break
    stands between a ``}`` and a ``{``."""
    return (
        joined[:1] == b"{"
        and joined[-1:] == b"}"
        and joined.count(b"\n") == count - 1
        and joined.count(b"}\n{") == count - 1
    )


def _screen(values: Sequence[bytes | None], joined: bytes | None = None) -> _Screened:
    """Every value with :func:`screen_value`'s verdict; whole-batch scans stand in for the
    per-value text checks when they find nothing to check (ASCII, no capital N or I, no line
    break but the joins). ``joined``: the values joined by ``\n``, when at hand."""
    present: Sequence[bytes]
    if joined is not None and braced_lines(joined, len(values)):
        braced, bad, raw = list(range(len(values))), [], joined
        present = cast(Sequence[bytes], values)
    else:
        braced = [
            i
            for i, v in enumerate(values)
            if (v and v[:1] == b"{" and v[-1:] == b"}") or _braced(v)  # the first: most, fast
        ]
        bad = [(i, _not_an_object(values[i])) for i in _missing(braced, len(values))]
        present = _present(values, braced)
        raw = b"\n".join(present)
    if (
        raw.isascii()
        and not _may_have_literal(raw)
        and raw.count(b"\n") == len(braced) - 1
        and b"\r" not in raw
    ):
        return _Screened(braced, list(present), bad, raw)
    kept, lines = [], []
    for i, value in zip(braced, present, strict=True):
        problem = screen_value(value)
        if problem is None:
            kept.append(i)
            lines.append(_one_line(value))
        else:
            bad.append((i, problem))
    return _Screened(kept, lines, bad)


def _present(values: Sequence[bytes | None], indices: list[int]) -> list[bytes]:
    """The values at ``indices``, which are not None."""
    if len(indices) == len(values):
        return cast(list[bytes], list(values))
    return cast(list[bytes], [values[i] for i in indices])


def _missing(present: list[int], n: int) -> list[int]:
    if len(present) == n:
        return []
    have = set(present)
    return [i for i in range(n) if i not in have]


# --- reading ------------------------------------------------------------------------------------


def _read(lines: Sequence[bytes], schema: pa.Schema, body: bytes | None = None) -> pa.Table:
    """The rows of ``lines`` (values of one line each; ``body``: them joined, if at hand),
    read as one batch."""
    body = b"\n".join(lines) if body is None else body
    table = pj.read_json(
        io.BytesIO(body),
        read_options=pj.ReadOptions(block_size=max(_BLOCK, len(body) + 1)),
        parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
    )
    if table.num_rows != len(lines):
        if len(lines) == 1:
            raise ValueError(f"the value holds {table.num_rows} JSON values, not one object")
        raise ValueError(f"{len(lines)} values decoded to {table.num_rows} rows")
    if any(_has_non_finite(table.column(name)) for name in _floats(schema)):
        raise ValueError("a number is out of the range of its column's float type")
    return table


def _has_non_finite(array: pa.Array | pa.ChunkedArray) -> bool:
    """Whether a float anywhere in ``array`` (inside lists and structs too) is infinite or
    NaN. The reader turns an integer literal past a double's range (310 digits) into
    infinity, where ``1e999`` is its error; and NaN and Infinity literals are screened out,
    so a non-finite float can only be such a number."""
    kind = array.type
    if pa.types.is_floating(kind):
        return bool(pc.any(pc.invert(pc.is_finite(array))).as_py())  # None: no value
    if isinstance(array, pa.ChunkedArray):
        return any(_has_non_finite(chunk) for chunk in array.chunks)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _has_non_finite(array.flatten())
    if pa.types.is_struct(kind):
        return any(_has_non_finite(array.field(i)) for i in range(kind.num_fields))
    return False


def _floats(schema: pa.Schema) -> list[str]:
    """The columns of ``schema`` that hold floats, at any depth."""

    def holds(kind: pa.DataType) -> bool:
        if pa.types.is_floating(kind):
            return True
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            return holds(kind.value_type)
        if pa.types.is_struct(kind):
            return any(holds(kind.field(i).type) for i in range(kind.num_fields))
        return False

    return [f.name for f in schema if holds(f.type)]


def _conformed(table: pa.Table, schema: pa.Schema, where: str) -> pa.Table:
    batches = [
        conform_batch(b, schema, where=where, allow_missing_nullable=True)
        for b in table.to_batches()
    ]
    return pa.Table.from_batches(batches, schema=schema)


@dataclass(slots=True)
class _Reading:
    """What reading screened values found, in index order."""

    tables: list[pa.Table]
    good: list[int]
    bad: list[tuple[int, str]]


def _read_halving(
    screened: _Screened, start: int, stop: int, schema: pa.Schema, where: str, out: _Reading
) -> None:
    """Read the screened values ``start`` to ``stop`` as one batch; when that fails, each half
    on its own."""
    whole = start == 0 and stop == len(screened.lines)
    body = screened.body if whole else None
    try:
        table = _conformed(_read(screened.lines[start:stop], schema, body), schema, where)
    except _ERRORS as exc:
        if stop - start == 1:
            out.bad.append((screened.indices[start], _message(exc)))
            return
        middle = (start + stop) // 2
        _read_halving(screened, start, middle, schema, where, out)
        _read_halving(screened, middle, stop, schema, where, out)
        return
    out.tables.append(table)
    out.good += screened.indices[start:stop]


def decode_values(
    values: Sequence[bytes | None],
    schema: pa.Schema,
    where: str,
    *,
    retired: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
    joined: bytes | None = None,
) -> Decoded:
    """Decode ``values`` into rows of ``schema`` (the table's value columns); never raises for
    what a value holds. ``retired``: names of renamed or dropped columns -> the change (a
    value with such a field is bad); ``defaults``: column -> the value of rows whose value
    leaves the field out. ``joined``: ``values`` joined by ``\n``, when the caller has them
    so (a file's lines): screened by whole-batch scans, never joined again."""
    screened = _screen(values, joined)
    changed: list[tuple[int, str]] = []
    if retired:
        screened, changed = _without_retired(screened, retired)
    out = _Reading([], [], [])
    if screened.indices:
        _read_halving(screened, 0, len(screened.indices), schema, where, out)
    rows = pa.concat_tables(out.tables) if out.tables else schema.empty_table()
    if defaults and rows.num_rows:
        rows = _with_defaults(rows, out.good, values, schema, defaults)
    return Decoded(
        rows,
        out.good,
        sorted(screened.bad + out.bad + changed),
        frozenset(i for i, _ in changed),
    )


def _top_level_keys(value: bytes) -> set[str] | None:
    """The keys of ``value``'s top-level object, or None when it is no JSON object (the
    reader then tells why)."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return set(parsed) if isinstance(parsed, dict) else None


def _quoted(names: Iterable[str]) -> list[bytes]:
    return [json.dumps(n).encode() for n in names]


def _without_retired(
    screened: _Screened, retired: Mapping[str, str]
) -> tuple[_Screened, list[tuple[int, str]]]:
    """``screened`` without the values that have a field named as a renamed or dropped
    column, and those as bad values with the change. Only values holding such a name in
    quotes are parsed (a whole-batch scan first: usually none)."""
    needles = _quoted(retired)
    body = screened.body if screened.body is not None else b"\n".join(screened.lines)
    if not any(n in body for n in needles):
        return screened, []
    kept, lines, changed = [], [], []
    for i, line in zip(screened.indices, screened.lines, strict=True):
        keys = _top_level_keys(line) if any(n in line for n in needles) else None
        found = sorted(k for k in keys or () if k in retired)
        if found:
            reasons = "; ".join(f"field {k!r}: {retired[k]}" for k in found)
            changed.append((i, f"names a column the table no longer has ({reasons})"))
        else:
            kept.append(i)
            lines.append(line)
    return _Screened(kept, lines, screened.bad), changed


def _with_defaults(
    rows: pa.Table,
    good: list[int],
    values: Sequence[bytes | None],
    schema: pa.Schema,
    defaults: Mapping[str, Any],
) -> pa.Table:
    """``rows`` (of the values at ``good``) with the default of each column of ``defaults``
    where the value leaves its field out. A value without the name in quotes lacks it; one
    with it is parsed to tell a field from the same text in a string."""
    for name, needle in zip(defaults, _quoted(defaults), strict=True):
        if name not in schema.names:
            continue
        absent = []
        for i in good:
            value = values[i] or b""
            absent.append(needle not in value or name not in (_top_level_keys(value) or ()))
        if not any(absent):
            continue
        index = rows.schema.get_field_index(name)
        filled = pc.if_else(
            pa.array(absent), pa.scalar(defaults[name], rows.schema.field(name).type), rows[name]
        )
        rows = rows.set_column(index, rows.schema.field(name), filled)
    return rows


def _message(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    return first if len(first) <= 500 else first[:497] + "..."
