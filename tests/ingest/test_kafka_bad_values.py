"""Messages that are not JSON objects, through the real command against the broker (issue 25):
a ``null`` next to an empty message once killed ``carbonlite ingest kafka`` with SIGSEGV on
every restart, and a ``null`` among good messages became an all-null row. Now each is a bad
record, or without a bad-records table an ``IngestError`` naming where it is, and the
process always ends by itself."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.ingest import app_id
from tests.support import REPO
from tests.support.kafka_broker import KafkaBroker

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])

BAD = [
    b"null",
    b"",
    b"42",
    b'"text"',
    b"[1, 2]",
    b"true",
    b'{"id": 1, "name": "\xff"}',
    b'{"id": 1',
    b'{"id": NaN}',
    b'{"id": 1, "id": 2}',
    b'{"id": 123456789012345678901234567890}',
    b"[" * 50_000 + b"]" * 50_000,
    b'{"id": 1} null {"id": 2}',
]


def good(i: int) -> bytes:
    return json.dumps({"id": i, "name": f"n{i}"}).encode()


def command(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("carbonlite")
    assert exe is not None, "the carbonlite command is not on PATH (install the package)"
    return subprocess.run(
        [exe, *args], cwd=REPO, capture_output=True, text=True, timeout=180, check=False
    )


def new_topic(broker: KafkaBroker, partitions: int) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    broker.create_topic(name, partitions)
    return name


@pytest.fixture
def mixed(kafka_broker: KafkaBroker) -> tuple[str, list[tuple[int, int]]]:
    """A topic of 2 partitions: the reported pair (``null`` then an empty message) first in
    partition 0, then good messages with every bad kind among them; the (partition, offset)
    of each bad one."""
    name = new_topic(kafka_broker, 2)
    kafka_broker.produce(name, [b"null", b""], partition=0)
    bad_at = [(0, 0), (0, 1)]
    for p in (0, 1):
        values = []
        for n, value in enumerate(BAD):
            values += [good(100 * p + 2 * n), value, good(100 * p + 2 * n + 1)]
        placed = kafka_broker.produce(name, values, partition=p)
        bad_at += [placed[i] for i in range(1, len(values), 3)]
    return name, sorted(bad_at)


def expected_ids() -> list[int]:
    return sorted(100 * p + i for p in (0, 1) for i in range(2 * len(BAD)))


def test_bad_values_go_to_the_bad_records_table_and_nothing_crashes(
    kafka_broker: KafkaBroker, tmp_path: Path, mixed: tuple[str, list[tuple[int, int]]]
) -> None:
    name, bad_at = mixed
    table, bad = tmp_path / "t", tmp_path / "bad"
    cl.create_table(table, SCHEMA)
    args = ["ingest", "kafka", str(table), "--bootstrap-servers", kafka_broker.bootstrap]
    args += ["--topic", name, "--stop-at-end", "--bad-records", str(bad), "--json"]
    args += ["--max-batch-rows", "7"]  # many batches, some starting with a bad value
    for run in range(2):  # the second is a restart: it reads nothing again
        done = command(*args)
        assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
        report = json.loads(done.stdout)
        assert report["rows"] == (len(expected_ids()) if run == 0 else 0)
        assert report["bad_records"] == (len(bad_at) if run == 0 else 0)
    rows = cl.open_table(table).to_arrow()
    assert sorted(rows.column("id").to_pylist()) == expected_ids()
    assert rows.column("name").null_count == 0, "a bad value became a row of nulls"
    kept = (
        cl.open_table(bad).to_arrow().sort_by([("partition", "ascending"), ("offset", "ascending")])
    )
    assert (
        list(zip(kept["partition"].to_pylist(), kept["offset"].to_pylist(), strict=True)) == bad_at
    )
    errors = kept["error"].to_pylist()
    assert errors[:2] == [
        "not a JSON object: the value is null",
        "the message has no value (a tombstone or an empty message)",
    ]
    assert all(errors), errors
    t = cl.open_table(table)
    for p, end in kafka_broker.end_offsets(name).items():
        assert t.transaction_version(app_id(name, p)) == end - 1


def test_without_a_bad_records_table_a_null_stops_with_its_offset(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """Was a SIGSEGV on every start: now one line naming topic, partition and offset, and the
    messages before it committed; a restart says the same, still without crashing."""
    name = new_topic(kafka_broker, 1)
    kafka_broker.produce(name, [good(i) for i in range(5)] + [b"null", b"", good(5)], partition=0)
    table = tmp_path / "t"
    cl.create_table(table, SCHEMA)
    args = ["ingest", "kafka", str(table), "--bootstrap-servers", kafka_broker.bootstrap]
    args += ["--topic", name, "--stop-at-end", "--max-batch-rows", "5"]
    for _ in range(2):
        done = command(*args)
        assert done.returncode == 1, (done.returncode, done.stderr[-3000:])
        assert "Traceback" not in done.stderr and done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("error: IngestError: message at offset 5 of partition 0 of")
        assert f"topic {name!r}" in lines[0] and "the value is null" in lines[0]
    assert sorted(cl.open_table(table).to_arrow().column("id").to_pylist()) == list(range(5))
    assert cl.open_table(table).transaction_version(app_id(name, 0)) == 4
