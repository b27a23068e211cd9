"""SIGKILL of the Kafka ingester at random moments: after restarts every message is in the
table exactly once, and each partition's marker is its end offset - 1.

``CARBONLITE_CRASH_SEED=<n>`` replays the random kill times of a failed run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.ingest import app_id
from tests.support.kafka_broker import KafkaBroker

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])
MESSAGES = 20_000


def run_kills(broker: KafkaBroker, tmp_path: Path, kills: int) -> None:
    seed = int(os.environ.get("CARBONLITE_CRASH_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    name = f"crash-{uuid.uuid4().hex[:8]}"
    broker.create_topic(name, 3)
    for p in range(3):
        ids = range(p, MESSAGES, 3)
        broker.produce(
            name, [json.dumps({"id": i, "payload": "x" * 50}).encode() for i in ids], partition=p
        )
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA)
    command = [
        sys.executable,
        "-m",
        "carbonlite",
        "ingest",
        "kafka",
        str(path),
        "--bootstrap-servers",
        broker.bootstrap,
        "--topic",
        name,
        "--stop-at-end",
        "--max-batch-rows",
        "500",
        "--max-latency",
        "50ms",
    ]
    killed = 0
    for _attempt in range(kills + 20):  # processes that finish before their kill do not count
        if killed == kills:
            break
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.3, 1.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode in (0, -signal.SIGKILL), f"seed {seed}: {err.decode()[-2000:]}"
    # the last run, to the end
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"seed {seed}: {err.decode()[-2000:]}"
    t = cl.open_table(path)
    ids = t.to_arrow(columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids)), f"seed {seed}: a message was committed twice"
    assert sorted(ids) == list(range(MESSAGES)), f"seed {seed}: messages lost"
    for p, end in broker.end_offsets(name).items():
        assert t.transaction_version(app_id(name, p)) == end - 1, f"seed {seed}"
    assert killed >= kills // 2, f"seed {seed}: only {killed} kills landed"
    assert t.verify().ok


def test_sigkill_during_ingest_loses_and_duplicates_nothing(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    run_kills(kafka_broker, tmp_path, kills=4)


@pytest.mark.slow
def test_many_sigkills_during_ingest(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    run_kills(kafka_broker, tmp_path, kills=20)
