"""The service's flusher: has the buffered puts committed table by table (the service's
``_flush`` commits one table's), then lets the write-ahead log go up to what is committed.

- **Each table on its own.** A table whose flush fails (its directory deleted or swapped for
  a link, a storage error, a schema that no longer fits) keeps its puts in memory and in the
  log; the failure is recorded for the healthcheck (``health.py``) and logged once per run of
  failures; the tables after it flush as usual.
- **Release.** The log is released up to the lowest LSN not committed: of a put in memory,
  or of one being logged (:class:`ProducerLocks` keeps their floors).
- **Carrying forward.** The log is released by LSN, so a failing table's oldest put keeps
  every later record too. When that holds at least three segments and twice what the failing
  table has waiting, its waiting puts are written to the log's end again (each producer's in
  sequence order, under the producer's lock) and the release that follows lets the older
  segments go; a replay counts a put with two records once (the later).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from carbonlite.errors import CarbonLiteError
from carbonlite.serve.answers import one_line
from carbonlite.serve.buffer import Buffer
from carbonlite.serve.catalog import Catalog
from carbonlite.serve.health import FlushFailures
from carbonlite.serve.records import PutRequest, encode_put
from carbonlite.serve.wal import WriteAheadLog

__all__ = ["Flusher", "ProducerLocks"]

log = logging.getLogger("carbonlite.serve")


class ProducerLocks:
    """One lock per ``(table, producer)`` (a producer's puts are logged one at a time, in
    order), and the log's LSN floor of every put being logged."""

    def __init__(self, wal: WriteAheadLog) -> None:
        self.wal = wal
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._floors: dict[int, int] = {}
        """Per put being logged (by thread): the log's next LSN before its append, so no
        LSN it gets is below this."""
        self._lock = threading.Lock()

    def of(self, table: str, producer: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault((table, producer), threading.Lock())

    @contextlib.contextmanager
    def logging_put(self) -> Iterator[None]:
        """While a put is appended to the log and added to memory: the log is not released
        past what it gets."""
        me = threading.get_ident()
        with self._lock:
            self._floors[me] = self.wal.next_lsn
        try:
            yield
        finally:
            with self._lock:
                del self._floors[me]

    def release_bound(self, lowest_pending: int | None) -> int:
        """The lowest LSN the log must keep: of a put in memory, being logged, or the next."""
        with self._lock:  # a put registering its floor after this gets a later LSN
            written = self.wal.next_lsn
            floors = list(self._floors.values())
        return min([written, *floors, *([lowest_pending] if lowest_pending is not None else [])])


class Flusher:
    """Commits the buffered puts of every table (see the module doc)."""

    def __init__(
        self,
        catalog: Catalog,
        buffer: Buffer,
        wal: WriteAheadLog,
        locks: ProducerLocks,
        *,
        flush_table: Callable[[str], None],
        retry_seconds: float,
    ) -> None:
        self.catalog = catalog
        self.buffer = buffer
        self.wal = wal
        self.locks = locks
        self.flush_table = flush_table
        """Commits one table's pending puts (the service's ``_flush``)."""
        self.retry_seconds = retry_seconds
        self.failures = FlushFailures()
        self.release_error: str | None = None
        self._carrying = threading.Lock()

    def flush_all(self) -> None:
        """Commit every table's buffered puts, each table on its own (one that fails keeps
        its puts and is reported), then release the log up to what is in."""
        for name in sorted(self.buffer.tables_pending()):
            try:
                self.flush_table(name)
            except Exception as exc:
                self._failed(name, exc)
            else:
                ended = self.failures.succeeded(name)
                if ended is not None:
                    log.info("table %r flushes again after %d failure(s)", name, ended.failures)
        self._carry_forward()
        self._release()

    def _failed(self, name: str, exc: Exception) -> None:
        message = one_line(self.catalog.shown(f"{type(exc).__name__}: {exc}"))
        if self.failures.failed(name, message):
            pending = self.buffer.pending_by_table().get(name)
            log.warning(
                "flush of table %r failed; its %d put(s) stay in memory and in the "
                "write-ahead log, retried every %s s: %s",
                name,
                pending.puts if pending else 0,
                self.retry_seconds,
                message,
                exc_info=exc if not isinstance(exc, CarbonLiteError) else None,
            )

    # --- the log --------------------------------------------------------------------------

    def _carry_forward(self) -> None:
        """Write the waiting puts of the failing table holding the log to its end again, when
        that is worth it (see the module doc)."""
        if not self._carrying.acquire(blocking=False):
            return  # another flush does it
        try:
            name = self._holding_table()
            if name is not None:
                producers = sorted({p.producer_id for p in self.buffer.pending(name)})
                moved = sum(self._relog(name, p) for p in producers)
                log.info(
                    "carried %d waiting put(s) of failing table %r forward in the "
                    "write-ahead log, so its older segments can go",
                    moved,
                    name,
                )
        except CarbonLiteError as exc:
            log.warning("cannot carry waiting puts forward in the write-ahead log: %s", exc)
        finally:
            self._carrying.release()

    def _holding_table(self) -> str | None:
        """The failing table whose oldest waiting put holds the log, if carrying its puts
        forward is worth it."""
        pending = self.buffer.pending_by_table()
        if not pending:
            return None
        held_by = min(pending, key=lambda n: pending[n].lowest_lsn)
        if held_by not in self.failures.current():
            return None
        usage = self.wal.usage()
        if usage.segments < 3 or usage.bytes < 2 * pending[held_by].bytes:
            return None
        return held_by

    def _relog(self, name: str, producer: str) -> int:
        """Write ``producer``'s waiting puts to ``name`` to the log again; how many."""
        with self.locks.of(name, producer):  # none of its puts is logged in between
            puts = sorted(
                (p for p in self.buffer.pending(name) if p.producer_id == producer),
                key=lambda p: p.sequence,
            )
            lsns = {}
            for put in puts:
                request = PutRequest(put.table, put.producer_id, put.sequence)
                lsns[put.lsn] = self.wal.append(encode_put(request, put.rows, put.column_ids))
            self.buffer.relogged(name, lsns)
        return len(puts)

    def _release(self) -> None:
        """Let the log go up to the lowest LSN not committed yet (in memory, or in flight)."""
        bound = self.locks.release_bound(self.buffer.lowest_pending_lsn())
        if bound <= 1:
            return
        try:
            self.wal.release(bound - 1)
        except CarbonLiteError as exc:
            if self.release_error is None:
                log.warning("the write-ahead log cannot be released: %s", exc)
            self.release_error = one_line(str(exc))
        else:
            self.release_error = None
