"""The storage contract every backend fulfils.

A table format needs a little more than a filesystem: appending to a file and making it
durable ("hflush"), truncating a file back to a committed length, an atomic
*put-if-absent* that decides races between writers, and an atomic *swap* (read-modify-write)
for a value several writers move forward. Each backend states what it can do;
what it cannot do is refused with :class:`~carbonlite.errors.UnsupportedStorageError`,
never emulated unsafely.

Paths are the backend's own (protocol stripped): an absolute local path, ``/name`` for the
in-memory filesystem, ``bucket/key`` for S3.
"""

from __future__ import annotations

import abc
import posixpath
import random
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

from carbonlite.errors import CommitConflictError, StorageError, UnsupportedStorageError
from carbonlite.seams import reach

__all__ = [
    "SWAP_ATTEMPTS",
    "SWAP_LOCK_TIMEOUT",
    "TEMP_PREFIX",
    "Appender",
    "BufferedObjectAppender",
    "Change",
    "FileStatus",
    "RangeReader",
    "Storage",
    "swap_optimistically",
]

TEMP_PREFIX = ".tmp-"
"""Names of the files a put writes before renaming them into place (local storage): not yet
the document they will be, and left behind by a writer killed between the two steps."""

Change = Callable[[bytes | None], bytes | None]
"""What :meth:`Storage.swap` applies: the current bytes (None: no object) to the new bytes
(None: keep them)."""

Token = TypeVar("Token")

SWAP_ATTEMPTS = 50
"""Tries an optimistic swap makes before it gives up: each lost try means another swap landed,
so 50 in a row takes a storm of writers to one object (a pointer moves once per commit)."""

SWAP_LOCK_TIMEOUT = 60.0
"""Seconds a locking swap waits for the lock: far longer than any read, change and durable
write of a small document take, so a timeout means a swapper hung while holding it."""

_FIRST_PAUSE = 0.002
_LONGEST_PAUSE = 0.1


@dataclass(frozen=True, slots=True)
class FileStatus:
    """One file as a listing sees it."""

    path: str
    size: int
    mtime: float
    """Last modification time, seconds since the epoch (0.0 when the backend has none)."""
    etag: str | None = None
    """An object store's entity tag: changes whenever the object's bytes may have (None when
    the backend has none)."""


class RangeReader(abc.ABC):
    """Random-access reads of one file; safe to call from several threads at once."""

    path: str

    @abc.abstractmethod
    def size(self) -> int:
        """Current length of the file in bytes."""

    @abc.abstractmethod
    def read(self, offset: int, length: int) -> bytes:
        """Read ``length`` bytes at ``offset``; shorter only at the end of the file."""

    def read_buffer(self, offset: int, length: int) -> memoryview:
        """:meth:`read`, as a read-only view that may lie in memory of Arrow's pool (what
        data pages are decoded from); a backend that can read into such memory overrides
        this."""
        return memoryview(self.read(offset, length))

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the reader holds."""

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Appender(abc.ABC):
    """Appends bytes to the end of one file; ``flush`` makes them durable."""

    path: str

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """Length of the file including everything written so far."""

    @abc.abstractmethod
    def write(self, data: bytes | memoryview) -> None:
        """Append ``data``; durable only after :meth:`flush`."""

    @abc.abstractmethod
    def flush(self) -> None:
        """Make every byte written so far durable (flush + fsync: "hflush")."""

    @abc.abstractmethod
    def close(self) -> None:
        """Flush and release the file."""

    def __enter__(self) -> Appender:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Storage(abc.ABC):
    """A filesystem with the operations a table format needs."""

    protocol: str
    supports_append: bool
    """False for object stores: a writer must start a new object instead of appending."""

    def join(self, base: str, *parts: str) -> str:
        """Join path parts with ``/``."""
        return posixpath.join(base, *parts)

    def uri(self, path: str) -> str:
        """The URI a user would type for ``path`` (``memory://x``, ``s3://b/k``, ``/tmp/t``)."""
        return path if self.protocol == "file" else f"{self.protocol}://{path.lstrip('/')}"

    # --- reading -----------------------------------------------------------------------------

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether a file exists at ``path``."""

    @abc.abstractmethod
    def size(self, path: str) -> int:
        """Length of the file; ``FileNotFoundError`` when there is none."""

    @abc.abstractmethod
    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of a file (to its end when ``end`` is None)."""

    @abc.abstractmethod
    def open_reader(self, path: str) -> RangeReader:
        """A reader for many range reads of one file."""

    @abc.abstractmethod
    def list(self, path: str, *, recursive: bool = False) -> list[FileStatus]:
        """Files under the directory ``path`` (empty when it does not exist), sorted by path."""

    def status(self, path: str) -> FileStatus:
        """The file at ``path`` as a listing shows it now; ``FileNotFoundError`` when there is
        none. (This default lists the file's directory; backends with a cheaper way override
        it.)"""
        for found in self.list(path.rsplit("/", 1)[0]):
            if found.path == path:
                return found
        raise FileNotFoundError(self.uri(path))

    # --- writing -----------------------------------------------------------------------------

    @abc.abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Atomically create ``path`` holding ``data`` unless a file of that name exists.

        Returns True when this call created the file, False when one already existed. A reader
        never sees a half-written file.
        """

    @abc.abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Atomically create or replace ``path`` with ``data``."""

    def swap(self, path: str, change: Change) -> bytes | None:
        """Atomically replace the object at ``path`` with ``change(current)``.

        ``current`` is the object's bytes, None when there is none. ``change`` returns the new
        bytes, or None to leave the object as it is. Atomic against every other ``swap`` of the
        same path from any thread or process: no swap's write is lost or applied on top of a
        value it did not see. ``change`` may be called more than once (when another swap got
        there first it is called again with the newer value), so it must be a pure function of
        its argument. Returns the object's bytes after the call (what ``change`` wrote, or what
        it kept).

        Only swaps are atomic against each other: a plain :meth:`put` or :meth:`delete` of the
        same path can still slip in between. On S3 a write whose answer was lost may have
        landed; the swap then reads again and calls ``change`` on the value it wrote itself, so
        ``change`` should map its own result to None (a maximum does; a counter would count
        twice).

        Two ways to make it atomic, one per kind of backend. *Locking* (local disk): an
        exclusive lock is held while reading, changing and writing, so the first try always
        lands and a paused or slow swapper makes the others wait (up to
        :data:`SWAP_LOCK_TIMEOUT`). *Optimistic* (memory, S3, :func:`swap_optimistically`):
        the write lands only if the value is still the one ``change`` saw, else the swap reads
        again; nobody waits for a paused swapper, and one that keeps losing gives up after
        :data:`SWAP_ATTEMPTS` tries. Either way a swapper that gives up raises
        :class:`~carbonlite.errors.CommitConflictError` (local's
        :class:`~carbonlite.errors.WriterConflictError` is one): it lost a race, the storage
        did not fail, and trying again later is the remedy.
        """
        raise UnsupportedStorageError(
            f"{type(self).__name__} cannot swap {path!r} atomically (it implements no "
            "Storage.swap), so a value several writers update could move backwards; use local, "
            "memory:// or s3:// storage"
        )

    @abc.abstractmethod
    def open_appender(self, path: str) -> Appender:
        """Open ``path`` for appending, creating it when missing."""

    def append(self, path: str, data: bytes) -> int:
        """Append ``data`` durably to ``path`` (created if missing); returns the new length."""
        with self.open_appender(path) as appender:
            appender.write(data)
            appender.flush()
            return appender.size

    @abc.abstractmethod
    def truncate(self, path: str, length: int) -> None:
        """Cut ``path`` back to ``length`` bytes, durably. Never extends a file."""

    @abc.abstractmethod
    def delete(self, path: str) -> bool:
        """Delete one file; returns False when it did not exist."""

    def lock(self, path: str, *, timeout: float) -> AbstractContextManager[None]:
        """Hold an exclusive lock named by ``path`` (waiting up to ``timeout`` seconds), or raise
        :class:`~carbonlite.errors.WriterConflictError`. It guards a writer identity's stream
        files against a second live writer with the same identity. Object stores need none:
        their writers never truncate or append to an existing object. A backend whose lock is
        a file removes it as it lets go, so a process that ends leaves none behind."""
        return nullcontext()

    def is_locked(self, path: str) -> bool:
        """Whether a live holder has :meth:`lock` ``path`` now (never creates anything)."""
        return False

    def delete_empty_dirs(self, path: str) -> None:  # noqa: B027 - object stores have no dirs
        """Remove empty directories under (and including) ``path``, where dirs exist."""

    def _check_truncate(self, path: str, length: int, size: int) -> None:
        if length < 0:
            raise StorageError(f"cannot truncate {self.uri(path)!r} to a negative length {length}")
        if length > size:
            raise StorageError(
                f"cannot truncate {self.uri(path)!r} to {length} bytes: the file has only "
                f"{size} bytes (truncate never extends a file)"
            )


class BufferedObjectAppender(Appender):
    """Append emulation for object stores, for *new* objects only.

    Bytes are buffered and each :meth:`flush` writes the whole object with one atomic PUT, so
    a reader sees either the previous flush or this one, never a torn object. Opening an
    existing object is refused: rewriting committed bytes is what append-less stores must not do.
    """

    def __init__(self, storage: Storage, path: str) -> None:
        if storage.exists(path):
            raise UnsupportedStorageError(
                f"{storage.uri(path)!r} already exists and {storage.protocol!r} storage cannot "
                "append to an object; write a new object instead"
            )
        self.path = path
        self._storage = storage
        self._chunks: list[bytes] = []
        self._size = 0
        self._flushed_size = -1
        self._lock = threading.Lock()
        self._closed = False

    @property
    def size(self) -> int:
        return self._size

    def write(self, data: bytes | memoryview) -> None:
        with self._lock:
            self._chunks.append(bytes(data))
            self._size += len(data)

    def flush(self) -> None:
        with self._lock:
            if self._flushed_size == self._size:
                return
            body = b"".join(self._chunks)
            self._chunks = [body]
            if self._flushed_size < 0:
                # the first write creates the object, or fails: another writer (a zombie task
                # of the same name, say) must never be overwritten, nor overwrite this one
                if not self._storage.put_if_absent(self.path, body):
                    raise StorageError(
                        f"{self._storage.uri(self.path)!r} was created by another writer "
                        "while this one was writing it; nothing of it was overwritten"
                    )
            else:
                self._storage.put(self.path, body)  # the object this appender created
            self._flushed_size = self._size

    def close(self) -> None:
        if not self._closed:
            self.flush()
            self._closed = True


def swap_optimistically(
    uri: str,
    change: Change,
    read: Callable[[], tuple[bytes | None, Token]],
    write_if: Callable[[bytes, Token], bool],
) -> bytes | None:
    """Read, change and conditionally write until a write lands (see :meth:`Storage.swap`).

    ``read`` returns the current bytes (None: no object) and a token that names that value;
    ``write_if(new, token)`` writes ``new`` only while ``token`` still names the current value
    and returns whether it did. A False means another writer got in between (or, on S3, that
    the write's outcome is unknown): the loop reads again, so ``change`` always sees the value
    its result replaces.
    """
    for attempt in range(SWAP_ATTEMPTS):
        current, token = read()
        new = change(current)
        if new is None:
            return current  # nothing to write: the value read is the value after the call
        new = bytes(new)
        reach("storage.before_swap_write")
        if write_if(new, token):
            return new
        _pause(attempt)
    raise CommitConflictError(
        f"could not swap {uri!r}: {SWAP_ATTEMPTS} times in a row another writer changed it "
        "between this swap's read and its write, and the swap gave up (try again later, or "
        "give the object fewer concurrent writers)"
    )


def _pause(attempt: int) -> None:
    """A short random sleep, growing with the attempts, so that swappers who collided do not
    collide again in lockstep."""
    time.sleep(random.uniform(0, min(_LONGEST_PAUSE, _FIRST_PAUSE * 2**attempt)))
