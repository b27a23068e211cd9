"""SIGKILL of the Kafka ingester in random phases: after restarts every message is in the
table exactly once, and each partition's marker is its end offset - 1.

Each run is held at a random seam of the ingester and the commit protocol, the n-th time it
gets there (``tests/support/held_process.py``), and killed there: the kills land inside a
batch on any machine, however fast or loaded (timed kills missed it: a fast run finished
before its kill, a slow one had not yet started).
``CARBONLITE_CRASH_SEED=<n>`` replays the random phases of a failed run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.ingest import app_id
from tests.support.kafka_broker import KafkaBroker

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])
PHASES = (
    "ingest.after_fetch",
    "ingest.before_commit",
    "append.after_data",
    "commit.before_put",
    "commit.after_put",
    "commit.before_checkpoint",
)
"""Where a run is held and killed: within a batch, before and after its version lands."""
MESSAGES = 20_000


def produce(broker: KafkaBroker, topic: str, first: int, end: int) -> int:
    """Messages ``first`` .. ``end - 1``, spread over the topic's three partitions; ``end``.
    A run that ended before its phase came again is given more, so the kills still land."""
    for p in range(3):
        ids = [i for i in range(first, end) if i % 3 == p]
        broker.produce(
            topic, [json.dumps({"id": i, "payload": "x" * 50}).encode() for i in ids], partition=p
        )
    return end


def run_kills(broker: KafkaBroker, tmp_path: Path, kills: int) -> None:
    seed = int(os.environ.get("CARBONLITE_CRASH_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    name = f"crash-{uuid.uuid4().hex[:8]}"
    broker.create_topic(name, 3)
    produced = produce(broker, name, 0, MESSAGES)
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA)
    command = [
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
    for _ in range(kills):
        seam, nth = rng.choice(PHASES), rng.randint(1, 3)
        held = [sys.executable, "-m", "tests.support.held_process", seam, str(nth), "--"]
        proc = subprocess.Popen(
            held + command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.PIPE
        )
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()  # "held ...", or "" when it ended first
        if line.startswith("held "):
            proc.send_signal(signal.SIGKILL)
            killed += 1
        _out, err = proc.communicate(timeout=300)
        assert proc.returncode in (0, -signal.SIGKILL), f"seed {seed}: {err.decode()[-2000:]}"
        if proc.returncode == 0:  # everything was ingested before the phase came again
            if killed >= min(kills, 4):
                break
            produced = produce(broker, name, produced, produced + MESSAGES // 4)  # more to do
    # the last run, to the end
    proc = subprocess.Popen(
        [sys.executable, "-m", "carbonlite", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"seed {seed}: {err.decode()[-2000:]}"
    t = cl.open_table(path)
    ids = t.to_arrow(columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids)), f"seed {seed}: a message was committed twice"
    assert sorted(ids) == list(range(produced)), f"seed {seed}: messages lost"
    for p, end in broker.end_offsets(name).items():
        assert t.transaction_version(app_id(name, p)) == end - 1, f"seed {seed}"
    assert killed >= min(kills, 4), f"seed {seed}: only {killed} kills landed"
    assert t.verify().ok


@pytest.mark.slow
def test_sigkill_during_ingest_loses_and_duplicates_nothing(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    run_kills(kafka_broker, tmp_path, kills=4)


@pytest.mark.slow
def test_many_sigkills_during_ingest(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    run_kills(kafka_broker, tmp_path, kills=20)
