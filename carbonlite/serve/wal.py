"""WriteAheadLog: the durability layer of the ingest server, with group commit.

Many threads each append one record and return only once it is on disk; appends that arrive
while an fsync runs share the next one, so a log on a disk that does N fsyncs/s acknowledges
many more than N records/s.

Files. The log is a directory of segment files ``wal-{first_lsn:020d}.log`` (they sort by the
LSN of their first record). A segment is a run of frames; records have LSNs 1, 2, 3, ...
without gaps, continuing from one segment to the next. All integers are little-endian::

    offset  size  field
    0       4     magic b"CLW\\x01" (the last byte is the format version)
    4       4     payload length n (u32)
    8       8     LSN (u64)
    16      4     CRC32 (zlib.crc32) of the payload followed by bytes 4..16 (length and LSN)
    20      n     payload

A new segment is started when the next frame would take the current one past
``segment_bytes`` (a frame larger than that gets a segment of its own). Only the last segment
can end in a torn write (a crash mid-append): replay cuts it back to its last intact frame.
Damage anywhere else is damage to acknowledged records and raises CorruptDataError.

Group commit (leader/follower). Under the lock an appender writes its frame (``os.write``, no
user-space buffer) and takes the next LSN, then waits until ``synced_lsn >= its LSN``. If no
fsync is running it becomes the leader: it notes the highest written LSN, drops the lock,
fsyncs the segment, takes the lock again and raises ``synced_lsn`` to the noted LSN. Each
follower sleeps on a gate of its own: the leader opens the gates of the followers its fsync
covered (they return without taking the lock again) and of the first one it did not, which
leads the next fsync. Frames written while a leader fsyncs wait for the next fsync, which
covers all of them. No thread wakes only to sleep again (a shared condition variable woke
every follower after each fsync, and they fought for the lock). A rollover waits until no
fsync runs, fsyncs the old segment (so its records are durable), creates the new file and
fsyncs the directory before writing to it. After a failed write or fsync the log refuses
everything (the kernel may have dropped the dirty pages): reopen it, which replays what is
on disk.

One open log per directory: ``flock`` on the directory, held until ``close``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import struct
import threading
import zlib
from dataclasses import dataclass
from types import TracebackType

from carbonlite.errors import (
    CarbonLiteError,
    CorruptDataError,
    InvalidOptionError,
    StorageError,
    WriterConflictError,
)

__all__ = [
    "FRAME_HEADER_SIZE",
    "FRAME_MAGIC",
    "WalRecord",
    "WalUsage",
    "WriteAheadLog",
    "segment_name",
]

FRAME_MAGIC = b"CLW\x01"
_HEADER = struct.Struct("<4sIQI")
_CHECKED = struct.Struct("<IQ")  # the header fields the CRC covers after the payload
FRAME_HEADER_SIZE = _HEADER.size
"""Bytes before each payload: magic, length, LSN, CRC."""
_MAX_PAYLOAD = 0xFFFF_FFFF
_SEGMENT_RE = re.compile(r"wal-(\d{20})\.log")


def segment_name(first_lsn: int) -> str:
    """The file name of the segment whose first record has LSN ``first_lsn``."""
    return f"wal-{first_lsn:020d}.log"


@dataclass(frozen=True, slots=True)
class WalRecord:
    """One record of the log: its LSN and the bytes the caller appended."""

    lsn: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class WalUsage:
    """What the log holds on disk: its segments, their bytes, and its LSNs."""

    segments: int
    bytes: int
    first_lsn: int
    """The first LSN of the oldest segment kept (released records below it are gone)."""
    next_lsn: int
    """The LSN the next append gets."""


@dataclass(slots=True)
class _Follower:
    """An appender waiting for an fsync to cover ``lsn``; the leader opens ``gate``."""

    lsn: int
    gate: threading.Lock
    durable: bool = False
    """Set (under the log's lock) before the gate opens: the record is on disk. Otherwise the
    follower was woken to lead the next fsync, or because the log failed."""


def _closed_gate() -> threading.Lock:
    gate = threading.Lock()
    gate.acquire()
    return gate


@dataclass(frozen=True, slots=True)
class _Segment:
    first_lsn: int
    path: str


@dataclass(frozen=True, slots=True)
class _Scan:
    """What a segment holds: its intact records, where they end, and what follows them."""

    records: list[WalRecord]
    good_bytes: int
    damage: str | None  # None: the segment ends exactly after its last frame


def _frame_crc(payload_crc: int, length: int, lsn: int) -> int:
    return zlib.crc32(_CHECKED.pack(length, lsn), payload_crc)


def _scan_segment(segment: _Segment) -> _Scan:
    """Read every intact frame of ``segment``; stop at the first damaged one."""
    try:
        with open(segment.path, "rb") as f:
            data = memoryview(f.read())
    except OSError as exc:
        raise StorageError(f"cannot read write-ahead log segment {segment.path!r}: {exc}") from exc
    records: list[WalRecord] = []
    offset = 0
    while offset < len(data):
        left = len(data) - offset
        if left < FRAME_HEADER_SIZE:
            damage = f"a {FRAME_HEADER_SIZE}-byte frame header was expected, {left} bytes remain"
            return _Scan(records, offset, damage)
        magic, length, lsn, crc = _HEADER.unpack_from(data, offset)
        if magic != FRAME_MAGIC:
            return _Scan(records, offset, f"frame magic {FRAME_MAGIC!r} expected, found {magic!r}")
        end = offset + FRAME_HEADER_SIZE + length
        if end > len(data):
            damage = (
                f"a {length}-byte payload was expected, {left - FRAME_HEADER_SIZE} bytes remain"
            )
            return _Scan(records, offset, damage)
        payload = data[offset + FRAME_HEADER_SIZE : end]
        found = _frame_crc(zlib.crc32(payload), length, lsn)
        if found != crc:
            return _Scan(records, offset, f"frame CRC {crc:#010x} expected, computed {found:#010x}")
        expected = segment.first_lsn + len(records)
        if lsn != expected:
            # An intact frame with the wrong LSN is no torn write: something else wrote here.
            raise CorruptDataError(
                f"write-ahead log frame has LSN {lsn} where LSN {expected} was expected; the "
                "segment was altered or copied in from another log: restore it from a copy",
                path=segment.path,
                offset=offset,
            )
        records.append(WalRecord(lsn, bytes(payload)))
        offset = end
    return _Scan(records, offset, None)


class WriteAheadLog:
    """A directory of segment files that many threads append records to, each append
    returning its LSN once the record is fsync'd (concurrent appends share fsyncs).

    ``replay`` returns what a previous run left; ``release`` lets whole segments go once their
    records are stored elsewhere. Thread-safe; one open log per directory.
    """

    def __init__(self, directory: str, *, segment_bytes: int = 64 * 1024 * 1024) -> None:
        """Open (creating ``directory`` if needed) the log in ``directory``. Does not replay by
        itself."""
        if isinstance(segment_bytes, bool) or not isinstance(segment_bytes, int):
            raise InvalidOptionError(f"segment_bytes must be an int, got {segment_bytes!r}")
        if segment_bytes < 1:
            raise InvalidOptionError(f"segment_bytes must be at least 1, got {segment_bytes}")
        self._directory = os.path.abspath(os.fspath(directory))
        self._segment_bytes = segment_bytes
        self._dir_fd = _open_directory(self._directory)
        try:
            fcntl.flock(self._dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._dir_fd)
            raise WriterConflictError(
                f"the write-ahead log in {self._directory!r} is open in another WriteAheadLog "
                "(in this or another process): close that one first"
            ) from None
        self._cond = threading.Condition(threading.Lock())
        self._loaded = False
        self._segments: list[_Segment] = []
        self._fd: int | None = None  # the segment being written, opened by the first append
        self._segment_size = 0
        self._next_lsn = 1
        self._synced_lsn = 0
        self._syncing = False
        self._followers: list[_Follower] = []
        self._syncs = 0
        self._failed: str | None = None
        self._closed = False

    @property
    def directory(self) -> str:
        """The absolute path of the log's directory."""
        return self._directory

    @property
    def segment_bytes(self) -> int:
        """The size past which a new segment is started."""
        return self._segment_bytes

    @property
    def syncs(self) -> int:
        """Data fsyncs done so far (for tests and benchmarks to see grouping); fsyncs of the
        directory and of a torn tail cut by replay are not counted."""
        return self._syncs

    @property
    def next_lsn(self) -> int:
        """The LSN the next append gets: every record below it is written (those whose
        ``append`` has not returned yet may still wait for their fsync)."""
        with self._cond:
            self._check_usable()
            if not self._loaded:
                self._load_locked()
            return self._next_lsn

    def usage(self) -> WalUsage:
        """The segments on disk and their size (a segment deleted meanwhile counts 0 bytes)."""
        with self._cond:
            self._check_usable()
            if not self._loaded:
                self._load_locked()
            segments = list(self._segments)
            next_lsn = self._next_lsn
        size = 0
        for segment in segments:
            with contextlib.suppress(OSError):  # deleted by a release meanwhile
                size += os.stat(segment.path).st_size
        first = segments[0].first_lsn if segments else next_lsn
        return WalUsage(len(segments), size, first, next_lsn)

    def replay(self) -> list[WalRecord]:
        """Every intact record still in the log, in LSN order.

        A torn or corrupt tail of the LAST segment (a crash mid-write: short frame, bad CRC) is
        truncated away so later appends follow the last good record; damage in any other
        segment raises CorruptDataError naming the file and byte offset. Call it before the
        first append (``append`` does it implicitly otherwise, to find the next LSN).
        """
        with self._cond:
            self._check_usable()
            return self._load_locked()

    def append(self, payload: bytes) -> int:
        """Write one record and return its LSN (1, 2, 3, ... continuing after the records
        found by replay) once it is durable: fsync'd, usually together with other appends."""
        if not isinstance(payload, bytes):
            raise InvalidOptionError(
                f"a write-ahead log record must be bytes, got {type(payload).__name__}: "
                "serialize it first"
            )
        if len(payload) > _MAX_PAYLOAD:
            raise InvalidOptionError(
                f"a write-ahead log record holds at most {_MAX_PAYLOAD} bytes, got {len(payload)}"
            )
        payload_crc = zlib.crc32(payload)  # outside the lock: the big part of the checksum
        size = FRAME_HEADER_SIZE + len(payload)
        with self._cond:
            self._check_usable()
            if not self._loaded:
                self._load_locked()
            if self._fd is None:
                self._open_writer_locked()
            while True:
                roll = self._segment_size > 0 and self._segment_size + size > self._segment_bytes
                if not (roll and self._syncing):
                    break
                self._cond.wait()  # the old segment's fd is in use by a leader's fsync
                self._check_usable()
            if roll:
                self._roll_locked()
            lsn = self._next_lsn
            header = _HEADER.pack(
                FRAME_MAGIC, len(payload), lsn, _frame_crc(payload_crc, len(payload), lsn)
            )
            self._write_locked(header + payload)
            self._next_lsn = lsn + 1
            self._segment_size += size
            follower = self._sync_or_follow_locked(lsn)
        while follower is not None:
            follower.gate.acquire()  # opened by a leader
            if follower.durable:
                return lsn
            with self._cond:  # to lead the next fsync (or the log failed: raise)
                follower = self._sync_or_follow_locked(lsn)
        return lsn

    def _sync_or_follow_locked(self, lsn: int) -> _Follower | None:
        """None once record ``lsn`` is durable, leading fsyncs while none runs; else the
        follower to wait as while the running one finishes."""
        while self._synced_lsn < lsn:
            self._check_usable(lsn)
            if self._syncing:
                follower = _Follower(lsn, _closed_gate())
                self._followers.append(follower)
                return follower
            self._lead_sync_locked()
        return None

    def _wake_locked(self) -> None:
        """After an fsync: open the gates of the followers it covered and of the first one it
        did not (the next leader). After a failure: open every gate (they raise)."""
        waiting: list[_Follower] = []
        for follower in self._followers:
            if self._failed is None and follower.lsn <= self._synced_lsn:
                follower.durable = True
                follower.gate.release()
            else:
                waiting.append(follower)
        if self._failed is not None or self._closed:
            for follower in waiting:
                follower.gate.release()
            waiting = []
        elif waiting and not self._syncing:
            waiting.pop(0).gate.release()
        self._followers = waiting
        self._cond.notify_all()  # a rollover or close waiting for the fsync to end

    def release(self, lsn: int) -> None:
        """Every record with LSN <= ``lsn`` is safely stored elsewhere: delete the segment files
        that hold only such records (never the segment being written).

        Records above ``lsn`` are still returned by a later replay, also after a reopen; so
        can be some at or below it (those sharing a segment with later ones).
        """
        if isinstance(lsn, bool) or not isinstance(lsn, int):
            raise InvalidOptionError(f"release takes an LSN (an int), got {lsn!r}")
        with self._cond:
            self._check_usable()
            if not self._loaded:
                self._load_locked()
            # Oldest first, the directory fsync'd after each: a crash leaves a suffix of the
            # segments, never a gap.
            while len(self._segments) > 1 and self._segments[1].first_lsn - 1 <= lsn:
                path = self._segments[0].path
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise StorageError(f"cannot delete released segment {path!r}: {exc}") from exc
                self._segments.pop(0)
                self._sync_directory()

    def close(self) -> None:
        """Make every written record durable, then close the files and unlock the directory.
        Appends after this raise CarbonLiteError; closing twice does nothing."""
        with self._cond:
            if self._closed:
                return
            while self._syncing:
                self._cond.wait()
            try:
                if self._fd is not None and self._failed is None:
                    self._sync_segment_locked(self._fd, self._next_lsn - 1)
            finally:
                self._closed = True
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None
                os.close(self._dir_fd)  # releases the flock
                self._cond.notify_all()

    def __enter__(self) -> WriteAheadLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- under the lock ------------------------------------------------------------------

    def _check_usable(self, lsn: int | None = None) -> None:
        if self._failed is not None:
            which = f"record {lsn} may not be durable: " if lsn is not None else ""
            raise StorageError(
                f"{which}the write-ahead log in {self._directory!r} failed earlier "
                f"({self._failed}); close and reopen it, which replays what reached the disk"
            )
        if self._closed:
            raise CarbonLiteError(f"the write-ahead log in {self._directory!r} is closed")

    def _load_locked(self) -> list[WalRecord]:
        """Scan every segment; before the first append, also adopt what is on disk (cutting
        a torn tail) as the state appends continue from."""
        segments = self._list_segments()
        records: list[WalRecord] = []
        next_lsn = segments[0].first_lsn if segments else 1
        tail = _Scan([], 0, None)
        for i, segment in enumerate(segments):
            last = i == len(segments) - 1
            if segment.first_lsn != next_lsn:
                previous = os.path.basename(segments[i - 1].path)
                raise CorruptDataError(
                    f"write-ahead log segment {previous!r} ends before LSN {next_lsn}, but the "
                    f"next segment starts at LSN {segment.first_lsn} (expected "
                    f"{segment_name(next_lsn)!r}): a segment file was removed or renamed; "
                    "restore it",
                    path=segment.path,
                    offset=0,
                )
            tail = _scan_segment(segment)
            if not last and (tail.damage is not None or not tail.records):
                what = tail.damage or "it holds no records"
                raise CorruptDataError(
                    f"write-ahead log segment is damaged before its end: {what}. Only the last "
                    "segment can end in a torn write, so acknowledged records are lost: restore "
                    "the file from a copy",
                    path=segment.path,
                    offset=tail.good_bytes,
                )
            records.extend(tail.records)
            next_lsn = segment.first_lsn + len(tail.records)
        if self._fd is not None:
            # Appends have begun: every frame on disk was written whole under this lock.
            if tail.damage is not None:
                raise CorruptDataError(
                    f"the write-ahead log segment being written changed underneath: "
                    f"{tail.damage}; close the log and reopen it",
                    path=segments[-1].path,
                    offset=tail.good_bytes,
                )
            return records
        if segments and tail.damage is not None:
            _truncate(segments[-1].path, tail.good_bytes)
        self._segments = segments
        self._next_lsn = next_lsn
        self._synced_lsn = next_lsn - 1
        self._segment_size = tail.good_bytes
        self._loaded = True
        return records

    def _list_segments(self) -> list[_Segment]:
        try:
            names = os.listdir(self._directory)
        except OSError as exc:
            raise StorageError(
                f"cannot list the write-ahead log {self._directory!r}: {exc}"
            ) from exc
        found = [(int(m.group(1)), name) for name in names if (m := _SEGMENT_RE.fullmatch(name))]
        return [_Segment(lsn, os.path.join(self._directory, name)) for lsn, name in sorted(found)]

    def _open_writer_locked(self) -> None:
        if self._segments:
            path = self._segments[-1].path
            try:
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            except OSError as exc:
                raise StorageError(f"cannot open write-ahead log segment {path!r}: {exc}") from exc
        else:
            self._create_segment_locked()

    def _create_segment_locked(self) -> None:
        path = os.path.join(self._directory, segment_name(self._next_lsn))
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create write-ahead log segment {path!r}: {exc}") from exc
        self._fd = fd
        self._segments.append(_Segment(self._next_lsn, path))
        self._segment_size = 0
        self._sync_directory()  # the new name is durable before any record in it is acked

    def _roll_locked(self) -> None:
        """Close the current segment durably and start the next one (no fsync is running)."""
        assert self._fd is not None
        self._sync_segment_locked(self._fd, self._next_lsn - 1)
        os.close(self._fd)
        self._fd = None
        self._create_segment_locked()

    def _write_locked(self, frame: bytes) -> None:
        assert self._fd is not None
        view = memoryview(frame)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self._fail_locked(f"a write failed: {exc}")
            raise StorageError(
                f"cannot write to write-ahead log segment {self._segments[-1].path!r}: {exc}"
            ) from exc

    def _lead_sync_locked(self) -> None:
        """fsync as the leader, without the lock, for every frame written so far."""
        assert self._fd is not None
        fd, target = self._fd, self._next_lsn - 1
        self._syncing = True
        done = False
        error: OSError | None = None
        self._cond.release()
        try:
            os.fsync(fd)
            done = True
        except OSError as exc:
            error = exc
        finally:
            self._cond.acquire()
            self._syncing = False
            self._syncs += 1
            if done:
                self._synced_lsn = max(self._synced_lsn, target)
            if error is None:
                self._wake_locked()
        if error is not None:
            self._fail_locked(f"an fsync failed: {error}")
            raise StorageError(f"cannot fsync the write-ahead log: {error}") from error

    def _sync_segment_locked(self, fd: int, target: int) -> None:
        """fsync holding the lock (rollover, close): nothing else is written meanwhile."""
        try:
            os.fsync(fd)
        except OSError as exc:
            self._fail_locked(f"an fsync failed: {exc}")
            raise StorageError(f"cannot fsync the write-ahead log: {exc}") from exc
        self._syncs += 1
        self._synced_lsn = max(self._synced_lsn, target)
        self._wake_locked()

    def _sync_directory(self) -> None:
        try:
            os.fsync(self._dir_fd)
        except OSError as exc:
            self._fail_locked(f"an fsync of the directory failed: {exc}")
            raise StorageError(f"cannot fsync directory {self._directory!r}: {exc}") from exc

    def _fail_locked(self, reason: str) -> None:
        if self._failed is None:
            self._failed = reason
        self._wake_locked()


def _open_directory(directory: str) -> int:
    """Create ``directory`` if needed (durably) and open it for fsync and flock."""
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory, exist_ok=True)
            parent = os.open(os.path.dirname(directory), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(parent)
            finally:
                os.close(parent)
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StorageError(f"cannot open write-ahead log directory {directory!r}: {exc}") from exc


def _truncate(path: str, size: int) -> None:
    """Cut a torn tail durably, so that the next append follows the last intact frame."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StorageError(f"cannot cut the torn tail of {path!r} at byte {size}: {exc}") from exc
