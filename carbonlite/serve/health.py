"""What the ``healthcheck`` action reports: the service's state, each table whose flush fails
(its puts stay in memory and in the write-ahead log until a flush succeeds) and how much of
the log is kept, and for whom.

A table whose flush fails does not stop the others: they flush on, and the log is released
up to the oldest record still needed, which is the failing table's oldest put (until the
flusher carries its puts forward: ``flusher.py``). The report names the table holding the
log (``wal.held_by``) and the bytes kept, and ``status`` is ``degraded`` until it flushes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from carbonlite.serve.buffer import Pending
from carbonlite.serve.wal import WalUsage

__all__ = ["FlushFailure", "FlushFailures", "health_report"]


@dataclass(slots=True)
class FlushFailure:
    """A table's flushes failing in a row."""

    error: str
    """The last failure, one line."""
    since: float
    """When (``time.time``) the first of them failed."""
    failures: int


class FlushFailures:
    """The tables whose last flush failed, safe across threads."""

    def __init__(self) -> None:
        self._failing: dict[str, FlushFailure] = {}
        self._lock = threading.Lock()

    def failed(self, table: str, error: str) -> bool:
        """Record a failed flush of ``table``; True when it is news (the first failure in a
        row, or another error than the last): worth a log line."""
        with self._lock:
            found = self._failing.get(table)
            if found is None:
                self._failing[table] = FlushFailure(error, time.time(), 1)
                return True
            found.failures += 1
            news = found.error != error
            found.error = error
            return news

    def succeeded(self, table: str) -> FlushFailure | None:
        """A flush of ``table`` succeeded; the failures it ends, if any."""
        with self._lock:
            return self._failing.pop(table, None)

    def current(self) -> dict[str, FlushFailure]:
        with self._lock:
            return {
                name: FlushFailure(f.error, f.since, f.failures)
                for name, f in self._failing.items()
            }


def _stamp(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def _table_entry(pending: Pending | None, failure: FlushFailure | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "pending_puts": pending.puts if pending else 0,
        "pending_rows": pending.rows if pending else 0,
        "pending_bytes": pending.bytes if pending else 0,
        "oldest_lsn": pending.lowest_lsn if pending else None,
        "error": None,
    }
    if failure is not None:
        entry.update(
            error=failure.error, failing_since=_stamp(failure.since), failures=failure.failures
        )
    return entry


def _problems(
    failures: dict[str, FlushFailure], pending: dict[str, Pending], wal: WalUsage
) -> list[str]:
    out = []
    for name, failure in sorted(failures.items()):
        waiting = pending.get(name)
        held = (
            f"its {waiting.puts} put(s), {waiting.rows} rows, stay in memory and keep the "
            f"write-ahead log from LSN {waiting.lowest_lsn} on ({wal.bytes} bytes in "
            f"{wal.segments} segment(s) now)"
            if waiting
            else "it has no puts waiting"
        )
        out.append(
            f"table {name!r}: {failure.failures} flush(es) failed since "
            f"{_stamp(failure.since)}; {held}: {failure.error}"
        )
    return out


def health_report(
    *,
    failures: dict[str, FlushFailure],
    pending: dict[str, Pending],
    wal: WalUsage,
    flushes: int,
    wal_syncs: int,
    release_error: str | None,
    retained: tuple[int, int, int] = (0, 0, 0),
) -> dict[str, Any]:
    """The healthcheck's JSON: ``status`` (``ok``, or ``degraded`` while a flush or a release
    of the log fails), per table what waits and why, the committed puts kept in memory for
    readers (``retained``: puts, bytes, and each table's limit), and the log's size and who
    holds it."""
    held_by = min(pending, key=lambda n: pending[n].lowest_lsn) if pending else None
    problems = _problems(failures, pending, wal)
    if release_error is not None:
        problems.append(f"the write-ahead log cannot be released: {release_error}")
    return {
        "status": "degraded" if problems else "ok",
        "problems": problems,
        "buffered_rows": {name: p.rows for name, p in sorted(pending.items())},
        "flushes": flushes,
        "wal_syncs": wal_syncs,
        "retained": dict(zip(("puts", "bytes", "limit_bytes"), retained, strict=True)),
        "tables": {
            name: _table_entry(pending.get(name), failures.get(name))
            for name in sorted(set(failures) | set(pending))
        },
        "wal": {
            "segments": wal.segments,
            "bytes": wal.bytes,
            "first_lsn": wal.first_lsn,
            "next_lsn": wal.next_lsn,
            "held_by": held_by,
            "release_error": release_error,
        },
    }
