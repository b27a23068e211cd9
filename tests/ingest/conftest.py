"""Fixtures for the ingest tests: one real Kafka-protocol broker (Tansu) for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.kafka_broker import KafkaBroker


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """A Tansu broker on 127.0.0.1 with a free port and memory storage, killed after the
    session. Tests share it, so each one makes topics with names of its own."""
    with KafkaBroker() as broker:
        yield broker
