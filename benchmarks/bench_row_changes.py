"""Row-level changes: CarbonLite's ``Table.delete`` and ``Table.merge`` against deltalake's
(delta-rs) on the same rows in the same run, and what deleted rows cost a full scan.

    python benchmarks/bench_row_changes.py [--rows 5000000] [--repeat 3] [--scan-repeat 9]
        [--output PATH]

The rows are ``datagen.event_table(--rows)`` (``id`` sorted, ``user`` random in
[0, 10,000], six columns). They are written once per side: a CarbonLite table made the way a
user would (``create_table(sort_columns=["id"])``, five equal appends, ``finish_streaming()``,
``handoff()`` so the rows sit in a sorted columnar segment, ``clean`` of the handed-off stream
files), the same five appends left in their streaming segment (no handoff, a second
CarbonLite row), and a Delta table by ``deltalake.write_deltalake`` (its defaults). Each
timed operation runs on a fresh copy of its prepared table (``shutil.copytree``, untimed,
the table opened untimed), the sides interleaved within every repeat; the time is the one
call. Best of ``--repeat``; CPU time (every thread of the process) is recorded beside it.
Ratio = Delta / CarbonLite (how many times faster CarbonLite is).

1. Delete 1% of the rows by a range of the sorted ``id``: ``Table.delete(filter)`` (deletion
   vectors, no data file rewritten) against ``DeltaTable.delete(predicate)`` (delta-rs
   rewrites the files holding matching rows). Target (issue 13): >= 5x. For context, also
   10% of the rows scattered (``user < 1000``: every data file has rows to delete).
2. Merge 100,000 rows by ``id``: 50,000 updates (``value`` changed) of existing keys drawn at
   random from the whole table, and 50,000 new keys. ``Table.merge(source, on=["id"])``
   against ``DeltaTable.merge(source, predicate="t.id = s.id", ...)
   .when_matched_update_all().when_not_matched_insert_all().execute()``. Target: >= 3x. For
   context, also updates drawn from the newest 5% of keys (both sides can prune), and Delta's
   merge once more with ``streamed_exec=False`` (an extra Delta row; the ratio stays against
   the call above).
3. ``to_arrow()`` (every column, every row) of the columnar table with ~10% of its rows
   deleted (``user < 1000``, scattered through every blocklet) against the same table
   without deletes, CarbonLite against CarbonLite, alternating, best of ``--scan-repeat``
   after a warm-up; the same for the streaming-segment table. Target: <= 1.3x.

Results are checked, not only timed: rows deleted, updated and inserted as each side reports
them, row counts after every operation, the ``id`` sum after a delete, and after a merge the
``(id, value)`` columns of both sides, sorted, against the expected rows.
Markdown on stdout, JSON in ``benchmarks/results/row_changes.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datagen import event_table
from deltalake import DeltaTable, write_deltalake
from report import progress, yes_no

import carbonlite as cl

RESULTS = Path(__file__).resolve().parent / "results" / "row_changes.json"
APPENDS = 5
MERGE_ROWS = 100_000
DELETE_TARGET = 5.0
MERGE_TARGET = 3.0
SCAN_TARGET = 1.3
SIDES = ("carbonlite", "carbonlite_streaming", "delta")
DELTA_UNSTREAMED = "delta_streamed_exec_false"
"""The merge once more with ``streamed_exec=False``: deltalake may then read the in-memory
source twice and prune the target's files by the source's keys (its default, True, treats
the source as a stream it reads once)."""
PRIMARY_KEY_NOTE = (
    "measured by benchmarks/bench_primary_key.py (5M rows ingested as 1,000 upsert "
    "batches), not by this script."
)


def _prepare(root: Path, data: pa.Table) -> dict[str, Path]:
    """The three prepared tables, written the way a user would."""
    paths = {side: root / "prepared" / side for side in SIDES}
    paths[DELTA_UNSTREAMED] = paths["delta"]
    step = -(-data.num_rows // APPENDS)
    for side in ("carbonlite", "carbonlite_streaming"):
        t = cl.create_table(str(paths[side]), data.schema, sort_columns=["id"])
        for start in range(0, data.num_rows, step):
            t.append(data.slice(start, step))
        if side == "carbonlite":
            t.finish_streaming()
            t.handoff()
            t.clean(0, force=True)  # the handed-off stream files: copying them would be waste
    write_deltalake(str(paths["delta"]), data)
    return paths


def _disk(path: Path) -> dict[str, int]:
    files = [f for f in path.rglob("*") if f.is_file()]
    return {"bytes": sum(f.stat().st_size for f in files), "files": len(files)}


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    start, start_cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - start, time.process_time() - start_cpu, out


def _ids(side: str, path: Path) -> pa.ChunkedArray:
    if side.startswith("delta"):
        return DeltaTable(str(path)).to_pyarrow_table(columns=["id"]).column("id")
    return cl.open_table(str(path)).to_arrow(columns=["id"]).column("id")


def _id_values(side: str, path: Path) -> pa.Table:
    if side.startswith("delta"):
        table = DeltaTable(str(path)).to_pyarrow_table(columns=["id", "value"])
    else:
        table = cl.open_table(str(path)).to_arrow(columns=["id", "value"])
    return table.sort_by("id").combine_chunks()


def _operation(
    side: str,
    path: Path,
    carbonlite: Callable[[cl.Table], Any],
    delta: Callable[[DeltaTable, str], Any],
) -> tuple[float, float, Any]:
    if side.startswith("delta"):
        dt = DeltaTable(str(path))
        return _timed(lambda: delta(dt, side))
    t = cl.open_table(str(path))
    return _timed(lambda: carbonlite(t))


def _summary(wall: Sequence[float], cpu: Sequence[float]) -> dict[str, Any]:
    return {
        "best_s": round(min(wall), 4),
        "median_s": round(statistics.median(wall), 4),
        "cpu_best_s": round(min(cpu), 4),
        "runs_s": [round(w, 4) for w in wall],
    }


def _run_cases(
    work: Path,
    prepared: dict[str, Path],
    repeat: int,
    name: str,
    run: Callable[[str, Path], tuple[float, float, Any]],
    check: Callable[[str, Path, Any], None],
    sides: Sequence[str] = SIDES,
) -> dict[str, Any]:
    """``run`` on a fresh copy of each side's table, ``repeat`` times, sides interleaved."""
    wall: dict[str, list[float]] = {s: [] for s in sides}
    cpu: dict[str, list[float]] = {s: [] for s in sides}
    reported: dict[str, Any] = {}
    for r in range(repeat):
        for side in sides:
            path = work / f"{name}-{side}"
            shutil.rmtree(path, ignore_errors=True)
            shutil.copytree(prepared[side], path)
            seconds, cpu_seconds, out = run(side, path)
            check(side, path, out)
            wall[side].append(seconds)
            cpu[side].append(cpu_seconds)
            reported[side] = out if isinstance(out, dict) else dataclasses.asdict(out)
            shutil.rmtree(path)
        progress(f"{name} {r + 1}/{repeat}: " + ", ".join(f"{s} {wall[s][-1]:.3f}s" for s in sides))
    out = {side: {**_summary(wall[side], cpu[side]), "reported": reported[side]} for side in sides}
    for side in ("carbonlite", "carbonlite_streaming"):
        out[f"ratio_{side}"] = round(min(wall["delta"]) / min(wall[side]), 2)
        out[f"cpu_ratio_{side}"] = round(min(cpu["delta"]) / min(cpu[side]), 2)
    if DELTA_UNSTREAMED in sides:
        out["ratio_carbonlite_to_unstreamed"] = round(
            min(wall[DELTA_UNSTREAMED]) / min(wall["carbonlite"]), 2
        )
    return out


def _delete_case(
    work: Path,
    prepared: dict[str, Path],
    data: pa.Table,
    repeat: int,
    name: str,
    shape: tuple[pc.Expression, str, pa.ChunkedArray],
) -> dict[str, Any]:
    """Delete the rows of ``shape`` (the Arrow filter CarbonLite takes, the SQL predicate
    Delta takes, and the mask of the rows they select) on each side."""
    filter, predicate, mask = shape
    ids = data.column("id")
    deleted = pc.sum(mask).as_py()
    kept = data.num_rows - deleted
    kept_sum = pc.sum(pc.filter(ids, pc.invert(mask))).as_py()

    def run(side: str, path: Path) -> tuple[float, float, Any]:
        return _operation(side, path, lambda t: t.delete(filter), lambda d, _: d.delete(predicate))

    def check(side: str, path: Path, out: Any) -> None:
        reported = out["num_deleted_rows"] if side.startswith("delta") else out.rows
        left = _ids(side, path)
        assert reported == deleted, (side, reported, deleted)
        assert len(left) == kept and pc.sum(left).as_py() == kept_sum, (side, len(left), kept)

    result = _run_cases(work, prepared, repeat, f"delete-{name}", run, check)
    result.update(rows_deleted=deleted, predicate=predicate)
    return result


def _merge_source(data: pa.Table, shape: str) -> tuple[pa.Table, pa.Table]:
    """The 100,000-row source (half updates of existing keys, half new keys, shuffled) and
    the table's ``(id, value)`` expected after the merge, sorted by id."""
    rows = data.num_rows
    half = MERGE_ROWS // 2
    rng = np.random.default_rng(11)
    pool = rows if shape == "random" else max(rows // 20, half)
    updated = np.sort(rng.choice(pool, half, replace=False)) + (rows - pool)
    updates = data.take(pa.array(updated))
    updates = updates.set_column(
        updates.schema.get_field_index("value"), "value", pc.add(updates.column("value"), 1000.0)
    )
    inserts = event_table(half, seed=5)
    inserts = inserts.set_column(0, "id", pa.array(np.arange(rows, rows + half, dtype=np.int64)))
    source = pa.concat_tables([updates, inserts]).take(pa.array(rng.permutation(MERGE_ROWS)))
    values = data.column("value").to_numpy().copy()
    values[updated] += 1000.0
    expected = pa.table(
        {
            "id": np.arange(rows + half, dtype=np.int64),
            "value": np.concatenate([values, inserts.column("value").to_numpy()]),
        }
    )
    return source.combine_chunks(), expected


def _merge_case(
    work: Path, prepared: dict[str, Path], data: pa.Table, repeat: int, shape: str
) -> dict[str, Any]:
    source, expected = _merge_source(data, shape)
    half = MERGE_ROWS // 2

    def delta_merge(d: DeltaTable, side: str) -> dict[str, Any]:
        streamed = {"streamed_exec": False} if side == DELTA_UNSTREAMED else {}
        return (
            d.merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t", **streamed)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )

    def run(side: str, path: Path) -> tuple[float, float, Any]:
        return _operation(side, path, lambda t: t.merge(source, on=["id"]), delta_merge)

    def check(side: str, path: Path, out: Any) -> None:
        if side.startswith("delta"):
            reported = (out["num_target_rows_updated"], out["num_target_rows_inserted"])
        else:
            reported = (out.rows_updated, out.rows_inserted)
        assert reported == (half, half), (side, reported)
        after = _id_values(side, path)
        assert after.num_rows == expected.num_rows, (side, after.num_rows)
        assert after.equals(expected), f"{side}: (id, value) after the merge differ"

    sides = (*SIDES, DELTA_UNSTREAMED)
    result = _run_cases(work, prepared, repeat, f"merge-{shape}", run, check, sides)
    result.update(rows_updated=half, rows_inserted=half)
    return result


def _scan_case(
    work: Path, prepared: dict[str, Path], data: pa.Table, repeat: int, side: str
) -> dict[str, Any]:
    """``to_arrow()`` of ``side``'s table as prepared and of a copy with ~10% deleted."""
    clean = cl.open_table(str(prepared[side]))
    path = work / f"scan-{side}"
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(prepared[side], path)
    deleted = cl.open_table(str(path))
    deleted.delete(pc.field("user") < 1000)
    keep = pc.greater_equal(data.column("user"), 1000)
    kept_ids = pc.filter(data.column("id"), keep)
    kept = len(kept_ids)
    assert deleted.to_arrow(columns=["id"]).column("id").equals(kept_ids), side
    tables = {"without_deletes": clean, "with_deletes": deleted}
    rows = {"without_deletes": data.num_rows, "with_deletes": kept}
    wall: dict[str, list[float]] = {k: [] for k in tables}
    cpu: dict[str, list[float]] = {k: [] for k in tables}
    for i in range(repeat + 1):
        for key, t in tables.items():
            seconds, cpu_seconds, out = _timed(t.to_arrow)
            assert out.num_rows == rows[key] and out.num_columns == data.num_columns, key
            del out
            if i:  # the first round warms up
                wall[key].append(seconds)
                cpu[key].append(cpu_seconds)
    progress(f"scan {side}: " + ", ".join(f"{k} {min(w):.3f}s" for k, w in wall.items()))
    result: dict[str, Any] = {k: _summary(wall[k], cpu[k]) for k in tables}
    result["rows_deleted"] = data.num_rows - kept
    result["ratio"] = round(min(wall["with_deletes"]) / min(wall["without_deletes"]), 3)
    result["cpu_ratio"] = round(min(cpu["with_deletes"]) / min(cpu["without_deletes"]), 3)
    shutil.rmtree(path)
    return result


def _markdown(summary: dict[str, Any]) -> str:
    res = summary["results"]
    lines = [
        f"{summary['rows']:,} rows, best of {summary['repeat']}; ratio = Delta / CarbonLite "
        "(higher: CarbonLite faster)",
        "",
        "| operation | CarbonLite (columnar) s | CarbonLite (streaming) s | Delta s | ratio "
        "(columnar) | CPU ratio | ratio (streaming) | target | met? |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    rows = (
        ("delete 1% (sorted `id` range)", "delete_range_1pct", DELETE_TARGET),
        ("delete 10% scattered (`user < 1000`)", "delete_scattered_10pct", None),
        ("merge 100k, updates at random keys", "merge_random", MERGE_TARGET),
        ("merge 100k, updates in newest 5% of keys", "merge_recent", None),
    )
    for label, key, target in rows:
        r = res[key]
        verdict = yes_no(r["ratio_carbonlite"] >= target) if target else "-"
        lines.append(
            f"| {label} | {r['carbonlite']['best_s']:.3f} | "
            f"{r['carbonlite_streaming']['best_s']:.3f} | {r['delta']['best_s']:.3f} | "
            f"**{r['ratio_carbonlite']:.2f}x** | {r['cpu_ratio_carbonlite']:.2f}x | "
            f"{r['ratio_carbonlite_streaming']:.2f}x | "
            f"{'>= ' + format(target, 'g') + 'x' if target else '-'} | {verdict} |"
        )
    lines += [
        "",
        "Delta's merge with `streamed_exec=False` (the source read twice, target files pruned by "
        "its keys):",
        "",
    ]
    for label, key, _ in rows[2:]:
        r = res[key]
        lines.append(
            f"- {label}: {r[DELTA_UNSTREAMED]['best_s']:.3f} s, CarbonLite (columnar) "
            f"{r['ratio_carbonlite_to_unstreamed']:.2f}x faster"
        )
    lines += [
        "",
        f"Full scan (`to_arrow()`), ~10% deleted vs none, best of {summary['scan_repeat']}",
        "",
        "| table | without deletes s | with 10% deleted s | ratio | CPU ratio | target | met? |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for side in ("carbonlite", "carbonlite_streaming"):
        r = res[f"scan_{side}"]
        lines.append(
            f"| {'columnar' if side == 'carbonlite' else 'streaming segment'} | "
            f"{r['without_deletes']['best_s']:.3f} | {r['with_deletes']['best_s']:.3f} | "
            f"**{r['ratio']:.2f}x** | {r['cpu_ratio']:.2f}x | <= {SCAN_TARGET}x | "
            f"{yes_no(r['ratio'] <= SCAN_TARGET)} |"
        )
    lines += ["", f"Primary keys: {PRIMARY_KEY_NOTE}"]
    return "\n".join(lines)


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scan-repeat", type=int, default=9)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.rows < 4 * MERGE_ROWS:
        parser.error(f"--rows must be at least {4 * MERGE_ROWS:,} (the merge updates 50,000)")
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    load_start = _load()
    data = event_table(args.rows)
    with tempfile.TemporaryDirectory(prefix="bench-row-changes-") as tmp:
        root = Path(tmp)
        progress(f"writing {args.rows:,} rows three times")
        prepared = _prepare(root, data)
        disk = {side: _disk(path) for side, path in prepared.items()}
        ids, lo, hi = data.column("id"), args.rows // 2, args.rows // 2 + args.rows // 100
        in_range = (pc.field("id") >= lo) & (pc.field("id") < hi)
        range_mask = pc.and_(pc.greater_equal(ids, lo), pc.less(ids, hi))
        user_mask = pc.less(data.column("user"), 1000)
        results = {
            "delete_range_1pct": _delete_case(
                root,
                prepared,
                data,
                args.repeat,
                "range",
                (in_range, f"id >= {lo} and id < {hi}", range_mask),
            ),
            "delete_scattered_10pct": _delete_case(
                root,
                prepared,
                data,
                args.repeat,
                "scattered",
                (pc.field("user") < 1000, "user < 1000", user_mask),
            ),
            "merge_random": _merge_case(root, prepared, data, args.repeat, "random"),
            "merge_recent": _merge_case(root, prepared, data, args.repeat, "recent"),
        }
        for side in ("carbonlite", "carbonlite_streaming"):
            results[f"scan_{side}"] = _scan_case(root, prepared, data, args.scan_repeat, side)
    summary = {
        "rows": args.rows,
        "repeat": args.repeat,
        "scan_repeat": args.scan_repeat,
        "started": started,
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "load_average": {"start": load_start, "end": _load()},
        "versions": {"deltalake": deltalake.__version__, "pyarrow": pa.__version__},
        "disk": disk,
        "results": results,
        "targets_met": {
            "delete_range_1pct": results["delete_range_1pct"]["ratio_carbonlite"] >= DELETE_TARGET,
            "merge_random": results["merge_random"]["ratio_carbonlite"] >= MERGE_TARGET,
            "scan_carbonlite": results["scan_carbonlite"]["ratio"] <= SCAN_TARGET,
        },
        "primary_keys": PRIMARY_KEY_NOTE,
    }
    print(_markdown(summary))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
