"""Time travel: the snapshot at one version of the table's history (docs/LOG.md, "Time travel").

A version below the history's floor is gone (``clean`` removed it, or is removing it), even
while some of its files linger, and a file at its number may be a fork: it is
:class:`VersionNotFoundError`. From the newest checkpoint at or above the floor and at or
below the version (found by probing where checkpoints were due, without listing) the versions
are replayed forward, each checked to be built on the one before; a look at the history after
the replay vouches for the version reached (``history.py``), and through the chain for every
version replayed on the way.
"""

from __future__ import annotations

from typing import Protocol

from carbonlite.errors import CorruptDataError, VersionNotFoundError
from carbonlite.metadata.actions import Action
from carbonlite.metadata.checkpoint_policy import RECENT_INTERVALS
from carbonlite.metadata.history import History, built_on
from carbonlite.metadata.snapshot import Snapshot
from carbonlite.properties import TableProperties
from carbonlite.storage import Storage

__all__ = ["LogFiles", "load_version"]


class LogFiles(Protocol):
    """What time travel reads of a log (``Log`` is one)."""

    @property
    def uri(self) -> str: ...

    @property
    def storage(self) -> Storage: ...

    def look(self) -> History: ...

    def version_path(self, version: int) -> str: ...

    def read_actions(self, version: int, snapshot: Snapshot | None) -> list[Action]: ...

    def try_read_checkpoint(self, version: int) -> Snapshot | None: ...

    def listing(self) -> _Listing: ...


class _Listing(Protocol):
    @property
    def versions(self) -> list[int]: ...

    @property
    def checkpoints(self) -> list[int]: ...


_PROBES = 4
"""Checkpoints probed below a version, of each kind, before time travel falls back to
version 0 or a listing."""


def load_version(log: LogFiles, version: int, latest: Snapshot | None = None) -> Snapshot:
    """The snapshot at ``version``; ``latest``: the newest snapshot the caller holds (a
    version past it is :class:`VersionNotFoundError`; it is returned as is)."""
    if version < 0:
        raise VersionNotFoundError(f"versions start at 0, got {version}")
    if latest is not None and version == latest.version:
        return latest
    if latest is not None and version > latest.version:
        raise VersionNotFoundError(
            f"table {log.uri!r} has no version {version}; the latest is {latest.version}"
        )
    history = log.look()
    _check_retained(log, version, history)
    start = _checkpoint_before(log, version, latest, history)
    if start is None and history.floor == 0:
        try:
            start = Snapshot.from_actions(log.uri, 0, log.read_actions(0, None))
        except FileNotFoundError:
            start = None
    if start is None:
        start = _listed_start(log, version, history)
    snapshot = start
    while snapshot.version < version:
        following = snapshot.version + 1
        try:
            actions = log.read_actions(following, snapshot)
        except FileNotFoundError:
            _check_retained(log, version, log.look())
            if log.storage.exists(log.version_path(following + 1)):
                raise CorruptDataError(
                    f"the log of {log.uri!r} is missing version {following} (later versions "
                    f"exist), so version {version} cannot be rebuilt; restore the file from "
                    "a backup or copy of the table",
                    path=log.storage.uri(log.version_path(following)),
                ) from None
            raise VersionNotFoundError(
                f"table {log.uri!r} has no version {version}; the latest is {snapshot.version}"
            ) from None
        if not built_on(snapshot.commit_id, actions):
            _check_retained(log, version, log.look())
            raise CorruptDataError(
                f"version {following} of {log.uri!r} was not built on version {snapshot.version}"
                ", which the history holds: a version file was replaced. Restore the log from a "
                "backup or copy of the table",
                path=log.storage.uri(log.version_path(following)),
            )
        snapshot = snapshot.apply(following, actions)
    _check_retained(log, version, log.look())
    return snapshot


def _check_retained(log: LogFiles, version: int, history: History) -> None:
    if not history.holds(version):
        raise VersionNotFoundError(
            f"version {version} of {log.uri!r} is no longer in the log (removed by clean); the "
            f"earliest version still there is {history.floor}"
        )


def _checkpoint_before(
    log: LogFiles, version: int, latest: Snapshot | None, history: History
) -> Snapshot | None:
    """The newest readable checkpoint at or before ``version`` and at or above the floor among
    the pointer's, the versions due one by entries just below it, and the few multiples of the
    checkpoint interval below it (None if none of them is). Where checkpoints were due by
    entries is in ``recent_checkpoints``: of ``latest`` for versions of its last two
    intervals, else of the checkpoint at the first multiple of the interval after
    ``version``."""
    props = latest.properties if latest is not None else {}
    interval = TableProperties(props).checkpoint_interval
    multiples = [version - version % interval - k * interval for k in range(_PROBES)]
    candidates = [*multiples, *_due_by_entries(log, version, interval, latest)]
    if history.checkpoint is not None and history.checkpoint <= version:
        candidates.append(history.checkpoint)
    for c in sorted({c for c in candidates if c > 0 and history.holds(c)}, reverse=True):
        checkpoint = log.try_read_checkpoint(c)
        if checkpoint is not None:
            return checkpoint
    return None


def _due_by_entries(
    log: LogFiles, version: int, interval: int, latest: Snapshot | None
) -> list[int]:
    """The newest few versions at or before ``version`` and after the multiple of the
    interval below it at which a checkpoint was due by entries. ``latest`` lists them when
    it is at most two intervals past that multiple; else the checkpoint of either of the
    next two multiples does (one or two checkpoint documents read)."""
    floor = version - version % interval
    recent: tuple[int, ...] = ()
    if latest is not None and latest.version - RECENT_INTERVALS * interval <= floor:
        recent = latest.recent_checkpoints
    else:
        for after in range(floor + interval, floor + RECENT_INTERVALS * interval + 1, interval):
            if latest is not None and after > latest.version:
                break
            known = log.try_read_checkpoint(after)
            if known is not None:
                recent = known.recent_checkpoints
                break
    return [v for v in recent if floor < v <= version][-_PROBES:]


def _listed_start(log: LogFiles, version: int, history: History) -> Snapshot:
    """Where to replay ``version`` from when neither a probed checkpoint nor version 0 is
    there: list the log (the slow path, for missing checkpoints and clear errors)."""
    listing = log.listing()
    for c in reversed([c for c in listing.checkpoints if history.holds(c) and c <= version]):
        start = log.try_read_checkpoint(c)
        if start is not None:
            return start
    earliest = min(
        (v for v in listing.checkpoints + listing.versions if history.holds(v)), default=None
    )
    raise VersionNotFoundError(
        f"version {version} of {log.uri!r} is no longer in the log (removed by clean, "
        f"or its checkpoint is damaged); the earliest version still there is {earliest}"
    )
