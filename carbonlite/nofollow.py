"""Reaching what is below a root directory without following a symbolic link: the one rule
``carbonlite serve`` (tables under its root, ``carbonlite/serve/catalog.py``) and the file
ingester (files below its source, ``carbonlite/ingest/file_source.py``) share.

A directory is the boundary of what may be reached through it. A symbolic link below it may
point anywhere (``src/link.json -> ../secret.json``, ``tables/t -> /etc``), so none is ever
followed: every step below the root opens one path component relative to the directory
before it with ``O_NOFOLLOW``, and what is found is told by ``lstat`` (:func:`entry_kind`),
never by ``stat``. The root's own path may go through links: whoever names the root chose it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "OPEN_DIR",
    "Entry",
    "EntryKind",
    "NotFollowedError",
    "entry_kind",
    "open_file_below",
    "walk_below",
]

EntryKind = Literal["dir", "file", "link", "other", "missing"]
"""What a path component is, links not followed: a directory, a regular file, a symbolic
link, anything else (a pipe, a socket, a device), or nothing."""

OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""Opening one directory below another: a link there fails (``ELOOP`` or ``ENOTDIR``)."""
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
"""Opening a file: not through a link; never waiting on a pipe put in its place."""


class NotFollowedError(OSError):
    """A path below a root that reaches through a symbolic link, or ends in something that
    is not a regular file."""


def entry_kind(name: str, dir_fd: int) -> EntryKind:
    """What ``name`` (one component) in directory ``dir_fd`` is, not following a link."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "other"
    return _kind_of(mode)


def _kind_of(mode: int) -> EntryKind:
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


_WHAT = {
    "link": "a symbolic link",
    "dir": "a directory",
    "file": "a file, not a directory",
    "other": "not a regular file",
}


def open_file_below(root: str, parts: Sequence[str]) -> int:
    """A descriptor of the regular file at ``parts`` (path components) below the directory
    ``root``, reached one component at a time without following a link.
    :class:`FileNotFoundError` when it is not there; :class:`NotFollowedError` when a
    component is a link or the end is not a regular file."""
    fd = _open_dir_below(root, parts[:-1])
    try:
        below = _step(fd, parts, len(parts) - 1, _OPEN_FILE)
    finally:
        os.close(fd)
    mode = os.fstat(below).st_mode
    if not stat.S_ISREG(mode):
        os.close(below)
        raise NotFollowedError(f"{'/'.join(parts)!r} is {_WHAT[_kind_of(mode)]}")
    return below


def _open_dir_below(root: str, parts: Sequence[str]) -> int:
    """A descriptor of the directory at ``parts`` below ``root``, no link followed."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i in range(len(parts)):
            below = _step(fd, parts, i, OPEN_DIR)
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd


def _step(fd: int, parts: Sequence[str], i: int, flags: int) -> int:
    """Open component ``parts[i]`` in directory ``fd`` with ``flags``; why not, in words."""
    try:
        return os.open(parts[i], flags, dir_fd=fd)
    except OSError as exc:
        kind = entry_kind(parts[i], fd)
        where = "/".join(parts[: i + 1])
        if kind == "missing":
            raise FileNotFoundError(exc.errno, f"{where!r} is not there") from None
        if kind == "link" or (flags == OPEN_DIR and kind != "dir"):
            raise NotFollowedError(f"{where!r} is {_WHAT.get(kind, kind)}") from None
        raise


@dataclass(frozen=True, slots=True)
class Entry:
    """Something found below the root: its path (``/``-separated, relative to the root),
    what it is, and for a regular file its size and modification time (seconds since the
    epoch, as ``stat`` gives them)."""

    relative: str
    kind: EntryKind
    size: int = 0
    mtime: float = 0.0


def walk_below(root: str, *, descend: Callable[[str], bool]) -> Iterator[Entry]:
    """Every regular file, link and other entry below ``root`` (directories themselves are
    not yielded), each directory opened without following a link; a directory is entered
    when ``descend`` (its relative path) says so. What vanishes (or turns into a link) while
    it is walked is passed over."""
    pending: list[str] = [""]
    while pending:
        folder = pending.pop()
        try:
            fd = _open_dir_below(root, folder.split("/") if folder else [])
        except OSError:
            continue
        try:
            with os.scandir(fd) as entries:
                found = [(item.name, _lstat(item.name, fd)) for item in entries]
        finally:
            os.close(fd)
        for name, st in sorted(found, key=lambda f: f[0]):
            if st is None:
                continue
            relative = f"{folder}/{name}" if folder else name
            kind = _kind_of(st.st_mode)
            if kind == "dir":
                if descend(relative):
                    pending.append(relative)
            elif kind == "file":
                yield Entry(relative, kind, st.st_size, st.st_mtime)
            else:
                yield Entry(relative, kind)


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
