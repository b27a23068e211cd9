"""Local disk: POSIX calls for durability (fsync), truncation and atomic hard links."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

import pyarrow as pa

from carbonlite.errors import UnsupportedStorageError, WriterConflictError
from carbonlite.seams import reach
from carbonlite.storage.base import (
    SWAP_LOCK_TIMEOUT,
    TEMP_PREFIX,
    Appender,
    Change,
    FileStatus,
    RangeReader,
    Storage,
)

__all__ = ["SWAP_LOCK_SUFFIX", "LocalStorage"]

SWAP_LOCK_SUFFIX = ".lock"
"""What a swapped file's lock file adds to its name (``_last_checkpoint.lock``); a listing of
the directory sees it beside the file."""

# errno values with which a filesystem says it has no hard links.
_NO_LINK_ERRNOS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK}


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _LocalRangeReader(RangeReader):
    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def read(self, offset: int, length: int) -> bytes:
        data = os.pread(self._fd, length, offset)
        if len(data) < length:  # pread may return short reads on some filesystems
            parts = [data]
            got = len(data)
            while got < length:
                more = os.pread(self._fd, length - got, offset + got)
                if not more:
                    break
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        return data

    def read_buffer(self, offset: int, length: int) -> memoryview:
        # Into a buffer of Arrow's memory pool, which keeps and reuses what it frees: a new
        # ``bytes`` of several MB (one blocklet) is fresh memory each time, and faulting it
        # in cost a full scan of a 5M-row table as much as decoding it (issue 30).
        buf = pa.allocate_buffer(length)
        got = os.preadv(self._fd, [buf], offset)
        while got < length:  # short reads: as read()
            more = os.preadv(self._fd, [memoryview(buf)[got:]], offset + got)
            if not more:
                return memoryview(buf)[:got].toreadonly()
            got += more
        return memoryview(buf).toreadonly()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


SYNC_EVERY = 8 * 1024 * 1024
"""Bytes an appender lets pile up unsynced before it syncs them in the background, so that
``flush`` has only the tail left to wait for (RocksDB's ``bytes_per_sync``). Measured with a
Spark micro-batch of 500,000 event rows (31 MB written): the flush at the end took 34 ms when
it synced everything, 13 ms with this (2 and 4 MiB were no better)."""


def _datasync(fd: int) -> None:
    os.fdatasync(fd) if hasattr(os, "fdatasync") else os.fsync(fd)


def _sync_in_background(fd: int, size: int) -> Future[int]:
    """fdatasync ``fd`` on a thread of its own; the future holds ``size`` once it is durable
    (or the sync's error, which the next flush raises: a failed fsync is never forgotten)."""
    future: Future[int] = Future()

    def run() -> None:
        try:
            _datasync(fd)
        except BaseException as exc:  # handed to whoever flushes next
            future.set_exception(exc)
        else:
            future.set_result(size)

    threading.Thread(target=run, name="carbonlite-sync", daemon=True).start()
    return future


class _LocalAppender(Appender):
    """Appends with O_APPEND; ``flush`` makes everything written durable. Every
    :data:`SYNC_EVERY` bytes a background sync starts, one at a time, so the bytes reach the
    disk while more are written."""

    def __init__(self, path: str) -> None:
        self.path = path
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        created = not os.path.exists(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._synced_size = self._size
        self._syncing: Future[int] | None = None
        self._dir_to_sync = parent if created else None

    @property
    def size(self) -> int:
        return self._size

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            self._size += written
            view = view[written:]
        self._collect(wait=False)
        if self._syncing is None and self._size - self._synced_size >= SYNC_EVERY:
            self._syncing = _sync_in_background(self._fd, self._size)

    def _collect(self, *, wait: bool) -> None:
        """Take in the background sync's outcome once it is done (or wait for it)."""
        syncing = self._syncing
        if syncing is None or not (wait or syncing.done()):
            return
        self._syncing = None
        self._synced_size = max(self._synced_size, syncing.result())

    def flush(self) -> None:
        self._collect(wait=True)
        if self._synced_size != self._size:
            _datasync(self._fd)
            self._synced_size = self._size
        if self._dir_to_sync is not None:
            _fsync_dir(self._dir_to_sync)
            self._dir_to_sync = None

    def close(self) -> None:
        if self._fd >= 0:
            try:
                self.flush()  # waits for a running background sync first, even when it failed
            finally:
                os.close(self._fd)
                self._fd = -1


def _names(path: str, fd: int) -> bool:
    """Whether ``path`` names the file open as ``fd`` (a lock file not deleted meanwhile)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (found.st_ino, found.st_dev) == (held.st_ino, held.st_dev)


class LocalStorage(Storage):
    """The local filesystem."""

    protocol = "file"
    supports_append = True

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(base, *parts)

    def exists(self, path: str) -> bool:
        return os.path.isfile(path)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        with open(path, "rb") as f:
            if start:
                f.seek(start)
            return f.read() if end is None else f.read(max(0, end - start))

    def open_reader(self, path: str) -> RangeReader:
        return _LocalRangeReader(path)

    def list(self, path: str, *, recursive: bool = False) -> list[FileStatus]:
        out: list[FileStatus] = []
        if not os.path.isdir(path):
            return out
        if recursive:
            for root, _dirs, files in os.walk(path):
                for name in files:
                    full = os.path.join(root, name)
                    try:
                        st = os.stat(full)
                    except FileNotFoundError:
                        continue
                    out.append(FileStatus(full, st.st_size, st.st_mtime))
        else:
            with os.scandir(path) as entries:
                for entry in entries:
                    try:
                        if entry.is_file():
                            st = entry.stat()
                            out.append(FileStatus(entry.path, st.st_size, st.st_mtime))
                    except FileNotFoundError:
                        continue
        out.sort(key=lambda s: s.path)
        return out

    def put_if_absent(self, path: str, data: bytes) -> bool:
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f"{TEMP_PREFIX}{uuid.uuid4().hex}")
        self._write_synced(tmp, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno in _NO_LINK_ERRNOS:
                raise UnsupportedStorageError(
                    f"the filesystem holding {parent!r} has no hard links, so CarbonLite cannot "
                    "create files atomically-if-absent there; use a local POSIX filesystem "
                    "(ext4, xfs, apfs) or an object store with conditional writes"
                ) from exc
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        _fsync_dir(parent)
        return True

    def put(self, path: str, data: bytes) -> None:
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f"{TEMP_PREFIX}{uuid.uuid4().hex}")
        self._write_synced(tmp, data)
        try:
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _fsync_dir(parent)

    def swap(self, path: str, change: Change) -> bytes | None:
        """Locking: an exclusive ``flock`` of the sibling ``<path>.lock`` is held while the
        file is read, changed and durably replaced (:meth:`put`), so ``change`` runs once and
        every other swapper, in this process or another, waits for its turn. A swapper paused
        inside (at ``change`` or at the ``storage.before_swap_write`` seam) therefore blocks
        the others, up to :data:`~carbonlite.storage.base.SWAP_LOCK_TIMEOUT`; the lock file is
        there only while a swap holds it (:meth:`lock`)."""
        lock_path = f"{path}{SWAP_LOCK_SUFFIX}"
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self.lock(lock_path, timeout=SWAP_LOCK_TIMEOUT))
            except WriterConflictError:
                raise WriterConflictError(
                    f"could not swap {path!r}: another swapper held its lock {lock_path!r} for "
                    f"{SWAP_LOCK_TIMEOUT:g} s (hung, or paused while swapping); try again later"
                ) from None
            try:
                current: bytes | None = self.read(path)
            except FileNotFoundError:
                current = None
            new = change(current)
            if new is None:
                return current
            new = bytes(new)
            reach("storage.before_swap_write")
            self.put(path, new)
            return new

    def open_appender(self, path: str) -> Appender:
        return _LocalAppender(path)

    def truncate(self, path: str, length: int) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            self._check_truncate(path, length, os.fstat(fd).st_size)
            os.ftruncate(fd, length)
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self, path: str) -> bool:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True

    @contextmanager
    def lock(self, path: str, *, timeout: float) -> Iterator[None]:
        """``flock`` on a lock file: exclusive between processes (and open files) of this host.

        The lock file exists only while it is held: the holder deletes it before it lets go
        (a process that ends, normally or by an error, leaves none; one killed leaves its file
        for ``recover``). So after locking, the path must still name the locked file: a waiter
        that opened a file its holder deleted (or one ``recover`` deleted) holds no lock, and
        starts over on the file the path names now.
        """
        os.makedirs(os.path.dirname(path), exist_ok=True)
        deadline = time.monotonic() + timeout
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() >= deadline:
                            raise WriterConflictError(
                                f"{path!r} is held by another live writer (waited {timeout:g} s): "
                                "give every concurrent writer its own writer id"
                            ) from None
                        reach("storage.lock_busy")
                        time.sleep(0.01)
                if not _names(path, fd):
                    os.close(fd)
                    continue
            except BaseException:
                os.close(fd)
                raise
            try:
                yield
            finally:
                try:
                    if _names(path, fd):  # still held: a waiter on this file starts over
                        os.unlink(path)
                finally:
                    os.close(fd)  # closing the descriptor releases the lock
            return

    def is_locked(self, path: str) -> bool:
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def delete_empty_dirs(self, path: str) -> None:
        if not os.path.isdir(path):
            return
        for root, _dirs, _files in os.walk(path, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(root)

    @staticmethod
    def _write_synced(path: str, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
