"""Fixtures for the ingest tests: one real Kafka-protocol broker (Tansu) for the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kafka_broker import KafkaBroker


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """A Tansu broker on 127.0.0.1 with a free port and memory storage, killed after the
    session. Tests share it, so each one makes topics with names of its own."""
    with KafkaBroker() as broker:
        yield broker


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """An empty directory for the file ingester to read."""
    path = tmp_path / "out"
    path.mkdir()
    return path
