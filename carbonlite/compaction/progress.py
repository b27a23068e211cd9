"""Progress of long maintenance operations, reported as ``(done, total)`` to a callback.

``verify``, ``clean``, handoff and compaction take an optional ``progress`` callable. It is
called with two integers, the work done so far and the work known in all, in bytes, from
whichever thread did the work, but never twice at once and never out of order: ``done``
never decreases, never exceeds ``total``, and the last call has ``done == total``. ``total``
may grow (a further round of minor compaction adds its inputs). An operation with nothing to
do does not call it. The callback should return quickly and must not raise.

The command line draws a progress bar with it (``carbonlite/cli``); the core never draws.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["ProgressCallback", "ProgressCounter"]

ProgressCallback = Callable[[int, int], None]
"""``progress(done, total)``: see the module's documentation."""


class ProgressCounter:
    """A thread-safe running count that reports every change to a callback (or to nothing)."""

    def __init__(self, callback: ProgressCallback | None, total: int = 0) -> None:
        self._callback = callback
        self._lock = threading.Lock()
        self.total = max(0, total)
        self.done = 0

    def _report(self) -> None:
        if self._callback is not None and self.total > 0:
            self._callback(self.done, self.total)

    def add_total(self, amount: int) -> None:
        """More work is known (``amount`` more units)."""
        if amount <= 0:
            return
        with self._lock:
            self.total += amount
            self._report()

    def advance(self, amount: int) -> None:
        """``amount`` more units are done (capped at the total)."""
        if amount <= 0:
            return
        with self._lock:
            done = min(self.total, self.done + amount)
            if done != self.done:
                self.done = done
                self._report()

    def finish(self) -> None:
        """Everything known is done."""
        with self._lock:
            if self.done != self.total:
                self.done = self.total
                self._report()
