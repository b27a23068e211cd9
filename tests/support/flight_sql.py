"""A ``FlightService`` in this process on 127.0.0.1 (a free port) over a few tables, and
clients of its Flight SQL side: the ADBC Flight SQL driver's DB-API and a plain
``pyarrow.flight`` client speaking Flight SQL's messages.

with sql_service(root) as service:
    with adbc_connect(service) as conn:
        ...
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

import carbonlite as cl
from carbonlite.serve.flight_sql import SqlLimits
from carbonlite.serve.flight_sql.protocol import CommandStatementQuery, encode_any
from carbonlite.serve.service import FlightService

__all__ = [
    "EVENTS",
    "SALES",
    "adbc_connect",
    "make_tables",
    "run_statement",
    "sql_descriptor",
    "sql_service",
]

EVENTS = pa.schema(
    [("k", pa.int64()), ("kind", pa.string()), ("amount", pa.float64()), ("day", pa.date32())]
)
SALES = pa.schema([("k", pa.int64()), ("region", pa.string()), ("price", pa.float64())])


def make_tables(root: str, *, events_rows: int = 3000, appends: int = 3) -> None:
    """``events`` (several appends), ``sales/eu`` and ``sales/us`` under ``root``."""
    events = cl.create_table(os.path.join(root, "events"), EVENTS)
    per = events_rows // appends
    for a in range(appends):
        ks = list(range(a * per, (a + 1) * per))
        events.append(
            pa.table(
                {
                    "k": ks,
                    "kind": [("click", "view", "buy")[k % 3] for k in ks],
                    "amount": [None if k % 17 == 0 else k * 0.5 for k in ks],
                    "day": pa.array([18000 + k % 30 for k in ks], pa.int32()).cast(pa.date32()),
                },
                schema=EVENTS,
            )
        )
    for region, offset in (("eu", 0), ("us", 1)):
        sales = cl.create_table(os.path.join(root, "sales", region), SALES)
        ks = list(range(offset, 200, 2))
        sales.append(
            pa.table(
                {"k": ks, "region": [region] * len(ks), "price": [k * 1.25 for k in ks]},
                schema=SALES,
            )
        )


@contextlib.contextmanager
def sql_service(
    root: str, *, token: str | None = None, limits: SqlLimits | None = None
) -> Iterator[FlightService]:
    service = FlightService(
        root, port=0, auth_token=token, flush_interval=3600, flush_rows=10**9, sql_limits=limits
    )
    try:
        yield service
    finally:
        service.shutdown()
        service.close()


@contextlib.contextmanager
def adbc_connect(service: FlightService, *, token: str | None = None) -> Iterator[Any]:
    """A DB-API connection of the ADBC Flight SQL driver to ``service``."""
    import adbc_driver_flightsql.dbapi as flight_sql

    headers = {}
    if token is not None:
        headers = {"adbc.flight.sql.authorization_header": f"Bearer {token}"}
    # autocommit: the service has no transactions (else the driver warns it cannot leave it)
    conn = flight_sql.connect(
        f"grpc://127.0.0.1:{service.port}", db_kwargs=headers, autocommit=True
    )
    try:
        yield conn
    finally:
        conn.close()


def sql_descriptor(query: str) -> flight.FlightDescriptor:
    return flight.FlightDescriptor.for_command(encode_any(CommandStatementQuery(query)))


def run_statement(client: flight.FlightClient, query: str) -> pa.Table:
    """``CommandStatementQuery`` by GetFlightInfo, then DoGet of its one endpoint."""
    info = client.get_flight_info(sql_descriptor(query))
    assert len(info.endpoints) == 1
    return client.do_get(info.endpoints[0].ticket).read_all()
