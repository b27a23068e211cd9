"""Opening a table past its checkpoint: the worst case beside the best case (issue 24, item 4).

    python benchmarks/bench_open.py [--quick] [--sizes 1000,100000,1000000]
        [--patterns 1000,40,25,10,1] [--max-versions 200] [--skip-open] [--skip-appends]
        [--workdir DIR] [--rebuild] [--output PATH]

For each size (tables of 1k, 100k and 1M blocklets of 10 rows, built like ``bench_scale.py``:
appends of 10,000 rows, so 1,000 blocklets per version), the *best case* is the table standing
right at a checkpoint (the build's last version, checkpointed by the build when its commit did
not write one). The *worst case* is the most the checkpoint policy lets a reader replay past a
checkpoint: from the checkpointed table, versions of ``P`` blocklets each are appended (``P``
in ``--patterns``: 1,000 blocklets per version as in the issue; 40; 25, just under what makes
one version due a checkpoint by itself at the default ``checkpoint_max_entries``; 10; and 1
for small streaming commits) until a commit writes the next checkpoint; that last commit is then
taken back (its version file and checkpoint document deleted, the pointer set back), so the
table stands at the last version before a checkpoint is due. With no checkpoint within
``--max-versions`` versions the table is measured where it stands (and the row says so).
After each measurement the table is put back exactly as built (log, manifests, data files).

Each table is opened in three fresh child processes: ``open_table(path)`` five times in each,
every one a new ``Table``. *Repeated*: the median of the opens after the first (a process
that opens tables often); *first*: the median of the three first opens (a script or a job
that opens the table once, paying what the first open in a process pays). Then the child's
peak RSS beyond a child that only imports carbonlite (``VmHWM``) and the peak of Python
allocations during one more open (``tracemalloc``). Reported beside the times: the versions
and blocklet entries the open replayed past its checkpoint, and the mean time of the appends
that led there (checkpoints they wrote included). The best case is measured before and after
each worst case (the machine is shared: load drifts), and each worst case is compared with
the mean of the two measurements around it; its row shows the median of them all. Target:
the worst case at most 3x the best case at every size, by both measures.

What the checkpoints cost writers: appends of ``P`` blocklets (each of ``--patterns``) into
two tables that start as the 1k one, interleaved call by call: one with the default policy,
one checkpointed by versions only (``checkpoint_max_entries`` out of reach: what earlier
releases did); the mean append time of each, their ratio, and the checkpoints each wrote.

Results: markdown on stdout, JSON in ``benchmarks/results/open.json`` (``open-quick.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_scale import APPEND_ROWS, BLOCKLET_ROWS, SCHEMA, rows
from report import PEAK_RSS, progress, run_facts, yes_no

import carbonlite as cl

ROOT = Path(__file__).resolve().parents[1]
TARGET = 3.0
"""The worst case may take at most this many times the best case."""


def _log_dir(path: Path) -> Path:
    return path / "_carbonlite" / "log"


def _has_checkpoint(path: Path, version: int) -> bool:
    return (_log_dir(path) / f"{version:020d}.checkpoint.json").exists()


def _files(path: Path, under: str) -> dict[str, int]:
    base = path / under
    if not base.exists():
        return {}
    return {str(p.relative_to(path)): p.stat().st_size for p in base.rglob("*") if p.is_file()}


# --- the table as built, and putting it back -----------------------------------------------------


def build(path: Path, blocklets: int, rebuild: bool) -> dict[str, Any]:
    """A table of ``blocklets`` blocklets standing at a checkpoint (cached in ``path``)."""
    marker = path / "_built.json"
    if marker.exists() and not rebuild:
        built: dict[str, Any] = json.loads(marker.read_text())
        if built["blocklets"] == blocklets:
            restore(path, built)
            return built
    shutil.rmtree(path, ignore_errors=True)
    start = time.perf_counter()
    t = cl.create_table(path, SCHEMA, properties={"blocklet_max_rows": str(BLOCKLET_ROWS)})
    total = blocklets * BLOCKLET_ROWS
    for first in range(0, total, APPEND_ROWS):
        t.append(rows(first, min(APPEND_ROWS, total - first)))
        if first // APPEND_ROWS % 100 == 99:
            progress(f"  built {first + APPEND_ROWS:,} rows of {total:,}")
    if not _has_checkpoint(path, t.version):
        t.log.write_checkpoint(t.snapshot())
    built = {
        "blocklets": blocklets,
        "version": t.version,
        "rows": total,
        "build_s": time.perf_counter() - start,
        "data": _files(path, "segments"),
        "meta": _files(path, "_carbonlite"),
    }
    marker.write_text(json.dumps(built))
    return built


def restore(path: Path, built: dict[str, Any]) -> None:
    """Put the table back exactly as built: later versions, checkpoints, manifests and data
    files (or bytes appended to the build's files) deleted, the pointer at the build's."""
    for under, kept in (("segments", built["data"]), ("_carbonlite", built["meta"])):
        for rel, size in _files(path, under).items():
            if rel not in kept:
                (path / rel).unlink()
            elif size != kept[rel]:
                with open(path / rel, "r+b") as f:
                    f.truncate(kept[rel])
    pointer = path / "_carbonlite" / "_last_checkpoint"
    pointer.write_text(json.dumps({"version": built["version"]}))
    for d in sorted((path / "segments").rglob("*"), reverse=True):
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()


def take_back(path: Path, version: int, checkpoint: int) -> None:
    """Take back the commit of ``version`` (which wrote a checkpoint): its version file, its
    checkpoint document, and the pointer back to ``checkpoint``. Manifests its checkpoint
    wrote stay (nothing lists them; opening never reads a manifest)."""
    (_log_dir(path) / f"{version:020d}.json").unlink()
    (_log_dir(path) / f"{version:020d}.checkpoint.json").unlink()
    (path / "_carbonlite" / "_last_checkpoint").write_text(json.dumps({"version": checkpoint}))


def worst_case(
    path: Path, built: dict[str, Any], per_version: int, max_versions: int
) -> tuple[int, list[float]]:
    """Append versions of ``per_version`` blocklets until one writes a checkpoint, then take
    that one back: the number of versions the table now stands past its checkpoint, and the
    time of each append (checkpoints written included)."""
    t = cl.open_table(path)
    first = built["rows"]
    times = []
    for n in range(1, max_versions + 1):
        batch = rows(first, per_version * BLOCKLET_ROWS)
        start = time.perf_counter()
        t.append(batch)
        times.append(time.perf_counter() - start)
        first += per_version * BLOCKLET_ROWS
        if _has_checkpoint(path, t.version):
            take_back(path, t.version, built["version"])
            return n - 1, times
    return max_versions, times


# --- measuring in a child process ----------------------------------------------------------------

_CHILD = (
    """
import json, resource, statistics, sys, time, tracemalloc
import carbonlite as cl
path, mode = sys.argv[1], sys.argv[2]

"""
    + PEAK_RSS
    + """


out = {}
if mode == "open":
    times = []
    for _ in range(5):
        start = time.perf_counter()
        t = cl.open_table(path)
        times.append(time.perf_counter() - start)
    out["times"] = times
    out["peak"] = peak_rss()
    snapshot = t.snapshot()
    out["version"] = t.version
    out["checkpoint"] = t.log.last_checkpoint()
    out["entries"] = sum(len(f.tail) for s in snapshot.segments.values() for f in s.files.values())
    del t, snapshot
    tracemalloc.start()
    cl.open_table(path)
    out["traced_peak"] = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
else:
    out["peak"] = peak_rss()
print(json.dumps(out))
"""
)


def child(path: Path, mode: str) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), mode],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(path: Path, import_peak: int, children: int = 3) -> dict[str, Any]:
    runs = [child(path, "open") for _ in range(children)]
    r = runs[0]
    firsts = [run["times"][0] for run in runs]
    later = [t for run in runs for t in run["times"][1:]]
    return {
        "median_s": statistics.median(later),
        "first_s": statistics.median(firsts),
        "first_opens_s": firsts,
        "later_opens_s": later,
        "peak_over_import_bytes": max(run["peak"] for run in runs) - import_peak,
        "traced_peak_bytes": max(run["traced_peak"] for run in runs),
        "version": r["version"],
        "checkpoint": r["checkpoint"],
        "versions_replayed": r["version"] - (r["checkpoint"] or 0),
        "entries_replayed": r["entries"],
    }


# --- report ----------------------------------------------------------------------------------


def _row(size: int, case: str, r: dict[str, Any], best: dict[str, Any]) -> str:
    """A markdown row; ``best``: the best case measured right before and after ``r``."""
    r["ratio"] = r["median_s"] / best["median_s"]
    r["first_ratio"] = r["first_s"] / best["first_s"]
    verdict = "" if r is best else yes_no(max(r["ratio"], r["first_ratio"]) <= TARGET)
    append = f"{r['append_mean_s'] * 1000:.1f} ms" if "append_mean_s" in r else ""
    return (
        f"| {size:,} | {case} | {r['versions_replayed']} | {r['entries_replayed']:,} | "
        f"{r['median_s'] * 1000:.2f} ms ({r['ratio']:.1f}x) | "
        f"{r['first_s'] * 1000:.2f} ms ({r['first_ratio']:.1f}x) | "
        f"{r['peak_over_import_bytes'] / 1e6:.0f} MB | {r['traced_peak_bytes'] / 1e6:.1f} MB | "
        f"{append} | {verdict} |"
    )


def _around(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The best case as measured around a worst case: the mean of the two measurements."""
    return {
        "median_s": (before["median_s"] + after["median_s"]) / 2,
        "first_s": (before["first_s"] + after["first_s"]) / 2,
    }


# --- what checkpoints cost writers ----------------------------------------------------------------

VERSIONS_ONLY = {"checkpoint_max_entries": str(10**12)}
"""Properties that checkpoint by versions only, as releases before the entries bound did."""


def append_cost(workdir: Path, per_version: int) -> dict[str, Any]:
    """Mean append time of ``per_version`` blocklets with the default policy and by versions
    only, appends interleaved call by call, from two tables that start as the 1k one."""
    appends = max(10, min(200, 2000 // per_version))
    tables = {}
    for name, props in (("default", {}), ("versions_only", VERSIONS_ONLY)):
        path = workdir / f"appends-{name}"
        shutil.rmtree(path, ignore_errors=True)
        properties = {"blocklet_max_rows": str(BLOCKLET_ROWS), **props}
        tables[name] = cl.create_table(path, SCHEMA, properties=properties)
        tables[name].append(rows(0, APPEND_ROWS))
    times: dict[str, list[float]] = {name: [] for name in tables}
    first = APPEND_ROWS
    for _ in range(appends):
        batch = rows(first, per_version * BLOCKLET_ROWS)
        first += per_version * BLOCKLET_ROWS
        for name, t in tables.items():
            start = time.perf_counter()
            t.append(batch)
            times[name].append(time.perf_counter() - start)
    out: dict[str, Any] = {"per_version": per_version, "appends": appends}
    for name, t in tables.items():
        out[name] = {
            "mean_s": statistics.mean(times[name]),
            "median_s": statistics.median(times[name]),
            "checkpoints": len(t.log.listing().checkpoints),
        }
        shutil.rmtree(workdir / f"appends-{name}", ignore_errors=True)
    out["ratio"] = out["default"]["mean_s"] / out["versions_only"]["mean_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", default=None, help="blocklet counts, comma-separated")
    parser.add_argument("--patterns", default="1000,40,25,10,1", help="blocklets per version")
    parser.add_argument("--max-versions", type=int, default=200)
    parser.add_argument("--skip-open", action="store_true")
    parser.add_argument("--skip-appends", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "bench-open")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else ([1_000, 10_000] if args.quick else [1_000, 100_000, 1_000_000])
    )
    patterns = [int(p) for p in args.patterns.split(",")]
    args.workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {**run_facts(), "load_start": os.getloadavg()[0], "sizes": {}}
    import_peak = child(args.workdir, "baseline")["peak"]
    lines = []
    for size in [] if args.skip_open else sizes:
        path = args.workdir / f"t{size}"
        progress(f"building {size:,} blocklets")
        built = build(path, size, args.rebuild)
        progress(f"best case: {size:,} blocklets at checkpoint {built['version']}")
        bests = [measure(path, import_peak)]
        rows_out = []
        entry: dict[str, Any] = {"build_s": built["build_s"], "worst": {}}
        for per_version in patterns:
            progress(f"worst case: {size:,} blocklets, {per_version:,} blocklets per version")
            past, appends = worst_case(path, built, per_version, args.max_versions)
            r = measure(path, import_peak)
            r["per_version"] = per_version
            r["appends_s"] = appends
            r["append_mean_s"] = statistics.mean(appends)
            r["capped"] = past >= args.max_versions
            restore(path, built)
            bests.append(measure(path, import_peak))  # the best case again, right after
            entry["worst"][str(per_version)] = r
            capped = f", no checkpoint in {past}" if r["capped"] else ""
            case = f"{per_version:,} per version{capped}"
            rows_out.append(_row(size, case, r, _around(bests[-2], bests[-1])))
        best = {
            **bests[0],
            "median_s": statistics.median(b["median_s"] for b in bests),
            "first_s": statistics.median(b["first_s"] for b in bests),
            "measurements": [{k: b[k] for k in ("median_s", "first_s")} for b in bests],
        }
        entry["best"] = best
        lines += [_row(size, "at the checkpoint", best, best), *rows_out]
        results["sizes"][str(size)] = entry
    if lines:
        print(
            "| blocklets | table stands | versions replayed | entries replayed | open, repeated "
            "(x of best) | open, first in a process (x of best) | peak RSS beyond import | "
            f"traced peak | mean append to get there | both <= {TARGET:g}x |"
        )
        print("|---:|---|---:|---:|---:|---:|---:|---:|---:|:--:|")
        print("\n".join(lines))
    if not args.skip_appends:
        costs = []
        for per_version in patterns:
            progress(f"append cost: {per_version:,} blocklets per version")
            costs.append(append_cost(args.workdir, per_version))
        results["appends"] = costs
        print(
            "\n| blocklets per append | appends | mean append, default policy | by versions "
            "only | ratio | checkpoints written (default / by versions) |"
        )
        print("|---:|---:|---:|---:|---:|---:|")
        for c in costs:
            d, v = c["default"], c["versions_only"]
            print(
                f"| {c['per_version']:,} | {c['appends']} | {d['mean_s'] * 1000:.2f} ms | "
                f"{v['mean_s'] * 1000:.2f} ms | {c['ratio']:.2f}x | "
                f"{d['checkpoints']} / {v['checkpoints']} |"
            )
    results["load_end"] = os.getloadavg()[0]
    out = args.output or Path(__file__).parent / "results" / (
        "open-quick.json" if args.quick else "open.json"
    )
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
