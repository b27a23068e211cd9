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
just before the good rows of the same batch. A marker says every bad record of its partition
up to it is kept, so a restart (or a second ingester) that reads the batch again, in batches
of any shape, commits only the bad records past their partition's marker: they too are kept
exactly once. Without that table the first bad record stops the ingester with an
:class:`IngestError` naming topic, partition and offset, and nothing past the last commit is
committed.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from carbonlite.errors import (
    IngestError,
    InvalidOptionError,
    SchemaMismatchError,
)
from carbonlite.ingest.clients import (
    Client,
    ClientName,
    Fetched,
    KafkaClientError,
    check_client_options,
    new_client,
    resolve_client,
)
from carbonlite.ingest.decode import (
    METADATA_COLUMNS,
    check_json_columns,
    data_schema,
    decode_values,
)
from carbonlite.ingest.options import (
    check_batch_rows,
    check_bootstrap_servers,
    check_partitions,
    check_positive_seconds,
    check_topic,
)
from carbonlite.ingest.targets import create_bad_records, open_bad_records, open_target
from carbonlite.metadata import TxnMovedError
from carbonlite.metadata.columns import layout_of, retired_names
from carbonlite.seams import reach
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


def app_id(topic: str, partition: int) -> str:
    """The transaction marker of one Kafka partition in the table."""
    return f"kafka:{topic}:{partition}"


def _bad_app_id(topic: str, partition: int) -> str:
    return f"kafka-bad:{topic}:{partition}"


def _past(marker: int | None, offset: int) -> bool:
    return marker is None or offset > marker


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
    lag: dict[int, int] = field(default_factory=dict)
    """Messages per partition not ingested yet, as of the last commit: the partition's high
    watermark in the consumer's last fetch minus its position."""


class KafkaIngester:
    """Ingest a Kafka topic into a CarbonLite table, exactly once.

    ``partitions``: the partitions to read (default: all of the topic's). ``max_batch_rows``
    and ``max_latency`` (seconds) bound a batch: it is committed when either is reached.
    ``stop_at_end``: stop once every partition is ingested up to the end offset it had at
    start. ``bad_records``: path of a table for messages that do not decode (created when
    missing, at the first bad record: a refused run leaves no table behind). ``client``: the
    Kafka client, ``"confluent-kafka"``, ``"kafka-python"`` or ``"auto"`` (the first when installed); ``client_options``: that client's own settings.
    ``connect_timeout``: seconds to wait for a broker's first answer before raising
    :class:`KafkaClientError`. ``progress``: called after each commit with the result so far.

    Every argument is checked before anything is opened; a bad one raises
    :class:`InvalidOptionError` saying what was expected."""

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
        client: ClientName = "auto",
        client_options: Mapping[str, Any] | None = None,
        connect_timeout: float = 10.0,
        progress: Callable[[IngestResult], None] | None = None,
    ) -> None:
        if format != "json":
            raise InvalidOptionError(f"format {format!r} is not supported; use 'json'")
        self.bootstrap_servers = check_bootstrap_servers(bootstrap_servers)
        self.topic = check_topic(topic)
        self.wanted = check_partitions(partitions)
        self.max_batch_rows = check_batch_rows(max_batch_rows)
        self.max_latency = check_positive_seconds(max_latency, what="max_latency")
        self.connect_timeout = check_positive_seconds(connect_timeout, what="connect_timeout")
        self.client = resolve_client(client)
        check_client_options(self.client, client_options or {})
        self.client_options = dict(client_options or {})
        self.table: Table = open_target(path, storage_options, writer_id)
        check_json_columns(data_schema(self.table.schema), repr(self.table.path))
        self.bad: Table | None = None
        self.bad_records = bad_records
        self.storage_options = storage_options
        if bad_records is not None:
            self.bad = open_bad_records(
                bad_records, self.table, BAD_RECORDS_SCHEMA, storage_options
            )
        self.stop_at_end = stop_at_end
        self.progress = progress
        self.stop_event = threading.Event()
        self.result = IngestResult()

    # --- the consumer ---------------------------------------------------------------------------

    def _consumer(self) -> Client:
        """A consumer without a group (partitions assigned, offsets kept in the table); a
        fetch waits for new messages at most a fifth of ``max_latency``, so a quiet topic does
        not hold a batch back."""
        return new_client(
            self.client,
            self.bootstrap_servers,
            self.topic,
            max_wait=min(0.5, self.max_latency / 5),
            connect_timeout=self.connect_timeout,
            options=self.client_options,
        )

    def _assign(self, consumer: Client) -> list[int]:
        known = consumer.partitions()
        if not known:
            raise IngestError(
                f"topic {self.topic!r} does not exist on {self.bootstrap_servers} (or has no "
                "partitions)"
            )
        chosen = sorted(known) if self.wanted is None else self.wanted
        missing = sorted(set(chosen) - set(known))
        if missing:
            raise IngestError(f"topic {self.topic!r} has partitions {sorted(known)}, not {missing}")
        return chosen

    def _seek_to_markers(self, consumer: Client, partitions: list[int]) -> dict[int, int | None]:
        """Position every partition after its marker; the markers (None: none yet)."""
        self.table.refresh()
        markers = {p: self.table.transaction_version(app_id(self.topic, p)) for p in partitions}
        consumer.assign({p: None if m is None else m + 1 for p, m in markers.items()})
        return markers

    def _end_offsets(self, partitions: list[int]) -> dict[int, int]:
        """Each partition's log end offset now, read by a consumer of its own."""
        probe = self._consumer()
        try:
            return probe.end_offsets(partitions)
        except KafkaClientError as exc:
            raise IngestError(f"{self.bootstrap_servers}, topic {self.topic!r}: {exc}") from exc
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
        committer = ThreadPoolExecutor(1, thread_name_prefix="carbonlite-ingest-commit")
        try:
            tps = self._assign(consumer)
            markers = self._seek_to_markers(consumer, tps)
            targets = self._end_offsets(tps) if self.stop_at_end else {}
            self._assigned = tps
            # One batch commits in the background while the next is fetched. Each batch's
            # markers continue from the one before (``after``), so the commits land in order
            # or not at all: when one finds a marker moved, the batch fetched meanwhile is
            # dropped too and the ingester resumes after the table's markers.
            committing: Future[None] | None = None
            after = markers  # the markers once the batch committing (if any) is in
            while True:
                reached = self.stop_at_end and self._reached(consumer, targets)
                batch = Fetched() if reached else self._gather(consumer, targets)
                if batch:
                    reach("ingest.after_fetch")
                if committing is not None:
                    try:
                        committing.result()
                        markers = after
                    except TxnMovedError:
                        self.result.restarts += 1
                        committing = None
                        markers = after = self._seek_to_markers(consumer, tps)
                        continue
                    committing = None
                    self.result.lag = self._lag(consumer, tps)
                    if self.progress is not None:
                        self.progress(self.result)
                if batch:
                    committing = committer.submit(self._commit, batch, after)
                    after = {**after, **batch.last_offsets()}
                elif reached or self.stop_event.is_set():
                    break
            self.result.offsets = {p: m for p, m in markers.items() if m is not None}
            return self.result
        finally:
            committer.shutdown(wait=True, cancel_futures=True)
            consumer.close()

    def _gather(self, consumer: Client, targets: Mapping[int, int]) -> Fetched:
        """Messages until ``max_batch_rows`` or ``max_latency`` after the first one, or (with
        ``stop_at_end``) until every partition reached its target."""
        batch = Fetched()
        started = None
        while len(batch) < self.max_batch_rows:
            now = time.monotonic()
            if started is not None and now - started >= self.max_latency:
                break
            if self.stop_event.is_set() and started is None:
                break
            wait = self.max_latency if started is None else self.max_latency - (now - started)
            fetched = consumer.fetch(self.max_batch_rows - len(batch), max(0.001, min(wait, 0.2)))
            if targets and any(o >= targets[p] for p, o in fetched.last_offsets().items()):
                # past the end of the start: a later run takes it
                fetched = fetched.take(
                    [
                        i
                        for i, (p, o) in enumerate(
                            zip(fetched.partitions, fetched.offsets, strict=True)
                        )
                        if o < targets[p]
                    ]
                )
            batch.extend(fetched)
            if len(batch) and started is None:
                started = time.monotonic()
            if self.stop_at_end and targets and self._reached(consumer, targets):
                break
            if not len(fetched) and self.stop_event.is_set():
                break
        return batch

    def _lag(self, consumer: Client, partitions: list[int]) -> dict[int, int]:
        lag = {}
        for p in partitions:
            highwater = consumer.highwater(p)
            if highwater is not None:
                lag[p] = max(0, highwater - consumer.position(p))
        return lag

    def _reached(self, consumer: Client, targets: Mapping[int, int]) -> bool:
        """Whether every assigned partition's position is at its target offset."""
        return all(consumer.position(p) >= targets[p] for p in self._assigned)

    def _commit(self, batch: Fetched, markers: dict[int, int | None]) -> None:
        """Commit ``batch`` with its markers, moved on from ``markers``."""
        where = repr(self.table.path)
        # the latest schema: a column renamed or dropped since the last commit is known
        metadata = self.table.refresh().snapshot().metadata
        schema = metadata.schema
        decoded = decode_values(
            batch.values,
            data_schema(schema),
            where,
            retired=retired_names(metadata),
            defaults=layout_of(metadata).defaults,
        )
        reach("ingest.before_commit")
        if decoded.bad:
            first = decoded.bad[0][0]
            if self.bad is None and self.bad_records is not None:  # its first bad record
                self.bad = create_bad_records(
                    self.bad_records, self.table, BAD_RECORDS_SCHEMA, self.storage_options
                )
            if self.bad is None:
                error = SchemaMismatchError if first in decoded.schema_changes else IngestError
                raise error(
                    f"message at offset {batch.offsets[first]} of partition "
                    f"{batch.partitions[first]} of topic {self.topic!r} does not fit {where}: "
                    f"{decoded.bad[0][1]} (nothing past the last commit was committed; give a "
                    "bad-records table to keep going)"
                )
            self._commit_bad(batch, decoded.bad)
            reach("ingest.after_bad_commit")
        good = batch if not decoded.bad else batch.take(decoded.good)
        rows = self._with_metadata(decoded.rows, good, schema)
        last = batch.last_offsets()
        progress = {
            app_id(self.topic, p): (markers.get(p), offset) for p, offset in sorted(last.items())
        }
        # The table's own append (an upsert in a primary-key table), with the markers
        result = self.table.append(rows, markers=progress)
        if result.version is not None:
            self.result.commits += 1
            self.result.rows += rows.num_rows

    def _commit_bad(self, batch: Fetched, bad: list[tuple[int, str]]) -> None:
        """Commit the bad records of ``batch`` (index and error of each) that the bad-records
        table lacks, moving the marker of each partition they are in to the batch's last
        offset of it.

        A partition's marker says every bad record of it up to that offset is kept. A batch
        read again (after a crash between this commit and the rows', or by a second
        ingester) may reach past a marker or stop short of it, partition by partition, so
        what is new is decided per record: those past their partition's marker. Each marker
        moves by compare-and-set, decided for the commit as a whole (``MarkersContinue``): a
        marker another ingester moved meanwhile refuses it (``TxnMovedError``, the ingester
        starts again after the table's markers), or skips it when every marker holds it."""
        assert self.bad is not None
        self.bad.refresh()
        last = batch.last_offsets()
        kept = {p: self.bad.transaction_version(_bad_app_id(self.topic, p)) for p in last}
        new = [(i, e) for i, e in bad if _past(kept[batch.partitions[i]], batch.offsets[i])]
        if not new:
            return  # kept before: a restart or another ingester read this batch already
        messages = batch.take([i for i, _ in new])
        table = pa.table(
            {
                "topic": [self.topic] * len(messages),
                "partition": messages.partitions,
                "offset": messages.offsets,
                "timestamp": messages.timestamps,
                "key": messages.keys,
                "value": messages.values,
                "error": [e for _, e in new],
            },
            schema=BAD_RECORDS_SCHEMA,
        )
        progress = {
            _bad_app_id(self.topic, p): (kept[p], last[p]) for p in sorted(set(messages.partitions))
        }
        result = self.bad.append(table, markers=progress)
        if result.version is not None:
            self.result.bad_records += len(messages)

    def _with_metadata(self, rows: pa.Table, messages: Fetched, schema: pa.Schema) -> pa.Table:
        """``rows`` with the table's ``_kafka_*`` columns filled from ``messages``."""
        extra = {
            "_kafka_partition": lambda: pa.array(messages.partitions, pa.int32()),
            "_kafka_offset": lambda: pa.array(messages.offsets, pa.int64()),
            "_kafka_timestamp": lambda: pa.array(messages.timestamps, pa.timestamp("ms", tz="UTC")),
            "_kafka_key": lambda: pa.array(messages.keys, pa.binary()),
        }
        for name in METADATA_COLUMNS:
            if name in schema.names:
                column = extra[name]()
                target = schema.field(name).type
                if column.type != target:
                    column = column.cast(target)
                rows = rows.append_column(schema.field(name), column)
        return rows.select(schema.names)
