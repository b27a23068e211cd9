"""Bad input to the Kafka ingester, from the command line and from Python: each case ends in one
clear line (a ``CarbonLiteError`` from the API, ``error: ...`` and exit 1 from the command),
never a traceback, a hang or a crash; and an unreachable broker is one line within the
ingester's own connect timeout (issue 25: 476 librdkafka ``FAIL`` lines over 27 s, then a raw
``KafkaException`` traceback)."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
import carbonlite.cli.ingest_cmd  # registers the command
from carbonlite.errors import (
    CarbonLiteError,
    InvalidOptionError,
    TableNotFoundError,
)
from carbonlite.ingest import IngestError, KafkaIngester
from carbonlite.ingest.clients import KafkaClientError
from tests.cli.conftest import invoke
from tests.cli.test_errors import assert_one_line_error
from tests.support import REPO
from tests.support.kafka_broker import KafkaBroker

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA)
    return path


# --- an unreachable broker -------------------------------------------------------------------


@pytest.mark.slow
def test_an_unreachable_broker_is_one_line_and_exit_1(table: Path) -> None:
    """The real command, with each client, against a closed port: exit 1, one line naming
    the broker and what to check, nothing else (librdkafka's log lines go to Python logging,
    quiet here), and done within its own --connect-timeout (10 s by default, 3 s here; the
    bound asserted is generous, for a loaded machine)."""
    exe = shutil.which("carbonlite")
    assert exe is not None, "the carbonlite command is not on PATH (install the package)"
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    args = ["ingest", "kafka", str(table), "--bootstrap-servers", address, "--topic", "events"]
    args += ["--connect-timeout", "3s"]
    runs = {
        client: subprocess.Popen(
            [exe, *args, "--client", client],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for client in ("confluent-kafka", "kafka-python")
    }
    for client, run in runs.items():
        out, err = run.communicate(timeout=120)
        assert run.returncode == 1, (client, run.returncode, err[-3000:])
        assert out == "" and "Traceback" not in err, (client, err[-3000:])
        lines = err.splitlines()
        assert len(lines) == 1, (client, err[-3000:])
        assert lines[0].startswith(
            f"error: KafkaClientError: no Kafka broker answered at {address} within 3 s"
        ), lines[0]
        assert "Check --bootstrap-servers" in lines[0]
    assert time.monotonic() - started < 120
    assert cl.open_table(table).version == 0


def test_the_client_logs_to_the_carbonlite_ingest_logger(
    table: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """librdkafka's reconnect lines reach Python logging (``carbonlite.ingest``), not the
    process's stderr, and the error says how long it waited."""
    address = f"127.0.0.1:{closed_port()}"
    ingester = KafkaIngester(
        str(table),
        bootstrap_servers=address,
        topic="events",
        client="confluent-kafka",
        connect_timeout=1.5,
    )
    refused = pytest.raises(KafkaClientError, match=rf"at {address} within 1.5 s.*refused")
    with caplog.at_level(logging.DEBUG, logger="carbonlite.ingest"), refused:
        ingester.run()
    logged = [r for r in caplog.records if r.name == "carbonlite.ingest"]
    assert logged and any("Connection refused" in r.getMessage() for r in logged), logged
    assert "FAIL" not in capfd.readouterr().err


# --- bad input, from the command line --------------------------------------------------------

BROKER = "127.0.0.1:9"  # never contacted: every case fails before


def _cli(table: Path, *extra: str, topic: str = "events", servers: str = BROKER) -> list[str]:
    return ["ingest", "kafka", str(table), "--bootstrap-servers", servers, "--topic", topic, *extra]


CLI_CASES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    # (id, how to call: servers / topic / extra args, what the line says)
    ("servers-empty", {"servers": ""}, ("InvalidOptionError", "bootstrap_servers", "empty")),
    ("servers-no-port", {"servers": "localhost"}, ("has no port",)),
    ("servers-empty-port", {"servers": "localhost:"}, ("port ''",)),
    ("servers-port-text", {"servers": "localhost:abc"}, ("port 'abc'",)),
    ("servers-port-0", {"servers": "localhost:0"}, ("port '0'",)),
    ("servers-port-too-big", {"servers": "localhost:65536"}, ("port '65536'",)),
    ("servers-empty-entry", {"servers": "a:9092,,b:9092"}, ("an empty entry",)),
    ("servers-no-host", {"servers": ":9092"}, ("no valid host",)),
    ("servers-space", {"servers": "my host:9092"}, ("no valid host",)),
    ("servers-url-path", {"servers": "http://host:9092/x"}, ("port '9092/x'",)),
    ("topic-empty", {"topic": ""}, ("topic ''", "1 to 249 characters")),
    ("topic-space", {"topic": "my events"}, ("topic 'my events'",)),
    ("topic-slash", {"topic": "a/b"}, ("topic 'a/b'",)),
    ("topic-dot", {"topic": "."}, ("topic '.'",)),
    ("topic-dotdot", {"topic": ".."}, ("topic '..'",)),
    ("topic-too-long", {"topic": "x" * 250}, ("1 to 249 characters",)),
    ("topic-unicode", {"topic": "événements"}, ("événements",)),
    ("partitions-text", {"extra": ["--partitions", "a,b"]}, ("--partitions 'a,b'",)),
    ("partitions-negative", {"extra": ["--partitions", "-1"]}, ("-1 is not a partition",)),
    ("partitions-twice", {"extra": ["--partitions", "0,0"]}, ("names a partition twice",)),
    ("partitions-empty", {"extra": ["--partitions", ""]}, ("--partitions ''",)),
    ("partitions-hole", {"extra": ["--partitions", "0,,1"]}, ("--partitions '0,,1'",)),
    ("batch-zero", {"extra": ["--max-batch-rows", "0"]}, ("max_batch_rows", "at least 1")),
    ("batch-negative", {"extra": ["--max-batch-rows", "-5"]}, ("max_batch_rows", "-5")),
    ("latency-negative", {"extra": ["--max-latency", "-1s"]}, ("max_latency", "above 0")),
    ("latency-zero", {"extra": ["--max-latency", "0"]}, ("max_latency", "above 0")),
    ("latency-nan", {"extra": ["--max-latency", "nan"]}, ("max_latency", "nan")),
    ("latency-inf", {"extra": ["--max-latency", "inf"]}, ("max_latency", "inf")),
    ("latency-word", {"extra": ["--max-latency", "soon"]}, ("not a duration",)),
    ("connect-zero", {"extra": ["--connect-timeout", "0s"]}, ("connect_timeout", "above 0")),
    ("connect-negative", {"extra": ["--connect-timeout", "-3"]}, ("connect_timeout",)),
    ("connect-word", {"extra": ["--connect-timeout", "later"]}, ("--connect-timeout",)),
    ("format-avro", {"extra": ["--format", "avro"]}, ("format 'avro'", "json")),
    ("client-unknown", {"extra": ["--client", "librdkafka"]}, ("client 'librdkafka'",)),
    ("storage-not-json", {"extra": ["--storage-options", "{nope"]}, ("not valid JSON",)),
    ("storage-not-object", {"extra": ["--storage-options", "[1]"]}, ("a JSON object",)),
    ("json-output-too", {"servers": "nohost", "extra": ["--json"]}, ("has no port",)),
]


@pytest.mark.parametrize(
    ("how", "needles"), [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES]
)
def test_bad_options_are_one_line(
    table: Path, how: dict[str, Any], needles: tuple[str, ...]
) -> None:
    args = _cli(
        table,
        *how.get("extra", []),
        topic=how.get("topic", "events"),
        servers=how.get("servers", BROKER),
    )
    run = invoke(*args)
    assert run.exit_code == 1
    assert_one_line_error(run, *needles)
    assert cl.open_table(table).version == 0


@pytest.mark.parametrize("option", ["--group-id", "--consumer-group"])
def test_a_group_id_is_a_usage_error(table: Path, option: str) -> None:
    """The ingester joins no consumer group (its offsets are in the table): no such option."""
    run = invoke(*_cli(table, option, "g"))
    assert run.exit_code == 2
    assert "Traceback" not in run.stderr and f"No such option: {option}" in run.stderr


def test_tables_that_cannot_take_the_messages(tmp_path: Path, table: Path) -> None:
    missing = tmp_path / "missing"
    run = invoke(*_cli(missing))
    assert_one_line_error(run, "TableNotFoundError", str(missing), "carbonlite create")
    assert not missing.exists()

    plain = tmp_path / "notes.txt"
    plain.write_text("not a table")
    assert_one_line_error(invoke(*_cli(plain)), "TableNotFoundError", "is a file")
    run = invoke(*_cli(table, "--bad-records", str(plain)))
    assert_one_line_error(run, "InvalidOptionError", str(plain), "is a file")
    assert plain.read_text() == "not a table"

    other = tmp_path / "other"
    cl.create_table(other, pa.schema([("offset", pa.string()), ("note", pa.string())]))
    run = invoke(*_cli(table, "--bad-records", str(other)))
    assert_one_line_error(run, "InvalidOptionError", "not a bad-records table", "'offset'")
    run = invoke(*_cli(table, "--bad-records", str(table)))
    assert_one_line_error(run, "InvalidOptionError", "the table being ingested into")

    maps = tmp_path / "maps"
    cl.create_table(maps, pa.schema([("id", pa.int64()), ("m", pa.map_(pa.string(), pa.int64()))]))
    run = invoke(*_cli(maps))
    assert_one_line_error(run, "InvalidOptionError", "cannot fill", "'m' (map<string, int64>)")


# --- bad input, from Python -------------------------------------------------------------------


API_CASES: list[tuple[str, dict[str, Any], type[CarbonLiteError], str]] = [
    ("servers-not-str", {"bootstrap_servers": 9092}, InvalidOptionError, "a string"),
    ("servers-none", {"bootstrap_servers": None}, InvalidOptionError, "a string"),
    ("topic-none", {"topic": None}, InvalidOptionError, "topic must be a string"),
    ("partitions-not-list", {"partitions": 0}, InvalidOptionError, "a list of partition"),
    ("partitions-str", {"partitions": "0,1"}, InvalidOptionError, "a list of partition"),
    ("partitions-bool", {"partitions": [True]}, InvalidOptionError, "True is not a partition"),
    ("partitions-str-item", {"partitions": ["0"]}, InvalidOptionError, "'0' is not a partition"),
    ("partitions-empty", {"partitions": []}, InvalidOptionError, "at least one partition"),
    ("batch-float", {"max_batch_rows": 1.5}, InvalidOptionError, "max_batch_rows"),
    ("batch-bool", {"max_batch_rows": True}, InvalidOptionError, "max_batch_rows"),
    ("latency-str", {"max_latency": "1s"}, InvalidOptionError, "max_latency"),
    ("connect-nan", {"connect_timeout": float("nan")}, InvalidOptionError, "connect_timeout"),
    ("client-none", {"client": None}, InvalidOptionError, "client None"),
    ("client-options-str", {"client_options": "x"}, InvalidOptionError, "a mapping"),
    ("group-id-empty", {"client_options": {"group.id": ""}}, InvalidOptionError, "non-empty"),
    ("group-id-blank", {"client_options": {"group.id": "  "}}, InvalidOptionError, "non-empty"),
    ("group-id-none", {"client_options": {"group.id": None}}, InvalidOptionError, "non-empty"),
    ("group-id-int", {"client_options": {"group.id": 5}}, InvalidOptionError, "non-empty"),
    (
        "servers-in-options",
        {"client_options": {"bootstrap.servers": "x:1"}},
        InvalidOptionError,
        "may not set 'bootstrap.servers'",
    ),
    ("logger-int", {"client_options": {"logger": 5}}, InvalidOptionError, "logging.Logger"),
    ("writer-id-path", {"writer_id": "../w"}, InvalidOptionError, "writer"),
    ("storage-not-mapping", {"storage_options": "x"}, InvalidOptionError, "storage_options"),
]


@pytest.mark.parametrize(
    ("given", "error", "needle"), [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES]
)
def test_bad_arguments_raise_before_anything_is_opened(
    table: Path, given: dict[str, Any], error: type[CarbonLiteError], needle: str
) -> None:
    """The confluent-kafka client (auto) aborted the whole process (SIGABRT, an assertion in
    its C code) on an empty group.id: refused before the client is made."""
    kwargs: dict[str, Any] = {"bootstrap_servers": BROKER, "topic": "events", **given}
    with pytest.raises(error, match=None) as raised:
        KafkaIngester(str(table), **kwargs)
    assert needle in str(raised.value), str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_settings_the_client_refuses_are_invalid_options(table: Path, client: str) -> None:
    key = "no.such.setting" if client == "confluent-kafka" else "no_such_setting"
    ingester = KafkaIngester(
        str(table),
        bootstrap_servers=BROKER,
        topic="events",
        client=client,  # type: ignore[arg-type]
        client_options={key: 1},
    )
    with pytest.raises(InvalidOptionError, match="refused its settings"):
        ingester.run()


def test_a_topic_or_partition_the_broker_lacks(kafka_broker: KafkaBroker, table: Path) -> None:
    kafka_broker.create_topic("bad-input-two", 2)
    servers = kafka_broker.bootstrap
    run = invoke(*_cli(table, "--stop-at-end", topic="no-such-topic", servers=servers))
    assert_one_line_error(run, "IngestError", "'no-such-topic' does not exist", servers)
    run = invoke(*_cli(table, "--partitions", "0,7", topic="bad-input-two", servers=servers))
    assert_one_line_error(run, "IngestError", "has partitions [0, 1], not [7]")
    with pytest.raises(IngestError, match="does not exist"):
        KafkaIngester(str(table), bootstrap_servers=servers, topic="nope", stop_at_end=True).run()
    assert cl.open_table(table).version == 0


def test_a_missing_table_from_python_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError, match="carbonlite create PATH --schema"):
        KafkaIngester(str(tmp_path / "nope"), bootstrap_servers=BROKER, topic="events")
