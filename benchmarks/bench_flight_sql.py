"""SQL over Arrow Flight SQL (issue 41): throughput against plain DoGet, time to first batch,
metadata calls' latency, and what a pushed filter saves.

    python benchmarks/bench_flight_sql.py [--rows 10000000] [--repeat 3] [--output PATH]

A ``carbonlite serve`` process runs on 127.0.0.1 (a free port) over a table of ``--rows``
event rows (``datagen.event_table``, sorted by ``ts``, handed off). The client is the ADBC
Flight SQL driver (``adbc_driver_flightsql.dbapi``), as a user's would be.

1. **Throughput**: ``SELECT * FROM events`` through ADBC (``fetch_arrow_table``) against
   plain Flight of the same rows (``GetFlightInfo`` + every endpoint's ``DoGet`` at once, a
   thread each, as ``bench_serve.py`` reads); one warm-up of each, then best of
   ``--repeat``, interleaved. MB/s of the Arrow data returned. Goal: SQL >= 0.8x DoGet.
   ``SELECT *`` is a plain read, answered by the service's own read (``flight_sql/direct.py``);
   the same rows through DuckDB (``WHERE id >= 0``, a filter keeping every row) are measured
   too.
2. **Time to first batch**: from the call to the first record batch in the client's hands,
   for the same ``SELECT *`` through ADBC and for plain Flight (``GetFlightInfo`` + the first
   endpoint's first batch); median of ``--repeat``.
3. **Metadata calls**: the median latency of 20 ``adbc_get_info``,
   ``adbc_get_objects(depth="all")``, ``adbc_get_table_schema`` and
   ``adbc_get_table_types``.
4. **Pushed filter**: a 1% range of ``ts`` with an aggregate, as DuckDB pushes it into
   CarbonLite's scan, and the same range on ``abs(epoch_us(ts))`` (a function of the
   column, which DuckDB cannot push): the blocklets and bytes CarbonLite's planner selected (the
   service's "SQL scan of" log line) and the time, best of ``--repeat``.

Markdown on stdout, JSON in ``benchmarks/results/flight_sql.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
from bench_serve import read_parallel
from datagen import event_table
from report import progress, run_facts, yes_no

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the service fixture lives with the tests

import carbonlite as cl  # noqa: E402
from tests.support.flight_service import ServiceProcess  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "flight_sql.json"
THROUGHPUT_TARGET = 0.8
METADATA_CALLS = 20
# the 1% range: the timestamps rise steadily over one day from 2026-01-01
RANGE = "ts >= TIMESTAMP '2026-01-01 12:00:00' AND ts < TIMESTAMP '2026-01-01 12:14:24'"
PUSHED = f"SELECT count(*), avg(value) FROM events WHERE {RANGE}"
ENGINE_ALL = "SELECT * FROM events WHERE id >= 0"  # every row, through DuckDB
NOT_PUSHED = (  # abs() of the column: the same rows, a filter DuckDB cannot push
    "SELECT count(*), avg(value) FROM events WHERE "
    "abs(epoch_us(ts)) >= epoch_us(TIMESTAMP '2026-01-01 12:00:00') "
    "AND abs(epoch_us(ts)) < epoch_us(TIMESTAMP '2026-01-01 12:14:24')"
)


def build_table(root: Path, rows: int) -> pa.Table:
    progress(f"writing {rows:,} rows")
    data = event_table(rows)
    table = cl.create_table(root / "events", data.schema, sort_columns=["ts"])
    for piece in data.to_batches(max_chunksize=1_000_000):
        table.append(pa.Table.from_batches([piece]))
    table.finish_streaming()
    table.handoff()
    return data


def read_events(client: flight.FlightClient) -> pa.Table:
    return read_parallel(client, flight.FlightDescriptor.for_path("events"))


def sql(conn: Any, query: str) -> pa.Table:
    with conn.cursor() as cur:
        cur.execute(query)
        return cur.fetch_arrow_table()


def sql_first_batch(conn: Any, query: str) -> float:
    start = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute(query)
        reader = cur.fetch_record_batch()
        reader.read_next_batch()
        seconds = time.perf_counter() - start
    return seconds


def doget_first_batch(client: flight.FlightClient) -> float:
    start = time.perf_counter()
    info = client.get_flight_info(flight.FlightDescriptor.for_path("events"))
    reader = client.do_get(info.endpoints[0].ticket)
    reader.read_chunk()
    seconds = time.perf_counter() - start
    reader.cancel()
    return seconds


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = call()
    return time.perf_counter() - start, out


def scan_lines(service: ServiceProcess, seen: int) -> list[str]:
    """The service's "SQL scan of ..." log lines after the first ``seen`` (waiting a moment
    for its stderr to be read)."""
    deadline = time.monotonic() + 5
    while True:
        lines = [line for line in service.stderr if "SQL scan of" in line]
        if len(lines) > seen or time.monotonic() > deadline:
            return lines[seen:]
        time.sleep(0.01)


SCAN = re.compile(r"(\d+) of (\d+) blocklets \((\d+) of (\d+) bytes\)")


def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import adbc_driver_flightsql.dbapi as flight_sql

    data = build_table(work, args.rows)
    nbytes = data.nbytes
    with ServiceProcess(str(work)) as service:
        assert service.proc is not None
        client = service.client()
        conn = flight_sql.connect(f"grpc://127.0.0.1:{service.port}", autocommit=True)
        try:
            progress("warm-up")
            read_events(client)
            sql(conn, "SELECT * FROM events")
            sql(conn, ENGINE_ALL)
            doget_s, sql_s, engine_s = [], [], []
            for r in range(args.repeat):
                progress(f"full read, repeat {r + 1}")
                seconds, got = timed(lambda: read_events(client))
                assert got.num_rows == args.rows
                doget_s.append(seconds)
                seconds, got = timed(lambda: sql(conn, "SELECT * FROM events"))
                assert got.num_rows == args.rows
                sql_s.append(seconds)
                seconds, got = timed(lambda: sql(conn, ENGINE_ALL))
                assert got.num_rows == args.rows
                engine_s.append(seconds)
            first_doget = [doget_first_batch(client) for _ in range(args.repeat)]
            first_sql = [sql_first_batch(conn, "SELECT * FROM events") for _ in range(args.repeat)]
            progress("metadata calls")
            calls: dict[str, Callable[[], Any]] = {
                "adbc_get_info": conn.adbc_get_info,
                "adbc_get_objects(depth='all')": lambda: conn.adbc_get_objects(
                    depth="all"
                ).read_all(),
                "adbc_get_table_schema": lambda: conn.adbc_get_table_schema(
                    "events", db_schema_filter="main"
                ),
                "adbc_get_table_types": conn.adbc_get_table_types,
            }
            metadata = {}
            for name, call in calls.items():
                call()
                metadata[name] = statistics.median(
                    timed(call)[0] * 1000 for _ in range(METADATA_CALLS)
                )
            progress("pushed and not pushed filters")
            filters: dict[str, dict[str, Any]] = {}
            for label, query in (("pushed", PUSHED), ("not pushed", NOT_PUSHED)):
                sql(conn, query)
                best = float("inf")
                for _ in range(args.repeat):
                    seen = len(scan_lines(service, 0))
                    seconds, got = timed(lambda q=query: sql(conn, q))
                    best = min(best, seconds)
                (line,) = scan_lines(service, seen)
                found = SCAN.search(line)
                assert found is not None, line
                blocklets, of_blocklets, read, of_bytes = map(int, found.groups())
                filters[label] = {
                    "seconds": best,
                    "blocklets": blocklets,
                    "blocklets_total": of_blocklets,
                    "bytes_read": read,
                    "bytes_total": of_bytes,
                    "rows": got.to_pylist(),
                    "log": line.strip(),
                }
            if filters["pushed"]["rows"] != filters["not pushed"]["rows"]:
                raise RuntimeError(f"the two filters disagree: {filters}")
        finally:
            conn.close()
        service.terminate()
    on_disk = sum(p.stat().st_size for p in (work / "events").rglob("*") if p.is_file())
    return {
        "rows": args.rows,
        "arrow_bytes": nbytes,
        "table_bytes_on_disk": on_disk,
        "doget_s": doget_s,
        "sql_s": sql_s,
        "doget_mb_per_s": nbytes / 1e6 / min(doget_s),
        "sql_mb_per_s": nbytes / 1e6 / min(sql_s),
        "ratio": min(doget_s) / min(sql_s),
        "engine_s": engine_s,
        "engine_mb_per_s": nbytes / 1e6 / min(engine_s),
        "engine_ratio": min(doget_s) / min(engine_s),
        "first_batch_doget_ms": statistics.median(first_doget) * 1000,
        "first_batch_sql_ms": statistics.median(first_sql) * 1000,
        "metadata_ms": metadata,
        "filters": filters,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-flight-sql-"))
    try:
        results = {**run_facts(), **bench(args, work)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    print_markdown(results)


def print_markdown(r: dict[str, Any]) -> None:
    print(f"{r['machine']}; {r['date']}")
    print()
    print("| measure | result | target | met |")
    print("|---|---|---|---|")
    print(
        f"| `SELECT * FROM events` ({r['rows']:,} rows, {r['arrow_bytes'] / 1e6:,.0f} MB of "
        f"Arrow) through ADBC vs DoGet of every endpoint: {r['sql_mb_per_s']:,.0f} vs "
        f"{r['doget_mb_per_s']:,.0f} MB/s | **{r['ratio']:.2f}x** | >= {THROUGHPUT_TARGET}x | "
        f"{yes_no(r['ratio'] >= THROUGHPUT_TARGET)} |"
    )
    print(
        f"| `{ENGINE_ALL}` (every row, through DuckDB) vs DoGet: {r['engine_mb_per_s']:,.0f} "
        f"MB/s | {r['engine_ratio']:.2f}x | | |"
    )
    print(
        f"| time to first batch, median: SQL {r['first_batch_sql_ms']:.0f} ms, DoGet "
        f"{r['first_batch_doget_ms']:.0f} ms | | | |"
    )
    for name, ms in r["metadata_ms"].items():
        print(f"| `{name}`, median of {METADATA_CALLS} | {ms:.1f} ms | | |")
    for label, f in r["filters"].items():
        print(
            f"| 1% range of `ts` + aggregate, filter {label}: the service read "
            f"{f['blocklets']} of {f['blocklets_total']} blocklets "
            f"({f['bytes_read'] / 1e6:,.1f} of {f['bytes_total'] / 1e6:,.1f} MB), "
            f"{f['seconds'] * 1000:.0f} ms | | | |"
        )


if __name__ == "__main__":
    main()
