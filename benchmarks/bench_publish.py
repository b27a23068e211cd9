"""Hash-diff publishing and partition pruning (issue 14).

    python benchmarks/bench_publish.py [--rows 5000000] [--partitions 1000] [--changed 0.01]
        [--repeat 3] [--plan-repeat 200] [--output PATH]

The rows are ``datagen.event_table(--rows)`` plus a column ``part``: ``id * partitions //
rows``, so each of ``--partitions`` partitions holds a contiguous run of ids. The table is
``create_table(partition_by=["part"])``, filled by one ``publish``.

1. **Republish with 1% changed**: the same rows, with the ``value`` of every row of
   ``--changed`` of the partitions (10 of 1,000) changed, as one Arrow table. Timed:
   ``Table.publish(data)`` (hashes every partition, rewrites the changed ones) against
   ``Table.overwrite(data)`` (writes everything) of the same data, each on a fresh copy of the
   published table (the copy untimed), interleaved, best of ``--repeat``. Ratio = overwrite /
   publish; target >= 20x. Bytes written are each commit's ``bytes_added``; they must be
   proportional to the changed partitions. Both results are checked (partition counts, rows).
2. **Partition pruning**: ``plan_splits(filter=pc.field("part") == k)`` on the
   ``--partitions`` table against the same rows in a 10-partition table (``part10 = part *
   10 // partitions``, filter on ``part10``), median of ``--plan-repeat`` plans each (k
   random), interleaved. Target: <= 2x. The plans are checked to select exactly one
   partition's segment.

Markdown on stdout, JSON in ``benchmarks/results/publish.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datagen import event_table

import carbonlite as cl

RESULTS = Path(__file__).resolve().parent / "results" / "publish.json"
REPUBLISH_TARGET = 20.0
PLAN_TARGET = 2.0


_STARTED = time.perf_counter()


def progress(text: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:7.1f}s] {text}", flush=True)


def with_parts(rows: int, partitions: int) -> pa.Table:
    data = event_table(rows)
    ids = data.column("id").to_numpy()
    part = (ids * partitions // rows).astype(np.int32)
    return data.append_column("part", pa.array(part)).append_column(
        "part10", pa.array((part * 10 // partitions).astype(np.int32))
    )


def changed_copy(
    data: pa.Table, partitions: int, share: float, seed: int = 3
) -> tuple[pa.Table, set[int]]:
    rng = random.Random(seed)
    chosen = set(rng.sample(range(partitions), max(1, round(partitions * share))))
    part = data.column("part").to_numpy()
    mask = np.isin(part, list(chosen))
    value = data.column("value").to_numpy().copy()
    value[mask] += 1.0
    index = data.schema.get_field_index("value")
    return data.set_column(index, "value", pa.array(value)), chosen


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - start, time.process_time() - cpu, out


def republish(
    work: Path, data: pa.Table, partitions: int, share: float, repeat: int
) -> dict[str, Any]:
    base = work / "published"
    t = cl.create_table(base, data.schema, partition_by=["part"])
    seconds, cpu, first = timed(lambda: t.publish(data))
    assert len(first.added) == partitions
    progress(f"first publish of {partitions} partitions: {seconds:.2f}s")
    modified, chosen = changed_copy(data, partitions, share)
    runs: dict[str, list[tuple[float, float]]] = {"publish": [], "overwrite": []}
    written: dict[str, int] = {}
    for i in range(repeat):
        for side in ("publish", "overwrite"):
            path = work / f"{side}-{i}"
            shutil.copytree(base, path)
            table = cl.open_table(path)
            if side == "publish":
                s, c, result = timed(lambda table=table: table.publish(modified))
                assert {v[0] for v in result.changed} == chosen, result.changed
                assert len(result.unchanged) == partitions - len(chosen)
            else:
                s, c, result = timed(lambda table=table: table.overwrite(modified))
            written[side] = table.history(1)[0].bytes
            assert table.count_rows() == data.num_rows
            runs[side].append((s, c))
            shutil.rmtree(path)
        progress(
            f"republish {i + 1}/{repeat}: publish {runs['publish'][-1][0]:.3f}s, "
            f"overwrite {runs['overwrite'][-1][0]:.3f}s"
        )
    best = {k: min(w for w, _ in v) for k, v in runs.items()}
    return {
        "first_publish_s": round(seconds, 3),
        "first_publish_cpu_s": round(cpu, 3),
        "partitions_changed": len(chosen),
        "publish": {
            "best_s": round(best["publish"], 4),
            "runs_s": [round(w, 4) for w, _ in runs["publish"]],
        },
        "overwrite": {
            "best_s": round(best["overwrite"], 4),
            "runs_s": [round(w, 4) for w, _ in runs["overwrite"]],
        },
        "bytes_written": written,
        "bytes_ratio": round(written["publish"] / written["overwrite"], 4),
        "ratio": round(best["overwrite"] / best["publish"], 2),
    }


def planning(work: Path, data: pa.Table, partitions: int, repeat: int) -> dict[str, Any]:
    many = cl.open_table(work / "published")
    few = cl.create_table(work / "ten", data.schema, partition_by=["part10"])
    few.publish(data)
    rng = random.Random(5)
    times: dict[str, list[float]] = {"many": [], "few": []}
    for _ in range(repeat):
        k = rng.randrange(partitions)
        for side, table, expr in (
            ("many", many, pc.field("part") == k),
            ("few", few, pc.field("part10") == k * 10 // partitions),
        ):
            start = time.perf_counter()
            plan = table.plan_splits(filter=expr)
            times[side].append(time.perf_counter() - start)
            segments = {s.segment_id for s in plan.splits}
            assert len(segments) == 1, (side, segments)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "many_partitions": partitions,
        "few_partitions": 10,
        "many_median_ms": round(med["many"] * 1000, 3),
        "few_median_ms": round(med["few"] * 1000, 3),
        "ratio": round(med["many"] / med["few"], 2),
    }


def markdown(summary: dict[str, Any]) -> str:
    r, p = summary["republish"], summary["planning"]
    return "\n".join(
        [
            f"{summary['rows']:,} rows in {summary['partitions']:,} partitions",
            "",
            "| measure | CarbonLite | baseline | ratio | target | met? |",
            "|---|---:|---:|---:|---|---|",
            f"| republish, {r['partitions_changed']} partitions changed: publish vs overwrite | "
            f"{r['publish']['best_s']:.3f} s | {r['overwrite']['best_s']:.3f} s | "
            f"**{r['ratio']:.1f}x** | >= {REPUBLISH_TARGET:.0f}x | "
            f"{'yes' if r['ratio'] >= REPUBLISH_TARGET else '**no**'} |",
            f"| bytes written: publish vs overwrite | {r['bytes_written']['publish']:,} | "
            f"{r['bytes_written']['overwrite']:,} | {r['bytes_ratio']:.4f} | proportional | - |",
            f"| plan `part == k`: {p['many_partitions']} vs {p['few_partitions']} partitions | "
            f"{p['many_median_ms']:.3f} ms | {p['few_median_ms']:.3f} ms | **{p['ratio']:.2f}x** | "
            f"<= {PLAN_TARGET:.0f}x | {'yes' if p['ratio'] <= PLAN_TARGET else '**no**'} |",
            "",
            f"first publish of every partition: {r['first_publish_s']:.2f} s",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--changed", type=float, default=0.01)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--plan-repeat", type=int, default=200)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    data = with_parts(args.rows, args.partitions)
    progress(f"{data.num_rows:,} rows generated")
    with tempfile.TemporaryDirectory(prefix="bench-publish-") as tmp:
        work = Path(tmp)
        republished = republish(work, data, args.partitions, args.changed, args.repeat)
        planned = planning(work, data, args.partitions, args.plan_repeat)
    summary = {
        "benchmark": "publish",
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "rows": args.rows,
        "partitions": args.partitions,
        "republish": republished,
        "planning": planned,
        "targets_met": {
            "republish": republished["ratio"] >= REPUBLISH_TARGET,
            "planning": planned["ratio"] <= PLAN_TARGET,
        },
    }
    print(markdown(summary))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
