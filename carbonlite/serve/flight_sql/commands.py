"""The Flight SQL calls the service answers, and their dispatch.

- ``GetFlightInfo`` of ``CommandStatementQuery`` (or ``CommandPreparedStatementQuery``):
  the query is checked (``engine.py``), the latest version of every table it reads fixed
  with the acknowledged rows it lacks (``readings.py``), and the version of each past one
  it names (``"events@v3"``, ``references.py``), the result's schema found (a prepared
  statement's, found when it was prepared, is used again while those versions are the
  same), and one endpoint returned whose ticket (``TicketStatementQuery``) carries the
  query, its parameters and those readings, signed (``tickets.py``).
- ``DoGet`` of that ticket: the query run over those readings, its batches streamed.
- A plain read of one table (``SELECT * FROM events``, ``SELECT k, kind FROM sales.eu``:
  ``direct.py``) is answered instead with the endpoints of the service's own read of it
  (``FlightService.read_info``): one per split plus the rows in memory, at one version,
  in the table's own Arrow types, read in parallel by the client; DuckDB is not involved.
  Each endpoint's ticket is the service's read ticket, signed (``TicketSigner.wrap``), and
  its DoGet the service's own (``FlightService.read_ticket``).
- ``DoAction("CreatePreparedStatement")``: a handle, the result's and the parameters'
  schemas (IPC-serialized); ``DoPut`` of ``CommandPreparedStatementQuery`` binds parameter
  rows to it; ``DoAction("ClosePreparedStatement")`` forgets it.
- ``GetFlightInfo``/``DoGet`` of ``GetCatalogs``, ``GetDbSchemas``, ``GetTables``,
  ``GetTableTypes``, ``GetPrimaryKeys``, ``GetSqlInfo`` (``metadata.py``) and
  ``GetXdbcTypeInfo`` (``xdbc.py``): their ticket is the command.

Every other Flight SQL command or action answers ``FlightUnimplementedError``. One query
through ADBC (prepare, GetFlightInfo, DoGet) builds two sandboxes, each registering only the
tables the query names (counted in :class:`SqlWork`).
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.flight as flight

import carbonlite.serve.flight_sql.metadata as metadata
from carbonlite.errors import CarbonLiteError
from carbonlite.reader.planner import project_schema
from carbonlite.serve.buffer import Buffer, Mark
from carbonlite.serve.catalog import Catalog
from carbonlite.serve.flight_sql.direct import read_columns, served_table
from carbonlite.serve.flight_sql.dispatch import SqlUnsupportedError, guarded_stream
from carbonlite.serve.flight_sql.engine import (
    ReadTable,
    SqlError,
    SqlLimits,
    SqlSandbox,
    Statement,
    checked_statement,
)
from carbonlite.serve.flight_sql.naming import sql_names
from carbonlite.serve.flight_sql.protocol import (
    ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult,
    CommandGetCatalogs,
    CommandGetDbSchemas,
    CommandGetPrimaryKeys,
    CommandGetSqlInfo,
    CommandGetTables,
    CommandGetTableTypes,
    CommandGetXdbcTypeInfo,
    CommandPreparedStatementQuery,
    CommandStatementQuery,
    DoPutPreparedStatementResult,
    Message,
    TicketStatementQuery,
    UnknownMessage,
    decode_any,
    encode_any,
)
from carbonlite.serve.flight_sql.readings import Reading, memory_rows, plan_readings
from carbonlite.serve.flight_sql.references import chosen_tables, past_version
from carbonlite.serve.flight_sql.tickets import StatementTicket, TicketSigner
from carbonlite.serve.flight_sql.xdbc import xdbc_type_info
from carbonlite.serve.records import ReadRequest
from carbonlite.serve.streams import bounded_batches
from carbonlite.table import Table

__all__ = ["ACTIONS", "MAX_PARAMETER_BYTES", "MAX_PREPARED", "FlightSqlCommands", "SqlWork"]

log = logging.getLogger("carbonlite.serve")

ACTIONS = [
    (
        "CreatePreparedStatement",
        "Flight SQL: prepare a query (body: an Any of ActionCreatePreparedStatementRequest).",
    ),
    (
        "ClosePreparedStatement",
        "Flight SQL: close a prepared statement (body: an Any of "
        "ActionClosePreparedStatementRequest).",
    ),
]
MAX_PREPARED = 1024
"""Most prepared statements open at once (the oldest is closed to make room)."""
MAX_PARAMETER_BYTES = 1024 * 1024
"""Most bytes of parameter rows bound to a prepared statement at once."""
_WRITES = frozenset(
    {"CommandStatementUpdate", "CommandPreparedStatementUpdate", "CommandStatementIngest"}
)
_METADATA = (
    CommandGetCatalogs,
    CommandGetDbSchemas,
    CommandGetTables,
    CommandGetTableTypes,
    CommandGetSqlInfo,
    CommandGetPrimaryKeys,
    CommandGetXdbcTypeInfo,
)


@dataclass(frozen=True, slots=True)
class _Prepared:
    statement: Statement
    query: str
    parameters: pa.Table | None = None
    schema: pa.Schema | None = None
    """The result's schema, found when the statement was prepared..."""
    versions: dict[str, int] = field(default_factory=dict)
    """... at these versions of the tables it reads (past names included)."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a query's sandbox registers: service name (or past name) -> the table as read."""

    tables: dict[str, ReadTable]
    past: dict[str, int]
    """Past name (``"<table>@<suffix>"``) -> its version."""

    @property
    def versions(self) -> dict[str, int]:
        return {name: version for name, (_, version, _) in self.tables.items()}


@dataclass(frozen=True, slots=True)
class _PlainAnswer:
    """A plain read of one table (``direct.py``): the service's read that answers it, and the
    schema of its rows (the table's columns as they are)."""

    request: ReadRequest
    schema: pa.Schema


@dataclass(slots=True)
class SqlWork:
    """The work the Flight SQL side has done, counted."""

    sandboxes: int = 0
    """DuckDB sandboxes built (one per result schema found or query run)."""
    tables_registered: int = 0
    """Tables (and past versions) registered in them."""
    plain_reads: int = 0
    """Queries answered by the service's own read of a table (``direct.py``)."""


ReadInfo = Callable[[ReadRequest, flight.FlightDescriptor], flight.FlightInfo]
"""The service's own read of a table: its schema and endpoints (``FlightService.read_info``)."""


ReadTicket = Callable[[flight.Ticket], flight.FlightDataStream]
"""The service's DoGet of one of its own read tickets (``FlightService.read_ticket``)."""


def _unimplemented(message: Message) -> SqlUnsupportedError:
    name = message.name if isinstance(message, UnknownMessage) else type(message).__name__
    if name in _WRITES:
        return SqlUnsupportedError(
            f"Flight SQL {name}: the service's SQL is read-only. Write rows with DoPut (the "
            "service's put command); change tables with the carbonlite API"
        )
    return SqlUnsupportedError(f"Flight SQL {name} is not supported by this service")


def _no_transactions(transaction_id: bytes | None) -> None:
    if transaction_id is not None:
        raise SqlUnsupportedError(
            "Flight SQL transactions are not supported: every query reads one snapshot"
        )


def _ipc_schema(schema: pa.Schema) -> bytes:
    return bytes(schema.serialize().to_pybytes())


class FlightSqlCommands:
    """The Flight SQL side of one service, over its ``catalog``."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        buffer: Buffer | None = None,
        limits: SqlLimits | None = None,
        read_info: ReadInfo | None = None,
        read_ticket: ReadTicket | None = None,
    ) -> None:
        self.catalog = catalog
        self.buffer = buffer
        self.read_info = read_info
        self.read_ticket = read_ticket
        self.limits = limits or SqlLimits()
        self.signer = TicketSigner()
        self._prepared: OrderedDict[bytes, _Prepared] = OrderedDict()
        self._lock = threading.Lock()
        self.work = SqlWork()

    # --- tables ---------------------------------------------------------------------------------

    def _latest(self) -> dict[str, tuple[Table, int]]:
        """Every table and its latest version."""
        readings, _ = plan_readings(self.catalog, None)
        return {name: (t, r.version) for name, (t, r) in readings.items()}

    def _plan(self, statement: Statement, latest: Mapping[str, tuple[Table, int]]) -> _Plan:
        """The tables ``statement`` reads, of those in ``latest`` (at those versions, without
        their rows in memory: enough for a result's schema), and the past versions it names."""
        chosen = chosen_tables(statement.tables, sql_names(latest))
        tables: dict[str, ReadTable] = {n: (*latest[n], None) for n in chosen.names}
        past: dict[str, int] = {}
        for key, (name, suffix) in chosen.past.items():
            table = latest[name][0]
            past[key] = past_version(table, suffix, name)
            tables[key] = (table, past[key], None)
        return _Plan(tables, past)

    def _tables_of(self, ticket: StatementTicket) -> dict[str, ReadTable]:
        """The tables as ``ticket`` reads them: each at its version, with the rows in memory
        that version lacks, and the past versions it names."""
        mark = None if ticket.mark is None else Mark(*ticket.mark)
        out: dict[str, ReadTable] = {}
        for name, version in ticket.versions.items():
            table = self.catalog.table(name)
            reading = Reading(version, ticket.markers.get(name), ticket.through.get(name))
            out[name] = (table, version, memory_rows(self.buffer, name, table, reading, mark))
        for key, version in ticket.past.items():
            out[key] = (self.catalog.table(key.rpartition("@")[0]), version, None)
        return out

    def _sandbox(self, tables: Mapping[str, ReadTable]) -> SqlSandbox:
        sandbox = SqlSandbox(tables, self.limits)
        with self._lock:
            self.work.sandboxes += 1
            self.work.tables_registered += len(tables)
        return sandbox

    def _sql_tables(self) -> list[metadata.SqlTable]:
        tables = self._latest()
        out = []
        for name, (schema, table) in sql_names(tables).items():
            handle, version = tables[name]
            snap = handle.snapshot(version)
            out.append(metadata.SqlTable(schema, table, snap.schema, snap.metadata.primary_key))
        return out

    # --- GetFlightInfo, GetSchema, DoGet -------------------------------------------------------

    def get_flight_info(self, descriptor: flight.FlightDescriptor) -> flight.FlightInfo:
        message = decode_any(descriptor.command)
        if isinstance(message, CommandStatementQuery):
            _no_transactions(message.transaction_id)
            prepared = _Prepared(checked_statement(message.query), message.query)
            return self._statement_info(descriptor, prepared)
        if isinstance(message, CommandPreparedStatementQuery):
            return self._statement_info(descriptor, self._prepared_of(message.handle))
        if isinstance(message, _METADATA):
            answer = self._metadata(message)
            endpoint = flight.FlightEndpoint(descriptor.command, [])
            return flight.FlightInfo(answer.schema, descriptor, [endpoint], answer.num_rows, -1)
        raise _unimplemented(message)

    def get_schema(self, descriptor: flight.FlightDescriptor) -> pa.Schema:
        message = decode_any(descriptor.command)
        if isinstance(message, CommandStatementQuery):
            statement = checked_statement(message.query)
            plain = self._plain(statement)
            if plain is not None:
                return plain.schema
            with self._sandbox(self._plan(statement, self._latest()).tables) as sandbox:
                return sandbox.result_schema(statement)
        if isinstance(message, _METADATA):
            return self._metadata(message).schema
        raise _unimplemented(message)

    def _plain(self, statement: Statement) -> _PlainAnswer | None:
        """The service's own read that answers ``statement``, and its schema, when it is a
        plain read of one table (``direct.py``) and the service reads for it; else None."""
        if statement.plain is None or self.read_info is None:
            return None
        name = served_table(statement.plain, self.catalog.names())
        if name is None:
            return None
        try:
            schema = self.catalog.table(name).snapshot().schema
        except CarbonLiteError:
            return None  # the engine says what is wrong with it
        columns = read_columns(statement.plain.columns, schema.names)
        if columns is None:
            return None
        wanted = None if statement.plain.columns is None else columns
        return _PlainAnswer(
            ReadRequest(name, wanted), project_schema(schema, wanted, where=repr(name))
        )

    def _statement_info(
        self, descriptor: flight.FlightDescriptor, prepared: _Prepared
    ) -> flight.FlightInfo:
        plain = self._plain(prepared.statement)
        if plain is not None and self.read_info is not None:
            with self._lock:
                self.work.plain_reads += 1
            info = self.read_info(plain.request, descriptor)
            endpoints = [
                flight.FlightEndpoint(
                    encode_any(TicketStatementQuery(self.signer.wrap(e.ticket.ticket))), []
                )
                for e in info.endpoints
            ]
            return flight.FlightInfo(
                info.schema, descriptor, endpoints, info.total_records, info.total_bytes
            )
        readings, mark = plan_readings(self.catalog, self.buffer)
        latest = {n: (t, r.version) for n, (t, r) in readings.items()}
        plan = self._plan(prepared.statement, latest)
        schema = prepared.schema
        if schema is None or prepared.versions != plan.versions:
            with self._sandbox(plan.tables) as sandbox:
                schema = sandbox.result_schema(prepared.statement)
        read = {n: readings[n][1] for n in plan.tables if n in readings}
        ticket = self.signer.issue(
            StatementTicket(
                prepared.query,
                versions={name: r.version for name, r in read.items()},
                parameters=prepared.parameters,
                markers={n: r.markers for n, r in read.items() if r.markers},
                through={n: r.through for n, r in read.items() if r.through},
                mark=None if mark is None else (mark.instance, mark.commits),
                past=plan.past,
            )
        )
        endpoint = flight.FlightEndpoint(encode_any(TicketStatementQuery(ticket)), [])
        return flight.FlightInfo(schema, descriptor, [endpoint], -1, -1)

    def do_get(self, ticket: flight.Ticket) -> flight.FlightDataStream:
        message = decode_any(ticket.ticket)
        if isinstance(message, TicketStatementQuery) and self.signer.is_wrapped(message.handle):
            if self.read_ticket is None:
                raise SqlError("this service answers no plain reads: run the query again")
            return self.read_ticket(flight.Ticket(self.signer.unwrap(message.handle)))
        if isinstance(message, TicketStatementQuery):
            signed = self.signer.check(message.handle)
            statement = checked_statement(signed.query)
            rows = [] if signed.parameters is None else _rows(signed.parameters)
            sandbox = self._sandbox(self._tables_of(signed))
            schema, batches = sandbox.batches(statement, rows)
            return flight.GeneratorStream(schema, guarded_stream(batches, self.catalog.shown))
        if isinstance(message, _METADATA):
            return flight.RecordBatchStream(self._metadata(message))
        raise _unimplemented(message)

    def _metadata(self, message: Message) -> pa.Table:
        if isinstance(message, CommandGetCatalogs):
            return metadata.catalogs()
        if isinstance(message, CommandGetDbSchemas):
            return metadata.db_schemas(message, self._sql_tables())
        if isinstance(message, CommandGetTables):
            return metadata.tables(message, self._sql_tables())
        if isinstance(message, CommandGetTableTypes):
            return metadata.table_types()
        if isinstance(message, CommandGetPrimaryKeys):
            return metadata.primary_keys(message, self._sql_tables())
        if isinstance(message, CommandGetXdbcTypeInfo):
            return xdbc_type_info(message)
        assert isinstance(message, CommandGetSqlInfo)
        return metadata.sql_info(message)

    # --- prepared statements ------------------------------------------------------------------

    def do_action(self, action: flight.Action) -> Iterator[flight.Result]:
        body = action.body.to_pybytes() if action.body is not None else b""
        if action.type == "CreatePreparedStatement":
            message = decode_any(body)
            if not isinstance(message, ActionCreatePreparedStatementRequest):
                raise SqlError(
                    "CreatePreparedStatement takes an ActionCreatePreparedStatementRequest"
                )
            _no_transactions(message.transaction_id)
            yield flight.Result(encode_any(self._prepare(message.query)))
            return
        if action.type == "ClosePreparedStatement":
            message = decode_any(body)
            if not isinstance(message, ActionClosePreparedStatementRequest):
                raise SqlError(
                    "ClosePreparedStatement takes an ActionClosePreparedStatementRequest"
                )
            with self._lock:
                self._prepared.pop(message.handle, None)
            return
        raise SqlUnsupportedError(f"the action {action.type!r} is not supported by this service")

    def _prepare(self, query: str) -> ActionCreatePreparedStatementResult:
        statement = checked_statement(query)
        plain = self._plain(statement)
        if plain is not None:
            schema, versions = plain.schema, {}
        else:
            plan = self._plan(statement, self._latest())
            with self._sandbox(plan.tables) as sandbox:
                schema = sandbox.result_schema(statement)
            versions = plan.versions
        parameters = pa.schema(
            [pa.field(str(i + 1), pa.null()) for i in range(statement.parameters)]
        )
        handle = secrets.token_bytes(16)
        with self._lock:
            self._prepared[handle] = _Prepared(statement, query, None, schema, versions)
            while len(self._prepared) > MAX_PREPARED:
                self._prepared.popitem(last=False)
        return ActionCreatePreparedStatementResult(
            handle, _ipc_schema(schema), _ipc_schema(parameters) if statement.parameters else b""
        )

    def _prepared_of(self, handle: bytes) -> _Prepared:
        with self._lock:
            prepared = self._prepared.get(handle)
            if prepared is not None:
                self._prepared.move_to_end(handle)
        if prepared is None:
            raise SqlError(
                "no such prepared statement: it was closed, or the service was restarted since "
                "it was made; prepare the query again"
            )
        return prepared

    def do_put(
        self,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        message = decode_any(descriptor.command)
        if not isinstance(message, CommandPreparedStatementQuery):
            raise _unimplemented(message)
        prepared = self._prepared_of(message.handle)
        rows = _parameter_rows(reader)
        if rows.num_columns != prepared.statement.parameters:
            raise SqlError(
                f"the prepared query takes {prepared.statement.parameters} parameter(s), "
                f"{rows.num_columns} column(s) were bound"
            )
        with self._lock:
            if message.handle in self._prepared:
                self._prepared[message.handle] = replace(prepared, parameters=rows)
        writer.write(pa.py_buffer(DoPutPreparedStatementResult(message.handle).encode()))


def _parameter_rows(reader: flight.MetadataRecordBatchReader) -> pa.Table:
    """The bound parameter rows, at most :data:`MAX_PARAMETER_BYTES` of them (they travel in
    the statement's tickets)."""
    batches = bounded_batches(
        reader,
        MAX_PARAMETER_BYTES,
        lambda: SqlError(
            f"the bound parameters hold more than {MAX_PARAMETER_BYTES} bytes: bind fewer "
            "rows at a time"
        ),
    )
    return pa.Table.from_batches(batches, schema=reader.schema)


def _rows(parameters: pa.Table) -> list[tuple[object, ...]]:
    columns = [parameters.column(i).to_pylist() for i in range(parameters.num_columns)]
    return list(zip(*columns, strict=True))
