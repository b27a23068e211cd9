"""A sweep of hostile and careless Flight requests against a real ``carbonlite serve`` on
127.0.0.1: bad descriptors, commands, schemas and streams for DoPut; bad names, commands and
versions for GetFlightInfo and GetSchema; bad tickets for DoGet; bad actions and bodies;
ListFlights criteria; DoExchange; calls without the token. Each one must be answered by the
service (not refused by the client library) with a Flight error whose message is one line
without a Python traceback, of kind ``invalid`` or ``not_found`` (never ``internal``), and
the service must go on serving; at the end it still round-trips a put and stops cleanly."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import carbonlite as cl
from carbonlite.serve.records import Ticket
from tests.serve.test_service import SCHEMA, puts_in, rows
from tests.support.flight_service import ServiceProcess, health, put, read_all

MAX_PUT_BYTES = 1_000_000
"""The service's --max-put-bytes here."""
STRICT = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])

Call = Callable[[flight.FlightClient], Any]


@dataclass(frozen=True)
class Bad:
    name: str
    call: Call
    schema: bool = False
    """A GetSchema call: pyarrow's client raises plain Arrow errors for it, never Flight
    errors, and its server callback converts none (see carbonlite/serve/answers.py)."""


def put_command(command: bytes | str, data: pa.Table | None = None) -> Call:
    """A DoPut with this command and ``data`` (good rows unless given)."""
    return put_descriptor(flight.FlightDescriptor.for_command(command), data)


def put_descriptor(descriptor: flight.FlightDescriptor, data: pa.Table | None = None) -> Call:
    data = rows("p", 0) if data is None else data

    def call(client: flight.FlightClient) -> None:
        writer, reader = client.do_put(descriptor, data.schema)
        if data.num_rows or data.num_columns:
            writer.write_table(data, max_chunksize=max(1, data.num_rows))
        writer.done_writing()
        reader.read()
        writer.close()

    return call


def put_batches(name: str, schema: pa.Schema, batches: list[pa.RecordBatch]) -> Call:
    command = json.dumps({"table": name, "producer_id": "b", "sequence": 1})

    def call(client: flight.FlightClient) -> None:
        writer, reader = client.do_put(flight.FlightDescriptor.for_command(command), schema)
        for batch in batches:
            writer.write_batch(batch)
        writer.done_writing()
        reader.read()
        writer.close()

    return call


def put_json(body: Any, data: pa.Table | None = None) -> Call:
    return put_command(json.dumps(body), data)


def good_put(**change: Any) -> dict[str, Any]:
    return {"table": "events", "producer_id": "p", "sequence": 0, **change}


def info_command(command: bytes | str) -> Call:
    return lambda c: c.get_flight_info(flight.FlightDescriptor.for_command(command))


def info_json(body: Any) -> Call:
    return info_command(json.dumps(body))


def info_path(*parts: str | bytes) -> Call:
    return lambda c: c.get_flight_info(flight.FlightDescriptor.for_path(*parts))


def schema_json(body: Any) -> Call:
    return lambda c: c.get_schema(flight.FlightDescriptor.for_command(json.dumps(body)))


def schema_path(*parts: str | bytes) -> Call:
    return lambda c: c.get_schema(flight.FlightDescriptor.for_path(*parts))


def get_ticket(ticket: bytes) -> Call:
    return lambda c: c.do_get(flight.Ticket(ticket)).read_all()


def get_json(body: Any) -> Call:
    return get_ticket(json.dumps(body).encode())


SPLIT = json.loads(Ticket("events", 0, None, None, split=0).encode())
MEMORY = json.loads(
    Ticket("events", 0, None, None, memory=True, markers={}, instance="0" * 32).encode()
)


def split(**change: Any) -> dict[str, Any]:
    return {**SPLIT, **change}


def memory(**change: Any) -> dict[str, Any]:
    return {**MEMORY, **change}


def without(body: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != key}


def action(kind: str, body: bytes = b"") -> Call:
    return lambda c: list(c.do_action(flight.Action(kind, body)))


def exchange(client: flight.FlightClient) -> None:
    writer, reader = client.do_exchange(flight.FlightDescriptor.for_path("events"))
    writer.begin(SCHEMA)
    writer.write_table(rows("x", 0))
    writer.done_writing()
    reader.read_all()
    writer.close()


def deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def names(*bad: str) -> Iterator[str]:
    yield from bad


HOSTILE_NAMES = [
    "..",
    "../x",
    "/etc/passwd",
    "events/..",
    "events/../../x",
    "./events",
    "ev\x00ents",
    "ev\nents",
    "a\\b",
    "..\\..\\etc",
    "sales//eu",
    "events/",
    "e" * 300,
    "/".join(["a"] * 20),
    "\uff0e\uff0e",
    "e\u0301vents",
    "events\u202e",
    "ev\u200bents",
]
MISSING_NAMES = ["nope", "link", "link/x", "plain", "afile", "sales", ".carbonlite-serve/wal"]


def _put_cases() -> Iterator[Bad]:
    yield Bad("put: path descriptor", put_descriptor(flight.FlightDescriptor.for_path("events")))
    for label, command in [
        ("empty", b""),
        ("not json", b"{not json"),
        ("not utf-8", b"\xff\xfe\xfd"),
        ("utf-16", json.dumps(good_put()).encode("utf-16")),
        ("null", b"null"),
        ("number", b"5"),
        ("list", b"[1, 2]"),
        ("string", b'"events"'),
        ("true", b"true"),
        ("empty object", b"{}"),
        ("duplicate key", b'{"table": "events", "table": "x", "producer_id": "p", "sequence": 0}'),
        ("NaN", b'{"table": "events", "producer_id": "p", "sequence": NaN}'),
        ("nested 100000 deep", b'{"table": "events", "sequence": ' + deep(100_000) + b"}"),
        ("nested 5000 deep", b'{"table": "events", "sequence": ' + deep(5_000) + b"}"),
        ("1 MiB of spaces", b" " * 1_048_576 + b"{}"),
        ("truncated", json.dumps(good_put()).encode()[:-1]),
        ("trailing garbage", json.dumps(good_put()).encode() + b"x"),
    ]:
        yield Bad(f"put: command {label}", put_command(command))
    for key in ("table", "producer_id", "sequence"):
        yield Bad(f"put: without {key}", put_json(without(good_put(), key)))
    for label, change in [
        ("table 5", {"table": 5}),
        ("table null", {"table": None}),
        ("table list", {"table": ["events"]}),
        ("table empty", {"table": ""}),
        ("table 2000 chars", {"table": "x" * 2000}),
        ("producer empty", {"producer_id": ""}),
        ("producer number", {"producer_id": 5}),
        ("producer 300 chars", {"producer_id": "p" * 300}),
        ("producer newline", {"producer_id": "a\nb"}),
        ("producer NUL", {"producer_id": "a\x00b"}),
        ("producer zero-width", {"producer_id": "a\u200bb"}),
        ("sequence -1", {"sequence": -1}),
        ("sequence 1.5", {"sequence": 1.5}),
        ("sequence text", {"sequence": "1"}),
        ("sequence true", {"sequence": True}),
        ("sequence 2**63", {"sequence": 2**63}),
        ("sequence 2**64", {"sequence": 2**64}),
        ("sequence 1e308", {"sequence": 1e308}),
        ("unknown key", {"priority": "high"}),
    ]:
        yield Bad(f"put: {label}", put_json(good_put(**change)))
    for name in [*HOSTILE_NAMES, *MISSING_NAMES]:
        yield Bad(f"put: table {name!r}", put_json(good_put(table=name)))
    yield from _put_data_cases()


def _put_data_cases() -> Iterator[Bad]:
    seq = good_put(producer_id="d", sequence=1)
    mismatched = [
        ("wrong types", pa.table({"producer": [1], "seq": ["x"], "n": [1.5]})),
        ("unknown column", pa.table({"producer": ["x"], "other": [1.5]})),
        ("struct for string", pa.table({"producer": [{"a": 1}], "seq": [1], "n": [1]})),
        ("list for int", pa.table({"producer": ["x"], "seq": [[1]], "n": [1]})),
        ("no columns in common", pa.table({"zzz": [1]})),
    ]
    for label, data in mismatched:
        yield Bad(f"put: schema {label}", put_json(seq, data))
    dup = pa.schema([("producer", pa.string()), ("producer", pa.string())])
    yield Bad(
        "put: duplicate column names",
        put_batches("events", dup, [pa.record_batch([["a"], ["b"]], schema=dup)]),
    )
    yield Bad("put: schema only, no batches", put_json(seq, SCHEMA.empty_table()))
    yield Bad(
        "put: only an empty batch",
        put_batches("events", SCHEMA, [pa.RecordBatch.from_pylist([], schema=SCHEMA)]),
    )
    big = pa.table({"producer": ["x" * 1000] * 2000, "seq": [1] * 2000, "n": [1] * 2000})
    yield Bad("put: one batch over --max-put-bytes", put_json(seq, big))
    many = [rows("m", 1, 1000).to_batches()[0]] * 200
    yield Bad("put: many batches over --max-put-bytes", put_batches("events", SCHEMA, many))
    yield Bad("put: a null in a non-null column", put_json(good_put(table="strict"), _nulls()))
    no_id = pa.table({"name": ["a"]})
    yield Bad("put: a non-null column missing", put_json(good_put(table="strict"), no_id))
    yield Bad("put: sequence regression", put_json(good_put(producer_id="reg", sequence=3)))


def _nulls() -> pa.Table:
    loose = pa.schema([("id", pa.int64()), ("name", pa.string())])
    return pa.table({"id": [None], "name": ["a"]}, schema=loose)


def _info_cases() -> Iterator[Bad]:
    yield Bad(
        "info: path with no parts", lambda c: c.get_flight_info(flight.FlightDescriptor.for_path())
    )
    yield Bad("info: path parts lead out", info_path("sales", "..", "..", "x"))
    for name in [*HOSTILE_NAMES, *MISSING_NAMES]:
        yield Bad(f"info: path {name!r}", info_path(name))
    for label, command in [
        ("not json", b"{"),
        ("list", b"[]"),
        ("number", b"42"),
        ("null", b"null"),
        ("not utf-8", b"\x80"),
        ("nested", b'{"table": "events", "filter": ' + deep(20) + b"}"),
        ("too big", b'{"table": "' + b"x" * 70_000 + b'"}'),
    ]:
        yield Bad(f"info: command {label}", info_command(command))
    for label, body in [
        ("empty object", {}),
        ("unknown key", {"table": "events", "limit": 5}),
        ("columns 5", {"table": "events", "columns": 5}),
        ("columns unknown", {"table": "events", "columns": ["nope"]}),
        ("columns empty name", {"table": "events", "columns": [""]}),
        ("columns twice", {"table": "events", "columns": ["n", "n"]}),
        ("filter text", {"table": "events", "filter": "n > 1"}),
        ("filter empty", {"table": "events", "filter": []}),
        ("filter unknown column", {"table": "events", "filter": [["nope", ">", 1]]}),
        ("filter wrong type", {"table": "events", "filter": [["n", ">", "abc"]]}),
        ("filter bad operator", {"table": "events", "filter": [["n", "~", 1]]}),
        ("filter in scalar", {"table": "events", "filter": [["n", "in", 5]]}),
        ("filter object value", {"table": "events", "filter": [["n", "=", {"a": 1}]]}),
        ("filter mixed levels", {"table": "events", "filter": [["n", ">", 1], [["n", "<", 2]]]}),
        ("version -1", {"table": "events", "version": -1}),
        ("version text", {"table": "events", "version": "0"}),
        ("version 999", {"table": "events", "version": 999}),
        ("version 2**63-1", {"table": "events", "version": 2**63 - 1}),
        ("version 2**64", {"table": "events", "version": 2**64}),
        ("table '..'", {"table": ".."}),
        ("table link", {"table": "link"}),
    ]:
        yield Bad(f"info: {label}", info_json(body))


def _schema_cases() -> Iterator[Bad]:
    for name in ("nope", "link", "..", "/etc", "a\x00b"):
        yield Bad(f"schema: path {name!r}", schema_path(name), schema=True)
    for label, body in [
        ("columns unknown", {"table": "events", "columns": ["nope"]}),
        ("columns 5", {"table": "events", "columns": 5}),
        ("filter bad", {"table": "events", "filter": [["n", "~", 1]]}),
        ("version 999", {"table": "events", "version": 999}),
        ("unknown key", {"table": "events", "x": 1}),
    ]:
        yield Bad(f"schema: {label}", schema_json(body), schema=True)
    not_json = lambda c: c.get_schema(flight.FlightDescriptor.for_command(b"{"))  # noqa: E731
    yield Bad("schema: not json", not_json, schema=True)


def _ticket_cases() -> Iterator[Bad]:
    for label, ticket in [
        ("empty", b""),
        ("text", b"split 0 please"),
        ("list", b"[]"),
        ("null", b"null"),
        ("empty object", b"{}"),
        ("not utf-8", b"\xc3\x28"),
        ("nested", b'{"markers": ' + deep(10_000) + b"}"),
        ("over 1 MiB", b'{"table": "' + b"x" * 1_100_000 + b'"}'),
    ]:
        yield Bad(f"get: ticket {label}", get_ticket(ticket))
    for label, body in [
        ("split x", split(split="x")),
        ("split -1", split(split=-1)),
        ("split 999", split(split=999)),
        ("split float", split(split=0.5)),
        ("split none", split(split=None)),
        ("columns 5", split(columns=5)),
        ("columns unknown", split(columns=["nope"])),
        ("filter bad", split(filter=[["n", "~", 1]])),
        ("filter unknown column", split(filter=[["nope", "=", 1]])),
        ("table nope", split(table="nope")),
        ("table '..'", split(table="..")),
        ("table link", split(table="link")),
        ("table NUL", split(table="a\x00b")),
        ("version 999", split(version=999)),
        ("version text", split(version="0")),
        ("without version", without(SPLIT, "version")),
        ("without commits", without(SPLIT, "commits")),
        ("memory 1", split(memory=1)),
        ("unknown field", split(extra=True)),
        ("memory of another run", memory()),
        ("memory without markers", memory(markers=None)),
        ("memory without instance", memory(instance=None)),
        ("memory bad markers", memory(markers={"p": "x"})),
        ("memory bad instance", memory(instance="not hex")),
        ("memory columns unknown", memory(columns=["nope"])),
        ("memory table link", memory(table="link")),
        ("memory commits -1", memory(commits=-1)),
    ]:
        yield Bad(f"get: {label}", get_json(body))


def _other_cases() -> Iterator[Bad]:
    for kind in ("reboot", "", "HEALTHCHECK", "healthcheck ", "flush", "drop_table", "a\x00b"):
        yield Bad(f"action: {kind!r}", action(kind))
    for label, body in [
        ("text", b"now"),
        ("list", b"[]"),
        ("object with a field", b'{"verbose": true}'),
        ("not utf-8", b"\xff"),
        ("nested", deep(100)),
        ("2 KiB", b'{"x": "' + b"y" * 2048 + b'"}'),
    ]:
        yield Bad(f"action: healthcheck body {label}", action("healthcheck", body))
    yield Bad("list_flights: criteria", lambda c: list(c.list_flights(b"events")))
    yield Bad("list_flights: json criteria", lambda c: list(c.list_flights(b"{}")))
    yield Bad("exchange", exchange)


CASES = [
    *_put_cases(),
    *_info_cases(),
    *_schema_cases(),
    *_ticket_cases(),
    *_other_cases(),
]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    base = tmp_path_factory.mktemp("hostile")
    root = base / "root"
    cl.create_table(root / "events", SCHEMA)
    cl.create_table(root / "sales" / "eu", SCHEMA)
    cl.create_table(root / "strict", STRICT)
    cl.create_table(base / "outside", SCHEMA)
    os.symlink(base / "outside", root / "link")
    (root / "plain").mkdir()
    (root / "afile").write_text("not a table")
    options = ("--flush-interval", "0.2", "--max-put-bytes", str(MAX_PUT_BYTES))
    with ServiceProcess(str(root), *options) as running:
        put(running.client(), "events", "reg", 5, rows("reg", 5))  # for the regression
        yield running


def assert_one_line_answer(exc: Exception) -> None:
    text = str(exc)
    assert "\n" not in text, text
    for leak in ("Traceback", 'File "', "carbonlite/serve"):
        assert leak not in text, text
    assert isinstance(exc, flight.FlightServerError), f"not the service's answer: {exc!r}"
    assert "Python exception" not in text, text
    info = json.loads(exc.extra_info)
    assert info["kind"] in ("invalid", "not_found"), (info, text)


def assert_one_line_schema_answer(exc: Exception) -> None:
    text = str(exc)
    assert "\n" not in text, text
    for leak in ("Traceback", 'File "', "carbonlite/serve"):
        assert leak not in text, text
    assert isinstance(exc, pa.ArrowInvalid), f"not the service's answer: {exc!r}"
    assert text.endswith("Detail: Python exception: InvalidRequest"), text


def test_the_sweep_is_big_enough() -> None:
    assert len(CASES) >= 130, len(CASES)
    assert len({c.name for c in CASES}) == len(CASES), "two cases share a name"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_hostile_request_gets_a_one_line_flight_error(service: ServiceProcess, case: Bad) -> None:
    client = service.client()
    with pytest.raises(pa.ArrowException) as caught:
        case.call(client)
    if case.schema:
        assert_one_line_schema_answer(caught.value)
    else:
        assert_one_line_answer(caught.value)
    assert health(client)["status"] == "ok"


@pytest.mark.parametrize(
    ("label", "call"),
    [
        ("list_flights", lambda c, o: list(c.list_flights(options=o))),
        (
            "get_flight_info",
            lambda c, o: c.get_flight_info(flight.FlightDescriptor.for_path("events"), options=o),
        ),
        (
            "do_get",
            lambda c, o: c.do_get(flight.Ticket(json.dumps(SPLIT).encode()), options=o).read_all(),
        ),
        ("do_action", lambda c, o: list(c.do_action(flight.Action("healthcheck", b""), options=o))),
        ("do_put", lambda c, o: put(c, "events", "t", 0, rows("t", 0), options=o)),
    ],
)
@pytest.mark.parametrize(
    "header",
    [None, "Bearer wrong", "bearer s3cret", "Bearer s3cret extra", "Basic czNjcmV0", "s3cret"],
)
def test_calls_without_the_token_are_refused_in_one_line(
    token_service: ServiceProcess, label: str, call: Any, header: str | None
) -> None:
    client = token_service.client()
    headers = [(b"authorization", header.encode())] if header else []
    with pytest.raises(flight.FlightUnauthenticatedError) as caught:
        call(client, flight.FlightCallOptions(headers=headers))
    assert "\n" not in str(caught.value) and "Traceback" not in str(caught.value)
    assert health(client, token_service.options_for("s3cret"))["status"] == "ok"


@pytest.fixture(scope="module")
def token_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root = tmp_path_factory.mktemp("token")
    cl.create_table(root / "events", SCHEMA)
    with ServiceProcess(str(root), token="s3cret") as running:
        yield running


def test_after_the_sweep_the_service_serves_and_stops_cleanly(service: ServiceProcess) -> None:
    client = service.client()
    assert put(client, "events", "after", 0, rows("after", 0))["skipped"] is False
    assert puts_in(read_all(client, flight.FlightDescriptor.for_path("events"))) == {
        ("reg", 5): 3,
        ("after", 0): 3,
    }
    assert service.terminate() == 0
    log = "".join(service.stderr)
    assert "failed unexpectedly" not in log and "Traceback" not in log, log[-3000:]
    assert puts_in(cl.open_table(Path(service.root) / "events").to_arrow()) == {
        ("reg", 5): 3,
        ("after", 0): 3,
    }
