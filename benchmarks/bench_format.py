"""Benchmark the blocklet file format against Parquet, measured in one run.

    python benchmarks/bench_format.py [--rows N] [--repeat K] [--output PATH]

Every number is the best of ``--repeat`` runs (default 3), and the runs of the things being
compared are interleaved, so that a noisy shared machine disturbs both sides alike. Results
are reported as ratios against a baseline measured in the same run: absolute MB/s on another
machine (or another minute on this one) mean little.

What is measured (MB = 10**6 bytes of uncompressed Arrow data, ``table.nbytes``):

1. write: ``BlockletFileWriter(path, schema).write(table)`` + ``close()`` (fsync included) vs
   ``pyarrow.parquet.write_table(table, path, compression="zstd")``;
2. read all: ``BlockletFileReader(path).read_all()`` vs ``pyarrow.parquet.read_table(path)``;
3. read one column of six, for each column, vs reading all six;
4. file sizes;
5. a blocklet size sweep (rows per blocklet) of write and read-all throughput and file size;
6. page encodings: a one-column IPC message compressed as a whole with zstd (the format's
   choice) vs an IPC stream per page with Arrow's own per-buffer zstd compression.

Files live in a temporary directory on local disk; reads run against a warm page cache (the
files were just written), for both formats alike. Results are printed as markdown and written
to ``benchmarks/results/format.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from datagen import event_table
from report import yes_no

import carbonlite
from carbonlite.format import DEFAULT_BLOCKLET_ROWS, BlockletFileReader, BlockletFileWriter

MB = 1_000_000
RESULTS = Path(__file__).resolve().parent / "results" / "format.json"
SWEEP_ROWS = (16_384, 32_768, 65_536, 131_072, 262_144)
ENCODING_LEVELS = (1, 3)
ENCODING_THREADS = 2
ONE_COLUMN_TARGET = 3.0


# --- timing ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timing:
    """Best wall-clock seconds, and best CPU seconds of the whole process (all threads)."""

    wall: float
    cpu: float


def best_times(
    cases: dict[str, Callable[[], object]],
    *,
    repeat: int,
    before: Callable[[str], None] | None = None,
) -> dict[str, Timing]:
    """Best times of each case over ``repeat`` rounds, the cases interleaved in each round.

    ``before(name)`` runs untimed ahead of each timed call (to delete a file, say). CPU time is
    far less disturbed than wall time by other processes on a shared machine, so it is kept as
    a second opinion where the question is "which costs less work".
    """
    wall = dict.fromkeys(cases, math.inf)
    cpu = dict.fromkeys(cases, math.inf)
    for _ in range(repeat):
        for name, fn in cases.items():
            if before is not None:
                before(name)
            start, start_cpu = time.perf_counter(), time.process_time()
            result = fn()
            elapsed, elapsed_cpu = time.perf_counter() - start, time.process_time() - start_cpu
            del result
            wall[name] = min(wall[name], elapsed)
            cpu[name] = min(cpu[name], elapsed_cpu)
    return {name: Timing(wall[name], cpu[name]) for name in cases}


def mb_per_s(nbytes: int, seconds: float) -> float:
    return nbytes / MB / seconds


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def remove(path: Path) -> None:
    path.unlink(missing_ok=True)


# --- the operations being timed --------------------------------------------------------------


def write_carbonlite(table: pa.Table, path: Path, max_rows: int = DEFAULT_BLOCKLET_ROWS) -> int:
    """Write ``table`` as one blocklet file (fsynced by ``close``); returns the blocklet count."""
    writer = BlockletFileWriter(path, table.schema)
    try:
        return len(writer.write(table, max_rows=max_rows))
    finally:
        writer.close()


def read_carbonlite(path: Path, columns: list[str] | None = None) -> pa.Table:
    with BlockletFileReader(path) as reader:
        return reader.read_all(columns=columns)


def write_parquet(table: pa.Table, path: Path, *, fsync: bool = False) -> None:
    pq.write_table(table, path, compression="zstd")
    if fsync:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_parquet(path: Path, columns: list[str] | None = None) -> pa.Table:
    return pq.read_table(path, columns=columns)


# --- 1, 2, 4: write, read all, file sizes ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class VersusParquet:
    """Our throughput and Parquet's, in MB/s of Arrow data, and ours / Parquet's.

    ``ratio`` (wall time) is what the target is about; ``cpu_ratio`` compares the CPU time
    both spent, which says how much work each does per byte and moves less with the load.
    """

    carbonlite_mb_s: float
    parquet_mb_s: float
    ratio: float
    cpu_ratio: float
    target: float
    met: bool


def versus(nbytes: int, ours: Timing, parquet: Timing, target: float = 1.0) -> VersusParquet:
    ratio = parquet.wall / ours.wall  # a speed ratio: the inverse of the time ratio
    return VersusParquet(
        carbonlite_mb_s=mb_per_s(nbytes, ours.wall),
        parquet_mb_s=mb_per_s(nbytes, parquet.wall),
        ratio=ratio,
        cpu_ratio=parquet.cpu / ours.cpu,
        target=target,
        met=ratio >= target,
    )


def bench_write_read(table: pa.Table, tmp: Path, repeat: int) -> dict[str, Any]:
    ours, theirs = tmp / "events.cblt", tmp / "events.parquet"
    synced = tmp / "events-fsync.parquet"
    paths = {"carbonlite": ours, "parquet": theirs, "parquet_fsync": synced}
    writes = best_times(
        {
            "carbonlite": lambda: write_carbonlite(table, ours),
            "parquet": lambda: write_parquet(table, theirs),
            "parquet_fsync": lambda: write_parquet(table, synced, fsync=True),
        },
        repeat=repeat,
        before=lambda name: remove(paths[name]),
    )
    check = read_carbonlite(ours)
    if not check.equals(table):
        raise AssertionError("the blocklet file does not read back equal to the table written")
    del check
    reads = best_times(
        {"carbonlite": lambda: read_carbonlite(ours), "parquet": lambda: read_parquet(theirs)},
        repeat=repeat,
    )
    nbytes = table.nbytes
    return {
        "write": asdict(versus(nbytes, writes["carbonlite"], writes["parquet"])),
        "write_parquet_fsync_mb_s": mb_per_s(nbytes, writes["parquet_fsync"].wall),
        "read_all": asdict(versus(nbytes, reads["carbonlite"], reads["parquet"])),
        "seconds": {
            "write": {k: asdict(v) for k, v in writes.items()},
            "read_all": {k: asdict(v) for k, v in reads.items()},
        },
        "file_bytes": {"carbonlite": ours.stat().st_size, "parquet": theirs.stat().st_size},
    }


# --- 3: one column of six --------------------------------------------------------------------


def bench_one_column(table: pa.Table, tmp: Path, repeat: int) -> dict[str, Any]:
    """Time reading each column alone against reading all of them (the same file as above)."""
    ours, theirs = tmp / "events.cblt", tmp / "events.parquet"
    cases: dict[str, Callable[[], object]] = {
        "*carbonlite": lambda: read_carbonlite(ours),
        "*parquet": lambda: read_parquet(theirs),
    }
    for name in table.column_names:
        cases[f"carbonlite:{name}"] = partial(read_carbonlite, ours, [name])
        cases[f"parquet:{name}"] = partial(read_parquet, theirs, [name])
    times = {name: t.wall for name, t in best_times(cases, repeat=repeat).items()}
    columns = {}
    for name in table.column_names:
        seconds = times[f"carbonlite:{name}"]
        columns[name] = {
            "arrow_mb": table.column(name).nbytes / MB,
            "seconds": seconds,
            "speedup": times["*carbonlite"] / seconds,
            "parquet_speedup": times["*parquet"] / times[f"parquet:{name}"],
        }
    speedups = [c["speedup"] for c in columns.values()]
    return {
        "all_columns_seconds": times["*carbonlite"],
        "columns": columns,
        "geomean_speedup": geomean(speedups),
        "parquet_geomean_speedup": geomean([c["parquet_speedup"] for c in columns.values()]),
        "target": ONE_COLUMN_TARGET,
        "columns_meeting_target": sorted(
            n for n, c in columns.items() if c["speedup"] >= ONE_COLUMN_TARGET
        ),
    }


# --- 5: blocklet size sweep ------------------------------------------------------------------


def bench_sweep(table: pa.Table, tmp: Path, repeat: int) -> dict[str, Any]:
    paths = {rows: tmp / f"sweep-{rows}.cblt" for rows in SWEEP_ROWS}
    counts: dict[int, int] = {}

    def write(rows: int) -> None:
        counts[rows] = write_carbonlite(table, paths[rows], max_rows=rows)

    writes = best_times(
        {str(rows): partial(write, rows) for rows in SWEEP_ROWS},
        repeat=repeat,
        before=lambda name: remove(paths[int(name)]),
    )
    reads = best_times(
        {str(rows): partial(read_carbonlite, paths[rows]) for rows in SWEEP_ROWS},
        repeat=repeat,
    )
    base = str(DEFAULT_BLOCKLET_ROWS)
    out = {}
    for rows in SWEEP_ROWS:
        key = str(rows)
        out[key] = {
            "blocklets": counts[rows],
            "write_mb_s": mb_per_s(table.nbytes, writes[key].wall),
            "read_all_mb_s": mb_per_s(table.nbytes, reads[key].wall),
            "write_vs_default": writes[base].wall / writes[key].wall,
            "read_vs_default": reads[base].wall / reads[key].wall,
            # CPU seconds are the steadier measure of work on a shared machine.
            "write_cpu_vs_default": writes[base].cpu / writes[key].cpu,
            "read_cpu_vs_default": reads[base].cpu / reads[key].cpu,
            "file_bytes": paths[rows].stat().st_size,
        }
        remove(paths[rows])
    return out


# --- 6: page encodings -----------------------------------------------------------------------

Page = tuple[pa.Array, pa.Schema]
"""One column of one batch, and the column's one-field schema."""

_local = threading.local()
_NO_THREADS_READ = pa.ipc.IpcReadOptions(use_threads=False)
_IPC_END_MARKER = 8  # bytes of the end-of-stream marker an IPC stream closes with


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    """One compressor per thread and level: a ZstdCompressor must not be shared by threads."""
    cache: dict[int, zstandard.ZstdCompressor] = _local.__dict__.setdefault("compressors", {})
    if level not in cache:
        cache[level] = zstandard.ZstdCompressor(level=level, write_content_size=True)
    return cache[level]


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    if not hasattr(_local, "decompressor"):
        _local.decompressor = zstandard.ZstdDecompressor()
    decompressor: zstandard.ZstdDecompressor = _local.decompressor
    return decompressor


@cache
def _ipc_options(level: int) -> pa.ipc.IpcWriteOptions:
    return pa.ipc.IpcWriteOptions(
        compression=pa.Codec("zstd", compression_level=level), use_threads=False
    )


@dataclass(frozen=True, slots=True)
class WholePageZstd:
    """(a) The format's page: a one-column IPC record-batch message, zstd as one frame.

    (The writer also stores a page raw when zstd saves less than 1/32 of it; here every page
    is compressed, as in (b).)
    """

    level: int
    name: str = "whole_page_zstd"

    def encode(self, page: Page) -> bytes:
        array, schema1 = page
        raw = pa.RecordBatch.from_arrays([array], schema=schema1).serialize()
        return _zstd_compressor(self.level).compress(raw)

    def decode(self, blob: bytes, schema1: pa.Schema) -> pa.Array:
        raw = _zstd_decompressor().decompress(blob)
        return pa.ipc.read_record_batch(pa.py_buffer(raw), schema1).column(0)


@dataclass(frozen=True, slots=True)
class IpcBufferZstd:
    """(b) An IPC stream per page (schema, batch, end marker) with Arrow's per-buffer zstd.

    ``use_threads=False`` on both sides: the benchmark's pool is the only parallelism, as in
    the writer and reader.
    """

    level: int
    name: str = "ipc_buffer_zstd"

    def encode(self, page: Page) -> pa.Buffer:
        array, schema1 = page
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema1, options=_ipc_options(self.level)) as writer:
            writer.write_batch(pa.RecordBatch.from_arrays([array], schema=schema1))
        return sink.getvalue()

    def decode(self, blob: pa.Buffer, schema1: pa.Schema) -> pa.Array:
        return pa.ipc.open_stream(blob, options=_NO_THREADS_READ).read_next_batch().column(0)


Encoding = WholePageZstd | IpcBufferZstd


def pages_of(table: pa.Table, rows: int) -> list[tuple[str, Page]]:
    """Every column of every ``rows``-row batch, named, with its one-field schema."""
    schemas1 = {f.name: pa.schema([f]) for f in table.schema}
    return [
        (name, (batch.column(name), schemas1[name]))
        for batch in table.to_batches(max_chunksize=rows)
        for name in table.column_names
    ]


def blob_size(blob: bytes | pa.Buffer) -> int:
    return blob.size if isinstance(blob, pa.Buffer) else len(blob)


def measure_encodings(
    encodings: Sequence[Encoding],
    named_pages: list[tuple[str, Page]],
    pool: ThreadPoolExecutor,
    repeat: int,
) -> dict[str, dict[str, Any]]:
    """Encode and decode every page on ``pool`` with each encoding, the runs interleaved.

    Returns, by encoding name, encode and decode MB/s and the encoded sizes; checks that
    every page round-trips first (untimed).
    """
    names = [name for name, _ in named_pages]
    pages = [page for _, page in named_pages]
    schemas1 = [schema1 for _, schema1 in pages]
    raw_bytes = sum(array.nbytes for array, _ in pages)
    blobs = {e.name: list(pool.map(e.encode, pages)) for e in encodings}
    cases: dict[str, Callable[[], object]] = {}
    for e in encodings:
        decoded = pool.map(e.decode, blobs[e.name], schemas1)
        for (array, _), back in zip(pages, decoded, strict=True):
            if not back.equals(array):
                raise AssertionError(f"{e.name} does not round-trip")
        cases[f"{e.name}:encode"] = partial(_map_all, pool, e.encode, pages)
        cases[f"{e.name}:decode"] = partial(_map_all, pool, e.decode, blobs[e.name], schemas1)
    times = best_times(cases, repeat=repeat)
    out = {}
    for e in encodings:
        by_column = dict.fromkeys(names, 0)
        for name, blob in zip(names, blobs[e.name], strict=True):
            by_column[name] += blob_size(blob)
        out[e.name] = {
            "encode_mb_s": mb_per_s(raw_bytes, times[f"{e.name}:encode"].wall),
            "decode_mb_s": mb_per_s(raw_bytes, times[f"{e.name}:decode"].wall),
            "encode_mb_per_cpu_s": mb_per_s(raw_bytes, times[f"{e.name}:encode"].cpu),
            "decode_mb_per_cpu_s": mb_per_s(raw_bytes, times[f"{e.name}:decode"].cpu),
            "bytes": sum(by_column.values()),
            "bytes_by_column": by_column,
        }
    return out


def _map_all(pool: ThreadPoolExecutor, fn: Callable[..., Any], *iterables: Any) -> list[Any]:
    return list(pool.map(fn, *iterables))


def bench_encodings(table: pa.Table, repeat: int) -> dict[str, Any]:
    """(a) whole-page zstd vs (b) Arrow's per-buffer IPC zstd, at each level."""
    named_pages = pages_of(table, DEFAULT_BLOCKLET_ROWS)
    # Each (b) page repeats its column's schema message and ends with an end marker.
    schema_overhead = sum(
        schema1.serialize().size + _IPC_END_MARKER for _, (_, schema1) in named_pages
    )
    out: dict[str, Any] = {
        "threads": ENCODING_THREADS,
        "pages": len(named_pages),
        "arrow_bytes": sum(array.nbytes for _, (array, _) in named_pages),
    }
    with ThreadPoolExecutor(ENCODING_THREADS) as pool:
        for level in ENCODING_LEVELS:
            measured = measure_encodings(
                [WholePageZstd(level), IpcBufferZstd(level)], named_pages, pool, repeat
            )
            a, b = measured["whole_page_zstd"], measured["ipc_buffer_zstd"]
            b["bytes_without_schema_messages"] = b["bytes"] - schema_overhead
            out[f"level_{level}"] = {
                **measured,
                "whole_vs_ipc": {
                    "encode_speed_ratio": a["encode_mb_s"] / b["encode_mb_s"],
                    "decode_speed_ratio": a["decode_mb_s"] / b["decode_mb_s"],
                    "encode_cpu_ratio": a["encode_mb_per_cpu_s"] / b["encode_mb_per_cpu_s"],
                    "decode_cpu_ratio": a["decode_mb_per_cpu_s"] / b["decode_mb_per_cpu_s"],
                    "size_ratio": a["bytes"] / b["bytes"],
                    "size_ratio_without_schema_messages": (
                        a["bytes"] / b["bytes_without_schema_messages"]
                    ),
                },
            }
    return out


# --- report ----------------------------------------------------------------------------------


def markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    main, one = results["write_read"], results["one_column"]
    nbytes = env["arrow_bytes"]
    lines = [
        f"{env['rows']:,} rows, {nbytes / MB:.1f} MB of Arrow data; best of {env['repeat']}; "
        f"{env['cpu_count']} CPUs; pyarrow {env['pyarrow']}; MB = 10^6 bytes of Arrow data; "
        f"load average {env['load_average_at_start']} at start, {env['load_average_at_end']} "
        "at end.",
        "",
        "| measurement | CarbonLite | Parquet (zstd) | ours / Parquet | target | met | "
        "ours / Parquet by CPU time |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for key, label in (("write", "write MB/s"), ("read_all", "read all MB/s")):
        r = main[key]
        lines.append(
            f"| {label} | {r['carbonlite_mb_s']:.0f} | {r['parquet_mb_s']:.0f} | "
            f"{r['ratio']:.2f}x | >= {r['target']:.1f}x | {yes_no(r['met'])} | "
            f"{r['cpu_ratio']:.2f}x |"
        )
    sizes = main["file_bytes"]
    lines += [
        f"| file size MB | {sizes['carbonlite'] / MB:.1f} | {sizes['parquet'] / MB:.1f} | "
        f"{sizes['carbonlite'] / sizes['parquet']:.2f}x | - | - | - |",
        "",
        f"Parquet write with an fsync added (context only): "
        f"{main['write_parquet_fsync_mb_s']:.0f} MB/s.",
        "",
        "Read one column of six (speedup = time to read all six / time to read the one):",
        "",
        "| column | Arrow MB | time ms | speedup | target >= 3x | Parquet's own speedup |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for name, c in one["columns"].items():
        lines.append(
            f"| {name} | {c['arrow_mb']:.0f} | {c['seconds'] * 1000:.0f} | "
            f"{c['speedup']:.1f}x | {yes_no(c['speedup'] >= one['target'])} | "
            f"{c['parquet_speedup']:.1f}x |"
        )
    lines += [
        f"| geometric mean | | | {one['geomean_speedup']:.1f}x | "
        f"{yes_no(one['geomean_speedup'] >= one['target'])} | "
        f"{one['parquet_geomean_speedup']:.1f}x |",
        "",
        "Blocklet size sweep (`write(table, max_rows=...)`); ratios are speed against the "
        "default 65,536, by wall time and by CPU time:",
        "",
        "| rows per blocklet | blocklets | write MB/s | read all MB/s | write vs default "
        "(wall, CPU) | read vs default (wall, CPU) | file MB |",
        "|---:|---:|---:|---:|---|---|---:|",
    ]
    for rows, s in results["blocklet_sweep"].items():
        lines.append(
            f"| {int(rows):,} | {s['blocklets']} | {s['write_mb_s']:.0f} | "
            f"{s['read_all_mb_s']:.0f} | {s['write_vs_default']:.2f}x, "
            f"{s['write_cpu_vs_default']:.2f}x | {s['read_vs_default']:.2f}x, "
            f"{s['read_cpu_vs_default']:.2f}x | {s['file_bytes'] / MB:.1f} |"
        )
    enc = results["page_encoding"]
    lines += [
        "",
        f"Page encodings, every column of every 65,536-row batch ({enc['pages']} pages), "
        f"{enc['threads']}-thread pool: (a) whole-page zstd of the IPC message, "
        "(b) an IPC stream per page with Arrow's per-buffer zstd:",
        "",
        "| level | encoding | encode MB/s | encode MB/CPU-s | decode MB/s | decode MB/CPU-s | "
        "size MB |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for level in ENCODING_LEVELS:
        r = enc[f"level_{level}"]
        for method, label in (
            ("whole_page_zstd", "(a) whole page"),
            ("ipc_buffer_zstd", "(b) IPC"),
        ):
            m = r[method]
            lines.append(
                f"| {level} | {label} | {m['encode_mb_s']:.0f} | {m['encode_mb_per_cpu_s']:.0f} | "
                f"{m['decode_mb_s']:.0f} | {m['decode_mb_per_cpu_s']:.0f} | "
                f"{m['bytes'] / MB:.2f} |"
            )
    lines += [
        "",
        "| level | (a)/(b) encode speed (wall, CPU) | (a)/(b) decode speed (wall, CPU) | "
        "(a)/(b) size | (a)/(b) size without (b)'s per-page schema messages |",
        "|---:|---|---|---:|---:|",
    ]
    for level in ENCODING_LEVELS:
        c = enc[f"level_{level}"]["whole_vs_ipc"]
        lines.append(
            f"| {level} | {c['encode_speed_ratio']:.2f}x, {c['encode_cpu_ratio']:.2f}x | "
            f"{c['decode_speed_ratio']:.2f}x, {c['decode_cpu_ratio']:.2f}x | "
            f"{c['size_ratio']:.4f} | {c['size_ratio_without_schema_messages']:.4f} |"
        )
    return "\n".join(lines)


def environment(table: pa.Table, rows: int, repeat: int) -> dict[str, Any]:
    return {
        "rows": rows,
        "arrow_bytes": table.nbytes,
        "repeat": repeat,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "zstandard": zstandard.__version__,
        "carbonlite": carbonlite.__version__,
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_average_at_start": load_average(),
    }


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages: how busy the shared machine was."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def run(rows: int, repeat: int) -> dict[str, Any]:
    table = event_table(rows)
    results: dict[str, Any] = {"environment": environment(table, rows, repeat)}
    with tempfile.TemporaryDirectory(prefix="carbonlite-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        results["write_read"] = bench_write_read(table, tmp, repeat)
        results["one_column"] = bench_one_column(table, tmp, repeat)
        results["blocklet_sweep"] = bench_sweep(table, tmp, repeat)
    results["page_encoding"] = bench_encodings(table, repeat)
    results["environment"]["load_average_at_end"] = load_average()
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000, help="rows of data (5,000,000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (3)")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args(argv)
    results = run(args.rows, args.repeat)
    print(markdown(results))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
