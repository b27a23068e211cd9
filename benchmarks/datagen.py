"""Deterministic synthetic data for the benchmarks.

``event_table(rows)`` is an event-log-like table: a sequential key, a roughly sorted timestamp,
a random user id, a low-cardinality string, a float measurement and a ~40-byte string. The
same ``(rows, seed)`` always gives the same table, so runs can be compared.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["EVENT_KINDS", "EVENT_SCHEMA", "event_table"]

EVENT_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us")),
        ("user", pa.int32()),
        ("kind", pa.string()),
        ("value", pa.float64()),
        ("agent", pa.string()),
    ]
)

EVENT_KINDS = ("click", "view", "scroll", "purchase", "login", "logout", "search", "error")
_KIND_WEIGHTS = np.array([0.30, 0.30, 0.15, 0.05, 0.06, 0.05, 0.08, 0.01])

_DAY_US = 86_400 * 1_000_000
_DAY_START_US = 1_767_225_600 * 1_000_000  # 2026-01-01T00:00:00
_TS_JITTER_US = 5 * 1_000_000  # events arrive up to a few seconds out of order
_AGENT_PREFIX = b"user-agent/"
_AGENT_HEX_CHARS = 29  # 11 + 29 = 40 bytes per value
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def _timestamps(rng: np.random.Generator, rows: int) -> pa.Array:
    """Sorted-ish microsecond timestamps within one day: a steady rise plus a little jitter."""
    step = _DAY_US / max(rows, 1)
    base = np.arange(rows, dtype=np.float64) * step
    jitter = rng.normal(0.0, _TS_JITTER_US, rows)
    offsets = np.clip(base + jitter, 0, _DAY_US - 1).astype(np.int64)
    return pa.array(offsets + _DAY_START_US, type=pa.timestamp("us"))


def _agents(rng: np.random.Generator, rows: int) -> pa.Array:
    """``user-agent/`` followed by 29 random hex digits, built straight into Arrow buffers."""
    width = len(_AGENT_PREFIX) + _AGENT_HEX_CHARS
    chars = np.empty((rows, width), dtype=np.uint8)
    chars[:, : len(_AGENT_PREFIX)] = np.frombuffer(_AGENT_PREFIX, dtype=np.uint8)
    chars[:, len(_AGENT_PREFIX) :] = _HEX[rng.integers(0, 16, (rows, _AGENT_HEX_CHARS))]
    offsets = np.arange(0, (rows + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(chars)]
    )


def event_table(rows: int, seed: int = 0) -> pa.Table:
    """An event-like table of ``rows`` rows (one chunk per column), reproducible from ``seed``."""
    rng = np.random.default_rng(seed)
    kinds = pc.take(
        pa.array(EVENT_KINDS, type=pa.string()),
        pa.array(rng.choice(len(EVENT_KINDS), size=rows, p=_KIND_WEIGHTS).astype(np.int32)),
    )
    columns = [
        pa.array(np.arange(rows, dtype=np.int64)),
        _timestamps(rng, rows),
        pa.array(rng.integers(0, 10_001, rows, dtype=np.int32)),
        kinds,
        pa.array(rng.normal(100.0, 15.0, rows)),
        _agents(rng, rows),
    ]
    return pa.Table.from_arrays(columns, schema=EVENT_SCHEMA)
