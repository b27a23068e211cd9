"""DuckDB and Polars over CarbonLite against the same engines over Delta Lake.

The same rows (``--rows``, sorted by ``id``) are written to a CarbonLite table (blocklets
of 131,072 rows) and, with deltalake, to a Delta table (8 MB files, row groups of 131,072
rows). Each query runs
``--repeat`` times per side, alternating, and the median is compared:

- DuckDB, 1% filter on the sorted column, two columns: ``carbonlite.duckdb.source(t)``
  against DuckDB over ``DeltaTable.to_pyarrow_dataset()`` (both get DuckDB's pushdown);
- DuckDB, ``count(*)`` of a 1% filter on an unsorted column (no pruning either side);
- Polars, the same 1% filter and projection: ``carbonlite.polars.scan`` against
  ``pl.scan_delta``.

Target (issue 11): DuckDB over CarbonLite not slower than over Delta (ratio <= 1.0).

    python benchmarks/bench_engines.py --rows 2000000 --out benchmarks/results/engines.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
from deltalake import DeltaTable, WriterProperties, write_deltalake
from report import progress, yes_no

import carbonlite as cl
import carbonlite.duckdb as cl_duckdb
import carbonlite.polars as cl_polars


def _data(rows: int) -> pa.Table:
    rng = np.random.default_rng(1)
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "user": pa.array(rng.integers(0, 100_000, rows)),
            "value": pa.array(rng.normal(100, 25, rows)),
            "kind": pa.array(np.array(["click", "view", "buy", "share"])[rng.integers(0, 4, rows)]),
        }
    )


def _median(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows, per_file = args.rows, 131_072
    data = _data(rows)
    with tempfile.TemporaryDirectory() as tmp:
        progress(f"writing {rows:,} rows twice")
        t = cl.create_table(
            f"{tmp}/cl",
            data.schema,
            sort_columns=["id"],
            properties={"blocklet_max_rows": str(per_file)},
        )
        t.append(data)
        write_deltalake(
            f"{tmp}/delta",
            data,
            target_file_size=8 * 1024 * 1024,
            writer_properties=WriterProperties(max_row_group_size=per_file),
        )
        con = duckdb.connect()
        con.register("delta", DeltaTable(f"{tmp}/delta").to_pyarrow_dataset())
        con.register("events", cl_duckdb.source(t))
        lo, hi = rows // 2, rows // 2 + rows // 100
        sorted_sql = f"SELECT id, value FROM {{}} WHERE id >= {lo} AND id < {hi}"
        unsorted_sql = "SELECT count(*) FROM {} WHERE user < 1000"
        queries = {
            "duckdb_sorted_1pct": (
                lambda: con.sql(sorted_sql.format("events")).fetchall(),
                lambda: con.sql(sorted_sql.format("delta")).fetchall(),
            ),
            "duckdb_unsorted_1pct_count": (
                lambda: con.sql(unsorted_sql.format("events")).fetchall(),
                lambda: con.sql(unsorted_sql.format("delta")).fetchall(),
            ),
            "polars_sorted_1pct": (
                lambda: (
                    cl_polars.scan(t.path)
                    .filter((pl.col("id") >= lo) & (pl.col("id") < hi))
                    .select("id", "value")
                    .collect()
                ),
                lambda: (
                    pl.scan_delta(f"{tmp}/delta")
                    .filter((pl.col("id") >= lo) & (pl.col("id") < hi))
                    .select("id", "value")
                    .collect()
                ),
            ),
        }
        results = {}
        for name, (ours, theirs) in queries.items():
            progress(name)
            ours()
            theirs()  # warm both
            ours_s, a = _median(ours, args.repeat)
            theirs_s, b = _median(theirs, args.repeat)
            same = len(a) == len(b) if not isinstance(a, pl.DataFrame) else a.height == b.height
            results[name] = {
                "carbonlite_s": round(ours_s, 4),
                "delta_s": round(theirs_s, 4),
                "ratio": round(ours_s / theirs_s, 3),
                "same_rows": same,
            }
    target = results["duckdb_sorted_1pct"]["ratio"] <= 1.0
    summary = {"rows": rows, "repeat": args.repeat, "results": results, "duckdb_target_met": target}
    print("| query | CarbonLite s | Delta s | ratio | same rows |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['carbonlite_s']} | {r['delta_s']} | {r['ratio']} | {r['same_rows']} |"
        )
    print(f"\nDuckDB 1% filter not slower than over Delta: {yes_no(target)}")
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
