"""More bad input to the Kafka ingester (after tests/ingest/test_kafka_bad_input.py, whose
helpers these reuse): options at their edges, tables it refuses, bad-records tables in the
wrong place or of the wrong shape, a refused run that must leave no bad-records table behind,
a batch larger than one client call takes, and SIGTERM in the middle of a run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.errors import InvalidOptionError, UnsupportedStorageError
from carbonlite.ingest import KafkaIngester, app_id
from carbonlite.ingest.kafka import BAD_RECORDS_SCHEMA
from tests.cli.conftest import invoke
from tests.cli.test_errors import assert_one_line_error
from tests.ingest.test_kafka_bad_input import BROKER, SCHEMA, _cli
from tests.support import REPO
from tests.support.kafka_broker import KafkaBroker


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA)
    return path


def _made(tmp_path: Path, name: str, schema: pa.Schema) -> Path:
    cl.create_table(tmp_path / name, schema)
    return tmp_path / name


# --- the command line, refused before any broker is asked ---------------------------------------

CASES: list[tuple[str, list[str], tuple[str, ...]]] = [
    ("partitions-hex", ["--partitions", "0x1"], ("--partitions '0x1'",)),
    ("partitions-negative-in-list", ["--partitions", "0,-2"], ("-2 is not a partition",)),
    ("partitions-trailing-comma", ["--partitions", "0,"], ("--partitions '0,'",)),
    ("latency-0s", ["--max-latency", "0s"], ("max_latency", "above 0")),
    ("latency-minus-zero", ["--max-latency", "-0"], ("max_latency", "-0.0")),
    ("latency-overflow", ["--max-latency", "1e400s"], ("max_latency", "inf")),
    ("latency-unit-only", ["--max-latency", "ms"], ("not a duration",)),
    ("connect-nan", ["--connect-timeout", "nan"], ("connect_timeout", "nan")),
    ("connect-empty", ["--connect-timeout", ""], ("--connect-timeout ''",)),
    ("batch-minus-zero", ["--max-batch-rows", "-0"], ("max_batch_rows", "at least 1")),
    ("format-upper", ["--format", "JSON"], ("format 'JSON'",)),
    ("storage-number", ["--storage-options", "5"], ("a JSON object",)),
    ("storage-local-key", ["--storage-options", '{"x": 1}'], ("local paths",)),
    ("storage-nested", ["--storage-options", '{"a": {"b": []}}'], ("storage_options",)),
    ("bad-records-empty", ["--bad-records", ""], ("is empty",)),
    ("bad-records-newline", ["--bad-records", "a\nb"], ("control character",)),
    ("bad-records-s3-no-bucket", ["--bad-records", "s3://"], ("names no bucket",)),
]


@pytest.mark.parametrize(("extra", "needles"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_more_bad_options_are_one_line(
    table: Path, extra: list[str], needles: tuple[str, ...]
) -> None:
    run = invoke(*_cli(table, *extra), "--json")
    assert run.exit_code == 1
    assert_one_line_error(run, *needles)
    assert cl.open_table(table).version == 0
    assert sorted(p.name for p in table.parent.iterdir()) == ["t"], "a refused run made a table"


@pytest.mark.parametrize(
    ("servers", "topic", "needle"),
    [
        (f"{BROKER},", "events", "an empty entry"),
        ("[::1:9092", "events", "no valid host"),
        (BROKER, "$events", "not a Kafka topic name"),
        (BROKER, "events\n", "not a Kafka topic name"),
    ],
)
def test_more_bad_servers_and_topics(table: Path, servers: str, topic: str, needle: str) -> None:
    assert_one_line_error(invoke(*_cli(table, topic=topic, servers=servers)), needle)


def test_tables_whose_columns_messages_cannot_fill(tmp_path: Path) -> None:
    durations = _made(
        tmp_path,
        "d",
        pa.schema([("id", pa.int64()), ("d", pa.duration("us")), ("f", pa.binary(4))]),
    )
    run = invoke(*_cli(durations))
    assert_one_line_error(run, "cannot fill", "'d' (duration[us])", "'f' (fixed_size_binary[4])")
    metadata_only = _made(tmp_path, "m", pa.schema([("_kafka_offset", pa.int64())]))
    assert_one_line_error(invoke(*_cli(metadata_only)), "no column for message values")


def test_bad_records_tables_in_the_wrong_place_or_shape(tmp_path: Path, table: Path) -> None:
    inside = table / "segments" / "bad"
    run = invoke(*_cli(table, "--bad-records", str(inside)))
    assert_one_line_error(run, "InvalidOptionError", "inside the table", str(table))
    assert not inside.exists()
    wider = _made(tmp_path, "wider", pa.schema([*BAD_RECORDS_SCHEMA, ("extra", pa.string())]))
    line = assert_one_line_error(invoke(*_cli(table, "--bad-records", str(wider))), "'extra'")
    assert line.count("'extra'") == 1, line  # said once
    narrower = _made(tmp_path, "narrower", pa.schema(list(BAD_RECORDS_SCHEMA)[:3]))
    run = invoke(*_cli(table, "--bad-records", str(narrower)))
    assert_one_line_error(run, "not a bad-records table", "'error' (string) is missing")
    run = invoke(*_cli(table, "--bad-records", f"file://{table}/"))
    assert_one_line_error(run, "the table being ingested into")
    assert cl.open_table(table).version == 0


# --- from Python ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "error", "needle"),
    [
        ({"storage_options": {"x": 1}}, UnsupportedStorageError, "local paths"),
        ({"partitions": (0, 0)}, InvalidOptionError, "names a partition twice"),
        ({"partitions": [-0, 1, -1]}, InvalidOptionError, "-1 is not a partition"),
        ({"max_batch_rows": 0}, InvalidOptionError, "at least 1"),
        ({"max_latency": 0}, InvalidOptionError, "above 0"),
        ({"connect_timeout": float("inf")}, InvalidOptionError, "inf"),
        ({"bad_records": 5}, InvalidOptionError, "table path"),
    ],
)
def test_more_bad_arguments(table: Path, given: dict[str, Any], error: type, needle: str) -> None:
    with pytest.raises(error) as raised:
        KafkaIngester(str(table), bootstrap_servers=BROKER, topic="events", **given)
    assert needle in str(raised.value)


# --- against a broker ----------------------------------------------------------------------------


def _topic(broker: KafkaBroker, partitions: int = 2, rows: int = 0) -> str:
    name = f"more-{uuid.uuid4().hex[:10]}"
    broker.create_topic(name, partitions)
    for p in range(partitions):
        values = [
            json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(p, rows, partitions)
        ]
        if values:
            broker.produce(name, values, partition=p)
    return name


def test_a_refused_run_leaves_no_bad_records_table(
    kafka_broker: KafkaBroker, tmp_path: Path, table: Path
) -> None:
    """The bad-records table was created before the topic was looked up: a missing topic or
    partition left an empty table behind. It is made at the first bad record."""
    servers, bad = kafka_broker.bootstrap, tmp_path / "bad"
    args = ("--bad-records", str(bad), "--stop-at-end", "--max-latency", "0.2s")
    run = invoke(*_cli(table, *args, topic="none", servers=servers))
    assert_one_line_error(run, "IngestError", "'none' does not exist")
    name = _topic(kafka_broker, 2, rows=4)
    run = invoke(*_cli(table, *args, "--partitions", "3", topic=name, servers=servers))
    assert_one_line_error(run, "IngestError", "not [3]")
    assert not bad.exists(), "a refused run created the bad-records table"
    run = invoke(*_cli(table, *args, topic=name, servers=servers))
    assert run.exit_code == 0, run.stderr
    assert not bad.exists(), "no bad record, no bad-records table"
    kafka_broker.produce(name, [b"not json"], partition=1)
    run = invoke(*_cli(table, *args, topic=name, servers=servers))
    assert run.exit_code == 0, run.stderr
    assert cl.open_table(bad).to_arrow().column("value").to_pylist() == [b"not json"]
    assert cl.open_table(table).count_rows() == 4


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_a_batch_larger_than_one_client_call(
    kafka_broker: KafkaBroker, tmp_path: Path, client: str
) -> None:
    """confluent-kafka's consume() refuses to be asked for over a million messages: a raw
    ValueError traceback for --max-batch-rows 2000000. Every batch size is fine."""
    name = _topic(kafka_broker, 2, rows=50)
    for n, rows in enumerate(("2000000", str(2**63 - 1))):
        path = tmp_path / f"t{n}"
        cl.create_table(path, SCHEMA)
        extra = ("--max-batch-rows", rows, "--max-latency", "0.2s", "--client", client)
        run = invoke(
            *_cli(path, *extra, "--stop-at-end", topic=name, servers=kafka_broker.bootstrap)
        )
        assert run.exit_code == 0, run.stderr
        assert sorted(cl.open_table(path).to_arrow().column("id").to_pylist()) == list(range(50))


def test_sigterm_mid_run_exits_0_and_keeps_exactly_once(
    kafka_broker: KafkaBroker, tmp_path: Path, table: Path
) -> None:
    """The command, running until told to stop, gets SIGTERM once it has committed: it
    commits what it fetched and exits 0; a second run to the end takes the rest, and every
    message is in the table once."""
    name = _topic(kafka_broker, 2, rows=200)
    args = _cli(
        table,
        "--max-latency",
        "0.1s",
        "--max-batch-rows",
        "30",
        topic=name,
        servers=kafka_broker.bootstrap,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "carbonlite", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 60
        while cl.open_table(table).version < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        kafka_broker.produce(name, [json.dumps({"id": 200, "name": "late"}).encode()], partition=0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and out.startswith("ingested "), (out, err)
    run = invoke(
        *_cli(
            table,
            "--stop-at-end",
            "--max-latency",
            "0.1s",
            topic=name,
            servers=kafka_broker.bootstrap,
        )
    )
    assert run.exit_code == 0, run.stderr
    t = cl.open_table(table)
    assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(201))
    assert t.transaction_version(app_id(name, 0)) == 100  # 100 messages and the late one
    assert t.transaction_version(app_id(name, 1)) == 99
