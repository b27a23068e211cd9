"""The Kafka clients the ingester can use, behind one small interface.

The ingester needs little of a client: assign partitions at chosen offsets, fetch messages
in large chunks, each partition's position and the high watermark its last fetch reported.
Two clients give that:

- ``confluent-kafka`` (librdkafka, C; fetches in background threads): about 3x the messages
  per second of kafka-python on this project's machines (docs/BENCHMARKS.md); the default
  when installed.
- ``kafka-python`` (pure Python): no compiled code, the fallback.

Fetched messages come back as :class:`Fetched`, columns rather than an object per message,
so a batch of 100,000 messages costs a few list comprehensions, not 100,000 objects.

A client waits ``connect_timeout`` seconds for the first answer of a broker, then raises one
:class:`KafkaClientError` naming the servers and the last error. librdkafka's own log lines
(one ``FAIL`` per reconnect, some 20 a second while a broker is down) go to the
``carbonlite.ingest`` logger, which has a ``NullHandler``: quiet unless the application
configures logging. kafka-python logs to its ``kafka.*`` loggers, likewise quiet.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from carbonlite.errors import CarbonLiteError, InvalidOptionError
from carbonlite.optional import require

__all__ = [
    "LOGGER",
    "Client",
    "ClientName",
    "Fetched",
    "KafkaClientError",
    "check_client_options",
    "new_client",
    "resolve_client",
]

ClientName = Literal["auto", "confluent-kafka", "kafka-python"]

LOGGER = logging.getLogger("carbonlite.ingest")
CONSUME_MAX = 1_000_000
"""The most messages confluent-kafka's ``Consumer.consume`` returns in one call (it refuses
to be asked for more)."""
"""Where the Kafka client's log lines go (quiet unless the application configures logging)."""
LOGGER.addHandler(logging.NullHandler())


class KafkaClientError(CarbonLiteError):
    """The Kafka client failed (a broker unreachable, a fetch error)."""


def unreachable(bootstrap: str, seconds: float, detail: str | None) -> KafkaClientError:
    """The error for servers that gave no answer within ``seconds``."""
    why = f" (last error: {' '.join(detail.split())})" if detail else ""
    return KafkaClientError(
        f"no Kafka broker answered at {bootstrap} within {seconds:g} s{why}; is a broker "
        "running there? Check --bootstrap-servers (HOST:PORT of a broker) and that this machine "
        "can reach it"
    )


@dataclass(slots=True)
class Fetched:
    """Messages, as columns in fetch order (a partition's offsets only grow)."""

    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    """Milliseconds since the epoch."""
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self, other: Fetched) -> None:
        self.partitions += other.partitions
        self.offsets += other.offsets
        self.timestamps += other.timestamps
        self.keys += other.keys
        self.values += other.values

    def take(self, keep: Sequence[int]) -> Fetched:
        """Only the messages at the indices ``keep``."""
        return Fetched(
            [self.partitions[i] for i in keep],
            [self.offsets[i] for i in keep],
            [self.timestamps[i] for i in keep],
            [self.keys[i] for i in keep],
            [self.values[i] for i in keep],
        )

    def last_offsets(self) -> dict[int, int]:
        """The last offset of each partition."""
        return dict(zip(self.partitions, self.offsets, strict=True))


class Client:
    """One consumer of one topic, without a consumer group."""

    def partitions(self) -> set[int] | None:
        """The topic's partitions (None: no such topic)."""
        raise NotImplementedError

    def assign(self, starts: Mapping[int, int | None]) -> None:
        """Read these partitions from these offsets (None: the partition's beginning)."""
        raise NotImplementedError

    def fetch(self, max_messages: int, timeout: float) -> Fetched:
        raise NotImplementedError

    def position(self, partition: int) -> int:
        """The offset of the next message this consumer will return."""
        raise NotImplementedError

    def highwater(self, partition: int) -> int | None:
        """The partition's end offset in the last fetch response (None: not fetched yet)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def end_offsets(self, partitions: Sequence[int], timeout: float = 30.0) -> dict[int, int]:
        """Each partition's log end offset now, from the high watermark a fetch reports (some
        brokers, Tansu among them, answer ListOffsets with less than the end). Moves this
        consumer: use a consumer of its own."""
        listed = self._listed_ends(partitions)
        self.assign(listed)
        deadline = time.monotonic() + timeout
        while any(self.highwater(p) is None for p in partitions):
            if time.monotonic() > deadline:
                raise KafkaClientError(f"the broker gave no high watermark within {timeout:g} s")
            self.fetch(1000, 0.1)
        return {p: max(self.highwater(p) or 0, listed[p] or 0) for p in partitions}

    def _listed_ends(self, partitions: Sequence[int]) -> dict[int, int | None]:
        raise NotImplementedError


def check_client_options(client: str, options: Mapping[str, Any]) -> None:
    """Refuse ``options`` for client ``client`` (see :func:`resolve_client`) that would
    override what the ingester's arguments say, or that make the client abort the process;
    the client itself checks the rest when it is made."""
    if not isinstance(options, Mapping):
        raise InvalidOptionError(
            f"client_options must be a mapping of the client's settings, not {options!r}"
        )
    if client == "confluent-kafka":
        _check_options(options, ("bootstrap.servers", "metadata.broker.list"))
    else:
        _check_options(options, ("bootstrap_servers",))


def _check_options(options: Mapping[str, Any], servers_keys: tuple[str, ...]) -> None:
    """Refuse client settings that would override what the arguments say, or that make the
    client abort the process: librdkafka asserts (SIGABRT) on an empty ``group.id``."""
    for key in servers_keys:
        if key in options:
            raise InvalidOptionError(
                f"client_options may not set {key!r}: give the servers as bootstrap_servers "
                "(--bootstrap-servers)"
            )
    for key in ("group.id", "group_id"):
        group = options.get(key, "unset")
        if key == "group_id" and group is None:
            continue  # kafka-python's way of saying no group, the ingester's own setting
        if key in options and (not isinstance(group, str) or not group.strip()):
            raise InvalidOptionError(
                f"client_options {key!r} must be a non-empty string, not {group!r} (the "
                "ingester joins no consumer group: its offsets are kept in the table)"
            )
    logger = options.get("logger")
    if logger is not None and not callable(getattr(logger, "log", None)):
        raise InvalidOptionError(
            f"client_options 'logger' must be a logging.Logger, not {type(logger).__name__}"
        )


# --- confluent-kafka -----------------------------------------------------------------------------


class ConfluentClient(Client):
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        max_wait: float,
        options: Mapping[str, Any],
        connect_timeout: float,
    ) -> None:
        ck = require("confluent_kafka", "kafka")
        self.ck = ck
        self.topic = topic
        self.bootstrap = bootstrap
        self.connect_timeout = connect_timeout
        self.last_error: str | None = None
        settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": "carbonlite-ingest",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.wait.max.ms": max(10, int(max_wait * 1000)),
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "queued.min.messages": 200_000,
            "log_level": 3,
            "logger": LOGGER,
            "error_cb": self._on_error,
        }
        _check_options(options, ("bootstrap.servers", "metadata.broker.list"))
        settings.update(options)
        try:
            self.consumer = ck.Consumer(settings)
        except (ck.KafkaException, ValueError, TypeError) as exc:
            raise InvalidOptionError(
                f"the confluent-kafka client refused its settings: {exc}"
            ) from None
        self._position: dict[int, int] = {}
        """Per partition, the offset after the last message fetched (from ``assign`` on)."""

    def _on_error(self, error: Any) -> None:
        """librdkafka's error callback (served by ``poll``): keep the last one, for the
        message when no broker answers."""
        if error.code() != self.ck.KafkaError._ALL_BROKERS_DOWN or self.last_error is None:
            self.last_error = error.str()

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """librdkafka's exceptions as :class:`KafkaClientError`."""
        try:
            yield
        except self.ck.KafkaException as exc:
            raise KafkaClientError(f"{self.bootstrap}, topic {self.topic!r}: {exc}") from None

    def partitions(self) -> set[int] | None:
        """The topic's partitions, from the first metadata a broker gives within
        ``connect_timeout``; while none answers, its errors are served (``poll``) and the
        request made again."""
        retry = {self.ck.KafkaError._TRANSPORT, self.ck.KafkaError._TIMED_OUT}
        retry |= {self.ck.KafkaError._ALL_BROKERS_DOWN, self.ck.KafkaError._RESOLVE}
        deadline = time.monotonic() + self.connect_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise unreachable(self.bootstrap, self.connect_timeout, self.last_error)
            try:
                metadata = self.consumer.list_topics(self.topic, timeout=min(left, 1.0))
                break
            except self.ck.KafkaException as exc:
                if exc.args[0].code() not in retry:
                    raise KafkaClientError(f"{self.bootstrap}: {exc.args[0].str()}") from None
                self.last_error = self.last_error or exc.args[0].str()
                self.consumer.poll(max(0.0, min(0.2, deadline - time.monotonic())))
        found = metadata.topics.get(self.topic)
        if found is None or found.error is not None or not found.partitions:
            return None
        return set(found.partitions)

    def assign(self, starts: Mapping[int, int | None]) -> None:
        beginning = self.ck.OFFSET_BEGINNING
        self.consumer.assign(
            [
                self.ck.TopicPartition(self.topic, p, beginning if o is None else o)
                for p, o in starts.items()
            ]
        )
        self._position = {p: o for p, o in starts.items() if o is not None}

    def fetch(self, max_messages: int, timeout: float) -> Fetched:
        # consume() takes at most a million messages a call; the ingester fetches again for
        # the rest of a larger batch
        with self._errors():
            messages = self.consumer.consume(min(max_messages, CONSUME_MAX), timeout)
        for m in messages:
            if m.error() is not None:
                if m.error().code() == self.ck.KafkaError._PARTITION_EOF:
                    continue
                raise KafkaClientError(f"topic {self.topic!r}: {m.error()}")
        good = [m for m in messages if m.error() is None] if messages else []
        fetched = Fetched(
            [m.partition() for m in good],
            [m.offset() for m in good],
            [m.timestamp()[1] for m in good],
            [m.key() for m in good],
            [m.value() for m in good],
        )
        for p, o in fetched.last_offsets().items():
            self._position[p] = o + 1
        return fetched

    def position(self, partition: int) -> int:
        found = self._position.get(partition)
        if found is not None:
            return found
        tp = self.ck.TopicPartition(self.topic, partition)
        with self._errors():
            low, _ = self.consumer.get_watermark_offsets(tp, timeout=30)
        return int(low)

    def highwater(self, partition: int) -> int | None:
        tp = self.ck.TopicPartition(self.topic, partition)
        _, high = self.consumer.get_watermark_offsets(tp, cached=True)
        return None if high is None or high < 0 else int(high)

    def _listed_ends(self, partitions: Sequence[int]) -> dict[int, int | None]:
        out: dict[int, int | None] = {}
        for p in partitions:
            with self._errors():
                _, high = self.consumer.get_watermark_offsets(
                    self.ck.TopicPartition(self.topic, p), timeout=30
                )
            out[p] = int(high)
        return out

    def close(self) -> None:
        self.consumer.close()


# --- kafka-python --------------------------------------------------------------------------------


class KafkaPythonClient(Client):
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        max_wait: float,
        options: Mapping[str, Any],
        connect_timeout: float,
    ) -> None:
        kafka = require("kafka", "kafka")
        self.kafka = kafka
        self.topic = topic
        settings: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "enable_auto_commit": False,
            "group_id": None,
            "max_poll_records": 50_000,
            "fetch_max_bytes": 64 * 1024 * 1024,
            "max_partition_fetch_bytes": 16 * 1024 * 1024,
            "fetch_max_wait_ms": max(10, int(max_wait * 1000)),
        }
        if "bootstrap_timeout_ms" in kafka.KafkaConsumer.DEFAULT_CONFIG:  # kafka-python >= 3
            settings["bootstrap_timeout_ms"] = int(connect_timeout * 1000)
        _check_options(options, ("bootstrap_servers",))
        settings.update(options)
        try:
            self.consumer = kafka.KafkaConsumer(**settings)
        except kafka.errors.KafkaTimeoutError as exc:
            raise unreachable(bootstrap, connect_timeout, str(exc)) from None
        except kafka.errors.KafkaConfigurationError as exc:
            raise InvalidOptionError(
                f"the kafka-python client refused its settings: {exc}"
            ) from None
        except kafka.errors.KafkaError as exc:
            raise KafkaClientError(f"{bootstrap}: {exc}") from None
        except (AssertionError, ValueError, TypeError) as exc:  # its other checks of settings
            raise InvalidOptionError(
                f"the kafka-python client refused its settings: {exc}"
            ) from None
        self._tps: dict[int, Any] = {}

    def _tp(self, partition: int) -> Any:
        tp = self._tps.get(partition)
        if tp is None:
            tp = self._tps[partition] = self.kafka.TopicPartition(self.topic, partition)
        return tp

    def partitions(self) -> set[int] | None:
        found = self.consumer.partitions_for_topic(self.topic)
        return set(found) if found else None

    def assign(self, starts: Mapping[int, int | None]) -> None:
        tps = [self._tp(p) for p in starts]
        self.consumer.assign(tps)
        beginnings = self.consumer.beginning_offsets(tps)
        for p, offset in starts.items():
            tp = self._tp(p)
            self.consumer.seek(tp, beginnings[tp] if offset is None else offset)

    def fetch(self, max_messages: int, timeout: float) -> Fetched:
        polled = self.consumer.poll(
            timeout_ms=max(1, int(timeout * 1000)), max_records=max_messages
        )
        fetched = Fetched()
        for tp, records in polled.items():
            fetched.partitions += [tp.partition] * len(records)
            fetched.offsets += [r.offset for r in records]
            fetched.timestamps += [r.timestamp for r in records]
            fetched.keys += [r.key for r in records]
            fetched.values += [r.value for r in records]
        return fetched

    def position(self, partition: int) -> int:
        return int(self.consumer.position(self._tp(partition)))

    def highwater(self, partition: int) -> int | None:
        found = self.consumer.highwater(self._tp(partition))
        return None if found is None else int(found)

    def _listed_ends(self, partitions: Sequence[int]) -> dict[int, int | None]:
        tps = [self._tp(p) for p in partitions]
        listed = self.consumer.end_offsets(tps)
        return {p: int(listed[self._tp(p)]) for p in partitions}

    def close(self) -> None:
        self.consumer.close()


def resolve_client(name: str) -> Literal["confluent-kafka", "kafka-python"]:
    """The client ``name`` means (``auto``: confluent-kafka when installed, else
    kafka-python); :class:`InvalidOptionError` for an unknown name, and
    ``MissingDependencyError`` saying what to install when its library is missing."""
    if name == "auto":
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            name = "kafka-python"
        else:
            return "confluent-kafka"
    if name == "confluent-kafka":
        require("confluent_kafka", "kafka")
        return "confluent-kafka"
    if name == "kafka-python":
        require("kafka", "kafka")
        return "kafka-python"
    raise InvalidOptionError(
        f"client {name!r} is not one of 'auto', 'confluent-kafka', 'kafka-python'"
    )


def new_client(
    name: str,
    bootstrap: str,
    topic: str,
    *,
    max_wait: float,
    connect_timeout: float = 10.0,
    options: Mapping[str, Any] | None = None,
) -> Client:
    """A consumer of ``topic`` with client ``name`` (see :func:`resolve_client`). A fetch
    waits at most ``max_wait`` seconds for new messages; the first request at most
    ``connect_timeout`` seconds for a broker to answer; ``options`` are the client's own
    settings, added to (or replacing) the ingester's."""
    if resolve_client(name) == "confluent-kafka":
        return ConfluentClient(bootstrap, topic, max_wait, options or {}, connect_timeout)
    return KafkaPythonClient(bootstrap, topic, max_wait, options or {}, connect_timeout)
