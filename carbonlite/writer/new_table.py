"""A new table with its first rows, all or nothing (``write_table``).

The rows are read and their blocklets written before the table exists; only then is version 0
(the table) created, and the rows committed as version 1. So data that fails part-way (a
source that breaks, a batch that does not fit the schema of the first) leaves no table behind
to refuse the same call again: the files written for it are removed, and so are the
directories made for them. Nobody else writes those files meanwhile: they are named after the
writer's id, whose lock (or, on object stores, lease) is held from the first byte to the
commit, also against a ``recover`` of the table once version 0 exists.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace

from carbonlite.errors import TableExistsError
from carbonlite.metadata import Action, Log, Snapshot
from carbonlite.metadata.log import META_DIR
from carbonlite.writer.append import TableWriter
from carbonlite.writer.batches import TableData

__all__ = ["create_version_zero", "write_new_table"]


def write_new_table(
    writer: TableWriter, log: Log, created: Snapshot, actions: list[Action], data: TableData
) -> Snapshot:
    """Create the table whose version 0 is ``actions`` (the state ``created``) with ``data``
    in it; returns the table's snapshot after its rows. :class:`TableExistsError` when
    another writer created a table there first; whatever else fails before version 0 is
    created leaves nothing behind. Once it is, a failure of the rows' commit (the storage's)
    leaves the table with no rows, as any append that fails does."""
    storage, root = log.storage, log.root
    fresh = storage.protocol == "file" and not os.path.isdir(root)
    tidy = False  # after a failure of the rows: remove the directories made for them
    try:
        with writer.owned(), writer.leased() as lease:
            try:
                pending = writer.stage(log, created, data)
            except BaseException:
                tidy = True
                _remove_written(writer)
                raise
            try:
                create_version_zero(log, actions, created)
            except BaseException:
                _remove_written(writer)  # not the directories: another table's, perhaps
                raise
            if pending is None:  # no rows: the table alone
                return created
            if created.metadata.primary_key:  # its keys' only rows: nobody's may come first
                pending = replace(pending, exclusive=True)
            _, snapshot = writer.commit_staged(log, created, pending, lease, created.version)
            return snapshot
    finally:
        if tidy:  # the lock file and the lease record are gone by now
            made_here = [root] if fresh else [storage.join(root, d) for d in ("segments", META_DIR)]
            for directory in made_here:
                storage.delete_empty_dirs(directory)


def create_version_zero(log: Log, actions: list[Action], created: Snapshot) -> None:
    """Create the table: its version 0, ``actions`` (the state ``created``);
    :class:`TableExistsError` when another writer created one there first."""
    before = Snapshot(
        table_path=created.table_path,
        version=-1,
        timestamp=0,
        metadata=created.metadata,
        segments={},
        txns={},
    )
    if not log.try_write(0, actions, before):
        raise TableExistsError(f"a CarbonLite table was created at {log.uri!r} at the same time")


def _remove_written(writer: TableWriter) -> None:
    """Delete what ``writer`` wrote under ``segments/`` (its files are named after its id),
    while it still holds its lock; the lease record and the lock file go as they are
    released."""
    storage, root = writer.storage, writer.root
    segments = storage.join(root, "segments")
    mine = f"{writer.writer_id}-"
    for status in storage.list(segments, recursive=True):
        if status.path.rsplit("/", 1)[-1].startswith(mine):
            with contextlib.suppress(FileNotFoundError):
                storage.delete(status.path)
