"""Ingesting finished files (issue 28): throughput against ``Table.append``, rename ->
readable latency, and the record of ingested files over 100,000 files.

    python benchmarks/bench_file_ingest.py [--files 1000] [--rows 10000] [--repeat 3]
        [--latency-files 100] [--record-files 100000] [--skip-record] [--out PATH]

1. **Throughput.** ``--files`` Parquet files of ``--rows`` rows each (``id`` int64, ``ts``
   timestamp, ``value`` float64, ``name`` string; zstd, numpy with a fixed seed) in a source
   directory. ``--repeat`` times, alternating (best reported), each into a new table:
   - *grouped appends* (the baseline): ``pyarrow.parquet.read_table`` of each file and one
     ``Table.append`` per group of files, grouped as the ingester commits them (files until
     their rows reach ``max_batch_rows``, 100,000: 10 files of 10,000 rows);
   - *per-file appends*: one ``Table.append`` per file (a second baseline);
   - *ingester*: ``FileIngester(table, source).run(stop_at_end=True)``, defaults.
   Target: the ingester's rows/s >= 0.8x the grouped appends'.
2. **Latency.** A ``FileIngester`` runs (``run()`` in a thread, default ``max_latency`` of
   1 s) while a writer thread writes ``--latency-files`` Parquet files of 1,000 rows, each
   under a dot name, renamed into place every 0.2-0.5 s (seeded). A reader thread refreshes
   the table every 20 ms and, when the version moved, reads its ``_file_path`` column
   (``FILE_METADATA_COLUMNS``); a file's latency is from its rename to the end of the first
   read that holds its rows. The first 5 files are warm-up. Target: p50 < 1.5 s.
3. **The record over many files.** ``--record-files`` tiny CSV files (one or two rows, bucket
   directories of 1,000, modification times one second apart), ingested in 10 rounds by one
   long-lived ingester (``max_file_age`` 1,000 s, ``max_batch_rows`` 500), with
   tracemalloc on. After each round: the record's rows and state-file bytes, the newest log
   version's and checkpoint document's bytes, Python memory held after ``gc.collect()``
   (tracemalloc; and how much of it the ingester's set of files warned about as too old
   holds) and pyarrow's. Same code as ``tests/ingest/test_files_bounded.py``.

One line per figure on stdout; JSON with ``--out`` (e.g. ``benchmarks/results/file_ingest.json``).
The load average is printed at the start and end of each part (2 shared cores).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from report import progress, run_facts

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the record's rounds live with their test

import carbonlite as cl  # noqa: E402
from carbonlite.ingest.files import FileIngester  # noqa: E402
from tests.ingest.test_files_bounded import RoundFigures, run_rounds  # noqa: E402

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us")),
        ("value", pa.float64()),
        ("name", pa.string()),
    ]
)
BATCH_ROWS = 100_000
"""The ingester's default ``max_batch_rows``: the baseline groups files the same way."""
THROUGHPUT_TARGET = 0.8
LATENCY_TARGET_S = 1.5
LATENCY_ROWS = 1_000
WARM_UP = 5
RECORD_AGE = 1_000
RECORD_ROUNDS = 10


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def rows_of(start: int, n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n, dtype=np.int64)
    names = np.char.add("user-", rng.integers(0, 100_000, n).astype(str))
    return pa.Table.from_arrays(
        [
            pa.array(ids),
            pa.array(1_700_000_000_000_000 + ids * 1_000, pa.timestamp("us")),
            pa.array(rng.normal(size=n)),
            pa.array(names.tolist(), pa.string()),
        ],
        schema=SCHEMA,
    )


def write_source(folder: Path, files: int, rows: int) -> list[Path]:
    folder.mkdir()
    paths = []
    for i in range(files):
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(rows_of(i * rows, rows, seed=i), path, compression="zstd")
        paths.append(path)
        if (i + 1) % 200 == 0:
            progress(f"wrote {i + 1:,} of {files:,} source files")
    return paths


def groups_of(paths: list[Path], rows: int) -> list[list[Path]]:
    """Files as the ingester commits them: until their rows reach ``BATCH_ROWS``."""
    per = max(1, -(-BATCH_ROWS // rows))
    return [paths[i : i + per] for i in range(0, len(paths), per)]


# --- 1. throughput ------------------------------------------------------------------------------


def grouped_appends(table: cl.Table, groups: list[list[Path]]) -> None:
    for group in groups:
        table.append(pa.concat_tables([pq.read_table(p) for p in group]))


def per_file_appends(table: cl.Table, paths: list[Path]) -> None:
    for p in paths:
        table.append(pq.read_table(p))


def ingest(table: cl.Table, source: Path) -> None:
    result = FileIngester(table, str(source)).run(stop_at_end=True)
    assert result.bad_files == 0 and result.pending == 0, result


def timed(folder: Path, name: str, call: Callable[[cl.Table], None], expect: int) -> float:
    path = folder / name
    table = cl.create_table(str(path), SCHEMA)
    started = time.perf_counter()
    call(table)
    seconds = time.perf_counter() - started
    assert table.refresh().count_rows() == expect, (name, table.count_rows(), expect)
    shutil.rmtree(path)
    return seconds


def throughput(folder: Path, files: int, rows: int, repeat: int) -> dict[str, Any]:
    source = folder / "source"
    paths = write_source(source, files, rows)
    groups = groups_of(paths, rows)
    total = files * rows
    contenders: dict[str, Callable[[cl.Table], None]] = {
        "grouped_appends": lambda t: grouped_appends(t, groups),
        "per_file_appends": lambda t: per_file_appends(t, paths),
        "ingester": lambda t: ingest(t, source),
    }
    seconds: dict[str, list[float]] = {k: [] for k in contenders}
    load_start = load()
    for r in range(repeat):
        order = list(contenders)
        if r % 2:  # alternate who goes first
            order.reverse()
        for name in order:
            seconds[name].append(timed(folder, f"{name}-{r}", contenders[name], total))
            progress(f"repeat {r + 1}: {name} {seconds[name][-1]:.2f} s")
    best = {k: min(v) for k, v in seconds.items()}
    return {
        "files": files,
        "rows_per_file": rows,
        "source_bytes": sum(p.stat().st_size for p in paths),
        "files_per_group": len(groups[0]),
        "seconds": seconds,
        "rows_per_s": {k: total / v for k, v in best.items()},
        "ratio_vs_grouped": best["grouped_appends"] / best["ingester"],
        "ratio_vs_per_file": best["per_file_appends"] / best["ingester"],
        "load_start": load_start,
        "load_end": load(),
    }


# --- 2. latency ---------------------------------------------------------------------------------


def latency(folder: Path, files: int, seed: int = 28) -> dict[str, Any]:
    source = folder / "latency-source"
    source.mkdir()
    schema = pa.schema([*SCHEMA, ("_file_path", pa.string())])
    table = cl.create_table(str(folder / "latency-table"), schema)
    ingester = FileIngester(table, str(source))
    renamed: dict[str, float] = {}
    seen: dict[str, float] = {}
    done = threading.Event()

    def write() -> None:
        rng = random.Random(seed)
        for i in range(files):
            time.sleep(rng.uniform(0.2, 0.5))
            name = f"part-{i:05d}.parquet"
            pq.write_table(rows_of(i * LATENCY_ROWS, LATENCY_ROWS, seed=i), source / f".{name}")
            os.rename(source / f".{name}", source / name)
            renamed[name] = time.monotonic()

    def read() -> None:
        reader = cl.open_table(str(folder / "latency-table"))
        version = reader.snapshot().version
        while not done.is_set() or len(seen) < files:
            time.sleep(0.02)
            if reader.refresh().snapshot().version == version:
                continue
            version = reader.snapshot().version
            paths = pc.unique(reader.to_arrow(columns=["_file_path"]).column("_file_path"))
            now = time.monotonic()
            for p in paths.to_pylist():
                seen.setdefault(p, now)

    load_start = load()
    ingesting = threading.Thread(target=ingester.run, name="ingester")
    reading = threading.Thread(target=read, name="reader")
    ingesting.start()
    reading.start()
    write()
    done.set()
    reading.join(timeout=60)
    ingester.stop()
    ingesting.join(timeout=60)
    assert len(seen) == files, (len(seen), files)
    assert table.refresh().count_rows() == files * LATENCY_ROWS
    order = sorted(renamed, key=renamed.get)  # type: ignore[arg-type]
    waits = [seen[n] - renamed[n] for n in order[WARM_UP:]]
    cut = statistics.quantiles(waits, n=100, method="inclusive")
    return {
        "files": files,
        "warm_up_files": WARM_UP,
        "rows_per_file": LATENCY_ROWS,
        "commits": ingester.result.commits,
        "p50_s": statistics.median(waits),
        "p90_s": cut[89],
        "p99_s": cut[98],
        "max_s": max(waits),
        "min_s": min(waits),
        "load_start": load_start,
        "load_end": load(),
    }


# --- 3. the record ------------------------------------------------------------------------------


def record(folder: Path, files: int) -> dict[str, Any]:
    per_round = files // RECORD_ROUNDS
    load_start = load()

    def report(f: RoundFigures) -> None:
        progress(
            f"{f.files:,} files: record {f.record_rows:,} rows / {f.record_bytes:,} bytes, "
            f"log version {f.log_version_bytes:,} bytes, traced {f.traced_bytes / 1e6:.2f} MB, "
            f"{f.seconds:.1f} s"
        )

    rounds = run_rounds(
        folder / "record",
        rounds=RECORD_ROUNDS,
        per_round=per_round,
        max_file_age=RECORD_AGE,
        long_lived=True,
        report=report,
    )
    return {
        "files": files,
        "max_file_age_s": RECORD_AGE,
        "largest_record_rows": rounds.largest_record,
        "rounds": rounds.as_dicts(),
        "behind_horizon_at_end": rounds.results[-1].behind_horizon,
        "load_start": load_start,
        "load_end": load(),
    }


def print_throughput(t: dict[str, Any], repeat: int) -> None:
    rate = t["rows_per_s"]
    print(
        f"throughput, {t['files']:,} files x {t['rows_per_file']:,} rows, best of {repeat} "
        f"(load {t['load_start'][0]:.2f} -> {t['load_end'][0]:.2f}):"
    )
    print(
        f"  grouped appends ({t['files_per_group']} files each): "
        f"{rate['grouped_appends']:,.0f} rows/s"
    )
    print(f"  per-file appends: {rate['per_file_appends']:,.0f} rows/s")
    print(f"  ingester: {rate['ingester']:,.0f} rows/s")
    verdict = "yes" if t["ratio_vs_grouped"] >= THROUGHPUT_TARGET else "NO"
    print(
        f"  ingester / grouped appends: {t['ratio_vs_grouped']:.2f}x "
        f"(target >= {THROUGHPUT_TARGET}x: {verdict})"
    )
    print(f"  ingester / per-file appends: {t['ratio_vs_per_file']:.2f}x")


def print_latency(lat: dict[str, Any]) -> None:
    print(
        f"latency, rename -> readable, {lat['files'] - WARM_UP} files after {WARM_UP} warm-up, "
        f"{lat['commits']} commits (load {lat['load_start'][0]:.2f} -> "
        f"{lat['load_end'][0]:.2f}):"
    )
    for key in ("p50", "p90", "p99", "max"):
        print(f"  {key}: {lat[key + '_s'] * 1000:,.0f} ms")
    verdict = "yes" if lat["p50_s"] < LATENCY_TARGET_S else "NO"
    print(f"  p50 < {LATENCY_TARGET_S} s: {verdict}")


def print_record(rec: dict[str, Any]) -> None:
    print(
        f"record, {rec['files']:,} files, max_file_age {RECORD_AGE} s "
        f"(load {rec['load_start'][0]:.2f} -> {rec['load_end'][0]:.2f}), largest record "
        f"{rec['largest_record_rows']:,} rows:"
    )
    for f in rec["rounds"]:
        print(
            f"  {f['files']:>7,} files: record {f['record_rows']:,} rows, "
            f"{f['record_bytes']:,} bytes; log version {f['log_version_bytes']:,} bytes; "
            f"checkpoint {f['checkpoint_bytes']:,} bytes; Python memory "
            f"{f['traced_bytes'] / 1e6:.2f} MB, pyarrow {f['arrow_bytes'] / 1e6:.2f} MB; "
            f"{f['seconds']:.1f} s"
        )
    print(
        f"  files behind the record's horizon at the last listing (ingested, forgotten): "
        f"{rec['behind_horizon_at_end']:,}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1_000)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs (best reported)")
    parser.add_argument("--latency-files", type=int, default=100)
    parser.add_argument("--record-files", type=int, default=100_000)
    parser.add_argument("--skip-record", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-files-"))
    result: dict[str, Any] = {**run_facts(), "load_start": load()}
    print(f"load average at start: {result['load_start']}")
    try:
        progress("throughput")
        result["throughput"] = throughput(folder, args.files, args.rows, args.repeat)
        print_throughput(result["throughput"], args.repeat)
        progress("latency")
        result["latency"] = latency(folder, args.latency_files)
        print_latency(result["latency"])
        if not args.skip_record:
            progress("record")
            result["record"] = record(folder, args.record_files)
            print_record(result["record"])
    finally:
        result["load_end"] = load()
        shutil.rmtree(folder, ignore_errors=True)
    print(f"load average at end: {result['load_end']}")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
