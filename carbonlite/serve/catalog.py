"""The tables a service serves: every CarbonLite table under one local root directory,
named by its path relative to the root (``events``, ``sales/eu``).

A name comes from a client, so it is checked before it touches the file system
(:func:`name_parts`): relative, ``/``-separated, at most :data:`MAX_PARTS` parts, each a valid
path component (no ``..``, ``.``, ``\\``, NUL or other control and format characters, at most
200 bytes; see ``carbonlite/names.py``), in Unicode's composed form (NFC) and unchanged in its
parts by compatibility folding (NFKC: two full-width full stops, U+FF0E, are refused rather than risk being
read as ``..`` somewhere). Anything else is :class:`TableNameError`.

Every access (a put, a flush, a read) walks the name from the root one directory at a time
with ``O_NOFOLLOW``: a symbolic link anywhere on the way (or at the table's ``_carbonlite``,
``_carbonlite/log`` or ``segments``) is refused with :class:`TableNameError`, so nothing is
ever reached outside the root or through a link, and a directory that is gone is
:class:`TableNotFoundError`. A table is opened through its directory's descriptor
(``/proc/self/fd/N``), held open while the service runs: what the table writes goes into the
directory that was checked, even when the name is swapped for a link to elsewhere between the
check and the write. When the walk finds another directory at the name than the one held
(deleted and created again, moved), the table is opened anew.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from carbonlite.create import open_table
from carbonlite.errors import CarbonLiteError, TableNotFoundError
from carbonlite.metadata.log import LOG_DIR
from carbonlite.names import MAX_NAME_BYTES, name_problem
from carbonlite.nofollow import OPEN_DIR, entry_kind
from carbonlite.serve.wire import quote, text_problem
from carbonlite.table import Table

__all__ = ["MAX_PARTS", "Catalog", "TableNameError", "name_parts"]

MAX_PARTS = 16
"""Most ``/``-separated parts in a table name."""
_PROC_FDS = "/proc/self/fd"
_RULES = (
    "a table name is a relative path such as 'events' or 'sales/eu': parts of 1 to "
    f"{MAX_NAME_BYTES} bytes without '..', '.', '\\', control or format characters"
)


class TableNameError(CarbonLiteError, ValueError):
    """A table name that is not a plain relative path inside the served root, or whose
    directory is reached through a symbolic link."""


def _part_problem(part: str) -> str | None:
    problem = name_problem(part) or text_problem(part)
    if problem is None and len(part.encode("utf-8")) > MAX_NAME_BYTES:
        problem = f"is {len(part.encode('utf-8'))} bytes long (UTF-8), more than {MAX_NAME_BYTES}"
    return problem


def name_parts(name: object) -> list[str]:
    """The parts of table name ``name``; :class:`TableNameError` unless it is a plain relative
    path (see the module doc)."""
    if not isinstance(name, str) or not name or name.startswith("/"):
        raise TableNameError(f"table name {quote(name)} is not relative: {_RULES}")
    parts = name.split("/")
    if len(parts) > MAX_PARTS:
        raise TableNameError(f"table name {quote(name)} has more than {MAX_PARTS} parts: {_RULES}")
    for part in parts:
        problem = _part_problem(part)
        if problem is not None:
            raise TableNameError(
                f"table name {quote(name)}: part {quote(part)} {problem}; {_RULES}"
            )
    if unicodedata.normalize("NFC", name) != name:
        raise TableNameError(
            f"table name {quote(name)} is not in Unicode's composed form (NFC): send "
            f"{quote(unicodedata.normalize('NFC', name))}"
        )
    folded = unicodedata.normalize("NFKC", name)
    if folded.split("/") != parts and any(_part_problem(p) for p in folded.split("/")):
        raise TableNameError(
            f"table name {quote(name)} reads as {quote(folded)} once compatibility characters "
            f"are folded (NFKC), which is not a plain relative path: {_RULES}"
        )
    return parts


@dataclass(frozen=True, slots=True)
class _Held:
    table: Table
    identity: tuple[int, int]
    """The directory's ``(st_dev, st_ino)``."""
    path: str
    """What the table was opened with: ``/proc/self/fd/N`` (or the real path, without /proc)."""


class Catalog:
    """The tables under ``root``; each opened once and kept (a writer id of the service's
    own for the tables it writes to), and checked again at every access."""

    def __init__(self, root: str, *, writer_id: str = "flight-service") -> None:
        if not isinstance(root, str) or "\x00" in root or not os.path.isdir(root):
            raise TableNotFoundError(f"{root!r} is not a directory: serve a directory of tables")
        self.root = os.path.realpath(root)
        self.writer_id = writer_id
        self._root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._pin = os.path.isdir(os.path.join(_PROC_FDS, str(self._root_fd)))
        self._tables: dict[str, _Held] = {}
        self._fds: list[int] = []
        """Every directory a table was opened through, kept open until :meth:`close`: a table
        replaced at its name may still be in use, and a reused descriptor number would point
        its paths at another directory."""
        self._lock = threading.Lock()

    def path_of(self, name: str) -> str:
        """Where table ``name`` is (for messages); :class:`TableNameError` if the name is
        malformed."""
        return os.path.join(self.root, *name_parts(name))

    def table(self, name: str, *, refresh: bool = True) -> Table:
        """Table ``name``, its directory checked again (see the module doc) and refreshed to
        its latest version unless ``refresh`` is False (the version last loaded: enough to
        check a name; not for the schema, which a rename or drop may have changed). :class:`TableNotFoundError` when there is none, :class:`TableNameError`
        when it is reached through a symbolic link."""
        parts = name_parts(name)
        fd = self._walk(name, parts)
        try:
            self._check_layout(name, fd)
            identity = _identity(fd)
            with self._lock:
                held = self._tables.get(name)
                if held is None or held.identity != identity:
                    held = self._open(name, fd, identity)
                    fd = -1  # kept open: the table's directory
        finally:
            if fd >= 0:
                os.close(fd)
        return held.table.refresh() if refresh else held.table

    def _walk(self, name: str, parts: list[str]) -> int:
        """An open descriptor of ``name``'s directory, reached from the root without following
        a symbolic link."""
        fd = os.dup(self._root_fd)
        try:
            for i, part in enumerate(parts):
                below = self._step(name, "/".join(parts[: i + 1]), part, fd)
                os.close(fd)
                fd = below
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _step(self, name: str, where: str, part: str, fd: int) -> int:
        try:
            return os.open(part, OPEN_DIR, dir_fd=fd)
        except OSError as exc:
            kind = entry_kind(part, fd)
            if kind == "link":
                raise TableNameError(
                    f"table {name!r}: {where!r} under {self.root!r} is a symbolic link; the "
                    "service reaches tables only through real directories inside its root"
                ) from None
            if kind == "missing" or exc.errno in (errno.ENOENT, errno.ENOTDIR):
                raise TableNotFoundError(
                    f"no table {name!r} under {self.root!r}: {where!r} is "
                    f"{'not there' if kind == 'missing' else 'not a directory'} (the service "
                    "lists its tables with ListFlights)"
                ) from None
            raise TableNotFoundError(
                f"cannot open table {name!r} under {self.root!r}: {where!r}: {exc.strerror}"
            ) from None

    def _check_layout(self, name: str, fd: int) -> None:
        """The table's own directories are real ones (``segments`` may not exist yet)."""
        for sub, needed in (("_carbonlite", True), (LOG_DIR, True), ("segments", False)):
            kind = entry_kind(sub, fd)
            if kind == "link":
                raise TableNameError(
                    f"table {name!r}: its {sub!r} is a symbolic link; the service writes only "
                    "into real directories inside its root"
                )
            if needed and kind != "dir":
                raise TableNotFoundError(
                    f"no table {name!r} under {self.root!r}: its directory has no {sub!r} "
                    "(deleted, or not a CarbonLite table)"
                )

    def _open(self, name: str, fd: int, identity: tuple[int, int]) -> _Held:
        """Open the table in directory ``fd`` (kept open from now on) under the lock."""
        path = os.path.join(_PROC_FDS, str(fd)) if self._pin else self.path_of(name)
        try:
            table = open_table(path, writer_id=self.writer_id)
        except CarbonLiteError as exc:
            # not held, so :meth:`shown` cannot name its path: the message names it now (an
            # empty or damaged log, a table deleted while it was opened)
            exc.args = (_unpinned(str(exc), path, self.path_of(name)),)
            raise
        held = _Held(table, identity, path)
        self._fds.append(fd)
        self._tables[name] = held
        return held

    def shown(self, text: str) -> str:
        """``text`` with the ``/proc/self/fd/N`` paths tables are opened through replaced by
        where those tables are."""
        with self._lock:
            held = list(self._tables.items())
        for name, h in held:
            text = _unpinned(text, h.path, self.path_of(name))
        return text

    def names(self) -> Iterator[str]:
        """Every table under the root, by name, in sorted order (a table's own directories
        are not searched for more tables, symbolic links are not followed)."""
        for dirpath, dirnames, _ in os.walk(self.root):
            if os.path.isdir(os.path.join(dirpath, LOG_DIR)):
                dirnames.clear()
                rel = os.path.relpath(dirpath, self.root)
                if rel != ".":
                    yield rel.replace(os.sep, "/")
            else:
                dirnames.sort()
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]

    def close(self) -> None:
        with self._lock:
            for held in self._tables.values():
                held.table.close()
            self._tables.clear()
            for fd in self._fds:
                os.close(fd)
            self._fds.clear()
            if self._root_fd >= 0:
                os.close(self._root_fd)
                self._root_fd = -1


def _unpinned(text: str, pinned: str, path: str) -> str:
    """``text`` with ``pinned`` (``/proc/self/fd/12``, not the start of ``.../123``) read as
    ``path``."""
    if pinned == path:
        return text
    return re.sub(re.escape(pinned) + "(?![0-9])", path.replace("\\", "\\\\"), text)


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino
