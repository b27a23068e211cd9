"""Helpers shared by the table-layer tests: fresh table locations and small sample data."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from tests.format.strategies import rows

__all__ = [
    "EVENTS",
    "drop_memory",
    "events",
    "mem_uri",
    "memory_uri",
    "rows",
]

EVENTS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("score", pa.float64()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
    ]
)
"""A small schema most table tests write."""

_BASE_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def events(start: int, n: int, *, schema: pa.Schema = EVENTS) -> pa.Table:
    """``n`` deterministic rows with ids ``start .. start + n - 1`` (nulls and NaNs included)."""
    ids = list(range(start, start + n))
    data = {
        "id": ids,
        "name": [f"name-{i}" if i % 5 else None for i in ids],
        "score": [float("nan") if i % 7 == 3 else i * 0.25 for i in ids],
        "ts": pa.array([_BASE_US + i * 1_000_000 for i in ids], pa.int64()).view(
            pa.timestamp("us", tz="UTC")
        ),
    }
    return pa.table({f.name: data[f.name] for f in schema if f.name in data}).cast(
        pa.schema([f for f in schema if f.name in data])
    )


def memory_uri(prefix: str = "table") -> str:
    """A fresh ``memory://`` table location."""
    return f"memory://{prefix}-{uuid.uuid4().hex}"


def drop_memory(uri: str) -> None:
    """Forget everything stored under a ``memory://`` location."""
    fs = MemoryFileSystem()
    if fs.exists(uri):
        fs.rm(uri, recursive=True)


@pytest.fixture
def mem_uri() -> Iterator[str]:
    """A fresh ``memory://`` table location, forgotten after the test."""
    uri = memory_uri()
    yield uri
    drop_memory(uri)
