"""What the file ingester counts and says: its result, and the warnings of what it does not
trust (``carbonlite.ingest.files``, the logger of ``carbonlite/ingest/files.py``; quiet unless
the application configures logging; ``carbonlite ingest files`` prints them on stderr).

Each says what, where and what to do: a symbolic link (or another entry that is not a
regular file) where a final file could be, never followed nor read (once while it stays);
a file that replaced a recorded one, ingested as a new file; a file stamped ahead of the
clock, ingested without moving the record's horizon.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from carbonlite.ingest.file_record import FileRecord, FileVersion
from carbonlite.ingest.file_source import Listing, SourceFile

__all__ = ["LOGGER_NAME", "FileIngestResult", "note_taken", "warn_skipped"]

LOGGER_NAME = "carbonlite.ingest.files"
_logger = logging.getLogger(LOGGER_NAME)


@dataclass
class FileIngestResult:
    """What a run ingested."""

    files: int = 0
    """Files whose rows this run committed."""
    rows: int = 0
    bad_files: int = 0
    """Files this run kept in the bad-records table."""
    commits: int = 0
    restarts: int = 0
    """Times another ingester committed first and this one read the record again."""
    pending: int = 0
    """Final files listed and not ingested yet, at the last listing."""
    behind_horizon: int = 0
    """Final files at the last listing that are behind the record's horizon and not listed
    in it: ingested long ago and forgotten, or published too late; not read either way."""
    not_ready: int = 0
    """Times a file was left for a later listing (it changed, or went away)."""
    replaced_files: int = 0
    """Files this run read that replaced a file of the same path it had recorded: new files,
    read whole (the rows of the file replaced stay)."""
    future_files: int = 0
    """Files this run read whose modification time was ahead of its clock: read, and their
    time did not move the record's horizon."""
    skipped_links: int = 0
    """Symbolic links (and other entries that are not regular files) at the last listing
    where a final file could be: never followed, never read."""


def warn_skipped(
    listing: Listing, source: str, warned: set[str], result: FileIngestResult
) -> set[str]:
    """Count the links (and other entries that are not files) of ``listing`` and warn of
    each not in ``warned``; what to pass as ``warned`` next time."""
    result.skipped_links = len(listing.skipped)
    for relative, what in listing.skipped:
        if relative not in warned:
            _logger.warning(
                "%r in the source %s is %s: not followed, not read (the ingester reads only "
                "regular files inside the source; put the file itself there)",
                relative,
                source,
                what,
            )
    return {relative for relative, _ in listing.skipped}


def note_taken(
    taken: Sequence[SourceFile],
    record: FileRecord,
    now_ms: int,
    source: str,
    result: FileIngestResult,
) -> None:
    """Count and warn of the files of a commit (``taken``, recorded by it on top of
    ``record`` when the clock said ``now_ms``) that replaced a recorded file, or are
    stamped ahead of the clock."""
    for f in taken:
        replaced = record.replaces(f.relative, f.version)
        if replaced is not None:
            result.replaced_files += 1
            _logger.warning(
                "file %r of %s was replaced since it was ingested (%s then, %s now): "
                "ingested as a new file; the rows of the file it replaced stay",
                f.relative,
                source,
                _described(replaced),
                _described(f.version),
            )
        if f.modified_ms > now_ms:
            result.future_files += 1
            _logger.warning(
                "file %r of %s is stamped %s, %s ahead of this host's clock: ingested; "
                "its time does not move the record's horizon (check the clock of the host "
                "that wrote it)",
                f.relative,
                source,
                _when(f.modified_ms),
                _duration((f.modified_ms - now_ms) / 1000),
            )


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86_400), ("hours", 3_600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def _described(version: FileVersion) -> str:
    size = "" if version.size is None else f"{version.size:,} bytes "
    etag = "" if version.etag is None else f", ETag {version.etag}"
    return f"{size}modified at {_when(version.modified_ms)}{etag}"
