"""The test broker is a real Kafka-protocol broker and behaves as the Kafka ingester needs.

The ingester reads with explicit partition assignment from offsets it keeps itself (no
consumer group), so these tests pin exactly that: dense offsets per partition, each record
read back once from any start offset with its key and timestamp, true end offsets, and a
consumer at the end that sees nothing until something new is produced.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass

import pytest
from kafka import TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from tests.support.kafka_broker import KafkaBroker

MESSAGES = 1_000
PARTITIONS = 3
BASE_TS_MS = 1_700_000_000_000


def new_topic(broker: KafkaBroker, partitions: int) -> str:
    """A topic with a fresh name: the broker is shared by the whole session."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    broker.create_topic(name, partitions)
    return name


@dataclass(frozen=True)
class Sent:
    key: bytes
    value: bytes
    timestamp_ms: int


@dataclass
class Produced:
    topic: str
    sent: dict[tuple[int, int], Sent]
    """What was produced, by (partition, offset)."""
    order: list[tuple[int, int]]
    """(partition, offset) in the order the messages were sent."""


@pytest.fixture(scope="module")
def produced(kafka_broker: KafkaBroker) -> Produced:
    """1,000 JSON messages with keys and timestamps, spread over 3 partitions by key hash."""
    topic = new_topic(kafka_broker, PARTITIONS)
    keys = [f"user-{i}".encode() for i in range(MESSAGES)]
    values = [
        json.dumps({"id": i, "user": f"user-{i}", "amount": i * 1.5, "ok": i % 2 == 0}).encode()
        for i in range(MESSAGES)
    ]
    timestamps = [BASE_TS_MS + i for i in range(MESSAGES)]
    # Three calls, so each partition's log holds several multi-record batches.
    order: list[tuple[int, int]] = []
    for chunk in (slice(0, 100), slice(100, 600), slice(600, MESSAGES)):
        order += kafka_broker.produce(
            topic, values[chunk], keys=keys[chunk], timestamps_ms=timestamps[chunk]
        )
    sent = {where: Sent(keys[i], values[i], timestamps[i]) for i, where in enumerate(order)}
    return Produced(topic, sent, order)


def consume(
    broker: KafkaBroker, topic: str, start: dict[int, int], end: dict[int, int]
) -> list[ConsumerRecord]:
    """Everything in ``topic`` from ``start[p]`` up to ``end[p]`` on each partition ``p``,
    read with ``assign`` and ``seek`` (no consumer group), in arrival order."""
    consumer = broker.consumer()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(start)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, start[tp.partition])
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < end[tp.partition] for tp in tps):
            assert time.monotonic() < deadline, "timed out reading the topic back"
            for batch in consumer.poll(timeout_ms=200).values():
                records += batch
        return records
    finally:
        consumer.close()


def test_produce_gives_dense_offsets_on_every_partition(produced: Produced) -> None:
    per_partition: dict[int, list[int]] = {}
    for partition, offset in produced.order:
        per_partition.setdefault(partition, []).append(offset)
    assert sorted(per_partition) == list(range(PARTITIONS))
    for offsets in per_partition.values():
        assert offsets == list(range(len(offsets)))


def test_end_offsets_count_the_messages_per_partition(
    kafka_broker: KafkaBroker, produced: Produced
) -> None:
    counts = Counter(partition for partition, _ in produced.order)
    assert kafka_broker.end_offsets(produced.topic) == dict(counts)


@pytest.mark.parametrize("start_at", [0.0, 0.37, 1.0], ids=["beginning", "middle", "end"])
def test_each_message_comes_back_once_from_any_start_offset(
    kafka_broker: KafkaBroker, produced: Produced, start_at: float
) -> None:
    end = kafka_broker.end_offsets(produced.topic)
    start = {p: int(n * start_at) for p, n in end.items()}
    records = consume(kafka_broker, produced.topic, start, end)

    got = Counter((r.partition, r.offset) for r in records)
    expected = {(p, o) for p, o in produced.sent if o >= start[p]}
    assert set(got) == expected
    assert all(n == 1 for n in got.values())
    for r in records:
        sent = produced.sent[(r.partition, r.offset)]
        assert (r.key, r.value, r.timestamp) == (sent.key, sent.value, sent.timestamp_ms)
        assert r.timestamp_type == 0  # CreateTime: the producer's timestamp is kept
        json.loads(r.value)


def test_a_consumer_at_the_end_waits_for_new_messages(kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 1)
    kafka_broker.produce(topic, [b'{"n": 0}', b'{"n": 1}', b'{"n": 2}'], partition=0)
    end = kafka_broker.end_offsets(topic)
    assert end == {0: 3}

    consumer = kafka_broker.consumer()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, end[0])
        stop = time.monotonic() + 1.0
        while time.monotonic() < stop:
            assert consumer.poll(timeout_ms=200) == {}

        assert kafka_broker.produce(topic, [b'{"n": 3}'], partition=0, keys=[b"k"]) == [(0, 3)]
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + 10
        while not records:
            assert time.monotonic() < deadline, "the new message never arrived"
            records += consumer.poll(timeout_ms=200).get(tp, [])
        assert [(r.offset, r.key, r.value) for r in records] == [(3, b"k", b'{"n": 3}')]
        assert consumer.highwater(tp) == 4
    finally:
        consumer.close()


def test_list_offsets_latest_is_never_past_the_end(
    kafka_broker: KafkaBroker, produced: Produced
) -> None:
    """Tansu answers ListOffsets(LATEST) with the newest batch's base offset + 1, so a client's
    own ``end_offsets`` can be short of the true end (here, it is after multi-record batches).
    It is never past it, which is what ``KafkaBroker.end_offsets`` relies on."""
    consumer = kafka_broker.consumer()
    try:
        tps = [TopicPartition(produced.topic, p) for p in range(PARTITIONS)]
        listed = {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()
    true_end = kafka_broker.end_offsets(produced.topic)
    assert all(0 < listed[p] <= true_end[p] for p in true_end)


def test_confluent_kafka_reads_from_assigned_offsets(
    kafka_broker: KafkaBroker, produced: Produced
) -> None:
    """The faster client (librdkafka) works against the broker the same way."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    end = kafka_broker.end_offsets(produced.topic)
    start = {p: n // 2 for p, n in end.items()}
    # librdkafka needs a group.id even for assign(); without subscribe() no group is joined.
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([CTopicPartition(produced.topic, p, o) for p, o in start.items()])
        got: dict[tuple[int | None, int | None], tuple[bytes | None, bytes | None, int]] = {}
        deadline = time.monotonic() + 30
        while len(got) < sum(end[p] - start[p] for p in end):
            assert time.monotonic() < deadline, "timed out reading the topic back"
            for m in consumer.consume(1000, timeout=0.2):
                assert m.error() is None, m.error()
                where = (m.partition(), m.offset())
                assert where not in got
                got[where] = (m.key(), m.value(), m.timestamp()[1])
        assert got == {
            (p, o): (sent.key, sent.value, sent.timestamp_ms)
            for (p, o), sent in produced.sent.items()
            if o >= start[p]
        }
        # The watermark cached from Fetch responses is the true end (unlike ListOffsets).
        for p, n in end.items():
            assert consumer.get_watermark_offsets(
                CTopicPartition(produced.topic, p), cached=True
            ) == (0, n)
    finally:
        consumer.close()
