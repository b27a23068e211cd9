"""Versions by timestamp: the latest version committed at or before a point in time (time
travel), and the first one committed at or after it (where a stream starts).

Commit timestamps are the ``commitInfo`` timestamps, which the commit loop keeps strictly
increasing (a writer whose clock runs behind stamps its commit 1 ms after the version it
lands on; Delta's in-commit timestamps), so versions are ordered by time and a binary search
over the log finds the version in about log2(versions) reads, without listing the log.
"""

from __future__ import annotations

import datetime

from carbonlite.errors import VersionNotFoundError
from carbonlite.metadata.log import Log
from carbonlite.metadata.serde import decode_commit_info
from carbonlite.metadata.snapshot import Snapshot

__all__ = ["commit_timestamp", "earliest_version", "first_version_at_or_after", "version_at"]


def commit_timestamp(log: Log, version: int) -> int | None:
    """The commit timestamp (ms) of ``version``; None when ``clean`` removed it."""
    path = log.version_path(version)
    try:
        data = log.storage.read(path)
    except FileNotFoundError:
        return None
    return decode_commit_info(data, where=log.storage.uri(path)).timestamp


def _iso(ms: int) -> str:
    try:
        when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    except (ValueError, OverflowError, OSError):  # before year 1 or after 9999
        return f"{ms} ms since the epoch"
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def earliest_version(log: Log, latest: int) -> int:
    """The oldest version of the retained history: its floor (``history.py``)."""
    return min(log.look().floor, latest)


def version_at(log: Log, latest: Snapshot, when_ms: int) -> int:
    """The latest version committed at or before ``when_ms`` (ms since the epoch).

    Raises :class:`VersionNotFoundError` when every version still in the log is newer."""
    if latest.timestamp <= when_ms:
        return latest.version
    lo = earliest_version(log, latest.version)
    first = commit_timestamp(log, lo)
    if first is None or first > when_ms:
        raise VersionNotFoundError(
            f"table {log.uri!r} has no version committed at or before {_iso(when_ms)}: the "
            f"oldest version in its log is {lo}"
            + ("" if first is None else f", committed at {_iso(first)}")
        )
    hi = latest.version  # invariant: ts(lo) <= when < ts(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ts = commit_timestamp(log, mid)
        if (
            ts is None or ts <= when_ms
        ):  # removed by a clean running meanwhile: only newer ones are left
            lo = mid
        else:
            hi = mid
    return lo


def first_version_at_or_after(log: Log, latest: Snapshot, when_ms: int) -> int:
    """The oldest version still in the log that was committed at or after ``when_ms``.

    Raises :class:`VersionNotFoundError` when every version was committed before it."""
    if latest.timestamp < when_ms:
        raise VersionNotFoundError(
            f"table {log.uri!r} has no version committed at or after {_iso(when_ms)}: the latest, "
            f"{latest.version}, was committed at {_iso(latest.timestamp)}"
        )
    lo = earliest_version(log, latest.version)
    first = commit_timestamp(log, lo)
    if first is None or first >= when_ms:
        return lo
    before = version_at(log, latest, when_ms)  # committed at or before when_ms
    return before if commit_timestamp(log, before) == when_ms else before + 1
