"""Publishing from many workers (Spark executors), committed once by the driver.

1. The driver plans a write (:func:`carbonlite.driver.plan_write`): the segment
   whose directory the workers write into, under the driver's lease.
2. Each worker (:func:`write_publish_part`) splits its rows by partition, writes each
   partition's rows to a file of its own (named after the plan, the partition's key, the
   task and the attempt) and returns, per partition, the file's blocklets and the rows'
   content sums (``row_hash.ContentSums``). Sums add up, so a partition whose rows are spread
   over several tasks still gets the hash of all its rows.
3. The driver (:func:`commit_publish`) adds up each partition's sums into its content hash,
   compares it with what the table holds (``publish.classify``), commits the files of added
   and changed partitions as fresh segments carrying their hashes, marks replaced and deleted
   partitions' segments for delete and stores ``state``, all in one version. The files of
   unchanged partitions are deleted, never committed. Only the messages of the task attempts
   Spark committed reach the driver, so a retried task's first attempt is never committed.

A file's directory is the planned segment's, whichever new segment it ends up in.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from carbonlite.clock import now_ms
from carbonlite.errors import CarbonLiteError, CommitConflictError
from carbonlite.format.row_hash import ContentSums
from carbonlite.metadata import BlockletsAppended, Log, Snapshot, StateStored
from carbonlite.metadata.commit import backoff
from carbonlite.reader.planner import Split
from carbonlite.reader.scan import SplitReader, read_splits
from carbonlite.storage import open_storage
from carbonlite.writer.append import AppendCommit, TableWriter
from carbonlite.writer.partition_files import PartitionFile, discard_files
from carbonlite.writer.partition_rows import partition_spec
from carbonlite.writer.publish import Decision, PublishMode, PublishResult, classify
from carbonlite.writer.unique_keys import check_published_keys
from carbonlite.writer.write_plan import WritePlan

__all__ = ["commit_publish"]

_MAX_ATTEMPTS = 10


def commit_publish(
    plan: WritePlan,
    parts: Sequence[PartitionFile],
    *,
    mode: PublishMode,
    states: tuple[StateStored, ...] = (),
    writer_id: str,
) -> PublishResult:
    """Compare the workers' partitions with the table's and commit what changed, once."""
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    log = Log(storage, root, storage.uri(root))
    writer = TableWriter(
        storage, root, writer_id=writer_id, storage_options=plan.storage_options or None
    )
    files: dict[tuple[Any, ...], list[BlockletsAppended]] = {}
    sums: dict[tuple[Any, ...], ContentSums] = {}
    for p in parts:
        if p.sums is None:
            raise ValueError("a publish needs the content sums of every part")
        files.setdefault(p.partition, []).append(p.appended)
        sums[p.partition] = sums[p.partition] + p.sums if p.partition in sums else p.sums
    snapshot = log.load_latest()
    spec = partition_spec(snapshot.metadata)
    hashes: dict[tuple[Any, ...], str | None] = {
        key: s.digest(snapshot.schema) for key, s in sums.items()
    }
    started = plan.planned_ms if plan.planned_ms is not None else now_ms()
    for attempt in range(_MAX_ATTEMPTS):
        reader = SplitReader(
            storage,
            root,
            snapshot.schema,
            storage_options=plan.storage_options or None,
            layout=snapshot.layout,
        )
        try:
            decided = classify(spec, snapshot, hashes, mode, reader)
            written = [*decided.added, *decided.changed]
            if snapshot.metadata.primary_key and written:
                _check_keys(reader, snapshot, decided, files, plan)
        finally:
            reader.close()
        if not written and not decided.replaced and not states:
            discard_files(plan, [a for group in files.values() for a in group])
            return decided.result(spec, None)
        number = snapshot.next_segment_number()
        appends: list[BlockletsAppended] = []
        new_segments: dict[str, tuple[Any, ...]] = {}
        content: dict[str, str] = {}
        for key in written:
            sid = str(number)
            number += 1
            new_segments[sid] = key
            content[sid] = sums[key].digest(snapshot.schema)
            appends.extend(replace(a, segment_id=sid) for a in files[key])
        pending = AppendCommit(
            appends=tuple(appends),
            new_segments=frozenset(new_segments),
            overwrite=True,
            operation="PUBLISH",
            parameters=decided.parameters(mode, states),
            started_ms=started,
            partitions=new_segments,
            content_hashes=content,
            overwrite_partitions=decided.replaced,
            states=states,
        )
        try:
            committed, _ = writer.commit(log, snapshot, pending)
        except CommitConflictError:
            if attempt == _MAX_ATTEMPTS - 1:
                discard_files(plan, [a for group in files.values() for a in group])
                raise
            time.sleep(backoff(attempt))
            snapshot = log.update(snapshot)
            continue
        unchanged = [a for key in decided.unchanged for a in files.get(key, ())]
        discard_files(plan, unchanged)
        return decided.result(spec, committed.version)
    raise AssertionError("unreachable")  # pragma: no cover


def _check_keys(
    reader: SplitReader,
    snapshot: Snapshot,
    decided: Decision,
    files: Mapping[tuple[Any, ...], Sequence[BlockletsAppended]],
    plan: WritePlan,
) -> None:
    """Refuse (and discard every worker's file) a publish into a primary-key table that would
    repeat a key: the keys of the files it would commit, read back on the driver, against
    each other and the partitions it keeps (``unique_keys.check_published_keys``)."""
    keys = pa.schema([snapshot.schema.field(k) for k in snapshot.metadata.primary_key])
    written = [a for key in (*decided.added, *decided.changed) for a in files[key]]
    splits = [Split(a.segment_id, a.file, a.end, a.blocklets) for a in written]
    rows = pa.Table.from_batches(list(read_splits(reader, splits, keys, None)), schema=keys)
    try:
        check_published_keys(reader, snapshot, rows, decided.replaced, repr(plan.uri))
    except CarbonLiteError:
        discard_files(plan, [a for group in files.values() for a in group])
        raise
