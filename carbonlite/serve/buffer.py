"""The service's in-memory buffer: acknowledged puts not yet committed to their table.

A put is ``(table, producer_id, sequence)`` and its rows, already conformed to the table's
schema. Once its write-ahead-log record is durable it goes into its table's buffer, where
``DoGet`` reads it at once; the flusher commits a table's buffered puts together, with each
producer's marker (its last sequence) in the same version.

Which puts a reader takes from memory follows from the version it planned on, with no lock:
a put is in version ``v`` exactly when ``v``'s marker of its producer is at or past its
sequence. So a reader notes, with the version, the markers of every producer that has puts in
memory (``producers``); later it takes from memory each put that version lacks
(``rows_after``): one of a producer it did not note (every put of such a producer arrived
after it planned), or one past its producer's noted marker. Flushed puts stay in memory for
``retain_seconds``, so a reader that planned less than that ago finds every put its version
lacks.

Sequences: per table and producer, a sequence above the last one known is new; the last one
known, or one seen since the service started (or replayed from its log), is a re-send that
is already durable (``Accepted.duplicate``); any other older sequence is a regression
(:class:`SequenceError`): accepting it would reorder the producer's puts, and skipping it
could drop rows the service never had.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from carbonlite.errors import CarbonLiteError

__all__ = ["Buffer", "Put", "SequenceError", "marker_of"]


class SequenceError(CarbonLiteError, ValueError):
    """A put whose sequence is older than its producer's last and was never seen."""


def marker_of(producer_id: str) -> str:
    """The table's transaction marker (app id) of one producer: its last committed sequence."""
    return f"flight:{producer_id}"


@dataclass(frozen=True, slots=True)
class Put:
    table: str
    producer_id: str
    sequence: int
    lsn: int
    """Its record in the write-ahead log."""
    rows: pa.Table


@dataclass(slots=True)
class _Flushed:
    put: Put
    at: float


@dataclass(slots=True)
class _Producer:
    last: int | None
    """The newest sequence that is durable (in the table or in the log)."""
    seen: set[int] = field(default_factory=set)


@dataclass(slots=True)
class _TableBuffer:
    pending: list[Put] = field(default_factory=list)
    flushed: deque[_Flushed] = field(default_factory=deque)
    producers: dict[str, _Producer] = field(default_factory=dict)


class Buffer:
    """Every table's buffered puts, safe across threads."""

    def __init__(self, *, retain_seconds: float = 300.0) -> None:
        self.retain_seconds = retain_seconds
        self._tables: dict[str, _TableBuffer] = {}
        self._lock = threading.Lock()
        self._pending_rows = 0

    def _table(self, name: str) -> _TableBuffer:
        found = self._tables.get(name)
        if found is None:
            found = self._tables[name] = _TableBuffer()
        return found

    def check(
        self, table: str, producer_id: str, sequence: int, committed: Callable[[], int | None]
    ) -> bool:
        """Whether ``sequence`` is new (True) or a durable re-send (False); raises
        :class:`SequenceError` for a regression. ``committed`` reads the table's marker of
        the producer, the first time the producer is seen."""
        with self._lock:
            producer = self._table(table).producers.get(producer_id)
        if producer is None:
            last = committed()
            with self._lock:
                producer = self._table(table).producers.setdefault(producer_id, _Producer(last))
        with self._lock:
            if producer.last is None or sequence > producer.last:
                return True
            if sequence == producer.last or sequence in producer.seen:
                return False
        raise SequenceError(
            f"producer {producer_id!r} of table {table!r} is at sequence {producer.last}; "
            f"sequence {sequence} is older and was never received: give each put the next "
            "sequence, and re-send a put with the sequence it had"
        )

    def add(self, put: Put) -> None:
        """A put whose log record is durable: readable from now on."""
        with self._lock:
            buffer = self._table(put.table)
            buffer.pending.append(put)
            self._pending_rows += put.rows.num_rows
            producer = buffer.producers.setdefault(put.producer_id, _Producer(None))
            producer.last = max(put.sequence, producer.last if producer.last is not None else -1)
            producer.seen.add(put.sequence)

    def pending(self, table: str) -> list[Put]:
        with self._lock:
            return list(self._table(table).pending)

    def tables_pending(self) -> dict[str, int]:
        """Rows waiting per table."""
        with self._lock:
            return {
                name: sum(p.rows.num_rows for p in b.pending)
                for name, b in self._tables.items()
                if b.pending
            }

    def lowest_pending_lsn(self) -> int | None:
        with self._lock:
            lsns = [p.lsn for b in self._tables.values() for p in b.pending]
        return min(lsns) if lsns else None

    def flushed(self, table: str, puts: list[Put]) -> None:
        """``puts`` are committed: out of pending, still readable for ``retain_seconds``."""
        now = time.monotonic()
        done = {id(p) for p in puts}
        with self._lock:
            buffer = self._table(table)
            buffer.pending = [p for p in buffer.pending if id(p) not in done]
            self._pending_rows -= sum(p.rows.num_rows for p in puts)
            buffer.flushed.extend(_Flushed(p, now) for p in puts)
            while buffer.flushed and now - buffer.flushed[0].at > self.retain_seconds:
                buffer.flushed.popleft()

    def drop(self, table: str, puts: list[Put]) -> None:
        """``puts`` turned out to be committed before (their markers were there already)."""
        done = {id(p) for p in puts}
        with self._lock:
            buffer = self._table(table)
            buffer.pending = [p for p in buffer.pending if id(p) not in done]
            self._pending_rows -= sum(p.rows.num_rows for p in puts)

    def pending_rows(self) -> int:
        """Rows waiting in every table."""
        return self._pending_rows

    def producers(self, table: str) -> set[str]:
        """Producers with puts in memory (pending or flushed and retained)."""
        with self._lock:
            buffer = self._table(table)
            return {p.producer_id for p in buffer.pending} | {
                f.put.producer_id for f in buffer.flushed
            }

    def rows_after(self, table: str, markers: Mapping[str, int | None]) -> list[pa.Table]:
        """The rows of every put in memory that a version lacks, given that version's
        ``markers`` of the producers :meth:`producers` named when it was planned."""
        with self._lock:
            buffer = self._table(table)
            puts = [f.put for f in buffer.flushed] + list(buffer.pending)
        return [
            p.rows
            for p in puts
            if p.producer_id not in markers
            or markers[p.producer_id] is None
            or p.sequence > markers[p.producer_id]  # type: ignore[operator]
        ]
