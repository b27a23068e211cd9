"""``carbonlite serve`` as a real process on 127.0.0.1, with a real pyarrow.flight client:
round trips, exactly once across SIGKILL and restart with re-sent sequences, visibility
right after each acknowledgement, concurrent producers, the auth token, refused names and
clear errors, graceful SIGTERM."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import carbonlite as cl
from tests.support.flight_service import ServiceProcess, put, read_all

SCHEMA = pa.schema([("producer", pa.string()), ("seq", pa.int64()), ("n", pa.int64())])
SLOW = ("--flush-interval", "3600", "--flush-rows", "100000000")
"""Options that keep every put in memory (and the log) until SIGTERM."""


def rows(producer: str, seq: int, count: int = 3) -> pa.Table:
    return pa.table(
        {"producer": [producer] * count, "seq": [seq] * count, "n": list(range(count))},
        schema=SCHEMA,
    )


def puts_in(table: pa.Table) -> dict[tuple[str, int], int]:
    """Rows per (producer, sequence)."""
    out: dict[tuple[str, int], int] = {}
    for p, s in zip(
        table.column("producer").to_pylist(), table.column("seq").to_pylist(), strict=True
    ):
        out[(p, s)] = out.get((p, s), 0) + 1
    return out


def path_of(name: str) -> flight.FlightDescriptor:
    return flight.FlightDescriptor.for_path(name)


@pytest.fixture
def root(tmp_path: Path) -> str:
    cl.create_table(tmp_path / "events", SCHEMA)
    cl.create_table(tmp_path / "sales" / "eu", SCHEMA)
    return str(tmp_path)


def test_round_trip_visible_at_once_then_committed_exactly_once(root: str) -> None:
    with ServiceProcess(root, "--flush-interval", "0.3") as service:
        client = service.client()
        names = sorted(
            "/".join(p.decode() for p in i.descriptor.path) for i in client.list_flights()
        )
        assert names == ["events", "sales/eu"]
        for seq in range(5):
            ack = put(client, "events", "p1", seq, rows("p1", seq))
            assert ack == {"version": None, "skipped": False}
            # readable the moment it is acknowledged (from memory or, once flushed, the table)
            assert puts_in(read_all(client, path_of("events"))) == {
                ("p1", s): 3 for s in range(seq + 1)
            }
        again = put(client, "events", "p1", 4, rows("p1", 4))
        assert again["skipped"] is True
        put(client, "sales/eu", "p1", 0, rows("p1", 0, 2))
        health = json.loads(
            next(iter(client.do_action(flight.Action("healthcheck", b"")))).body.to_pybytes()
        )
        assert health["status"] == "ok"
        assert service.terminate() == 0  # SIGTERM: flush, exit 0
    events = cl.open_table(os.path.join(root, "events"))
    assert puts_in(events.to_arrow()) == {("p1", s): 3 for s in range(5)}
    assert events.transaction_version("flight:p1") == 4
    assert cl.open_table(os.path.join(root, "sales", "eu")).count_rows() == 2
    assert any("flushed" in line for line in service.stderr), "no log line per flush"


def test_projection_filter_and_time_travel(root: str) -> None:
    with ServiceProcess(root, "--flush-interval", "0.2") as service:
        client = service.client()
        put(client, "events", "a", 0, rows("a", 0, 10))
        put(client, "events", "a", 1, rows("a", 1, 10))
        command = {"table": "events", "columns": ["n"], "filter": [["n", ">=", 7]]}
        got = read_all(client, flight.FlightDescriptor.for_command(json.dumps(command)))
        assert got.schema.names == ["n"] and sorted(got.column("n").to_pylist()) == [
            7,
            7,
            8,
            8,
            9,
            9,
        ]
        service.terminate()
    table = cl.open_table(os.path.join(root, "events"))
    first = [r.version for r in table.history() if r.operation == "APPEND"]
    with ServiceProcess(root) as service:
        client = service.client()
        old = {"table": "events", "version": min(first)}
        at = read_all(client, flight.FlightDescriptor.for_command(json.dumps(old)))
        assert at.num_rows == table.count_rows(version=min(first))
        info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(old)))
        assert info.schema == SCHEMA and info.total_records == at.num_rows


def test_clear_errors(root: str) -> None:
    with ServiceProcess(root) as service:
        client = service.client()
        with pytest.raises(flight.FlightServerError, match="no table 'nope'"):
            client.get_flight_info(path_of("nope"))
        for bad in ("../outside", "/etc", "events/../../x"):
            with pytest.raises(flight.FlightServerError, match="table name"):
                client.get_flight_info(path_of(bad))
        wrong = pa.table({"producer": ["x"], "other": [1.5]})
        with pytest.raises(flight.FlightServerError, match=r"(?s)schema mismatch.*other"):
            put(client, "events", "p", 0, wrong)
        descriptor = flight.FlightDescriptor.for_command(b"{not json")
        with pytest.raises(flight.FlightServerError, match="not JSON"):
            writer, _ = client.do_put(descriptor, SCHEMA)
            writer.write_table(rows("p", 0))
            writer.close()
        with pytest.raises(flight.FlightServerError, match="sequence"):
            put(client, "events", "p", -1, rows("p", 0))
        put(client, "events", "p", 5, rows("p", 5))
        with pytest.raises(flight.FlightServerError, match="older and was never received"):
            put(client, "events", "p", 3, rows("p", 3))
        with pytest.raises(flight.FlightServerError, match="unknown action"):
            list(client.do_action(flight.Action("reboot", b"")))
    assert puts_in(cl.open_table(os.path.join(root, "events")).to_arrow()) in ({}, {("p", 5): 3})


def test_a_symlink_out_of_the_root_is_refused(root: str, tmp_path_factory) -> None:
    outside = tmp_path_factory.mktemp("outside")
    cl.create_table(outside / "secret", SCHEMA)
    os.symlink(outside / "secret", os.path.join(root, "link"))
    with ServiceProcess(root) as service:
        client = service.client()
        with pytest.raises(flight.FlightServerError, match="is a symbolic link"):
            client.get_flight_info(path_of("link"))
        names = ["/".join(p.decode() for p in i.descriptor.path) for i in client.list_flights()]
        assert "link" not in names


def test_auth_token_refused_and_accepted(root: str) -> None:
    with ServiceProcess(root, token="s3cret") as service:
        client = service.client()
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(client.list_flights())
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(client.list_flights(options=service.options_for("wrong")))
        assert len(list(client.list_flights(options=service.options_for("s3cret")))) == 2
        ack = put(client, "events", "p", 0, rows("p", 0), options=service.options_for("s3cret"))
        assert ack["skipped"] is False


def test_concurrent_producers_share_fsyncs(root: str) -> None:
    with ServiceProcess(root, "--flush-interval", "0.2") as service:
        errors: list[BaseException] = []

        def produce(name: str) -> None:
            try:
                client = service.client()
                for seq in range(25):
                    assert put(client, "events", name, seq, rows(name, seq))["skipped"] is False
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=produce, args=(f"p{i}",)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        client = service.client()
        got = puts_in(read_all(client, path_of("events")))
        assert got == {(f"p{i}", s): 3 for i in range(8) for s in range(25)}
        health = json.loads(
            next(iter(client.do_action(flight.Action("healthcheck", b"")))).body.to_pybytes()
        )
        assert health["wal_syncs"] < 200, f"every put had its own fsync: {health}"
        retained, waiting = health["retained"], health["tables"].get("events", {})
        assert retained["limit_bytes"] == 256 * 1024 * 1024
        assert retained["puts"] <= 200 <= retained["puts"] + waiting.get("pending_puts", 0)
        assert (retained["bytes"] > 0) == (retained["puts"] > 0)
        assert service.terminate() == 0
    table = cl.open_table(os.path.join(root, "events"))
    assert puts_in(table.to_arrow()) == {(f"p{i}", s): 3 for i in range(8) for s in range(25)}


@pytest.mark.parametrize(
    "seed", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)]
)
def test_exactly_once_across_sigkill_and_restart(root: str, seed: int) -> None:
    """Puts acknowledged before a SIGKILL are readable right after the restart (replayed from
    the log) and committed once; the producers then re-send from their last acknowledged
    sequence (the service answers skipped for the durable one) and go on."""
    rng = random.Random(seed)
    acked: dict[str, int] = {}
    service = (
        ServiceProcess(root, *SLOW)
        if seed % 2
        else ServiceProcess(root, "--flush-interval", "0.05")
    )
    with service:
        for rounds in range(3):
            client = service.client()
            for p in ("a", "b", "c"):
                start = acked.get(p, -1)
                if start >= 0:  # the re-send of the last acknowledged put
                    assert put(client, "events", p, start, rows(p, start))["skipped"] is True
                for seq in range(start + 1, start + 1 + rng.randrange(2, 6)):
                    assert put(client, "events", p, seq, rows(p, seq))["skipped"] is False
                    acked[p] = seq
            want = {(p, s): 3 for p, last in acked.items() for s in range(last + 1)}
            assert puts_in(read_all(client, path_of("events"))) == want
            service.kill()
            service.start()
            assert puts_in(read_all(service.client(), path_of("events"))) == want, f"round {rounds}"
        assert service.terminate() == 0
    table = cl.open_table(os.path.join(root, "events"))
    assert puts_in(table.to_arrow()) == {
        (p, s): 3 for p, last in acked.items() for s in range(last + 1)
    }
    for p, last in acked.items():
        assert table.transaction_version(f"flight:{p}") == last


def test_flush_rows_commits_before_the_interval(root: str) -> None:
    """--flush-rows: enough buffered rows are committed at once, not at the next interval."""
    with ServiceProcess(root, "--flush-interval", "3600", "--flush-rows", "10") as service:
        client = service.client()
        put(client, "events", "p", 0, rows("p", 0, 4))
        put(client, "events", "p", 1, rows("p", 1, 8))  # 12 rows buffered: flush now
        table = cl.open_table(os.path.join(root, "events"))
        deadline = time.monotonic() + 20
        while table.refresh().count_rows() < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert puts_in(table.to_arrow()) == {("p", 0): 4, ("p", 1): 8}
        assert table.transaction_version("flight:p") == 1


@pytest.mark.slow
def test_sigkill_during_concurrent_puts_loses_and_repeats_nothing(root: str) -> None:
    """Producers keep putting while the service is SIGKILLed after a random number of answered
    puts, with more in flight; each one re-sends a put until it is answered (the same
    sequence), as a producer does. In the end every sequence of every producer is in the
    table exactly once."""
    rng = random.Random(7)
    service = ServiceProcess(root, "--flush-interval", "0.05")
    stop = threading.Event()
    lock = threading.Lock()
    sent: dict[str, int] = {}
    errors: list[BaseException] = []

    def produce(name: str) -> None:
        """Put until told to stop; a put once sent is sent again until it is answered, even
        after the stop (it may have landed before the kill that cut its answer short, and
        the table then holds it: the producer must learn so)."""
        seq = 0
        while not stop.is_set():
            deadline = time.monotonic() + 120
            while True:
                try:
                    put(service.client(), "events", name, seq, rows(name, seq))
                    break
                except (flight.FlightError, pa.ArrowException, OSError) as exc:
                    if time.monotonic() > deadline:
                        errors.append(exc)
                        return
                    time.sleep(0.02)  # the service is down: send the same put again
                except BaseException as exc:
                    errors.append(exc)
                    return
            with lock:
                sent[name] = seq
            seq += 1

    def answered() -> int:
        with lock:
            return sum(last + 1 for last in sent.values())

    def wait_for_answers(more: int) -> None:
        """Until ``more`` further puts were answered: each kill lands among answered puts
        and puts in flight however fast or loaded the machine is (not after a timed sleep)."""
        target = answered() + more
        deadline = time.monotonic() + 120
        while answered() < target and not errors:
            assert time.monotonic() < deadline, f"{answered()} puts answered, waiting for {target}"
            time.sleep(0.005)

    with service:
        threads = [threading.Thread(target=produce, args=(f"p{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for _ in range(4):
            wait_for_answers(rng.randint(5, 12))
            service.kill()
            service.start()
        wait_for_answers(4)
        stop.set()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert service.terminate() == 0
    got = puts_in(cl.open_table(os.path.join(root, "events")).to_arrow())
    want = {(p, s): 3 for p, last in sent.items() for s in range(last + 1)}
    assert got == want, f"missing {set(want) - set(got)}, extra {set(got) - set(want)}"
    assert sum(len(range(last + 1)) for last in sent.values()) > 20


def test_a_memory_ticket_of_an_earlier_run_asks_to_plan_again(root: str) -> None:
    """A memory endpoint's ticket names the run that planned it: after a restart, the puts it
    stood for may be in the table or in memory again, so it is refused, never read short."""
    with ServiceProcess(root, *SLOW) as service:
        client = service.client()
        put(client, "events", "p", 0, rows("p", 0))
        endpoints = client.get_flight_info(path_of("events")).endpoints
        memory = [e for e in endpoints if json.loads(e.ticket.ticket)["memory"]]
        assert len(memory) == 1
        assert client.do_get(memory[0].ticket).read_all().num_rows == 3
        service.kill()
        service.start()
        client = service.client()
        with pytest.raises(flight.FlightServerError, match="call GetFlightInfo again"):
            client.do_get(memory[0].ticket).read_all()
        assert puts_in(read_all(client, path_of("events"))) == {("p", 0): 3}
        assert service.terminate() == 0


def test_a_producer_first_seen_in_the_replayed_log_is_answered_as_one_seen_live(
    root: str,
) -> None:
    """The service's first sight of producer ``p`` is its own log, replayed after a SIGKILL.
    A re-send at or below the table's marker then is answered as for a producer first seen
    live: the marker as the service found it (here 2) and every sequence in the log are
    re-sends, skipped with the version holding them; never a SequenceError, never twice."""
    with ServiceProcess(root, *SLOW) as service:
        client = service.client()
        for seq in range(3):
            assert put(client, "events", "p", seq, rows("p", seq))["skipped"] is False
        assert service.terminate() == 0  # flushed: the marker is 2, the log released
        service.start()
        client = service.client()
        assert put(client, "events", "p", 3, rows("p", 3))["skipped"] is False
        service.kill()  # p's put 3 is only in the log
        service.start()  # replayed (p first seen there) and flushed: the marker is 3
        client = service.client()
        version = cl.open_table(os.path.join(root, "events")).version
        for seq in (2, 3):
            assert put(client, "events", "p", seq, rows("p", seq)) == {
                "version": version,
                "skipped": True,
            }, f"re-send of {seq}"
        assert put(client, "events", "p", 4, rows("p", 4))["skipped"] is False
        # a producer first seen live, for comparison: its marker is a re-send too
        assert put(client, "events", "q", 0, rows("q", 0))["skipped"] is False
        assert service.terminate() == 0
    table = cl.open_table(os.path.join(root, "events"))
    assert puts_in(table.to_arrow()) == {**{("p", s): 3 for s in range(5)}, ("q", 0): 3}
    assert table.transaction_version("flight:p") == 4


def test_list_flights_counts_the_rows_still_in_memory(root: str) -> None:
    """ListFlights' row count is what a read of the latest version gets: committed rows and
    the acknowledged puts still in memory, each once (also once they are flushed)."""

    def counts(client: flight.FlightClient) -> dict[str, int]:
        return {
            "/".join(p.decode() for p in i.descriptor.path): i.total_records
            for i in client.list_flights()
        }

    with ServiceProcess(root, "--flush-interval", "3600", "--flush-rows", "10") as service:
        client = service.client()
        put(client, "events", "p", 0, rows("p", 0, 4))  # in memory only
        assert counts(client) == {"events": 4, "sales/eu": 0}
        put(client, "events", "p", 1, rows("p", 1, 8))  # 12 rows buffered: flushed now
        table = cl.open_table(os.path.join(root, "events"))
        deadline = time.monotonic() + 20
        while table.refresh().count_rows() < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        put(client, "events", "q", 0, rows("q", 0, 2))  # committed and in memory together
        assert counts(client) == {"events": 14, "sales/eu": 0}
        assert read_all(client, path_of("events")).num_rows == 14


def test_get_schema_answers_the_projected_schema(root: str) -> None:
    with ServiceProcess(root) as service:
        client = service.client()
        assert client.get_schema(path_of("events")).schema == SCHEMA
        command = json.dumps({"table": "sales/eu", "columns": ["n", "producer"]})
        projected = client.get_schema(flight.FlightDescriptor.for_command(command)).schema
        assert projected.names == ["n", "producer"]
        with pytest.raises(pa.ArrowInvalid, match=r"^not found: no table 'nope'.*InvalidRequest$"):
            client.get_schema(path_of("nope"))
