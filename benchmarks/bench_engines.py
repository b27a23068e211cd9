"""DuckDB, Polars and pandas over CarbonLite against the same engines over Delta Lake.

    python benchmarks/bench_engines.py [--rows 2000000] [--repeat 15] [--out PATH]

The same rows (``--rows``: ``id`` sorted, ``user`` random in [0, 100,000), ``value`` normal,
``kind`` one of four strings) are written once to a CarbonLite table (blocklets of 131,072
rows, zstd level 1: the defaults but the blocklet size) and twice with deltalake (row groups
of 131,072 rows, 8 MB files): with deltalake's default codec (snappy), **the baseline**, and
uncompressed (shown for reference: a Delta table only gets that when it is asked for, and
it is what an earlier version of this benchmark measured by accident).

Queries (each side gets its engine's own pushdown; results are compared, not just timed):

- DuckDB (``carbonlite.duckdb.source(t)`` against DuckDB over
  ``DeltaTable.to_pyarrow_dataset()``, both registered once on one connection), results
  fetched as Arrow so that both sides pay the same, small conversion:
  a 1% range of the sorted column, two columns; ``count(*)`` of a 1% filter on the unsorted
  column (nothing is pruned on either side); two columns of every row aggregated
  (``GROUP BY kind``); ``count(*)`` of everything.
- Polars (``carbonlite.polars.scan`` against ``pl.scan_delta``): the same 1% range and
  projection, the same unsorted filter, ``head(1000)`` of a filter.
- pandas (``t.to_pandas`` against ``DeltaTable.to_pandas``): the 1% range, two columns.

Every query runs once per side to warm up, then ``--repeat`` times with the two sides
alternating; medians of wall time are compared (CPU time, of every thread of the process,
is recorded too). The ratio is CarbonLite / Delta (lower is better).
Target (issue 11): DuckDB over CarbonLite with the 1% filter not slower than DuckDB over
Delta (ratio <= 1.0). Results: markdown on stdout, JSON in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, WriterProperties, write_deltalake
from report import progress, yes_no

import carbonlite as cl
import carbonlite.duckdb as cl_duckdb
import carbonlite.polars as cl_polars

ROWS_PER_GROUP = 131_072


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


def _canonical(result: Any) -> pa.Table:
    """A result as a sorted Arrow table, to check that both sides agree."""
    if isinstance(result, pl.DataFrame):
        table = result.to_arrow()
    elif isinstance(result, pa.RecordBatchReader):
        table = result.read_all()
    elif isinstance(result, pa.Table):
        table = result
    else:  # pandas
        table = pa.Table.from_pandas(result, preserve_index=False)
    table = table.cast(
        pa.schema(
            [
                pa.field(f.name, pa.string() if pa.types.is_string_view(f.type) else f.type)
                for f in table.schema
            ]
        )
    )
    return table.sort_by([(n, "ascending") for n in table.column_names])


def _alternating(
    *funcs: Callable[[], Any], repeat: int
) -> tuple[list[float], list[float], list[Any]]:
    """Median wall seconds and median CPU seconds (this process, every thread: DuckDB's and
    Polars' as well as ours) of each function, run in turn ``repeat`` times after a warm-up,
    and each one's last result. CPU time says what a run costs when the shared machine's
    other load makes wall time noisy."""
    results = [f() for f in funcs]
    wall: list[list[float]] = [[] for _ in funcs]
    cpu: list[list[float]] = [[] for _ in funcs]
    for _ in range(repeat):
        for i, f in enumerate(funcs):
            start, start_cpu = time.perf_counter(), time.process_time()
            results[i] = f()
            wall[i].append(time.perf_counter() - start)
            cpu[i].append(time.process_time() - start_cpu)
    return (
        [statistics.median(t) for t in wall],
        [statistics.median(t) for t in cpu],
        results,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = args.rows
    data = _data(rows)
    lo, hi = rows // 2, rows // 2 + rows // 100
    with tempfile.TemporaryDirectory() as tmp:
        progress(f"writing {rows:,} rows three times")
        t = cl.create_table(
            f"{tmp}/cl",
            data.schema,
            sort_columns=["id"],
            properties={"blocklet_max_rows": str(ROWS_PER_GROUP)},
        )
        t.append(data)
        for name, codec in (("delta", "SNAPPY"), ("delta_raw", "UNCOMPRESSED")):
            write_deltalake(
                f"{tmp}/{name}",
                data,
                target_file_size=8 * 1024 * 1024,
                writer_properties=WriterProperties(
                    max_row_group_size=ROWS_PER_GROUP, compression=codec
                ),
            )
        sizes = {
            name: sum(f.stat().st_size for f in Path(tmp, name).rglob("*") if f.is_file())
            for name in ("cl", "delta", "delta_raw")
        }
        con = duckdb.connect()
        con.register("events", cl_duckdb.source(t))
        con.register("delta", DeltaTable(f"{tmp}/delta").to_pyarrow_dataset())
        con.register("delta_raw", DeltaTable(f"{tmp}/delta_raw").to_pyarrow_dataset())
        sql = {
            "duckdb_sorted_1pct": f"SELECT id, value FROM {{}} WHERE id >= {lo} AND id < {hi}",
            "duckdb_unsorted_1pct_count": "SELECT count(*) FROM {} WHERE user < 1000",
            "duckdb_2_columns_all_rows": "SELECT kind, round(avg(value), 6) FROM {} GROUP BY kind",
            "duckdb_count_star": "SELECT count(*) FROM {}",
        }

        def duck(query: str, name: str) -> Callable[[], pa.Table]:
            return lambda: con.sql(query.format(name)).arrow().read_all()

        def polars(scan: Callable[[], pl.LazyFrame], query: str) -> Callable[[], pl.DataFrame]:
            sorted_filter = (pl.col("id") >= lo) & (pl.col("id") < hi)
            plans = {
                "sorted": lambda lf: lf.filter(sorted_filter).select("id", "value"),
                "unsorted": lambda lf: lf.filter(pl.col("user") < 1000).select(pl.len()),
                "head": lambda lf: lf.filter(pl.col("kind") == "buy").head(1000),
            }
            return lambda: plans[query](scan()).collect()

        def ours_polars() -> pl.LazyFrame:
            return cl_polars.scan(t.path)

        def delta_polars(name: str) -> Callable[[], pl.LazyFrame]:
            return lambda: pl.scan_delta(f"{tmp}/{name}")

        arrow_filter = (pc.field("id") >= lo) & (pc.field("id") < hi)
        queries: dict[str, tuple[Callable[[], Any], ...]] = {
            name: (duck(q, "events"), duck(q, "delta"), duck(q, "delta_raw"))
            for name, q in sql.items()
        }
        for query in ("sorted", "unsorted", "head"):
            queries[f"polars_{query}" + ("_1pct" if query != "head" else "_1000")] = (
                polars(ours_polars, query),
                polars(delta_polars("delta"), query),
                polars(delta_polars("delta_raw"), query),
            )
        delta_tables = {n: DeltaTable(f"{tmp}/{n}") for n in ("delta", "delta_raw")}
        queries["pandas_sorted_1pct"] = (
            lambda: t.to_pandas(columns=["id", "value"], filter=arrow_filter),
            *(
                (lambda d=d: d.to_pandas(columns=["id", "value"], filters=arrow_filter))
                for d in delta_tables.values()
            ),
        )
        results: dict[str, dict[str, Any]] = {}
        for name, funcs in queries.items():
            progress(name)
            (ours_s, delta_s, raw_s), (ours_cpu, delta_cpu, _), outs = _alternating(
                *funcs, repeat=args.repeat
            )
            same = _canonical(outs[0]).equals(_canonical(outs[1])) and (
                _canonical(outs[0]).equals(_canonical(outs[2]))
            )
            if "head" in name:  # any 1000 matching rows are right
                same = all(_canonical(o).num_rows == 1000 for o in outs)
            results[name] = {
                "carbonlite_ms": round(ours_s * 1e3, 2),
                "delta_ms": round(delta_s * 1e3, 2),
                "ratio": round(ours_s / delta_s, 3),
                "carbonlite_cpu_ms": round(ours_cpu * 1e3, 2),
                "delta_cpu_ms": round(delta_cpu * 1e3, 2),
                "cpu_ratio": round(ours_cpu / delta_cpu, 3),
                "delta_uncompressed_ms": round(raw_s * 1e3, 2),
                "ratio_to_uncompressed": round(ours_s / raw_s, 3),
                "same_result": same,
            }
    target = results["duckdb_sorted_1pct"]["ratio"] <= 1.0
    summary = {
        "rows": rows,
        "repeat": args.repeat,
        "bytes": sizes,
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}",
        "versions": {
            "duckdb": duckdb.__version__,
            "polars": pl.__version__,
            "pyarrow": pa.__version__,
        },
        "results": results,
        "duckdb_target_met": target,
    }
    print(
        f"{rows:,} rows; bytes on disk: CarbonLite {sizes['cl']:,}, Delta (snappy) "
        f"{sizes['delta']:,}, Delta (uncompressed) {sizes['delta_raw']:,}\n"
    )
    print(
        "| query | CarbonLite ms | Delta ms | ratio | CPU ratio "
        "| Delta uncompressed ms | ratio | same |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['carbonlite_ms']} | {r['delta_ms']} | {r['ratio']} | "
            f"{r['cpu_ratio']} | {r['delta_uncompressed_ms']} | {r['ratio_to_uncompressed']} | "
            f"{r['same_result']} |"
        )
    print(f"\nDuckDB 1% filter not slower than over Delta: {yes_no(target)}")
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
