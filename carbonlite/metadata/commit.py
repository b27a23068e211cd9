"""Optimistic concurrency: one loop commits every kind of change (docs/LOG.md).

A commit is data (pyiceberg's model): a :class:`PendingCommit` states its requirements
(``metadata/requirements.py``) and builds its actions on a given snapshot. ``commit()``
checks the requirements against the snapshot it starts from, creates the next version with
``Log.try_write``, and if another writer got there first replays every winning version,
checking the requirements after each: a broken one raises (:class:`CommitConflictError`,
naming both versions, or :class:`TransactionAlreadyCommitted`); otherwise the actions are
rebuilt on the new snapshot and the next version is tried, with bounded retries and jittered
backoff. The rule for writes whose outcome is uncertain lives in ``Log.try_write``; where a
created version stands in the table's history, in ``metadata/history.py`` (asked through
``Log.placement``): both here, for every kind of commit alike. A version this loop created is
never deleted by it. Once placed, a commit is settled; its checkpoint and the pointer's move
follow as post-commit steps (``post_commit.py``) that cannot change its outcome.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from carbonlite.errors import CommitConflictError, CommitStateUnknownError
from carbonlite.metadata.actions import Action, CommitInfo
from carbonlite.metadata.log import Log
from carbonlite.metadata.requirements import (
    Requirement,
    SegmentNotWritableError,
    TransactionAlreadyCommitted,
    check_requirements,
)
from carbonlite.metadata.snapshot import Snapshot
from carbonlite.seams import reach

__all__ = [
    "MAX_COMMIT_ATTEMPTS",
    "PendingCommit",
    "SegmentNotWritableError",
    "TransactionAlreadyCommitted",
    "backoff",
    "commit",
]

MAX_COMMIT_ATTEMPTS = 60
_logger = logging.getLogger(__name__)


class PendingCommit(Protocol):
    """A commit as data: what it requires of the table, and the actions that update it."""

    @property
    def requirements(self) -> Sequence[Requirement]:
        """Preconditions, checked against every state the commit may land on."""

    def actions(self, snapshot: Snapshot, read_version: int) -> list[Action]:
        """The actions to commit on top of ``snapshot`` (rebased if needed); ``read_version``
        is the version the commit was planned against (recorded in its commit info)."""


def backoff(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 1`` after losing a race (jittered, capped)."""
    return min(0.25, 0.001 * (2 ** min(attempt, 8))) * random.uniform(0.5, 1.5)


def _stamped(actions: list[Action], commit_id: str, after: Snapshot) -> list[Action]:
    """``actions`` with ``commit_id`` in their closing :class:`CommitInfo`, and its timestamp
    raised to 1 ms after the version it lands on when this writer's clock is behind, so
    commit timestamps increase with versions (time travel by timestamp relies on it)."""
    if not actions or not isinstance(actions[-1], CommitInfo):
        raise TypeError("a commit's actions must end with its CommitInfo")
    info = actions[-1]
    timestamp = max(info.timestamp, after.timestamp + 1)
    stamped = replace(
        info, commit_id=commit_id, timestamp=timestamp, parent_commit_id=after.commit_id
    )
    return [*actions[:-1], stamped]


def commit(
    log: Log, snapshot: Snapshot, pending: PendingCommit, *, read_version: int | None = None
) -> Snapshot:
    """Commit ``pending`` on top of ``snapshot``; return the snapshot of the committed version.

    ``read_version`` is the version the commit was planned on (default: ``snapshot``'s). When
    ``snapshot`` is newer than that (a committer that refreshed after planning), ``pending``
    is checked against it first, exactly as against a winner of a race.

    Every attempt carries the same unique commit id, so a version whose write reported failure
    but landed is recognised as this commit (see :meth:`Log.try_write`); when that cannot be
    told, :class:`CommitStateUnknownError` and nothing is undone. A version that lands where
    ``clean`` had removed the log (a writer older than the log retention: a fork, told by the
    chain of commit ids) is left for ``clean``, and the commit is checked and retried on the
    newest state; when the chain cannot tell, :class:`CommitStateUnknownError`.
    """
    if read_version is None:
        read_version = snapshot.version
    commit_id = uuid.uuid4().hex
    check_requirements(pending.requirements, snapshot, read_version)
    for attempt in range(MAX_COMMIT_ATTEMPTS):
        actions = _stamped(pending.actions(snapshot, read_version), commit_id, snapshot)
        version = snapshot.version + 1
        # Applying first validates the actions against the state they claim to change.
        committed = snapshot.apply(version, actions)
        reach("commit.before_put")
        if log.try_write(version, actions, snapshot):
            reach("commit.after_put")
            try:
                placement = log.placement(version, commit_id)
            except OSError as exc:  # the version is there: its fate is not ours to guess
                raise _unknown_placement(log, version, commit_id, exc) from exc
            if placement == "committed":
                # settled: what follows (its checkpoint, the pointer) cannot change that
                log.remember(version, actions)
                return log.post_commit.after(committed)
            if placement == "unknown":
                raise _unknown_placement(log, version, commit_id)
            _leave_fork(log, version)
            snapshot = log.load_latest()
            check_requirements(pending.requirements, snapshot, read_version)
            continue
        # Back off first, then catch up: a snapshot that went stale during the sleep would lose
        # to any writer committing more often than the backoff, every time.
        time.sleep(backoff(attempt))
        for winner in log.advance(snapshot):
            check_requirements(pending.requirements, winner, read_version)
            snapshot = winner
    raise CommitConflictError(
        f"could not commit to {log.uri!r} after {MAX_COMMIT_ATTEMPTS} attempts: other writers "
        f"committed every version from {read_version + 1} to {snapshot.version} first; "
        "retry later or reduce the number of concurrent writers",
        read_version=read_version,
        conflicting_version=snapshot.version,
    )


def _leave_fork(log: Log, version: int) -> None:
    """Note a version this commit created where ``clean`` had removed the log. It is left in
    place (a version is never deleted by its writer: another stale actor may have read it); no
    reader of the retained log reaches it, and the next ``clean`` removes it."""
    _logger.warning(
        "version %d of %s landed where clean had removed the log (this writer's snapshot was "
        "older than the log retention); it is left for clean, and the commit is retried on the "
        "newest version",
        version,
        log.uri,
    )


def _unknown_placement(
    log: Log, version: int, commit_id: str, error: OSError | None = None
) -> CommitStateUnknownError:
    why = (
        f"reading the log to tell failed ({error})"
        if error is not None
        else "clean removed the log around it while the commit ran (the log retention is "
        "shorter than this commit took), or a version after it was written by an older "
        "CarbonLite that records no parent"
    )
    return CommitStateUnknownError(
        f"version {version} of {log.uri!r} was created by this commit, but whether it is in the "
        f"table's history cannot be told: {why}. Nothing this commit wrote was "
        f"deleted; check `history` (a version whose commitInfo.commit_id is {commit_id!r} is "
        "this commit) before retrying, and run `recover` once the lease has expired",
        version=version,
        commit_id=commit_id,
    )
