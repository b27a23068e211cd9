"""The transaction log: actions, snapshots, checkpoints and the commit protocol (docs/LOG.md)."""

from __future__ import annotations

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
from carbonlite.metadata.commit import PendingCommit, commit
from carbonlite.metadata.log import Log
from carbonlite.metadata.requirements import (
    DataUnchangedSince,
    FileAppendable,
    MetadataUnchanged,
    Requirement,
    SegmentAbsent,
    SegmentAsPlanned,
    SegmentNotWritableError,
    SegmentStreaming,
    TransactionAlreadyCommitted,
    TxnNotCommitted,
    check_requirements,
)
from carbonlite.metadata.snapshot import FileState, SegmentState, Snapshot

__all__ = [
    "LIVE_STATUSES",
    "LOG_FORMAT_VERSION",
    "Action",
    "BlockletEntry",
    "BlockletsAppended",
    "CommitInfo",
    "DataUnchangedSince",
    "FileAppendable",
    "FileState",
    "FilesRemoved",
    "Log",
    "MetadataUnchanged",
    "PendingCommit",
    "Requirement",
    "SegmentAbsent",
    "SegmentAdded",
    "SegmentAsPlanned",
    "SegmentFormat",
    "SegmentNotWritableError",
    "SegmentState",
    "SegmentStatus",
    "SegmentStatusChanged",
    "SegmentStreaming",
    "Snapshot",
    "TableMetadata",
    "TransactionAlreadyCommitted",
    "TxnMarker",
    "TxnNotCommitted",
    "check_requirements",
    "commit",
]
