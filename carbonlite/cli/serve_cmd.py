"""``carbonlite serve``: the Arrow Flight service (``carbonlite/serve/service.py``) as a command."""

from __future__ import annotations

import logging
import re
import signal
import sys
import threading

import typer

from carbonlite.cli.app import app, fail_cleanly
from carbonlite.errors import InvalidOptionError

MAX_PUT_BYTES = 256 * 1024 * 1024
"""``--max-put-bytes`` by default (``carbonlite.serve.service.MAX_PUT_BYTES``, which this
module does not import: ``pyarrow.flight`` loads only when the command runs)."""


def _port_number(port: str) -> int:
    """``--port`` as a number (taken as text, so a wrong one is one line too)."""
    if re.fullmatch("[0-9]{1,9}", port) is None:
        raise InvalidOptionError(
            f"--port must be a number from 0 to 65535 (0: any free port), not {port!r}"
        )
    return int(port)  # the service checks the range


def _check_options(flush_interval: float, flush_rows: int, max_put_bytes: int) -> None:
    """One line and exit 1 for an option out of range (``--host`` and ``--port`` are checked,
    and tried, by the service before it creates anything)."""
    if not flush_interval > 0 or flush_interval == float("inf"):
        raise InvalidOptionError(
            f"--flush-interval must be a number of seconds more than 0, not {flush_interval}"
        )
    if flush_rows < 1:
        raise InvalidOptionError(f"--flush-rows must be at least 1, not {flush_rows}")
    if max_put_bytes < 1:
        raise InvalidOptionError(f"--max-put-bytes must be at least 1, not {max_put_bytes}")


@app.command("serve")
@fail_cleanly
def serve(
    root: str = typer.Argument(..., help="Directory whose tables are served, by relative path."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: str = typer.Option(
        "8815", "--port", metavar="PORT", help="Port to listen on (0: any free port)."
    ),
    auth_token: str | None = typer.Option(
        None, "--auth-token", help="Require 'authorization: Bearer TOKEN' on every call."
    ),
    flush_interval: float = typer.Option(
        1.0, "--flush-interval", help="Seconds between commits of the buffered puts, at most."
    ),
    flush_rows: int = typer.Option(
        100_000, "--flush-rows", help="Commit at once when this many rows are buffered."
    ),
    max_put_bytes: int = typer.Option(
        MAX_PUT_BYTES, "--max-put-bytes", help="Refuse a put holding more bytes of rows."
    ),
    tls_cert: str | None = typer.Option(
        None, "--tls-cert", metavar="PEM", help="Serve TLS with this certificate chain."
    ),
    tls_key: str | None = typer.Option(
        None, "--tls-key", metavar="PEM", help="The private key of --tls-cert (unencrypted)."
    ),
    sql_memory_limit: str = typer.Option(
        "1GB", "--sql-memory-limit", metavar="SIZE", help="Memory each SQL query may use."
    ),
    sql_timeout: float = typer.Option(
        300.0, "--sql-timeout", metavar="SECONDS", help="Stop an SQL query running longer."
    ),
) -> None:
    """Serve every table under ROOT over Arrow Flight: ListFlights, GetFlightInfo, DoGet
    (committed splits and the rows still in memory), DoPut (exactly-once appends keyed by
    producer and sequence, acknowledged once in the write-ahead log), the action
    healthcheck, and read-only SQL over Arrow Flight SQL (ADBC, JDBC) on the same port.
    SIGTERM (or Ctrl-C) flushes what is buffered and exits 0."""
    from carbonlite.serve.flight_sql import SqlLimits
    from carbonlite.serve.service import FlightService

    _check_options(flush_interval, flush_rows, max_put_bytes)
    limits = SqlLimits(memory_limit=sql_memory_limit, timeout_seconds=sql_timeout)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s"
    )
    service = FlightService(
        root,
        host=host,
        port=_port_number(port),
        auth_token=auth_token,
        flush_interval=flush_interval,
        flush_rows=flush_rows,
        max_put_bytes=max_put_bytes,
        tls_cert=tls_cert,
        tls_key=tls_key,
        sql_limits=limits,
    )
    stopping = threading.Event()

    def stop(*_: object) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=service.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    scheme = "grpc+tls" if tls_cert else "grpc"
    print(f"serving {service.catalog.root} on {scheme}://{host}:{service.port}", flush=True)
    service.serve()  # returns once shutdown() ran
    service.close()
    print("stopped: every buffered put is committed", flush=True)
