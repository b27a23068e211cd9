"""Running streaming queries in tests: wait for them, read their progress."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

STREAM_TIMEOUT = 180  # seconds a streaming query may take before the test gives up


def finish(query: Any, timeout: float = STREAM_TIMEOUT) -> Any:
    """Wait for an ``availableNow`` query to end; fail (and stop it) if it does not."""
    if not query.awaitTermination(timeout):
        query.stop()
        raise AssertionError(f"streaming query did not finish in {timeout} s")
    return query


def data_batches(query: Any) -> list[dict[str, Any]]:
    """The progress reports of the micro-batches that had input rows."""
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def wait_until(
    condition: Callable[[], bool], timeout: float = STREAM_TIMEOUT, what: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(0.2)


def memory_name() -> str:
    """A fresh name for a memory-sink query (names are global to the session)."""
    return f"mem_{uuid.uuid4().hex[:10]}"


def ids_delivered(spark: Any, name: str) -> list[int]:
    """The ids a memory-sink query ``name`` received, sorted (its view is dropped)."""
    rows = spark.sql(f"select id from {name}").toArrow()
    spark.catalog.dropTempView(name)
    return sorted(rows.column("id").to_pylist())
