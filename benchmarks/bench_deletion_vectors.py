"""Deletion vectors: CarbonLite's (a Roaring bitmap, pyroaring, inside a checked header)
against an Arrow/numpy-native encoding of our own, the alternative the issue asked to measure.

    python benchmarks/bench_deletion_vectors.py [--repeat R] [--output PATH]

For one 65,536-row blocklet and several shapes of deleted rows (a few scattered rows, 1% and
10% at random, a contiguous range, half the rows), each side encodes the positions to bytes,
decodes them back and builds the keep-mask a scan filters the blocklet with. Best of
``--repeat`` per operation, bytes per vector. The native candidate: the positions as u32
deltas (a range is a run of 1s) or, past 1/32 of the rows, a bitmap, whichever is smaller,
compressed with zstd level 3.

Results are printed as markdown and written to ``benchmarks/results/deletion_vectors.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import zstandard

from carbonlite.format.deletion_vector import DeletionVector

ROWS = 65_536
RESULTS = Path(__file__).resolve().parent / "results" / "deletion_vectors.json"


def shapes() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "10 scattered rows": np.sort(rng.choice(ROWS, 10, replace=False)),
        "1% at random": np.flatnonzero(rng.random(ROWS) < 0.01),
        "10% at random": np.flatnonzero(rng.random(ROWS) < 0.10),
        "a range of 20%": np.arange(20_000, 20_000 + ROWS // 5),
        "50% at random": np.flatnonzero(rng.random(ROWS) < 0.5),
    }


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(20):
            fn()
        times.append((time.perf_counter() - start) / 20)
    return min(times)


def carbonlite_dv(positions: np.ndarray, repeat: int) -> dict[str, float]:
    dv = DeletionVector.of(positions, ROWS)
    blob = dv.encode()
    assert DeletionVector.decode(blob) == dv
    return {
        "bytes": len(blob),
        "encode_us": best(lambda: DeletionVector.of(positions, ROWS).encode(), repeat) * 1e6,
        "decode_us": best(lambda: DeletionVector.decode(blob), repeat) * 1e6,
        "mask_us": best(lambda: DeletionVector.decode(blob).keep_mask(), repeat) * 1e6,
    }


def _native_encode(positions: np.ndarray) -> bytes:
    p = np.unique(positions).astype(np.uint32)
    if p.size * 32 <= ROWS:
        raw = b"P" + np.diff(p, prepend=np.uint32(0)).astype("<u4").tobytes()
    else:
        bits = np.zeros(ROWS, dtype=np.bool_)
        bits[p] = True
        raw = b"B" + np.packbits(bits, bitorder="little").tobytes()
    return zstandard.ZstdCompressor(level=3).compress(raw)


def _native_decode(blob: bytes) -> np.ndarray:
    raw = zstandard.ZstdDecompressor().decompress(blob)
    if raw[:1] == b"P":
        return np.cumsum(np.frombuffer(raw[1:], dtype="<u4").astype(np.int64))
    bits = np.unpackbits(np.frombuffer(raw[1:], np.uint8), count=ROWS, bitorder="little")
    return np.flatnonzero(bits)


def native(positions: np.ndarray, repeat: int) -> dict[str, float]:
    def mask(blob: bytes) -> Any:
        keep = np.ones(ROWS, dtype=np.bool_)
        keep[_native_decode(blob)] = False
        return pa.array(keep, pa.bool_())

    blob = _native_encode(positions)
    assert np.array_equal(_native_decode(blob), np.unique(positions))
    return {
        "bytes": len(blob),
        "encode_us": best(lambda: _native_encode(positions), repeat) * 1e6,
        "decode_us": best(lambda: _native_decode(blob), repeat) * 1e6,
        "mask_us": best(lambda: mask(blob), repeat) * 1e6,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    lines = [
        f"Deletion vectors of one {ROWS:,}-row blocklet, best of {args.repeat} (20 calls each)",
        "",
        "| deleted | rows | CarbonLite (Roaring) bytes | native bytes | encode us "
        "(CarbonLite / native) | decode us | decode + keep-mask us |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for name, positions in shapes().items():
        a, b = carbonlite_dv(positions, args.repeat), native(positions, args.repeat)
        results[name] = {"rows": int(positions.size), "carbonlite": a, "native": b}

        def pair(key: str, a: dict[str, float] = a, b: dict[str, float] = b) -> str:
            return f"{a[key]:.0f} / {b[key]:.0f}"

        lines.append(
            f"| {name} | {positions.size:,} | {a['bytes']:,} | {b['bytes']:,} | "
            f"{pair('encode_us')} | {pair('decode_us')} | {pair('mask_us')} |"
        )
    print("\n".join(lines))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
