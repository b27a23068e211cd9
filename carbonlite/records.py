"""What ``Table.history`` and ``Table.segments`` return: plain records built from the log."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from carbonlite.metadata import CommitInfo, Log, SegmentState, Snapshot
from carbonlite.metadata.partition_spec import PartitionSpec

__all__ = [
    "CommitRecord",
    "PartitionInfo",
    "SegmentInfo",
    "TableSummary",
    "partition_infos",
    "read_history",
    "segment_infos",
    "table_summary",
]


def _when(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


@dataclass(frozen=True, slots=True)
class CommitRecord:
    """One version of the table's history."""

    version: int
    timestamp: datetime.datetime
    operation: str
    data_change: bool
    rows: int
    """Rows added."""
    bytes: int
    """Bytes added."""
    rows_removed: int
    bytes_removed: int
    read_version: int | None
    parameters: Mapping[str, str]
    files_added: int | None = None
    """Data files created (None in versions written before CarbonLite recorded it)."""
    files_removed: int | None = None
    """Data files taken out of the table (``CLEAN``: deleted); None when not recorded."""
    duration: datetime.timedelta | None = None
    """How long the operation took; None when not recorded."""
    writer_id: str | None = None
    """The writer identity that committed; None when not recorded."""
    engine: str = ""
    """The library that wrote the version, e.g. ``carbonlite/0.1.0``."""


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment, as ``SHOW SEGMENTS`` would list it."""

    id: str
    status: str
    format: str
    rows: int
    bytes: int
    files: int
    blocklets: int
    merged_into: str | None
    level: int
    created_version: int
    created_time: datetime.datetime
    status_time: datetime.datetime
    deleted_rows: int = 0
    """Rows of its files deleted by deletion vectors (``rows`` counts only the others)."""
    deletion_vector_bytes: int = 0
    """Bytes of its deletion-vector files."""
    partition: str | None = None
    """Its partition as text (``region=eu``) in a partitioned table; None otherwise."""


def read_history(log: Log, snapshot: Snapshot, limit: int | None) -> list[CommitRecord]:
    """Commits up to ``snapshot``, newest first, at most ``limit`` (all when None)."""
    out: list[CommitRecord] = []
    # Newest first, one version at a time, following the parent links down (a link names one
    # file per number, ``metadata/history.py``), until ``limit`` or the floor of the retained
    # history: reads only what it returns, never lists the log. A version missing or one the
    # next was not built on (a stale writer's fork below the floor) ends it too.
    parent = snapshot.commit_id
    floor = log.look().floor
    for version in range(snapshot.version, floor - 1, -1):
        if limit is not None and len(out) >= limit:
            break
        try:
            actions = log.read_actions(version, snapshot)
        except FileNotFoundError:
            break
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        if info is None:
            continue
        if parent and info.commit_id and info.commit_id != parent:
            break
        parent = info.parent_commit_id
        out.append(
            CommitRecord(
                version=version,
                timestamp=_when(info.timestamp),
                operation=info.operation,
                data_change=info.data_change,
                rows=info.rows_added,
                bytes=info.bytes_added,
                rows_removed=info.rows_removed,
                bytes_removed=info.bytes_removed,
                read_version=info.read_version,
                parameters=dict(info.parameters),
                files_added=info.files_added,
                files_removed=info.files_removed,
                duration=None
                if info.duration_ms is None
                else datetime.timedelta(milliseconds=info.duration_ms),
                writer_id=info.writer_id,
                engine=info.engine,
            )
        )
    return out


def segment_infos(snapshot: Snapshot) -> list[SegmentInfo]:
    """Every segment of ``snapshot``, oldest first."""
    spec = PartitionSpec.from_json(list(snapshot.metadata.partition_by), snapshot.schema)
    return [
        SegmentInfo(
            id=s.segment_id,
            status=s.status,
            format=s.format,
            rows=s.live_rows,
            bytes=s.num_bytes,
            files=len(s.files),
            blocklets=s.num_blocklets,
            merged_into=s.merged_into,
            level=s.level,
            created_version=s.created_version,
            created_time=_when(s.created_time),
            status_time=_when(s.status_time),
            deleted_rows=s.num_deleted,
            deletion_vector_bytes=sum(n for f in s.files.values() for n in f.dv_files.values()),
            partition=None
            if s.partition is None
            else spec.describe(spec.value_from_json(list(s.partition))),
        )
        for s in snapshot.segments.values()
    ]


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition of a partitioned table, as ``Table.partitions`` lists it."""

    value: tuple[Any, ...]
    """The partition value, one entry per partition field (``PartitionSpec`` types)."""
    name: str
    """The value as text, e.g. ``region=eu/ts_day=2026-11-24``."""
    rows: int
    """Rows readers see (deleted ones not counted)."""
    bytes: int
    files: int
    segments: int
    last_modified_version: int
    """The newest version that wrote to it (appends, deletes, publishes, and compactions,
    which rewrite it)."""
    content_hash: str | None
    """The content hash of its rows when known (published, unchanged since); else None."""


def partition_infos(snapshot: Snapshot, spec: PartitionSpec) -> list[PartitionInfo]:
    """Every partition with live rows or segments at ``snapshot``, in partition order."""
    groups: dict[tuple[Any, ...], list[SegmentState]] = {}
    for seg in snapshot.live_segments():
        if seg.partition is not None:
            groups.setdefault(seg.partition, []).append(seg)
    out = []
    for key, segs in groups.items():
        value = spec.value_from_json(list(key))
        out.append(
            PartitionInfo(
                value=value,
                name=spec.describe(value),
                rows=sum(s.live_rows for s in segs),
                bytes=sum(s.num_bytes for s in segs),
                files=sum(len(s.files) for s in segs),
                segments=len(segs),
                last_modified_version=max(_modified(s) for s in segs),
                content_hash=segs[0].current_hash if len(segs) == 1 else None,
            )
        )
    return sorted(out, key=lambda p: _order(p.value))


def _modified(seg: SegmentState) -> int:
    return max(
        [seg.created_version]
        + [max(f.modified_version, f.deletion_version) for f in seg.files.values()]
    )


def _order(value: tuple[Any, ...]) -> tuple[Any, ...]:
    """Sorts partition values with nulls first, whatever the types."""
    return tuple((v is not None, v if v is not None else 0) for v in value)


@dataclass(frozen=True, slots=True)
class TableSummary:
    """What the live segments of one version hold (``carbonlite inspect``'s summary, Spark's
    ``CarbonTable.detail()``)."""

    segments: int
    """Every segment the log lists, compacted and deleted ones too."""
    live_segments: int
    files: int
    blocklets: int
    rows: int
    """Rows readers see (deleted rows not counted)."""
    deleted_rows: int
    deletion_vector_bytes: int
    bytes: int
    """Committed bytes of the live data files."""


def table_summary(snapshot: Snapshot) -> TableSummary:
    live = [s for s in snapshot.segments.values() if s.is_live]
    return TableSummary(
        segments=len(snapshot.segments),
        live_segments=len(live),
        files=sum(len(s.files) for s in live),
        blocklets=sum(s.num_blocklets for s in live),
        rows=sum(s.live_rows for s in live),
        deleted_rows=sum(s.num_deleted for s in live),
        deletion_vector_bytes=sum(
            n for s in live for f in s.files.values() for n in f.dv_files.values()
        ),
        bytes=sum(s.num_bytes for s in live),
    )
