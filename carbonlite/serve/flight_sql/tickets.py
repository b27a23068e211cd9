"""Statement tickets: opaque to clients, carrying the query, its parameters and the version
of every table it reads, signed so the service can trust what comes back.

A ticket is ``b"CLSQL1" + payload + HMAC-SHA256(key, b"CLSQL1" + payload)`` (an endpoint of a
plain read, ``direct.py``: ``b"CLSQLR1"`` + the service's own read ticket, signed alike), the payload a
JSON object (``query``, ``versions``: table name -> version, ``markers``: table name ->
the version's markers of the producers with puts in memory, ``through``: table name -> each
producer's last sequence in memory then, ``mark``: the service's buffer
mark ``[instance, commits]`` or null, ``past``: ``"<table>@<suffix>"`` -> the version a
time-travel name reads (``references.py``), ``parameters``: the bound parameter rows as an
Arrow IPC stream in base64, or null). The key is made at random when
the service starts and never leaves it: a ticket altered by a client, made by another
service or by this one before a restart fails its check with :class:`TicketError`, and
nothing in it is used.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field

import pyarrow as pa

from carbonlite.serve.wire import BadRequestError

__all__ = ["StatementTicket", "TicketError", "TicketSigner"]

_MAGIC = b"CLSQL1"
_READ_MAGIC = b"CLSQLR1"
"""A plain read's endpoint: the service's own read ticket, signed (``wrap``)."""
_MAC_BYTES = hashlib.sha256().digest_size


class TicketError(BadRequestError):
    """A statement ticket this service did not make, or one changed since it was made."""


@dataclass(frozen=True, slots=True)
class StatementTicket:
    """What a statement ticket stands for."""

    query: str
    versions: dict[str, int]
    """The version each table is read at (the latest when the ticket was made)."""
    parameters: pa.Table | None = None
    """The bound parameter rows (one run of the query per row), if any."""
    markers: dict[str, dict[str, int | None]] = field(default_factory=dict)
    """Per table read with its rows in memory: the version's producer markers."""
    through: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per table read with its rows in memory: each producer's last sequence included."""
    mark: tuple[str, int] | None = None
    """The buffer's mark (instance, commits) taken before the versions were read."""
    past: dict[str, int] = field(default_factory=dict)
    """Per time-travel name the query reads (``"<table>@<suffix>"``): its version."""


def _ipc_bytes(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return sink.getvalue().to_pybytes()


class TicketSigner:
    """Makes and checks the tickets of one service (its key made here, at random)."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, hashlib.sha256).digest()

    def issue(self, ticket: StatementTicket) -> bytes:
        """The signed bytes of ``ticket``."""
        params = None if ticket.parameters is None else _ipc_bytes(ticket.parameters)
        payload = {
            "query": ticket.query,
            "versions": ticket.versions,
            "markers": ticket.markers,
            "through": ticket.through,
            "mark": None if ticket.mark is None else list(ticket.mark),
            "past": ticket.past,
            "parameters": None if params is None else base64.b64encode(params).decode(),
        }
        body = _MAGIC + json.dumps(payload, separators=(",", ":")).encode()
        return body + self._mac(body)

    def wrap(self, read_ticket: bytes) -> bytes:
        """A signed ticket for one endpoint of the service's own read (a plain read,
        ``direct.py``): ``read_ticket`` as the service's DoGet takes it."""
        body = _READ_MAGIC + read_ticket
        return body + self._mac(body)

    @staticmethod
    def is_wrapped(data: bytes) -> bool:
        return data.startswith(_READ_MAGIC)

    def unwrap(self, data: bytes) -> bytes:
        """The read ticket a :meth:`wrap` ticket holds; :class:`TicketError` unless this
        service made it, unchanged."""
        return self._verified(data, _READ_MAGIC)[len(_READ_MAGIC) :]

    def _verified(self, data: bytes, magic: bytes) -> bytes:
        body, mac = data[:-_MAC_BYTES], data[-_MAC_BYTES:]
        if (
            len(data) <= len(magic) + _MAC_BYTES
            or not body.startswith(magic)
            or not hmac.compare_digest(mac, self._mac(body))
        ):
            raise TicketError(
                "this Flight SQL ticket was not made by this service, or was changed since "
                "(tickets are signed, and valid only with the service run that made them): "
                "run the query again (GetFlightInfo) for a new one"
            )
        return body

    def check(self, data: bytes) -> StatementTicket:
        """The ticket ``data`` stands for; :class:`TicketError` unless this service made it,
        unchanged."""
        body = self._verified(data, _MAGIC)
        payload = json.loads(body[len(_MAGIC) :])
        encoded = payload["parameters"]
        parameters = None
        if encoded is not None:
            reader = pa.ipc.open_stream(base64.b64decode(encoded))
            parameters = reader.read_all()
        versions = {str(k): int(v) for k, v in payload["versions"].items()}
        mark = payload["mark"]
        return StatementTicket(
            str(payload["query"]),
            versions,
            parameters,
            payload["markers"],
            payload["through"],
            None if mark is None else (str(mark[0]), int(mark[1])),
            {str(k): int(v) for k, v in payload["past"].items()},
        )
