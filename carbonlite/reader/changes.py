"""Change queries: the rows each commit in a range inserted, deleted or updated.

Appended blocklets are inserts; segments an overwrite marked for delete are deletes (their
rows as of the version before); rows a ``deleteRows`` action adds to a deletion vector are
deletes. An UPDATE's deletes and inserts are its rows before and after
(``update_preimage``, ``update_postimage``, Delta's names), and so are a MERGE's deletes and
inserts of the same keys (the commit records its key columns). Commits with
``data_change = false`` (handoff, compaction, clean) move rows without changing them and
contribute nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.errors import VersionNotFoundError
from carbonlite.metadata import (
    BlockletsAppended,
    CommitInfo,
    Log,
    RowsDeleted,
    SegmentStatusChanged,
    Snapshot,
)
from carbonlite.metadata.columns import ColumnLayout
from carbonlite.metadata.history import built_on
from carbonlite.reader.planner import Split, file_split
from carbonlite.reader.scan import ROW_POSITION, SplitReader, read_splits
from carbonlite.storage import Storage

__all__ = ["CHANGE_COLUMNS", "read_changes", "reserved_name_problems"]

CHANGE_COLUMNS = (
    pa.field("_change_type", pa.string(), nullable=False),
    pa.field("_commit_version", pa.int64(), nullable=False),
    pa.field("_commit_timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),
)

_RESERVED = {
    **{f.name: "changes() adds a column of that name to every row" for f in CHANGE_COLUMNS},
    ROW_POSITION: "delete, update and merge read each row's position under that name",
}


def reserved_name_problems(names: Iterable[str]) -> list[str]:
    """One line for each of ``names`` (columns a table is to get) that CarbonLite reserves
    for the columns it adds itself; checked where columns enter a table (create, add, merge),
    so tables made before keep working."""
    return [
        f"column {name!r} has a name CarbonLite reserves ({_RESERVED[name]}): rename it"
        for name in names
        if name in _RESERVED
    ]


def _born_deleted(before: Snapshot, actions: list[Any]) -> dict[tuple[str, str], dict[int, Any]]:
    """Deletion vectors a commit gives the files it adds (``restore``'s copies of segments
    with deleted rows), by (segment, file) and blocklet: those rows were never visible, so
    they are neither inserted nor deleted."""
    out: dict[tuple[str, str], dict[int, Any]] = {}
    for a in actions:
        if isinstance(a, RowsDeleted):
            seg = before.segments.get(a.segment_id)
            if seg is None or a.file not in seg.files:
                out.setdefault((a.segment_id, a.file), {}).update(
                    {ref.blocklet: ref for ref in a.vectors}
                )
    return out


def _changed_splits(before: Snapshot, actions: list[Any]) -> tuple[list[Split], list[Split]]:
    """(inserted, deleted) splits of one commit applied on top of ``before``."""
    born = _born_deleted(before, actions)
    inserted = [
        Split(
            a.segment_id,
            a.file,
            a.end,
            a.blocklets,
            deletions=tuple(
                sorted(
                    (b.offset, ref)
                    for b in a.blocklets
                    if (ref := born.get((a.segment_id, a.file), {}).get(b.offset)) is not None
                )
            ),
        )
        for a in actions
        if isinstance(a, BlockletsAppended) and a.blocklets
    ]
    deleted: list[Split] = []
    for a in actions:
        if isinstance(a, SegmentStatusChanged) and a.status == "MARKED_FOR_DELETE":
            seg = before.segments.get(a.segment_id)
            if seg is not None and seg.is_live:
                deleted.extend(file_split(seg, f) for f in seg.files.values() if f.blocklets)
    return inserted, deleted


def _deleted_rows(
    reader: SplitReader, before: Snapshot, action: RowsDeleted, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The rows ``action`` deleted: in each vector, the positions the one before lacked."""
    f = before.segments[action.segment_id].files[action.file]
    entries = {b.offset: b for b in f.blocklets}
    for ref in action.vectors:
        entry = entries[ref.blocklet]
        raw = Split(action.segment_id, action.file, f.committed_length, (entry,))
        new = reader.deletion_vector(ref, entry.num_rows).positions
        old = f.deletions.get(ref.blocklet)
        if old is not None:
            new = np.setdiff1d(new, reader.deletion_vector(old, entry.num_rows).positions)
        if len(new):
            yield reader.read_blocklet(raw, entry, schema, None).take(pa.array(new))


def _kinds(
    deleted: pa.Table, inserted: pa.Table, info: CommitInfo
) -> tuple[Sequence[str] | pa.Array, Sequence[str] | pa.Array]:
    """The change type of each deleted and each inserted row of one commit."""
    if info.operation == "UPDATE":
        return ["update_preimage"] * deleted.num_rows, ["update_postimage"] * inserted.num_rows
    on = [k for k in info.parameters.get("on", "").split(",") if k]
    if not on or not deleted.num_rows or not inserted.num_rows:
        return ["delete"] * deleted.num_rows, ["insert"] * inserted.num_rows
    return (
        _paired(deleted, inserted, on, "update_preimage", "delete"),
        _paired(inserted, deleted, on, "update_postimage", "insert"),
    )


def _paired(rows: pa.Table, others: pa.Table, on: list[str], both: str, alone: str) -> pa.Array:
    """``both`` for each row of ``rows`` whose keys ``others`` holds too, else ``alone``."""
    index = "_carbonlite_change_row"
    keyed = rows.select(on).append_column(index, pa.array(np.arange(rows.num_rows)))
    hits = keyed.join(others.select(on), keys=on, join_type="left semi").column(index)
    mask = np.zeros(rows.num_rows, dtype=bool)
    mask[hits.to_numpy()] = True
    return pc.if_else(pa.array(mask), both, alone)


def read_changes(
    storage: Storage,
    root: str,
    log: Log,
    start: Snapshot | None,
    end_version: int,
    schema: pa.Schema,
    *,
    storage_options: Mapping[str, Any] | None,
    layout: ColumnLayout,
) -> pa.Table:
    """Changes of versions ``start.version + 1 .. end_version`` (from 0 when ``start`` is None),
    in ``schema`` (the schema at ``end_version``) plus the change columns."""
    out_schema = pa.schema([*schema, *CHANGE_COLUMNS])
    reader = SplitReader(storage, root, schema, storage_options=storage_options, layout=layout)

    def batches() -> Iterator[pa.RecordBatch]:
        snapshot = start
        first = 0 if start is None else start.version + 1
        for version in range(first, end_version + 1):
            try:
                actions = log.read_actions(version, snapshot)
            except FileNotFoundError:
                raise _gone(log, version) from None
            if snapshot is not None and not built_on(snapshot.commit_id, actions):
                raise _gone(log, version)  # another writer's, at a number clean freed
            after = (
                Snapshot.from_actions(log.uri, version, actions)
                if snapshot is None
                else snapshot.apply(version, actions)
            )
            info = next((a for a in actions if isinstance(a, CommitInfo)), None)
            if snapshot is not None and info is not None and info.data_change:
                inserted_splits, deleted_splits = _changed_splits(snapshot, actions)
                deleted_batches = list(read_splits(reader, deleted_splits, schema, None))
                born = _born_deleted(snapshot, actions)
                for a in actions:
                    if isinstance(a, RowsDeleted) and (a.segment_id, a.file) not in born:
                        deleted_batches.extend(_deleted_rows(reader, snapshot, a, schema))
                deleted = pa.Table.from_batches(deleted_batches, schema=schema)
                inserted = pa.Table.from_batches(
                    list(read_splits(reader, inserted_splits, schema, None)), schema=schema
                )
                kinds = _kinds(deleted, inserted, info)
                for rows, kind in zip((deleted, inserted), kinds, strict=True):
                    n = rows.num_rows
                    if not n:
                        continue
                    extra = [
                        pa.array(kind, pa.string()),
                        pa.array([version] * n, pa.int64()),
                        pa.array([info.timestamp] * n, pa.int64()).cast(CHANGE_COLUMNS[2].type),
                    ]
                    columns = [rows.column(i).combine_chunks() for i in range(rows.num_columns)]
                    yield pa.RecordBatch.from_arrays([*columns, *extra], schema=out_schema)
            snapshot = after

    try:
        changes = pa.Table.from_batches(list(batches()), schema=out_schema)
    finally:
        reader.close()
    first = 0 if start is None else start.version + 1
    if first <= end_version and not log.look().holds(first):
        raise _gone(log, first)  # clean removed them while they were read: maybe forks read
    return changes


def _gone(log: Log, version: int) -> VersionNotFoundError:
    return VersionNotFoundError(
        f"version {version} of {log.uri!r} is no longer in the log (removed by clean); ask for "
        "changes from a later version"
    )
