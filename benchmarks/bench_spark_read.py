"""Benchmark column projection of ``spark.read.format("carbonlite")`` (issue 12, item 6).

    python benchmarks/bench_spark_read.py [--rows N] [--repeat R] [--output PATH]

A table of ``--rows`` rows (default 400,000) and 30 NOT NULL ``double`` columns ``c00`` ..
``c29``, in blocklets of 65,536 rows. Spark gives Python data sources no column pruning, so
``select("c05")`` still asks CarbonLite for all 30 columns and drops 29 of them in the JVM.
Four reads, each materialized with the ``noop`` sink, in one session, interleaved, after a
warm-up; each figure is the best of ``--repeat`` runs and the ratio is against reading every
column in the same run:

1. every column: ``load(path)``;
2. ``load(path).select("c05")``;
3. a user schema: ``.schema("c05 double").load(path)`` (nullable over a NOT NULL column);
4. the option ``columns``: ``.option("columns", "c05").load(path)``.

Results are printed as markdown and written to ``benchmarks/results/spark_read.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import carbonlite
import carbonlite.spark

COLUMNS = [f"c{n:02d}" for n in range(30)]


def make_table(path: str, rows: int) -> None:
    rng = np.random.default_rng(12)
    schema = pa.schema([pa.field(c, pa.float64(), nullable=False) for c in COLUMNS])
    data = pa.table({c: rng.random(rows) for c in COLUMNS}, schema=schema)
    carbonlite.create_table(path, schema).append(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--output", default=str(Path(__file__).parent / "results" / "spark_read.json")
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = carbonlite.spark.local_session("local[2]", app_name="bench-spark-read")
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "t")
        make_table(path, args.rows)

        def frames() -> dict[str, Any]:
            """New DataFrames (and readers: ``DataFrameReader.option`` changes its reader)."""

            def read() -> Any:
                return spark.read.format("carbonlite")

            return {
                "all 30 columns": read().load(path),
                'select("c05")': read().load(path).select("c05"),
                'schema("c05 double")': read().schema("c05 double").load(path),
                'option("columns", "c05")': read().option("columns", "c05").load(path),
            }

        def run(name: str) -> None:
            frames()[name].write.format("noop").mode("overwrite").save()

        names = list(frames())
        counts = {name: len(df.columns) for name, df in frames().items()}
        for name in names:  # warm-up: JVM, Python workers, code generation
            run(name)
        times: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.repeat):
            for name in names if r % 2 == 0 else reversed(names):
                start = time.perf_counter()
                run(name)
                times[name].append(time.perf_counter() - start)
    spark.stop()
    base = min(times["all 30 columns"])
    print(f"\n{args.rows:,} rows x 30 double columns, local[2], best of {args.repeat}\n")
    print("| read | columns out | best s | vs all columns |")
    print("|---|---|---|---|")
    results = []
    for name in names:
        best = min(times[name])
        print(f"| `{name}` | {counts[name]} | {best:.2f} | {best / base:.2f} |")
        results.append({"case": name, "best_s": best, "ratio": best / base, "all_s": times[name]})
    out = {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "rows": args.rows,
        "repeat": args.repeat,
        "command": "python benchmarks/bench_spark_read.py " + " ".join(argv or sys.argv[1:]),
        "results": results,
    }
    Path(args.output).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
