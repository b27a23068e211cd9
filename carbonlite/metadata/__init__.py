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
from carbonlite.metadata.commit import (
    PendingCommit,
    SegmentNotWritableError,
    TransactionAlreadyCommitted,
    commit,
)
from carbonlite.metadata.log import Log
from carbonlite.metadata.snapshot import FileState, SegmentState, Snapshot

__all__ = [
    "LIVE_STATUSES",
    "LOG_FORMAT_VERSION",
    "Action",
    "BlockletEntry",
    "BlockletsAppended",
    "CommitInfo",
    "FileState",
    "FilesRemoved",
    "Log",
    "PendingCommit",
    "SegmentAdded",
    "SegmentFormat",
    "SegmentNotWritableError",
    "SegmentState",
    "SegmentStatus",
    "SegmentStatusChanged",
    "Snapshot",
    "TableMetadata",
    "TransactionAlreadyCommitted",
    "TxnMarker",
    "commit",
]
