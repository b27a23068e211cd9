"""Exactly-once ingestion from Kafka: the offsets are committed with the rows, in the table.

Each commit holds the rows of one batch and, in the SAME log version, one transaction
marker per Kafka partition it consumed: ``app_id = f"kafka:{topic}:{partition}"`` with the
last offset included as its batch id, moved by compare-and-set (``AppendCommit.progress``).
So ``Table.transaction_version(app_id)`` is the last ingested offset; on start each partition
resumes at that offset + 1 (at the beginning when there is none); a SIGKILL at any moment
loses and duplicates nothing; and two ingesters on one partition can never both commit the
same offsets: the second's commit finds the marker moved, commits nothing
(``TxnMovedError``), and it resumes after the table's marker.

Bad records (a value that is not a JSON object of the table's columns) go to the
``bad_records`` table, with their own markers (``kafka-bad:{topic}:{partition}``), committed
just before the good rows of the same batch; a restart re-reads the batch and finds the bad
records' markers already there, so they too are kept exactly once. Without that table the
first bad record stops the ingester with an :class:`IngestError` naming topic, partition and
offset, and nothing past the last commit is committed.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from carbonlite.create import create_table, open_table
from carbonlite.errors import CarbonLiteError, InvalidOptionError
from carbonlite.ingest.decode import METADATA_COLUMNS, data_schema, decode_values
from carbonlite.metadata import TxnMovedError
from carbonlite.optional import require
from carbonlite.table import Table

__all__ = ["BAD_RECORDS_SCHEMA", "IngestError", "IngestResult", "KafkaIngester", "app_id"]

BAD_RECORDS_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("error", pa.string()),
    ]
)


class IngestError(CarbonLiteError):
    """A message the ingester cannot take (without a bad-records table), or a topic it
    cannot read."""


def app_id(topic: str, partition: int) -> str:
    """The transaction marker of one Kafka partition in the table."""
    return f"kafka:{topic}:{partition}"


def _bad_app_id(topic: str, partition: int) -> str:
    return f"kafka-bad:{topic}:{partition}"


@dataclass
class IngestResult:
    """What a run ingested."""

    rows: int = 0
    bad_records: int = 0
    commits: int = 0
    offsets: dict[int, int] = field(default_factory=dict)
    """The last offset committed per partition (the table's markers when the run ended)."""
    restarts: int = 0
    """Times another ingester moved a marker first and this one resumed after it."""


@dataclass
class _Message:
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


class KafkaIngester:
    """Ingest a Kafka topic into a CarbonLite table, exactly once.

    ``partitions``: the partitions to read (default: all of the topic's). ``max_batch_rows``
    and ``max_latency`` (seconds) bound a batch: it is committed when either is reached.
    ``stop_at_end``: stop once every partition is ingested up to the end offset it had at
    start. ``bad_records``: path of a table for messages that do not decode (created when
    missing). ``progress``: called after each commit with the result so far."""

    def __init__(
        self,
        path: str,
        *,
        bootstrap_servers: str,
        topic: str,
        partitions: Sequence[int] | None = None,
        format: str = "json",
        max_batch_rows: int = 100_000,
        max_latency: float = 1.0,
        stop_at_end: bool = False,
        bad_records: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        writer_id: str | None = None,
        client_options: Mapping[str, Any] | None = None,
        progress: Callable[[IngestResult], None] | None = None,
    ) -> None:
        if format != "json":
            raise InvalidOptionError(f"format {format!r} is not supported; use 'json'")
        if max_batch_rows < 1:
            raise InvalidOptionError(f"max_batch_rows must be at least 1, not {max_batch_rows}")
        if max_latency <= 0:
            raise InvalidOptionError(f"max_latency must be more than 0 s, not {max_latency}")
        self.table: Table = open_table(path, storage_options=storage_options, writer_id=writer_id)
        self.bad: Table | None = None
        if bad_records is not None:
            try:
                self.bad = open_table(bad_records, storage_options=storage_options)
            except CarbonLiteError:
                self.bad = create_table(
                    bad_records, BAD_RECORDS_SCHEMA, storage_options=storage_options
                )
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.wanted = list(partitions) if partitions is not None else None
        self.max_batch_rows = max_batch_rows
        self.max_latency = max_latency
        self.stop_at_end = stop_at_end
        self.client_options = dict(client_options or {})
        self.progress = progress
        self.stop_event = threading.Event()
        self.result = IngestResult()

    # --- the consumer ---------------------------------------------------------------------------

    def _consumer(self) -> Any:
        kafka = require("kafka", "kafka")
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "enable_auto_commit": False,
            "group_id": None,
            "max_poll_records": min(self.max_batch_rows, 50_000),
            "fetch_max_bytes": 64 * 1024 * 1024,
            "max_partition_fetch_bytes": 16 * 1024 * 1024,
        }
        options.update(self.client_options)
        return kafka.KafkaConsumer(**options)

    def _assign(self, consumer: Any) -> list[Any]:
        from kafka import TopicPartition

        known = consumer.partitions_for_topic(self.topic)
        if not known:
            raise IngestError(
                f"topic {self.topic!r} does not exist on {self.bootstrap_servers} (or has no "
                "partitions)"
            )
        chosen = sorted(known) if self.wanted is None else self.wanted
        missing = sorted(set(chosen) - set(known))
        if missing:
            raise IngestError(f"topic {self.topic!r} has partitions {sorted(known)}, not {missing}")
        tps = [TopicPartition(self.topic, p) for p in chosen]
        consumer.assign(tps)
        return tps

    def _seek_to_markers(self, consumer: Any, tps: list[Any]) -> dict[int, int | None]:
        """Position every partition after its marker; the markers (None: none yet)."""
        self.table.refresh()
        markers = {
            tp.partition: self.table.transaction_version(app_id(self.topic, tp.partition))
            for tp in tps
        }
        beginnings = consumer.beginning_offsets(tps)
        for tp in tps:
            marker = markers[tp.partition]
            consumer.seek(tp, beginnings[tp] if marker is None else marker + 1)
        return markers

    def _end_offsets(self, tps: list[Any]) -> dict[int, int]:
        """Each partition's log end offset now: the high watermark a fetch reports (some
        brokers, Tansu among them, answer ListOffsets with less than the end), read by a
        consumer of its own."""
        probe = self._consumer()
        try:
            probe.assign(tps)
            listed = probe.end_offsets(tps)
            for tp in tps:
                probe.seek(tp, listed[tp])
            deadline = time.monotonic() + 30
            while any(probe.highwater(tp) is None for tp in tps):
                if time.monotonic() > deadline:
                    raise IngestError(
                        f"{self.bootstrap_servers} gave no high watermark of topic "
                        f"{self.topic!r} within 30 s"
                    )
                probe.poll(timeout_ms=100)
            return {tp.partition: max(int(probe.highwater(tp)), listed[tp]) for tp in tps}
        finally:
            probe.close()

    # --- running --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Finish the current batch, commit it and return from :meth:`run`."""
        self.stop_event.set()

    def run(self, *, handle_sigterm: bool = False) -> IngestResult:
        """Ingest until :meth:`stop` (or SIGTERM with ``handle_sigterm``), or with
        ``stop_at_end`` until every partition reached its end offset of the start."""
        if handle_sigterm:
            signal.signal(signal.SIGTERM, lambda *_: self.stop_event.set())
        consumer = self._consumer()
        try:
            tps = self._assign(consumer)
            markers = self._seek_to_markers(consumer, tps)
            targets = self._end_offsets(tps) if self.stop_at_end else {}
            while True:
                if self.stop_at_end and self._reached(consumer, targets):
                    break
                batch = self._gather(consumer, targets)
                if batch:
                    try:
                        markers = self._commit(batch, markers)
                    except TxnMovedError:
                        self.result.restarts += 1
                        markers = self._seek_to_markers(consumer, tps)
                        continue
                if self.stop_event.is_set():
                    break
            self.result.offsets = {p: m for p, m in markers.items() if m is not None}
            return self.result
        finally:
            consumer.close()

    def _gather(self, consumer: Any, targets: Mapping[int, int]) -> list[_Message]:
        """Messages until ``max_batch_rows`` or ``max_latency`` after the first one, or (with
        ``stop_at_end``) until every partition reached its target."""
        batch: list[_Message] = []
        started = None
        while len(batch) < self.max_batch_rows:
            now = time.monotonic()
            if started is not None and now - started >= self.max_latency:
                break
            if self.stop_event.is_set() and started is None:
                break
            wait = self.max_latency if started is None else self.max_latency - (now - started)
            polled = consumer.poll(
                timeout_ms=max(1, int(min(wait, 0.2) * 1000)),
                max_records=self.max_batch_rows - len(batch),
            )
            for tp, records in polled.items():
                limit = targets.get(tp.partition)
                for r in records:
                    if limit is not None and r.offset >= limit:
                        continue  # past the end of the start: a later run takes it
                    batch.append(_Message(tp.partition, r.offset, r.timestamp, r.key, r.value))
            if batch and started is None:
                started = time.monotonic()
            if self.stop_at_end and targets and self._reached(consumer, targets):
                break
            if not polled and self.stop_event.is_set():
                break
        return batch

    @staticmethod
    def _reached(consumer: Any, targets: Mapping[int, int]) -> bool:
        """Whether every assigned partition's position is at its target offset."""
        return all(consumer.position(tp) >= targets[tp.partition] for tp in consumer.assignment())

    def _commit(
        self, batch: list[_Message], markers: dict[int, int | None]
    ) -> dict[int, int | None]:
        where = repr(self.table.path)
        schema = self.table.schema
        decoded = decode_values([m.value for m in batch], data_schema(schema), where)
        if decoded.bad:
            first = batch[decoded.bad[0][0]]
            if self.bad is None:
                raise IngestError(
                    f"message at offset {first.offset} of partition {first.partition} of topic "
                    f"{self.topic!r} does not fit {where}: {decoded.bad[0][1]} (nothing past "
                    "the last commit was committed; give a bad-records table to keep going)"
                )
            self._commit_bad(batch, decoded.bad)
        rows = self._with_metadata(decoded.rows, [batch[i] for i in decoded.good], schema)
        last: dict[int, int] = {}
        for m in batch:
            last[m.partition] = max(last.get(m.partition, -1), m.offset)
        progress = {
            app_id(self.topic, p): (markers.get(p), offset) for p, offset in sorted(last.items())
        }
        writer = self.table._writer
        result, self.table._snapshot = writer.write(
            self.table.log, self.table.snapshot(), rows, progress=progress
        )
        new = dict(markers)
        new.update(last)
        if result.version is not None:
            self.result.commits += 1
            self.result.rows += rows.num_rows
        if self.progress is not None:
            self.progress(self.result)
        return new

    def _commit_bad(self, batch: list[_Message], bad: list[tuple[int, str]]) -> None:
        assert self.bad is not None
        messages = [(batch[i], error) for i, error in bad]
        table = pa.table(
            {
                "topic": [self.topic] * len(messages),
                "partition": [m.partition for m, _ in messages],
                "offset": [m.offset for m, _ in messages],
                "timestamp": [m.timestamp for m, _ in messages],
                "key": [m.key for m, _ in messages],
                "value": [m.value for m, _ in messages],
                "error": [e for _, e in messages],
            },
            schema=BAD_RECORDS_SCHEMA,
        )
        self.bad.refresh()
        last: dict[int, int] = {}
        for m in batch:
            last[m.partition] = max(last.get(m.partition, -1), m.offset)
        progress = {}
        for p, offset in last.items():
            previous = self.bad.transaction_version(_bad_app_id(self.topic, p))
            if previous is not None and previous >= offset:
                return  # this batch's bad records were kept before (a restart re-read it)
            progress[_bad_app_id(self.topic, p)] = (previous, offset)
        result, self.bad._snapshot = self.bad._writer.write(
            self.bad.log, self.bad.snapshot(), table, progress=progress
        )
        if result.version is not None:
            self.result.bad_records += len(messages)

    def _with_metadata(
        self, rows: pa.Table, messages: list[_Message], schema: pa.Schema
    ) -> pa.Table:
        """``rows`` with the table's ``_kafka_*`` columns filled from ``messages``."""
        extra = {
            "_kafka_partition": lambda: pa.array([m.partition for m in messages], pa.int32()),
            "_kafka_offset": lambda: pa.array([m.offset for m in messages], pa.int64()),
            "_kafka_timestamp": lambda: pa.array(
                [m.timestamp for m in messages], pa.timestamp("ms", tz="UTC")
            ),
            "_kafka_key": lambda: pa.array([m.key for m in messages], pa.binary()),
        }
        for name in METADATA_COLUMNS:
            if name in schema.names:
                column = extra[name]()
                target = schema.field(name).type
                if column.type != target:
                    column = column.cast(target)
                rows = rows.append_column(schema.field(name), column)
        return rows.select(schema.names)
