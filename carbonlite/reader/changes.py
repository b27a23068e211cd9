"""Change queries: the rows each commit in a range inserted or deleted.

Appended blocklets are inserts; segments an overwrite marked for delete are deletes (their
rows as of the version before). Commits with ``data_change = false`` (handoff, compaction,
clean) move rows without changing them and contribute nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from carbonlite.errors import VersionNotFoundError
from carbonlite.metadata import BlockletsAppended, CommitInfo, Log, SegmentStatusChanged, Snapshot
from carbonlite.reader.planner import Split
from carbonlite.reader.scan import SplitReader, read_splits
from carbonlite.storage import Storage

__all__ = ["CHANGE_COLUMNS", "read_changes"]

CHANGE_COLUMNS = (
    pa.field("_change_type", pa.string(), nullable=False),
    pa.field("_commit_version", pa.int64(), nullable=False),
    pa.field("_commit_timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),
)


def _changed_splits(before: Snapshot, actions: list[Any]) -> tuple[list[Split], list[Split]]:
    """(inserted, deleted) splits of one commit applied on top of ``before``."""
    inserted = [
        Split(a.segment_id, a.file, a.end, a.blocklets)
        for a in actions
        if isinstance(a, BlockletsAppended) and a.blocklets
    ]
    deleted: list[Split] = []
    for a in actions:
        if isinstance(a, SegmentStatusChanged) and a.status == "MARKED_FOR_DELETE":
            seg = before.segments.get(a.segment_id)
            if seg is not None and seg.is_live:
                deleted.extend(
                    Split(seg.segment_id, f.path, f.committed_length, f.blocklets)
                    for f in seg.files.values()
                    if f.blocklets
                )
    return inserted, deleted


def read_changes(
    storage: Storage,
    root: str,
    log: Log,
    start: Snapshot | None,
    end_version: int,
    schema: pa.Schema,
    *,
    storage_options: Mapping[str, Any] | None,
) -> pa.Table:
    """Changes of versions ``start.version + 1 .. end_version`` (from 0 when ``start`` is None),
    in ``schema`` (the schema at ``end_version``) plus the change columns."""
    out_schema = pa.schema([*schema, *CHANGE_COLUMNS])
    reader = SplitReader(storage, root, schema, storage_options=storage_options)

    def batches() -> Iterator[pa.RecordBatch]:
        snapshot = start
        first = 0 if start is None else start.version + 1
        for version in range(first, end_version + 1):
            try:
                actions = log.read_actions(version, snapshot)
            except FileNotFoundError:
                raise VersionNotFoundError(
                    f"version {version} of {log.uri!r} is no longer in the log (removed by "
                    "clean); ask for changes from a later version"
                ) from None
            after = (
                Snapshot.from_actions(log.uri, version, actions)
                if snapshot is None
                else snapshot.apply(version, actions)
            )
            info = next((a for a in actions if isinstance(a, CommitInfo)), None)
            if snapshot is not None and info is not None and info.data_change:
                inserted, deleted = _changed_splits(snapshot, actions)
                for kind, splits in (("delete", deleted), ("insert", inserted)):
                    for batch in read_splits(reader, splits, schema, None):
                        n = batch.num_rows
                        extra = [
                            pa.array([kind] * n, pa.string()),
                            pa.array([version] * n, pa.int64()),
                            pa.array([info.timestamp] * n, pa.int64()).cast(CHANGE_COLUMNS[2].type),
                        ]
                        yield pa.RecordBatch.from_arrays(
                            [*batch.columns, *extra], schema=out_schema
                        )
            snapshot = after

    try:
        return pa.Table.from_batches(list(batches()), schema=out_schema)
    finally:
        reader.close()
