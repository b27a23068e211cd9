"""``recover``: cut stream files back to their committed length and delete orphan files.

A crash leaves two kinds of debris: bytes past a file's committed length (a torn or
uncommitted append) and files no version references (a writer or compaction that died before
committing). Neither is ever visible to readers; ``recover`` reclaims the space.

It is safe while writers run: it never touches committed bytes. It leaves alone every file
modified within ``min_age`` (default one hour), every file a live lease covers (compaction
outputs, Spark task files and object-store appends in flight, however old: writer/lease.py),
and a stream file whose writer holds its lock; it acts on a file only while holding that
file's owner locks and after re-reading the log (files, then leases, then the log), so a
writer that just committed is seen. Log temporary files younger than a minute are never
touched (a commit may be linking them). Writers and compactions re-check their files right
before committing. It also removes checkpoint indexes whose document was never written, lock
files nobody has held for ``min_age``, and expired lease records.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from carbonlite.arguments import check_seconds
from carbonlite.errors import WriterConflictError
from carbonlite.metadata import Log, Snapshot
from carbonlite.metadata.log import INDEX_SUFFIX, META_DIR
from carbonlite.seams import reach
from carbonlite.storage import TEMP_PREFIX, Storage
from carbonlite.storage.local import SWAP_LOCK_SUFFIX
from carbonlite.writer.append import LOCK_DIR, owner_lock_paths
from carbonlite.writer.lease import LEASE_DIR, read_leases

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
    """Every file a version still needs, with the length it needs: data files and the files
    beside them (deletion vectors, bloom filters)."""
    out = {}
    for seg in snapshot.segments.values():
        for f in seg.files.values():
            out[f.path] = f.committed_length
            out.update(f.side_files)
    return out


@contextmanager
def _owning(storage: Storage, root: str, rel: str) -> Iterator[None]:
    """Hold every owner lock of ``rel`` (WriterConflictError if a writer holds one).

    The locks are taken even when their files do not exist yet (creating them): a writer that
    starts now then waits for recover instead of appending while recover cuts the file. Their
    files go again as the locks are released (``Storage.lock``).
    """
    with ExitStack() as stack:
        for path in owner_lock_paths(storage, root, rel):
            stack.enter_context(storage.lock(path, timeout=0))
        yield


def recover(
    log: Log, snapshot: Snapshot, *, dry_run: bool, min_age_seconds: float = DEFAULT_MIN_AGE_SECONDS
) -> RecoverResult:
    min_age_seconds = check_seconds(min_age_seconds, what="min_age")
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
    files = storage.list(storage.join(root, "segments"), recursive=True)
    reach("recover.after_list_files")
    # Leases after the listing, the log (re-read below, under the owner locks) after the
    # leases: a file listed here whose lease is gone by now was committed before (lease.py).
    leases, unreadable = read_leases(storage, root)
    reach("recover.after_list_leases")
    live = [lease for lease in leases if lease.expires_ms > now * 1000]
    for status in files:
        rel = status.path[len(prefix) :] if status.path.startswith(prefix) else status.path
        committed = referenced.get(rel)
        if committed is not None and status.size <= committed:
            continue
        if (
            status.mtime > cutoff
            or any(lease.covers(rel) for lease in live)
            or _held_by_live_writer(storage, root, rel)
        ):
            skipped.append(rel)
            continue
        if dry_run:
            if committed is None:
                orphans.append(rel)
                freed += status.size
            elif storage.supports_append:
                truncated.append((rel, status.size, committed))
                freed += status.size - committed
            continue
        try:
            with _owning(storage, root, rel):
                # Under the lock, with the log as of now: the writer may have just committed.
                snapshot = log.update(snapshot)
                committed = _referenced(snapshot).get(rel)
                try:
                    size = storage.size(status.path)
                except FileNotFoundError:
                    continue
                if committed is None or size > committed:
                    reach("recover.before_cut")
                if committed is None:
                    storage.delete(status.path)
                    orphans.append(rel)
                    freed += size
                elif size > committed and storage.supports_append:
                    storage.truncate(status.path, committed)
                    truncated.append((rel, size, committed))
                    freed += size - committed
        except WriterConflictError:
            skipped.append(rel)
    listing = storage.list(storage.join(root, META_DIR), recursive=True)
    documents = {s.path.rsplit("/", 1)[-1] for s in listing}
    for status in listing:
        name = status.path.rsplit("/", 1)[-1]
        rel = status.path[len(prefix) :]
        old = status.mtime <= cutoff
        stray = (
            name.startswith(TEMP_PREFIX) and status.mtime <= min(cutoff, now - _TMP_MIN_AGE_SECONDS)
        ) or (
            old
            and name.endswith(INDEX_SUFFIX)
            and name[: -len(INDEX_SUFFIX)] + ".checkpoint.json" not in documents
        )
        if stray:
            orphans.append(rel)
            freed += status.size
            if not dry_run:
                storage.delete(status.path)
        elif (
            old
            and not dry_run
            and (rel.startswith(LOCK_DIR + "/") or name.endswith(SWAP_LOCK_SUFFIX))
        ):
            # a lock file left by a process killed while it held the lock (a writer's, a swap's)
            _remove_idle_lock(storage, status.path)
    if not dry_run:
        expired = [lease for lease in leases if lease.expires_ms <= now * 1000]
        for lease in expired:
            storage.delete(storage.join(root, LEASE_DIR, f"{lease.lease_id}.json"))
        for status in unreadable:
            if status.mtime <= cutoff:
                storage.delete(status.path)
    return RecoverResult(dry_run, tuple(truncated), tuple(orphans), freed, tuple(skipped))


def _remove_idle_lock(storage: Storage, path: str) -> None:
    """Delete a lock file nobody holds (one a killed process left): taking the lock and
    letting it go deletes its file (``Storage.lock``)."""
    try:
        with storage.lock(path, timeout=0):
            pass
    except WriterConflictError:
        pass
