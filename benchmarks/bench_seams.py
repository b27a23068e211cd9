"""What the protocol's seams cost in production (nothing listening), against a commit.

    python benchmarks/bench_seams.py [--output PATH]

a. ``carbonlite.seams.reach(name)`` with no listener, per call, against an empty Python
   function call (the baseline in the same run).
b. One small append on local disk (a commit passes 4-6 seams), median of many: the seams'
   share of it is (seams per commit x the cost of one) / the commit's time.

Results: markdown on stdout, JSON in ``benchmarks/results/seams.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import timeit
from pathlib import Path

import pyarrow as pa
from report import progress, run_facts

import carbonlite as cl
from carbonlite import seams

CALLS = 2_000_000
APPENDS = 300


def _nothing(name: str) -> None:
    return None


def per_call_ns(stmt: str, namespace: dict[str, object]) -> float:
    best = min(timeit.repeat(stmt, globals=namespace, number=CALLS, repeat=5))
    return best / CALLS * 1e9


def count_seams_per_append(table: cl.Table, batch: pa.Table) -> int:
    reached: list[str] = []
    with seams.listening(reached.append):
        table.append(batch)
    return len(reached)


def append_ms(directory: str) -> tuple[float, int]:
    schema = pa.schema([("id", pa.int64()), ("kind", pa.string())])
    table = cl.create_table(f"{directory}/t", schema)
    batch = pa.table({"id": list(range(10)), "kind": ["x"] * 10}, schema=schema)
    per_append = count_seams_per_append(table, batch)
    times = []
    for _ in range(APPENDS):
        started = time.perf_counter()
        table.append(batch)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000, per_append


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(Path(__file__).parent / "results" / "seams.json"))
    args = parser.parse_args()
    progress("timing reach() against an empty call")
    reach_ns = per_call_ns('reach("commit.before_put")', {"reach": seams.reach})
    empty_ns = per_call_ns('nothing("commit.before_put")', {"nothing": _nothing})
    progress("timing small appends")
    with tempfile.TemporaryDirectory() as directory:
        commit_ms, per_append = append_ms(directory)
    share = per_append * reach_ns / (commit_ms * 1e6)
    result = {
        **run_facts(),
        "reach_ns": round(reach_ns, 1),
        "empty_call_ns": round(empty_ns, 1),
        "reach_vs_empty_call": round(reach_ns / empty_ns, 2),
        "seams_per_append": per_append,
        "append_ms_median": round(commit_ms, 3),
        "share_of_append": share,
    }
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print("| what | value |\n|---|---:|")
    print(
        f"| `reach()` with no listener | {reach_ns:.1f} ns ({reach_ns / empty_ns:.2f}x an empty call, {empty_ns:.1f} ns) |"
    )
    print(f"| seams passed by one append | {per_append} |")
    print(f"| one 10-row append on local disk (median of {APPENDS}) | {commit_ms:.3f} ms |")
    print(f"| the seams' share of an append | {share:.2e} |")


if __name__ == "__main__":
    main()
