"""``carbonlite serve`` answering SQL over Arrow Flight SQL, through a client no one here
wrote (the ADBC Flight SQL driver) and through plain Flight calls: results equal to
CarbonLite's own read, many batches, parameters, one snapshot per ticket, signed tickets,
errors that leave the connection working, the bearer token."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pytest

import carbonlite as cl
from carbonlite.serve.flight_sql import SqlLimits
from carbonlite.serve.flight_sql.protocol import (
    ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult,
    CommandPreparedStatementQuery,
    TicketStatementQuery,
    decode_any,
    encode_any,
)
from tests.support.flight_service import put
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
    make_tables(str(tmp_path))
    return str(tmp_path)


def direct(root: str, name: str) -> pa.Table:
    return cl.open_table(os.path.join(root, *name.split("/"))).to_arrow()


def sorted_by(table: pa.Table, *keys: str) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in keys])


def query(conn: object, sql: str, parameters: tuple[object, ...] | None = None) -> pa.Table:
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute(sql, parameters)
        return cur.fetch_arrow_table()


def test_select_with_filters_equals_the_direct_read(root: str) -> None:
    events = direct(root, "events")
    with sql_service(root) as service, adbc_connect(service) as conn:
        got = query(conn, "SELECT k, kind, amount FROM events WHERE k >= 1500 AND kind = 'buy'")
        mask = pc.and_(pc.greater_equal(events["k"], 1500), pc.equal(events["kind"], "buy"))
        expected = events.filter(mask).select(["k", "kind", "amount"])
        assert sorted_by(got, "k").equals(sorted_by(expected, "k"))
        assert got.num_rows == 500
        # a schema-qualified and a catalog-qualified name read the same table
        everything = query(conn, "SELECT * FROM carbonlite.main.events")
        assert sorted_by(everything, "k").equals(sorted_by(events, "k"))


def test_join_and_aggregate_equal_the_direct_read(root: str) -> None:
    events, eu = direct(root, "events"), direct(root, "sales/eu")
    with sql_service(root) as service, adbc_connect(service) as conn:
        joined = query(
            conn,
            "SELECT e.k, e.kind, s.price FROM events e JOIN sales.eu s ON e.k = s.k "
            "WHERE s.price > 100",
        )
        expected = (
            events.select(["k", "kind"])
            .join(eu.select(["k", "price"]), "k", join_type="inner")
            .filter(pc.greater(pc.field("price"), 100))
        )
        assert sorted_by(joined, "k").equals(
            sorted_by(expected.select(["k", "kind", "price"]), "k")
        )

        grouped = query(
            conn,
            "SELECT kind, count(*) AS n, sum(amount) AS total FROM events GROUP BY kind "
            "ORDER BY kind",
        )
        want = sorted_by(
            events.group_by("kind").aggregate([("k", "count"), ("amount", "sum")]), "kind"
        )
        assert grouped["kind"].to_pylist() == want["kind"].to_pylist()
        assert grouped["n"].to_pylist() == want["k_count"].to_pylist()
        assert grouped["total"].to_pylist() == pytest.approx(want["amount_sum"].to_pylist())


def test_a_large_result_arrives_in_many_batches(tmp_path: Path) -> None:
    make_tables(str(tmp_path), events_rows=60_000, appends=2)
    limits = SqlLimits(batch_rows=5_000)
    with sql_service(str(tmp_path), limits=limits) as service, adbc_connect(service) as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT k, amount FROM events WHERE k >= 0")  # the engine's stream
            reader = cur.fetch_record_batch()
            batches = list(reader)
        assert len(batches) >= 12, [b.num_rows for b in batches]
        got = pa.Table.from_batches(batches)
        assert got.num_rows == 60_000
        assert sorted(got["k"].to_pylist()) == list(range(60_000))


def test_parameterized_query_uses_the_prepared_statement_path(root: str) -> None:
    events = direct(root, "events")
    with sql_service(root) as service, adbc_connect(service) as conn:
        got = query(conn, "SELECT k, kind FROM events WHERE k = ? OR kind = ?", (7, "nothing"))
        assert got.to_pylist() == [{"k": 7, "kind": events["kind"][7].as_py()}]
        for k in (0, 1234, 2999):  # the same statement text, new parameters each time
            assert query(conn, "SELECT count(*) AS n FROM events WHERE k <= ?", (k,))[
                "n"
            ].to_pylist() == [k + 1]
        with conn.cursor() as cur:
            cur.execute("SELECT max(k) AS m FROM events WHERE kind = ?", ("view",))
            assert cur.fetchall() == [(2998,)]
            assert len(service.sql._prepared) == 1, "no CreatePreparedStatement"
        assert not service.sql._prepared, "ClosePreparedStatement did not close it"


def test_a_ticket_reads_the_versions_it_was_made_at(root: str) -> None:
    """GetFlightInfo fixes every table's version; rows committed before the DoGet are not
    in its result, and are in the next query's."""
    with sql_service(root) as service:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        info = client.get_flight_info(sql_descriptor("SELECT count(*) AS n FROM events"))
        more = pa.table(
            {"k": [10_000], "kind": ["late"], "amount": [1.0], "day": [None]}, schema=EVENTS
        )
        cl.open_table(os.path.join(root, "events")).append(more)
        assert client.do_get(info.endpoints[0].ticket).read_all()["n"].to_pylist() == [3000]
        assert run_statement(client, "SELECT count(*) AS n FROM events")["n"].to_pylist() == [3001]


def test_a_tampered_ticket_or_one_of_another_service_is_refused(
    root: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    other_root = str(tmp_path_factory.mktemp("other"))
    make_tables(other_root)  # the same tables, served by another service
    with sql_service(root) as service, sql_service(other_root) as other:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        info = client.get_flight_info(sql_descriptor("SELECT k FROM events WHERE k < 3"))
        ticket = info.endpoints[0].ticket
        handle = bytearray(decode_any(ticket.ticket).handle)  # type: ignore[attr-defined]
        assert b"SELECT k FROM events" in handle  # the query travels in the ticket

        tampered = handle.replace(b"k < 3", b"k < 9")
        for forged in (bytes(tampered), bytes(handle[:-1]) + bytes([handle[-1] ^ 1])):
            bad = flight.Ticket(encode_any(TicketStatementQuery(forged)))
            with pytest.raises(pa.ArrowInvalid, match="not made by this service"):
                client.do_get(bad).read_all()

        elsewhere = flight.FlightClient(f"grpc://127.0.0.1:{other.port}")
        with pytest.raises(pa.ArrowInvalid, match="not made by this service"):
            elsewhere.do_get(ticket).read_all()
        # the genuine ticket still works, on the service that made it
        assert sorted(client.do_get(ticket).read_all()["k"].to_pylist()) == [0, 1, 2]


def test_bad_sql_is_an_error_and_the_connection_lives_on(root: str) -> None:
    with sql_service(root) as service, adbc_connect(service) as conn:
        for bad, message in (
            ("SELEC k FROM events", "syntax error"),
            ("SELECT nope FROM events", "nope"),
            ("SELECT * FROM no_such_table", "no_such_table"),
            ("SELECT 1; SELECT 2", "one statement per query, not 2"),
        ):
            with pytest.raises(adbc_dbapi.ProgrammingError, match=message):
                query(conn, bad)
            assert query(conn, "SELECT count(*) AS n FROM events")["n"].to_pylist() == [3000]


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("CREATE TABLE t (a INTEGER)", "read-only: a CREATE statement .* DoPut"),
        ("DROP VIEW events", "read-only: a DROP statement .* DoPut"),
        ("INSERT INTO events (k) VALUES (1)", "read-only: a INSERT statement .* DoPut"),
        ("UPDATE events SET k = 1", "read-only: a UPDATE statement .* DoPut"),
        ("DELETE FROM events", "read-only: a DELETE statement .* DoPut"),
        ("SELECT * FROM read_csv('/etc/passwd')", "only its own tables.*/etc/passwd"),
        ("SELECT * FROM '/etc/passwd'", "/etc/passwd does not exist"),
        ("SELECT * FROM glob('/etc/*')", "only its own tables"),
        ("COPY events TO '{out}'", "COPY reads and writes files: refused"),
        ("ATTACH '{out}' AS other", "ATTACH opens other databases: refused"),
        ("INSTALL httpfs", "INSTALL and LOAD add extensions: refused"),
        ("LOAD httpfs", "INSTALL and LOAD add extensions: refused"),
        ("SET memory_limit = '100GB'", "a SET statement is refused"),
        ("PRAGMA version", "a PRAGMA statement is refused"),
        ("SELECT * FROM statement", "does not exist"),  # no Python object found by name
    ],
)
def test_refusals(root: str, tmp_path: Path, statement: str, message: str) -> None:
    out = tmp_path / "written-by-sql"
    with sql_service(root) as service, adbc_connect(service) as conn:
        with pytest.raises(adbc_dbapi.ProgrammingError, match=message):
            query(conn, statement.format(out=out))
        assert not out.exists()
        assert query(conn, "SELECT count(*) AS n FROM events")["n"].to_pylist() == [3000]
    assert cl.open_table(os.path.join(root, "events")).count_rows() == 3000


def test_the_sandbox_limits_memory_and_time(root: str) -> None:
    limits = SqlLimits(memory_limit="100MB", timeout_seconds=1.0)
    with sql_service(root, limits=limits) as service, adbc_connect(service) as conn:
        setting = query(conn, "SELECT current_setting('memory_limit') AS m")["m"].to_pylist()
        assert setting[0].replace(" ", "") in ("100.0MB", "95.3MiB", "100MB")
        with pytest.raises(adbc_dbapi.ProgrammingError, match="longer than the service's limit"):
            query(conn, "SELECT count(*) AS n FROM range(100000000000) t(i) WHERE i % 7 = 3")
        assert query(conn, "SELECT 42 AS x")["x"].to_pylist() == [42]


def test_the_bearer_token_guards_flight_sql(root: str) -> None:
    with sql_service(root, token="s3cret") as service:
        with adbc_connect(service, token="s3cret") as conn:
            assert query(conn, "SELECT count(*) AS n FROM sales.us")["n"].to_pylist() == [100]
        with adbc_connect(service) as conn, pytest.raises(adbc_dbapi.Error, match="token"):
            query(conn, "SELECT 1")


def test_the_services_own_commands_still_work_beside_flight_sql(root: str) -> None:
    with sql_service(root) as service:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        info = client.get_flight_info(flight.FlightDescriptor.for_path("sales/eu"))
        rows = pa.concat_tables(client.do_get(e.ticket).read_all() for e in info.endpoints)
        assert rows.num_rows == 100
        assert run_statement(client, "SELECT count(*) AS n FROM sales.eu")["n"].to_pylist() == [100]
        names = [a.type for a in client.list_actions()]
        assert names == ["healthcheck", "CreatePreparedStatement", "ClosePreparedStatement"]


def test_four_concurrent_clients_get_their_own_answers(root: str) -> None:
    events = direct(root, "events")
    failures: list[BaseException] = []
    answers: dict[int, list[int]] = {}

    def client(n: int) -> None:
        try:
            with adbc_connect(service) as conn:
                got = []
                for round_ in range(5):
                    limit = 100 * n + round_
                    table = query(conn, "SELECT sum(k) AS s FROM events WHERE k < ?", (limit,))
                    got.append(table["s"][0].as_py())
                answers[n] = got
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    with sql_service(root) as service:
        threads = [threading.Thread(target=client, args=(n,)) for n in range(1, 5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not failures, failures
    ks = events["k"].to_pylist()
    for n in range(1, 5):
        assert answers[n] == [sum(k for k in ks if k < 100 * n + r) for r in range(5)]


def test_get_schema_of_a_query(root: str) -> None:
    with sql_service(root) as service:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        result = client.get_schema(sql_descriptor("SELECT k, kind AS what FROM events"))
        assert result.schema == pa.schema([("k", pa.int64()), ("what", pa.string())])
        with pytest.raises(pa.ArrowInvalid, match="read-only"):
            client.get_schema(sql_descriptor("DROP VIEW events"))
        # the service's own GetSchema of a table is unchanged
        plain = client.get_schema(flight.FlightDescriptor.for_path("events"))
        assert plain.schema == EVENTS


def late_rows(first: int, count: int) -> pa.Table:
    ks = list(range(first, first + count))
    return pa.table(
        {"k": ks, "kind": ["late"] * count, "amount": [1.0] * count, "day": [None] * count},
        schema=EVENTS,
    )


def test_acknowledged_puts_are_in_the_next_query_exactly_once(root: str) -> None:
    """Rows are readable once their put is acknowledged (still in memory: the service's
    flusher waits an hour here), then after they are committed, never twice; a ticket made
    before a put does not see it."""
    with sql_service(root) as service, adbc_connect(service) as conn:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        count = "SELECT count(*) AS n, count(*) FILTER (kind = 'late') AS late FROM events"
        before = client.get_flight_info(sql_descriptor(count))
        assert put(client, "events", "p1", 0, late_rows(5000, 7)) == {
            "version": None,
            "skipped": False,
        }
        assert query(conn, count).to_pylist() == [{"n": 3007, "late": 7}]
        assert client.do_get(before.endpoints[0].ticket).read_all().to_pylist() == [
            {"n": 3000, "late": 0}
        ]
        got = query(conn, "SELECT k FROM events WHERE kind = 'late' AND k > ? ORDER BY k", (5003,))
        assert got["k"].to_pylist() == [5004, 5005, 5006]

        planned = client.get_flight_info(sql_descriptor(count))  # the put still in memory
        service.flush_all()  # committed now: in the table, and no longer counted from memory
        assert client.do_get(planned.endpoints[0].ticket).read_all().to_pylist() == [
            {"n": 3007, "late": 7}
        ]
        assert cl.open_table(os.path.join(root, "events")).count_rows() == 3007
        assert query(conn, count).to_pylist() == [{"n": 3007, "late": 7}]
        put(client, "events", "p1", 1, late_rows(6000, 2))
        assert query(conn, count).to_pylist() == [{"n": 3009, "late": 9}]


def test_prepared_statements_over_plain_flight_calls(root: str) -> None:
    """The path the JDBC driver takes for every query: CreatePreparedStatement, parameters
    bound by DoPut (two rows: the query runs once per row), GetFlightInfo and DoGet of the
    handle, ClosePreparedStatement; then the handle is unknown."""
    with sql_service(root) as service:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        request = ActionCreatePreparedStatementRequest("SELECT k, kind FROM events WHERE k = ?")
        [result] = client.do_action(flight.Action("CreatePreparedStatement", encode_any(request)))
        created = decode_any(result.body.to_pybytes())
        assert isinstance(created, ActionCreatePreparedStatementResult)
        dataset = pa.ipc.read_schema(pa.py_buffer(created.dataset_schema))
        assert dataset == pa.schema([("k", pa.int64()), ("kind", pa.string())])
        assert pa.ipc.read_schema(pa.py_buffer(created.parameter_schema)).names == ["1"]

        command = flight.FlightDescriptor.for_command(
            encode_any(CommandPreparedStatementQuery(created.handle))
        )
        writer, answers = client.do_put(command, pa.schema([("p", pa.int64())]))
        writer.write_table(pa.table({"p": [4, 40]}))
        writer.done_writing()
        answer = answers.read()
        writer.close()
        assert CommandPreparedStatementQuery.decode(answer.to_pybytes()).handle == created.handle

        info = client.get_flight_info(command)
        got = client.do_get(info.endpoints[0].ticket).read_all()
        assert got.to_pylist() == [{"k": 4, "kind": "view"}, {"k": 40, "kind": "view"}]

        writer, _ = client.do_put(command, pa.schema([("p", pa.int64())]))
        with pytest.raises(pa.ArrowInvalid, match="parameters hold more than 1048576 bytes"):
            writer.write_table(pa.table({"p": list(range(200_000))}))
            writer.close()

        close = ActionClosePreparedStatementRequest(created.handle)
        assert (
            list(client.do_action(flight.Action("ClosePreparedStatement", encode_any(close)))) == []
        )
        with pytest.raises(pa.ArrowInvalid, match="no such prepared statement"):
            client.get_flight_info(command)
        # the ticket made before the close still runs: it carries the query and parameters
        assert client.do_get(info.endpoints[0].ticket).read_all().num_rows == 2


def test_each_query_logs_what_its_filter_pruned(
    root: str, caplog: pytest.LogCaptureFixture
) -> None:
    """DuckDB's pushed filter reaches CarbonLite's planner: a range of ``k`` reads one of the
    three blocklets, the same range through a function DuckDB cannot push reads all three."""
    with (
        sql_service(root) as service,
        adbc_connect(service) as conn,
        caplog.at_level("INFO", logger="carbonlite.serve"),
    ):
        assert query(conn, "SELECT count(*) AS n FROM events WHERE k < 500")["n"][0].as_py() == 500
        assert (
            query(conn, "SELECT count(*) AS n FROM events WHERE abs(k) < 500")["n"][0].as_py()
            == 500
        )
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("SQL scan")]
    assert len(lines) == 2, lines
    assert "1 of 3 blocklets" in lines[0] and "filter (k < 500)" in lines[0], lines[0]
    assert "3 of 3 blocklets" in lines[1] and "filter None" in lines[1], lines[1]
    assert "columns ['k']" in lines[0]
