"""Names that become parts of storage paths: one check for every one of them.

A writer id becomes ``segments/<segment>/<writer id>-<n>.cblt`` and
``_carbonlite/locks/<writer id>.lock``; a segment id becomes ``segments/<segment id>/``. A name
must therefore be exactly one path component: not empty, not ``.`` or ``..``, without ``/``,
``\\`` or control characters (NUL included). Names users give are refused with
:class:`InvalidOptionError` before anything is written (:func:`check_name`).

Paths read back from the log (data files, segment ids, a checkpoint's blocklet index) go
through the same rules (:func:`check_log_path`, :func:`check_log_name`): a damaged or hostile
log that would make a reader or ``clean`` touch a file outside the table is refused with
:class:`CorruptDataError` before any such file is opened or deleted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

import pyarrow as pa

from carbonlite.errors import CorruptDataError, InvalidOptionError

__all__ = [
    "MAX_NAME_BYTES",
    "check_checkpoint_names",
    "check_log_name",
    "check_log_path",
    "check_name",
    "check_writer_id",
    "column_name_problems",
    "name_problem",
    "path_problem",
    "table_location",
]

MAX_NAME_BYTES = 200
"""Longest user-given name (UTF-8 bytes): file systems allow 255 per path component, and a
name gets a prefix or suffix such as ``-<n>.cblt`` or ``.lock``."""

_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f/\\]")
_RULES = (
    "a name becomes part of file paths, so it must be one path component: not empty, "
    "not '.' or '..', without '/', '\\' or control characters"
)


def _describe(char: str) -> str:
    if char in "/\\":
        return f"contains {char!r}"
    return f"contains the control character {char!r}"


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be one path component (a phrase), or None when it can."""
    if not isinstance(name, str):
        return f"is of type {type(name).__name__}, not a string"
    if not name:
        return "is empty"
    if name in (".", ".."):
        return "is a relative directory reference"
    bad = _FORBIDDEN.search(name)
    if bad is not None:
        return _describe(bad.group())
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text (it holds a lone surrogate)"
    return None


def check_name(name: object, *, what: str, fix: str) -> str:
    """``name`` if it can be one path component; else :class:`InvalidOptionError` saying
    ``what`` the name is (e.g. ``"writer_id"``), what is wrong and ``fix`` (how to do it right)."""
    problem = name_problem(name)
    if problem is None and isinstance(name, str):
        size = len(name.encode("utf-8"))
        if size <= MAX_NAME_BYTES:
            return name
        problem = f"is {size} bytes long (UTF-8), more than {MAX_NAME_BYTES}"
    raise InvalidOptionError(f"{what} {name!r} {problem}: {_RULES}; {fix}")


def check_writer_id(writer_id: object) -> str:
    """A writer id a user gave (it names the writer's stream files and lock)."""
    return check_name(
        writer_id,
        what="writer_id",
        fix="give a plain name such as 'ingest-1', or none for a random one",
    )


def table_location(path: object) -> str:
    """The table path or URI a user gave (``str`` or ``os.PathLike``) as a string, refused with
    :class:`InvalidOptionError` when it is empty or holds control characters (NUL included).
    Unlike a name it may have many components, ``..`` included: it is the user's own choice
    of place, and everything CarbonLite writes goes below it."""
    try:
        text = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        text = None
    if not isinstance(text, str):
        raise InvalidOptionError(
            f"a table path must be a string or path-like object such as '/data/events' or "
            f"'s3://bucket/events', not {type(path).__name__} {path!r}"
        )
    if not text:
        raise InvalidOptionError(
            f"the table path {text!r} is empty; give the table's directory or URI, such as "
            "'/data/events' or 's3://bucket/events' ('.' for the current directory)"
        )
    bad = re.search(r"[\x00-\x1f\x7f]", text)
    if bad is not None:
        raise InvalidOptionError(
            f"the table path {text!r} contains the control character {bad.group()!r}; "
            "give a path without control characters"
        )
    return text


def column_name_problems(fields: Iterable[pa.Field], parent: str | None = None) -> list[str]:
    """Why columns of ``fields`` (and fields of struct columns, at any depth) have names no
    one can write in a partition spec, a sort key, Spark or SQL: empty, blank, or holding a
    control character; one phrase per bad name, none when every name is fine. (A column name
    is no path component: ``/`` and ``.`` are allowed, quoted where needed.)"""
    problems: list[str] = []
    for field in fields:
        what = "column" if parent is None else f"field of struct {parent!r}"
        bad = re.search(r"[\x00-\x1f\x7f]", field.name)
        if not field.name.strip():
            problems.append(f"{what} {field.name!r} has no name (it is empty or blank)")
        elif bad is not None:
            problems.append(f"{what} {field.name!r} contains the control character {bad.group()!r}")
        if pa.types.is_struct(field.type):
            path = field.name if parent is None else f"{parent}.{field.name}"
            children = [field.type.field(i) for i in range(field.type.num_fields)]
            problems += column_name_problems(children, path)
    return problems


def path_problem(path: object) -> str | None:
    """Why ``path`` (relative to the table root, ``/``-separated) could leave the table root
    or is no file path at all, or None when every component is a valid name."""
    if not isinstance(path, str):
        return f"is of type {type(path).__name__}, not a string"
    if not path:
        return "is empty"
    if path.startswith("/"):
        return "is absolute"
    for part in path.split("/"):
        problem = name_problem(part)
        if problem is not None:
            return f"has a component {part!r} that {problem}"
    return None


_LOG_FIX = (
    "the log is damaged or was tampered with; nothing was read, written or deleted through "
    "it: restore the table's _carbonlite/ directory from a backup or copy"
)


def check_log_path(path: object, *, what: str, where: str) -> None:
    """Refuse ``path`` (a data file named in the log, relative to the table root) unless it
    stays inside the table: :class:`CorruptDataError` naming ``where`` (log file or version)."""
    problem = path_problem(path)
    if problem is not None:
        raise CorruptDataError(
            f"{where} names {what} {path!r}, which {problem} and so may lie outside the "
            f"table; {_LOG_FIX}"
        )


def check_log_name(name: object, *, what: str, where: str) -> None:
    """Refuse ``name`` (a segment id or file name read from the log) unless it is one path
    component: :class:`CorruptDataError` naming ``where``."""
    problem = name_problem(name)
    if problem is not None:
        raise CorruptDataError(
            f"{where} names {what} {name!r}, which {problem} and so may lie outside the "
            f"table; {_LOG_FIX}"
        )


def check_checkpoint_names(
    index_name: object, files: Mapping[str, Iterable[object]], *, where: str
) -> None:
    """Refuse a checkpoint (``where``) whose blocklet index name, segment ids or data file
    paths could lead outside the table; ``files`` maps each segment id to its file paths."""
    check_log_name(index_name, what="blocklet index", where=where)
    for segment_id, paths in files.items():
        check_log_name(segment_id, what="segment id", where=where)
        for path in paths:
            check_log_path(path, what="data file", where=where)
