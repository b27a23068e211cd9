"""What a distributed write's driver decides once for all its workers (see
:mod:`carbonlite.driver` and :mod:`carbonlite.writer.distributed`)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from carbonlite.errors import CommitConflictError
from carbonlite.format.bloom import BloomSpec
from carbonlite.format.pages import PageCodec
from carbonlite.metadata.actions import TableMetadata
from carbonlite.metadata.columns import IDENTITY, ColumnLayout, layout_of
from carbonlite.metadata.snapshot import Snapshot
from carbonlite.writer.batches import conformed_batches
from carbonlite.writer.bloom_files import bloom_spec

__all__ = ["WritePlan", "check_not_stale", "part_file", "partition_stream_file", "task_lock_name"]


@dataclass
class WritePlan:
    """Everything a worker needs, decided on the driver for one micro-batch or job."""

    uri: str
    storage_options: dict[str, Any]
    schema: pa.Schema
    segment_id: str
    new_segment: bool
    committed: dict[str, int] = field(default_factory=dict)
    txns: dict[str, int] = field(default_factory=dict)
    overwrite: bool = False
    skip: bool = False
    """Write nothing (the transaction was committed before, or a save mode says so)."""
    blocklet_max_rows: int = 65_536
    blocklet_max_bytes: int = 64 * 1024 * 1024
    compression_level: int = 1
    codec: PageCodec = "lz4"
    read_version: int = 0
    planned_ms: int | None = None
    """When the driver planned the write: its commit records the duration from here."""
    plan_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    """Names this plan's objects on object stores (a replanned batch never reuses a name)."""
    append_files: bool = True
    """Whether the storage appends (local disk): parts then reuse their files across plans."""
    partition_by: list[str] = field(default_factory=list)
    """The table's partition fields when workers write one file per partition (a
    partitioned table without a primary key); empty otherwise."""
    partition_streams: dict[tuple[Any, ...], tuple[str, dict[str, int]]] = field(
        default_factory=dict
    )
    """Per partition key, the partition's STREAMING segment when planned and the committed
    length of each of its files (local disks, not for an overwrite): a stream's task appends
    to its own file there batch after batch (:func:`partition_stream_file`)."""
    dynamic_overwrite: bool = False
    """An overwrite of a partitioned table replaces only the partitions written (Spark's
    ``partitionOverwriteMode=dynamic``)."""

    replace_where: str | None = None
    """Delta's ``replaceWhere``: the rows this predicate keeps are deleted in the version that
    adds the written ones, and every written row must match it (``writer/replace_where.py``)."""
    metadata: TableMetadata | None = None
    """The table's metadata when planned: workers write under its physical column names and
    defaults, and the commit is refused if a column was renamed or dropped since."""
    metadata_change: tuple[TableMetadata, TableMetadata] | None = None
    """(read, new) metadata when the write's commit adds columns (``mergeSchema``): workers
    write in the new one (:attr:`metadata`), and the commit requires the read one unchanged."""

    @property
    def layout(self) -> ColumnLayout:
        return IDENTITY if self.metadata is None else layout_of(self.metadata)

    @property
    def blooms(self) -> BloomSpec | None:
        """The bloom filters workers build (the table's ``bloom_filter_columns``)."""
        if self.metadata is None:
            return None
        return bloom_spec(self.metadata.properties, self.schema, self.layout)

    @property
    def file_schema_tag(self) -> str:
        """A short fingerprint of the schema workers write files in (physical names, types,
        column ids): a part file is appended to only while it does not change."""
        schema = self.layout.file_schema(self.schema)
        return hashlib.sha256(schema.serialize().to_pybytes()).hexdigest()[:8]

    def conformed(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """A worker's ``batches`` in the table's shape: the Spark sink takes a DataFrame
        without some nullable columns (``spark/sink.py``), which get their defaults or nulls."""
        return conformed_batches(
            batches,
            self.schema,
            where=self.uri,
            fill_missing=True,
            defaults=self.layout.defaults,
            metadata=self.metadata,
        )

    def done(self, app_id: str | None, batch_id: int | None) -> bool:
        """Whether the table already held ``(app_id, batch_id)`` when this was planned."""
        committed = self.txns.get(app_id) if app_id is not None else None
        return committed is not None and batch_id is not None and committed >= batch_id


def part_file(plan: WritePlan, tag: str, partition: int, attempt: int) -> str:
    """The file (relative to the table) a part writes: see the module's notes."""
    if plan.append_files:
        # Reused by the next plans, until the table's schema changes: a file holds one schema
        # (its header's), so rows of another one go to a file of their own.
        name = f"{task_lock_name(tag, partition, attempt)}-s{plan.file_schema_tag}"
    else:
        name = f"{tag}-{plan.plan_id}-p{partition:05d}-a{attempt}"
    return f"segments/{plan.segment_id}/{name}.cblt"


def partition_stream_file(
    plan: WritePlan, key: tuple[Any, ...], tag: str, task: int, attempt: int
) -> tuple[str, str, int] | None:
    """(segment id, file, committed length) of the file a task appends a partition's rows to
    in that partition's STREAMING segment; None when the plan has no such segment for it (the
    rows then go to a new file named after the plan). The file lies in its segment's own
    directory and is named like an unpartitioned part (:func:`part_file`); the directory
    keeps partitions apart, and a segment no later plan appends to (closed, handed off) is
    never written again."""
    stream = plan.partition_streams.get(key)
    if stream is None:
        return None
    segment_id, files = stream
    file = (
        f"segments/{segment_id}/{task_lock_name(tag, task, attempt)}-s{plan.file_schema_tag}.cblt"
    )
    return segment_id, file, files.get(file, 0)


def task_lock_name(tag: str, task: int, attempt: int) -> str:
    """The writer lock a task attempt holds over every file it appends to (its part, or its
    file in each partition's segment): the owner lock ``recover`` finds for
    ``<tag>-p<task>-a<attempt>-s<schema>.cblt`` (``writer.append.owner_lock_paths``)."""
    return f"{tag}-p{task:05d}-a{attempt}"


def check_not_stale(
    latest: Snapshot, plan: WritePlan, segment_id: str, file: str, committed: int, uri: str
) -> None:
    """Refuse to cut ``file`` back to a committed length the log has since moved past: this
    part belongs to a plan other commits have overtaken (a zombie attempt)."""
    seg = latest.segments.get(segment_id)
    now = seg.files.get(file) if seg is not None else None
    if now is not None and now.committed_length != committed:
        raise CommitConflictError(
            f"{uri!r} was committed up to {now.committed_length} bytes at version "
            f"{latest.version}, past the {committed} bytes this write was planned on (version "
            f"{plan.read_version}): a later batch has committed into it, so this attempt is "
            "stale and writes nothing",
            read_version=plan.read_version,
        )
