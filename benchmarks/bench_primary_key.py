"""A primary-key table ingesting upsert batches, against plain appends of the same batches.

    python benchmarks/bench_primary_key.py [--rows N] [--batches B] [--updates F] [--output PATH]

``--rows`` rows (default 5,000,000) arrive as ``--batches`` batches (default 1,000) of
``id, ts, kind, value``; a fraction ``--updates`` (default 0.2) of each batch updates keys
inserted earlier (uniformly at random), the rest inserts new ids. Two tables take the same
batches in the same run, interleaved batch by batch so that a noisy minute disturbs both:

- ``upsert``: ``create_table(..., primary_key=["id"])``; each ``append`` is an upsert (the
  old rows of updated keys get deletion vectors);
- ``append`` (the baseline): a table without a key; the same ``append`` calls, no lookups.

Reported: rows/s of each and their ratio, the upsert latency of the first and last 10% of the
batches (the lookup cost grows with the table), and the full-scan time of the keyed table
before handoff (one streaming segment of many blocklets, with deletion vectors) and after
``finish_streaming`` + ``handoff`` (sorted columnar, no vectors), against a scan of the
append table before handoff (same physical rows, no vectors). The keyed table's row count is
checked against the number of distinct ids.

Results are printed as markdown and written to ``benchmarks/results/primary_key.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import carbonlite as cl

RESULTS = Path(__file__).resolve().parent / "results" / "primary_key.json"
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("kind", pa.string()),
        ("value", pa.float64()),
    ]
)
KINDS = np.array(["click", "view", "buy", "share"])


def batches(rows: int, count: int, updates: float, seed: int = 7) -> list[pa.Table]:
    """``count`` batches of about ``rows / count`` rows; a share ``updates`` of each (after the
    first) names ids inserted before."""
    rng = np.random.default_rng(seed)
    size = rows // count
    out = []
    inserted = 0
    start_us = 1_767_225_600_000_000
    for n in range(count):
        n_updates = int(size * updates) if inserted else 0
        new = np.arange(inserted, inserted + size - n_updates, dtype=np.int64)
        old = rng.integers(0, inserted, n_updates) if n_updates else np.empty(0, np.int64)
        ids = np.concatenate([new, old])
        inserted += len(new)
        ts = start_us + (n * size + np.arange(size)) * 1000
        out.append(
            pa.table(
                {
                    "id": ids,
                    "ts": pa.array(ts, pa.int64()).cast(SCHEMA.field("ts").type),
                    "kind": KINDS[rng.integers(0, len(KINDS), size)],
                    "value": rng.random(size),
                },
                schema=SCHEMA,
            )
        )
    return out


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def best_scan(table: cl.Table, repeat: int) -> float:
    return min(timed(table.to_arrow) for _ in range(repeat))


def run(rows: int, count: int, updates: float, repeat: int) -> dict[str, Any]:
    data = batches(rows, count, updates)
    distinct = len(np.unique(np.concatenate([b.column("id").to_numpy() for b in data])))
    work = Path(tempfile.mkdtemp(prefix="bench-pk-"))
    try:
        keyed = cl.create_table(work / "upsert", SCHEMA, primary_key=["id"])
        plain = cl.create_table(work / "append", SCHEMA)
        upsert_s: list[float] = []
        append_s: list[float] = []
        for n, batch in enumerate(data):
            upsert_s.append(timed(lambda b=batch: keyed.append(b)))
            append_s.append(timed(lambda b=batch: plain.append(b)))
            if (n + 1) % max(1, count // 10) == 0:
                print(f"  {n + 1}/{count} batches", flush=True)
        assert keyed.count_rows() == distinct, (keyed.count_rows(), distinct)
        assert plain.count_rows() == sum(b.num_rows for b in data)
        tenth = max(1, count // 10)
        scan_keyed = best_scan(keyed, repeat)
        scan_plain = best_scan(plain, repeat)
        deleted = sum(s.deleted_rows for s in keyed.segments())
        keyed.finish_streaming()
        handoff_s = timed(keyed.handoff)
        scan_after = best_scan(keyed, repeat)
        assert keyed.count_rows() == distinct
        total = sum(b.num_rows for b in data)
        return {
            "rows": total,
            "batches": count,
            "update_fraction": updates,
            "distinct_keys": distinct,
            "deleted_rows_before_handoff": deleted,
            "upsert": {
                "seconds": sum(upsert_s),
                "rows_per_s": total / sum(upsert_s),
                "first_tenth_p50_ms": 1000 * statistics.median(upsert_s[:tenth]),
                "last_tenth_p50_ms": 1000 * statistics.median(upsert_s[-tenth:]),
                "last_tenth_p99_ms": 1000 * float(np.percentile(upsert_s[-tenth:], 99)),
            },
            "append": {
                "seconds": sum(append_s),
                "rows_per_s": total / sum(append_s),
                "last_tenth_p50_ms": 1000 * statistics.median(append_s[-tenth:]),
            },
            "upsert_time_over_append": sum(upsert_s) / sum(append_s),
            "scan_s": {
                "upsert_table_before_handoff": scan_keyed,
                "append_table_before_handoff": scan_plain,
                "upsert_table_after_handoff": scan_after,
            },
            "scan_ratio_before_handoff": scan_keyed / scan_plain,
            "scan_ratio_after_handoff": scan_after / scan_plain,
            "handoff_s": handoff_s,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--batches", type=int, default=1_000)
    parser.add_argument("--updates", type=float, default=0.2)
    parser.add_argument("--repeat", type=int, default=3, help="scans: best of this many")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    result = run(args.rows, args.batches, args.updates, args.repeat)
    result["machine"] = f"{platform.machine()}, {os.cpu_count()} cpus"
    result["load_average_start"] = load
    result["started"] = started
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    u, a, s = result["upsert"], result["append"], result["scan_s"]
    print(
        f"\n| {result['rows']:,} rows in {result['batches']:,} batches, "
        f"{result['update_fraction']:.0%} updates | rows/s | last 10% p50 |\n|---|---:|---:|\n"
        f"| upsert (primary key) | {u['rows_per_s']:,.0f} | {u['last_tenth_p50_ms']:.1f} ms |\n"
        f"| append (no key) | {a['rows_per_s']:,.0f} | {a['last_tenth_p50_ms']:.1f} ms |\n"
        f"\nthe upserts took {result['upsert_time_over_append']:.1f}x the appends' time; "
        f"first 10% p50 {u['first_tenth_p50_ms']:.1f} ms\n"
        f"full scan: keyed before handoff {s['upsert_table_before_handoff']:.3f} s "
        f"({result['scan_ratio_before_handoff']:.2f}x of the append table), after handoff "
        f"{s['upsert_table_after_handoff']:.3f} s ({result['scan_ratio_after_handoff']:.2f}x); "
        f"handoff {result['handoff_s']:.1f} s; {result['deleted_rows_before_handoff']:,} rows "
        "deleted by vectors before it"
    )


if __name__ == "__main__":
    main()
