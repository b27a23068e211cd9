"""What the service keeps in its write-ahead log, and the JSON its clients send.

A log record is one put: a 4-byte big-endian length, that many bytes of JSON
(``{"table", "producer_id", "sequence"}``), then the put's rows as an Arrow IPC stream.

Client JSON: a ``DoPut`` descriptor's command ``{"table", "producer_id", "sequence"}``; a
``GetFlightInfo`` command ``{"table", "columns", "filter", "version"}``; and the service's
own tickets (``Ticket``), which a client only passes back.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from carbonlite.errors import CarbonLiteError, CorruptDataError

__all__ = [
    "BadRequestError",
    "PutRequest",
    "ReadRequest",
    "Ticket",
    "decode_put",
    "dnf_filter",
    "encode_put",
    "parse_put",
    "parse_read",
]

_LENGTH = struct.Struct(">I")


class BadRequestError(CarbonLiteError, ValueError):
    """A descriptor or ticket that is not the JSON the service expects."""


@dataclass(frozen=True, slots=True)
class PutRequest:
    table: str
    producer_id: str
    sequence: int


@dataclass(frozen=True, slots=True)
class ReadRequest:
    table: str
    columns: list[str] | None = None
    filter: list[Any] | None = None
    version: int | None = None


@dataclass(frozen=True, slots=True)
class Ticket:
    """One endpoint's rows: split ``split`` of the plan at ``version`` or, with ``memory``,
    the puts in memory that ``version`` lacks."""

    table: str
    version: int
    columns: list[str] | None
    filter: list[Any] | None
    split: int | None = None
    memory: bool = False
    markers: dict[str, int | None] | None = None
    """(memory) ``version``'s markers of the producers with puts in memory when planned."""
    instance: str | None = None
    """(memory) The service run that planned it."""
    commits: int = 0
    """(memory) That run's commit count just before ``version`` was read."""

    def encode(self) -> bytes:
        return json.dumps(
            {
                "table": self.table,
                "version": self.version,
                "columns": self.columns,
                "filter": self.filter,
                "split": self.split,
                "memory": self.memory,
                "markers": self.markers,
                "instance": self.instance,
                "commits": self.commits,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Ticket:
        body = _object(data, "ticket")
        try:
            return cls(
                table=body["table"],
                version=int(body["version"]),
                columns=body.get("columns"),
                filter=body.get("filter"),
                split=body.get("split"),
                memory=bool(body.get("memory", False)),
                markers=body.get("markers"),
                instance=body.get("instance"),
                commits=int(body.get("commits", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BadRequestError(f"ticket {data[:200]!r} is not one this service made") from exc


def _object(data: bytes, what: str) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequestError(f"the {what} is not JSON ({exc}): {data[:200]!r}") from None
    if not isinstance(body, dict):
        raise BadRequestError(f"the {what} must be a JSON object, not {data[:200]!r}")
    return body


def parse_put(command: bytes) -> PutRequest:
    """A ``DoPut`` command: ``{"table": str, "producer_id": str, "sequence": int}``."""
    body = _object(command, "DoPut descriptor command")
    table, producer, sequence = body.get("table"), body.get("producer_id"), body.get("sequence")
    if not isinstance(table, str) or not table:
        raise BadRequestError(f'the DoPut command needs "table" (a table name): {body}')
    if not isinstance(producer, str) or not producer:
        raise BadRequestError(f'the DoPut command needs "producer_id" (a string): {body}')
    if not isinstance(sequence, int) or isinstance(sequence, bool) or sequence < 0:
        raise BadRequestError(
            f'the DoPut command needs "sequence", an integer >= 0 that grows with each put of '
            f"the producer: {body}"
        )
    unknown = sorted(set(body) - {"table", "producer_id", "sequence"})
    if unknown:
        raise BadRequestError(f"the DoPut command has unknown keys {unknown}: {body}")
    return PutRequest(table, producer, sequence)


def parse_read(command: bytes) -> ReadRequest:
    """A ``GetFlightInfo`` command: ``{"table", "columns"?, "filter"?, "version"?}``."""
    body = _object(command, "GetFlightInfo descriptor command")
    table = body.get("table")
    if not isinstance(table, str) or not table:
        raise BadRequestError(f'the command needs "table" (a table name): {body}')
    columns = body.get("columns")
    if columns is not None and (
        not isinstance(columns, list) or not all(isinstance(c, str) for c in columns)
    ):
        raise BadRequestError(f'"columns" must be a list of column names: {body}')
    filter = body.get("filter")
    if filter is not None and not isinstance(filter, list):
        raise BadRequestError(
            f'"filter" must be DNF lists such as [["id", ">", 5]] or [[["a", "=", 1]], '
            f'[["b", "<", 2]]]: {body}'
        )
    version = body.get("version")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise BadRequestError(f'"version" must be a version number: {body}')
    unknown = sorted(set(body) - {"table", "columns", "filter", "version"})
    if unknown:
        raise BadRequestError(f"the command has unknown keys {unknown}: {body}")
    return ReadRequest(table, columns, dnf_filter(filter), version)


def dnf_filter(filter: list[Any] | None) -> list[Any] | None:
    """JSON lists of a DNF filter as the tuples ``parse_filter`` takes."""
    if filter is None:
        return None

    def term(x: Any) -> Any:
        if isinstance(x, list) and len(x) == 3 and isinstance(x[0], str):
            return (x[0], x[1], tuple(x[2]) if isinstance(x[2], list) else x[2])
        if isinstance(x, list):
            return [term(y) for y in x]
        return x

    return [term(x) for x in filter]


_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def encode_put(put: PutRequest, rows: pa.Table) -> bytes:
    """The log record of a put. Its rows are in a table's schema, which holds no dictionary
    types, so the IPC stream is its schema message, each batch's message and the
    end-of-stream marker (the bytes ``pa.ipc.new_stream`` writes, at a third of the cost)."""
    header = json.dumps(
        {"table": put.table, "producer_id": put.producer_id, "sequence": put.sequence}
    ).encode()
    parts = [_LENGTH.pack(len(header)), header, rows.schema.serialize().to_pybytes()]
    parts.extend(b.serialize().to_pybytes() for b in rows.to_batches())
    parts.append(_END_OF_STREAM)
    return b"".join(parts)


def decode_put(payload: bytes, where: str) -> tuple[PutRequest, pa.Table]:
    try:
        (length,) = _LENGTH.unpack_from(payload)
        header = json.loads(payload[4 : 4 + length])
        rows = pa.ipc.open_stream(pa.py_buffer(payload)[4 + length :]).read_all()
        return PutRequest(header["table"], header["producer_id"], header["sequence"]), rows
    except (struct.error, ValueError, KeyError, OSError, pa.ArrowException) as exc:
        raise CorruptDataError(f"{where}: a put record does not decode: {exc}") from exc
