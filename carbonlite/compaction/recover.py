"""``recover``: cut stream files back to their committed length and delete orphan files.

A crash leaves two kinds of debris: bytes past a file's committed length (a torn or
uncommitted append) and files no version references (a writer or compaction that died before
committing). Neither is ever visible to readers; ``recover`` reclaims the space.

It is safe while writers run: it never touches committed bytes; it leaves alone a stream file
whose writer holds its lock (a live writer may still commit what it wrote), and every file
modified within ``min_age`` (default one hour). Log temporary files younger than a minute are
never touched (a commit may be linking them). Writers and compactions also re-check their
files right before committing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from carbonlite.metadata import Log, Snapshot
from carbonlite.metadata.log import META_DIR
from carbonlite.storage import Storage
from carbonlite.writer.append import owner_lock_paths

__all__ = ["DEFAULT_MIN_AGE_SECONDS", "RecoverResult", "recover"]

DEFAULT_MIN_AGE_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class RecoverResult:
    dry_run: bool
    truncated: tuple[tuple[str, int, int], ...]
    """(file, size before, committed length) of every file cut back (or to be cut)."""
    orphans: tuple[str, ...]
    """Files deleted (or to be) because no version references them."""
    bytes_freed: int
    skipped_recent: tuple[str, ...]
    """Files with debris left alone: changed within ``min_age``, or held by a live writer."""


_TMP_MIN_AGE_SECONDS = 60.0


def _held_by_live_writer(storage: Storage, root: str, rel: str) -> bool:
    return any(storage.is_locked(path) for path in owner_lock_paths(storage, root, rel))


def _referenced(snapshot: Snapshot) -> dict[str, int]:
    return {
        f.path: f.committed_length for seg in snapshot.segments.values() for f in seg.files.values()
    }


def recover(
    log: Log, snapshot: Snapshot, *, dry_run: bool, min_age_seconds: float = DEFAULT_MIN_AGE_SECONDS
) -> RecoverResult:
    snapshot = log.update(snapshot)
    storage, root = log.storage, log.root
    referenced = _referenced(snapshot)
    now = time.time()
    cutoff = now - min_age_seconds
    prefix = root.rstrip("/") + "/"
    truncated: list[tuple[str, int, int]] = []
    orphans: list[str] = []
    skipped: list[str] = []
    freed = 0
    for status in storage.list(storage.join(root, "segments"), recursive=True):
        rel = status.path[len(prefix) :] if status.path.startswith(prefix) else status.path
        committed = referenced.get(rel)
        if committed is not None and status.size <= committed:
            continue
        if status.mtime > cutoff or _held_by_live_writer(storage, root, rel):
            skipped.append(rel)
            continue
        if committed is None:
            orphans.append(rel)
            freed += status.size
            if not dry_run:
                storage.delete(status.path)
        elif storage.supports_append:
            truncated.append((rel, status.size, committed))
            freed += status.size - committed
            if not dry_run:
                storage.truncate(status.path, committed)
    for status in storage.list(storage.join(root, META_DIR), recursive=True):
        name = status.path.rsplit("/", 1)[-1]
        if name.startswith(".tmp-") and status.mtime <= min(cutoff, now - _TMP_MIN_AGE_SECONDS):
            rel = status.path[len(prefix) :]
            orphans.append(rel)
            freed += status.size
            if not dry_run:
                storage.delete(status.path)
    return RecoverResult(dry_run, tuple(truncated), tuple(orphans), freed, tuple(skipped))
