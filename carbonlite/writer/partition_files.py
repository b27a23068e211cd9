"""Rows of one worker written as one new file per partition (Spark tasks writing into a
partitioned table, and publishing): the rows are split by partition as they stream in and a
partition's rows are flushed as blocklets once a blocklet's worth has gathered. Each file
lies in the directory of the write plan's segment, whichever segment it is committed to.
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
from carbonlite.metadata import BlockletsAppended
from carbonlite.metadata.partition_spec import PartitionSpec
from carbonlite.storage import open_storage
from carbonlite.writer.bloom_files import discard_blooms
from carbonlite.writer.partition_rows import partition_key
from carbonlite.writer.stream_file import write_blocklets
from carbonlite.writer.write_plan import WritePlan

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
) -> list[PartitionFile]:
    """Write one worker's rows, one new file per partition; runs on an executor. With
    ``hashed``, each partition's content sums come back too."""
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
