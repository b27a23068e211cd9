"""TLS for the whole service (``--tls-cert``/``--tls-key``): Flight and Flight SQL clients
that trust the certificate get every call, the bearer token still guards them, a plaintext
client gets nothing, and a wrong certificate or key is one clear error before anything
listens."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import carbonlite as cl
from carbonlite.errors import InvalidOptionError
from carbonlite.serve.service import FlightService
from tests.support.flight_service import put
from tests.support.flight_sql import EVENTS, make_tables
from tests.support.tls import self_signed

adbc_dbapi = pytest.importorskip("adbc_driver_flightsql.dbapi")
TOKEN = "s3cret"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    make_tables(str(tmp_path / "tables"))
    return tmp_path / "tables"


@pytest.fixture
def pem(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed(tmp_path)


@pytest.fixture
def service(root: Path, pem: tuple[Path, Path]) -> Iterator[FlightService]:
    cert, key = pem
    service = FlightService(
        str(root),
        port=0,
        auth_token=TOKEN,
        flush_interval=0.05,
        tls_cert=str(cert),
        tls_key=str(key),
    )
    try:
        yield service
    finally:
        service.shutdown()
        service.close()


def _client(service: FlightService, cert: Path) -> flight.FlightClient:
    return flight.connect(f"grpc+tls://127.0.0.1:{service.port}", tls_root_certs=cert.read_bytes())


def _bearer() -> flight.FlightCallOptions:
    return flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {TOKEN}".encode())])


def test_flight_calls_over_tls(service: FlightService, pem: tuple[Path, Path], root: Path) -> None:
    assert service.location.startswith("grpc+tls://")
    client = _client(service, pem[0])
    options = _bearer()
    rows = pa.table(
        {"k": [10_000], "kind": ["buy"], "amount": [1.5], "day": pa.array([18000], pa.date32())},
        schema=EVENTS,
    )
    assert put(client, "events", "p", 0, rows, options)["skipped"] is False
    service.flush_all()
    assert cl.open_table(str(root / "events")).to_arrow().num_rows == 3001
    names = {f.descriptor.path[0] for f in client.list_flights(options=options)}
    assert names == {b"events", b"sales/eu", b"sales/us"}
    (result,) = client.do_action(flight.Action("healthcheck", b""), options=options)
    assert json.loads(result.body.to_pybytes())["status"] == "ok"
    with pytest.raises(flight.FlightUnauthenticatedError):  # the token still guards TLS calls
        client.list_actions()


def test_flight_sql_over_tls_through_adbc(service: FlightService, pem: tuple[Path, Path]) -> None:
    import adbc_driver_flightsql as adbc

    conn = adbc_dbapi.connect(
        f"grpc+tls://127.0.0.1:{service.port}",
        db_kwargs={
            adbc.DatabaseOptions.TLS_ROOT_CERTS.value: pem[0].read_text(),
            adbc.DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {TOKEN}",
        },
        autocommit=True,
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*), sum(k) FROM events WHERE kind = ?", ("buy",))
            assert cur.fetchall() == [(1000, sum(k for k in range(3000) if k % 3 == 2))]
    finally:
        conn.close()


def test_a_plaintext_client_or_one_without_the_certificate_gets_nothing(
    service: FlightService, tmp_path: Path
) -> None:
    plain = flight.connect(f"grpc://127.0.0.1:{service.port}")
    with pytest.raises(flight.FlightUnavailableError):
        plain.list_actions(options=_bearer())
    stranger, _ = self_signed(tmp_path, "stranger")  # trusts another certificate only
    with pytest.raises(flight.FlightUnavailableError):
        _client(service, stranger).list_actions(options=_bearer())


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("case", "needle"),
    [
        ("cert only", "--tls-cert needs --tls-key"),
        ("key only", "--tls-key needs --tls-cert"),
        ("missing file", "cannot be read"),
        ("not PEM", "is not a PEM file"),
        ("another key", "cannot serve TLS together"),
        ("key as cert", "cannot serve TLS together"),
    ],
)
def test_a_wrong_certificate_or_key_is_refused_before_anything_listens(
    root: Path, pem: tuple[Path, Path], tmp_path: Path, case: str, needle: str
) -> None:
    cert, key = (str(p) for p in pem)
    _, other_key = self_signed(tmp_path, "other")
    (tmp_path / "junk.pem").write_text("not a certificate")
    given = {
        "cert only": (cert, None),
        "key only": (None, key),
        "missing file": (str(tmp_path / "nope.pem"), key),
        "not PEM": (str(tmp_path / "junk.pem"), key),
        "another key": (cert, str(other_key)),
        "key as cert": (key, key),
    }[case]
    port = _port()
    with pytest.raises(InvalidOptionError, match=needle):
        FlightService(str(root), port=port, tls_cert=given[0], tls_key=given[1])
    with socket.socket() as s:  # nothing listens there
        s.bind(("127.0.0.1", port))
    assert not (root / ".carbonlite-serve").exists(), "a refused service made its log"
