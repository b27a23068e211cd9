"""The storage contract every backend fulfils.

A table format needs a little more than a filesystem: appending to a file and making it
durable ("hflush"), truncating a file back to a committed length, and an atomic
*put-if-absent* that decides races between writers. Each backend states what it can do;
what it cannot do is refused with :class:`~carbonlite.errors.UnsupportedStorageError`,
never emulated unsafely.

Paths are the backend's own (protocol stripped): an absolute local path, ``/name`` for the
in-memory filesystem, ``bucket/key`` for S3.
"""

from __future__ import annotations

import abc
import posixpath
import threading
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from types import TracebackType

from carbonlite.errors import StorageError, UnsupportedStorageError

__all__ = [
    "TEMP_PREFIX",
    "Appender",
    "BufferedObjectAppender",
    "FileStatus",
    "RangeReader",
    "Storage",
]

TEMP_PREFIX = ".tmp-"
"""Names of the files a put writes before renaming them into place (local storage): not yet
the document they will be, and left behind by a writer killed between the two steps."""


@dataclass(frozen=True, slots=True)
class FileStatus:
    """One file as a listing sees it."""

    path: str
    size: int
    mtime: float
    """Last modification time, seconds since the epoch (0.0 when the backend has none)."""


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
        their writers never truncate or append to an existing object."""
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
