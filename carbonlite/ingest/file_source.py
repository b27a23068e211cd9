"""A directory (or S3 prefix) other engines write finished files into: what is final in it,
and reading one file.

Engines with exactly-once file sinks write a file under a name no reader takes and give it
its final name when their checkpoint or transaction commits: Flink's ``FileSink``
(``.part-<uuid>-<n>.inprogress.<uuid>``, then ``part-<uuid>-<n>``), Flume's HDFS sink
(``FlumeData.<n>.tmp``), Spark's batch file writers (``_temporary/``), Hadoop's ``put``
(``<name>._COPYING_``). So a file is *final* when no part of its path below the source
starts with ``.`` or ``_`` (hidden files, checksums, ``_SUCCESS`` markers and temporary
directories) and its name does not end with ``.tmp``, ``.inprogress`` or ``._COPYING_``.

A local source is a boundary (``carbonlite/nofollow.py``, the rule ``carbonlite serve``
keeps for its root): a symbolic link below it is never followed, whether to a file or a
directory, nor is anything read that is not a regular file (a pipe, a device); the listing
names them (:attr:`Listing.skipped`) so the ingester can say so. Files are opened one path
component at a time without following a link, so a link put in a file's place after it was
listed is refused too.
"""

from __future__ import annotations

import fnmatch
import mmap
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from carbonlite.errors import InvalidOptionError
from carbonlite.ingest.file_record import FileVersion
from carbonlite.nofollow import Entry, NotFollowedError, open_file_below, walk_below
from carbonlite.storage import FileStatus, Storage, open_storage, split_protocol
from carbonlite.storage.base import RangeReader

__all__ = ["FileChangedError", "FileSource", "Listing", "SourceFile", "is_final"]

_TEMP_SUFFIXES = (".tmp", ".inprogress", "._COPYING_")
_WHOLE_READ = 64 << 20
"""Files of object stores up to this size are read in one request; larger ones in ranges."""


class FileChangedError(OSError):
    """A file is not the size it was listed with (still being written, or replaced)."""


def is_final(relative: str) -> bool:
    """Whether the file at ``relative`` (to the source, ``/``-separated) is final."""
    return _may_hold_final(relative) and not relative.endswith(_TEMP_SUFFIXES)


def _may_hold_final(relative: str) -> bool:
    """Whether no part of ``relative`` is hidden or temporary (starts with ``.`` or ``_``):
    a directory that may hold final files."""
    return not any(not p or p[0] in "._" for p in relative.split("/"))


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One final file as the listing saw it."""

    path: str
    """The storage's own path."""
    relative: str
    """Path below the source, ``/``-separated: what the record keeps."""
    size: int
    modified_ms: int
    etag: str | None = None
    """An object store's ETag (None elsewhere)."""

    @property
    def version(self) -> FileVersion:
        """What tells this version of the file from another under its path."""
        return FileVersion(self.modified_ms, self.size, self.etag)


@dataclass(frozen=True, slots=True)
class Listing:
    """What a listing found: the final files, oldest first, and what it did not take."""

    files: list[SourceFile]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """``(path below the source, what it is)`` of each entry that would be a final file but
    is a symbolic link or not a regular file: never followed, never read."""


_Files = list[SourceFile]
_Skipped = list[tuple[str, str]]


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

    def list(self) -> _Files:
        """The final files below the source (and matching ``glob``), oldest first (by
        modification time, then path)."""
        return self.scan().files

    def scan(self) -> Listing:
        """The final files below the source (and matching ``glob``), oldest first (by
        modification time, then path), and the links and other entries passed over."""
        if self.local:
            files, skipped = self._scan_local()
        else:
            files, skipped = self._scan_storage(), []
        files.sort(key=lambda f: (f.modified_ms, f.relative))
        return Listing(files, skipped)

    def _wanted(self, relative: str) -> bool:
        return is_final(relative) and (
            self.glob is None or fnmatch.fnmatchcase(relative, self.glob)
        )

    def _scan_storage(self) -> _Files:
        prefix = self.root.rstrip("/") + "/"
        out = []
        for status in self.storage.list(self.root, recursive=True):
            if not status.path.startswith(prefix):
                continue
            relative = status.path[len(prefix) :]
            if self._wanted(relative):
                out.append(_source_file(status, relative))
        return out

    def _scan_local(self) -> tuple[_Files, _Skipped]:
        """A walk that follows no link (directories that cannot hold a final file, hidden
        or temporary ones, are not entered)."""
        files, skipped = [], []
        for entry in walk_below(self.root, descend=_may_hold_final):
            if not self._wanted(entry.relative):
                continue
            if entry.kind == "file":
                files.append(_local_file(self.root, entry))
            else:
                what = "a symbolic link" if entry.kind == "link" else "not a regular file"
                skipped.append((entry.relative, what))
        return files, skipped

    def current(self, file: SourceFile) -> FileVersion | None:
        """The version of the file at ``file``'s path now (None: it is gone, or is no longer
        a regular file: a link put in its place)."""
        if self.local:
            try:
                fd = open_file_below(self.root, file.relative.split("/"))
            except (FileNotFoundError, NotFollowedError):
                return None
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)
            return FileVersion(int(st.st_mtime * 1000), st.st_size)
        try:
            return _source_file(self.storage.status(file.path), file.relative).version
        except FileNotFoundError:
            return None

    def now(self, file: SourceFile) -> tuple[int, int] | None:
        """The file's size and modification time now (None: it is gone)."""
        version = self.current(file)
        if version is None:
            return None
        return file.size if version.size is None else version.size, version.modified_ms

    def open(self, file: SourceFile) -> pa.NativeFile:
        """The file's ``file.size`` bytes (those the listing saw) to decode: mapped from a
        local disk, reached without following a link (:class:`FileChangedError` when its
        size is not that now, or a link took its place); one request from an object store,
        or ranged reads of a large object."""
        if self.local:
            return pa.BufferReader(self._map_local(file))
        if file.size <= _WHOLE_READ:
            return pa.BufferReader(self.storage.read(file.path, 0, file.size))
        return pa.PythonFile(_RangeFile(self.storage.open_reader(file.path), file.size), mode="r")

    def _open_local(self, file: SourceFile) -> int:
        """A descriptor of the file, reached without following a link
        (:class:`FileChangedError` when something else than a regular file is there now)."""
        try:
            return open_file_below(self.root, file.relative.split("/"))
        except NotFollowedError as exc:
            raise FileChangedError(f"{file.path}: {exc}") from None

    def _map_local(self, file: SourceFile) -> pa.Buffer:
        fd = self._open_local(file)
        try:
            size = os.fstat(fd).st_size
            if size != file.size:
                raise FileChangedError(f"{file.path}: {file.size} bytes when listed, {size} now")
            if size == 0:
                return pa.py_buffer(b"")
            return pa.py_buffer(mmap.mmap(fd, size, access=mmap.ACCESS_READ))
        finally:
            os.close(fd)

    def read_all(self, file: SourceFile) -> bytes:
        """Every byte of the file as listed (a bad file kept whole)."""
        if self.local:
            with os.fdopen(self._open_local(file), "rb") as handle:
                return handle.read(file.size)
        return self.storage.read(file.path, 0, file.size)


def _source_file(status: FileStatus, relative: str) -> SourceFile:
    return SourceFile(status.path, relative, status.size, int(status.mtime * 1000), status.etag)


def _local_file(root: str, entry: Entry) -> SourceFile:
    path = os.path.join(root, *entry.relative.split("/"))
    return SourceFile(path, entry.relative, entry.size, int(entry.mtime * 1000))


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
