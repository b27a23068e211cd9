"""The Kafka ingester against a real broker (Tansu): exactly once, offsets committed with the
rows as one marker per partition, bad records both ways, two ingesters racing, restarts."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.ingest import IngestError, KafkaIngester, app_id
from tests.support.kafka_broker import KafkaBroker

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("user", pa.string()),
        ("value", pa.float64()),
        ("ts", pa.timestamp("ms", tz="UTC")),
    ]
)
META = pa.schema(
    [
        *SCHEMA,
        ("_kafka_partition", pa.int32()),
        ("_kafka_offset", pa.int64()),
        ("_kafka_key", pa.binary()),
    ]
)


def message(i: int) -> bytes:
    return json.dumps(
        {"id": i, "user": f"u{i % 7}", "value": i / 4, "ts": "2026-11-24T10:00:00Z"}
    ).encode()


def topic(broker: KafkaBroker, partitions: int = 3) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    broker.create_topic(name, partitions)
    return name


def produce(broker: KafkaBroker, name: str, ids: range, partitions: int = 3) -> None:
    for p in range(partitions):
        mine = [i for i in ids if i % partitions == p]
        if mine:
            broker.produce(name, [message(i) for i in mine], partition=p)


def ingester(broker: KafkaBroker, path: Path, name: str, **kw: Any) -> KafkaIngester:
    kw.setdefault("stop_at_end", True)
    kw.setdefault("max_latency", 0.2)
    return KafkaIngester(str(path), bootstrap_servers=broker.bootstrap, topic=name, **kw)


def ids_of(path: Path) -> list[int]:
    return cl.open_table(path).to_arrow(columns=["id"]).column("id").to_pylist()


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_ingest_exactly_once_and_resume_after_new_messages(
    kafka_broker: KafkaBroker, tmp_path: Path, client: str
) -> None:
    name = topic(kafka_broker)
    produce(kafka_broker, name, range(3000))
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA)
    result = ingester(kafka_broker, path, name, client=client, max_batch_rows=700).run()
    assert sorted(ids_of(path)) == list(range(3000))
    assert result.rows == 3000 and result.commits >= 3
    ends = kafka_broker.end_offsets(name)
    t = cl.open_table(path)
    for p, end in ends.items():
        assert t.transaction_version(app_id(name, p)) == end - 1
    # every commit carries its markers in the same version as its rows, and says so
    appends = [h for h in t.history() if h.operation == "APPEND"]
    assert appends and all(h.rows > 0 and h.parameters["txns"] for h in appends)
    newest = dict(kv.split("=") for kv in appends[0].parameters["txns"].split(","))
    for p, offset in newest.items():
        assert t.transaction_version(p) == int(offset)
    again = ingester(
        kafka_broker, path, name, client=client
    ).run()  # nothing new: nothing committed
    assert again.rows == 0 and again.commits == 0
    produce(kafka_broker, name, range(3000, 3500))
    ingester(kafka_broker, path, name, client=client).run()
    assert sorted(ids_of(path)) == list(range(3500))


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_metadata_columns_and_chosen_partitions(
    kafka_broker: KafkaBroker, tmp_path: Path, client: str
) -> None:
    name = topic(kafka_broker)
    produce(kafka_broker, name, range(60))
    path = tmp_path / "t"
    cl.create_table(path, META)
    ingester(kafka_broker, path, name, client=client, partitions=[1]).run()
    rows = cl.open_table(path).to_arrow().sort_by("id")
    assert rows.column("id").to_pylist() == [i for i in range(60) if i % 3 == 1]
    assert set(rows.column("_kafka_partition").to_pylist()) == {1}
    assert rows.column("_kafka_offset").to_pylist() == list(range(20))
    t = cl.open_table(path)
    assert t.transaction_version(app_id(name, 1)) == 19
    assert t.transaction_version(app_id(name, 0)) is None


def test_a_bad_record_stops_the_ingester_and_commits_nothing_past_it(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    name = topic(kafka_broker, 1)
    good = [message(i) for i in range(100)]
    kafka_broker.produce(name, good, partition=0)
    kafka_broker.produce(name, [b'{"id": "not a number"}'], partition=0)  # offset 100
    kafka_broker.produce(name, [message(i) for i in range(101, 120)], partition=0)
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA)
    with pytest.raises(IngestError, match=f"offset 100 of partition 0 of topic '{name}'"):
        ingester(kafka_broker, path, name, max_batch_rows=50).run()
    t = cl.open_table(path)
    assert sorted(ids_of(path)) == list(range(100))  # the batches before it, nothing after
    assert t.transaction_version(app_id(name, 0)) == 99


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_bad_records_go_to_their_table_exactly_once(
    kafka_broker: KafkaBroker, tmp_path: Path, client: str
) -> None:
    name = topic(kafka_broker, 1)
    values = [message(i) if i % 10 else b"{broken" for i in range(200)]
    kafka_broker.produce(name, values, partition=0)
    path, bad = tmp_path / "t", tmp_path / "bad"
    cl.create_table(path, SCHEMA)
    result = ingester(
        kafka_broker, path, name, client=client, bad_records=str(bad), max_batch_rows=64
    ).run()
    assert sorted(ids_of(path)) == [i for i in range(200) if i % 10]
    bad_rows = cl.open_table(bad).to_arrow().sort_by("offset")
    assert bad_rows.column("offset").to_pylist() == list(range(0, 200, 10))
    assert set(bad_rows.column("value").to_pylist()) == {b"{broken"}
    assert all("JSON" in e for e in bad_rows.column("error").to_pylist())
    assert result.bad_records == 20
    # a crash after the bad records' commit and before the rows': the batch is read again
    t = cl.open_table(path)
    marker = t.transaction_version(app_id(name, 0))
    assert marker == 199
    ingester(kafka_broker, path, name, client=client, bad_records=str(bad)).run()
    assert cl.open_table(bad).count_rows() == 20


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_two_ingesters_on_one_partition_never_commit_the_same_offsets(
    kafka_broker: KafkaBroker, tmp_path: Path, client: str
) -> None:
    name = topic(kafka_broker, 2)
    produce(kafka_broker, name, range(4000), partitions=2)
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA)
    results = []

    def run(writer: str) -> None:
        results.append(
            ingester(
                kafka_broker, path, name, client=client, max_batch_rows=300, writer_id=writer
            ).run()
        )

    threads = [threading.Thread(target=run, args=(w,)) for w in ("a", "b")]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    ids = ids_of(path)
    assert sorted(ids) == list(range(4000)), "a row was lost or committed twice"
    assert sum(r.rows for r in results) == 4000
    t = cl.open_table(path)
    for p, end in kafka_broker.end_offsets(name).items():
        assert t.transaction_version(app_id(name, p)) == end - 1


def test_the_command(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    import carbonlite.cli.ingest_cmd  # noqa: F401 - registers the command
    from carbonlite.cli import app

    name = topic(kafka_broker)
    produce(kafka_broker, name, range(90))
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA)
    args = ["ingest", "kafka", str(path), "--bootstrap-servers", kafka_broker.bootstrap]
    run = CliRunner().invoke(app, [*args, "--topic", name, "--stop-at-end", "--json"])
    assert run.exit_code == 0, run.output
    report = json.loads(run.output)
    assert report["rows"] == 90 and report["bad_records"] == 0
    assert sorted(ids_of(path)) == list(range(90))
    missing = CliRunner().invoke(app, [*args, "--topic", "no-such-topic", "--stop-at-end"])
    assert missing.exit_code == 1 and "no-such-topic" in missing.output


@pytest.mark.parametrize(
    "layout",
    [
        {"partition_by": ["user"]},
        {"sort_columns": ["value"]},
        {"partition_by": ["bucket(4, id)"], "sort_columns": ["id"]},
    ],
    ids=["partitioned", "sorted", "bucketed-sorted"],
)
def test_partitioned_and_sorted_tables(
    kafka_broker: KafkaBroker, tmp_path: Path, layout: dict[str, Any]
) -> None:
    """Rows land in their partitions' segments (and in sort order within a blocklet), each
    batch still one commit with its markers."""
    name = topic(kafka_broker)
    produce(kafka_broker, name, range(2000))
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA, **layout)
    result = ingester(kafka_broker, path, name, max_batch_rows=600).run()
    assert result.rows == 2000
    t = cl.open_table(path)
    assert sorted(ids_of(path)) == list(range(2000))
    assert len(t.history()) - 1 == result.commits  # one version per batch (after creation)
    for p, end in kafka_broker.end_offsets(name).items():
        assert t.transaction_version(app_id(name, p)) == end - 1
    if "partition_by" in layout:
        assert len(t.partitions()) == (7 if layout["partition_by"] == ["user"] else 4)
        one = t.to_arrow(filter=pa.compute.field("user") == "u3")
        assert sorted(one.column("id").to_pylist()) == [i for i in range(2000) if i % 7 == 3]
    assert t.verify().ok


def test_primary_key_table_upserts_by_key(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    """Every batch is an upsert: a key sent again later replaces its row, across batches and
    within one, and the markers still move with each commit."""
    name = topic(kafka_broker, 1)
    values = [
        json.dumps({"id": i % 500, "user": f"v{n}", "value": float(n), "ts": None}).encode()
        for n, i in enumerate(range(1500))
    ]
    kafka_broker.produce(name, values, partition=0)
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA, primary_key=["id"])
    result = ingester(kafka_broker, path, name, max_batch_rows=400).run()
    assert result.rows == 1500 and result.commits >= 4
    got = cl.open_table(path).to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == list(range(500))
    assert got.column("value").to_pylist() == [float(1000 + i) for i in range(500)]  # newest
    assert cl.open_table(path).transaction_version(app_id(name, 0)) == 1499


def test_progress_reports_lag_per_partition(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    name = topic(kafka_broker)
    produce(kafka_broker, name, range(3000))
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA)
    seen: list[dict[int, int]] = []
    ingester(
        kafka_broker, path, name, max_batch_rows=500, progress=lambda r: seen.append(dict(r.lag))
    ).run()
    assert len(seen) >= 6
    # a partition's lag is known once the consumer fetched from it
    assert all(set(lag) <= {0, 1, 2} for lag in seen), seen
    assert sum(seen[0].values()) > 0, f"the first commits leave messages behind: {seen}"
    assert seen[-1] == {0: 0, 1: 0, 2: 0}


def test_the_command_shows_a_live_line_on_a_terminal(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """On a terminal the command keeps one line up to date (rows/s and lag per partition)."""
    import os
    import pty
    import shutil
    import subprocess

    command = shutil.which("carbonlite")
    if command is None:
        pytest.fail("the carbonlite command is not on PATH (install the package)")
    name = topic(kafka_broker)
    produce(kafka_broker, name, range(1200))
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA)
    leader, follower = pty.openpty()
    args = ["ingest", "kafka", str(path), "--bootstrap-servers", kafka_broker.bootstrap]
    proc = subprocess.Popen(
        [command, *args, "--topic", name, "--stop-at-end", "--max-batch-rows", "400"],
        stderr=follower,
        stdout=subprocess.PIPE,
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the command closed its end
            break
        if not chunk:
            break
        shown += chunk
    out, _ = proc.communicate(timeout=60)
    os.close(leader)
    assert proc.returncode == 0, shown
    text = shown.decode(errors="replace")
    assert "rows/s" in text and "lag 0:" in text and "1:" in text, text
    assert b"ingested 1,200 rows" in out
