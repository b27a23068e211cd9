"""Point lookups with bloom filters (issue 29): blocklets read, speed-up, write cost, bytes.

    python benchmarks/bench_bloom.py [--rows 20000000] [--users 1000000] [--batch 1000000]
        [--blocklet-rows 4096] [--lookups 20] [--out PATH]

Two tables get the same rows, batch by batch, alternating (so the machine's noise falls on
both alike): *plain* (no filters) and *bloom* (``bloom_filter_columns = user_id``, default
``bloom_filter_fpp`` 1%). Both have ``handoff_blocklet_rows = --blocklet-rows``: a user's ~20
rows lie in ~20 different blocklets, so for a lookup to read at most 2% of the blocklets
there must be more than 20 / (2% - fpp) of them (see docs/BENCHMARKS.md). Rows: ``user_id``
int64 uniform over ``--users``, ``ts`` timestamp (increasing: the sort column), ``kind``
string (8 values), ``amount`` float64, ``session`` fixed_size_binary(16) (random bytes),
numpy with a fixed seed. Each table: the appends (1M-row batches, timed), then
``finish_streaming`` + ``handoff`` (timed).

Figures, each also printed as one line:

1. ``user_id == X`` for ``--lookups`` users present in the table: blocklets the plan selects
   over the table's blocklets (target: at most 2%), and the time of ``to_arrow(filter=...)``
   on *plain* over *bloom* (median over the users of each best of 3; bloom files warm in the
   cache; target: at least 20x). The first lookup of a freshly opened table (bloom files
   read cold) is reported too.
2. ``user_id.isin(100 users)``: the same ratio (target: at least 5x).
3. Append and handoff time of *bloom* over *plain* (target: at most 1.10x each).
4. Bytes of the live bloom files over the bytes of the live data files (target: at most 3%).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from report import progress, run_facts, yes_no

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import carbonlite as cl  # noqa: E402

SCHEMA = pa.schema(
    [
        ("user_id", pa.int64()),
        ("ts", pa.timestamp("us")),
        ("kind", pa.string()),
        ("amount", pa.float64()),
        ("session", pa.binary(16)),
    ]
)
KINDS = np.array(["view", "click", "cart", "buy", "share", "like", "search", "login"])
READ_TARGET = 0.02
EQ_TARGET = 20.0
ISIN_TARGET = 5.0
WRITE_TARGET = 1.10
BYTES_TARGET = 0.03
_EPOCH_US = 1_767_225_600_000_000


def batch(rng: np.random.Generator, start: int, rows: int, users: int) -> pa.Table:
    ts = _EPOCH_US + (start + np.arange(rows, dtype=np.int64)) * 1_000
    session = rng.integers(0, 256, size=rows * 16, dtype=np.uint8).tobytes()
    return pa.table(
        [
            pa.array(rng.integers(0, users, rows, dtype=np.int64)),
            pa.array(ts, pa.timestamp("us")),
            pa.array(KINDS[rng.integers(0, len(KINDS), rows)]),
            pa.array(rng.random(rows) * 100),
            pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(16), rows, [None, pa.py_buffer(session)]
            ),
        ],
        schema=SCHEMA,
    )


def build(folder: Path, rows: int, users: int, batch_rows: int, blocklet_rows: int) -> dict:
    common = {"handoff_blocklet_rows": str(blocklet_rows), "checkpoint_interval": "20"}
    tables = {
        "plain": cl.create_table(folder / "plain", SCHEMA, sort_columns=["ts"], properties=common),
        "bloom": cl.create_table(
            folder / "bloom",
            SCHEMA,
            sort_columns=["ts"],
            properties={**common, "bloom_filter_columns": "user_id"},
        ),
    }
    append = dict.fromkeys(tables, 0.0)
    rng = np.random.default_rng(29)
    for start in range(0, rows, batch_rows):
        data = batch(rng, start, min(batch_rows, rows - start), users)
        order = list(tables) if (start // batch_rows) % 2 == 0 else list(reversed(tables))
        for name in order:
            began = time.perf_counter()
            tables[name].append(data)
            append[name] += time.perf_counter() - began
        progress(f"appended {start + data.num_rows:,} rows")
    handoff = {}
    for name in ("plain", "bloom"):
        t = tables[name]
        t.finish_streaming()
        began = time.perf_counter()
        t.handoff()
        handoff[name] = time.perf_counter() - began
        progress(f"handed off {name} in {handoff[name]:.1f} s")
    return {"append_s": append, "handoff_s": handoff}


def best(call: Any, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return min(times)


def sizes(t: cl.Table) -> tuple[int, int, int]:
    """(live blocklets, bytes of live data files, bytes of their bloom files in force)."""
    snap = t.snapshot()
    blocklets = data = blooms = 0
    for _, f in snap.iter_files():
        blocklets += f.num_blocklets
        data += f.committed_length
        blooms += sum(f.bloom_files.values())
    return blocklets, data, blooms


def lookups(folder: Path, users: int, count: int) -> dict[str, Any]:
    from carbonlite.reader import bloom_prune

    bloom_prune.SHARED_CACHE = bloom_prune.BloomFileCache()  # cold for the first lookup
    plain, bloom = cl.open_table(folder / "plain"), cl.open_table(folder / "bloom")
    present = np.unique(bloom.to_arrow(columns=["user_id"]).column("user_id").to_numpy())
    rng = np.random.default_rng(7)
    wanted = [int(v) for v in rng.choice(present, count, replace=False)]
    began = time.perf_counter()
    cold_rows = bloom.to_arrow(filter=pc.field("user_id") == wanted[0]).num_rows
    cold_s = time.perf_counter() - began
    fractions, ratios, plain_s, bloom_s = [], [], [], []
    for v in wanted:
        f = pc.field("user_id") == v
        plan = bloom.plan_splits(filter=f)
        fractions.append(plan.blocklets_selected / plan.blocklets_total)
        a = plain.to_arrow(filter=f)
        b = bloom.to_arrow(filter=f)
        assert a.sort_by("ts").equals(b.sort_by("ts")), v
        tp, tb = (
            best(lambda f=f: plain.to_arrow(filter=f)),
            best(lambda f=f: bloom.to_arrow(filter=f)),
        )
        plain_s.append(tp)
        bloom_s.append(tb)
        ratios.append(tp / tb)
    many = [int(v) for v in rng.choice(present, 100, replace=False)]
    f = pc.field("user_id").isin(many)
    plan = bloom.plan_splits(filter=f)
    assert plain.to_arrow(filter=f).num_rows == bloom.to_arrow(filter=f).num_rows
    isin_plain, isin_bloom = (
        best(lambda: plain.to_arrow(filter=f)),
        best(lambda: bloom.to_arrow(filter=f)),
    )
    return {
        "users": len(wanted),
        "read_fraction_max": max(fractions),
        "read_fraction_median": statistics.median(fractions),
        "eq_ratio_median": statistics.median(ratios),
        "eq_plain_s_median": statistics.median(plain_s),
        "eq_bloom_s_median": statistics.median(bloom_s),
        "cold_first_lookup_s": cold_s,
        "cold_rows": cold_rows,
        "isin_read_fraction": plan.blocklets_selected / plan.blocklets_total,
        "isin_plain_s": isin_plain,
        "isin_bloom_s": isin_bloom,
        "isin_ratio": isin_plain / isin_bloom,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1_000_000)
    parser.add_argument("--blocklet-rows", type=int, default=4096)
    parser.add_argument("--lookups", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="carbonlite-bloom-"))
    try:
        print(f"load average at start: {os.getloadavg()}")
        built = build(folder, args.rows, args.users, args.batch, args.blocklet_rows)
        found = lookups(folder, args.users, args.lookups)
        blocklets, data_bytes, bloom_bytes = sizes(cl.open_table(folder / "bloom"))
        _, plain_bytes, _ = sizes(cl.open_table(folder / "plain"))
        print(f"load average at end: {os.getloadavg()}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    append_ratio = built["append_s"]["bloom"] / built["append_s"]["plain"]
    handoff_ratio = built["handoff_s"]["bloom"] / built["handoff_s"]["plain"]
    result = {
        **run_facts(),
        "rows": args.rows,
        "users": args.users,
        "handoff_blocklet_rows": args.blocklet_rows,
        "blocklets": blocklets,
        "data_bytes": data_bytes,
        "plain_data_bytes": plain_bytes,
        "bloom_bytes": bloom_bytes,
        "bytes_ratio": bloom_bytes / data_bytes,
        **built,
        "append_ratio": append_ratio,
        "handoff_ratio": handoff_ratio,
        **found,
    }
    print(f"table: {args.rows:,} rows, {blocklets:,} blocklets of <= {args.blocklet_rows:,} rows")
    print(
        f"== lookup reads at most {found['read_fraction_max']:.2%} of blocklets "
        f"(median {found['read_fraction_median']:.2%}; target <= {READ_TARGET:.0%}): "
        f"{yes_no(found['read_fraction_max'] <= READ_TARGET)}"
    )
    print(
        f"== lookup {found['eq_ratio_median']:.1f}x faster with the filter "
        f"({found['eq_plain_s_median'] * 1000:.0f} ms -> {found['eq_bloom_s_median'] * 1000:.1f} ms; "
        f"target >= {EQ_TARGET:.0f}x): {yes_no(found['eq_ratio_median'] >= EQ_TARGET)}; first lookup, "
        f"bloom files cold: {found['cold_first_lookup_s'] * 1000:.0f} ms"
    )
    print(
        f"is_in(100) {found['isin_ratio']:.1f}x faster ({found['isin_plain_s'] * 1000:.0f} ms -> "
        f"{found['isin_bloom_s'] * 1000:.0f} ms, {found['isin_read_fraction']:.1%} of blocklets; "
        f"target >= {ISIN_TARGET:.0f}x): {yes_no(found['isin_ratio'] >= ISIN_TARGET)}"
    )
    print(
        f"append {append_ratio:.2f}x, handoff {handoff_ratio:.2f}x the time without filters "
        f"(target <= {WRITE_TARGET:.2f}x): "
        f"{yes_no(append_ratio <= WRITE_TARGET and handoff_ratio <= WRITE_TARGET)}"
    )
    print(
        f"bloom bytes {bloom_bytes:,} = {result['bytes_ratio']:.2%} of data bytes {data_bytes:,} "
        f"(target <= {BYTES_TARGET:.0%}): {yes_no(result['bytes_ratio'] <= BYTES_TARGET)}"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
