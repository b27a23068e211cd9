"""Snapshot: the table's state at one version, a pure replay of the log.

``Snapshot.apply`` is the one place where actions change state. It returns a new snapshot
and shares every unchanged segment with the old one, so applying a commit costs in
proportion to what the commit changed, not to the size of the table.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa

from carbonlite.errors import CorruptDataError, UnsupportedFormatError
from carbonlite.metadata.actions import (
    LIVE_STATUSES,
    LOG_FORMAT_VERSION,
    Action,
    BlockletEntry,
    BlockletsAppended,
    CommitInfo,
    FilesRemoved,
    SegmentAdded,
    SegmentFormat,
    SegmentStatus,
    SegmentStatusChanged,
    TableMetadata,
    TxnMarker,
)

__all__ = ["FileState", "SegmentState", "Snapshot"]


@dataclass(frozen=True, slots=True)
class FileState:
    """One data file of a segment, as committed."""

    path: str
    """Relative to the table root."""
    committed_length: int
    blocklets: tuple[BlockletEntry, ...]
    created_version: int
    modified_version: int

    @property
    def num_rows(self) -> int:
        return sum(b.num_rows for b in self.blocklets)


@dataclass(frozen=True, slots=True)
class SegmentState:
    """One segment: its status, level and files."""

    segment_id: str
    format: SegmentFormat
    status: SegmentStatus
    level: int
    sorted_by: tuple[str, ...]
    created_version: int
    created_time: int
    status_version: int
    """Version of the latest status change (the creation, if none)."""
    status_time: int
    merged_into: str | None = None
    files: Mapping[str, FileState] = field(default_factory=dict)
    files_removed: bool = False
    """True once ``clean`` has physically deleted the segment's data."""

    @property
    def is_live(self) -> bool:
        return self.status in LIVE_STATUSES

    @property
    def num_rows(self) -> int:
        return sum(f.num_rows for f in self.files.values())

    @property
    def num_bytes(self) -> int:
        return sum(f.committed_length for f in self.files.values())

    @property
    def num_blocklets(self) -> int:
        return sum(len(f.blocklets) for f in self.files.values())


class Snapshot:
    """The state of a table at ``version``. Immutable; ``apply`` makes the next one."""

    __slots__ = ("_segments", "metadata", "table_path", "timestamp", "txns", "version")

    def __init__(
        self,
        *,
        table_path: str,
        version: int,
        timestamp: int,
        metadata: TableMetadata,
        segments: Mapping[str, SegmentState],
        txns: Mapping[str, int],
    ) -> None:
        self.table_path = table_path
        self.version = version
        self.timestamp = timestamp
        self.metadata = metadata
        self._segments = dict(segments)
        self.txns = dict(txns)

    # --- views --------------------------------------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        return self.metadata.schema

    @property
    def properties(self) -> Mapping[str, str]:
        return self.metadata.properties

    @property
    def segments(self) -> Mapping[str, SegmentState]:
        """Every segment ever added (not yet forgotten), in creation order."""
        return self._segments

    def live_segments(self) -> list[SegmentState]:
        """Segments readers see, in creation order."""
        return [s for s in self._segments.values() if s.is_live]

    def streaming_segment(self) -> SegmentState | None:
        """The newest segment still open for streaming appends."""
        for s in reversed(self._segments.values()):
            if s.status == "STREAMING":
                return s
        return None

    def iter_files(self) -> Iterator[tuple[SegmentState, FileState]]:
        for s in self.live_segments():
            for f in s.files.values():
                yield s, f

    @property
    def num_rows(self) -> int:
        return sum(s.num_rows for s in self.live_segments())

    def next_segment_number(self) -> int:
        """One more than the largest integer segment id so far."""
        numbers = [int(sid.split(".")[0]) for sid in self._segments]
        return max(numbers, default=-1) + 1

    # --- replay -------------------------------------------------------------------------------

    @classmethod
    def from_actions(cls, table_path: str, version: int, actions: Iterable[Action]) -> Snapshot:
        """The first snapshot: version ``version`` (normally 0) must create the table."""
        actions = list(actions)
        metadata = next((a for a in actions if isinstance(a, TableMetadata)), None)
        if metadata is None:
            raise CorruptDataError(
                f"log version {version} of {table_path!r} should create the table but holds no "
                "table metadata"
            )
        empty = cls(
            table_path=table_path,
            version=version - 1,
            timestamp=0,
            metadata=metadata,
            segments={},
            txns={},
        )
        return empty.apply(version, actions)

    def apply(self, version: int, actions: Iterable[Action]) -> Snapshot:
        """The snapshot after committing ``actions`` as ``version`` (must be ``self.version+1``)."""
        if version != self.version + 1:
            raise CorruptDataError(
                f"log of {self.table_path!r} skips from version {self.version} to {version}"
            )
        actions = list(actions)
        metadata = self.metadata
        segments = dict(self._segments)
        txns = dict(self.txns)
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        timestamp = info.timestamp if info is not None else self.timestamp
        for action in actions:
            if isinstance(action, BlockletsAppended):
                segments[action.segment_id] = _append(segments, action, version, self.table_path)
            elif isinstance(action, SegmentAdded):
                if action.segment_id in segments:
                    raise CorruptDataError(
                        f"version {version} of {self.table_path!r} adds segment "
                        f"{action.segment_id!r} twice"
                    )
                segments[action.segment_id] = SegmentState(
                    segment_id=action.segment_id,
                    format=action.format,
                    status=action.status,
                    level=action.level,
                    sorted_by=action.sorted_by,
                    created_version=version,
                    created_time=timestamp,
                    status_version=version,
                    status_time=timestamp,
                )
            elif isinstance(action, SegmentStatusChanged):
                seg = _segment(segments, action.segment_id, version, self.table_path)
                segments[seg.segment_id] = replace(
                    seg,
                    status=action.status,
                    merged_into=action.merged_into,
                    status_version=version,
                    status_time=timestamp,
                )
            elif isinstance(action, FilesRemoved):
                seg = _segment(segments, action.segment_id, version, self.table_path)
                remaining = {p: f for p, f in seg.files.items() if p not in set(action.files)}
                segments[seg.segment_id] = replace(seg, files=remaining, files_removed=True)
            elif isinstance(action, TxnMarker):
                txns[action.app_id] = action.batch_id
            elif isinstance(action, TableMetadata):
                if action.format_version > LOG_FORMAT_VERSION:
                    raise UnsupportedFormatError(
                        f"table {self.table_path!r} uses log format version "
                        f"{action.format_version}; this CarbonLite reads up to "
                        f"{LOG_FORMAT_VERSION}: upgrade carbonlite to open it"
                    )
                metadata = action
        return Snapshot(
            table_path=self.table_path,
            version=version,
            timestamp=timestamp,
            metadata=metadata,
            segments=segments,
            txns=txns,
        )


def _segment(
    segments: dict[str, SegmentState], segment_id: str, version: int, table: str
) -> SegmentState:
    try:
        return segments[segment_id]
    except KeyError:
        raise CorruptDataError(
            f"version {version} of {table!r} refers to segment {segment_id!r}, which does not exist"
        ) from None


def _append(
    segments: dict[str, SegmentState], action: BlockletsAppended, version: int, table: str
) -> SegmentState:
    seg = _segment(segments, action.segment_id, version, table)
    old = seg.files.get(action.file)
    committed = old.committed_length if old is not None else 0
    if action.start != committed:
        raise CorruptDataError(
            f"version {version} of {table!r} appends to {action.file!r} at {action.start}, but its "
            f"committed length is {committed}"
        )
    if old is None:
        new = FileState(action.file, action.end, action.blocklets, version, version)
    else:
        new = replace(
            old,
            committed_length=action.end,
            blocklets=old.blocklets + action.blocklets,
            modified_version=version,
        )
    files = dict(seg.files)
    files[action.file] = new
    return replace(seg, files=files)
