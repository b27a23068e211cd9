"""Decoding one finished file into record batches, streamed: a file is never loaded whole.

Parquet by row groups (``ParquetFile.iter_batches``), newline-delimited JSON and CSV by
blocks (pyarrow's streaming readers, typed by the table's columns), Arrow IPC files and
streams batch by batch. What decodes is then conformed to the table by the ingester, as an
append's rows are.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from carbonlite.errors import InvalidOptionError

__all__ = ["FORMATS", "FileFormat", "check_format", "decode_file"]

FileFormat = Literal["parquet", "json", "csv", "arrow"]
FORMATS: tuple[str, ...] = ("parquet", "json", "csv", "arrow")

_BATCH_ROWS = 65_536
_BLOCK_BYTES = 4 << 20
"""Bytes of JSON or CSV text decoded at a time."""
_ARROW_FILE_MAGIC = b"ARROW1"


def check_format(format: object) -> FileFormat:
    if format not in FORMATS:
        raise InvalidOptionError(
            f"format {format!r} is not one the file ingester reads: use one of "
            f"{', '.join(FORMATS)} (newline-delimited JSON; CSV with a header line; Arrow IPC "
            "files or streams)"
        )
    return format  # type: ignore[return-value]


def decode_file(
    format: FileFormat, file: pa.NativeFile, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The record batches of ``file``; ``schema`` (the table's columns the file should
    hold) types JSON and CSV text. Raises what the decoder raises for bytes that are not a
    file of ``format``."""
    if format == "parquet":
        parquet = pq.ParquetFile(file)
        yield from parquet.iter_batches(batch_size=_BATCH_ROWS, use_threads=False)
    elif format == "json":
        if _blank(file):
            return  # no line holds a value: no rows (pyarrow's reader wants one)
        reader = pa_json.open_json(
            file,
            read_options=pa_json.ReadOptions(block_size=_BLOCK_BYTES, use_threads=False),
            parse_options=pa_json.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="infer"
            ),
        )
        yield from reader
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


def _blank(file: pa.NativeFile) -> bool:
    """Whether the text holds nothing but whitespace (read as far as its first other byte)."""
    while chunk := file.read(_BLOCK_BYTES):
        if chunk.strip():
            file.seek(0)
            return False
    file.seek(0)
    return True


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
