"""fsspec's in-process memory filesystem, made race-free with one process-wide lock.

``memory://`` tables are visible to every fsspec user in the same process (the store is
fsspec's own), which makes them handy for tests and notebooks. They do not survive the
process and cannot be shared between processes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fsspec.implementations.memory import MemoryFileSystem

from carbonlite.errors import WriterConflictError
from carbonlite.storage.base import (
    Appender,
    Change,
    FileStatus,
    RangeReader,
    Storage,
    swap_optimistically,
)

__all__ = ["MemoryStorage"]

_LOCK = threading.RLock()
_OWNER_LOCKS: dict[str, threading.Lock] = {}


def _mtime(f: Any) -> float:
    stamp = getattr(f, "modified", None) or getattr(f, "created", None)
    return float(stamp.timestamp()) if stamp is not None else 0.0


class _MemoryRangeReader(RangeReader):
    def __init__(self, storage: MemoryStorage, path: str) -> None:
        self.path = path
        self._storage = storage
        storage.size(path)  # raise FileNotFoundError now, like other backends

    def size(self) -> int:
        return self._storage.size(self.path)

    def read(self, offset: int, length: int) -> bytes:
        return self._storage.read(self.path, offset, offset + length)


class _MemoryAppender(Appender):
    def __init__(self, storage: MemoryStorage, path: str) -> None:
        self.path = path
        self._storage = storage
        with _LOCK:
            if path not in storage.fs.store:
                storage.fs.pipe_file(path, b"")
            self._size = storage.size(path)

    @property
    def size(self) -> int:
        return self._size

    def write(self, data: bytes | memoryview) -> None:
        with _LOCK:
            f = self._storage.fs.store[self.path]
            f.seek(0, 2)
            f.write(bytes(data))
            self._size = f.tell()

    def flush(self) -> None:
        """Memory is as durable as it gets; nothing to do."""

    def close(self) -> None:
        """Nothing is held open."""


class MemoryStorage(Storage):
    """The ``memory://`` filesystem of this process."""

    protocol = "memory"
    supports_append = True

    def __init__(self) -> None:
        self.fs = MemoryFileSystem()

    def exists(self, path: str) -> bool:
        with _LOCK:
            return path in self.fs.store

    def size(self, path: str) -> int:
        with _LOCK:
            try:
                return int(self.fs.store[path].getbuffer().nbytes)
            except KeyError:
                raise FileNotFoundError(self.uri(path)) from None

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        with _LOCK:
            try:
                buf = self.fs.store[path].getbuffer()
            except KeyError:
                raise FileNotFoundError(self.uri(path)) from None
            try:
                return bytes(buf[start:end])
            finally:
                buf.release()

    def open_reader(self, path: str) -> RangeReader:
        return _MemoryRangeReader(self, path)

    def list(self, path: str, *, recursive: bool = False) -> list[FileStatus]:
        prefix = path.rstrip("/") + "/"
        out = []
        with _LOCK:
            for key, f in self.fs.store.items():
                if not key.startswith(prefix):
                    continue
                if not recursive and "/" in key[len(prefix) :]:
                    continue
                out.append(FileStatus(key, int(f.getbuffer().nbytes), _mtime(f)))
        out.sort(key=lambda s: s.path)
        return out

    def put_if_absent(self, path: str, data: bytes) -> bool:
        with _LOCK:
            if path in self.fs.store:
                return False
            self.fs.pipe_file(path, bytes(data))
            return True

    def put(self, path: str, data: bytes) -> None:
        with _LOCK:
            self.fs.pipe_file(path, bytes(data))

    def swap(self, path: str, change: Change) -> bytes | None:
        """Optimistic: ``change`` runs outside the lock (so a swapper paused in it, or at the
        seam after it, holds nobody up); the write happens under the lock only while the bytes
        are still those ``change`` saw. Equal bytes are the same value, so a value that changed
        and changed back is rightly written over."""

        def read() -> tuple[bytes | None, bytes | None]:
            current = self._current(path)
            return current, current

        def write_if(data: bytes, seen: bytes | None) -> bool:
            with _LOCK:
                if self._current(path) != seen:
                    return False
                self.fs.pipe_file(path, data)
                return True

        return swap_optimistically(self.uri(path), change, read, write_if)

    def _current(self, path: str) -> bytes | None:
        with _LOCK:
            f = self.fs.store.get(path)
            return None if f is None else bytes(f.getvalue())

    def open_appender(self, path: str) -> Appender:
        return _MemoryAppender(self, path)

    def truncate(self, path: str, length: int) -> None:
        with _LOCK:
            self._check_truncate(path, length, self.size(path))
            self.fs.store[path].truncate(length)

    def delete(self, path: str) -> bool:
        with _LOCK:
            return self.fs.store.pop(path, None) is not None

    def is_locked(self, path: str) -> bool:
        with _LOCK:
            held = _OWNER_LOCKS.get(path)
        return held is not None and held.locked()

    @contextmanager
    def lock(self, path: str, *, timeout: float) -> Iterator[None]:
        with _LOCK:
            held = _OWNER_LOCKS.setdefault(path, threading.Lock())
        if not held.acquire(timeout=timeout):
            raise WriterConflictError(
                f"{path!r} is held by another live writer (waited {timeout:g} s): "
                "give every concurrent writer its own writer id"
            )
        try:
            yield
        finally:
            held.release()
