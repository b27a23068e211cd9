"""Publishing from many workers (Spark executors), committed once by the driver.

1. The driver plans a write (:func:`carbonlite.writer.distributed.plan_write`): the segment
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

import contextlib
import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from carbonlite.errors import CommitConflictError
from carbonlite.format.row_hash import ContentSums, content_sums
from carbonlite.metadata import BlockletsAppended, StateStored
from carbonlite.metadata.commit import backoff
from carbonlite.metadata.partition_spec import PartitionSpec
from carbonlite.reader.scan import SplitReader
from carbonlite.storage import open_storage
from carbonlite.writer.append import AppendCommit, TableWriter, now_ms
from carbonlite.writer.batches import conformed_batches
from carbonlite.writer.distributed import WritePlan
from carbonlite.writer.partition_rows import partition_key, partition_spec
from carbonlite.writer.publish import PublishMode, PublishResult, classify
from carbonlite.writer.stream_file import write_blocklets

__all__ = ["PublishedPart", "commit_publish", "discard_publish_parts", "write_publish_part"]

_MAX_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class PublishedPart:
    """One partition's rows as one worker wrote them."""

    partition: tuple[Any, ...]
    """The partition's key (its JSON values)."""
    sums: ContentSums
    appended: BlockletsAppended


def _key_tag(key: tuple[Any, ...]) -> str:
    return hashlib.sha1(json.dumps(list(key)).encode()).hexdigest()[:12]


def write_publish_part(
    plan: WritePlan,
    batches: Iterable[pa.RecordBatch],
    *,
    spec_json: Sequence[str],
    tag: str,
    task: int,
    attempt: int,
) -> list[PublishedPart]:
    """Write one worker's rows, one new file per partition, as they stream in (a
    partition's rows are flushed as blocklets once a blocklet's worth has gathered); runs on
    an executor."""
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    spec = PartitionSpec.from_json(list(spec_json), plan.schema)
    pending: dict[tuple[Any, ...], list[pa.Table]] = {}
    counts: dict[tuple[Any, ...], int] = {}
    sums: dict[tuple[Any, ...], ContentSums] = {}
    written: dict[tuple[Any, ...], BlockletsAppended] = {}

    def flush(key: tuple[Any, ...]) -> None:
        rows = pending.pop(key, [])
        counts.pop(key, None)
        if not rows:
            return
        before = written.get(key)
        file = (
            before.file
            if before is not None
            else f"segments/{plan.segment_id}/{tag}-{plan.plan_id}-{_key_tag(key)}"
            f"-p{task:05d}-a{attempt}.cblt"
        )
        appended = write_blocklets(
            storage,
            root,
            segment_id=plan.segment_id,
            file=file,
            committed_length=before.end if before is not None else 0,
            schema=plan.schema,
            batches=(b for t in rows for b in t.to_batches()),
            storage_options=plan.storage_options,
            compression_level=plan.compression_level,
            codec=plan.codec,
            max_rows=plan.blocklet_max_rows,
            max_bytes=plan.blocklet_max_bytes,
        )
        if appended is None:
            return
        written[key] = (
            appended
            if before is None
            else replace(before, end=appended.end, blocklets=before.blocklets + appended.blocklets)
        )

    for batch in conformed_batches(batches, plan.schema, where=plan.uri):
        for value, part in spec.split(batch):
            key = partition_key(spec, value)
            pending.setdefault(key, []).append(part)
            counts[key] = counts.get(key, 0) + part.num_rows
            sums[key] = sums[key] + content_sums(part) if key in sums else content_sums(part)
            if counts[key] >= plan.blocklet_max_rows:
                flush(key)
    for key in list(pending):
        flush(key)
    return [PublishedPart(key, sums[key], appended) for key, appended in written.items()]


def commit_publish(
    plan: WritePlan,
    parts: Sequence[PublishedPart],
    *,
    mode: PublishMode,
    states: tuple[StateStored, ...] = (),
    writer_id: str,
) -> PublishResult:
    """Compare the workers' partitions with the table's and commit what changed, once."""
    from carbonlite.create import open_table

    table = open_table(plan.uri, storage_options=plan.storage_options or None)
    log, storage, root = table.log, table.storage, table.root
    writer = TableWriter(storage, root, writer_id=writer_id, storage_options=table.storage_options)
    files: dict[tuple[Any, ...], list[BlockletsAppended]] = {}
    sums: dict[tuple[Any, ...], ContentSums] = {}
    for p in parts:
        files.setdefault(p.partition, []).append(p.appended)
        sums[p.partition] = sums[p.partition] + p.sums if p.partition in sums else p.sums
    snapshot = table.snapshot()
    spec = partition_spec(snapshot.metadata)
    hashes: dict[tuple[Any, ...], str | None] = {
        key: s.digest(snapshot.schema) for key, s in sums.items()
    }
    started = plan.planned_ms if plan.planned_ms is not None else now_ms()
    for attempt in range(_MAX_ATTEMPTS):
        reader = SplitReader(storage, root, snapshot.schema, storage_options=table.storage_options)
        try:
            decided = classify(spec, snapshot, hashes, mode, reader)
        finally:
            reader.close()
        written = [*decided.added, *decided.changed]
        if not written and not decided.replaced and not states:
            discard_publish_parts(plan, [a for group in files.values() for a in group])
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
                discard_publish_parts(plan, [a for group in files.values() for a in group])
                raise
            time.sleep(backoff(attempt))
            snapshot = log.update(snapshot)
            continue
        unchanged = [a for key in decided.unchanged for a in files.get(key, ())]
        discard_publish_parts(plan, unchanged)
        return decided.result(spec, committed.version)
    raise AssertionError("unreachable")  # pragma: no cover


def discard_publish_parts(plan: WritePlan, appends: Iterable[BlockletsAppended]) -> None:
    """Delete files workers wrote that no version references (best effort: ``recover``
    removes what is left)."""
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    for a in appends:
        with contextlib.suppress(OSError):
            storage.delete(storage.join(root, a.file))
