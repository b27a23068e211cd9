"""The SQL engine: one embedded DuckDB connection per query, in a sandbox.

Each query gets a fresh in-memory DuckDB database (the catalog ``carbonlite``) holding one
view per table it may read (those it names, see ``references.py``; past versions as
``"<table>@v<N>"``), each a :func:`carbonlite.duckdb.source` of that table at the version the
query was planned at (so DuckDB's projections and filters reach CarbonLite's planner), with
the acknowledged rows that version lacks added (``readings.py``). The sandbox:

- only reads: one statement per query, a query (``SELECT``, ``WITH``, ``VALUES``,
  ``DESCRIBE``, ``SHOW``, ``SUMMARIZE``); DDL and DML are refused, naming DoPut for writes;
  ``COPY``, ``ATTACH``, ``INSTALL``/``LOAD``, ``SET``, ``PRAGMA`` and the rest too;
- reaches nothing but those tables: no file system or network access
  (``enable_external_access=false``: ``read_csv('/etc/passwd')`` fails), no extension
  installed or loaded, no Python object found by name (``python_enable_replacements``
  off), and the configuration locked once set up;
- is bounded: ``memory_limit`` and ``threads`` per query, and a timeout that interrupts it.

Every failure is :class:`SqlError`, one line saying what was refused or what DuckDB said.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeAlias

import pyarrow as pa

from carbonlite.duckdb import source
from carbonlite.errors import InvalidOptionError
from carbonlite.optional import require
from carbonlite.serve.flight_sql.direct import PlainRead, plain_read
from carbonlite.serve.flight_sql.naming import CATALOG, quoted, sql_names
from carbonlite.serve.flight_sql.references import TableRefs, syntax_tree, table_references
from carbonlite.serve.wire import BadRequestError
from carbonlite.table import Table

log = logging.getLogger("carbonlite.serve")

__all__ = ["ReadTable", "SqlError", "SqlLimits", "SqlSandbox", "Statement", "checked_statement"]

ReadTable: TypeAlias = tuple[Table, int, pa.Table | None]
"""A table as a query reads it: the table, its version, the rows in memory it lacks."""

_WRITES = frozenset(
    ("CREATE", "CREATE_FUNC", "DROP", "ALTER", "INSERT", "UPDATE", "DELETE", "MERGE_INTO")
)
_REFUSED = {
    "COPY": "COPY reads and writes files",
    "COPY_DATABASE": "COPY FROM DATABASE copies databases",
    "EXPORT": "EXPORT DATABASE writes files",
    "ATTACH": "ATTACH opens other databases",
    "DETACH": "DETACH closes databases",
    "LOAD": "INSTALL and LOAD add extensions",
    "EXTENSION": "extension statements change the engine",
    "UPDATE_EXTENSIONS": "UPDATE EXTENSIONS installs extensions",
}
_REACH = "the service's SQL reaches only its own tables: no files, URLs or extensions"
_SIZE = re.compile(r"[0-9]+(\.[0-9]+)? ?(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.IGNORECASE)


class SqlError(BadRequestError):
    """A query the service refuses, or one DuckDB could not run."""


@dataclass(frozen=True, slots=True)
class SqlLimits:
    """What one query may use."""

    memory_limit: str = "1GB"
    """DuckDB's ``memory_limit`` for each query."""
    timeout_seconds: float = 300.0
    """Longest a query may run, from its start to its last batch sent."""
    threads: int = 2
    batch_rows: int = 65536
    """Rows per record batch sent."""

    def __post_init__(self) -> None:
        if not isinstance(self.memory_limit, str) or not _SIZE.fullmatch(self.memory_limit):
            raise InvalidOptionError(
                f"the SQL memory limit must be a size such as 512MB or 2GB, not "
                f"{self.memory_limit!r}"
            )
        seconds = self.timeout_seconds
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not (0 < seconds < math.inf)
        ):
            raise InvalidOptionError(
                f"the SQL timeout must be a number of seconds more than 0, not {seconds!r}"
            )
        for name in ("threads", "batch_rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidOptionError(f"SqlLimits.{name} must be at least 1, not {value!r}")


@dataclass(frozen=True, slots=True)
class Statement:
    """One checked query: its text, how many parameters (``?``, ``$1``) it takes, the tables
    it names (None: not known), and whether it is a plain read of one."""

    text: str
    parameters: int
    tables: TableRefs | None = None
    plain: PlainRead | None = None
    """The one table it reads whole, when it is a plain read of it (``direct.py``)."""


def _connect(limits: SqlLimits) -> Any:
    duckdb = require("duckdb", "duckdb")
    config = {
        "enable_external_access": False,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "allow_community_extensions": False,
        "memory_limit": limits.memory_limit,
        "threads": limits.threads,
    }
    con = duckdb.connect(":memory:", config=config)
    con.execute("SET python_enable_replacements = false")
    return con


def _duckdb_error() -> type[BaseException]:
    error: type[BaseException] = require("duckdb", "duckdb").Error
    return error


def _message(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if "disabled by configuration" in text or "disabled through configuration" in text:
        return f"{_REACH} ({text})"
    return text


_PARSERS: queue.SimpleQueue[Any] = queue.SimpleQueue()
"""Idle DuckDB connections for parsing statements (each used by one thread at a time)."""


@contextlib.contextmanager
def _parser() -> Iterator[Any]:
    """A DuckDB connection for parsing a statement, taken from the idle ones (or made: about
    20 ms, against well under one for a parse) and given back after. It holds no table and
    runs nothing of a client's (``extract_statements`` and ``json_serialize_sql`` only)."""
    try:
        con = _PARSERS.get_nowait()
    except queue.Empty:
        con = _connect(SqlLimits(memory_limit="64MB", threads=1))
        con.execute("SET lock_configuration = true")
    try:
        yield con
    finally:
        _PARSERS.put(con)


def checked_statement(query: str) -> Statement:
    """``query`` as one read-only statement; :class:`SqlError` saying why not."""
    if not isinstance(query, str) or not query.strip():
        raise SqlError("the query is empty: send one SELECT statement")
    try:
        with _parser() as con:
            statements = con.extract_statements(query)
            if len(statements) != 1:
                raise SqlError(f"send one statement per query, not {len(statements)}")
            statement = statements[0]
            text = statement.query.strip().rstrip(";")
            tree = syntax_tree(con, text) if statement.type.name == "SELECT" else None
            tables, plain = table_references(tree), plain_read(tree)
    except _duckdb_error() as exc:
        raise SqlError(f"the query is not valid SQL: {_message(exc)}") from None
    kind = statement.type.name
    if kind in _WRITES:
        raise SqlError(
            f"the service's SQL is read-only: a {kind} statement is refused. Write rows with "
            "DoPut (the service's put command); change tables with the carbonlite API"
        )
    if kind in _REFUSED:
        raise SqlError(f"{_REFUSED[kind]}: refused; {_REACH}")
    if kind != "SELECT":
        raise SqlError(
            f"only queries run here (SELECT, WITH, VALUES, DESCRIBE, SHOW): a {kind} statement "
            "is refused"
        )
    return Statement(text, len(statement.named_parameters), tables, plain)


class SqlSandbox:
    """A DuckDB connection over the given tables, each at its version (and with the rows
    in memory that version lacks, if any); close it (or use ``with``) when done."""

    def __init__(self, tables: Mapping[str, ReadTable], limits: SqlLimits) -> None:
        self.limits = limits
        self._sources: dict[str, Any] = {}
        self._con = _connect(limits)
        self._timer: threading.Timer | None = None
        self.timed_out = False
        try:
            self._register(tables)
            self._con.execute("SET lock_configuration = true")
        except BaseException:
            self._con.close()
            raise

    def _register(self, tables: Mapping[str, ReadTable]) -> None:
        con = self._con
        con.execute(f"ATTACH ':memory:' AS {quoted(CATALOG)}")
        con.execute(f"USE {quoted(CATALOG)}")
        schemas: set[str] = {"main"}
        for i, (name, (schema, table)) in enumerate(sorted(sql_names(tables).items())):
            scan = f"__carbonlite_scan_{i}"
            handle, version, memory = tables[name]
            found = source(handle, version=version)
            self._sources[name] = found
            con.register(scan, found)
            rows = f"SELECT * FROM temp.{scan}"
            if memory is not None:
                con.register(f"__carbonlite_memory_{i}", memory)
                rows += f" UNION ALL SELECT * FROM temp.__carbonlite_memory_{i}"
            if schema.lower() not in schemas:
                con.execute(f"CREATE SCHEMA {quoted(schema)}")
                schemas.add(schema.lower())
            con.execute(f"CREATE VIEW {quoted(schema)}.{quoted(table)} AS {rows}")

    def __enter__(self) -> SqlSandbox:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._con.close()

    def log_scans(self) -> None:
        """One line per table the query read, at ``INFO`` on ``carbonlite.serve``: what
        CarbonLite's planner selected with the projection and filters DuckDB pushed (of the
        last scan of it, for a query with parameter rows)."""
        for name, found in self._sources.items():
            scan = getattr(found, "last_scan", None)
            if scan is None:
                continue
            plan = scan.plan
            pushed = getattr(found, "pushed", [])
            log.info(
                "SQL scan of %r at version %d: %d of %d blocklets (%d of %d bytes), "
                "columns %s, filter %s",
                name,
                plan.version,
                plan.blocklets_selected,
                plan.blocklets_total,
                plan.bytes_selected,
                plan.bytes_total,
                plan.schema.names,
                pushed[0] if pushed else None,
            )

    def _start_clock(self) -> None:
        def interrupt() -> None:
            self.timed_out = True
            try:
                self._con.interrupt()
            except _duckdb_error():  # the query ended (and its connection closed) meanwhile
                pass

        self._timer = threading.Timer(self.limits.timeout_seconds, interrupt)
        self._timer.daemon = True
        self._timer.start()

    def _failure(self, exc: BaseException) -> SqlError:
        if self.timed_out:
            return SqlError(
                f"the query ran longer than the service's limit of "
                f"{self.limits.timeout_seconds:g} s and was stopped"
            )
        return SqlError(f"the query failed: {_message(exc)}")

    def result_schema(self, statement: Statement) -> pa.Schema:
        """The schema of ``statement``'s result (run with no rows; parameters as NULL)."""
        self._start_clock()
        try:
            relation = self._con.sql(statement.text, params=[None] * statement.parameters or None)
            return relation.limit(0).to_arrow_reader(1).schema
        except (_duckdb_error(), OSError, pa.ArrowException) as exc:
            raise self._failure(exc) from None

    def batches(
        self, statement: Statement, parameter_rows: Sequence[Sequence[Any]]
    ) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """The result's schema and its batches: one run of ``statement`` per parameter row
        (once, with none, when it takes no parameters). The batches close the sandbox when
        they end."""
        self._start_clock()
        runs = list(parameter_rows) if statement.parameters else [()]
        if not runs:
            raise SqlError("no parameter rows are bound to this prepared statement: bind some")
        try:
            first = self._reader(statement, runs[0])
        except BaseException:
            self.close()
            raise

        def stream() -> Iterator[pa.RecordBatch]:
            try:
                yield from self._read(first)
                for values in runs[1:]:
                    yield from self._read(self._reader(statement, values), first.schema)
                self.log_scans()
            finally:
                self.close()

        return first.schema, stream()

    def _reader(self, statement: Statement, values: Sequence[Any]) -> pa.RecordBatchReader:
        if len(values) != statement.parameters:
            raise SqlError(
                f"the query takes {statement.parameters} parameter(s), {len(values)} were bound"
            )
        try:
            relation = self._con.sql(statement.text, params=list(values) or None)
            return relation.to_arrow_reader(self.limits.batch_rows)
        except (_duckdb_error(), OSError, pa.ArrowException) as exc:
            raise self._failure(exc) from None

    def _read(
        self, reader: pa.RecordBatchReader, schema: pa.Schema | None = None
    ) -> Iterator[pa.RecordBatch]:
        try:
            for batch in reader:
                yield batch if schema is None else batch.cast(schema)
        except (_duckdb_error(), OSError, pa.ArrowException) as exc:
            raise self._failure(exc) from None
