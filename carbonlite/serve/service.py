"""``carbonlite serve``: every table under a root directory over Arrow Flight.

- ``ListFlights``: one ``FlightInfo`` per table (``descriptor.path == [name]``), with its
  schema and row count (committed rows and those still in memory).
- ``GetFlightInfo``: a table's (projected) schema and its endpoints: one per split of the
  committed blocklets a scan would read (planned with the filter's pruning, at ``version``
  for time travel) and, at the latest version, one for the rows still in memory.
- ``GetSchema``: a table's (projected) schema.
- ``DoGet``: one endpoint's rows, projected and filtered.
- ``DoPut``: one atomic, exactly-once append per stream, keyed by ``(producer_id, sequence)``.
  The rows go to the write-ahead log (concurrent puts share one fsync: group commit) and
  the in-memory buffer; the answer, ``{"version": null, "skipped": false}``, is sent only
  once they are durable, and a ``DoGet`` sees them at once. A background flusher commits
  each table's buffered puts with the producers' sequence markers
  (``flight:<producer_id>``), moved by compare-and-set, and then lets the log go. A re-sent
  put whose sequence is durable answers ``{"version": <committed version or null>,
  "skipped": true}`` and writes nothing.
- ``DoAction("healthcheck")``: ``{"status": "ok" | "degraded", ...}`` (``health.py``).
- Arrow Flight SQL on the same port (``flight_sql/``): a command, ticket or action that is
  Flight SQL's goes there (SQL by an embedded DuckDB over the tables, read-only).

Schema changes another writer commits while the service runs (``Table.rename_column``,
``drop_columns``, ``widen_column``, ``add_columns``): a put is conformed to the table's
latest schema by name, so one that still names a renamed or dropped column is refused,
naming the change and its version, and writes nothing; one of a widened column's older type
is cast up; one without an added column gets its default. Puts taken before a change are
read and flushed in the present schema by the ids of the columns they were acknowledged
against, which the log keeps too (``conform.py``): a dropped column's values never come
back, and acknowledged rows are never refused afterwards.

Tables flush independently: one whose flush fails keeps its puts in memory and in the log,
its error is logged and reported by the healthcheck, and the others go on. Every access to
a table checks its directory again (``catalog.py``: no symbolic link, inside the root, still
there). Every failure reaches the client as a one-line ``FlightServerError``
(``answers.py``).

Started again after a crash, the service replays its log before it listens: a put whose
marker the table already holds is dropped, every other one is buffered and flushed, so
each acknowledged put is in the table exactly once.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from carbonlite.errors import (
    CarbonLiteError,
    InvalidOptionError,
    StaleSchemaError,
    TableNotFoundError,
)
from carbonlite.metadata import TxnMovedError
from carbonlite.metadata.columns import column_ids
from carbonlite.reader.bloom_prune import bloom_pruner
from carbonlite.reader.expression import parse_filter
from carbonlite.reader.planner import ScanPlan, plan_scan
from carbonlite.reader.scan import SplitReader, read_splits
from carbonlite.seams import reach
from carbonlite.serve.address import ListenError, listen_location
from carbonlite.serve.answers import answering, answering_schema, guarded, one_line
from carbonlite.serve.buffer import Buffer, Mark, Put, StaleReadError, marker_of
from carbonlite.serve.catalog import Catalog
from carbonlite.serve.conform import conformed_put, held_rows
from carbonlite.serve.flight_sql import ACTIONS as SQL_ACTIONS
from carbonlite.serve.flight_sql import FlightSqlCommands, SqlLimits, flight_sql_first
from carbonlite.serve.flusher import Flusher, ProducerLocks
from carbonlite.serve.health import health_report
from carbonlite.serve.records import (
    PutRequest,
    ReadRequest,
    Ticket,
    decode_put,
    dnf_filter,
    encode_put,
    parse_put,
    parse_read,
)
from carbonlite.serve.streams import bounded_batches
from carbonlite.serve.tls import TlsFiles, tls_files
from carbonlite.serve.wal import WriteAheadLog
from carbonlite.serve.wire import BadRequestError, load_object, quote
from carbonlite.table import Table

__all__ = ["MAX_PUT_BYTES", "WAL_DIR", "FlightService"]

WAL_DIR = ".carbonlite-serve/wal"
"""The write-ahead log's directory under the served root (hidden: not a table)."""
MAX_PUT_BYTES = 256 * 1024 * 1024
"""The most bytes of rows one put may hold (``--max-put-bytes``)."""

log = logging.getLogger("carbonlite.serve")

_ACTIONS = [
    (
        "healthcheck",
        "The service's state: {'status': 'ok' | 'degraded', 'problems': [...], 'tables': "
        "{name: {pending puts, flush error}}, 'wal': {size, held_by}, ...}. Takes no body.",
    )
]


class _TokenAuth(flight.ServerMiddlewareFactory):
    """Flight's header auth: every call carries ``authorization: Bearer <token>``."""

    def __init__(self, token: str) -> None:
        self.expected = f"Bearer {token}"

    def start_call(self, info: Any, headers: dict[str, list[str]]) -> None:
        given = headers.get("authorization") or headers.get("Authorization") or []
        if self.expected not in given:
            raise flight.FlightUnauthenticatedError(
                "this service needs a token: send the header 'authorization: Bearer <token>'"
            )
        return None


def _named(put: Put) -> str:
    """A put as messages name it."""
    return f"put {put.sequence} of producer {put.producer_id!r} to table {put.table!r}"


def _committed(sequence: int, marker: int | None) -> bool:
    return marker is not None and sequence <= marker


def _descriptor_name(descriptor: flight.FlightDescriptor) -> str:
    """The table a path descriptor names: its parts joined with ``/``."""
    parts = list(descriptor.path or [])
    if not parts:
        raise BadRequestError("a path descriptor needs the table's name: for_path('events')")
    try:
        texts = [p.decode("utf-8") if isinstance(p, bytes) else p for p in parts]
    except UnicodeDecodeError:
        raise BadRequestError(f"the descriptor's path {quote(parts)} is not UTF-8") from None
    return "/".join(texts)


def _read_request(descriptor: flight.FlightDescriptor) -> ReadRequest:
    if descriptor.descriptor_type == flight.DescriptorType.PATH:
        return ReadRequest(_descriptor_name(descriptor))
    return parse_read(descriptor.command)


class FlightService(flight.FlightServerBase):
    """The tables under ``root`` over Arrow Flight (see the module doc)."""

    def __init__(
        self,
        root: str,
        *,
        host: str = "127.0.0.1",
        port: int = 8815,
        auth_token: str | None = None,
        flush_interval: float = 1.0,
        flush_rows: int = 100_000,
        max_put_bytes: int = MAX_PUT_BYTES,
        wal_dir: str | None = None,
        sql_limits: SqlLimits | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ) -> None:
        tls = tls_files(tls_cert, tls_key)  # both or neither, read before anything starts
        location = listen_location(host, port, tls=tls is not None)  # nor created or replayed
        if isinstance(max_put_bytes, bool) or not isinstance(max_put_bytes, int):
            raise InvalidOptionError(f"max_put_bytes must be an int, not {max_put_bytes!r}")
        self.catalog = Catalog(root)
        self.buffer = Buffer()
        self.sql = FlightSqlCommands(
            self.catalog,
            buffer=self.buffer,
            limits=sql_limits,
            read_info=self.read_info,
            read_ticket=self.read_ticket,
        )
        self.flush_interval = flush_interval
        self.flush_rows = flush_rows
        self.max_put_bytes = max_put_bytes
        self._plans: OrderedDict[tuple[Any, ...], tuple[ScanPlan, Any]] = OrderedDict()
        self._plans_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self.wal = self._open_log(wal_dir)
        self.locks = ProducerLocks(self.wal)
        self.flushes = 0
        self.flusher = Flusher(
            self.catalog,
            self.buffer,
            self.wal,
            self.locks,
            flush_table=self._flush,
            retry_seconds=flush_interval,
        )
        self.location = location
        self._start(location, auth_token, tls)
        self._flusher = threading.Thread(target=self._flush_loop, name="flusher", daemon=True)
        self._flusher.start()

    # --- lifecycle ----------------------------------------------------------------------------

    def _open_log(self, wal_dir: str | None) -> WriteAheadLog:
        try:
            return WriteAheadLog(wal_dir or os.path.join(self.catalog.root, WAL_DIR))
        except BaseException:
            self.catalog.close()
            raise

    def _start(self, location: str, auth_token: str | None, tls: TlsFiles | None) -> None:
        """Replay the log, then listen; on failure close what is open."""
        middleware = {"auth": _TokenAuth(auth_token)} if auth_token else None
        certificates = [] if tls is None else [flight.CertKeyPair(tls.cert, tls.key)]
        try:
            self._replay()
            try:
                super().__init__(location, middleware=middleware, tls_certificates=certificates)
            except (pa.ArrowException, OSError) as exc:
                if tls is not None:
                    raise InvalidOptionError(
                        f"cannot listen on {location} with the TLS certificate and key given "
                        f"(do --tls-cert and --tls-key belong together, in PEM?): "
                        f"{one_line(str(exc))}"
                    ) from None
                raise ListenError(f"cannot listen on {location}: {one_line(str(exc))}") from None
        except BaseException:
            self.wal.close()
            self.catalog.close()
            raise

    def _replay(self) -> None:
        """Buffer every logged put the tables lack, then flush them (before listening)."""
        replayed = 0
        markers: dict[tuple[str, str], int | None] = {}
        for put in self._logged_puts():
            key = (put.table, put.producer_id)
            if key not in markers:
                try:
                    markers[key] = self._replay_marker(put)
                except TableNotFoundError:
                    log.warning("replay: table %r is gone; its put is dropped", put.table)
                    continue
            # durable either way: a re-send of it is skipped, as for a producer seen live
            self.buffer.replayed(put.table, put.producer_id, put.sequence, markers[key])
            if _committed(put.sequence, markers[key]):
                continue  # committed before the crash
            self.buffer.add(put)
            replayed += 1
        if replayed:
            log.info("replayed %d put(s) from the write-ahead log", replayed)
        self.flush_all()

    def _logged_puts(self) -> list[Put]:
        """Every put in the log once (a put carried forward has two records: the later one
        counts), in each producer's sequence order."""
        latest: dict[tuple[str, str, int], Put] = {}
        for record in self.wal.replay():
            where = f"write-ahead log record {record.lsn}"
            request, rows, ids = decode_put(record.payload, where)
            put = Put(request.table, request.producer_id, request.sequence, record.lsn, rows, ids)
            latest[(put.table, put.producer_id, put.sequence)] = put
        return [latest[key] for key in sorted(latest)]

    def _replay_marker(self, put: Put) -> int | None:
        """The table's marker of the put's producer. A table that cannot be opened now (a
        symbolic link in the way, damage) keeps its puts, and its flushes report why."""
        try:
            table = self.catalog.table(put.table)
        except TableNotFoundError:
            raise
        except CarbonLiteError as exc:
            log.warning("replay: table %r cannot be opened, its puts wait: %s", put.table, exc)
            return None
        return table.transaction_version(marker_of(put.producer_id))

    def close(self) -> None:
        """After :meth:`shutdown` (no call in progress): stop the flusher, commit what is
        buffered, close the log (SIGTERM's path)."""
        self._stopping.set()
        self._wake.set()
        self._flusher.join()
        self.flush_all()
        for name, pending in self.buffer.pending_by_table().items():
            log.warning(
                "stopping with %d put(s) of table %r not committed: they stay in the "
                "write-ahead log and are replayed at the next start",
                pending.puts,
                name,
            )
        self.wal.close()
        self.catalog.close()

    def shown(self, text: str) -> str:
        """``text`` with paths as clients know them (see :meth:`Catalog.shown`)."""
        return self.catalog.shown(text)

    # --- flushing -----------------------------------------------------------------------------

    def _flush_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self.flush_all()
            except Exception:  # keep serving; the puts stay buffered and logged
                log.exception("flush failed; retrying in %s s", self.flush_interval)

    def flush_all(self) -> None:
        """Commit every table's buffered puts, each table on its own (``flusher.py``)."""
        self.flusher.flush_all()

    def _flush(self, name: str) -> None:
        table = self.catalog.table(name)
        started = time.monotonic()
        puts = self.buffer.pending(name)
        if not puts:
            return
        while True:
            table = self.catalog.table(name)  # checked again (no link, not deleted), refreshed
            newest: dict[str, int] = {}
            for put in puts:
                newest[put.producer_id] = max(newest.get(put.producer_id, -1), put.sequence)
            markers = {p: table.transaction_version(marker_of(p)) for p in newest}
            done = [p for p in puts if _committed(p.sequence, markers[p.producer_id])]
            if done:  # committed before (by a run that crashed after its commit): not twice
                self.buffer.committed(name, done)
                gone = {id(p) for p in done}
                puts = [p for p in puts if id(p) not in gone]
                if not puts:
                    return
                continue
            progress = {marker_of(p): (markers[p], seq) for p, seq in sorted(newest.items())}
            # other threads may refresh ``table`` (shared): the rows name ``snap``'s columns
            snap = table.snapshot()
            metadata = snap.metadata
            held = [held_rows(p.rows, p.column_ids, metadata, _named(p)) for p in puts]
            rows = pa.concat_tables(held).combine_chunks()
            reach("serve.before_flush_commit")
            try:  # refused if a column of ``snap`` was renamed or dropped since
                result = table.append(rows, markers=progress, columns_as_of=snap)
            except (TxnMovedError, StaleSchemaError):
                continue  # a marker or a column moved meanwhile: look again
            if result.version is None:
                continue  # every marker holds these puts already (skipped): look again
            break
        self.buffer.committed(name, puts, rows, column_ids(metadata))
        self.flushes += 1
        log.info(
            "flushed %d put(s), %d rows into %r: version %d in %.0f ms",
            len(puts),
            rows.num_rows,
            name,
            result.version,
            (time.monotonic() - started) * 1000,
        )

    # --- Flight: puts -------------------------------------------------------------------------

    @flight_sql_first
    @answering
    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        if descriptor.descriptor_type != flight.DescriptorType.CMD:
            raise BadRequestError(
                'DoPut needs FlightDescriptor.for_command(json.dumps({"table": ..., '
                '"producer_id": ..., "sequence": ...}))'
            )
        request = parse_put(descriptor.command)
        self.catalog.table(request.table, refresh=False)  # refused before its rows are read
        data = self._read_rows(context, reader, request.table)
        # still there, still safe; refreshed, as a column may have been renamed or dropped
        table = self.catalog.table(request.table)
        answer = self._put(request, data, table)
        writer.write(pa.py_buffer(json.dumps(answer).encode()))

    def _read_rows(
        self,
        context: flight.ServerCallContext,
        reader: flight.MetadataRecordBatchReader,
        name: str,
    ) -> pa.Table:
        """The put's rows: at least one, at most ``max_put_bytes`` of them, in at least one
        column, from a stream the client finished (one it dropped is no put)."""
        schema = reader.schema
        batches = bounded_batches(
            reader,
            self.max_put_bytes,
            lambda: BadRequestError(
                f"a put to {name!r} holds more than {self.max_put_bytes} bytes of rows (the "
                "service's --max-put-bytes): split it into several puts"
            ),
        )
        if context.is_cancelled():  # a client gone mid-stream ends it as if it had finished
            raise BadRequestError(
                f"the put to {name!r} was cancelled before its stream ended: nothing of it is "
                "written; re-send it with the same sequence"
            )
        if not schema.names:
            raise BadRequestError(
                f"the put to {name!r} holds no columns: send at least one of the table's columns"
            )
        if sum(b.num_rows for b in batches) == 0:
            raise BadRequestError(f"the put to {name!r} holds no rows: send at least one row")
        return pa.Table.from_batches(batches, schema=schema)

    def _put(self, request: PutRequest, data: pa.Table, table: Table) -> dict[str, Any]:
        """Take a put: its rows in the table's latest schema (by name), logged with the ids of
        their columns, then in memory; or a re-send's answer."""
        rows, ids = conformed_put(data, table.snapshot().metadata, f"table {request.table!r}")
        # one put of a producer at a time: its sequences stay in order
        with self.locks.of(request.table, request.producer_id):
            marker = marker_of(request.producer_id)
            new = self.buffer.check(
                request.table,
                request.producer_id,
                request.sequence,
                lambda: table.refresh().transaction_version(marker),
            )
            if not new:
                in_table = _committed(request.sequence, table.refresh().transaction_version(marker))
                return {"version": table.version if in_table else None, "skipped": True}
            self._log_put(request, rows, ids)
        if self.buffer.pending_rows() >= self.flush_rows:
            self._wake.set()
        return {"version": None, "skipped": False}

    def _log_put(self, request: PutRequest, rows: pa.Table, ids: tuple[int, ...]) -> None:
        """Append the put, with its column ids, to the log (durable when this returns), then
        to memory."""
        payload = encode_put(request, rows, ids)
        with self.locks.logging_put():
            lsn = self.wal.append(payload)
            reach("serve.after_wal")
            put = Put(request.table, request.producer_id, request.sequence, lsn, rows, ids)
            self.buffer.add(put)

    # --- Flight: reads ------------------------------------------------------------------------

    @answering
    def list_flights(
        self, context: flight.ServerCallContext, criteria: bytes
    ) -> Iterator[flight.FlightInfo]:
        if criteria:
            raise BadRequestError(
                f"ListFlights takes no criteria (it lists every table), got {quote(criteria)}"
            )
        for name in self.catalog.names():
            try:
                table = self.catalog.table(name, refresh=False)
                schema, rows = table.schema, self._count_rows(name, table)
            except (CarbonLiteError, OSError, pa.ArrowException) as exc:
                log.debug("ListFlights leaves out table %r: %s", name, exc)
                continue  # a damaged table (or a link in the way) does not hide the others
            yield flight.FlightInfo(schema, flight.FlightDescriptor.for_path(name), [], rows, -1)

    def _count_rows(self, name: str, table: Table) -> int:
        """The rows a read of the latest version gets: committed, and in memory but not in
        that version (none for a primary-key table, whose puts in memory are upserts)."""
        for _ in range(3):
            mark = self.buffer.mark()  # before the version: a later commit may be missing
            snap = table.snapshot()
            if table.primary_key:
                return snap.num_rows
            markers = {p: snap.txns.get(marker_of(p)) for p in self.buffer.producers(name)}
            try:
                memory = self.buffer.puts_after(name, markers, mark)
            except StaleReadError:
                continue  # rows left memory since the mark: count again
            return snap.num_rows + sum(p.rows.num_rows for p in memory)
        return table.snapshot().num_rows

    @flight_sql_first
    @answering_schema
    def get_schema(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor
    ) -> flight.SchemaResult:
        plan, _ = self._plan(_read_request(descriptor))
        return flight.SchemaResult(plan.schema)

    @flight_sql_first
    @answering
    def get_flight_info(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor
    ) -> flight.FlightInfo:
        return self.read_info(_read_request(descriptor), descriptor)

    def read_info(
        self, request: ReadRequest, descriptor: flight.FlightDescriptor
    ) -> flight.FlightInfo:
        """The read ``request`` planned: its schema and endpoints, one per split plus one for
        the rows in memory (also Flight SQL's answer to a plain read of one table,
        ``flight_sql/direct.py``)."""
        plan, memory = self._plan(request)
        self._remember(request.table, plan, request.columns, request.filter)
        common = (request.table, plan.version, request.columns, request.filter)
        endpoints = [
            flight.FlightEndpoint(Ticket(*common, split=i).encode(), [])
            for i in range(len(plan.splits))
        ]
        rows = sum(s.live_rows for s in plan.splits)
        if memory is not None:
            markers, mark, memory_rows = memory
            ticket = Ticket(
                *common, memory=True, markers=markers, instance=mark.instance, commits=mark.commits
            )
            endpoints.append(flight.FlightEndpoint(ticket.encode(), []))
            rows += memory_rows
        return flight.FlightInfo(plan.schema, descriptor, endpoints, rows, plan.bytes_selected)

    def _plan(
        self, request: ReadRequest
    ) -> tuple[ScanPlan, tuple[dict[str, int | None], Mark, int] | None]:
        """The plan; for its memory endpoint (None: none) the planned version's markers of
        the producers with puts in memory, the buffer's mark, and the rows that version
        lacks."""
        table = self.catalog.table(request.table)
        mark = self.buffer.mark()  # before the version: a later commit may be missing from it
        snap = table.snapshot(request.version)  # refreshed: the latest, unless asked
        parsed = parse_filter(request.filter, snap.schema, where=repr(request.table))
        plan = plan_scan(
            snap,
            columns=request.columns,
            filter=parsed,
            blooms=bloom_pruner(table.storage, table.root),
        )
        if request.version is not None or table.primary_key:
            # time travel reads committed rows only; a primary-key table's buffered puts are
            # upserts, shown once committed (docs/SERVE.md)
            return plan, None
        # the producers after the snapshot: a put committed in it was in memory before
        markers = {p: snap.txns.get(marker_of(p)) for p in self.buffer.producers(request.table)}
        memory = self.buffer.puts_after(request.table, markers, mark)
        rows = sum(p.rows.num_rows for p in memory)
        return plan, (markers, mark, rows)

    @flight_sql_first
    @answering
    def do_get(
        self, context: flight.ServerCallContext, ticket: flight.Ticket
    ) -> flight.FlightDataStream:
        return self.read_ticket(ticket)

    def read_ticket(self, ticket: flight.Ticket) -> flight.FlightDataStream:
        """The rows of one endpoint of a read (also a Flight SQL plain read's, once its
        signature is checked)."""
        t = Ticket.decode(ticket.ticket)
        if t.memory:
            return self._memory_rows(t)
        plan, parsed = self._cached_plan(t)
        if t.split is None or not 0 <= t.split < len(plan.splits):
            raise BadRequestError(f"ticket split {t.split} is not in the plan")
        table = self.catalog.table(t.table, refresh=False)
        reader = SplitReader(
            table.storage,
            table.root,
            plan.table_schema,
            storage_options=table.storage_options,
            layout=plan.layout,
        )
        batches = read_splits(reader, [plan.splits[t.split]], plan.schema, parsed)

        def stream() -> Iterator[pa.RecordBatch]:
            try:
                yield from batches
            finally:
                reader.close()

        return flight.GeneratorStream(plan.schema, guarded(stream(), self.shown))

    def _remember(
        self, name: str, plan: ScanPlan, columns: list[str] | None, filter: Any
    ) -> tuple[ScanPlan, Any]:
        """Keep a plan for the DoGets of its tickets (the newest 64 plans)."""
        parsed = parse_filter(filter, plan.table_schema, where=repr(name))
        key = (name, plan.version, json.dumps(columns), json.dumps(filter))
        with self._plans_lock:
            self._plans[key] = (plan, parsed)
            self._plans.move_to_end(key)
            while len(self._plans) > 64:
                self._plans.popitem(last=False)
        return plan, parsed

    def _cached_plan(self, t: Ticket) -> tuple[ScanPlan, Any]:
        """The plan a split ticket came from: remembered, or made again (the same, as a
        version's plan is)."""
        filter = dnf_filter(t.filter)
        key = (t.table, t.version, json.dumps(t.columns), json.dumps(filter))
        with self._plans_lock:
            found = self._plans.get(key)
        if found is not None:
            self.catalog.table(t.table, refresh=False)  # still there, still safe
            return found
        table = self.catalog.table(t.table, refresh=False)
        plan = table.plan_splits(columns=t.columns, filter=filter, version=t.version)
        return self._remember(t.table, plan, t.columns, filter)

    def _memory_rows(self, t: Ticket) -> flight.FlightDataStream:
        # one snapshot for names, filter and where the rows go (other threads refresh the table)
        snap = self.catalog.table(t.table, refresh=False).snapshot()
        if t.markers is None or t.instance is None:
            raise BadRequestError(
                f"this memory ticket of {t.table!r} lacks what it was planned on (made by an "
                "older release?): call GetFlightInfo again"
            )
        columns = t.columns if t.columns is not None else snap.schema.names
        unknown = [c for c in columns if c not in snap.schema.names]
        if unknown:
            raise BadRequestError(f"table {t.table!r} has no column(s) {quote(unknown)}")
        parsed = parse_filter(dnf_filter(t.filter), snap.schema, where=repr(t.table))
        puts = self.buffer.puts_after(t.table, t.markers, Mark(t.instance, t.commits))
        schema = pa.schema([snap.schema.field(c) for c in columns])
        out = []
        for put in puts:
            rows = held_rows(put.rows, put.column_ids, snap.metadata, _named(put))
            if parsed is not None:
                rows = rows.filter(parsed.expression)
            out.append(rows.select(columns))
        result = pa.concat_tables(out) if out else schema.empty_table()
        return flight.RecordBatchStream(result)

    # --- Flight: actions and the rest ---------------------------------------------------------

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return list(_ACTIONS) + list(SQL_ACTIONS)

    @flight_sql_first
    @answering
    def do_action(
        self, context: flight.ServerCallContext, action: flight.Action
    ) -> Iterator[flight.Result]:
        if action.type != "healthcheck":
            raise BadRequestError(
                f"unknown action {quote(action.type)}; the service has: "
                f"{', '.join(name for name, _ in _ACTIONS)}"
            )
        body = action.body.to_pybytes() if action.body is not None else b""
        if body.strip() and load_object(body, "healthcheck body", limit=1024):
            raise BadRequestError(f"healthcheck takes no body (or {{}}), got {quote(body)}")
        yield flight.Result(json.dumps(self.health()).encode())

    def health(self) -> dict[str, Any]:
        """What the healthcheck action answers (``health.py``)."""
        return health_report(
            failures=self.flusher.failures.current(),
            pending=self.buffer.pending_by_table(),
            wal=self.wal.usage(),
            flushes=self.flushes,
            wal_syncs=self.wal.syncs,
            release_error=self.flusher.release_error,
            retained=(*self.buffer.retained(), self.buffer.retain_bytes),
        )

    @answering
    def do_exchange(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.MetadataRecordBatchWriter,
    ) -> None:
        raise BadRequestError("the service has no DoExchange: write with DoPut, read with DoGet")
