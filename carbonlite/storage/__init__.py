"""Storage: the only code in CarbonLite that touches a filesystem.

``open_storage(uri)`` picks a backend from the URI and returns it with the backend's own path:

- a plain path or ``file://``: :class:`LocalStorage` (POSIX; hard links for put-if-absent)
- ``memory://``: :class:`MemoryStorage` (fsspec's in-process store)
- ``s3://`` / ``s3a://``: :class:`~carbonlite.storage.s3.S3Storage` (obstore, imported only
  when an S3 URI is opened; conditional PUT for put-if-absent)

Any other protocol is refused: CarbonLite never runs on a filesystem where it cannot make a
commit atomic.
"""

from __future__ import annotations

import errno
import json
import os
import re
import threading
from typing import Any

from carbonlite.errors import InvalidOptionError, StorageError, UnsupportedStorageError
from carbonlite.storage.base import (
    TEMP_PREFIX,
    Appender,
    BufferedObjectAppender,
    Change,
    FileStatus,
    RangeReader,
    Storage,
)
from carbonlite.storage.local import LocalStorage
from carbonlite.storage.memory import MemoryStorage

__all__ = [
    "TEMP_PREFIX",
    "Appender",
    "BufferedObjectAppender",
    "Change",
    "FileStatus",
    "LocalStorage",
    "MemoryStorage",
    "RangeReader",
    "Storage",
    "open_storage",
    "split_protocol",
]

SUPPORTED_PROTOCOLS = ("file", "memory", "s3")

_cache: dict[tuple[str, str], Storage] = {}
_cache_lock = threading.Lock()


def split_protocol(uri: str) -> tuple[str, str]:
    """``"s3://b/k"`` -> ``("s3", "b/k")``; a plain path -> ``("file", path)``.

    Local paths come in every form Hadoop and fsspec write: ``/p``, ``file:/p`` (what Spark
    passes for a catalog table's ``LOCATION``), ``file:///p``, ``file://localhost/p`` and
    fsspec's ``local://`` spellings; all are the local path ``/p``. Percent signs are kept as
    they are (Hadoop's and fsspec's string forms do not encode)."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", uri)
    if scheme is not None and scheme.group(1).lower() in ("file", "local"):
        return "file", _local_path(uri, uri[scheme.end() :])
    if "://" not in uri:
        return "file", uri
    protocol, rest = uri.split("://", 1)
    protocol = protocol.lower()
    if protocol in ("s3a", "s3n"):
        protocol = "s3"
    return protocol, rest


def _local_path(uri: str, rest: str) -> str:
    if not rest.startswith("//"):
        return rest  # file:/p (Hadoop) or file:relative
    authority, slash, path = rest[2:].partition("/")
    if authority.lower() not in ("", "localhost"):
        raise UnsupportedStorageError(
            f"cannot open {uri!r}: {authority!r} names another host; a file: URI must be local "
            "(file:/path, file:///path or file://localhost/path)"
        )
    return slash + path


def open_storage(uri: str, storage_options: dict[str, Any] | None = None) -> tuple[Storage, str]:
    """The storage for ``uri`` and the path of ``uri`` within it."""
    protocol, rest = split_protocol(uri)
    if protocol == "file":
        if storage_options:
            raise UnsupportedStorageError(
                f"local paths take no storage_options, got {sorted(storage_options)}"
            )
        root = os.path.abspath(os.path.expanduser(rest))
        _check_local_root(uri, root)
        return _cached("file", "", LocalStorage), root
    if protocol == "memory":
        if storage_options:
            raise UnsupportedStorageError(
                f"memory:// paths take no storage_options, got {sorted(storage_options)}"
            )
        path = "/" + rest.strip("/")
        return _cached("memory", "", MemoryStorage), path
    if protocol == "s3":
        if not rest.split("/", 1)[0]:
            raise InvalidOptionError(
                f"cannot open {uri!r}: it names no bucket; S3 URIs are s3://bucket/path"
            )
        key = json.dumps(storage_options or {}, sort_keys=True, default=str)
        from carbonlite.storage.s3 import S3Storage

        storage = _cached("s3", key, lambda: S3Storage(storage_options))
        return storage, rest.strip("/")
    raise UnsupportedStorageError(
        f"cannot open {uri!r}: protocol {protocol!r} is not supported; CarbonLite needs atomic "
        f"put-if-absent and supports only {', '.join(SUPPORTED_PROTOCOLS)} (plain paths are local)"
    )


_PATH_ERRNOS = {errno.ENAMETOOLONG: "is too long", errno.ELOOP: "loops through symbolic links"}


def _check_local_root(uri: str, root: str) -> None:
    """Refuse a local table path the system cannot resolve at all (too long, a symbolic link
    loop, no permission), before anything reads or writes below it; a path that does not
    exist (yet) or crosses a file is left to the caller (a table to create, or none)."""
    try:
        os.stat(root)
    except (FileNotFoundError, NotADirectoryError):
        _check_new_path(uri, root)
    except OSError as exc:
        problem = _PATH_ERRNOS.get(exc.errno or 0)
        if problem is not None:
            raise InvalidOptionError(
                f"the path {uri!r} {problem} ({exc.strerror}); give another path"
            ) from None
        raise StorageError(
            f"cannot use the path {uri!r}: {exc.strerror or exc}; check that its directories "
            "can be read by this process"
        ) from None


def _check_new_path(uri: str, root: str) -> None:
    """Refuse a local path that does not exist yet and could never be created: a component
    longer than the file system allows, or a path longer than the system's limit (found
    before a first directory of it is made)."""
    existing = os.path.dirname(root)
    while existing != os.path.dirname(existing) and not os.path.isdir(existing):
        existing = os.path.dirname(existing)
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
        path_max = os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError):  # no such limits to ask for: the first write will tell
        return
    longest = max(os.path.relpath(root, existing).split(os.sep), key=lambda p: len(os.fsencode(p)))
    if len(os.fsencode(longest)) > name_max or len(os.fsencode(root)) >= path_max:
        raise InvalidOptionError(
            f"the path {uri!r} is too long: this file system allows {name_max} bytes per name "
            f"and {path_max} in all; give a shorter path"
        )


def _cached(protocol: str, key: str, factory: Any) -> Storage:
    with _cache_lock:
        storage = _cache.get((protocol, key))
        if storage is None:
            storage = factory()
            _cache[(protocol, key)] = storage
        return storage
