"""The columnar body in Parquet against blocklet files (issue 39 §1), and pyarrow.dataset
reading the same Parquet files as the baseline of every read.

    python benchmarks/bench_columnar_format.py [--rows 5000000] [--batch 1000000]
        [--repeat 3] [--settings] [--out PATH]

Two tables get the same rows (``datagen.event_table``; sort column ``ts``; a secondary index
on ``agent``, a random 40-byte string unique per row), batch by batch in turn:
``columnar_format = parquet`` and ``= carbonlite``. Each is handed off (timed). Then, in
rotating order, best of ``--repeat``:

- full scan: ``Table.to_arrow()`` of each table, and ``pyarrow.dataset`` over the Parquet
  table's columnar files (the same rows: the streaming tail is empty after the handoff);
- 1% range: ``ts`` in the first 1% of the day, the same three ways;
- point lookup: ``agent == X`` for 5 present values (median), the same three ways
  (CarbonLite prunes with the secondary index, pyarrow.dataset by row-group statistics);
- bytes of the columnar data files of each table;
- the handoff of a third table of the same rows in Parquet with ``iceberg = v2``: the time of
  the Iceberg metadata it writes (its post-commit step, timed around ``export_version``)
  over the rest of the handoff.

Ratios are pyarrow.dataset's time over CarbonLite's (above 1: CarbonLite faster).

With ``--settings`` it also writes the Parquet table's rows under several writer settings
(compression, dictionary, page size, page index) through ``ParquetBlockletWriter`` and
reports write time, bytes and pyarrow's full-scan and range read time of each, the figures
``WRITER_SETTINGS`` was chosen by (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from datagen import event_table
from report import progress, run_facts

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import carbonlite as cl  # noqa: E402
from carbonlite.format.parquet_file import ParquetBlockletWriter  # noqa: E402
from carbonlite.iceberg import export as iceberg_export  # noqa: E402
from carbonlite.metadata import post_commit  # noqa: E402

post_commit.default_mode = "inline"  # a checkpoint's time lands on the commit that wrote it
FORMATS = ("parquet", "carbonlite")
ICEBERG = "parquet+iceberg"
"""A third table: Parquet with ``iceberg = v2``, whose handoff writes its Iceberg metadata."""
DAY_START_US = 1_767_225_600 * 1_000_000
DAY_US = 86_400 * 1_000_000


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def columnar_paths(t: cl.Table) -> list[str]:
    snap = t.refresh().snapshot()
    return [
        str(Path(t.root) / f.path)
        for s in snap.segments.values()
        if s.format == "COLUMNAR" and s.status == "SUCCESS"
        for f in s.files.values()
    ]


def build(base: Path, rows: int, batch: int) -> tuple[dict[str, cl.Table], dict[str, float]]:
    tables = {
        kind: cl.create_table(
            base / kind,
            event_table(1).schema,
            sort_columns=["ts"],
            properties={"columnar_format": kind, "secondary_index_columns": "agent"},
        )
        for kind in FORMATS
    }
    tables[ICEBERG] = cl.create_table(
        base / "iceberg",
        event_table(1).schema,
        sort_columns=["ts"],
        properties={"secondary_index_columns": "agent", "iceberg": "v2"},
    )
    for start in range(0, rows, batch):
        data = event_table(min(batch, rows - start), seed=start)
        data = data.set_column(0, "id", pa.array(range(start, start + data.num_rows), pa.int64()))
        kinds = [*FORMATS, ICEBERG]
        for kind in kinds if (start // batch) % 2 == 0 else reversed(kinds):
            tables[kind].append(data)
        progress(f"appended {start + data.num_rows:,} rows")
    handoff = {}
    exports: list[float] = []
    real = iceberg_export.export_version

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            exports.append(time.perf_counter() - started)

    iceberg_export.export_version = timed  # the post-commit step calls it by this name
    try:
        for kind in [*FORMATS, ICEBERG]:
            tables[kind].finish_streaming()
            exports.clear()
            started = time.perf_counter()
            tables[kind].handoff()
            handoff[kind] = time.perf_counter() - started
            progress(f"{kind}: handoff {handoff[kind]:.2f}s")
        handoff["iceberg metadata"] = sum(exports)
    finally:
        iceberg_export.export_version = real
    return tables, handoff


def reads(tables: dict[str, cl.Table], repeat: int) -> dict[str, dict[str, float]]:
    tables = {k: tables[k] for k in FORMATS}
    dataset = ds.dataset(columnar_paths(tables["parquet"]), format="parquet")
    some = tables["parquet"].to_arrow(filter=pc.field("id") < 5, columns=["agent"])
    agents = some.column("agent").to_pylist()
    lo = pa.scalar(DAY_START_US, pa.timestamp("us"))
    hi = pa.scalar(DAY_START_US + DAY_US // 100, pa.timestamp("us"))
    ranged = (pc.field("ts") >= lo) & (pc.field("ts") < hi)
    cases: dict[str, dict[str, Callable[[], Any]]] = {
        "full scan": {
            **{k: (lambda t=t: t.to_arrow()) for k, t in tables.items()},
            "pyarrow.dataset": lambda: dataset.to_table(),
        },
        "1% range": {
            **{k: (lambda t=t: t.to_arrow(filter=ranged)) for k, t in tables.items()},
            "pyarrow.dataset": lambda: dataset.to_table(filter=ranged),
        },
    }
    out: dict[str, dict[str, float]] = {}
    for name, ways in cases.items():
        out[name] = {way: best(fn, repeat) for way, fn in ways.items()}
        progress(f"{name}: " + ", ".join(f"{w} {s:.3f}s" for w, s in out[name].items()))
    lookups: dict[str, list[float]] = {}
    for agent in agents:
        flt = pc.field("agent") == agent
        ways: dict[str, Callable[[], Any]] = {
            **{k: (lambda t=t, flt=flt: t.to_arrow(filter=flt)) for k, t in tables.items()},
            "pyarrow.dataset": lambda flt=flt: dataset.to_table(filter=flt),
        }
        for way, fn in ways.items():
            lookups.setdefault(way, []).append(best(fn, repeat))
    out["point lookup"] = {way: statistics.median(ts) for way, ts in lookups.items()}
    progress("point lookup: " + ", ".join(f"{w} {s:.4f}s" for w, s in out["point lookup"].items()))
    return out


SETTINGS: dict[str, dict[str, Any]] = {
    "chosen (zstd 1, dictionary, 1 MiB pages, page index)": {},
    "snappy": {"compression": "snappy", "compression_level": None},
    "zstd 3": {"compression_level": 3},
    "no dictionary": {"use_dictionary": False},
    "64 KiB pages": {"data_page_size": 64 * 1024},
    "no page index": {"write_page_index": False},
}


def settings_sweep(base: Path, data: pa.Table, repeat: int) -> dict[str, dict[str, float]]:
    data = data.sort_by("ts")
    lo = pa.scalar(DAY_START_US, pa.timestamp("us"))
    hi = pa.scalar(DAY_START_US + DAY_US // 100, pa.timestamp("us"))
    ranged = (pc.field("ts") >= lo) & (pc.field("ts") < hi)
    out = {}
    for i, (name, settings) in enumerate(SETTINGS.items()):
        path = base / f"settings-{i}.parquet"

        def write(path: Path = path, settings: dict[str, Any] = settings) -> None:
            w = ParquetBlockletWriter(
                path, data.schema, list(range(1, data.num_columns + 1)), settings=settings
            )
            w.write(data, max_rows=131072)
            w.close()

        written = best(write, repeat)
        dataset = ds.dataset([str(path)], format="parquet")
        out[name] = {
            "write s": written,
            "MB": path.stat().st_size / 1e6,
            "full scan s": best(dataset.to_table, repeat),
            "1% range s": best(lambda dataset=dataset: dataset.to_table(filter=ranged), repeat),
        }
        progress(f"settings {name}: {out[name]}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--batch", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--settings", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-columnar-"))
    try:
        tables, handoff = build(base, args.rows, args.batch)
        measured = reads(tables, args.repeat)
        size = {
            k: sum(Path(p).stat().st_size for p in columnar_paths(t)) for k, t in tables.items()
        }
        result: dict[str, Any] = {
            **run_facts(),
            "rows": args.rows,
            "handoff_s": handoff,
            "bytes": size,
            "reads_s": measured,
        }
        if args.settings:
            result["settings"] = settings_sweep(base, event_table(args.rows // 5), args.repeat)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result, indent=2))
    print()
    print("| read | parquet (s) | carbonlite (s) | pyarrow.dataset (s) | dataset / parquet |")
    print("|---|---|---|---|---|")
    for name, ways in measured.items():
        p, c, d = ways["parquet"], ways["carbonlite"], ways["pyarrow.dataset"]
        print(f"| {name} | {p:.4f} | {c:.4f} | {d:.4f} | {d / p:.2f}x |")
    print(
        f"| handoff | {handoff['parquet']:.2f} | {handoff['carbonlite']:.2f} | | "
        f"parquet / carbonlite {handoff['parquet'] / handoff['carbonlite']:.2f}x |"
    )
    meta = handoff["iceberg metadata"]
    print(
        f"| handoff with Iceberg metadata | {handoff[ICEBERG]:.2f} | | | the metadata "
        f"{meta:.3f} s, {meta / (handoff[ICEBERG] - meta):.1%} of the handoff without it |"
    )
    print(
        f"| bytes | {size['parquet'] / 1e6:.1f} MB | {size['carbonlite'] / 1e6:.1f} MB | | "
        f"parquet / carbonlite {size['parquet'] / size['carbonlite']:.2f}x |"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
