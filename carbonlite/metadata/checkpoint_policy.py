"""When a checkpoint is due: the one policy writers, readers and time travel share (docs/LOG.md).

Opening a table reads its newest checkpoint, then replays every version after it: a read per
version and a decode per entry the versions hold. So a checkpoint is due at version ``V`` when

- ``V`` is a multiple of ``checkpoint_interval`` (the rule of every release so far, so a
  reader of any release finds these), or
- the *log entries* of the versions since the last version a checkpoint was due at, ``V``
  included, reach ``checkpoint_max_entries`` plus :data:`STATE_ENTRIES` per segment and file
  of the state at ``V``: a checkpoint costs more to read and to write the more segments and
  files its document lists, so a bigger state waits for proportionally more entries, and
  opening past a checkpoint stays within a few times opening at one whatever the table holds.

:func:`log_entries` says what a version weighs: :data:`VERSION_ENTRIES` for the version itself
(a read, a seal, a parse), one per action, and one per blocklet entry, deletion vector and
removed file it lists. A version that is due resets the count, whether or not its checkpoint
was written, so where checkpoints are due is a pure function of the log: every snapshot
carries the count (``Snapshot.replay_entries``) and the versions at which one was due by
entries lately (``Snapshot.recent_checkpoints``), checkpoints record both, and a reader
replaying the log knows where a writer put a checkpoint without listing the log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from carbonlite.metadata.actions import Action, BlockletsAppended, FilesRemoved, RowsDeleted
from carbonlite.properties import TableProperties

__all__ = [
    "RECENT_INTERVALS",
    "STATE_ENTRIES",
    "VERSION_ENTRIES",
    "CheckpointPolicy",
    "Counted",
    "ReplayProgress",
    "checkpoint_due",
    "log_entries",
    "replay_progress",
]

VERSION_ENTRIES = 8
"""What a version weighs beyond its actions, in entries: reading and unsealing a small version
file costs about what decoding eight blocklet entries does (``benchmarks/bench_open.py``)."""

STATE_ENTRIES = 2
"""Entries the bound grows by per segment and per file of the state: decoding a segment or a
file from a checkpoint document costs one or two entries' worth (``bench_open.py``)."""

RECENT_INTERVALS = 2
"""``recent_checkpoints`` keeps the versions due by entries within this many intervals, so
the checkpoint at any multiple of the interval lists those of the interval before it."""


@dataclass(frozen=True, slots=True)
class CheckpointPolicy:
    """The two bounds of a table (its properties, defaults filled in)."""

    interval: int
    max_entries: int

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> CheckpointPolicy:
        last = _last_parsed
        if last is not None and last[0] is properties:
            return last[1]  # asked for every version replayed: parse each mapping once
        props = TableProperties(properties)
        policy = cls(props.checkpoint_interval, props.checkpoint_max_entries)
        _remember(properties, policy)
        return policy

    def due(self, version: int, entries: int, state_size: int) -> bool:
        """Whether version ``version``, ``entries`` into the count, with ``state_size``
        segments and files, is due a checkpoint (never version 0: ``create_table`` writes
        it, with nothing to replay)."""
        return version > 0 and (
            version % self.interval == 0 or entries >= self.max_entries + STATE_ENTRIES * state_size
        )


_last_parsed: tuple[Mapping[str, str], CheckpointPolicy] | None = None


def _remember(properties: Mapping[str, str], policy: CheckpointPolicy) -> None:
    global _last_parsed
    _last_parsed = (properties, policy)  # holds the mapping: its identity stays its own


def log_entries(actions: Iterable[Action]) -> int:
    """What replaying one version weighs, in entries."""
    n = VERSION_ENTRIES
    for a in actions:
        n += 1
        if isinstance(a, BlockletsAppended):
            n += len(a.blocklets)
        elif isinstance(a, RowsDeleted):
            n += len(a.vectors)
        elif isinstance(a, FilesRemoved):
            n += len(a.files)
    return n


class Counted(Protocol):
    """What the policy reads of a version's state (a ``Snapshot``)."""

    @property
    def version(self) -> int: ...
    @property
    def properties(self) -> Mapping[str, str]: ...
    @property
    def replay_entries(self) -> int: ...
    @property
    def recent_checkpoints(self) -> tuple[int, ...]: ...
    @property
    def num_files(self) -> int: ...
    @property
    def segments(self) -> Mapping[str, object]: ...


def _state_size(snapshot: Counted) -> int:
    return len(snapshot.segments) + snapshot.num_files


def checkpoint_due(snapshot: Counted) -> bool:
    """Whether the version of ``snapshot`` is due a checkpoint."""
    policy = CheckpointPolicy.of(snapshot.properties)
    return policy.due(snapshot.version, snapshot.replay_entries, _state_size(snapshot))


@dataclass(frozen=True, slots=True)
class ReplayProgress:
    """The policy's count after one more version."""

    replay_entries: int
    recent_checkpoints: tuple[int, ...]


def replay_progress(
    before: Counted,
    version: int,
    actions: Iterable[Action],
    properties: Mapping[str, str],
    state_size: int,
) -> ReplayProgress:
    """The count at ``version`` (``actions``, leaving ``properties`` in force and a state of
    ``state_size`` segments and files), one version after ``before``: reset when ``before``
    was due, then this version's entries added."""
    entries = 0 if checkpoint_due(before) else before.replay_entries
    entries += log_entries(actions)
    policy = CheckpointPolicy.of(properties)
    recent = before.recent_checkpoints
    if version % policy.interval and policy.due(version, entries, state_size):
        recent = (*recent, version)
    oldest = version - RECENT_INTERVALS * policy.interval
    if recent and recent[0] <= oldest:
        recent = tuple(v for v in recent if v > oldest)
    return ReplayProgress(entries, recent)
