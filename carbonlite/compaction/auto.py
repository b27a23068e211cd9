"""Auto compaction (Delta's auto compact): after a data commit, small streaming files converge.

A stream into a partitioned table on an object store adds, each micro-batch, a new file per
partition and task to that partition's STREAMING segment (on local disk a task appends to its
own file there, ``writer/partition_files.py``); so do batch writes. With the table property
``auto_compaction``, every data commit (``Table.append``/``overwrite``/row changes, and the
Spark sinks' ``driver.commit_parts``) is followed by :func:`auto_compact`:

1. each STREAMING segment holding more than ``auto_compaction_min_files`` files is closed
   (``STREAMING_FINISH``; the writers' next batch starts a new one);
2. exactly those segments are handed off, each into one sorted COLUMNAR segment;
3. a minor compaction merges SUCCESS segments by levels (``compaction_level_threshold``).

So a partition holds at most ``auto_compaction_min_files`` streaming files plus a few
compacted segments per level, and each row is rewritten once by the handoff and once per
level: work proportional to the rows written, spread over the commits that wrote them.
Every one of these commits has ``data_change = false``: a streaming reader never sees a row
twice. The data commit has happened before any of it runs, so nothing here can fail it: a
conflict with another writer (who closed or compacted the segment first) is logged and the
next commit tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from carbonlite.clock import now_ms
from carbonlite.compaction.commit import FinishStreamingCommit
from carbonlite.compaction.run import run_compaction, streaming_segments
from carbonlite.errors import CommitConflictError
from carbonlite.metadata import Log, Snapshot, commit
from carbonlite.properties import TableProperties

__all__ = ["AutoCompactionResult", "auto_compact", "crowded_streaming_segments"]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AutoCompactionResult:
    """What one auto compaction did."""

    closed: tuple[str, ...]
    """STREAMING segments it closed because they held too many files."""
    versions: tuple[int, ...]
    """The versions it committed (all with ``data_change = false``)."""


def crowded_streaming_segments(snapshot: Snapshot) -> tuple[str, ...]:
    """The STREAMING segments holding more than ``auto_compaction_min_files`` files."""
    limit = TableProperties(snapshot.properties).auto_compaction_min_files
    return streaming_segments(snapshot, more_files_than=limit)


def auto_compact(
    log: Log,
    snapshot: Snapshot,
    *,
    storage_options: Mapping[str, Any],
    writer_id: str | None = None,
) -> tuple[AutoCompactionResult, Snapshot]:
    """Close and hand off crowded STREAMING segments, then compact minor (module notes);
    does nothing unless the table property ``auto_compaction`` is on. Never raises
    :class:`CommitConflictError`: a lost race is logged and left to the next commit."""
    snapshot = log.update(snapshot)
    if not TableProperties(snapshot.properties).auto_compaction:
        return AutoCompactionResult((), ()), snapshot
    closed: tuple[str, ...] = ()
    versions: list[int] = []
    try:
        crowded = crowded_streaming_segments(snapshot)
        if crowded:
            pending = FinishStreamingCommit(crowded, started_ms=now_ms(), writer_id=writer_id)
            snapshot = commit(log, snapshot, pending)
            closed = crowded
            versions.append(snapshot.version)
        if any(s.status == "STREAMING_FINISH" for s in snapshot.live_segments()):
            handed, snapshot = run_compaction(
                log, snapshot, "handoff", storage_options=storage_options, writer_id=writer_id
            )
            versions.extend(handed.versions)
        merged, snapshot = run_compaction(
            log, snapshot, "minor", storage_options=storage_options, writer_id=writer_id
        )
        versions.extend(merged.versions)
    except CommitConflictError as exc:
        _logger.warning(
            "auto compaction of %s gave way to another writer (the next commit tries again): %s",
            log.uri,
            exc,
        )
        snapshot = log.update(snapshot)
    return AutoCompactionResult(closed, tuple(versions)), snapshot
