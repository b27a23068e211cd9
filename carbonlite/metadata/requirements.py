"""What a commit requires of the table: preconditions as data, checked in one place.

A pending commit (pyiceberg's model) is *requirements* plus the *actions* that update the
table. ``commit()`` checks every requirement against the snapshot it starts from and against
each version that wins a race, and when ``clean`` has removed the versions between, against
the newest state alone: so every requirement is a property of one state, never of the path
between two. Each holds over any jump forward, because the state only moves one way: segment
statuses move forward, committed lengths only grow, transaction batch ids and
``data_version`` only rise.

A requirement that fails raises what the committer acts on: :class:`CommitConflictError`
(nothing is committed), its :class:`SegmentNotWritableError` subclass (the writer moves its
blocklets to the segment that takes appends now), or :class:`TransactionAlreadyCommitted`
(the batch is already in the table: skip it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from carbonlite.errors import ColumnsMovedError, CommitConflictError, RowsChangedError
from carbonlite.metadata.actions import TableMetadata
from carbonlite.metadata.columns import schema_change_problems
from carbonlite.metadata.snapshot import Snapshot

__all__ = [
    "ColumnsAsWritten",
    "DataUnchangedSince",
    "DeletionsAsRead",
    "FileAppendable",
    "MarkersContinue",
    "MetadataUnchanged",
    "Requirement",
    "RowsUnchangedSince",
    "SegmentAbsent",
    "SegmentAsPlanned",
    "SegmentNotWritableError",
    "SegmentStreaming",
    "TransactionAlreadyCommitted",
    "TxnContinues",
    "TxnMovedError",
    "TxnNotCommitted",
    "check_requirements",
]


class TransactionAlreadyCommitted(Exception):
    """The table already holds this application's batch: the commit must be skipped."""

    def __init__(self, app_id: str, batch_id: int, committed_batch_id: int) -> None:
        self.app_id = app_id
        self.batch_id = batch_id
        self.committed_batch_id = committed_batch_id
        super().__init__(
            f"app {app_id!r} already committed batch {committed_batch_id} (>= {batch_id})"
        )


class SegmentNotWritableError(CommitConflictError):
    """A segment this commit appends to stopped accepting appends (rolled over, handed off)."""

    def __init__(
        self, message: str, *, segment_id: str, read_version: int, conflicting_version: int
    ) -> None:
        self.segment_id = segment_id
        super().__init__(
            message, read_version=read_version, conflicting_version=conflicting_version
        )


class Requirement(Protocol):
    """One precondition of a commit."""

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        """Raise unless ``snapshot`` meets it; ``read_version``: what the commit read."""


def check_requirements(
    requirements: Iterable[Requirement], snapshot: Snapshot, read_version: int
) -> None:
    """Check every requirement against ``snapshot``, in order; the first unmet one raises."""
    for requirement in requirements:
        requirement.check(snapshot, read_version)


def _conflict(message: str, snapshot: Snapshot, read_version: int) -> CommitConflictError:
    return CommitConflictError(
        message, read_version=read_version, conflicting_version=snapshot.version
    )


@dataclass(frozen=True, slots=True)
class TxnNotCommitted:
    """The table holds no batch of ``app_id`` at or after ``batch_id`` (exactly once)."""

    app_id: str
    batch_id: int

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        done = snapshot.txns.get(self.app_id)
        if done is not None and done >= self.batch_id:
            raise TransactionAlreadyCommitted(self.app_id, self.batch_id, done)


class TxnMovedError(CommitConflictError):
    """Another writer moved an application's transaction marker since this writer read it
    (two ingesters on one Kafka partition): its batch overlaps what the other committed, so
    it must re-read where the marker is and start again from there."""

    def __init__(
        self, message: str, *, app_id: str, expected: int | None, found: int | None, **kw: Any
    ) -> None:
        super().__init__(message, **kw)
        self.app_id = app_id
        self.expected = expected
        self.found = found


@dataclass(frozen=True, slots=True)
class TxnContinues:
    """The table's marker of ``app_id`` is still ``previous`` (None: it has none), so the
    batch ``batch_id`` continues exactly where the table stands: a compare-and-set on the
    marker. A marker already at or past ``batch_id`` means this very batch committed before
    (an uncertain commit retried): the commit is skipped. Any other value means another
    writer committed part of the same range: :class:`TxnMovedError`."""

    app_id: str
    previous: int | None
    batch_id: int

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        MarkersContinue((self,)).check(snapshot, read_version)

    def found(self, snapshot: Snapshot) -> int | None:
        """The table's marker of ``app_id`` in ``snapshot``."""
        return snapshot.txns.get(self.app_id)

    def holds_batch(self, snapshot: Snapshot) -> bool:
        """Whether the marker moved to or past ``batch_id``: the table holds the batch."""
        found = self.found(snapshot)
        return found != self.previous and found is not None and found >= self.batch_id

    def moved(self, snapshot: Snapshot, read_version: int, why: str) -> TxnMovedError:
        found = self.found(snapshot)
        return TxnMovedError(
            f"the marker of {self.app_id!r} in {snapshot.table_path!r} is "
            f"{'absent' if found is None else found} at version {snapshot.version}, not "
            f"{'absent' if self.previous is None else self.previous} as this writer read it at "
            f"version {read_version}: {why}; nothing was committed, start again after the "
            "table's markers",
            app_id=self.app_id,
            expected=self.previous,
            found=found,
            read_version=read_version,
            conflicting_version=snapshot.version,
        )


@dataclass(frozen=True, slots=True)
class MarkersContinue:
    """Every marker a commit moves (``AppendCommit.progress``, one :class:`TxnContinues`
    each) continues where the writer read it, decided for the batch as a whole: every marker
    unmoved, the commit goes on; every one at or past its batch id, the table holds the whole
    batch (an uncertain commit retried, or another writer committed the same range): the
    commit is skipped. Any other mix, one marker past the batch while another is where it
    was read, say, means another writer committed *part* of the batch: skipping would drop
    the rest and committing would repeat that part, so :class:`TxnMovedError`, and the
    writer starts again after the table's markers."""

    moves: tuple[TxnContinues, ...]

    @classmethod
    def of(cls, progress: Mapping[str, tuple[int | None, int]]) -> MarkersContinue:
        """The requirement of ``progress``: ``app_id -> (previous, new)``."""
        return cls(tuple(TxnContinues(a, previous, new) for a, (previous, new) in progress.items()))

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        unmoved = [m for m in self.moves if m.found(snapshot) == m.previous]
        if len(unmoved) == len(self.moves):
            return
        held = [m for m in self.moves if m.holds_batch(snapshot)]
        if len(held) == len(self.moves):
            first = held[0]
            found = first.found(snapshot)
            assert found is not None
            raise TransactionAlreadyCommitted(first.app_id, first.batch_id, found)
        partly = [m for m in self.moves if m not in unmoved and m not in held]
        if partly:
            raise partly[0].moved(
                snapshot,
                read_version,
                f"another writer committed part of the batch up to {partly[0].batch_id}",
            )
        others = ", ".join(repr(m.app_id) for m in unmoved)
        raise held[0].moved(
            snapshot,
            read_version,
            f"another writer committed this batch's part up to {held[0].batch_id}, but "
            f"not that of {others}",
        )


@dataclass(frozen=True, slots=True)
class DataUnchangedSince:
    """No version after the one read changed the data (an overwrite replaces only rows it
    saw). Versions with ``data_change = false`` (handoff, compaction, clean) do not count."""

    operation: str = "overwrite"
    replan: bool = False
    """Raise :class:`RowsChangedError` (the operation reads again and retries by itself)."""

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        if snapshot.data_version > read_version:
            error = RowsChangedError if self.replan else CommitConflictError
            raise error(
                f"version {snapshot.version} of {snapshot.table_path!r} changed the table's data "
                f"(at version {snapshot.data_version}) after this {self.operation} read version "
                f"{read_version}; nothing was committed: read the table again and retry the "
                f"{self.operation} if it should still replace everything",
                read_version=read_version,
                conflicting_version=snapshot.data_version,
            )


@dataclass(frozen=True, slots=True)
class FileAppendable:
    """``file`` of segment ``segment_id`` still takes appends at ``start``: the segment is
    STREAMING (or, when the commit ``creates`` it, absent), and the file's committed length is
    ``start``. ``creates``: the commit adds the segment itself, so one a concurrent commit
    added must be ``adoptable`` (a STREAMING-format segment, and not for an overwrite)."""

    segment_id: str
    file: str
    start: int
    creates: bool = False
    overwrite: bool = False
    partition: tuple[Any, ...] | None = None
    """The partition the commit's rows belong to: a segment of another one is not theirs."""

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        seg = snapshot.segments.get(self.segment_id)
        if seg is None and not self.creates:
            raise SegmentNotWritableError(
                f"segment {self.segment_id!r} of {snapshot.table_path!r} no longer exists at "
                f"version {snapshot.version} (retired by a restore, an overwrite or a handoff, "
                "then removed by clean)",
                segment_id=self.segment_id,
                read_version=read_version,
                conflicting_version=snapshot.version,
            )
        if seg is None:
            return
        adoptable = (
            not self.overwrite and seg.format == "STREAMING" and seg.partition == self.partition
        )
        if seg.status != "STREAMING" or (self.creates and not adoptable):
            raise SegmentNotWritableError(
                f"segment {self.segment_id!r} of {snapshot.table_path!r} stopped taking appends "
                f"at version {snapshot.version} (status {seg.status})",
                segment_id=self.segment_id,
                read_version=read_version,
                conflicting_version=snapshot.version,
            )
        f = seg.files.get(self.file)
        committed = f.committed_length if f is not None else 0
        if committed != self.start:
            raise _conflict(
                f"version {snapshot.version} of {snapshot.table_path!r} appended to "
                f"{self.file!r}, which this writer owns (read at version {read_version}): two "
                "writers share a writer id; give each live writer its own",
                snapshot,
                read_version,
            )


@dataclass(frozen=True, slots=True)
class SegmentAsPlanned:
    """Segment ``segment_id`` is exactly as a plan found it: same status, same files with the
    same committed lengths (a compaction's input)."""

    segment_id: str
    status: str
    files: Mapping[str, int] = field(default_factory=dict)
    operation: str = "compaction"
    deletions: Mapping[str, int] = field(default_factory=dict)
    """``deletion_version`` of each file with deleted rows: a delete committed since would be
    lost by a compaction that read the rows before it (it must run again)."""

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        seg = snapshot.segments.get(self.segment_id)
        lengths = None if seg is None else {p: f.committed_length for p, f in seg.files.items()}
        if seg is None or (seg.status, lengths) != (self.status, dict(self.files)):
            raise _conflict(
                f"{self.operation} of {snapshot.table_path!r} planned at version "
                f"{read_version} lost its input: segment {self.segment_id!r} changed "
                f"at version {snapshot.version} (now {seg.status if seg else 'gone'}); "
                "nothing was committed, run it again",
                snapshot,
                read_version,
            )
        deletions = {p: f.deletion_version for p, f in seg.files.items() if f.deletion_version}
        if deletions != dict(self.deletions):
            raise RowsChangedError(
                f"{self.operation} of {snapshot.table_path!r} planned at version "
                f"{read_version} read segment {self.segment_id!r} before rows of it were "
                f"deleted (by version {snapshot.version}); nothing was committed: it must read "
                "them again",
                read_version=read_version,
                conflicting_version=snapshot.version,
            )


@dataclass(frozen=True, slots=True)
class DeletionsAsRead:
    """The rows a row-level change read are still there as it read them: each data file
    ``(segment id, path)`` is still live and no delete touched it since (its
    ``deletion_version`` is the one read). Appends and other files do not matter, so a
    delete never conflicts with a streaming append; it does with a delete of the same file
    and with a handoff or compaction that moved its rows (then it reads again)."""

    files: Mapping[tuple[str, str], int]
    operation: str = "delete"

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        for (sid, path), deletion_version in self.files.items():
            seg = snapshot.segments.get(sid)
            f = seg.files.get(path) if seg is not None else None
            if seg is None or not seg.is_live or f is None:
                why = f"segment {sid!r} is now {seg.status if seg else 'gone'}"
            elif f.deletion_version != deletion_version:
                why = f"rows of {path!r} were deleted at version {f.deletion_version}"
            else:
                continue
            raise RowsChangedError(
                f"{self.operation} of {snapshot.table_path!r} read version {read_version}, but "
                f"{why} (version {snapshot.version}); nothing was committed",
                read_version=read_version,
                conflicting_version=snapshot.version,
            )


@dataclass(frozen=True, slots=True)
class RowsUnchangedSince:
    """No commit after the one read changed rows it had to read first (a delete, update,
    merge, upsert, restore or overwrite: ``Snapshot.row_change_version``). Blind appends and
    maintenance do not count, so streaming ingestion never makes a row-level change retry;
    two row-level changes are serialized (Delta's WriteSerializable): the later one plans
    again on the newest version."""

    operation: str = "delete"

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        if snapshot.row_change_version > read_version:
            raise RowsChangedError(
                f"{self.operation} of {snapshot.table_path!r} read version {read_version}, but "
                f"version {snapshot.row_change_version} changed rows meanwhile; nothing was "
                "committed",
                read_version=read_version,
                conflicting_version=snapshot.row_change_version,
            )


@dataclass(frozen=True, slots=True)
class SegmentAbsent:
    """No segment ``segment_id`` exists yet (a compaction's output id)."""

    segment_id: str

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        if self.segment_id in snapshot.segments:
            raise _conflict(
                f"segment {self.segment_id!r} of {snapshot.table_path!r} was created at version "
                f"{snapshot.version} by another compaction (read at version {read_version})",
                snapshot,
                read_version,
            )


@dataclass(frozen=True, slots=True)
class SegmentStreaming:
    """Segment ``segment_id`` exists and is STREAMING."""

    segment_id: str

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        seg = snapshot.segments.get(self.segment_id)
        if seg is None or seg.status != "STREAMING":
            raise _conflict(
                f"segment {self.segment_id!r} of {snapshot.table_path!r} stopped streaming at "
                f"version {snapshot.version} (read at version {read_version})",
                snapshot,
                read_version,
            )


@dataclass(frozen=True, slots=True)
class ColumnsAsWritten:
    """The columns a commit's rows were written with are still the table's, under the same
    names (a widening of their type, or a column added since, lets the rows in): a writer
    whose schema predates a rename or a drop commits nothing."""

    metadata: TableMetadata

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        problems = schema_change_problems(self.metadata, snapshot.metadata)
        if problems:
            raise ColumnsMovedError(
                f"the rows of this commit to {snapshot.table_path!r} were written with a schema "
                f"older than the table's (read at version {read_version}, the table is at "
                f"version {snapshot.version}); nothing was committed: reopen the table (or "
                "restart the writer) and write them with the columns it has now",
                problems,
            )


@dataclass(frozen=True, slots=True)
class MetadataUnchanged:
    """The table's schema and properties are still ``metadata``."""

    metadata: TableMetadata

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        if snapshot.metadata != self.metadata:
            raise _conflict(
                f"the schema or properties of {snapshot.table_path!r} changed at version "
                f"{snapshot.version} while this change (read at version {read_version}) was made",
                snapshot,
                read_version,
            )
