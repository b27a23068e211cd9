"""Commands and tickets are checked against their schema before the service acts on them
(size and nesting before parsing, then each field's type and range, unknown fields refused),
and every refusal reaches the client as a one-line ``FlightServerError``, never a Python
exception with the server's traceback. ``carbonlite serve`` with a bad root, host or port
says so in one line and exits 1, creating nothing."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.flight as flight
import pytest

import carbonlite as cl
from carbonlite.cli import serve_cmd
from carbonlite.serve import service as service_module
from carbonlite.serve.records import (
    PutRequest,
    ReadRequest,
    Ticket,
    parse_put,
    parse_read,
)
from carbonlite.serve.wire import INT64_MAX, MAX_COMMAND_BYTES, BadRequestError, load_object
from tests.serve.test_service import SCHEMA, rows
from tests.support.flight_service import ServiceProcess, _command, health, put


def dumps(body: Any) -> bytes:
    return json.dumps(body).encode()


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_a_command_nested_100000_deep_is_refused_before_parsing() -> None:
    deep = b'{"table": "events", "filter": ' + nested(100_000) + b"}"
    with pytest.raises(BadRequestError, match="is 200031 bytes, more than the 65536"):
        parse_read(deep)
    within = b'{"table": "events", "filter": ' + nested(9_000) + b"}"  # under the size limit
    assert len(within) < MAX_COMMAND_BYTES
    with pytest.raises(BadRequestError, match="nests lists and objects 9001 deep, more than 8"):
        parse_read(within)
    with pytest.raises(BadRequestError, match="nests"):
        Ticket.decode(b'{"markers": ' + b'{"a": ' * 5_000 + b"1" + b"}" * 5_001)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\xff\xfe{}", "not UTF-8"),
        ('{"table": "é"}'.encode("utf-16"), "not UTF-8"),
        (b"{not json", "not JSON"),
        (b"", "not JSON"),
        (b"[]", "must be a JSON object"),
        (b"5", "must be a JSON object"),
        (b"null", "must be a JSON object"),
        (b'"events"', "must be a JSON object"),
        (b'{"table": "a", "table": "b"}', r"appear more than once"),
        (b'{"sequence": NaN}', "NaN is not a JSON number"),
        (b'{"sequence": Infinity}', "Infinity is not a JSON number"),
        (b'{"sequence": 1' + b"0" * 5000 + b"}", "not JSON"),
        (b'{"a": "\\ud800"}', None),  # a lone surrogate parses: the field checks refuse it
    ],
)
def test_bytes_that_are_not_a_json_object_are_refused(data: bytes, why: str | None) -> None:
    if why is None:
        assert load_object(data, "command", limit=1000) == {"a": "\ud800"}
        return
    with pytest.raises(BadRequestError, match=why):
        load_object(data, "command", limit=100_000)


PUT = {"table": "events", "producer_id": "p", "sequence": 0}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"sequence": INT64_MAX + 1}, '"sequence" must be .* to 9223372036854775807'),
        ({"sequence": -1}, '"sequence" must be'),
        ({"sequence": 1.0}, '"sequence" must be'),
        ({"sequence": True}, '"sequence" must be'),
        ({"sequence": "1"}, '"sequence" must be'),
        ({"sequence": None}, 'needs "sequence"'),
        ({"producer_id": ""}, '"producer_id" must be a producer id'),
        ({"producer_id": "p" * 201}, '"producer_id" must be'),
        ({"producer_id": "é" * 101}, '"producer_id" must be'),
        ({"producer_id": "a\x00b"}, '"producer_id" must be'),
        ({"producer_id": "a\nb"}, '"producer_id" must be'),
        ({"producer_id": "a\u202eb"}, '"producer_id" must be'),
        ({"producer_id": "\ud800"}, '"producer_id" must be'),
        ({"producer_id": 7}, '"producer_id" must be'),
        ({"producer_id": ["p"]}, '"producer_id" must be'),
        ({"table": 5}, '"table" must be a table name'),
        ({"table": "x" * 1025}, '"table" must be a table name'),
        ({"table": ""}, '"table" must be'),
        ({"extra": 1}, r"unknown field\(s\) \['extra'\]"),
    ],
)
def test_put_commands_are_checked_field_by_field(change: dict[str, Any], why: str) -> None:
    body = {**PUT, **change}
    if change.get("sequence", 0) is None:
        del body["sequence"]
    with pytest.raises(BadRequestError, match=why):
        parse_put(dumps(body))


def test_good_commands_and_tickets_parse() -> None:
    assert parse_put(dumps({**PUT, "sequence": INT64_MAX})) == PutRequest("events", "p", INT64_MAX)
    assert parse_put(dumps({**PUT, "producer_id": "é" * 100})).producer_id == "é" * 100
    read = {"table": "sales/eu", "columns": ["n"], "filter": [["n", "in", [1, 2]]], "version": 3}
    assert parse_read(dumps(read)) == ReadRequest("sales/eu", ["n"], [("n", "in", (1, 2))], 3)
    ored = [[["n", ">", 1]], [["producer", "=", "a"], ["seq", "<=", 2.5]]]
    assert parse_read(dumps({"table": "t", "filter": ored})).filter == [
        [("n", ">", 1)],
        [("producer", "=", "a"), ("seq", "<=", 2.5)],
    ]
    ticket = Ticket("t", 4, ["n"], [["n", ">", 1]], memory=True, markers={"p": 3, "q": None})
    ticket = Ticket(**{**_fields(ticket), "instance": "ab" * 16, "commits": 2})
    assert Ticket.decode(ticket.encode()) == ticket
    split = Ticket("t", 0, None, None, split=7)
    assert Ticket.decode(split.encode()) == split


def _fields(ticket: Ticket) -> dict[str, Any]:
    return {name: getattr(ticket, name) for name in Ticket.__slots__}


TICKET = json.loads(Ticket("events", 0, None, None, split=0).encode())


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"split": "x"}, '"split" must be a split of the plan'),
        ({"split": -1}, '"split" must be'),
        ({"split": 2**64}, '"split" must be'),
        ({"columns": 5}, '"columns" must be a list of distinct column names'),
        ({"columns": ["n", "n"]}, '"columns" must be'),
        ({"columns": [1]}, '"columns" must be'),
        ({"filter": "n > 1"}, '"filter" must be DNF lists'),
        ({"filter": []}, '"filter" must be DNF lists'),
        ({"filter": [["n", "~", 1]]}, '"filter" must be DNF lists'),
        ({"filter": [["n", ">", {"a": 1}]]}, '"filter" must be DNF lists'),
        ({"filter": [["n", "in", 5]]}, '"filter" must be DNF lists'),
        ({"filter": [["n", ">", 1], [["n", "<", 5]]]}, '"filter" must be DNF lists'),
        ({"version": "0"}, '"version" must be'),
        ({"version": None}, 'needs "version"'),
        ({"memory": 1}, '"memory" must be true or false'),
        ({"markers": {"p": "1"}}, '"markers" must be'),
        ({"markers": {"": 1}}, '"markers" must be'),
        ({"markers": [1]}, '"markers" must be'),
        ({"instance": "zz"}, '"instance" must be'),
        ({"commits": -1}, '"commits" must be'),
        ({"table": None}, 'needs "table"'),
        ({"surprise": 1}, r"unknown field\(s\) \['surprise'\]"),
    ],
)
def test_tickets_are_checked_field_by_field(change: dict[str, Any], why: str) -> None:
    body = {**TICKET, **change}
    for key in [k for k, v in change.items() if v is None and k in ("version", "table")]:
        del body[key]
    with pytest.raises(BadRequestError, match=why):
        Ticket.decode(dumps(body))


# --- against a real service: one line, no traceback, still serving ----------------------------


def one_line_refusal(exc: flight.FlightError) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text and "Python exception" not in text, text
    assert json.loads(exc.extra_info)["kind"] in ("invalid", "not_found"), exc.extra_info
    return text


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("requests")
    cl.create_table(root / "events", SCHEMA)
    with ServiceProcess(str(root), "--flush-interval", "0.1") as running:
        yield running


def test_the_raw_errors_of_issue_25_are_one_line(service: ServiceProcess) -> None:
    client = service.client()
    deep = b'{"table": "events", "producer_id": "p", "sequence": ' + nested(100_000) + b"}"
    with pytest.raises(flight.FlightServerError) as caught:
        put_with(client, deep)
    assert "more than the 65536" in one_line_refusal(caught.value)
    for body, field in (({"split": "x"}, '"split"'), ({"columns": 5}, '"columns"')):
        with pytest.raises(flight.FlightServerError) as caught:
            client.do_get(flight.Ticket(dumps({**TICKET, **body}))).read_all()
        assert field in one_line_refusal(caught.value)
    assert health(client)["status"] == "ok"
    assert put(client, "events", "p", 0, rows("p", 0))["skipped"] is False


def put_with(client: flight.FlightClient, command: bytes) -> None:
    writer, reader = client.do_put(flight.FlightDescriptor.for_command(command), SCHEMA)
    writer.write_table(rows("p", 0))
    writer.done_writing()
    reader.read()
    writer.close()


# --- the command --------------------------------------------------------------------------------


def serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_command(), "serve", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def busy_port() -> Any:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--port", "99999"], "--port must be from 0 to 65535"),
        (["--port", "-1"], "--port must be a number"),
        (["--port", "abc"], "--port must be a number"),
        (["--port", "80 80"], "--port must be a number"),
        (["--host", "bad host!"], "--host 'bad host!' is neither an IP address nor a host name"),
        (["--host", ""], "--host must be an address"),
        (["--host", "nonexistent.invalid"], "cannot listen on nonexistent.invalid"),
        (["--host", "192.0.2.1"], "cannot listen on 192.0.2.1:0"),
        (["--port", "BUSY"], "cannot listen on 127.0.0.1:BUSY"),
        (["--flush-interval", "0"], "--flush-interval must be"),
        (["--flush-rows", "0"], "--flush-rows must be at least 1"),
        (["--max-put-bytes", "0"], "--max-put-bytes must be at least 1"),
    ],
)
def test_serve_with_a_bad_option_says_so_in_one_line(
    tmp_path: Path, busy_port: int, args: list[str], said: str
) -> None:
    args = [a.replace("BUSY", str(busy_port)) for a in args]
    said = said.replace("BUSY", str(busy_port))
    if "--port" not in args:
        args += ["--port", "0"]
    done = serve(str(tmp_path), *args)
    assert done.returncode == 1, done
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert list(tmp_path.iterdir()) == [], "the service created something before it failed"


@pytest.mark.parametrize("root", ["missing", "a-file"])
def test_serve_with_a_bad_root_says_so_in_one_line(tmp_path: Path, root: str) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    done = serve(str(tmp_path / root), "--port", "0")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "is not a directory" in done.stderr, done.stderr


def test_the_commands_default_put_limit_is_the_services() -> None:
    assert serve_cmd.MAX_PUT_BYTES == service_module.MAX_PUT_BYTES
