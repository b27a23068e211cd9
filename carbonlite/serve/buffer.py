"""The service's in-memory buffer: acknowledged puts, readable before and a while after their
commit.

A put is ``(table, producer_id, sequence)`` and its rows, already conformed to the table's
schema, with the ids of their columns. Once its write-ahead-log record is durable it goes
into its table's buffer, where ``DoGet`` reads it at once; the flusher commits a table's
pending puts together, with each producer's marker (its last sequence) in the same version.

Which puts a reader takes from memory follows from the version it planned on, with no lock:
a put is in version ``v`` exactly when ``v``'s marker of its producer is at or past its
sequence. So a reader notes, before it reads the version, where the buffer stands
(:meth:`Buffer.mark`), and with the version the markers of every producer that has puts in
memory (:meth:`Buffer.producers`); later it takes from memory each put that version lacks
(:meth:`Buffer.puts_after`): one of a producer it did not note (every put of such a producer
arrived after it planned), or one past its producer's noted marker.

Committed puts stay in memory for such readers until they are older than ``retain_seconds``
or the table's retained puts pass ``retain_bytes``. Each commit has a number; a put dropped
from memory that was committed after a reader's mark may be one the reader's version lacks,
and that reader is told to plan again (:class:`StaleReadError`) rather than miss it. Reads
cost what they return: each producer's puts are kept in sequence order.

Sequences: per table and producer, a sequence above the last one known is new; the last one
known, the table's marker when the producer was first seen (live, or in the log replayed at
start), or one received since the service started (or found in its log at start, whether the
table holds it already or not) is a re-send that is already durable; any other older
sequence is a regression (:class:`SequenceError`):
accepting it would reorder the producer's puts, and skipping it could drop rows the service
never had. The sequences received are kept as runs, so a producer counting 0, 1, 2, ... costs
one run however long the service runs.
"""

from __future__ import annotations

import bisect
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa

from carbonlite.errors import CarbonLiteError

__all__ = ["Buffer", "Mark", "Pending", "Put", "SequenceError", "StaleReadError", "marker_of"]


class SequenceError(CarbonLiteError, ValueError):
    """A put whose sequence is older than its producer's last and was never received."""


class StaleReadError(CarbonLiteError, ValueError):
    """Rows a reader's version lacks may have left memory: it must plan again."""


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
    column_ids: tuple[int, ...] | None
    """The id of each column of ``rows``: the table's columns they are in (``conform.py``);
    None for a put logged by an earlier release, which kept no ids."""


@dataclass(frozen=True, slots=True)
class Pending:
    """One table's puts not committed yet."""

    puts: int
    rows: int
    bytes: int
    lowest_lsn: int
    """The oldest of their log records: the log keeps it and every later one."""


@dataclass(frozen=True, slots=True)
class Mark:
    """Where the buffer stood when a reader planned: this service run and its commit count."""

    instance: str
    commits: int


class _Runs:
    """A set of integers as sorted, disjoint runs ``[starts[i], ends[i]]``."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, n: int) -> None:
        i = bisect.bisect_right(self.starts, n) - 1  # the run starting at or before n
        if i >= 0 and n <= self.ends[i]:
            return
        joins_left = i >= 0 and self.ends[i] == n - 1
        joins_right = i + 1 < len(self.starts) and self.starts[i + 1] == n + 1
        if joins_left and joins_right:
            self.ends[i] = self.ends.pop(i + 1)
            del self.starts[i + 1]
        elif joins_left:
            self.ends[i] = n
        elif joins_right:
            self.starts[i + 1] = n
        else:
            self.starts.insert(i + 1, n)
            self.ends.insert(i + 1, n)

    def __contains__(self, n: object) -> bool:
        if not isinstance(n, int):
            return False
        i = bisect.bisect_right(self.starts, n) - 1
        return i >= 0 and n <= self.ends[i]

    def __len__(self) -> int:
        return len(self.starts)


@dataclass(slots=True)
class _Entry:
    put: Put
    nbytes: int
    commit: int = 0
    """The number of the commit that holds it; 0 while pending."""
    committed_at: float = 0.0
    """When (``time.monotonic``) it was committed."""
    block: pa.Table | None = None
    """Once committed, if the commit's rows were given: they hold this put's rows from
    ``offset`` on, and ``put`` holds none (see :meth:`Buffer.committed`)."""
    offset: int = 0
    length: int = 0

    def held(self) -> Put:
        """The put with its rows."""
        if self.block is None:
            return self.put
        return replace(self.put, rows=self.block.slice(self.offset, self.length))


def _lsn(entry: _Entry) -> int:
    return entry.put.lsn


@dataclass(slots=True)
class _Producer:
    last: int | None
    """The newest sequence that is durable (in the table or in the log)."""
    received: _Runs = field(default_factory=_Runs)
    """Durable sequences: the table's marker when first seen, every put checked or replayed."""
    entries: deque[_Entry] = field(default_factory=deque)
    """Its puts in memory, pending or retained, in sequence order."""


@dataclass(slots=True)
class _TableBuffer:
    pending: list[_Entry] = field(default_factory=list)
    """Puts not committed yet, in LSN order (the order they were logged), which is not always
    the order they were added: a put logged first may be added after one logged later."""
    retained: deque[_Entry] = field(default_factory=deque)
    """Committed puts still in memory, in commit order."""
    retained_bytes: int = 0
    dropped_through: int = 0
    """The newest commit number among the retained puts dropped from memory."""
    producers: dict[str, _Producer] = field(default_factory=dict)


class Buffer:
    """Every table's buffered puts, safe across threads."""

    def __init__(
        self, *, retain_seconds: float = 60.0, retain_bytes: int = 256 * 1024 * 1024
    ) -> None:
        self.retain_seconds = retain_seconds
        self.retain_bytes = retain_bytes
        self.instance = uuid.uuid4().hex
        """This run of the service: marks of an earlier run are stale."""
        self._tables: dict[str, _TableBuffer] = {}
        self._lock = threading.Lock()
        self._pending_rows = 0
        self._commits = 0

    def _table(self, name: str) -> _TableBuffer:
        found = self._tables.get(name)
        if found is None:
            found = self._tables[name] = _TableBuffer()
        return found

    # --- puts ---------------------------------------------------------------------------------

    def _producer(
        self, table: str, producer_id: str, committed: Callable[[], int | None]
    ) -> _Producer:
        """The producer's record. The first time the producer is seen (live or in the log
        replayed at start), it is made from the table's marker, ``committed()``: that
        sequence is durable, a re-send."""
        with self._lock:
            producer = self._table(table).producers.get(producer_id)
        if producer is None:
            last = committed()
            with self._lock:
                producer = self._table(table).producers.get(producer_id)
                if producer is None:
                    producer = self._table(table).producers[producer_id] = _Producer(last)
                    if last is not None:
                        producer.received.add(last)
        return producer

    def check(
        self, table: str, producer_id: str, sequence: int, committed: Callable[[], int | None]
    ) -> bool:
        """Whether ``sequence`` is new (True) or a durable re-send (False); raises
        :class:`SequenceError` for a regression. ``committed`` reads the table's marker of
        the producer, the first time the producer is seen."""
        producer = self._producer(table, producer_id, committed)
        with self._lock:
            if producer.last is None or sequence > producer.last:
                return True
            if sequence == producer.last or sequence in producer.received:
                return False
        raise SequenceError(
            f"producer {producer_id!r} of table {table!r} is at sequence {producer.last}; "
            f"sequence {sequence} is older and was never received: give each put the next "
            "sequence, and re-send a put with the sequence it had"
        )

    def replayed(self, table: str, producer_id: str, sequence: int, marker: int | None) -> None:
        """A sequence of the producer found in the write-ahead log at start: durable (in the
        table, or buffered again by :meth:`add`), so a re-send of it is skipped, as if the
        service had received it since it started. ``marker``: the table's marker of the
        producer, which makes its record the first time it is seen, as in :meth:`check`."""
        producer = self._producer(table, producer_id, lambda: marker)
        with self._lock:
            producer.last = max(sequence, producer.last if producer.last is not None else -1)
            producer.received.add(sequence)

    def add(self, put: Put) -> None:
        """A put whose log record is durable: readable from now on. Its sequence was
        checked (:meth:`check`) or replayed (:meth:`replayed`) first, so its producer's
        record was made from the table's marker."""
        entry = _Entry(put, put.rows.get_total_buffer_size())
        with self._lock:
            buffer = self._table(put.table)
            producer = buffer.producers.get(put.producer_id)
            if producer is None:
                raise RuntimeError(
                    f"put {put.sequence} of producer {put.producer_id!r} of table "
                    f"{put.table!r} was neither checked nor replayed: its producer is unknown"
                )
            pending = buffer.pending
            if pending and pending[-1].put.lsn > put.lsn:  # overtaken since it was logged
                bisect.insort(pending, entry, key=_lsn)
            else:
                pending.append(entry)
            self._pending_rows += put.rows.num_rows
            producer.last = max(put.sequence, producer.last if producer.last is not None else -1)
            producer.received.add(put.sequence)
            producer.entries.append(entry)

    def pending(self, table: str) -> list[Put]:
        """The table's puts not committed yet, in the order they were logged."""
        with self._lock:
            return [e.put for e in self._table(table).pending]

    def tables_pending(self) -> dict[str, int]:
        """Rows waiting per table."""
        with self._lock:
            return {
                name: sum(e.put.rows.num_rows for e in b.pending)
                for name, b in self._tables.items()
                if b.pending
            }

    def relogged(self, table: str, lsns: Mapping[int, int]) -> None:
        """Pending puts of ``table`` were written to the log again: each whose LSN is a key of
        ``lsns`` now has the value as its LSN (their earlier records may be released). A put
        committed meanwhile is left as it is."""
        with self._lock:
            buffer = self._table(table)
            for entry in buffer.pending:
                new = lsns.get(entry.put.lsn)
                if new is not None:
                    entry.put = replace(entry.put, lsn=new)
            buffer.pending.sort(key=_lsn)

    def pending_by_table(self) -> dict[str, Pending]:
        """Each table with puts not committed yet: how many, and the oldest log record."""
        with self._lock:
            return {
                name: Pending(
                    len(b.pending),
                    sum(e.put.rows.num_rows for e in b.pending),
                    sum(e.nbytes for e in b.pending),
                    b.pending[0].put.lsn,
                )
                for name, b in self._tables.items()
                if b.pending
            }

    def retained(self) -> tuple[int, int]:
        """Committed puts still in memory for readers, in every table: how many, and their
        bytes as counted against ``retain_bytes`` (each table's own limit)."""
        with self._lock:
            return (
                sum(len(b.retained) for b in self._tables.values()),
                sum(b.retained_bytes for b in self._tables.values()),
            )

    def lowest_pending_lsn(self) -> int | None:
        """The lowest LSN of a put not committed yet: the log must keep its record."""
        with self._lock:
            lsns = [b.pending[0].put.lsn for b in self._tables.values() if b.pending]
        return min(lsns) if lsns else None

    def pending_rows(self) -> int:
        """Rows waiting in every table."""
        return self._pending_rows

    def committed(
        self,
        table: str,
        puts: list[Put],
        rows: pa.Table | None = None,
        column_ids: tuple[int, ...] | None = None,
    ) -> None:
        """``puts`` are in the table now (committed by this service or, found so after a
        crash, before): out of pending, kept for readers as long as the limits allow.

        ``rows``, if given, are the puts' rows one after the other, in the order of ``puts``
        (what the commit wrote, in one chunk per column), and ``column_ids`` the ids of its
        columns: the puts kept for readers read theirs as slices of it and let their own go.
        Each put received holds its rows in buffers of its own plus some kilobytes of Arrow
        objects; one block per commit holds them in a few large buffers."""
        now = time.monotonic()
        done = {id(p) for p in puts}
        at: dict[int, int] = {}
        if rows is not None:
            offset = 0
            for p in puts:
                at[id(p)] = offset
                offset += p.rows.num_rows
            if offset != rows.num_rows:
                raise ValueError(f"{rows.num_rows} rows given for puts of {offset} rows")
            if column_ids is None or len(column_ids) != rows.num_columns:
                raise ValueError(f"column ids {column_ids} given for {rows.num_columns} columns")
        empty = rows.schema.empty_table() if rows is not None else None
        with self._lock:
            self._commits += 1
            buffer = self._table(table)
            keep: list[_Entry] = []
            for entry in buffer.pending:
                if id(entry.put) in done:
                    self._pending_rows -= entry.put.rows.num_rows
                    if rows is not None:  # every put of ``puts`` has its offset in ``at``
                        entry.block, entry.offset = rows, at[id(entry.put)]
                        entry.length = entry.put.rows.num_rows
                        entry.put = replace(entry.put, rows=empty, column_ids=column_ids)
                    entry.commit, entry.committed_at = self._commits, now
                    buffer.retained.append(entry)
                    buffer.retained_bytes += entry.nbytes
                else:
                    keep.append(entry)
            buffer.pending = keep
            self._drop_old_locked(buffer, now)

    def _drop_old_locked(self, buffer: _TableBuffer, now: float) -> None:
        """Let committed puts go, oldest first, while past either limit."""
        retained = buffer.retained
        while retained and (
            now - retained[0].committed_at > self.retain_seconds
            or buffer.retained_bytes > self.retain_bytes
        ):
            entry = retained.popleft()
            buffer.retained_bytes -= entry.nbytes
            buffer.dropped_through = entry.commit
            producer = buffer.producers[entry.put.producer_id]
            if producer.entries and producer.entries[0] is entry:
                producer.entries.popleft()
            else:  # committed out of order with its producer's others: rare
                producer.entries.remove(entry)

    # --- reads --------------------------------------------------------------------------------

    def mark(self) -> Mark:
        """Where the buffer stands; take it *before* reading the version a read plans on."""
        with self._lock:
            return Mark(self.instance, self._commits)

    def producers(self, table: str) -> set[str]:
        """Producers with puts in memory (pending or retained)."""
        with self._lock:
            buffer = self._table(table)
            self._drop_old_locked(buffer, time.monotonic())
            return {name for name, p in buffer.producers.items() if p.entries}

    def puts_after(self, table: str, markers: Mapping[str, int | None], mark: Mark) -> list[Put]:
        """Every put in memory that a version lacks (with its rows, and their column ids),
        given the ``mark`` taken before it was read and its ``markers`` of the producers
        :meth:`producers` named then. Raises :class:`StaleReadError` if some of them may
        have left memory."""
        with self._lock:
            buffer = self._table(table)
            if mark.instance != self.instance or buffer.dropped_through > mark.commits:
                raise StaleReadError(
                    f"rows of table {table!r} that the planned version lacks have left memory "
                    "(committed, then dropped after a while): call GetFlightInfo again"
                )
            out: list[Put] = []
            for name, producer in buffer.producers.items():
                marker = markers.get(name)
                newer = []
                for entry in reversed(producer.entries):  # newest first: stop at the marker
                    if marker is not None and entry.put.sequence <= marker:
                        break
                    newer.append(entry.held())
                out.extend(reversed(newer))
            return out
