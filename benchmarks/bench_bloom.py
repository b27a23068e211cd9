"""Point lookups with bloom filters and secondary indexes (issue 29): blocklets read,
speed-up, write cost, bytes.

    python benchmarks/bench_bloom.py [--rows 20000000] [--users 1000000] [--batch 1000000]
        [--blocklet-rows 4096] [--lookups 20] [--out PATH]

Three tables get the same rows, batch by batch, in rotating order (so the machine's noise
falls on all alike): *plain* (no index), *bloom* (``bloom_filter_columns = user_id``,
default ``bloom_filter_fpp`` 1%) and *secondary* (``secondary_index_columns = user_id``). Both have ``handoff_blocklet_rows = --blocklet-rows``: a user's ~20
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
5. The same lookups on *secondary*: blocklets read, speed-up over *plain*, handoff time and
   index bytes, for docs/BENCHMARKS.md's "which to use when".
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
    extra = {
        "plain": {},
        "bloom": {"bloom_filter_columns": "user_id"},
        "secondary": {"secondary_index_columns": "user_id"},
    }
    tables = {
        name: cl.create_table(
            folder / name, SCHEMA, sort_columns=["ts"], properties={**common, **more}
        )
        for name, more in extra.items()
    }
    append = dict.fromkeys(tables, 0.0)
    rng = np.random.default_rng(29)
    for start in range(0, rows, batch_rows):
        data = batch(rng, start, min(batch_rows, rows - start), users)
        turn = (start // batch_rows) % len(tables)
        order = list(tables)[turn:] + list(tables)[:turn]
        for name in order:
            began = time.perf_counter()
            tables[name].append(data)
            append[name] += time.perf_counter() - began
        progress(f"appended {start + data.num_rows:,} rows")
    handoff = {}
    for name in tables:
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


def sizes(t: cl.Table) -> tuple[int, int, int, int]:
    """(live blocklets, bytes of live data files, of their bloom files, of their secondary
    index files)."""
    snap = t.snapshot()
    blocklets = data = blooms = indexes = 0
    for _, f in snap.iter_files():
        blocklets += f.num_blocklets
        data += f.committed_length
        blooms += sum(f.bloom_files.values())
        indexes += sum(f.index_files.values())
    return blocklets, data, blooms, indexes


def lookups(folder: Path, count: int) -> dict[str, Any]:
    from carbonlite.reader import bloom_prune

    bloom_prune.SHARED_CACHE = bloom_prune.BloomFileCache()  # cold for the first lookup
    tables = {name: cl.open_table(folder / name) for name in ("plain", "bloom", "secondary")}
    present = np.unique(tables["plain"].to_arrow(columns=["user_id"]).column("user_id").to_numpy())
    rng = np.random.default_rng(7)
    wanted = [int(v) for v in rng.choice(present, count, replace=False)]
    out: dict[str, Any] = {}
    for name in ("bloom", "secondary"):
        began = time.perf_counter()
        tables[name].to_arrow(filter=pc.field("user_id") == wanted[0])
        out[f"{name}_cold_first_lookup_s"] = time.perf_counter() - began
    times: dict[str, list[float]] = {name: [] for name in tables}
    fractions: dict[str, list[float]] = {"bloom": [], "secondary": []}
    for v in wanted:
        f = pc.field("user_id") == v
        expected = tables["plain"].to_arrow(filter=f).sort_by("ts")
        for name, t in tables.items():
            if name != "plain":
                plan = t.plan_splits(filter=f)
                fractions[name].append(plan.blocklets_selected / plan.blocklets_total)
                assert t.to_arrow(filter=f).sort_by("ts").equals(expected), (name, v)
            times[name].append(best(lambda t=t, f=f: t.to_arrow(filter=f)))
    many = [int(v) for v in rng.choice(present, 100, replace=False)]
    f = pc.field("user_id").isin(many)
    rows = tables["plain"].to_arrow(filter=f).num_rows
    isin = {}
    for name, t in tables.items():
        assert t.to_arrow(filter=f).num_rows == rows, name
        isin[name] = best(lambda t=t: t.to_arrow(filter=f))
        if name != "plain":
            plan = t.plan_splits(filter=f)
            out[f"{name}_isin_read_fraction"] = plan.blocklets_selected / plan.blocklets_total
    for name in ("bloom", "secondary"):
        ratios = [p / b for p, b in zip(times["plain"], times[name], strict=True)]
        out[f"{name}_read_fraction_max"] = max(fractions[name])
        out[f"{name}_read_fraction_median"] = statistics.median(fractions[name])
        out[f"{name}_eq_ratio_median"] = statistics.median(ratios)
        out[f"{name}_eq_s_median"] = statistics.median(times[name])
        out[f"{name}_isin_s"] = isin[name]
        out[f"{name}_isin_ratio"] = isin["plain"] / isin[name]
    out["plain_eq_s_median"] = statistics.median(times["plain"])
    out["plain_isin_s"] = isin["plain"]
    out["users"] = len(wanted)
    return out


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
        found = lookups(folder, args.lookups)
        blocklets, data_bytes, bloom_bytes, _ = sizes(cl.open_table(folder / "bloom"))
        _, secondary_data, _, index_bytes = sizes(cl.open_table(folder / "secondary"))
        print(f"load average at end: {os.getloadavg()}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    append = built["append_s"]
    handoff = built["handoff_s"]
    result = {
        **run_facts(),
        "rows": args.rows,
        "users": args.users,
        "handoff_blocklet_rows": args.blocklet_rows,
        "blocklets": blocklets,
        "data_bytes": data_bytes,
        "data_bytes_per_row": data_bytes / args.rows,
        "bloom_bytes": bloom_bytes,
        "bytes_ratio": bloom_bytes / data_bytes,
        "index_bytes": index_bytes,
        "index_bytes_ratio": index_bytes / secondary_data,
        **built,
        "append_ratio": append["bloom"] / append["plain"],
        "handoff_ratio": handoff["bloom"] / handoff["plain"],
        "secondary_handoff_ratio": handoff["secondary"] / handoff["plain"],
        **found,
    }
    print(
        f"table: {args.rows:,} rows ({result['data_bytes_per_row']:.1f} data bytes each), "
        f"{blocklets:,} blocklets of <= {args.blocklet_rows:,} rows"
    )
    for name in ("bloom", "secondary"):
        print(
            f"[{name}] == lookup reads at most {found[f'{name}_read_fraction_max']:.2%} of "
            f"blocklets (median {found[f'{name}_read_fraction_median']:.2%}; target <= "
            f"{READ_TARGET:.0%}): {yes_no(found[f'{name}_read_fraction_max'] <= READ_TARGET)}"
        )
        print(
            f"[{name}] == lookup {found[f'{name}_eq_ratio_median']:.1f}x faster "
            f"({found['plain_eq_s_median'] * 1000:.0f} ms -> "
            f"{found[f'{name}_eq_s_median'] * 1000:.1f} ms; target >= {EQ_TARGET:.0f}x): "
            f"{yes_no(found[f'{name}_eq_ratio_median'] >= EQ_TARGET)}; first lookup, files cold: "
            f"{found[f'{name}_cold_first_lookup_s'] * 1000:.0f} ms"
        )
        print(
            f"[{name}] is_in(100) {found[f'{name}_isin_ratio']:.1f}x faster "
            f"({found['plain_isin_s'] * 1000:.0f} ms -> {found[f'{name}_isin_s'] * 1000:.0f} ms, "
            f"{found[f'{name}_isin_read_fraction']:.1%} of blocklets; target >= "
            f"{ISIN_TARGET:.0f}x): {yes_no(found[f'{name}_isin_ratio'] >= ISIN_TARGET)}"
        )
    print(
        f"[bloom] append {result['append_ratio']:.2f}x, handoff {result['handoff_ratio']:.2f}x "
        f"the time without filters (target <= {WRITE_TARGET:.2f}x): "
        f"{yes_no(max(result['append_ratio'], result['handoff_ratio']) <= WRITE_TARGET)}"
    )
    print(
        f"[bloom] bytes {bloom_bytes:,} = {result['bytes_ratio']:.2%} of data bytes "
        f"{data_bytes:,}, {bloom_bytes / args.rows:.2f} per row (target <= {BYTES_TARGET:.0%}): "
        f"{yes_no(result['bytes_ratio'] <= BYTES_TARGET)}"
    )
    print(
        f"[secondary] handoff {result['secondary_handoff_ratio']:.2f}x; index bytes "
        f"{index_bytes:,} = {result['index_bytes_ratio']:.2%} of data bytes, "
        f"{index_bytes / args.rows:.2f} per row"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
