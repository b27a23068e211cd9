"""What the service keeps in its write-ahead log, and the JSON its clients send.

A log record is one put: a 4-byte big-endian length, that many bytes of JSON
(``{"table", "producer_id", "sequence", "column_ids"}``), then the put's rows as an Arrow IPC
stream. ``column_ids`` holds the id of each column of the rows, in order: the table's
columns the put was acknowledged against (``conform.py``). A record of an earlier release has
no ``column_ids``; it decodes with None for them.

Client JSON: a ``DoPut`` descriptor's command ``{"table", "producer_id", "sequence"}``; a
``GetFlightInfo`` command ``{"table", "columns", "filter", "version"}``; and the service's
own tickets (``Ticket``), which a client only passes back. Each is checked against its
schema (``wire.py``: size and nesting before parsing, then every field's type and range,
unknown fields refused) before the service acts on it.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from carbonlite.errors import CorruptDataError
from carbonlite.serve.wire import (
    INT64_MAX,
    MAX_COMMAND_BYTES,
    MAX_TICKET_BYTES,
    BadRequestError,
    Rule,
    check_fields,
    dnf_rule,
    int64_rule,
    load_object,
    producer_id_rule,
    quote,
)

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
        """A ticket this service made, checked field by field (:class:`BadRequestError`)."""
        body = load_object(data, "ticket", limit=MAX_TICKET_BYTES)
        check_fields(body, _TICKET, "ticket")
        # a split's ticket or a memory ticket, never parts of both
        kind, foreign = ("memory", _SPLIT_ONLY) if body["memory"] else ("split", _MEMORY_ONLY)
        mixed = sorted(k for k in foreign if body.get(k) is not None)
        if mixed:
            raise BadRequestError(
                f"a {kind} ticket has no {', '.join(repr(k) for k in mixed)}: pass a ticket "
                "back as GetFlightInfo made it"
            )
        return cls(
            table=body["table"],
            version=body["version"],
            columns=body.get("columns"),
            filter=body.get("filter"),
            split=body.get("split"),
            memory=body["memory"],
            markers=body.get("markers"),
            instance=body.get("instance"),
            commits=body["commits"],
        )


def _is_table_name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value.encode("utf-8", "surrogatepass")) <= 1024


def _is_columns(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) <= 10_000
        and all(isinstance(c, str) and c for c in value)
        and len(set(value)) == len(value)
    )


def _is_markers(value: Any) -> bool:
    return isinstance(value, dict) and all(
        _PRODUCER_ID.accept(k) and (v is None or _is_int64(v)) for k, v in value.items()
    )


def _is_int64(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_MAX


_PRODUCER_ID = producer_id_rule()
_TABLE = Rule(
    "a table name such as 'events' or 'sales/eu' (text, at most 1024 bytes)", _is_table_name
)
_COLUMNS = Rule("a list of distinct column names", _is_columns, required=False)
_VERSION = int64_rule("a version number", required=False)
_PUT = {
    "table": _TABLE,
    "producer_id": _PRODUCER_ID,
    "sequence": int64_rule("a sequence that grows with each put of the producer"),
}
_READ = {"table": _TABLE, "columns": _COLUMNS, "filter": dnf_rule(), "version": _VERSION}
_TICKET = {
    "table": _TABLE,
    "version": int64_rule("the version it was planned on"),
    "columns": _COLUMNS,
    "filter": dnf_rule(),
    "split": int64_rule("a split of the plan", required=False),
    "memory": Rule("true or false", lambda v: isinstance(v, bool)),
    "markers": Rule("producers' markers", _is_markers, required=False),
    "instance": Rule(
        "a service run's id (32 hex digits)",
        lambda v: isinstance(v, str) and re.fullmatch("[0-9a-f]{32}", v) is not None,
        required=False,
    ),
    "commits": int64_rule("a commit count"),
}


_SPLIT_ONLY = ("split",)
_MEMORY_ONLY = ("markers", "instance")


def parse_put(command: bytes) -> PutRequest:
    """A ``DoPut`` command: ``{"table": str, "producer_id": str, "sequence": int}``."""
    body = load_object(command, "DoPut command", limit=MAX_COMMAND_BYTES)
    check_fields(body, _PUT, "DoPut command")
    return PutRequest(body["table"], body["producer_id"], body["sequence"])


def parse_read(command: bytes) -> ReadRequest:
    """A ``GetFlightInfo`` command: ``{"table", "columns"?, "filter"?, "version"?}``."""
    body = load_object(command, "GetFlightInfo command", limit=MAX_COMMAND_BYTES)
    check_fields(body, _READ, "GetFlightInfo command")
    return ReadRequest(
        body["table"], body.get("columns"), dnf_filter(body.get("filter")), body.get("version")
    )


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


def encode_put(put: PutRequest, rows: pa.Table, column_ids: Sequence[int] | None) -> bytes:
    """The log record of a put, with the id of each column of its rows (None: a record of an
    earlier release, carried forward as it was). Its rows are in a table's schema, which
    holds no dictionary types, so the IPC stream is its schema message, each batch's message
    and the end-of-stream marker (the bytes ``pa.ipc.new_stream`` writes, at a third of the
    cost)."""
    fields: dict[str, Any] = {
        "table": put.table,
        "producer_id": put.producer_id,
        "sequence": put.sequence,
    }
    if column_ids is not None:
        if len(column_ids) != rows.num_columns:
            raise ValueError(f"{len(column_ids)} column ids for {rows.num_columns} columns")
        fields["column_ids"] = list(column_ids)
    header = json.dumps(fields).encode()
    parts = [_LENGTH.pack(len(header)), header, rows.schema.serialize().to_pybytes()]
    parts.extend(b.serialize().to_pybytes() for b in rows.to_batches())
    parts.append(_END_OF_STREAM)
    return b"".join(parts)


def decode_put(payload: bytes, where: str) -> tuple[PutRequest, pa.Table, tuple[int, ...] | None]:
    """A log record's put, rows and column ids (None: a record of an earlier release)."""
    try:
        (length,) = _LENGTH.unpack_from(payload)
        header = json.loads(payload[4 : 4 + length])
        rows = pa.ipc.open_stream(pa.py_buffer(payload)[4 + length :]).read_all()
        request = PutRequest(header["table"], header["producer_id"], header["sequence"])
    except (struct.error, ValueError, KeyError, TypeError, OSError, pa.ArrowException) as exc:
        raise CorruptDataError(f"{where}: a put record does not decode: {exc}") from exc
    ids = header.get("column_ids")
    if ids is None:
        return request, rows, None
    if not (
        isinstance(ids, list)
        and len(ids) == rows.num_columns
        and all(_is_int64(i) and i > 0 for i in ids)
    ):
        raise CorruptDataError(
            f"{where}: a put record's column_ids are not one id (a positive integer) per "
            f"column of its {rows.num_columns}: {quote(ids)}"
        )
    return request, rows, tuple(ids)
