"""Checks of the values users pass to the public API, one place for each kind of value.

Every check runs before anything is read or written and raises :class:`InvalidOptionError`
(a :class:`CarbonLiteError`) saying what was expected, what was given and how to fix it.
"""

from __future__ import annotations

import datetime
import math
import numbers
import os
import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from carbonlite.errors import InvalidOptionError
from carbonlite.metadata import Log, TxnMarker
from carbonlite.names import check_writer_id
from carbonlite.properties import parse_duration
from carbonlite.storage import Storage

__all__ = [
    "MAX_MARKER",
    "SchemaMode",
    "VersionLike",
    "callback_arg",
    "check_seconds",
    "columns_arg",
    "duration_seconds_of",
    "file_in_the_way",
    "flag_arg",
    "names_arg",
    "schema_mode_arg",
    "storage_options_arg",
    "table_around",
    "timestamp_ms_arg",
    "txn_arg",
    "version_arg",
    "writer_id_arg",
]


def txn_arg(txn: tuple[str, int] | None) -> TxnMarker | None:
    """A transaction ``(app_id, batch_id)`` a user gave, as its log marker (None: none)."""
    if txn is None:
        return None
    try:
        app_id, batch_id = _pair(txn)
    except (TypeError, ValueError):
        raise InvalidOptionError(f"txn must be (app_id, batch_id), got {txn!r}") from None
    if not isinstance(app_id, str) or not app_id or not _marker_value(batch_id):
        raise InvalidOptionError(
            f"txn must be (non-empty app_id string, batch_id integer >= 0), got {txn!r}; a "
            f"batch_id is at most {MAX_MARKER} (a 64-bit long, as Spark reads it)"
        )
    return TxnMarker(app_id, batch_id)


MAX_MARKER = 2**63 - 1
"""The largest batch id or marker value: the log's readers on the JVM (Spark) read them as a
``long``."""


def _marker_value(value: object) -> bool:
    """Whether ``value`` can be a batch id or marker value: a whole number 0..MAX_MARKER."""
    return _whole(value) and 0 <= value <= MAX_MARKER  # type: ignore[operator]


def markers_arg(
    markers: Mapping[str, tuple[int | None, int]] | None,
) -> dict[str, tuple[int | None, int]]:
    """Compare-and-set markers a user gave, ``{name: (read, new)}`` (empty: none)."""
    if markers is None:
        return {}
    if not isinstance(markers, Mapping):
        raise InvalidOptionError(
            f"markers must be a mapping of name to (read, new), not {type(markers).__name__}"
        )
    out: dict[str, tuple[int | None, int]] = {}
    for name, move in markers.items():
        try:
            read, new = _pair(move)
        except (TypeError, ValueError):
            raise InvalidOptionError(
                f"marker {name!r} must be (read, new), the value read (None when absent) and "
                f"the value to commit, not {move!r}"
            ) from None
        if not isinstance(name, str) or not name:
            raise InvalidOptionError(f"a marker's name is a non-empty string, not {name!r}")
        if not _marker_value(new) or (
            read is not None and (not _marker_value(read) or new <= read)
        ):
            raise InvalidOptionError(
                f"marker {name!r} moves from {read!r} to {new!r}: both are whole numbers from 0 "
                f"to {MAX_MARKER} (the read value None when the marker is absent) and a marker "
                "only moves forward"
            )
        out[name] = (read, new)
    return out


def _pair(value: object) -> tuple[Any, Any]:
    """The two items of a tuple or list (a set, a dict or a string has no order to trust);
    TypeError or ValueError otherwise."""
    if not isinstance(value, (tuple, list)):
        raise TypeError(type(value).__name__)
    first, second = value
    return first, second


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def version_arg(version: object, *, what: str = "version") -> int:
    """A table version given by a user: an integer (not a bool, a float or a digit string)."""
    if isinstance(version, bool) or not isinstance(version, numbers.Integral):
        raise InvalidOptionError(
            f"{what} must be an integer table version such as 0 or 12 (or a datetime), not "
            f"{type(version).__name__} {version!r} (history() lists the versions)"
        )
    return int(version)


SchemaMode = Literal["strict", "merge"]

VersionLike = int | datetime.datetime | str
"""A table version, or a point in time (a ``datetime``, or an ISO 8601 string) meaning the
latest version committed at or before it."""


def schema_mode_arg(mode: object) -> SchemaMode:
    if mode == "strict" or mode == "merge":
        return mode
    raise InvalidOptionError(
        f"schema_mode must be 'strict' (the data must fit the table's columns) or 'merge' (new "
        f"columns of the data are added to the table), not {mode!r}"
    )


def timestamp_ms_arg(when: object, *, what: str = "version") -> int | None:
    """Milliseconds since the epoch when ``when`` is a point in time (a ``datetime``, naive
    ones read as UTC, or an ISO 8601 string); None when it is not one (a version number)."""
    if isinstance(when, str):
        try:
            when = datetime.datetime.fromisoformat(when.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidOptionError(
                f"{what} must be an integer table version such as 0 or 12, or a datetime or ISO "
                f"8601 timestamp such as '2026-11-22T18:00:00Z', not str {when!r}"
            ) from None
    if isinstance(when, datetime.date) and not isinstance(when, datetime.datetime):
        raise InvalidOptionError(
            f"{what} must be a version or a datetime, not the date {when!r}: give a datetime "
            "such as datetime.datetime(2026, 11, 22, tzinfo=datetime.timezone.utc)"
        )
    if not isinstance(when, datetime.datetime):
        return None
    try:
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        return math.floor(when.timestamp() * 1000)
    except (ValueError, OverflowError, OSError):  # pandas' NaT, a date beyond the epoch's reach
        raise InvalidOptionError(
            f"{what} must be a version or a point in time, and {when!r} is none: give a version "
            "number or a datetime such as datetime.datetime(2026, 11, 22, tzinfo=datetime."
            "timezone.utc)"
        ) from None


def flag_arg(value: object, *, what: str) -> bool:
    """A yes/no option: only True or False (a string such as "false" would count as yes)."""
    if not isinstance(value, bool):
        raise InvalidOptionError(
            f"{what} must be True or False, not {type(value).__name__} {value!r}"
        )
    return value


def names_arg(value: object, *, what: str, example: str, one_string: bool) -> tuple[Any, ...]:
    """A list of names a user gave (columns, partition fields) as a tuple: None means none,
    and a lone string the one name it is when ``one_string``. The names themselves are
    checked where their meaning is known (against the schema)."""
    if value is None:
        return ()
    if isinstance(value, str) and one_string:
        return (value,)
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return tuple(value)
    raise InvalidOptionError(
        f"{what} must be a list of names such as {example}, not {type(value).__name__} {value!r}"
    )


def columns_arg(columns: object) -> list[str] | None:
    """The columns a read projects: None (every one), a name, or a list of names (checked
    against the schema by the planner)."""
    if columns is None:
        return None
    return list(names_arg(columns, what="columns", example="['id', 'ts']", one_string=True))


_Callback = TypeVar("_Callback", bound=Callable[..., Any])


def callback_arg(value: _Callback | None, *, what: str) -> _Callback | None:
    """A function a user passes (``progress``, ``executor``), or None: anything else would
    fail deep inside the operation (or, with nothing to do, never be noticed)."""
    if value is not None and not callable(value):
        raise InvalidOptionError(
            f"{what} must be a function (or None), not {type(value).__name__} {value!r}"
        )
    return value


def writer_id_arg(writer_id: object) -> str | None:
    return None if writer_id is None else check_writer_id(writer_id)


def storage_options_arg(storage_options: object) -> dict[str, Any] | None:
    if storage_options is None:
        return None
    if not isinstance(storage_options, Mapping):
        raise InvalidOptionError(
            "storage_options must be a mapping such as {'endpoint_url': 'http://...'}, not "
            f"{type(storage_options).__name__} {storage_options!r}"
        )
    return dict(storage_options)


def file_in_the_way(storage: Storage, root: str) -> str | None:
    """On a local disk, a plain file at ``root`` or at one of its parent directories, where no
    table can be: its path, or None. (Object stores have no directories: an object named like
    the table's prefix is no obstacle, and a bucket root is not a file.)"""
    if storage.protocol != "file":
        return None
    candidates = [root]
    parent = os.path.dirname(root)
    while parent not in candidates:
        candidates.append(parent)
        parent = os.path.dirname(parent)
    return next((storage.uri(c) for c in candidates if storage.exists(c)), None)


def table_around(storage: Storage, root: str) -> str | None:
    """The URI of a table that ``root`` lies inside (in its directory, at any depth), or
    None. No table may go there: a table's directory is its own (``recover`` deletes every
    file under its ``segments/`` that its log does not name, as a crashed writer's orphan)."""
    parent = posixpath.dirname(root.rstrip("/"))
    seen = {root}
    while parent and parent not in seen:
        seen.add(parent)
        uri = storage.uri(parent)
        if Log(storage, parent, uri).exists():
            return uri
        parent = posixpath.dirname(parent)
    return None


def check_seconds(seconds: object, *, what: str) -> float:
    """``seconds`` if it is a duration CarbonLite can use: a finite number, 0 or more. The
    one check for every duration (``retention``, ``min_age``); :class:`InvalidOptionError`
    otherwise."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise InvalidOptionError(
            f"{what} must be a number of seconds, not {type(seconds).__name__} {seconds!r}"
        )
    try:
        seconds = float(seconds)
    except OverflowError:  # an integer (or a fraction) beyond any float
        shown = "a number beyond the range of a float"
    else:
        shown = repr(seconds)
    if not isinstance(seconds, float) or math.isnan(seconds) or math.isinf(seconds):
        raise InvalidOptionError(
            f"{what} must be a finite number of seconds, got {shown}; give a duration such "
            "as '7d', '12h' or 3600"
        )
    if seconds < 0:
        raise InvalidOptionError(
            f"{what} must not be negative, got {seconds:g} s; give a duration such as '7d', "
            "'12h' or 3600 (0 means no wait)"
        )
    return seconds


def duration_seconds_of(value: object, *, what: str) -> float | None:
    """``"7d"``, ``3600``, a ``timedelta`` or None (the default) as seconds, checked with
    :func:`check_seconds`; anything else is an :class:`InvalidOptionError` naming ``what``."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        return check_seconds(value.total_seconds(), what=what)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return check_seconds(value, what=what)
    if isinstance(value, str):
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            raise InvalidOptionError(f"{what}: {exc}") from None
        return check_seconds(seconds, what=what)
    raise InvalidOptionError(
        f"{what} must be a duration like '7d', seconds, or a timedelta, not {value!r}"
    )
