"""The Arrow Flight service (issue 16): group commit, visibility, DoGet throughput.

    python benchmarks/bench_serve.py [--producers 8] [--puts 150] [--rows-per-put 100]
        [--visibility 200] [--scan-rows 5000000] [--repeat 5] [--output PATH]

A ``carbonlite serve`` process runs on 127.0.0.1 (a free port, ``--flush-interval 0.2``) over
a temporary root.

1. **Puts/s**: ``--producers`` processes each send ``--puts`` DoPuts of ``--rows-per-put``
   rows (each its own producer id, sequences 0, 1, ...) to the service, against the same
   processes each calling ``Table.append`` on the table directly (each append its own
   commit, each process its own writer id). Time from the first process's start to the last
   one's end (process start-up excluded). Target: the service acknowledges >= 5x the puts/s.
   For scale, the same producers against two bare Flight servers in the same run: one that
   reads each put and answers (the protocol's ceiling on this machine), one that also appends
   it to a ``WriteAheadLog`` (group commit) before answering (durability's ceiling).
2. **Visibility**: one producer sends ``--visibility`` puts one after another; after each
   acknowledgement the time until (a) ``GetFlightInfo`` + ``DoGet`` of a command filtered to
   that put returns its rows (target: p50 < 5 ms) and (b) ``open_table().to_arrow()`` with the
   same filter does (bounded by the flush interval).
3. **DoGet throughput**: a table of ``--scan-rows`` rows (``datagen.event_table``, appended,
   handed off) read whole by ``GetFlightInfo`` + ``DoGet`` of every endpoint at once (a
   thread each, as Flight clients read), against
   ``Table.to_arrow()`` in this process; one warm-up read of each (the first opens files and
   connections), then best of ``--repeat`` each. Target: >= 0.5x.

Markdown on stdout, JSON in ``benchmarks/results/serve.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
from datagen import event_table
from report import progress, run_facts, yes_no

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the service fixture lives with the tests

import carbonlite as cl  # noqa: E402
from carbonlite.serve.records import encode_put, parse_put  # noqa: E402
from carbonlite.serve.wal import WriteAheadLog  # noqa: E402
from tests.support.flight_service import ServiceProcess, put, read_all  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "serve.json"
PUTS_TARGET = 5.0
VISIBLE_TARGET_MS = 5.0
DOGET_TARGET = 0.5
SCHEMA = pa.schema(
    [("producer", pa.string()), ("seq", pa.int64()), ("n", pa.int64()), ("value", pa.float64())]
)


def batch(producer: str, seq: int, rows: int) -> pa.Table:
    return pa.table(
        {
            "producer": [producer] * rows,
            "seq": [seq] * rows,
            "n": list(range(rows)),
            "value": [seq * 0.5] * rows,
        },
        schema=SCHEMA,
    )


def flight_producer(port: int, name: str, puts: int, rows: int, go: float) -> tuple[float, float]:
    client = flight.FlightClient(f"grpc://127.0.0.1:{port}")
    data = [batch(name, s, rows) for s in range(puts)]
    while time.time() < go:
        time.sleep(0.001)
    start = time.time()
    for seq, table in enumerate(data):
        if put(client, "events", name, seq, table)["skipped"]:
            raise RuntimeError(f"{name} {seq} skipped")
    return start, time.time()


def append_producer(path: str, name: str, puts: int, rows: int, go: float) -> tuple[float, float]:
    table = cl.open_table(path, writer_id=name)
    data = [batch(name, s, rows) for s in range(puts)]
    while time.time() < go:
        time.sleep(0.001)
    start = time.time()
    for t in data:
        table.append(t)
    return start, time.time()


class BareServer(flight.FlightServerBase):
    """A Flight server that reads each DoPut and answers; with ``wal``, it first appends the
    put's log record to a write-ahead log (group commit), as the service does."""

    def __init__(self, wal: str | None) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self.wal = WriteAheadLog(wal) if wal else None

    def do_put(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
        request = parse_put(descriptor.command)
        rows = reader.read_all()
        if self.wal is not None:
            self.wal.append(encode_put(request, rows))
        writer.write(pa.py_buffer(b'{"version": null, "skipped": false}'))


def serve_bare(wal: str | None, ports: Any) -> None:
    server = BareServer(wal)
    ports.put(server.port)
    server.serve()


def ceiling_puts_per_s(args: argparse.Namespace, wal: str | None) -> float:
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    server = context.Process(target=serve_bare, args=(wal, ports), daemon=True)
    server.start()
    try:
        port = ports.get(timeout=60)
        seconds = run_producers(flight_producer, port, args.producers, args.puts, args.rows_per_put)
    finally:
        server.kill()
        server.join()
    return args.producers * args.puts / seconds


def run_producers(target: Any, first: Any, producers: int, puts: int, rows: int) -> float:
    """Seconds from the first producer's start to the last one's end."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(producers) as pool:
        go = time.time() + 3.0  # every process imported and ready by then
        jobs = [
            pool.apply_async(target, (first, f"p{i}", puts, rows, go)) for i in range(producers)
        ]
        spans = [j.get(timeout=600) for j in jobs]
    return max(e for _, e in spans) - min(s for s, _ in spans)


def bench_puts(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    total = args.producers * args.puts
    out: dict[str, Any] = {"puts": total, "rows_per_put": args.rows_per_put}
    root = work / "puts"
    root.mkdir()
    cl.create_table(root / "events", SCHEMA)
    with ServiceProcess(str(root), "--flush-interval", "0.2") as service:
        progress(f"{args.producers} producers x {args.puts} puts to the service")
        seconds = run_producers(
            flight_producer, service.port, args.producers, args.puts, args.rows_per_put
        )
        health = json.loads(
            next(
                iter(service.client().do_action(flight.Action("healthcheck", b"")))
            ).body.to_pybytes()
        )
        if service.terminate() != 0:
            raise RuntimeError("the service did not stop cleanly")
    if cl.open_table(root / "events").count_rows() != total * args.rows_per_put:
        raise RuntimeError("the service lost or duplicated puts")
    out["service_puts_per_s"] = total / seconds
    out["service_rows_per_s"] = total * args.rows_per_put / seconds
    out["wal_syncs"] = health["wal_syncs"]
    direct = work / "direct"
    cl.create_table(direct, SCHEMA)
    progress(f"{args.producers} producers x {args.puts} Table.append each")
    seconds = run_producers(
        append_producer, str(direct), args.producers, args.puts, args.rows_per_put
    )
    if cl.open_table(direct).count_rows() != total * args.rows_per_put:
        raise RuntimeError("the direct appends lost rows")
    out["append_puts_per_s"] = total / seconds
    out["append_rows_per_s"] = total * args.rows_per_put / seconds
    out["ratio"] = out["service_puts_per_s"] / out["append_puts_per_s"]
    progress("the same producers against a bare Flight server, then one with a log")
    out["bare_puts_per_s"] = ceiling_puts_per_s(args, None)
    out["bare_wal_puts_per_s"] = ceiling_puts_per_s(args, str(work / "bare-wal"))
    return out


def percentiles(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {"p50_ms": statistics.median(ms), "p99_ms": ms[math.ceil(len(ms) * 0.99) - 1]}


def read_parallel(client: flight.FlightClient, descriptor: flight.FlightDescriptor) -> pa.Table:
    """GetFlightInfo, then every endpoint's DoGet at once (a thread each, as Flight clients
    read), concatenated."""
    info = client.get_flight_info(descriptor)
    with ThreadPoolExecutor(max(1, len(info.endpoints))) as pool:
        parts = list(pool.map(lambda e: client.do_get(e.ticket).read_all(), info.endpoints))
    return pa.concat_tables(parts) if parts else info.schema.empty_table()


def bench_visibility(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    root = work / "visibility"
    root.mkdir()
    path = root / "events"
    cl.create_table(path, SCHEMA)
    doget: list[float] = []
    table_ms: list[float] = []
    with ServiceProcess(str(root), "--flush-interval", "0.2") as service:
        client = service.client()
        progress(f"visibility of {args.visibility} puts")
        for seq in range(args.visibility):
            put(client, "events", "v", seq, batch("v", seq, 10))
            acked = time.perf_counter()
            command = {"table": "events", "filter": [["seq", "=", seq]]}
            descriptor = flight.FlightDescriptor.for_command(json.dumps(command))
            while read_all(client, descriptor).num_rows != 10:
                pass
            doget.append((time.perf_counter() - acked) * 1000)
            if seq % 10 == 0:  # the table read: every tenth put (each waits a flush)
                while cl.open_table(path).to_arrow(filter=[("seq", "=", seq)]).num_rows != 10:
                    time.sleep(0.005)
                table_ms.append((time.perf_counter() - acked) * 1000)
        service.terminate()
    return {
        "puts": args.visibility,
        "doget": percentiles(doget),
        "table": percentiles(table_ms),
        "flush_interval_ms": 200,
    }


def bench_doget(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    root = work / "scan"
    root.mkdir()
    path = root / "events"
    data = event_table(args.scan_rows)
    table = cl.create_table(path, data.schema)
    for piece in data.to_batches(max_chunksize=1_000_000):
        table.append(pa.Table.from_batches([piece]))
    table.finish_streaming()
    table.handoff()
    local, remote = [], []
    with ServiceProcess(str(root)) as service:
        client = service.client()
        descriptor = flight.FlightDescriptor.for_path("events")
        read_parallel(client, descriptor)  # warm-up: files and connections opened
        cl.open_table(path).to_arrow()
        for r in range(args.repeat):
            progress(f"full read, repeat {r + 1}")
            start = time.perf_counter()
            got = read_parallel(client, descriptor)
            remote.append(time.perf_counter() - start)
            start = time.perf_counter()
            mine = cl.open_table(path).to_arrow()
            local.append(time.perf_counter() - start)
            if got.num_rows != args.scan_rows or mine.num_rows != args.scan_rows:
                raise RuntimeError(f"read {got.num_rows} and {mine.num_rows} rows")
        endpoints = len(client.get_flight_info(descriptor).endpoints)
    return {
        "rows": args.scan_rows,
        "endpoints": endpoints,
        "doget_rows_per_s": args.scan_rows / min(remote),
        "to_arrow_rows_per_s": args.scan_rows / min(local),
        "ratio": min(local) / min(remote),
        "all_doget_s": remote,
        "all_to_arrow_s": local,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--puts", type=int, default=150)
    parser.add_argument("--rows-per-put", type=int, default=100)
    parser.add_argument("--visibility", type=int, default=200)
    parser.add_argument("--scan-rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    try:
        results = {
            **run_facts(),
            "puts": bench_puts(args, work),
            "visibility": bench_visibility(args, work),
            "doget": bench_doget(args, work),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    print_markdown(results)


def print_markdown(r: dict[str, Any]) -> None:
    p, v, d = r["puts"], r["visibility"], r["doget"]
    print(f"{r['machine']}; {r['date']}")
    print()
    print("| measure | result | target | met |")
    print("|---|---|---|---|")
    print(
        f"| {p['puts']:,} puts of {p['rows_per_put']} rows from 8 processes: service "
        f"{p['service_puts_per_s']:,.0f} puts/s ({p['service_rows_per_s']:,.0f} rows/s, "
        f"{p['wal_syncs']:,} fsyncs) vs `Table.append` {p['append_puts_per_s']:,.0f} puts/s | "
        f"**{p['ratio']:.1f}x** | >= {PUTS_TARGET:g}x | {yes_no(p['ratio'] >= PUTS_TARGET)} |"
    )
    bare, bare_wal, base = p["bare_puts_per_s"], p["bare_wal_puts_per_s"], p["append_puts_per_s"]
    print(
        f"| the same producers, bare Flight servers (for scale): reading and answering only "
        f"{bare:,.0f} puts/s; also appending to a `WriteAheadLog` {bare_wal:,.0f} puts/s | "
        f"{bare / base:.1f}x; {bare_wal / base:.1f}x | | |"
    )
    print(
        f"| ack -> visible to DoGet ({v['puts']} puts) | p50 {v['doget']['p50_ms']:.1f} ms, "
        f"p99 {v['doget']['p99_ms']:.1f} ms | p50 < {VISIBLE_TARGET_MS:g} ms | "
        f"{yes_no(v['doget']['p50_ms'] < VISIBLE_TARGET_MS)} |"
    )
    print(
        f"| ack -> visible to `open_table().to_arrow()` | p50 {v['table']['p50_ms']:.0f} ms, "
        f"p99 {v['table']['p99_ms']:.0f} ms | bounded by the flush interval "
        f"({v['flush_interval_ms']} ms) | "
        f"{yes_no(v['table']['p99_ms'] < 2 * v['flush_interval_ms'] + 100)} |"
    )
    print(
        f"| DoGet of {d['rows']:,} rows ({d['endpoints']} endpoints) vs `Table.to_arrow()`: "
        f"{d['doget_rows_per_s']:,.0f} vs {d['to_arrow_rows_per_s']:,.0f} rows/s | "
        f"**{d['ratio']:.2f}x** | >= {DOGET_TARGET}x | {yes_no(d['ratio'] >= DOGET_TARGET)} |"
    )


if __name__ == "__main__":
    main()
