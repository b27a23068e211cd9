"""Which queries are a plain read of one table (``flight_sql/direct.py``), served by the
service's own read instead of the SQL engine: decided on DuckDB's own parse tree, and only
for the shapes whose answer is every row of the table, columns as they are."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import carbonlite as cl
from carbonlite.serve.flight_sql.direct import PlainRead, plain_read, read_columns, served_table
from carbonlite.serve.flight_sql.references import syntax_tree

duckdb = pytest.importorskip("duckdb")


@pytest.fixture(scope="module")
def con() -> Any:
    return duckdb.connect(":memory:", config={"enable_external_access": False})


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("SELECT * FROM events", PlainRead(None, "events", None)),
        ("select * from events;", PlainRead(None, "events", None)),
        ("FROM events", PlainRead(None, "events", None)),
        ("SELECT events.* FROM events", PlainRead(None, "events", None)),
        ("SELECT * FROM carbonlite.main.events", PlainRead("main", "events", None)),
        ("select k, kind from sales.eu", PlainRead("sales", "eu", ("k", "kind"))),
        ("SELECT e.k, e.amount FROM events e", PlainRead(None, "events", ("k", "amount"))),
        ('SELECT "K" FROM events', PlainRead(None, "events", ("K",))),
        ("SELECT k AS k FROM events", PlainRead(None, "events", ("k",))),
    ],
)
def test_plain_reads(con: Any, query: str, expected: PlainRead) -> None:
    assert plain_read(syntax_tree(con, query)) == expected


@pytest.mark.parametrize(
    "query",
    [
        "SELECT k AS x FROM events",  # renamed
        "SELECT k, k FROM events",  # twice
        "SELECT k, K FROM events",
        "SELECT * FROM events WHERE k > 1",
        "SELECT * FROM events LIMIT 5",
        "SELECT * FROM events ORDER BY k",
        "SELECT DISTINCT k FROM events",
        "SELECT k FROM events GROUP BY k",
        "SELECT count(*) FROM events",
        "SELECT k + 1 FROM events",
        "SELECT * EXCLUDE (k) FROM events",
        "SELECT * REPLACE (k + 1 AS k) FROM events",
        "SELECT COLUMNS('k') FROM events",
        "SELECT x.* FROM events",
        "SELECT * FROM events USING SAMPLE 10%",
        "SELECT * FROM events QUALIFY k > 1",
        "SELECT * FROM events AT (VERSION => 3)",
        "SELECT * FROM events e(a, b)",
        "SELECT * FROM other.main.events",
        "WITH x AS (SELECT 1) SELECT * FROM events",
        "SELECT * FROM (SELECT * FROM events)",
        "SELECT * FROM events, sales",
        "SELECT * FROM events UNION ALL SELECT * FROM events",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM '/etc/passwd'",
        "SELECT 1",
        "DESCRIBE events",
        "SELECT * FROM events; SELECT 1",
        "not sql at all",
    ],
)
def test_everything_else_is_the_engines(con: Any, query: str) -> None:
    assert plain_read(syntax_tree(con, query)) is None


def test_columns_are_matched_as_sql_matches_them() -> None:
    names = ["k", "Kind", "amount"]
    assert read_columns(None, names) == names
    assert read_columns(["kind", "K"], names) == ["Kind", "k"]
    assert read_columns(["nope"], names) is None
    assert read_columns(["a"], ["A", "a"]) == ["a"]  # the exact name first
    assert read_columns(["b"], ["A", "a"]) is None
    assert read_columns(["A"], ["a", "A"]) == ["A"]
    assert read_columns(["x"], ["X", "x2"]) == ["X"]
    assert read_columns(["aa"], ["AA", "Aa"]) is None  # two differ only in case


def test_the_table_is_found_as_sql_finds_it() -> None:
    names = ["events", "sales/eu", "sales/us", "a/b/c", "main/events"]
    assert served_table(PlainRead(None, "EVENTS", None), names) == "events"
    assert served_table(PlainRead("main", "events", None), names) == "events"
    assert served_table(PlainRead("carbonlite", "events", None), names) == "events"
    assert served_table(PlainRead("Sales", "eu", None), names) == "sales/eu"
    assert served_table(PlainRead("a/b", "c", None), names) == "a/b/c"
    assert served_table(PlainRead(None, "eu", None), names) is None  # not in main
    assert served_table(PlainRead(None, "events@v3", None), names) is None  # time travel


# --- through the service ------------------------------------------------------------------


def _served(tmp_path: Any) -> str:
    from tests.support.flight_sql import make_tables

    root = str(tmp_path)
    make_tables(root)
    events = cl.open_table(os.path.join(root, "events"))
    events.finish_streaming()
    events.handoff()  # columnar splits
    events.append(  # and a streaming tail
        pa.table(
            {
                "k": [5000, 5001],
                "kind": ["tail", "tail"],
                "amount": [1.0, None],
                "day": pa.array([18000, 18001], pa.int32()).cast(pa.date32()),
            },
            schema=events.schema,
        )
    )
    return root


def _by_k(table: pa.Table) -> pa.Table:
    return table.sort_by("k")


def test_a_plain_read_is_the_services_own_read(tmp_path: Any) -> None:
    """``SELECT *`` and a column list: the endpoints of the service's read of the table (no
    sandbox built), read in parallel by ADBC, equal to the table's own read; what is not a
    plain read still goes to the engine."""
    from tests.support.flight_sql import adbc_connect, sql_descriptor, sql_service

    root = _served(tmp_path)
    events = cl.open_table(os.path.join(root, "events")).to_arrow()
    with sql_service(root) as service, adbc_connect(service) as conn:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        own = client.get_flight_info(flight.FlightDescriptor.for_path("events"))
        info = client.get_flight_info(sql_descriptor("SELECT * FROM events"))
        assert len(info.endpoints) == len(own.endpoints) >= 2
        assert info.schema == events.schema
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM carbonlite.main.EVENTS")
            got = cur.fetch_arrow_table()
            assert _by_k(got).equals(_by_k(events))
            cur.execute("SELECT KIND, k FROM events")
            got = cur.fetch_arrow_table()
            assert got.column_names == ["kind", "k"]
            assert _by_k(got).equals(_by_k(events.select(["kind", "k"])))
            assert service.sql.work.sandboxes == 0
            cur.execute("SELECT k, kind FROM events WHERE kind = 'tail'")  # the engine's
            assert cur.fetch_arrow_table().to_pydict() == {
                "k": [5000, 5001],
                "kind": ["tail", "tail"],
            }
            assert service.sql.work.sandboxes == 2
            cur.execute("SELECT * FROM sales.eu")
            assert _by_k(cur.fetch_arrow_table()).equals(
                _by_k(cl.open_table(os.path.join(root, "sales", "eu")).to_arrow())
            )


def test_a_plain_read_has_the_acknowledged_puts_once(tmp_path: Any) -> None:
    from tests.support.flight_service import put
    from tests.support.flight_sql import adbc_connect, sql_service

    root = _served(tmp_path)
    late = pa.table(
        {
            "k": [9000, 9001, 9002],
            "kind": ["late"] * 3,
            "amount": [0.5] * 3,
            "day": pa.array([18002] * 3, pa.int32()).cast(pa.date32()),
        },
        schema=cl.open_table(os.path.join(root, "events")).schema,
    )
    with sql_service(root) as service, adbc_connect(service) as conn:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        put(client, "events", "p", 0, late)
        with conn.cursor() as cur:
            cur.execute("SELECT k FROM events")
            ks = sorted(cur.fetch_arrow_table()["k"].to_pylist())
            assert ks[-3:] == [9000, 9001, 9002] and len(ks) == 3005
            service.flush_all()
            cur.execute("SELECT k FROM events")
            assert sorted(cur.fetch_arrow_table()["k"].to_pylist()) == ks


def test_a_plain_read_keeps_the_tables_own_types(tmp_path: Any) -> None:
    """The announced schema (prepare, GetFlightInfo) is the data's: the table's own types,
    which DuckDB would have changed (large strings, nanosecond timestamps with a zone)."""
    from tests.support.flight_sql import adbc_connect, sql_service

    schema = pa.schema(
        [
            ("n", pa.uint32()),
            ("s", pa.large_string()),
            ("t", pa.timestamp("ns", tz="Europe/Paris")),
        ]
    )
    rows = pa.table(
        {
            "n": pa.array([1, 4_000_000_000], pa.uint32()),
            "s": pa.array(["a", "b"], pa.large_string()),
            "t": pa.array([1, 2], pa.timestamp("ns", tz="Europe/Paris")),
        },
        schema=schema,
    )
    table = cl.create_table(tmp_path / "typed", schema)
    table.append(rows)
    with sql_service(str(tmp_path)) as service, adbc_connect(service) as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM typed")
            got = cur.fetch_arrow_table()
        assert got.schema == table.schema
        assert got.sort_by("n").equals(table.to_arrow().sort_by("n"))


def test_a_plain_reads_tickets_are_signed(tmp_path: Any) -> None:
    """Its endpoints' tickets are the service's read tickets signed: as they came they read
    their split, changed (another split) or from another service they are refused."""
    from carbonlite.serve.flight_sql.protocol import TicketStatementQuery, decode_any, encode_any
    from tests.support.flight_sql import sql_descriptor, sql_service

    root, elsewhere = _served(tmp_path / "a"), _served(tmp_path / "b")  # the same tables
    events = cl.open_table(os.path.join(root, "events")).to_arrow()
    with sql_service(root) as service, sql_service(elsewhere) as other:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        info = client.get_flight_info(sql_descriptor("SELECT * FROM events"))
        parts = [client.do_get(e.ticket).read_all() for e in info.endpoints]
        assert _by_k(pa.concat_tables(parts)).equals(_by_k(events))
        handle = decode_any(info.endpoints[0].ticket.ticket)
        assert isinstance(handle, TicketStatementQuery)
        inner = handle.handle[len(b"CLSQLR1") : -32]
        assert b'"split": 0' in inner or b'"split":0' in inner, inner
        changed = handle.handle.replace(b'"split":0', b'"split":1').replace(
            b'"split": 0', b'"split": 1'
        )
        assert changed != handle.handle
        for bad in (changed, inner):
            with pytest.raises(pa.ArrowInvalid, match="not made by this service"):
                client.do_get(flight.Ticket(encode_any(TicketStatementQuery(bad)))).read_all()
        stranger = flight.FlightClient(f"grpc://127.0.0.1:{other.port}")
        with pytest.raises(pa.ArrowInvalid, match="not made by this service"):
            stranger.do_get(info.endpoints[0].ticket).read_all()
        assert client.do_get(info.endpoints[0].ticket).read_all().equals(parts[0])
