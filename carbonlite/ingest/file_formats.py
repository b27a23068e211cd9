"""Decoding one finished file into record batches, streamed: a file is never loaded whole.

Parquet by row groups (``ParquetFile.iter_batches``), CSV by blocks (pyarrow's streaming
reader, typed by the table's columns), Arrow IPC files and streams batch by batch.
Newline-delimited JSON by blocks of lines, each line a value for the decoder the Kafka
ingester uses (``carbonlite/ingest/decode.py``), so both take a JSON value under one rule:
a row is one JSON object whose fields fit the table; a ``null`` line, a number, an array or
text that is not JSON is not a row (and never reaches pyarrow's reader, which an object-less
first line crashes). Blank lines hold no value. What decodes is then conformed to the table
by the ingester, as an append's rows are.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from carbonlite.errors import InvalidOptionError, SchemaMismatchError
from carbonlite.ingest.decode import braced_lines, decode_values

__all__ = ["FORMATS", "BadLineError", "FileFormat", "check_format", "decode_file"]

FileFormat = Literal["parquet", "json", "csv", "arrow"]
FORMATS: tuple[str, ...] = ("parquet", "json", "csv", "arrow")

_BATCH_ROWS = 65_536
_BLOCK_BYTES = 4 << 20
"""Bytes of JSON or CSV text decoded at a time."""
_ARROW_FILE_MAGIC = b"ARROW1"
_BLANK = b" \t\r"
"""What a blank line of a JSON file holds (JSON's whitespace)."""


def check_format(format: object) -> FileFormat:
    if format not in FORMATS:
        raise InvalidOptionError(
            f"format {format!r} is not one the file ingester reads: use one of "
            f"{', '.join(FORMATS)} (newline-delimited JSON; CSV with a header line; Arrow IPC "
            "files or streams)"
        )
    return format  # type: ignore[return-value]


class BadLineError(ValueError):
    """A line of a JSON file that is not a row: not one JSON object whose fields fit the
    table (the message gives its number and why)."""


def decode_file(
    format: FileFormat,
    file: pa.NativeFile,
    schema: pa.Schema,
    *,
    where: str = "the table",
    retired: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The record batches of ``file``; ``schema`` (the table's columns the file should
    hold) types JSON and CSV text. Raises what the decoder raises for bytes that are not a
    file of ``format``: for JSON, :class:`BadLineError` naming the first line that is not a
    row, or :class:`SchemaMismatchError` when that line names a column renamed or dropped
    (``retired``: name -> the change). ``defaults``: column -> the value of JSON rows that
    leave its field out. ``where``: the table, for messages."""
    if format == "parquet":
        parquet = pq.ParquetFile(file)
        yield from parquet.iter_batches(batch_size=_BATCH_ROWS, use_threads=False)
    elif format == "json":
        yield from _json_batches(file, schema, where, retired, defaults)
    elif format == "csv":
        reader = pa_csv.open_csv(
            file,
            read_options=pa_csv.ReadOptions(block_size=_BLOCK_BYTES, use_threads=False),
            convert_options=pa_csv.ConvertOptions(
                column_types={f.name: f.type for f in schema}, strings_can_be_null=False
            ),
        )
        yield from reader
    else:
        yield from _arrow_batches(file)


def _json_batches(
    file: pa.NativeFile,
    schema: pa.Schema,
    where: str,
    retired: Mapping[str, str] | None,
    defaults: Mapping[str, Any] | None,
) -> Iterator[pa.RecordBatch]:
    """The rows of a newline-delimited JSON file, a block of lines at a time."""
    before = 0  # lines in the blocks before this one
    for body, lines in _line_blocks(file):
        first, before = before, before + len(lines)
        if braced_lines(body, len(lines)):  # one object a line, no blank line: as they are
            held = None
            decoded = decode_values(
                lines, schema, where, retired=retired, defaults=defaults, joined=body
            )
        else:
            held = [i for i, line in enumerate(lines) if line.strip(_BLANK)]
            if not held:
                continue
            values = [lines[i] for i in held]
            decoded = decode_values(values, schema, where, retired=retired, defaults=defaults)
        if decoded.bad:
            index, why = decoded.bad[0]
            error = SchemaMismatchError if index in decoded.schema_changes else BadLineError
            line = index if held is None else held[index]
            raise error(f"line {first + line + 1}: {why}")
        yield from decoded.rows.to_batches()


def _line_blocks(file: pa.NativeFile) -> Iterator[tuple[bytes, list[bytes]]]:
    """The file's lines about :data:`_BLOCK_BYTES` at a time: each block as its bytes (the
    lines joined by ``\n``) and its lines; a line is never split between blocks."""
    rest = b""
    while chunk := file.read(_BLOCK_BYTES):
        data = rest + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            rest = data
            continue
        body, rest = data[:cut], data[cut + 1 :]
        yield body, body.split(b"\n")
    if rest:
        yield rest, [rest]


def _arrow_batches(file: pa.NativeFile) -> Iterator[pa.RecordBatch]:
    """An Arrow IPC file (random access, ``ARROW1`` magic) or stream."""
    head = file.read(len(_ARROW_FILE_MAGIC))
    file.seek(0)
    if head == _ARROW_FILE_MAGIC:
        ipc_file = pa.ipc.open_file(file)
        for i in range(ipc_file.num_record_batches):
            yield ipc_file.get_batch(i)
    else:
        yield from pa.ipc.open_stream(file)
