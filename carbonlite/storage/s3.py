"""S3 (and S3-protocol servers) through s3fs.

Objects cannot be appended to, so ``supports_append`` is False and writers start a new
object for every append. Put-if-absent is a conditional PUT (``If-None-Match: *``); because
some S3-compatible servers ignore that header, the first put-if-absent into a bucket proves
that the server honours it, and refuses the bucket otherwise.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any

from carbonlite.errors import StorageError, UnsupportedStorageError
from carbonlite.storage.base import (
    Appender,
    BufferedObjectAppender,
    FileStatus,
    RangeReader,
    Storage,
)

__all__ = ["S3Storage"]


def _mtime(info: dict[str, Any]) -> float:
    stamp = info.get("LastModified") or info.get("last_modified") or info.get("mtime")
    if stamp is None:
        return 0.0
    return float(stamp.timestamp()) if hasattr(stamp, "timestamp") else float(stamp)


class _S3RangeReader(RangeReader):
    def __init__(self, storage: S3Storage, path: str) -> None:
        self.path = path
        self._storage = storage
        self._size = storage.size(path)

    def size(self) -> int:
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        if length <= 0 or offset >= self._size:
            return b""
        return self._storage.read(self.path, offset, min(self._size, offset + length))


class S3Storage(Storage):
    """An S3 bucket (or any server speaking the S3 protocol)."""

    protocol = "s3"
    supports_append = False

    def __init__(self, storage_options: dict[str, Any] | None = None) -> None:
        try:
            import s3fs
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise UnsupportedStorageError(
                "s3:// tables need s3fs; install it with: pip install 'carbonlite[s3]'"
            ) from exc
        options = dict(storage_options or {})
        options["use_listings_cache"] = False
        self.fs = s3fs.S3FileSystem(**options)
        self._verified_buckets: set[str] = set()
        self._verify_lock = threading.Lock()

    def exists(self, path: str) -> bool:
        try:
            self.fs.info(path, refresh=True)
        except FileNotFoundError:
            return False
        return True

    def size(self, path: str) -> int:
        info = self.fs.info(path, refresh=True)
        if info.get("type") == "directory":
            raise FileNotFoundError(self.uri(path))
        return int(info["size"])

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        if end is not None and end <= start:
            return b""
        return bytes(self.fs.cat_file(path, start=start, end=end))

    def open_reader(self, path: str) -> RangeReader:
        return _S3RangeReader(self, path)

    def list(self, path: str, *, recursive: bool = False) -> list[FileStatus]:
        path = path.rstrip("/")
        self.fs.invalidate_cache(path)
        try:
            if recursive:
                infos = list(self.fs.find(path, detail=True).values())
            else:
                infos = self.fs.ls(path, detail=True, refresh=True)
        except FileNotFoundError:
            return []
        out = [
            FileStatus(info["name"], int(info.get("size") or 0), _mtime(info))
            for info in infos
            if info.get("type") == "file"
        ]
        out.sort(key=lambda s: s.path)
        return out

    def put_if_absent(self, path: str, data: bytes) -> bool:
        self._verify_conditional_put(path.split("/", 1)[0])
        try:
            self.fs.pipe_file(path, bytes(data), mode="create")
        except FileExistsError:
            return False
        return True

    def put(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(path, bytes(data))

    def open_appender(self, path: str) -> Appender:
        return BufferedObjectAppender(self, path)

    def append(self, path: str, data: bytes) -> int:
        raise UnsupportedStorageError(
            f"cannot append to {self.uri(path)!r}: S3 objects cannot be appended to; "
            "write a new object instead (check Storage.supports_append)"
        )

    def truncate(self, path: str, length: int) -> None:
        size = self.size(path)
        self._check_truncate(path, length, size)
        if length < size:
            # One PUT replaces the object atomically: readers see the old or the new length.
            self.fs.pipe_file(path, self.read(path, 0, length))

    def delete(self, path: str) -> bool:
        if not self.exists(path):  # S3 deletes of missing keys succeed silently
            return False
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            return False
        return True

    def _verify_conditional_put(self, bucket: str) -> None:
        if bucket in self._verified_buckets:
            return
        with self._verify_lock:
            if bucket in self._verified_buckets:
                return
            probe = f"{bucket}/_carbonlite_probe/{uuid.uuid4().hex}"
            try:
                self.fs.pipe_file(probe, b"1", mode="create")
                try:
                    self.fs.pipe_file(probe, b"2", mode="create")
                except FileExistsError:
                    honoured = True
                else:
                    honoured = False
            except FileExistsError:  # pragma: no cover - a fresh uuid cannot exist
                honoured = True
            except Exception as exc:
                raise StorageError(
                    f"could not check conditional writes on bucket {bucket!r}: {exc}"
                ) from exc
            finally:
                with contextlib.suppress(Exception):
                    self.fs.rm_file(probe)
            if not honoured:
                raise UnsupportedStorageError(
                    f"the S3 server behind bucket {bucket!r} ignores conditional writes "
                    "(If-None-Match: *), so concurrent commits could overwrite each other; "
                    "CarbonLite refuses to write there"
                )
            self._verified_buckets.add(bucket)
