"""Snapshot: the table's state at one version, a pure replay of the log.

``Snapshot.apply`` is the one place where actions change state. It returns a new snapshot
and shares every unchanged segment with the old one, so applying a commit costs in
proportion to what the commit changed, not to the size of the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

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
from carbonlite.metadata.pmap import OrderedMap
from carbonlite.names import check_log_name, check_log_path

if TYPE_CHECKING:
    from carbonlite.metadata.manifest import ManifestSet

__all__ = ["FileState", "SegmentState", "Snapshot"]

_STATUSES = ("STREAMING", "STREAMING_FINISH", "SUCCESS", "COMPACTED", "MARKED_FOR_DELETE")
_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "STREAMING": ("STREAMING_FINISH", "MARKED_FOR_DELETE"),
    "STREAMING_FINISH": ("COMPACTED", "MARKED_FOR_DELETE"),
    "SUCCESS": ("COMPACTED", "MARKED_FOR_DELETE"),
    "COMPACTED": (),
    "MARKED_FOR_DELETE": (),
}


class FileState:
    """One data file of a segment, as committed. Immutable.

    Its blocklet entries up to the checkpoint the snapshot descends from live in that
    checkpoint's manifests (``source``); those committed since are kept here (``tail``), as a
    chain of the appends' entries so an append costs the size of the append only. Counts are
    kept as numbers, so nothing needs the entries to count rows or blocklets."""

    __slots__ = (
        "_chain",
        "_entries",
        "_tail",
        "blocklet_bytes",
        "committed_length",
        "created_version",
        "modified_version",
        "num_blocklets",
        "num_rows",
        "path",
        "segment_id",
        "source",
    )

    def __init__(
        self,
        path: str,
        committed_length: int,
        blocklets: tuple[BlockletEntry, ...],
        created_version: int,
        modified_version: int,
        *,
        segment_id: str = "",
        source: ManifestSet | None = None,
        counts: tuple[int, int, int] = (0, 0, 0),
    ) -> None:
        self.path = path
        """Relative to the table root."""
        self.committed_length = committed_length
        self.created_version = created_version
        self.modified_version = modified_version
        self.segment_id = segment_id
        self.source = source
        """The manifests holding the entries before ``tail`` (None: all are in ``tail``)."""
        more = tuple(blocklets)
        self._chain: tuple[Any, tuple[BlockletEntry, ...]] | None = (None, more) if more else None
        self._tail: tuple[BlockletEntry, ...] | None = more
        rows, count, nbytes = counts
        self.num_rows = rows + sum(b.num_rows for b in more)
        self.num_blocklets = count + len(more)
        self.blocklet_bytes = nbytes + sum(b.length for b in more)
        """Bytes of the committed blocklets (headers of the file excluded)."""
        self._entries: tuple[BlockletEntry, ...] | None = None

    @property
    def tail(self) -> tuple[BlockletEntry, ...]:
        """Entries committed since the checkpoint of ``source`` (all of them without one)."""
        if self._tail is None:
            parts = []
            link = self._chain
            while link is not None:
                parts.append(link[1])
                link = link[0]
            self._tail = tuple(b for part in reversed(parts) for b in part)
        return self._tail

    @property
    def has_tail(self) -> bool:
        return self._chain is not None

    @property
    def blocklets(self) -> tuple[BlockletEntry, ...]:
        """Every committed blocklet, in file order (reads manifests when needed)."""
        if self._entries is None:
            if self.source is None:
                self._entries = self.tail
            else:
                found = self.source.entries(self.path, self.segment_id) + list(self.tail)
                if len(found) != self.num_blocklets:
                    raise CorruptDataError(
                        f"the manifests of {self.path!r} hold {len(found) - len(self.tail)} "
                        f"blocklets, the checkpoint counts {self.num_blocklets - len(self.tail)}: "
                        "the checkpoint or a manifest is damaged"
                    )
                self._entries = tuple(found)
        return self._entries

    def appended(self, end: int, more: tuple[BlockletEntry, ...], version: int) -> FileState:
        out = FileState(
            self.path,
            end,
            (),
            self.created_version,
            version,
            segment_id=self.segment_id,
            source=self.source,
            counts=(
                self.num_rows + sum(b.num_rows for b in more),
                self.num_blocklets + len(more),
                self.blocklet_bytes + sum(b.length for b in more),
            ),
        )
        out._chain = (self._chain, more) if more else self._chain
        out._tail = None if out._chain is not None else ()
        return out

    def rebased(self, source: ManifestSet) -> FileState:
        """The same file with every entry in ``source`` (just written by a checkpoint)."""
        return FileState(
            self.path,
            self.committed_length,
            (),
            self.created_version,
            self.modified_version,
            segment_id=self.segment_id,
            source=source,
            counts=(self.num_rows, self.num_blocklets, self.blocklet_bytes),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FileState):
            return NotImplemented
        return (
            self.path == other.path
            and self.committed_length == other.committed_length
            and self.created_version == other.created_version
            and self.modified_version == other.modified_version
            and self.num_rows == other.num_rows
            and self.num_blocklets == other.num_blocklets
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
    """One segment: its status, level and files (with their totals kept as numbers)."""

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
    files: Mapping[str, FileState] = field(default_factory=OrderedMap)
    files_removed: bool = False
    """True once ``clean`` has physically deleted some of the segment's data."""
    num_rows: int = -1
    num_bytes: int = -1
    """Committed bytes of its files."""
    num_blocklets: int = -1

    def __post_init__(self) -> None:
        if not isinstance(self.files, OrderedMap):
            object.__setattr__(self, "files", OrderedMap(self.files.items()))
        if self.num_rows < 0:
            object.__setattr__(self, "num_rows", sum(f.num_rows for f in self.files.values()))
            object.__setattr__(
                self, "num_bytes", sum(f.committed_length for f in self.files.values())
            )
            object.__setattr__(
                self, "num_blocklets", sum(f.num_blocklets for f in self.files.values())
            )

    @property
    def is_live(self) -> bool:
        return self.status in LIVE_STATUSES

    def with_file(self, new: FileState) -> SegmentState:
        """This segment with ``new`` added or replacing the file of the same path."""
        old = self.files.get(new.path)
        d_rows = new.num_rows - (old.num_rows if old else 0)
        d_bytes = new.committed_length - (old.committed_length if old else 0)
        d_count = new.num_blocklets - (old.num_blocklets if old else 0)
        assert isinstance(self.files, OrderedMap)
        return replace(
            self,
            files=self.files.set(new.path, new),
            num_rows=self.num_rows + d_rows,
            num_bytes=self.num_bytes + d_bytes,
            num_blocklets=self.num_blocklets + d_count,
        )

    def without_files(self, paths: Iterable[str]) -> SegmentState:
        files = self.files
        assert isinstance(files, OrderedMap)
        rows, nbytes, count = self.num_rows, self.num_bytes, self.num_blocklets
        for p in paths:
            old = files.get(p)
            if old is None:
                continue
            files = files.delete(p)
            rows -= old.num_rows
            nbytes -= old.committed_length
            count -= old.num_blocklets
        return replace(
            self,
            files=files,
            files_removed=True,
            num_rows=rows,
            num_bytes=nbytes,
            num_blocklets=count,
        )


class Snapshot:
    """The state of a table at ``version``. Immutable; ``apply`` makes the next one.

    Segments and files that ``clean`` removed are forgotten, so the state holds what readers
    and retained versions need, not everything ever written."""

    __slots__ = (
        "_segments",
        "data_version",
        "manifests",
        "metadata",
        "next_segment",
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
        manifests: ManifestSet | None = None,
        next_segment: int | None = None,
    ) -> None:
        self.table_path = table_path
        self.version = version
        self.data_version = version if data_version is None else data_version
        """The newest version that changed data (``commitInfo.data_change``); at most
        ``version``. An overwrite requires it unchanged since the version it read."""
        self.timestamp = timestamp
        self.metadata = metadata
        self._segments: OrderedMap[str, SegmentState] = (
            segments if isinstance(segments, OrderedMap) else OrderedMap(segments.items())
        )
        self.txns: OrderedMap[str, int] = (
            txns if isinstance(txns, OrderedMap) else OrderedMap(txns.items())
        )
        self.manifests = manifests
        """The manifests of the checkpoint this snapshot descends from (None: no manifests)."""
        self.next_segment = (
            max((_segment_number(sid) + 1 for sid in self._segments), default=0)
            if next_segment is None
            else next_segment
        )
        """One more than the largest integer segment id ever added (forgotten ones too)."""

    # --- views --------------------------------------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        return self.metadata.schema

    @property
    def properties(self) -> Mapping[str, str]:
        return self.metadata.properties

    @property
    def segments(self) -> Mapping[str, SegmentState]:
        """Every segment not yet forgotten, in creation order."""
        return self._segments

    def live_segments(self) -> list[SegmentState]:
        """Segments readers see, in creation order."""
        return [s for s in self._segments.values() if s.is_live]

    def streaming_segment(self) -> SegmentState | None:
        """The newest segment still open for streaming appends."""
        for sid in reversed(self._segments):
            s = self._segments[sid]
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
        return self.next_segment

    def with_manifests(self, manifests: ManifestSet) -> Snapshot:
        """This state with every file's entries in ``manifests`` (a checkpoint just wrote
        them): later checkpoints reuse them instead of encoding the entries again."""
        segments: OrderedMap[str, SegmentState] = OrderedMap()
        for sid, seg in self._segments.items():
            files = OrderedMap((p, f.rebased(manifests)) for p, f in seg.files.items())
            segments = segments.set(sid, replace(seg, files=files))
        return self._evolve(segments=segments, manifests=manifests)

    def _evolve(self, **changes: Any) -> Snapshot:
        fields: dict[str, Any] = {
            "table_path": self.table_path,
            "version": self.version,
            "timestamp": self.timestamp,
            "metadata": self.metadata,
            "segments": self._segments,
            "txns": self.txns,
            "data_version": self.data_version,
            "manifests": self.manifests,
            "next_segment": self.next_segment,
        }
        fields.update(changes)
        return Snapshot(**fields)

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
        """The snapshot after committing ``actions`` as ``version`` (must be ``self.version+1``).

        Each action costs in proportion to its own size: maps are persistent, totals are
        kept as numbers."""
        if version != self.version + 1:
            raise CorruptDataError(
                f"log of {self.table_path!r} skips from version {self.version} to {version}"
            )
        actions = list(actions)
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        state = _Replay(
            table=self.table_path,
            version=version,
            timestamp=info.timestamp if info is not None else self.timestamp,
            metadata=self.metadata,
            segments=self._segments,
            txns=self.txns,
            next_segment=self.next_segment,
        )
        for action in actions:
            _HANDLERS[type(action)](state, action)
        return Snapshot(
            table_path=self.table_path,
            version=version,
            timestamp=state.timestamp,
            metadata=state.metadata,
            segments=state.segments,
            txns=state.txns,
            data_version=version if info is not None and info.data_change else self.data_version,
            manifests=self.manifests,
            next_segment=state.next_segment,
        )


def _segment_number(segment_id: str) -> int:
    try:
        return int(segment_id.split(".")[0])
    except ValueError:
        return -1


@dataclass(slots=True)
class _Replay:
    """The state while one version's actions are applied."""

    table: str
    version: int
    timestamp: int
    metadata: TableMetadata
    segments: OrderedMap[str, SegmentState]
    txns: OrderedMap[str, int]
    next_segment: int

    @property
    def where(self) -> str:
        return f"version {self.version} of {self.table!r}"


def _add_segment(state: _Replay, action: SegmentAdded) -> None:
    check_log_name(action.segment_id, what="segment id", where=state.where)
    if action.status not in _STATUSES or action.format not in ("STREAMING", "COLUMNAR"):
        raise CorruptDataError(
            f"{state.where} adds segment {action.segment_id!r} with unknown status/format "
            f"{action.status}/{action.format}"
        )
    if action.segment_id in state.segments:
        raise CorruptDataError(f"{state.where} adds segment {action.segment_id!r} twice")
    state.segments = state.segments.set(
        action.segment_id,
        SegmentState(
            segment_id=action.segment_id,
            format=action.format,
            status=action.status,
            level=action.level,
            sorted_by=action.sorted_by,
            created_version=state.version,
            created_time=state.timestamp,
            status_version=state.version,
            status_time=state.timestamp,
        ),
    )
    state.next_segment = max(state.next_segment, _segment_number(action.segment_id) + 1)


def _set_status(state: _Replay, action: SegmentStatusChanged) -> None:
    seg = _segment(state.segments, action.segment_id, state.version, state.table)
    if action.status not in _TRANSITIONS.get(seg.status, ()):
        raise CorruptDataError(
            f"{state.where} moves segment {seg.segment_id!r} from {seg.status} to "
            f"{action.status}, which is not a valid transition"
        )
    state.segments = state.segments.set(
        seg.segment_id,
        replace(
            seg,
            status=action.status,
            merged_into=action.merged_into,
            status_version=state.version,
            status_time=state.timestamp,
        ),
    )


def _remove_files(state: _Replay, action: FilesRemoved) -> None:
    seg = state.segments.get(action.segment_id)
    if seg is None:
        return  # forgotten by an earlier removeFiles (two cleans raced): nothing left to drop
    if seg.is_live:
        raise CorruptDataError(
            f"{state.where} removes files of segment {seg.segment_id!r}, which readers still "
            f"see ({seg.status})"
        )
    seg = seg.without_files(action.files)
    if seg.files:
        state.segments = state.segments.set(seg.segment_id, seg)
    else:  # nothing left to read or delete: the segment is forgotten
        state.segments = state.segments.delete(seg.segment_id)


def _txn(state: _Replay, action: TxnMarker) -> None:
    previous = state.txns.get(action.app_id)
    if previous is not None and action.batch_id <= previous:
        raise CorruptDataError(
            f"{state.where} records batch {action.batch_id} of app {action.app_id!r}, which "
            f"already committed batch {previous}"
        )
    state.txns = state.txns.set(action.app_id, action.batch_id)


def _metadata(state: _Replay, action: TableMetadata) -> None:
    if action.format_version > LOG_FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"table {state.table!r} uses log format version {action.format_version}; this "
            f"CarbonLite reads up to {LOG_FORMAT_VERSION}: upgrade carbonlite to open it"
        )
    state.metadata = action


def _append_blocklets(state: _Replay, action: BlockletsAppended) -> None:
    seg = _append(state.segments, action, state.version, state.table)
    state.segments = state.segments.set(seg.segment_id, seg)


def _nothing(state: _Replay, action: CommitInfo) -> None:
    """Provenance only; its timestamp is the version's."""


_HANDLERS: dict[type, Callable[[_Replay, Any], None]] = {
    SegmentAdded: _add_segment,
    BlockletsAppended: _append_blocklets,
    SegmentStatusChanged: _set_status,
    FilesRemoved: _remove_files,
    TxnMarker: _txn,
    TableMetadata: _metadata,
    CommitInfo: _nothing,
}


def _segment(
    segments: Mapping[str, SegmentState], segment_id: str, version: int, table: str
) -> SegmentState:
    try:
        return segments[segment_id]
    except KeyError:
        raise CorruptDataError(
            f"version {version} of {table!r} refers to segment {segment_id!r}, which does not exist"
        ) from None


def _append(
    segments: Mapping[str, SegmentState], action: BlockletsAppended, version: int, table: str
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
        new = FileState(
            action.file, action.end, action.blocklets, version, version, segment_id=seg.segment_id
        )
    else:
        new = old.appended(action.end, action.blocklets, version)
    return seg.with_file(new)
