"""Wall-clock milliseconds, as commits, leases and maintenance record them."""

from __future__ import annotations

import time

__all__ = ["elapsed_ms", "now_ms"]


def now_ms() -> int:
    """Milliseconds since the epoch."""
    return int(time.time() * 1000)


def elapsed_ms(started_ms: int | None, now: int | None = None) -> int | None:
    """Milliseconds since ``started_ms`` (None when the start was not recorded)."""
    if started_ms is None:
        return None
    return max(0, (now_ms() if now is None else now) - started_ms)
