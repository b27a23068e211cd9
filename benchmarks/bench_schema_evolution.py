"""Schema evolution costs one small commit: ``rename_column`` and ``drop_columns`` on a
5,000,000-row table, against a 1,000-row append on the same table.

    python benchmarks/bench_schema_evolution.py [--quick] [--repeat R] [--output PATH]

The table (``id`` int64, ``ts`` timestamp, ``value`` float64 and ``d0``..``d{R-1}`` int32,
random) is built with five large appends (untimed). Then, ``--repeat`` times each (best
time reported, and the smallest and largest bytes written):

- ``rename_column``: a full data column renamed (``value`` -> ``value_1`` -> ...);
- ``drop_columns``: one full data column dropped (``d0``, ``d1``, ...: a new one each time);
- a 1,000-row append of the same columns (the baseline: one small data commit).

Bytes written are the growth of the sizes of every file under the table's directory (data,
log, checkpoints; nothing left out), measured before and after each call. A change that
rewrote data would write about the table's size (printed for scale); a metadata commit writes
one log version, and a checkpoint when the version is a multiple of the checkpoint interval
(the largest figure shows it).

Results are printed one line per figure and written to
``benchmarks/results/schema_evolution.json`` (``schema_evolution-quick.json`` with
``--quick``: 300,000 rows).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from report import progress, run_facts

from carbonlite import Table, create_table

RESULTS_DIR = Path(__file__).resolve().parent / "results"
APPENDS = 5
"""Large appends that build the table."""
SMALL = 1_000
"""Rows of the baseline append."""


def columns_of(repeat: int) -> pa.Schema:
    fields = [("id", pa.int64()), ("ts", pa.timestamp("us")), ("value", pa.float64())]
    return pa.schema(fields + [(f"d{i}", pa.int32()) for i in range(repeat)])


def rows(schema: pa.Schema, start: int, n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n, dtype=np.int64)
    arrays = [
        pa.array(ids),
        pa.array(1_700_000_000_000_000 + ids * 1_000, pa.timestamp("us")),
        pa.array(rng.normal(size=n)),
    ]
    arrays += [pa.array(rng.integers(0, 1_000_000, n, dtype=np.int32)) for _ in schema.names[3:]]
    return pa.Table.from_arrays(arrays, schema=schema)


def tree_bytes(root: str) -> int:
    """Sizes of every file under ``root``."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            total += os.path.getsize(os.path.join(folder, name))
    return total


def measured(root: str, call: Callable[[], object]) -> tuple[float, int]:
    """Seconds ``call`` took and the bytes it added under ``root``."""
    before = tree_bytes(root)
    start = time.perf_counter()
    call()
    seconds = time.perf_counter() - start
    return seconds, tree_bytes(root) - before


def summary(samples: list[tuple[float, int]]) -> dict[str, Any]:
    return {
        "best_ms": min(s for s, _ in samples) * 1000,
        "median_ms": float(np.median([s for s, _ in samples])) * 1000,
        "bytes_min": min(b for _, b in samples),
        "bytes_max": max(b for _, b in samples),
    }


def run(total_rows: int, repeat: int) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="bench-schema-")
    try:
        path = os.path.join(folder, "t")
        schema = columns_of(repeat)
        t: Table = create_table(path, schema)
        per = total_rows // APPENDS
        for i in range(APPENDS):
            t.append(rows(schema, i * per, per, seed=i))
            progress(f"built {(i + 1) * per:,} rows")
        table_bytes = tree_bytes(path)
        renames, drops, appends = [], [], []
        name = "value"
        for i in range(repeat):
            # interleaved, so that a noisy moment disturbs all three alike
            small = rows(t.schema, total_rows + i * SMALL, SMALL, seed=100 + i)
            appends.append(measured(path, lambda small=small: t.append(small)))
            new = f"value_{i + 1}"
            renames.append(measured(path, lambda old=name, new=new: t.rename_column(old, new)))
            name = new
            drops.append(measured(path, lambda i=i: t.drop_columns(f"d{i}")))
            progress(f"round {i + 1} of {repeat}")
        assert t.count_rows() == total_rows + repeat * SMALL
        assert t.schema.names == ["id", "ts", name], t.schema.names
        log_dir = os.path.join(path, "_carbonlite", "log")
        last = max(n for n in os.listdir(log_dir) if n.endswith(".json") and "checkpoint" not in n)
        return {
            **run_facts(),
            "rows": total_rows,
            "repeat": repeat,
            "table_bytes": table_bytes,
            "last_log_version_bytes": os.path.getsize(os.path.join(log_dir, last)),
            "rename_column": summary(renames),
            "drop_columns": summary(drops),
            f"append_{SMALL}_rows": summary(appends),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300,000 rows instead of 5M")
    parser.add_argument("--repeat", type=int, default=5, help="calls of each (best reported)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    total = 300_000 if args.quick else 5_000_000
    result = run(total, args.repeat)
    print(f"table: {result['rows']:,} rows, {result['table_bytes']:,} bytes on disk")
    for key in ("rename_column", "drop_columns", f"append_{SMALL}_rows"):
        r = result[key]
        print(
            f"{key}: best {r['best_ms']:.1f} ms (median {r['median_ms']:.1f} ms), "
            f"{r['bytes_min']:,}-{r['bytes_max']:,} bytes written"
        )
    print(f"one log version (the last, a drop): {result['last_log_version_bytes']:,} bytes")
    name = "schema_evolution-quick.json" if args.quick else "schema_evolution.json"
    output = args.output or RESULTS_DIR / name
    output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
