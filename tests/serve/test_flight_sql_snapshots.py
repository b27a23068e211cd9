"""Which rows a Flight SQL query reads: past versions by name (``"events@v1"``,
``"events@<time>"``) equal to ``Table.to_arrow(version=...)`` and fixed in the signed
ticket; one snapshot while a handoff and a major compaction commit under a running query;
and the work one query costs (sandboxes built, tables registered), counted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import carbonlite as cl
from carbonlite.serve.flight_sql import SqlLimits
from carbonlite.serve.flight_sql.engine import checked_statement
from carbonlite.serve.flight_sql.naming import sql_names
from carbonlite.serve.flight_sql.protocol import (
    ActionCreatePreparedStatementRequest,
    CommandPreparedStatementQuery,
    decode_any,
    encode_any,
)
from carbonlite.serve.flight_sql.references import chosen_tables
from tests.support.flight_sql import (
    EVENTS,
    adbc_connect,
    make_tables,
    run_statement,
    sql_descriptor,
    sql_service,
)

adbc_dbapi = pytest.importorskip("adbc_driver_flightsql.dbapi")


@pytest.fixture
def root(tmp_path: Path) -> str:
    make_tables(str(tmp_path))  # events: versions 0 (created) to 3 (three appends)
    return str(tmp_path)


def events_of(root: str) -> cl.Table:
    return cl.open_table(os.path.join(root, "events"))


def by_k(table: pa.Table) -> pa.Table:
    return table.sort_by("k")


def query(conn: object, sql: str, parameters: tuple[object, ...] | None = None) -> pa.Table:
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute(sql, parameters)
        return cur.fetch_arrow_table()


def more_events(first: int, count: int) -> pa.Table:
    ks = list(range(first, first + count))
    return pa.table(
        {"k": ks, "kind": ["more"] * count, "amount": [2.0] * count, "day": [None] * count},
        schema=EVENTS,
    )


def ticket_payload(info: flight.FlightInfo) -> dict[str, object]:
    handle = decode_any(info.endpoints[0].ticket.ticket).handle  # type: ignore[attr-defined]
    body: dict[str, object] = json.loads(handle[len(b"CLSQL1") : -32])
    return body


# --- time travel ------------------------------------------------------------------------------


def test_a_past_version_by_number_or_time_equals_the_tables_own_read(root: str) -> None:
    events = events_of(root)
    at_2 = events.history()[1]  # newest first: version 2
    assert at_2.version == 2
    when = at_2.timestamp.isoformat().replace("+00:00", "Z")
    with sql_service(root) as service, adbc_connect(service) as conn:
        for version in (0, 1, 2, 3):
            got = query(conn, f'SELECT * FROM "events@v{version}"')
            assert by_k(got).equals(by_k(events.to_arrow(version=version))), version
        got = query(conn, f'SELECT * FROM carbonlite.main."events@{when}"')
        assert by_k(got).equals(by_k(events.to_arrow(version=2)))

        # beside the latest version, in another schema, in a CTE, with parameters
        joined = query(
            conn,
            'WITH old AS (SELECT k FROM "events@V1") '
            "SELECT count(*) AS n, count(old.k) AS old FROM events LEFT JOIN old USING (k)",
        )
        assert joined.to_pylist() == [{"n": 3000, "old": 1000}]
        assert query(conn, 'SELECT count(*) AS n FROM sales."eu@v0"')["n"].to_pylist() == [0]
        counted = query(conn, 'SELECT count(*) AS n FROM "events@v2" WHERE k < ?', (1500,))
        assert counted["n"].to_pylist() == [1500]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("events@v99", "events@v99: no such version of table 'events'.*the latest is 3"),
        ("events@2000-01-01T00:00:00Z", "no version committed at or before 2000-01-01"),
        ("events@yesterday", "events@yesterday: no such version.*ISO 8601"),
        ("nothing@v1", "nothing@v1 does not exist"),
    ],
)
def test_a_version_that_does_not_exist_is_invalid_argument(
    root: str, name: str, message: str
) -> None:
    with sql_service(root) as service:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        with pytest.raises(pa.ArrowInvalid, match=message):  # INVALID_ARGUMENT
            client.get_flight_info(sql_descriptor(f'SELECT * FROM "{name}"'))
        with adbc_connect(service) as conn:
            with pytest.raises(adbc_dbapi.ProgrammingError, match=message):
                query(conn, f'SELECT * FROM "{name}"')
            assert query(conn, "SELECT count(*) AS n FROM events")["n"].to_pylist() == [3000]


def test_a_time_is_fixed_to_its_version_in_the_signed_ticket(root: str) -> None:
    """A time after the latest commit names the latest version when the ticket is made: a
    commit before the DoGet does not change what the ticket reads."""
    with sql_service(root) as service:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        sql = 'SELECT count(*) AS n FROM "events@2999-01-01T00:00:00Z"'
        info = client.get_flight_info(sql_descriptor(sql))
        assert ticket_payload(info)["past"] == {"events@2999-01-01T00:00:00Z": 3}
        assert ticket_payload(info)["versions"] == {}  # the latest events is not read
        events_of(root).append(more_events(10_000, 5))
        assert client.do_get(info.endpoints[0].ticket).read_all()["n"].to_pylist() == [3000]
        assert run_statement(client, sql)["n"].to_pylist() == [3005]


# --- one snapshot -----------------------------------------------------------------------------


def test_a_query_running_through_a_handoff_and_a_compaction_reads_one_snapshot(
    tmp_path: Path,
) -> None:
    """The ticket is made; rows are appended, the streaming segment handed off and the
    columnar segments compacted (each committed) while its DoGet streams; it returns exactly
    the rows of its version, and so does the same ticket run again afterwards, from files
    the latest version no longer has (kept by retention)."""
    root = str(tmp_path)
    make_tables(root, events_rows=30_000, appends=3)
    events = events_of(root)
    events.finish_streaming()
    events.handoff()  # segment 0 -> a columnar one
    events.append(more_events(100_000, 5_000))  # a new streaming segment
    planned = events.refresh().snapshot().version
    expected = by_k(events.to_arrow(version=planned))
    assert expected.num_rows == 35_000
    limits = SqlLimits(batch_rows=1_000)
    with sql_service(root, limits=limits) as service:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        info = client.get_flight_info(sql_descriptor("SELECT * FROM events WHERE k >= 0"))
        assert ticket_payload(info)["versions"] == {"events": planned}
        reader = client.do_get(info.endpoints[0].ticket)
        first = reader.read_chunk().data

        events.append(more_events(200_000, 700))  # after the ticket: not in its result
        events.finish_streaming()
        handoff = events.handoff()
        major = events.compact("major")
        assert handoff.segments_compacted and major.segments_compacted
        rest = reader.read_all()
        got = pa.Table.from_batches([first, *rest.to_batches()])
        assert by_k(got).equals(expected)

        read_then = {s.id for s in events.segments(planned) if s.status != "COMPACTED"}
        read_now = {s.id for s in events.segments() if s.status != "COMPACTED"}
        assert not read_then & read_now  # the ticket's segments are all compacted away
        again = client.do_get(info.endpoints[0].ticket).read_all()
        assert by_k(again).equals(expected)
        latest = run_statement(client, "SELECT count(*) AS n FROM events")
        assert latest["n"].to_pylist() == [35_700]


# --- what a query reads -----------------------------------------------------------------------

SERVICE = sql_names(["events", "sales/eu", "sales/us", "a/b/eu"])


@pytest.mark.parametrize(
    ("sql", "names", "past"),
    [
        ("SELECT * FROM events", ["events"], []),
        (
            "SELECT * FROM EVENTS e JOIN sales.eu USING (k) WHERE k = ?",
            ["a/b/eu", "events", "sales/eu"],
            [],
        ),
        # a name the query's WITH and a table both have: the table too (a superset)
        ("WITH events AS (FROM sales.us) SELECT * FROM events", ["events", "sales/us"], []),
        ("SELECT * FROM events, (WITH events AS (SELECT 1) FROM events)", ["events"], []),
        ("WITH x AS (FROM sales.us) SELECT * FROM x", ["sales/us"], []),
        ("SELECT (SELECT max(k) FROM events) FROM (VALUES (1))", ["events"], []),
        ('SELECT * FROM sales."eu@v2" UNION ALL FROM "us@v1"', [], ["sales/eu@v2"]),
        ('FROM carbonlite."events@v1"', [], ["events@v1"]),
        ("SELECT 42", [], []),
        ("SELECT * FROM query_table('events')", sorted(SERVICE), []),
        ("SHOW TABLES", sorted(SERVICE), []),
        ("SELECT * FROM pg_catalog.pg_tables", sorted(SERVICE), []),
        ("SELECT * FROM nowhere", sorted(SERVICE), []),
    ],
)
def test_the_tables_a_query_names(sql: str, names: list[str], past: list[str]) -> None:
    """Only the tables a name may mean (``eu`` in either schema); past versions only in the
    schema named (``"us@v1"`` is ``main``'s, which has none); everything when unsure."""
    chosen = chosen_tables(checked_statement(sql).tables, SERVICE)
    assert chosen.names == names
    assert sorted(chosen.past) == past


# --- the work of one query --------------------------------------------------------------------


def test_one_adbc_query_builds_two_sandboxes_over_the_tables_it_names(root: str) -> None:
    """Prepare finds the schema (one sandbox), GetFlightInfo uses it again (the versions did
    not change), DoGet runs the query (one more); each registers only what the query names,
    CTEs and subqueries included; a query naming a system view registers every table."""
    with sql_service(root) as service, adbc_connect(service) as conn:
        work = service.sql.work
        for sql, registered in (
            ("SELECT count(*) AS n FROM events", 1),
            ("WITH x AS (SELECT * FROM sales.eu) SELECT count(*) AS n FROM x", 1),
            (
                "SELECT count(*) AS n FROM events WHERE k IN "
                '(SELECT k FROM sales.us UNION SELECT k FROM "events@v1")',
                3,
            ),
            ("SELECT count(*) AS n FROM information_schema.tables", 3),  # every table
            ('SELECT count(*) AS n FROM duckdb_tables(), "events@v2"', 4),  # and the past one
        ):
            before = (work.sandboxes, work.tables_registered)
            query(conn, sql)
            assert (work.sandboxes - before[0], work.tables_registered - before[1]) == (
                2,
                2 * registered,
            ), sql
        views = query(
            conn,
            "SELECT table_schema || '.' || table_name AS t FROM information_schema.tables "
            "WHERE table_catalog = 'carbonlite' ORDER BY t",
        )
        assert views["t"].to_pylist() == ["main.events", "sales.eu", "sales.us"]


def test_a_prepared_schema_is_found_again_only_when_a_version_changed(root: str) -> None:
    with sql_service(root) as service:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        work = service.sql.work
        request = ActionCreatePreparedStatementRequest("SELECT k FROM events WHERE k < 3")
        [result] = client.do_action(flight.Action("CreatePreparedStatement", encode_any(request)))
        handle = decode_any(result.body.to_pybytes()).handle  # type: ignore[attr-defined]
        command = flight.FlightDescriptor.for_command(
            encode_any(CommandPreparedStatementQuery(handle))
        )
        assert work.sandboxes == 1
        client.get_flight_info(command)
        client.get_flight_info(command)
        assert work.sandboxes == 1  # the prepared schema, used again
        events_of(root).append(more_events(10_000, 1))
        info = client.get_flight_info(command)
        assert work.sandboxes == 2  # a new version: the schema found again
        assert client.do_get(info.endpoints[0].ticket).read_all()["k"].to_pylist() == [0, 1, 2]
        assert work.sandboxes == 3
