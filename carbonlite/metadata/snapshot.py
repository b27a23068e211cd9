"""Snapshot: the table's state at one version, a pure replay of the log.

``Snapshot.apply`` is the one place where actions change state. It returns a new snapshot
and shares every unchanged segment with the old one, so applying a commit costs in
proportion to what the commit changed, not to the size of the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from carbonlite.errors import CorruptDataError, UnsupportedFormatError
from carbonlite.metadata.actions import (
    BLOOM_FORMAT_VERSION,
    DELETION_VECTOR_FORMAT_VERSION,
    LOG_FORMAT_VERSION,
    PARTITION_FORMAT_VERSION,
    Action,
    BlockletsAppended,
    BloomFile,
    BloomFiltersAdded,
    CommitInfo,
    FilesRemoved,
    IndexesAdded,
    IndexFile,
    RowsDeleted,
    SegmentAdded,
    SegmentStatusChanged,
    StateStored,
    TableMetadata,
    TxnMarker,
)
from carbonlite.metadata.checkpoint_policy import replay_progress
from carbonlite.metadata.columns import ColumnLayout, layout_of, physical_schema
from carbonlite.metadata.pmap import OrderedMap
from carbonlite.metadata.segment_state import FileState, SegmentState
from carbonlite.names import check_log_name, check_log_path

if TYPE_CHECKING:
    from carbonlite.metadata.manifest import ManifestSet

__all__ = ["ROW_LEVEL_OPERATIONS", "FileState", "SegmentState", "Snapshot"]

_STATUSES = ("STREAMING", "STREAMING_FINISH", "SUCCESS", "COMPACTED", "MARKED_FOR_DELETE")
_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "STREAMING": ("STREAMING_FINISH", "MARKED_FOR_DELETE"),
    "STREAMING_FINISH": ("COMPACTED", "MARKED_FOR_DELETE"),
    "SUCCESS": ("COMPACTED", "MARKED_FOR_DELETE"),
    "COMPACTED": (),
    "MARKED_FOR_DELETE": (),
}


class Snapshot:
    """The state of a table at ``version``. Immutable; ``apply`` makes the next one.

    Segments and files that ``clean`` removed are forgotten, so the state holds what readers
    and retained versions need, not everything ever written."""

    __slots__ = (
        "_memo",
        "_segments",
        "commit_id",
        "data_version",
        "manifests",
        "metadata",
        "next_segment",
        "num_files",
        "recent_checkpoints",
        "replay_entries",
        "row_change_version",
        "states",
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
        row_change_version: int | None = None,
        states: Mapping[str, StateStored] | None = None,
        commit_id: str = "",
        replay_entries: int = 0,
        recent_checkpoints: tuple[int, ...] = (),
        num_files: int | None = None,
    ) -> None:
        self.table_path = table_path
        self.version = version
        self.commit_id = commit_id
        """The ``commit_id`` of the commit that made ``version`` ("" when unknown)."""
        self.data_version = version if data_version is None else data_version
        """The newest version that changed data (``commitInfo.data_change``); at most
        ``version``. An overwrite requires it unchanged since the version it read."""
        self.row_change_version = (
            self.data_version if row_change_version is None else row_change_version
        )
        """The newest version whose commit read the table to change rows (an operation in
        :data:`ROW_LEVEL_OPERATIONS`, or one that deleted rows); at most ``data_version``
        (unknown, in checkpoints of older writers: ``data_version``). A row-level change
        requires it unchanged since the version it read: only blind appends commute with it."""
        self.timestamp = timestamp
        self.metadata = metadata
        self._segments: OrderedMap[str, SegmentState] = (
            segments if isinstance(segments, OrderedMap) else OrderedMap(segments.items())
        )
        self.txns: OrderedMap[str, int] = (
            txns if isinstance(txns, OrderedMap) else OrderedMap(txns.items())
        )
        self._memo: dict[str, Any] = {}
        self.states: Mapping[str, StateStored] = states or {}
        """The publisher's state tables by name (``storeState``): the newest of each name."""
        self.manifests = manifests
        """The manifests of the checkpoint this snapshot descends from (None: no manifests)."""
        self.next_segment = (
            max((_segment_number(sid) + 1 for sid in self._segments), default=0)
            if next_segment is None
            else next_segment
        )
        """One more than the largest integer segment id ever added (forgotten ones too)."""
        self.replay_entries = replay_entries
        """Log entries of the versions since the last one a checkpoint was due at, this one
        included (``checkpoint_policy.py``): what the policy counts toward the next one."""
        self.recent_checkpoints = recent_checkpoints
        """The versions of the last two checkpoint intervals at which a checkpoint was due by
        entries (multiples of the interval are not listed): where time travel looks."""
        self.num_files = (
            sum(len(s.files) for s in self._segments.values()) if num_files is None else num_files
        )
        """Files of every segment the state holds (what a checkpoint document lists)."""

    # --- views --------------------------------------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        return self.metadata.schema

    @property
    def physical_schema(self) -> pa.Schema:
        """The schema with each column's physical name: what data files are written with and
        blocklet statistics are keyed by (``metadata/columns.py``)."""
        return physical_schema(self.metadata)

    @property
    def layout(self) -> ColumnLayout:
        """How the schema's columns lie in data files (``metadata/columns.py``)."""
        return layout_of(self.metadata)

    @property
    def properties(self) -> Mapping[str, str]:
        return self.metadata.properties

    @property
    def segments(self) -> Mapping[str, SegmentState]:
        """Every segment not yet forgotten, in creation order."""
        return self._segments

    def live_segments(self) -> list[SegmentState]:
        """Segments readers see, in creation order."""
        live = self.memo("live_segments", lambda: [s for s in self._segments.values() if s.is_live])
        return list(live)

    def memo(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()``, computed once per snapshot (a snapshot never changes): what readers
        derive from the whole state, such as the partition index planning prunes with."""
        try:
            return self._memo[key]
        except KeyError:
            value = self._memo[key] = make()
            return value

    def streaming_segment(self, partition: tuple[Any, ...] | None = None) -> SegmentState | None:
        """The newest segment of ``partition`` still open for streaming appends."""
        for sid in reversed(self._segments):
            s = self._segments[sid]
            if s.status == "STREAMING" and s.partition == partition:
                return s
        return None

    def iter_files(self) -> Iterator[tuple[SegmentState, FileState]]:
        for s in self.live_segments():
            for f in s.files.values():
                yield s, f

    @property
    def num_rows(self) -> int:
        """Rows readers see (deleted rows not counted)."""
        return sum(s.live_rows for s in self.live_segments())

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
            "row_change_version": self.row_change_version,
            "states": self.states,
            "manifests": self.manifests,
            "next_segment": self.next_segment,
            "commit_id": self.commit_id,
            "replay_entries": self.replay_entries,
            "recent_checkpoints": self.recent_checkpoints,
            "num_files": self.num_files,
        }
        if "segments" in changes:
            fields["num_files"] = None  # counted again from the segments given
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
            states=self.states,
        )
        for action in actions:
            _HANDLERS[type(action)](state, action)
        num_files = self.num_files + _files_added(self._segments, state.segments, actions)
        size = len(state.segments) + num_files
        progress = replay_progress(self, version, actions, state.metadata.properties, size)
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
            states=state.states,
            row_change_version=version
            if info is not None and info.data_change and _changes_rows(info, actions)
            else self.row_change_version,
            commit_id=info.commit_id if info is not None else "",
            replay_entries=progress.replay_entries,
            recent_checkpoints=progress.recent_checkpoints,
            num_files=num_files,
        )


def _files_added(
    old: Mapping[str, SegmentState], new: Mapping[str, SegmentState], actions: list[Action]
) -> int:
    """How many files the segments ``actions`` touched gained (or, negative, lost)."""
    touched = {
        a.segment_id
        for a in actions
        if isinstance(a, (SegmentAdded, BlockletsAppended, FilesRemoved))
    }
    return sum(_files_of(new, sid) - _files_of(old, sid) for sid in touched)


def _files_of(segments: Mapping[str, SegmentState], segment_id: str) -> int:
    seg = segments.get(segment_id)
    return 0 if seg is None else len(seg.files)


ROW_LEVEL_OPERATIONS = frozenset({"DELETE", "UPDATE", "MERGE", "UPSERT", "RESTORE"})
"""Operations that read the table to decide what they write (not blind appends)."""


def _changes_rows(info: CommitInfo, actions: list[Action]) -> bool:
    """Whether a data-changing commit read the table to change it: a row-level operation, or
    one that deleted rows (deletion vectors, or segments an overwrite marked for delete)."""
    return info.operation in ROW_LEVEL_OPERATIONS or any(
        isinstance(a, RowsDeleted)
        or (isinstance(a, SegmentStatusChanged) and a.status == "MARKED_FOR_DELETE")
        for a in actions
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
    states: Mapping[str, StateStored]

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
            partition=action.partition,
            content_hash=action.content_hash,
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


def _delete_rows(state: _Replay, action: RowsDeleted) -> None:
    if state.metadata.format_version < DELETION_VECTOR_FORMAT_VERSION:
        raise CorruptDataError(
            f"{state.where} deletes rows of {action.file!r}, but the table's format "
            f"{state.metadata.format_version} has no deletion vectors (4 and later)"
        )
    seg = _segment(state.segments, action.segment_id, state.version, state.table)
    f = seg.files.get(action.file)
    if f is None or not seg.is_live:
        raise CorruptDataError(
            f"{state.where} deletes rows of {action.file!r} of segment {seg.segment_id!r}, "
            f"which readers do not see ({'no such file' if f is None else seg.status})"
        )
    check_log_path(action.dv_file, what="deletion-vector file", where=state.where)
    for ref in action.vectors:
        if (
            ref.path != action.dv_file
            or not 0 <= ref.blocklet < f.committed_length
            or ref.offset < 0
            or ref.offset + ref.length > action.size
            or ref.cardinality <= 0
        ):
            raise CorruptDataError(
                f"{state.where} lists a deletion vector of {action.file!r} (blocklet at "
                f"{ref.blocklet}, {ref.length} bytes at {ref.offset} of {ref.path!r}) that does "
                f"not fit the file ({f.committed_length} bytes) or its vector file "
                f"({action.size} bytes)"
            )
    new = f.with_deletions(action.vectors, action.dv_file, action.size, state.version)
    state.segments = state.segments.set(seg.segment_id, seg.with_file(new))


def _txn(state: _Replay, action: TxnMarker) -> None:
    previous = state.txns.get(action.app_id)
    if previous is not None and action.batch_id <= previous:
        raise CorruptDataError(
            f"{state.where} records batch {action.batch_id} of app {action.app_id!r}, which "
            f"already committed batch {previous}"
        )
    state.txns = state.txns.set(action.app_id, action.batch_id)


def _store_state(state: _Replay, action: StateStored) -> None:
    if state.metadata.format_version < PARTITION_FORMAT_VERSION:
        raise CorruptDataError(
            f"{state.where} stores state {action.name!r}, but the table's format "
            f"{state.metadata.format_version} has no stored state (5 and later)"
        )
    check_log_path(action.path, what="state file", where=state.where)
    state.states = {**state.states, action.name: action}


def _metadata(state: _Replay, action: TableMetadata) -> None:
    if action.format_version > LOG_FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"table {state.table!r} uses log format version {action.format_version}; this "
            f"CarbonLite reads up to {LOG_FORMAT_VERSION}: upgrade carbonlite to open it"
        )
    state.metadata = action


def _append_blocklets(state: _Replay, action: BlockletsAppended) -> None:
    seg = _append(state.segments, action, state.version, state.table)
    for blooms in action.blooms:
        seg = _with_blooms(state, seg, action.file, blooms)
    if action.indexes:
        seg = _with_indexes(state, seg, action.file, action.indexes)
    state.segments = state.segments.set(seg.segment_id, seg)


def _live_file_segment(state: _Replay, segment_id: str, file: str, what: str) -> SegmentState:
    """The live segment holding ``file``, that a version gives ``what`` to."""
    seg = _segment(state.segments, segment_id, state.version, state.table)
    if file not in seg.files or not seg.is_live:
        raise CorruptDataError(
            f"{state.where} adds {what} to {file!r} of segment {seg.segment_id!r}, which "
            f"readers do not see ({'no such file' if file not in seg.files else seg.status})"
        )
    return seg


def _add_indexes(state: _Replay, action: IndexesAdded) -> None:
    seg = _live_file_segment(state, action.segment_id, action.file, "secondary indexes")
    seg = _with_indexes(state, seg, action.file, action.indexes)
    state.segments = state.segments.set(seg.segment_id, seg)


def _with_indexes(
    state: _Replay, seg: SegmentState, file: str, indexes: tuple[IndexFile, ...]
) -> SegmentState:
    if state.metadata.format_version < BLOOM_FORMAT_VERSION:
        raise CorruptDataError(
            f"{state.where} gives secondary indexes to {file!r}, but the table's format "
            f"{state.metadata.format_version} has none ({BLOOM_FORMAT_VERSION} and later)"
        )
    for index in indexes:
        check_log_path(index.path, what="secondary index file", where=state.where)
        if index.size <= 0:
            raise CorruptDataError(
                f"{state.where} lists a secondary index of {file!r} of {index.size} bytes"
            )
    return seg.with_file(seg.files[file].with_indexes(indexes))


def _add_blooms(state: _Replay, action: BloomFiltersAdded) -> None:
    seg = _live_file_segment(state, action.segment_id, action.file, "bloom filters")
    seg = _with_blooms(state, seg, action.file, action.blooms)
    state.segments = state.segments.set(seg.segment_id, seg)


def _with_blooms(state: _Replay, seg: SegmentState, file: str, blooms: BloomFile) -> SegmentState:
    if state.metadata.format_version < BLOOM_FORMAT_VERSION:
        raise CorruptDataError(
            f"{state.where} gives bloom filters to {file!r}, but the table's format "
            f"{state.metadata.format_version} has none ({BLOOM_FORMAT_VERSION} and later)"
        )
    check_log_path(blooms.path, what="bloom filter file", where=state.where)
    f = seg.files[file]
    for ref in blooms.filters:
        if (
            ref.path != blooms.path
            or not 0 <= ref.blocklet < f.committed_length
            or ref.offset < 0
            or ref.length <= 0
            or ref.offset + ref.length > blooms.size
        ):
            raise CorruptDataError(
                f"{state.where} lists bloom filters of {file!r} (blocklet at {ref.blocklet}, "
                f"{ref.length} bytes at {ref.offset} of {ref.path!r}) that do not fit the file "
                f"({f.committed_length} bytes) or its bloom file ({blooms.size} bytes)"
            )
    return seg.with_file(f.with_blooms(blooms))


def _nothing(state: _Replay, action: CommitInfo) -> None:
    """Provenance only; its timestamp is the version's."""


_HANDLERS: dict[type, Callable[[_Replay, Any], None]] = {
    SegmentAdded: _add_segment,
    BlockletsAppended: _append_blocklets,
    SegmentStatusChanged: _set_status,
    FilesRemoved: _remove_files,
    RowsDeleted: _delete_rows,
    BloomFiltersAdded: _add_blooms,
    IndexesAdded: _add_indexes,
    StateStored: _store_state,
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
