"""Metadata at scale: costs that stay flat with a million blocklets and a year of commits.

    python benchmarks/bench_scale.py [--quick] [--sizes 1000,100000,1000000]
        [--commits N] [--skip-year] [--spark] [--workdir DIR] [--rebuild] [--output PATH]

Ratios within one run (the machine is small and shared), as in the other benchmarks:

a. open + pruned plan + read of 100 rows: ``open_table(path)`` then ``to_arrow(filter=...)``
   with two filters on ``id``: *clustered*, one 100-row range (one manifest may match), and
   *spread*, ten 10-row ranges spread over the table (every manifest may match and is read),
   on tables of 1k, 100k and 1M blocklets (10 rows each, appended 10,000
   rows at a time, default checkpoint interval), the same schema; each size measured in a
   fresh child process (median of 5 opens, every one a new ``Table``, so manifests are read
   again), with the child's peak RSS beyond a child that only imports carbonlite. Targets:
   100k <= 5x of 1k and under 0.5 s; 1M under 2 s with under 500 MB of peak memory.
b. mean latency of 100 appends of 100 rows (10 blocklets each; one checkpoint among them)
   to a copy of the 1k table and of the 100k table, interleaved call by call. Target: 100k
   <= 1.5x of 1k.
c. a simulated year of one-minute micro-batches (``--commits``, default 525,600; ``--quick``
   3,000): each commit appends 60 rows (two blocklets); every 60 commits (an hour) the
   streaming segment is finished, handed off and minor compaction runs; every 1,440 commits
   (a day) ``clean`` runs; every week major compaction (``major_compaction_size`` 32 MB, so
   the number of live segments follows the data volume, one per ~10 days here). Wall-clock time is compressed, so the retention is in wall seconds:
   ``log_retention`` and the data retention are both 30 s (about three simulated days at this
   machine's pace). After each simulated day: median open time of 3, files and bytes under
   ``_carbonlite/`` (log, checkpoints, manifests) and under ``segments/``, live segments and
   blocklets, and the checkpoint and manifest bytes written that day per commit. Targets:
   open time at the end within 2x of after the first day; directories and state bounded;
   metadata bytes written per commit flat. Plot: ``docs/scale-year.png``.
d. ``--spark``: ``spark.read.format("carbonlite").load(path).where(<100-row range>)
   .collect()`` on the largest table, median of 3 after one warm-up. Target: not slower than
   the same size's open target (2 s for 1M blocklets).

Results: markdown on stdout, JSON in ``benchmarks/results/scale.json`` (``scale-quick.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from report import PEAK_RSS, progress, yes_no

import carbonlite as cl

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = pa.schema(
    [("id", pa.int64()), ("ts", pa.timestamp("us")), ("key", pa.string()), ("value", pa.float64())]
)
BLOCKLET_ROWS = 10
APPEND_ROWS = 10_000
T0_US = 1_767_225_600_000_000
APPEND_LATENCY_ROWS = 100
"""Rows per timed append (ten 10-row blocklets): small, so metadata costs show."""


def rows(first: int, n: int) -> pa.Table:
    ids = pa.array(range(first, first + n), pa.int64())
    return pa.table(
        {
            "id": ids,
            "ts": pa.array(
                [T0_US + i * 1_000 for i in range(first, first + n)], pa.timestamp("us")
            ),
            "key": [f"k{i % 97}" for i in range(first, first + n)],
            "value": pa.array([i * 0.5 for i in range(first, first + n)], pa.float64()),
        },
        schema=SCHEMA,
    )


# --- a. open + plan + read ---------------------------------------------------------------------


def build(path: Path, blocklets: int, rebuild: bool) -> float:
    """A table of ``blocklets`` blocklets (cached in ``path``); the build time (0 if cached)."""
    marker = path / "_built.json"
    if marker.exists() and not rebuild and json.loads(marker.read_text())["blocklets"] == blocklets:
        return 0.0
    shutil.rmtree(path, ignore_errors=True)
    start = time.perf_counter()
    t = cl.create_table(path, SCHEMA, properties={"blocklet_max_rows": str(BLOCKLET_ROWS)})
    total = blocklets * BLOCKLET_ROWS
    for first in range(0, total, APPEND_ROWS):
        t.append(rows(first, min(APPEND_ROWS, total - first)))
        if first // APPEND_ROWS % 100 == 99:
            progress(f"  built {first + APPEND_ROWS:,} rows of {total:,}")
    elapsed = time.perf_counter() - start
    marker.write_text(json.dumps({"blocklets": blocklets, "build_s": elapsed}))
    return elapsed


_CHILD = (
    """
import json, resource, statistics, sys, time
import pyarrow.compute as pc
import carbonlite as cl
path, total, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]

"""
    + PEAK_RSS
    + """


if mode == "clustered":  # 100 consecutive rows: one manifest may match
    first = total // 2
    filter = (pc.field("id") >= first) & (pc.field("id") < first + 100)
elif mode == "spread":  # 10 runs of 10 rows across the whole table: every manifest may match
    filter = None
    for k in range(10):
        first = k * (total // 10) + 5
        part = (pc.field("id") >= first) & (pc.field("id") < first + 10)
        filter = part if filter is None else filter | part
times = []
if mode != "baseline":
    for _ in range(5):
        start = time.perf_counter()
        t = cl.open_table(path)
        got = t.to_arrow(filter=filter)
        times.append(time.perf_counter() - start)
        assert got.num_rows == 100, got.num_rows
print(json.dumps({"times": times, "peak": peak_rss()}))
"""
)


def measure_open(path: Path, blocklets: int) -> dict[str, Any]:
    total = blocklets * BLOCKLET_ROWS
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }

    def child(mode: str) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path), str(total), mode],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    base = child("baseline")
    out: dict[str, Any] = {"blocklets": blocklets, "import_peak_bytes": base["peak"]}
    for mode in ("clustered", "spread"):
        result = child(mode)
        out[mode] = {
            "median_s": statistics.median(result["times"]),
            "first_s": result["times"][0],
            "times_s": result["times"],
            "peak_bytes": result["peak"],
            "peak_over_import_bytes": result["peak"] - base["peak"],
        }
    return out


# --- b. append latency ---------------------------------------------------------------------------


def append_latency(small: Path, large: Path, work: Path, appends: int = 100) -> dict[str, Any]:
    copies = {}
    for name, src in (("small", small), ("large", large)):
        dst = work / f"append-{name}"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        copies[name] = cl.open_table(dst)
    times: dict[str, list[float]] = {"small": [], "large": []}
    nexts = {name: t.count_rows() for name, t in copies.items()}
    for _ in range(appends):
        for name, t in copies.items():
            batch = rows(nexts[name], APPEND_LATENCY_ROWS)
            start = time.perf_counter()
            t.append(batch)
            times[name].append(time.perf_counter() - start)
            nexts[name] += APPEND_LATENCY_ROWS
    small_ms = statistics.mean(times["small"]) * 1000
    large_ms = statistics.mean(times["large"]) * 1000
    return {
        "appends": appends,
        "small_mean_ms": small_ms,
        "large_mean_ms": large_ms,
        "small_max_ms": max(times["small"]) * 1000,
        "large_max_ms": max(times["large"]) * 1000,
        "ratio": large_ms / small_ms,
    }


# --- c. a simulated year -------------------------------------------------------------------------


def _tree(path: Path) -> tuple[int, int]:
    files = size = 0
    for dirpath, _dirs, names in os.walk(path):
        for n in names:
            files += 1
            size += os.path.getsize(os.path.join(dirpath, n))
    return files, size


def _metadata_written(meta: Path, seen: set[str]) -> int:
    """Bytes of checkpoint documents and manifests that appeared since the last call."""
    new = 0
    for sub, suffix in (("log", ".checkpoint.json"), ("manifests", ".arrow")):
        directory = meta / sub
        if not directory.exists():
            continue
        for name in os.listdir(directory):
            if name.endswith(suffix) and name not in seen:
                seen.add(name)
                with contextlib.suppress(FileNotFoundError):  # cleaned meanwhile
                    new += (directory / name).stat().st_size
    return new


def simulate_year(path: Path, commits: int, *, per_day: int = 1440) -> dict[str, Any]:
    shutil.rmtree(path, ignore_errors=True)
    t = cl.create_table(
        path,
        SCHEMA,
        sort_columns=["ts"],
        properties={
            "blocklet_max_rows": "30",
            "log_retention": "30s",
            "deleted_data_retention": "30s",
            "major_compaction_size": "32MB",
        },
    )
    meta = path / "_carbonlite"
    seen: set[str] = set()
    samples = []
    start = time.perf_counter()
    n = 0
    day_commits = 0
    for c in range(commits):
        t.append(rows(n, 60))
        n += 60
        day_commits += 1
        if (c + 1) % 60 == 0:  # an hour
            t.finish_streaming()
            t.handoff()
            t.compact("minor")
        if (c + 1) % (7 * per_day) == 0:  # a week
            t.compact("major")
        if (c + 1) % per_day == 0 or c + 1 == commits:
            t.clean(30, force=True)
            opens = []
            for _ in range(3):
                s = time.perf_counter()
                opened = cl.open_table(path)
                opens.append(time.perf_counter() - s)
            snap = opened.snapshot()
            log_files, log_bytes = _tree(meta)
            data_files, data_bytes = _tree(path / "segments")
            written = _metadata_written(meta, seen)
            sample = {
                "day": (c + 1) / per_day,
                "commits": c + 1,
                "wall_s": time.perf_counter() - start,
                "open_s": statistics.median(opens),
                "meta_files": log_files,
                "meta_bytes": log_bytes,
                "manifests": len(snap.manifests.refs) if snap.manifests else 0,
                "data_files": data_files,
                "data_bytes": data_bytes,
                "segments": len(snap.segments),
                "live_blocklets": sum(s.num_blocklets for s in snap.live_segments()),
                "metadata_bytes_per_commit": written / max(day_commits, 1),
                "rows": snap.num_rows,
            }
            samples.append(sample)
            day_commits = 0
            progress(
                f"  day {sample['day']:.1f}: open {sample['open_s'] * 1000:.1f} ms, "
                f"_carbonlite {log_files} files / {log_bytes / 1e6:.2f} MB, "
                f"{sample['segments']} segments, "
                f"{sample['metadata_bytes_per_commit']:.0f} B/commit, {sample['wall_s']:.0f} s"
            )
    assert samples[-1]["rows"] == commits * 60
    return {"commits": commits, "samples": samples}


def plot_year(year: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = year["samples"]
    days = [x["day"] for x in s]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    axes[0][0].plot(days, [x["meta_files"] for x in s], label="files under _carbonlite/")
    axes[0][0].plot(days, [x["data_files"] for x in s], label="files under segments/")
    axes[0][0].set_title("files")
    axes[0][0].legend()
    axes[0][1].plot(days, [x["meta_bytes"] / 1e6 for x in s], label="metadata, _carbonlite/ (MB)")
    axes[0][1].plot(days, [x["data_bytes"] / 1e6 for x in s], label="data, segments/ (MB)")
    axes[0][1].set_title("bytes")
    axes[0][1].legend()
    axes[1][0].plot(days, [x["open_s"] * 1000 for x in s], label="open_table (ms)")
    axes[1][0].plot(days, [x["segments"] for x in s], label="segments in the state")
    axes[1][0].plot(days, [x["manifests"] for x in s], label="manifests listed")
    axes[1][0].set_title("open time and state")
    axes[1][0].legend()
    axes[1][1].plot(days, [x["metadata_bytes_per_commit"] for x in s])
    axes[1][1].set_title("checkpoint + manifest bytes written per commit")
    for ax in axes.flat:
        ax.set_xlabel("simulated day")
    fig.suptitle(
        f"CarbonLite, a simulated year of 1-minute micro-batches ({year['commits']:,} commits)"
    )
    fig.tight_layout()
    fig.savefig(out, dpi=80)


# --- d. Spark ------------------------------------------------------------------------------------


def spark_plan(path: Path, blocklets: int) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_spark import spark_session

    spark = spark_session()
    first = blocklets * BLOCKLET_ROWS // 2
    where = f"id >= {first} AND id < {first + 100}"
    times = []
    for _ in range(4):
        start = time.perf_counter()
        reader = spark.read.format("carbonlite").option("filterPushdown", "true")
        got = reader.load(str(path)).where(where).collect()
        times.append(time.perf_counter() - start)
        assert len(got) == 100
    spark.stop()
    return {"blocklets": blocklets, "median_s": statistics.median(times[1:]), "times_s": times}


# --- main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", default=None, help="blocklet counts, comma-separated")
    parser.add_argument("--commits", type=int, default=None)
    parser.add_argument("--skip-year", action="store_true")
    parser.add_argument("--skip-open", action="store_true")
    parser.add_argument("--spark", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "bench-scale")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--plot-dir", type=Path, default=ROOT / "docs")
    args = parser.parse_args()
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else ([1_000, 10_000] if args.quick else [1_000, 100_000, 1_000_000])
    )
    commits = args.commits or (3_000 if args.quick else 525_600)
    args.workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine": platform.platform(), "python": sys.version.split()[0]}

    if not args.skip_open:
        opens = {}
        for size in sizes:
            path = args.workdir / f"t{size}"
            progress(f"a. building {size:,} blocklets")
            built = build(path, size, args.rebuild)
            progress(f"a. measuring {size:,} blocklets")
            opens[size] = {**measure_open(path, size), "build_s": built}
        small, *rest = sizes
        print("\n### a. open + pruned plan + read of 100 rows\n")
        print("| blocklets | filter | median | first | x of 1k | peak RSS beyond import |")
        print("|---:|---|---:|---:|---:|---:|")
        for size in sizes:
            for mode in ("clustered", "spread"):
                r = opens[size][mode]
                r["ratio"] = r["median_s"] / opens[small][mode]["median_s"]
                print(
                    f"| {size:,} | {mode} | {r['median_s'] * 1000:.0f} ms | "
                    f"{r['first_s'] * 1000:.0f} ms | {r['ratio']:.1f}x | "
                    f"{r['peak_over_import_bytes'] / 1e6:.0f} MB |"
                )
        results["open"] = {str(k): v for k, v in opens.items()}
        for mode in ("clustered", "spread"):
            if 100_000 in opens:
                r = opens[100_000][mode]
                print(
                    f"\n100k ({mode}): <= 5x of 1k: {yes_no(r['ratio'] <= 5)}; "
                    f"under 0.5 s: {yes_no(r['median_s'] < 0.5)}"
                )
            if 1_000_000 in opens:
                r = opens[1_000_000][mode]
                print(
                    f"1M ({mode}): under 2 s: {yes_no(r['median_s'] < 2)}; under 500 MB: "
                    f"{yes_no(r['peak_over_import_bytes'] < 500e6)}"
                )
        if len(sizes) >= 2:
            progress("b. append latency")
            lat = append_latency(
                args.workdir / f"t{small}", args.workdir / f"t{rest[0]}", args.workdir
            )
            results["append"] = {**lat, "sizes": [small, rest[0]]}
            print("\n### b. mean append latency, 100 appends of 100 rows\n")
            print(f"| {small:,} blocklets | {rest[0]:,} blocklets | ratio | <= 1.5x |")
            print("|---:|---:|---:|:--:|")
            print(
                f"| {lat['small_mean_ms']:.1f} ms | {lat['large_mean_ms']:.1f} ms | "
                f"{lat['ratio']:.2f}x | {yes_no(lat['ratio'] <= 1.5)} |"
            )
        if args.spark:
            size = sizes[-1]
            progress(f"d. Spark plan of {size:,} blocklets")
            sp = spark_plan(args.workdir / f"t{size}", size)
            results["spark"] = sp
            print(f"\n### d. Spark: load + where + collect of 100 rows, {size:,} blocklets\n")
            print(
                f"median {sp['median_s']:.2f} s (in Python, open + plan + read at this size: "
                f"{opens[size]['clustered']['median_s']:.2f} s; target: 2 s)"
            )

    if not args.skip_year:
        progress(f"c. simulated year: {commits:,} commits")
        year = simulate_year(args.workdir / "year", commits)
        s = year["samples"]
        first, last = s[0], s[-1]
        meta_peak = max(x["meta_files"] for x in s)
        results["year"] = year
        print(f"\n### c. simulated year: {commits:,} one-minute commits\n")
        print("| | after day 1 | at the end | max |")
        print("|---|---:|---:|---:|")
        print(
            f"| open_table | {first['open_s'] * 1000:.1f} ms | {last['open_s'] * 1000:.1f} ms | {max(x['open_s'] for x in s) * 1000:.1f} ms |"
        )
        print(
            f"| files under _carbonlite/ | {first['meta_files']} | {last['meta_files']} | {meta_peak} |"
        )
        print(
            f"| bytes under _carbonlite/ | {first['meta_bytes'] / 1e6:.2f} MB | {last['meta_bytes'] / 1e6:.2f} MB | {max(x['meta_bytes'] for x in s) / 1e6:.2f} MB |"
        )
        print(
            f"| segments in the state | {first['segments']} | {last['segments']} | {max(x['segments'] for x in s)} |"
        )
        print(
            f"| metadata bytes written per commit | {first['metadata_bytes_per_commit']:.0f} | {last['metadata_bytes_per_commit']:.0f} | {max(x['metadata_bytes_per_commit'] for x in s):.0f} |"
        )
        print(
            f"\nopen at the end within 2x of day 1: {yes_no(last['open_s'] <= 2 * first['open_s'])}; wall time {last['wall_s']:.0f} s"
        )
        name = "scale-year-quick.png" if args.quick else "scale-year.png"
        plot_year(year, args.plot_dir / name)
        progress(f"plot: {args.plot_dir / name}")

    out = args.output or Path(__file__).parent / "results" / (
        "scale-quick.json" if args.quick else "scale.json"
    )
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
