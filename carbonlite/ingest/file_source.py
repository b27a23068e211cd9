"""A directory (or S3 prefix) other engines write finished files into: what is final in it,
and reading one file.

Engines with exactly-once file sinks write a file under a name no reader takes and give it
its final name when their checkpoint or transaction commits: Flink's ``FileSink``
(``.part-<uuid>-<n>.inprogress.<uuid>``, then ``part-<uuid>-<n>``), Flume's HDFS sink
(``FlumeData.<n>.tmp``), Spark's batch file writers (``_temporary/``), Hadoop's ``put``
(``<name>._COPYING_``). So a file is *final* when no part of its path below the source
starts with ``.`` or ``_`` (hidden files, checksums, ``_SUCCESS`` markers and temporary
directories) and its name does not end with ``.tmp``, ``.inprogress`` or ``._COPYING_``.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from carbonlite.errors import InvalidOptionError
from carbonlite.storage import FileStatus, Storage, open_storage, split_protocol
from carbonlite.storage.base import RangeReader

__all__ = ["FileChangedError", "FileSource", "SourceFile", "is_final"]

_TEMP_SUFFIXES = (".tmp", ".inprogress", "._COPYING_")
_WHOLE_READ = 64 << 20
"""Files of object stores up to this size are read in one request; larger ones in ranges."""


class FileChangedError(OSError):
    """A file is not the size it was listed with (still being written, or replaced)."""


def is_final(relative: str) -> bool:
    """Whether the file at ``relative`` (to the source, ``/``-separated) is final."""
    parts = relative.split("/")
    if any(not p or p[0] in "._" for p in parts):
        return False
    return not parts[-1].endswith(_TEMP_SUFFIXES)


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One final file as the listing saw it."""

    path: str
    """The storage's own path."""
    relative: str
    """Path below the source, ``/``-separated: what the record keeps."""
    size: int
    modified_ms: int


class FileSource:
    """The final files below ``uri``, and their bytes."""

    def __init__(
        self, uri: str, storage_options: Mapping[str, Any] | None, glob: str | None
    ) -> None:
        if not isinstance(uri, str) or not uri.strip():
            raise InvalidOptionError(
                f"source must be a directory path or URI such as /data/flink-out or "
                f"s3://bucket/prefix, not {uri!r}"
            )
        if glob is not None and (
            not isinstance(glob, str) or not glob or glob.startswith("/") or "://" in glob
        ):
            raise InvalidOptionError(
                f"glob must be a pattern of file paths relative to the source such as "
                f"'*.parquet' or '2026-*/part-*', not {glob!r}"
            )
        protocol, _ = split_protocol(uri)
        options = dict(storage_options or {}) if protocol == "s3" else None
        self.storage: Storage
        self.storage, self.root = open_storage(uri, options)
        self.glob = glob
        self.local = protocol == "file"
        if self.local and not os.path.isdir(self.root):
            raise InvalidOptionError(
                f"source {uri!r} is a file, not a directory: give the directory the engine "
                "writes its files into"
                if os.path.exists(self.root)
                else f"source {uri!r} does not exist: give the directory the engine writes its "
                "files into (create it first when the engine has not written yet)"
            )
        self.uri = self.storage.uri(self.root)
        """The source's normalised URI (what names its record)."""

    def list(self) -> list[SourceFile]:
        """The final files below the source (and matching ``glob``), oldest first (by
        modification time, then path)."""
        prefix = self.root.rstrip("/") + "/"
        out = []
        for status in self.storage.list(self.root, recursive=True):
            if not status.path.startswith(prefix):
                continue
            relative = status.path[len(prefix) :]
            if not is_final(relative):
                continue
            if self.glob is not None and not fnmatch.fnmatchcase(relative, self.glob):
                continue
            out.append(_source_file(status, relative))
        out.sort(key=lambda f: (f.modified_ms, f.relative))
        return out

    def now(self, file: SourceFile) -> tuple[int, int] | None:
        """The file's size and modification time now (None: it is gone)."""
        if self.local:
            try:
                st = os.stat(file.path)
            except FileNotFoundError:
                return None
            return st.st_size, int(st.st_mtime * 1000)
        try:
            return self.storage.size(file.path), file.modified_ms
        except FileNotFoundError:
            return None

    def open(self, file: SourceFile) -> pa.NativeFile:
        """The file's ``file.size`` bytes (those the listing saw) to decode: mapped from a
        local disk (:class:`FileChangedError` when its size is not that now); one request
        from an object store, or ranged reads of a large object."""
        if self.local:
            mapped = pa.memory_map(file.path)
            if mapped.size() != file.size:
                mapped.close()
                raise FileChangedError(
                    f"{file.path}: {file.size} bytes when listed, {mapped.size()} now"
                )
            return mapped
        if file.size <= _WHOLE_READ:
            return pa.BufferReader(self.storage.read(file.path, 0, file.size))
        return pa.PythonFile(_RangeFile(self.storage.open_reader(file.path), file.size), mode="r")

    def read_all(self, file: SourceFile) -> bytes:
        """Every byte of the file as listed (a bad file kept whole)."""
        return self.storage.read(file.path, 0, file.size)


def _source_file(status: FileStatus, relative: str) -> SourceFile:
    return SourceFile(status.path, relative, status.size, int(status.mtime * 1000))


class _RangeFile:
    """A read-only, seekable file object over a :class:`RangeReader`, ``size`` bytes long."""

    def __init__(self, reader: RangeReader, size: int) -> None:
        self.reader = reader
        self.size = size
        self.position = 0
        self.closed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.position + n)
        if end <= self.position:
            return b""
        data = self.reader.read(self.position, end - self.position)
        self.position += len(data)
        return data

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.reader.close()
