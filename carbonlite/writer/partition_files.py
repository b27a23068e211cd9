"""Rows of one worker written as one file per partition (Spark tasks writing into a
partitioned table, and publishing): the rows are split by partition as they stream in and a
partition's rows are flushed as blocklets once a blocklet's worth has gathered. A new file lies
in the directory of the write plan's segment, whichever segment it is committed to; a stream's
file in a partition's STREAMING segment lies in that segment's directory and grows batch after
batch (``reuse``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from carbonlite.format.row_hash import ContentSums, content_sums
from carbonlite.metadata import BlockletsAppended, Log, Snapshot
from carbonlite.metadata.partition_spec import PartitionSpec
from carbonlite.storage import open_storage
from carbonlite.writer.append import WRITER_LOCK_TIMEOUT, lock_path
from carbonlite.writer.bloom_files import discard_blooms
from carbonlite.writer.partition_rows import partition_key
from carbonlite.writer.stream_file import write_blocklets
from carbonlite.writer.write_plan import (
    WritePlan,
    check_not_stale,
    partition_stream_file,
    task_lock_name,
)

__all__ = ["PartitionFile", "discard_files", "write_partition_files"]


@dataclass(frozen=True, slots=True)
class PartitionFile:
    """One partition's rows as one worker wrote them."""

    partition: tuple[Any, ...]
    """The partition's key (its JSON values)."""
    sums: ContentSums | None
    """The rows' content sums (when asked for: a publish)."""
    appended: BlockletsAppended


def _key_tag(key: tuple[Any, ...]) -> str:
    return hashlib.sha1(json.dumps(list(key)).encode()).hexdigest()[:12]


def write_partition_files(
    plan: WritePlan,
    batches: Iterable[pa.RecordBatch],
    *,
    spec_json: Sequence[str],
    tag: str,
    task: int,
    attempt: int,
    hashed: bool,
    reuse: bool = False,
) -> list[PartitionFile]:
    """Write one worker's rows, one file per partition; runs on an executor. With
    ``hashed``, each partition's content sums come back too. With ``reuse`` (a stream, whose
    ``tag`` stays the same from batch to batch), a partition the plan found a STREAMING
    segment for gets this task's own file in it, appended to after its committed length
    (:func:`~carbonlite.writer.write_plan.partition_stream_file`), so a stream adds no file
    per partition and batch; the task holds its writer lock meanwhile and refuses to write as
    a zombie of an earlier batch (``check_not_stale``). Other partitions get a new file named
    after the plan."""
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    reused = reuse and bool(plan.partition_streams)  # (none planned for overwrites, objects)
    with contextlib.ExitStack() as stack:
        if reused:
            name = task_lock_name(tag, task, attempt)
            stack.enter_context(
                storage.lock(lock_path(storage, root, name), timeout=WRITER_LOCK_TIMEOUT)
            )
        return _write_files(
            storage, root, plan, batches, spec_json, tag, task, attempt, hashed, reused
        )


def _write_files(
    storage: Any,
    root: str,
    plan: WritePlan,
    batches: Iterable[pa.RecordBatch],
    spec_json: Sequence[str],
    tag: str,
    task: int,
    attempt: int,
    hashed: bool,
    reused: bool,
) -> list[PartitionFile]:
    spec = PartitionSpec.from_json(list(spec_json), plan.schema)
    pending: dict[tuple[Any, ...], list[pa.Table]] = {}
    counts: dict[tuple[Any, ...], int] = {}
    sums: dict[tuple[Any, ...], ContentSums] = {}
    written: dict[tuple[Any, ...], BlockletsAppended] = {}
    latest: list[Snapshot] = []  # the log as of the first reused file (read once)

    def target(key: tuple[Any, ...]) -> tuple[str, str, int]:
        """(segment, file, committed length) a partition's first rows go to."""
        found = partition_stream_file(plan, key, tag, task, attempt) if reused else None
        if found is None:
            name = f"{tag}-{plan.plan_id}-{_key_tag(key)}-p{task:05d}-a{attempt}.cblt"
            return plan.segment_id, f"segments/{plan.segment_id}/{name}", 0
        segment_id, file, committed = found
        if not latest:
            latest.append(Log(storage, root, storage.uri(root)).load_latest())
        uri = storage.uri(storage.join(root, file))
        check_not_stale(latest[0], plan, segment_id, file, committed, uri)
        return found

    def flush(key: tuple[Any, ...]) -> None:
        rows = pending.pop(key, [])
        counts.pop(key, None)
        if not rows:
            return
        before = written.get(key)
        segment_id, file, committed = (
            target(key) if before is None else (before.segment_id, before.file, before.end)
        )
        appended = write_blocklets(
            storage,
            root,
            segment_id=segment_id,
            file=file,
            committed_length=committed,
            schema=plan.schema,
            batches=(b for t in rows for b in t.to_batches()),
            storage_options=plan.storage_options,
            compression_level=plan.compression_level,
            codec=plan.codec,
            max_rows=plan.blocklet_max_rows,
            max_bytes=plan.blocklet_max_bytes,
            layout=plan.layout,
            blooms=plan.blooms,
        )
        if appended is None:
            return
        written[key] = (
            appended
            if before is None
            else replace(
                before,
                end=appended.end,
                blocklets=before.blocklets + appended.blocklets,
                blooms=before.blooms + appended.blooms,
            )
        )

    # the Spark sink takes a DataFrame without some nullable columns (spark/sink.py)
    for batch in plan.conformed(batches):
        for value, part in spec.split(batch):
            key = partition_key(spec, value)
            pending.setdefault(key, []).append(part)
            counts[key] = counts.get(key, 0) + part.num_rows
            if hashed:
                more = content_sums(part)
                sums[key] = sums[key] + more if key in sums else more
            if counts[key] >= plan.blocklet_max_rows:
                flush(key)
    for key in list(pending):
        flush(key)
    return [PartitionFile(key, sums.get(key), appended) for key, appended in written.items()]


def discard_files(plan: WritePlan, appends: Iterable[BlockletsAppended]) -> None:
    """Delete files workers wrote that no version references (best effort: ``recover``
    removes what is left)."""
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    for a in appends:
        with contextlib.suppress(OSError):
            storage.delete(storage.join(root, a.file))
        discard_blooms(storage, root, a.blooms)
