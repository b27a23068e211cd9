"""Snapshot: the table's state at one version, a pure replay of the log.

``Snapshot.apply`` is the one place where actions change state. It returns a new snapshot
and shares every unchanged segment with the old one, so applying a commit costs in
proportion to what the commit changed, not to the size of the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
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
from carbonlite.names import check_log_name, check_log_path

__all__ = ["BlockletSeq", "FileState", "SegmentState", "Snapshot"]

_STATUSES = ("STREAMING", "STREAMING_FINISH", "SUCCESS", "COMPACTED", "MARKED_FOR_DELETE")
_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "STREAMING": ("STREAMING_FINISH", "MARKED_FOR_DELETE"),
    "STREAMING_FINISH": ("COMPACTED", "MARKED_FOR_DELETE"),
    "SUCCESS": ("COMPACTED", "MARKED_FOR_DELETE"),
    "COMPACTED": (),
    "MARKED_FOR_DELETE": (),
}


class BlockletSeq:
    """A file's blocklet entries, possibly not decoded yet.

    A checkpoint stores blocklet entries in a columnar index that is read only when some
    entries are needed (planning a scan), so opening a table costs the same however many
    blocklets it has. Appends after the checkpoint extend the sequence without loading it.
    """

    __slots__ = ("_count", "_items", "_load", "_rows", "_tail")

    def __init__(
        self,
        load: Callable[[], tuple[BlockletEntry, ...]] | None,
        count: int,
        rows: int,
        tail: tuple[BlockletEntry, ...] = (),
    ) -> None:
        self._load = load
        self._count = count + len(tail)
        self._rows = rows + sum(b.num_rows for b in tail)
        self._tail = tail
        self._items: tuple[BlockletEntry, ...] | None = tail if load is None else None

    @classmethod
    def of(cls, items: tuple[BlockletEntry, ...]) -> BlockletSeq:
        return cls(None, 0, 0, items)

    def __len__(self) -> int:
        return self._count

    @property
    def num_rows(self) -> int:
        return self._rows

    def items(self) -> tuple[BlockletEntry, ...]:
        if self._items is None:
            assert self._load is not None
            self._items = self._load() + self._tail
        return self._items

    def extend(self, more: tuple[BlockletEntry, ...]) -> BlockletSeq:
        if self._items is not None:
            return BlockletSeq.of(self._items + more)
        return BlockletSeq(
            self._load,
            self._count - len(self._tail),
            self._rows - sum(b.num_rows for b in self._tail),
            self._tail + more,
        )


class FileState:
    """One data file of a segment, as committed. Immutable."""

    __slots__ = ("committed_length", "created_version", "modified_version", "path", "seq")

    def __init__(
        self,
        path: str,
        committed_length: int,
        blocklets: tuple[BlockletEntry, ...] | BlockletSeq,
        created_version: int,
        modified_version: int,
    ) -> None:
        self.path = path
        """Relative to the table root."""
        self.committed_length = committed_length
        self.seq = (
            blocklets if isinstance(blocklets, BlockletSeq) else BlockletSeq.of(tuple(blocklets))
        )
        self.created_version = created_version
        self.modified_version = modified_version

    @property
    def blocklets(self) -> tuple[BlockletEntry, ...]:
        return self.seq.items()

    @property
    def num_rows(self) -> int:
        return self.seq.num_rows

    @property
    def num_blocklets(self) -> int:
        return len(self.seq)

    def appended(self, end: int, more: tuple[BlockletEntry, ...], version: int) -> FileState:
        return FileState(self.path, end, self.seq.extend(more), self.created_version, version)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FileState):
            return NotImplemented
        return (
            self.path == other.path
            and self.committed_length == other.committed_length
            and self.created_version == other.created_version
            and self.modified_version == other.modified_version
            and self.blocklets == other.blocklets
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"FileState(path={self.path!r}, committed_length={self.committed_length}, "
            f"blocklets={self.num_blocklets}, rows={self.num_rows}, "
            f"created_version={self.created_version}, modified_version={self.modified_version})"
        )


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
        return sum(f.num_blocklets for f in self.files.values())


class Snapshot:
    """The state of a table at ``version``. Immutable; ``apply`` makes the next one."""

    __slots__ = (
        "_segments",
        "data_version",
        "metadata",
        "table_path",
        "timestamp",
        "txns",
        "version",
    )

    def __init__(
        self,
        *,
        table_path: str,
        version: int,
        timestamp: int,
        metadata: TableMetadata,
        segments: Mapping[str, SegmentState],
        txns: Mapping[str, int],
        data_version: int | None = None,
    ) -> None:
        self.table_path = table_path
        self.version = version
        self.data_version = version if data_version is None else data_version
        """The newest version that changed data (``commitInfo.data_change``); at most
        ``version``. An overwrite requires it unchanged since the version it read."""
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
        data_version = version if info is not None and info.data_change else self.data_version
        for action in actions:
            if isinstance(action, BlockletsAppended):
                segments[action.segment_id] = _append(segments, action, version, self.table_path)
            elif isinstance(action, SegmentAdded):
                check_log_name(
                    action.segment_id,
                    what="segment id",
                    where=f"version {version} of {self.table_path!r}",
                )
                if action.status not in _STATUSES or action.format not in ("STREAMING", "COLUMNAR"):
                    raise CorruptDataError(
                        f"version {version} of {self.table_path!r} adds segment "
                        f"{action.segment_id!r} with unknown status/format "
                        f"{action.status}/{action.format}"
                    )
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
                if action.status not in _TRANSITIONS.get(seg.status, ()):
                    raise CorruptDataError(
                        f"version {version} of {self.table_path!r} moves segment "
                        f"{seg.segment_id!r} from {seg.status} to {action.status}, which is not a "
                        "valid transition"
                    )
                segments[seg.segment_id] = replace(
                    seg,
                    status=action.status,
                    merged_into=action.merged_into,
                    status_version=version,
                    status_time=timestamp,
                )
            elif isinstance(action, FilesRemoved):
                seg = _segment(segments, action.segment_id, version, self.table_path)
                if seg.is_live:
                    raise CorruptDataError(
                        f"version {version} of {self.table_path!r} removes files of segment "
                        f"{seg.segment_id!r}, which readers still see ({seg.status})"
                    )
                remaining = {p: f for p, f in seg.files.items() if p not in set(action.files)}
                segments[seg.segment_id] = replace(seg, files=remaining, files_removed=True)
            elif isinstance(action, TxnMarker):
                previous = txns.get(action.app_id)
                if previous is not None and action.batch_id <= previous:
                    raise CorruptDataError(
                        f"version {version} of {self.table_path!r} records batch {action.batch_id} "
                        f"of app {action.app_id!r}, which already committed batch {previous}"
                    )
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
            data_version=data_version,
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
    check_log_path(action.file, what="data file", where=f"version {version} of {table!r}")
    seg = _segment(segments, action.segment_id, version, table)
    if seg.status != "STREAMING" and seg.created_version != version:
        raise CorruptDataError(
            f"version {version} of {table!r} appends to segment {seg.segment_id!r}, which is "
            f"{seg.status} (only STREAMING segments, or segments created in the same version, "
            "take appends)"
        )
    position = action.start
    for b in action.blocklets:
        if b.offset < position or b.length <= 0 or b.num_rows < 0:
            raise CorruptDataError(
                f"version {version} of {table!r} lists a blocklet of {action.file!r} at "
                f"{b.offset} (length {b.length}) overlapping what comes before it"
            )
        position = b.end
    if action.end < position:
        raise CorruptDataError(
            f"version {version} of {table!r} commits {action.file!r} up to {action.end}, before "
            f"the end {position} of its last blocklet"
        )
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
        new = old.appended(action.end, action.blocklets, version)
    files = dict(seg.files)
    files[action.file] = new
    return replace(seg, files=files)
