"""Kafka ingestion without Spark (issue 15), against a real Kafka-protocol broker (Tansu).

    python benchmarks/bench_kafka.py [--messages 5000000] [--partitions 6] [--repeat 1]
        [--rate 1000] [--latency-seconds 20] [--no-spark] [--output PATH]

``--messages`` JSON objects of six fields (``id``, ``ts``, ``user``, ``event``, ``value``,
``ok``) are produced round-robin into a topic of ``--partitions`` partitions on a Tansu broker
on 127.0.0.1 (``tests/support/kafka_broker.py``; confluent-kafka's producer when installed,
since producing is not what is measured). The same values are written as JSON-lines files,
one per partition, for Spark.

1. **Ingest against the ceiling**, for each client (confluent-kafka, kafka-python),
   interleaved, best of ``--repeat``:
   - *ceiling*: a plain consumer with the ingester's client and settings
     (``carbonlite.ingest.clients.new_client``) that assigns every partition from the
     beginning, fetches, and decodes each fetch's values into Arrow with pyarrow's JSON reader
     and the table's schema, nothing else;
   - *ingest*: ``KafkaIngester(..., stop_at_end=True).run()`` into a new table (default
     ``max_batch_rows``), with the rows and markers checked afterwards.
   Target: ingest rows/s >= 0.7x the ceiling's.
2. **Against Spark**: Structured Streaming reading the same messages from the JSON-lines
   files (``readStream.schema(...).json(dir)``, ``trigger(availableNow=True)``) into a new
   carbonlite table, from ``start()`` to the end of ``awaitTermination()`` (the session is
   started before, untimed). Target: the ingester is faster.
3. **End-to-end latency**: ``carbonlite ingest kafka --max-latency 1s`` (default client) runs
   as its own
   process on a new topic while a producer sends ``--rate`` messages/s (bursts every 10 ms),
   each holding its send time; this process opens the table every 20 ms (``open_table``, then
   ``to_arrow`` of the new version) and takes each row's latency as the time it was first
   seen minus its send time. The first two seconds are warm-up. p50, p99 and max recorded.

Markdown on stdout, JSON in ``benchmarks/results/kafka.json``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pj
from report import progress, run_facts, yes_no

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the broker fixture lives with the tests

import carbonlite as cl  # noqa: E402
from carbonlite.ingest import KafkaIngester, app_id  # noqa: E402
from carbonlite.ingest.clients import new_client  # noqa: E402
from tests.support.kafka_broker import KafkaBroker  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "kafka.json"
CEILING_TARGET = 0.7
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("ms", tz="UTC")),
        ("user", pa.string()),
        ("event", pa.string()),
        ("value", pa.float64()),
        ("ok", pa.bool_()),
    ]
)
SPARK_DDL = "id long, ts timestamp, user string, event string, value double, ok boolean"
LATENCY_SCHEMA = pa.schema([("id", pa.int64()), ("sent_ms", pa.float64())])
EVENTS = (b"click", b"view", b"purchase", b"scroll")
CLIENTS = ("confluent-kafka", "kafka-python")


def value(i: int) -> bytes:
    template = (
        b'{"id": %d, "ts": "2026-11-24T%02d:%02d:%02dZ", "user": "user-%d", "event": "%s", '
        b'"value": %d.25, "ok": %s}'
    )
    return template % (
        i,
        i // 3600 % 24,
        i // 60 % 60,
        i % 60,
        i % 10_000,
        EVENTS[i % 4],
        i % 1000,
        b"true" if i % 3 else b"false",
    )


class Producer:
    """confluent-kafka's producer when installed (fast), else kafka-python's."""

    def __init__(self, bootstrap: str, *, linger_ms: int) -> None:
        try:
            import confluent_kafka
        except ImportError:
            from kafka import KafkaProducer

            self.kind = "kafka-python"
            self.py = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=linger_ms)
            self.ck = None
        else:
            self.kind = "confluent-kafka"
            self.ck = confluent_kafka.Producer(
                {
                    "bootstrap.servers": bootstrap,
                    "linger.ms": linger_ms,
                    "batch.num.messages": 10_000,
                    "queue.buffering.max.messages": 1_000_000,
                    "log_level": 3,
                }
            )

    def send(self, topic: str, payload: bytes, partition: int) -> None:
        if self.ck is None:
            self.py.send(topic, payload, partition=partition)
            return
        while True:
            try:
                self.ck.produce(topic, payload, partition=partition)
                self.ck.poll(0)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                self.ck.poll(0.05)

    def flush(self) -> None:
        if self.ck is None:
            self.py.flush()
        else:
            self.ck.flush()


def produce(broker: KafkaBroker, topic: str, messages: int, partitions: int, files: Path) -> str:
    """Send ``messages`` values round-robin and write each partition's as a JSON-lines file."""
    producer = Producer(broker.bootstrap, linger_ms=20)
    files.mkdir(parents=True, exist_ok=True)
    outs = [open(files / f"part-{p}.json", "wb") for p in range(partitions)]  # noqa: SIM115
    try:
        for i in range(messages):
            payload = value(i)
            producer.send(topic, payload, i % partitions)
            outs[i % partitions].write(payload + b"\n")
        producer.flush()
    finally:
        for f in outs:
            f.close()
    ends = broker.end_offsets(topic)
    if sum(ends.values()) != messages:
        raise RuntimeError(f"the broker holds {ends}, not {messages} messages")
    return producer.kind


def ceiling(broker: KafkaBroker, topic: str, messages: int, client: str) -> float:
    """Seconds for a plain consumer (the ingester's client and settings) to decode every
    message into Arrow, and nothing else."""
    consumer = new_client(client, broker.bootstrap, topic, max_wait=0.2)
    try:
        started = time.perf_counter()
        consumer.assign(dict.fromkeys(sorted(consumer.partitions() or ())))
        rows = 0
        options = pj.ParseOptions(explicit_schema=SCHEMA)
        while rows < messages:
            values = consumer.fetch(100_000, 0.2).values
            if values:
                body = b"\n".join(values)  # type: ignore[arg-type]
                block = pj.ReadOptions(block_size=max(1 << 24, len(body) + 1))
                table = pj.read_json(io.BytesIO(body), read_options=block, parse_options=options)
                rows += table.num_rows
        return time.perf_counter() - started
    finally:
        consumer.close()


def ingest(
    broker: KafkaBroker, topic: str, messages: int, path: str, client: str
) -> dict[str, Any]:
    cl.create_table(path, SCHEMA)
    ingester = KafkaIngester(
        path,
        bootstrap_servers=broker.bootstrap,
        topic=topic,
        stop_at_end=True,
        client=client,  # type: ignore[arg-type]
    )
    started = time.perf_counter()
    result = ingester.run()
    seconds = time.perf_counter() - started
    table = cl.open_table(path)
    if table.count_rows() != messages or result.rows != messages:
        raise RuntimeError(f"ingested {result.rows} rows, the table holds {table.count_rows()}")
    for p, end in broker.end_offsets(topic).items():
        if table.transaction_version(app_id(topic, p)) != end - 1:
            raise RuntimeError(f"partition {p}: marker is not {end - 1}")
    return {"seconds": seconds, "commits": result.commits}


def spark_stream(files: Path, work: Path, messages: int) -> dict[str, Any]:
    """Structured Streaming from the JSON-lines files into a new carbonlite table."""
    import carbonlite.spark

    spark = carbonlite.spark.local_session(
        app_name="carbonlite-bench-kafka", config={"spark.driver.memory": "2g"}
    )
    out, checkpoint = work / "spark-table", work / "spark-checkpoint"
    query = (
        spark.readStream.schema(SPARK_DDL)
        .json(str(files))
        .writeStream.format("carbonlite")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    started = time.perf_counter()
    running = query.start(str(out))
    running.awaitTermination()
    seconds = time.perf_counter() - started
    if running.exception() is not None:
        raise RuntimeError(f"the Spark stream failed: {running.exception()}")
    rows = cl.open_table(str(out)).count_rows()
    spark.stop()
    if rows != messages:
        raise RuntimeError(f"Spark wrote {rows} rows, not {messages}")
    return {"seconds": seconds, "batches": len(running.recentProgress)}


def latency(broker: KafkaBroker, partitions: int, rate: int, seconds: float, work: Path) -> dict:
    """Produce at ``rate`` messages/s for ``seconds``; the ingester runs as the command."""
    topic = "latency"
    broker.create_topic(topic, partitions)
    path = str(work / "latency-table")
    cl.create_table(path, LATENCY_SCHEMA)
    command = shutil.which("carbonlite") or os.path.join(
        os.path.dirname(sys.executable), "carbonlite"
    )
    ingester = subprocess.Popen(
        [
            *(command, "ingest", "kafka", path, "--bootstrap-servers", broker.bootstrap),
            *("--topic", topic, "--max-latency", "1s"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    sent = 0
    done = threading.Event()

    def send() -> None:
        nonlocal sent
        producer = Producer(broker.bootstrap, linger_ms=0)
        start = time.time()
        while not done.is_set() and time.time() - start < seconds:
            due = int((time.time() - start) * rate)
            while sent < due:
                now_ms = time.time() * 1000
                payload = b'{"id": %d, "sent_ms": %.3f}' % (sent, now_ms)
                producer.send(topic, payload, sent % partitions)
                sent += 1
            producer.flush()
            time.sleep(0.01)
        producer.flush()

    seen: dict[int, float] = {}
    sent_at: dict[int, float] = {}
    thread = threading.Thread(target=send)
    thread.start()
    version = -1
    try:
        deadline = time.time() + seconds + 10
        while time.time() < deadline:
            table = cl.open_table(path)
            if table.version != version:
                version = table.version
                rows = table.to_arrow()
                now_ms = time.time() * 1000
                for i, s in zip(
                    rows.column("id").to_pylist(), rows.column("sent_ms").to_pylist(), strict=True
                ):
                    if i not in seen:
                        seen[i] = now_ms
                        sent_at[i] = s
            if not thread.is_alive() and len(seen) >= sent:
                break
            time.sleep(0.02)
    finally:
        done.set()
        thread.join()
        ingester.terminate()  # SIGTERM: finish the batch, commit, exit 0
        _, err = ingester.communicate(timeout=60)
    if ingester.returncode != 0:
        raise RuntimeError(f"the ingester exited {ingester.returncode}: {err.decode()}")
    if len(seen) != sent:
        raise RuntimeError(f"{sent} messages sent, {len(seen)} seen in the table")
    warm = min(sent_at.values()) + 2000
    ms = sorted(seen[i] - sent_at[i] for i in seen if sent_at[i] >= warm)
    return {
        "messages": sent,
        "measured": len(ms),
        "p50_ms": statistics.median(ms),
        "p99_ms": ms[int(len(ms) * 0.99) - 1],
        "max_ms": ms[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    results: dict[str, Any] = {
        **run_facts(),
        "messages": args.messages,
        "partitions": args.partitions,
    }
    try:
        with KafkaBroker() as broker:
            broker.create_topic("events", args.partitions)
            progress(f"producing {args.messages:,} messages")
            results["producer"] = produce(
                broker, "events", args.messages, args.partitions, work / "json"
            )
            for client in CLIENTS:
                ceilings, ingests = [], []
                for r in range(args.repeat):
                    for which in ("ceiling", "ingest") if r % 2 == 0 else ("ingest", "ceiling"):
                        progress(f"{client}, repeat {r + 1}: {which}")
                        table = str(work / f"table-{client}-{r}")
                        if which == "ceiling":
                            ceilings.append(ceiling(broker, "events", args.messages, client))
                        else:
                            ingests.append(ingest(broker, "events", args.messages, table, client))
                best = min(ingests, key=lambda x: x["seconds"])
                results[client] = {
                    "ceiling_rows_per_s": args.messages / min(ceilings),
                    "ingest_rows_per_s": args.messages / best["seconds"],
                    "ingest_commits": best["commits"],
                    "all_ceiling_s": ceilings,
                    "all_ingest_s": [x["seconds"] for x in ingests],
                }
                c = results[client]
                c["ceiling_ratio"] = c["ingest_rows_per_s"] / c["ceiling_rows_per_s"]
            progress(f"latency at {args.rate} messages/s for {args.latency_seconds:g} s")
            results["latency"] = latency(
                broker, args.partitions, args.rate, args.latency_seconds, work
            )
        if not args.no_spark:
            progress("Spark Structured Streaming from the JSON files")
            spark = spark_stream(work / "json", work, args.messages)
            results["spark_rows_per_s"] = args.messages / spark["seconds"]
            results["spark_batches"] = spark["batches"]
            for client in CLIENTS:
                c = results[client]
                c["spark_ratio"] = c["ingest_rows_per_s"] / results["spark_rows_per_s"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    print_markdown(results)


def print_markdown(r: dict[str, Any]) -> None:
    print(f"{r['messages']:,} messages, {r['partitions']} partitions; {r['machine']}; {r['date']}")
    print()
    print("| client | measure | rows/s | ratio | target | met |")
    print("|---|---|---|---|---|---|")
    for client in CLIENTS:
        c = r[client]
        print(
            f"| {client} | plain consumer + JSON decode (ceiling) | "
            f"{c['ceiling_rows_per_s']:,.0f} | | | |"
        )
        print(
            f"| {client} | `KafkaIngester` ({c['ingest_commits']} commits) | "
            f"{c['ingest_rows_per_s']:,.0f} | {c['ceiling_ratio']:.2f}x the ceiling | "
            f">= {CEILING_TARGET}x | {yes_no(c['ceiling_ratio'] >= CEILING_TARGET)} |"
        )
        if "spark_ratio" in c:
            print(
                f"| {client} | ingester against Spark | | {c['spark_ratio']:.2f}x Spark | > 1x | "
                f"{yes_no(c['spark_ratio'] > 1)} |"
            )
    if "spark_rows_per_s" in r:
        print(
            f"| | Spark Structured Streaming, JSON files -> carbonlite | "
            f"{r['spark_rows_per_s']:,.0f} | | | |"
        )
    lat = r["latency"]
    print()
    print(
        f"Latency, produce -> visible to `open_table().to_arrow()`, at {lat['messages']:,} "
        f"messages over the run ({lat['measured']:,} after warm-up), `--max-latency 1s`: "
        f"p50 {lat['p50_ms']:.0f} ms, p99 {lat['p99_ms']:.0f} ms, max {lat['max_ms']:.0f} ms."
    )


if __name__ == "__main__":
    main()
