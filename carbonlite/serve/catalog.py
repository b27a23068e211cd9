"""The tables a service serves: every CarbonLite table under one local root directory,
named by its path relative to the root (``events``, ``sales/eu``).

A name comes from a client, so it is checked before it touches the file system: relative,
``/``-separated, each part a valid name (no ``..``, no ``.``, no control characters; see
``carbonlite/names.py``), and the resolved directory (symbolic links followed) must still be
inside the root. Anything else is :class:`TableNameError`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

from carbonlite.create import open_table
from carbonlite.errors import CarbonLiteError, TableNotFoundError
from carbonlite.metadata.log import LOG_DIR
from carbonlite.names import name_problem
from carbonlite.table import Table

__all__ = ["Catalog", "TableNameError"]


class TableNameError(CarbonLiteError, ValueError):
    """A table name that is not a plain relative path inside the served root."""


class Catalog:
    """The tables under ``root``; each opened once and kept (a writer id of the service's
    own for the tables it writes to)."""

    def __init__(self, root: str, *, writer_id: str = "flight-service") -> None:
        if not os.path.isdir(root):
            raise TableNotFoundError(f"{root!r} is not a directory: serve a directory of tables")
        self.root = os.path.realpath(root)
        self.writer_id = writer_id
        self._tables: dict[str, Table] = {}
        self._paths: dict[str, str] = {}
        self._lock = threading.Lock()

    def path_of(self, name: str) -> str:
        """The directory of table ``name``; :class:`TableNameError` if the name is malformed
        or escapes the root."""
        found = self._paths.get(name)
        if found is not None:
            return found
        path = self._check(name)
        with self._lock:
            if len(self._paths) < 10_000:  # names of tables that exist, as a rule
                self._paths[name] = path
        return path

    def _check(self, name: str) -> str:
        if not isinstance(name, str) or not name or name.startswith("/"):
            raise TableNameError(
                f"table name {name!r} must be a relative path such as 'events' or 'sales/eu'"
            )
        for part in name.split("/"):
            problem = name_problem(part)
            if problem is not None:
                raise TableNameError(f"table name {name!r}: part {part!r} {problem}")
        path = os.path.realpath(os.path.join(self.root, name))
        if os.path.commonpath([path, self.root]) != self.root:
            raise TableNameError(f"table name {name!r} leads outside the served root")
        return path

    def table(self, name: str, *, refresh: bool = True) -> Table:
        """Table ``name``, refreshed to its latest version unless ``refresh`` is False (the
        version last loaded: enough for its schema); :class:`TableNotFoundError` when there
        is none."""
        path = self.path_of(name)
        with self._lock:
            table = self._tables.get(name)
            if table is None:
                if not os.path.isdir(os.path.join(path, LOG_DIR)):
                    raise TableNotFoundError(
                        f"no table {name!r} under {self.root!r} (the service lists its tables "
                        "with ListFlights)"
                    )
                table = open_table(path, writer_id=self.writer_id)
                self._tables[name] = table
        return table.refresh() if refresh else table

    def names(self) -> Iterator[str]:
        """Every table under the root, by name, in sorted order (a table's own directories
        are not searched for more tables)."""
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
            for table in self._tables.values():
                table.close()
            self._tables.clear()
