"""``clean``: physically delete what no version within the retention period needs.

Data files of COMPACTED and MARKED_FOR_DELETE segments (with their deletion-vector and bloom
filter files) go once their status changed longer
ago than the retention (default: table property ``deleted_data_retention``, 7 days); less than
one hour is refused unless forced, as Delta's VACUUM does, because a reader or a lagging stream
may still be reading an older version. The deletion is recorded (``removeFiles``, one version,
``data_change = false``) so time travel to a version whose files are gone says so clearly.

Log versions older than ``log_retention`` (30 days) go too, up to the newest checkpoint that is
itself older than that, so every remaining version can still be opened.

A table with Iceberg metadata (docs/ICEBERG.md) keeps every data file a kept Iceberg snapshot
reads, whatever the retention (its segment goes once no kept snapshot names it), and every
file of a segment retired after the newest exported version (an export of an earlier version
may still be pending and would name it), and loses the
manifests, manifest lists and delete files of expired Iceberg snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass

from carbonlite._version import ENGINE
from carbonlite.arguments import check_seconds
from carbonlite.clock import elapsed_ms, now_ms
from carbonlite.compaction.progress import ProgressCallback, ProgressCounter
from carbonlite.errors import CorruptDataError, InvalidOptionError, UnsupportedFormatError
from carbonlite.iceberg.export import named_files, stale_metadata_files
from carbonlite.metadata import (
    Action,
    CommitInfo,
    FilesRemoved,
    Log,
    Requirement,
    Snapshot,
    commit,
)
from carbonlite.metadata.actions import STATE_DIR
from carbonlite.metadata.manifest_plan import merge_pending
from carbonlite.properties import TableProperties
from carbonlite.seams import reach

__all__ = ["MIN_RETENTION_SECONDS", "CleanResult", "clean"]

MIN_RETENTION_SECONDS = 3600.0
MANIFEST_MIN_AGE_MS = 60_000
"""An unreferenced manifest younger than this may belong to a checkpoint being written: it
is left alone (and a checkpoint writer that finds a manifest of its own gone withdraws its
document before the pointer names it, see ``Log.write_checkpoint``)."""


@dataclass(frozen=True, slots=True)
class CleanResult:
    dry_run: bool
    version: int | None
    """The version recording the deletion (None for a dry run or when nothing went)."""
    files: tuple[str, ...]
    """Data files deleted, each followed by its deletion-vector files (or, in a dry run,
    that would be)."""
    bytes: int
    log_files: tuple[str, ...]
    """Log and checkpoint files deleted (or that would be)."""
    retention_seconds: float


@dataclass(frozen=True)
class _CleanCommit:
    removed: dict[str, tuple[str, ...]]
    started_ms: int | None = None
    writer_id: str | None = None

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        """None: removing files of dead segments commutes with any other commit."""
        return ()

    def actions(self, snapshot: Snapshot, read_version: int) -> list[Action]:
        actions: list[Action] = []
        files = nbytes = 0
        for sid, paths in self.removed.items():
            seg = snapshot.segments.get(sid)
            if seg is None:
                continue  # a concurrent clean recorded it all already
            gone = tuple(f for f in paths if f in seg.files)
            if gone:  # a concurrent clean may have recorded some already
                actions.append(FilesRemoved(sid, gone))
                files += len(gone)
                nbytes += sum(seg.files[f].committed_length for f in gone)
        now = now_ms()
        actions.append(
            CommitInfo(
                operation="CLEAN",
                timestamp=now,
                data_change=False,
                read_version=read_version,
                bytes_removed=nbytes,
                parameters={
                    "segments": ",".join(self.removed),
                    "files": str(sum(map(len, self.removed.values()))),
                },
                engine=ENGINE,
                files_added=0,
                files_removed=files,
                duration_ms=elapsed_ms(self.started_ms, now),
                writer_id=self.writer_id,
            )
        )
        return actions


def _usable(checkpoint: Snapshot) -> bool:
    """Whether every manifest (format 1/2: the blocklet index) of a checkpoint reads and
    passes its checksum: the versions before it are deleted only if it can really stand in
    for them."""
    try:
        if checkpoint.manifests is not None:
            checkpoint.manifests.tables()
    except (CorruptDataError, UnsupportedFormatError):
        return False
    return True


def _cutoff(now: int, retention_ms: float) -> int | None:
    """The newest timestamp old enough to go; None for a zero retention, which takes
    everything: commit timestamps are kept increasing and can run a few milliseconds ahead of
    the clock (``commit._stamped``)."""
    return None if retention_ms <= 0 else now - int(retention_ms)


def _expired(timestamp_ms: int, cutoff: int | None) -> bool:
    return cutoff is None or timestamp_ms <= cutoff


@dataclass(frozen=True, slots=True)
class _LogPlan:
    """What ``clean`` does to the log: the checkpoint it keeps (None: every version stays),
    the files below it, oldest version first, and what the retained checkpoints reference."""

    keep_from: int | None
    files: list[str]
    manifests: set[str]
    states: set[str]
    kept_since: int | None
    """The time of the oldest retained checkpoint (None: every version is kept)."""


def _stale_log_files(log: Log, cutoff_ms: int | None, latest: Snapshot) -> _LogPlan:
    """Log files no retained version needs: every version and checkpoint below the newest
    expired checkpoint that can stand in for them, versions oldest first (a stale writer's
    placement relies on it, ``History.place``); the manifests and the state files the
    retained checkpoints (and ``latest``) reference."""
    listing = log.listing()
    keep_from = None
    for c in reversed(listing.checkpoints):
        if c > latest.version:
            continue
        checkpoint = log.try_read_checkpoint(c)
        if checkpoint is None or not _expired(checkpoint.timestamp, cutoff_ms):
            continue  # missing, damaged or still within the retention
        if _usable(checkpoint):  # its manifests too: only then can it stand in for older ones
            keep_from = c
            break
    referenced = {r.name for r in latest.manifests.refs} if latest.manifests is not None else set()
    states = {s.path for s in latest.states.values()}
    kept_since = None
    for c in listing.checkpoints:
        if keep_from is None or c >= keep_from:
            checkpoint = log.try_read_checkpoint(c)
            if checkpoint is None:
                continue
            if c == keep_from:
                kept_since = checkpoint.timestamp
            if checkpoint.manifests is not None:
                referenced.update(r.name for r in checkpoint.manifests.refs)
            states.update(s.path for s in checkpoint.states.values())
    if keep_from is None:
        return _LogPlan(None, [], referenced, states, None)
    paths = [log.version_path(v) for v in sorted(listing.versions) if v < keep_from]
    paths += [
        p
        for c in listing.checkpoints
        if c < keep_from
        for p in log.checkpoint_files(c)
        if log.storage.exists(p)  # format 1/2 checkpoints have a blocklet index too
    ]
    return _LogPlan(keep_from, paths, referenced, states, kept_since)


def _stale_manifests(log: Log, referenced: set[str], min_age_ms: int, now: int) -> list[str]:
    """Manifests no retained checkpoint references, older than ``min_age_ms`` (a checkpoint
    being written references its new manifests only once its document lands)."""
    stale = []
    for status in log.storage.list(log.manifest_dir):
        name = status.path.rsplit("/", 1)[-1]
        if name not in referenced and status.mtime * 1000 <= now - min_age_ms:
            stale.append(status.path)
    return stale


def _stale_states(log: Log, referenced: set[str], kept_since: int | None) -> list[str]:
    """State files (``publish(state=...)``) that no retained version can name: written an
    hour or more before the oldest retained checkpoint (every version that named them is
    older, and gone with the log files) and not named by a retained checkpoint or the latest
    state; or left by a publish that failed before its commit."""
    if kept_since is None:
        return []
    root = log.root.rstrip("/") + "/"
    stale = []
    try:
        listing = log.storage.list(log.storage.join(log.root, STATE_DIR))
    except FileNotFoundError:
        return []
    for status in listing:
        rel = status.path[len(root) :] if status.path.startswith(root) else status.path
        if rel not in referenced and status.mtime * 1000 <= kept_since - STATE_MARGIN_MS:
            stale.append(status.path)
    return stale


STATE_MARGIN_MS = 3_600_000
"""A state file this much older than the oldest retained checkpoint: a publish that wrote it
then would have committed long before."""


def clean(
    log: Log,
    snapshot: Snapshot,
    *,
    retention_seconds: float | None,
    dry_run: bool,
    force: bool,
    progress: ProgressCallback | None = None,
    writer_id: str | None = None,
) -> tuple[CleanResult, Snapshot]:
    """Delete what no version within the retention needs (see the module's documentation).

    ``progress(done, total)`` counts the bytes of the data files deleted (not called in a dry
    run, nor when there is no data file to delete); ``writer_id`` is recorded in the commit."""
    started = now_ms()
    snapshot = log.update(snapshot)
    props = TableProperties(snapshot.properties)
    retention = props.deleted_data_retention if retention_seconds is None else retention_seconds
    retention = check_seconds(retention, what="retention")
    if retention < MIN_RETENTION_SECONDS and not force:
        raise InvalidOptionError(
            f"retention of {retention:g} s is below the 1 hour safety minimum: readers, lagging "
            "streams and writers of older versions may still need those files. Use force=True "
            "(CLI: --force) if you are sure nothing reads versions that old"
        )
    now = now_ms()
    cutoff = _cutoff(now, retention * 1000)
    removed: dict[str, tuple[str, ...]] = {}
    nbytes = 0
    # what the kept snapshots of a table publishing Iceberg still read, and what a late export
    # of a version not yet exported may name (once ``iceberg`` is off, its last metadata is no
    # longer kept whole)
    iceberg = named_files(log.storage, log.root) if props.iceberg != "off" else None
    for seg in snapshot.segments.values():
        if (
            seg.status in ("COMPACTED", "MARKED_FOR_DELETE")
            and seg.files
            and _expired(seg.status_time, cutoff)
            and not (iceberg is not None and iceberg.may_name(seg))
        ):
            removed[seg.segment_id] = tuple(seg.files)
            nbytes += seg.num_bytes
            nbytes += sum(n for f in seg.files.values() for n in f.side_files.values())
    files = tuple(
        p
        for sid, paths in removed.items()
        for rel in paths
        for p in (rel, *snapshot.segments[sid].files[rel].side_files)
    )
    log_retention_ms = int(props.log_retention * 1000)
    plan = _stale_log_files(log, _cutoff(now, log_retention_ms), snapshot)
    log_files = plan.files + _stale_manifests(log, plan.manifests, MANIFEST_MIN_AGE_MS, now)
    log_files += _stale_states(log, plan.states, plan.kept_since)
    if iceberg is not None:  # files of expired Iceberg snapshots
        log_files += stale_metadata_files(log.storage, log.root, iceberg, MANIFEST_MIN_AGE_MS, now)
    if dry_run:
        return CleanResult(True, None, files, nbytes, tuple(log_files), retention), snapshot
    reach("clean.after_plan")
    storage, root = log.storage, log.root
    counter = ProgressCounter(progress, nbytes)
    for sid, paths in removed.items():
        seg_files = snapshot.segments[sid].files
        for rel in paths:
            for side_file, size in seg_files[rel].side_files.items():  # vectors, blooms
                storage.delete(storage.join(root, side_file))
                counter.advance(size)
            storage.delete(storage.join(root, rel))
            counter.advance(seg_files[rel].committed_length)
    counter.finish()
    version = None
    if removed:
        reach("clean.after_data_deleted")
        snapshot = commit(
            log, snapshot, _CleanCommit(removed, started_ms=started, writer_id=writer_id)
        )
        version = snapshot.version
        for sid in removed:
            storage.delete_empty_dirs(storage.join(root, "segments", sid))
    if plan.keep_from is not None:
        # The floor first: no file at or above it is ever deleted, which is what tells every
        # reader and writer that a version file there is the history's (``history.py``).
        log.move_pointer(checkpoint=plan.keep_from, floor=plan.keep_from)
        reach("clean.after_floor")
    for path in log_files:
        reach("clean.before_log_delete")
        storage.delete(path)
    if snapshot.manifests is not None and merge_pending(snapshot.manifests.refs):
        # merges too big for a committing writer: a checkpoint of the current version does them
        snapshot = log.write_checkpoint(snapshot, merge_limit=None)
    return CleanResult(False, version, files, nbytes, tuple(log_files), retention), snapshot
