"""The log on storage: version files, checkpoints, and the pointer to the latest checkpoint.

Layout under the table root::

    _carbonlite/log/00000000000000000000.json              version 0 (creates the table)
    _carbonlite/log/00000000000000000050.checkpoint.json   full state at version 50
    _carbonlite/_last_checkpoint                           {"version": 50}

Opening reads the pointer, the checkpoint it names, and then version files one after another
until one is missing: no listing, so the cost does not grow with the number of commits.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from carbonlite.errors import (
    CarbonLiteError,
    CommitStateUnknownError,
    CorruptDataError,
    TableNotFoundError,
    UnsupportedFormatError,
    UnsupportedStorageError,
    VersionNotFoundError,
    WriteRefusedError,
)
from carbonlite.metadata.actions import LOG_FORMAT_VERSION, Action, CommitInfo
from carbonlite.metadata.checkpoint import (
    MANIFEST_FORMAT_VERSION,
    decode_checkpoint,
    encode_checkpoint,
    encode_legacy_checkpoint,
)
from carbonlite.metadata.checkpoint_policy import RECENT_INTERVALS, checkpoint_due
from carbonlite.metadata.manifest import MANIFEST_DIR, ManifestRef, ManifestSet, ManifestStore
from carbonlite.metadata.manifest_plan import MAX_COMMIT_MERGE_ENTRIES, plan_manifests
from carbonlite.metadata.serde import decode_actions, decode_commit_info, encode_actions
from carbonlite.metadata.snapshot import Snapshot
from carbonlite.properties import TableProperties
from carbonlite.seams import reach
from carbonlite.storage import Storage

__all__ = ["LOG_DIR", "Log", "LogListing", "Placement"]

_logger = logging.getLogger(__name__)

META_DIR = "_carbonlite"
LOG_DIR = f"{META_DIR}/log"
INDEX_SUFFIX = ".checkpoint.blocklets.arrow"
_VERSION_RE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.json$")
Placement = Literal["committed", "fork", "unknown"]
"""Where a version a commit just created stands (``Log.placement``)."""
_UNKNOWN_STATE_TRIES = 3
"""Writes of one version (the same bytes) before its state is declared unknown."""


@dataclass(frozen=True, slots=True)
class LogListing:
    versions: list[int]
    checkpoints: list[int]


class Log:
    """Reads and writes one table's log."""

    def __init__(self, storage: Storage, root: str, uri: str) -> None:
        self.storage = storage
        self.root = root
        self.uri = uri
        self.log_dir = storage.join(root, LOG_DIR)
        self.manifest_dir = storage.join(root, MANIFEST_DIR)
        self._pointer = storage.join(root, META_DIR, "_last_checkpoint")
        log_dir, manifest_dir = self.log_dir, self.manifest_dir

        def path_of(ref: ManifestRef) -> str:
            return storage.join(log_dir if ref.is_legacy else manifest_dir, ref.name)

        # closures over the storage, not this Log: no reference cycle keeps decoded manifests
        # alive after the Table that read them is gone
        self.manifest_path = path_of
        self.manifests = ManifestStore(
            lambda ref: storage.read(path_of(ref)), lambda ref: storage.uri(path_of(ref))
        )

    # --- paths and raw access -----------------------------------------------------------------

    def version_path(self, version: int) -> str:
        return self.storage.join(self.log_dir, f"{version:020d}.json")

    def checkpoint_path(self, version: int) -> str:
        return self.storage.join(self.log_dir, f"{version:020d}.checkpoint.json")

    def checkpoint_files(self, version: int) -> list[str]:
        """Every file making up the checkpoint of ``version``: document, then blocklet index."""
        return [
            self.checkpoint_path(version),
            self.storage.join(self.log_dir, f"{version:020d}{INDEX_SUFFIX}"),
        ]

    def read_actions(self, version: int, snapshot: Snapshot | None) -> list[Action]:
        """Actions of ``version`` (``snapshot``: the one before it, None for version 0), seal
        checked; ``FileNotFoundError`` when it does not exist (yet)."""
        path = self.version_path(version)
        data = self.storage.read(path)
        if snapshot is None:
            return decode_actions(data, None, where=self.storage.uri(path))
        return decode_actions(
            data,
            snapshot.physical_schema,
            where=self.storage.uri(path),
            format_version=snapshot.metadata.format_version,
        )

    def try_write(self, version: int, actions: list[Action], snapshot: Snapshot) -> bool:
        """Create ``version`` holding ``actions`` (which end with a ``commitInfo`` carrying a
        unique ``commit_id``). True when the version holds this commit, False when it holds
        another one.

        A conditional write can land while its caller hears of a failure (a lost response, a
        client retry that then finds the object). So "already exists" and any error are
        settled by reading the version back: the bytes are this commit's own (they hold its
        commit id) or another's. When the storage cannot tell, the write is tried again with
        the same bytes; if it still cannot, :class:`CommitStateUnknownError`.
        """
        data = encode_actions(actions, snapshot.physical_schema)
        path = self.version_path(version)
        failure: Exception | None = None
        for _ in range(_UNKNOWN_STATE_TRIES):
            try:
                if self.storage.put_if_absent(path, data):
                    return True
            except (WriteRefusedError, UnsupportedStorageError):
                raise  # refused before anything could land: the outcome is known
            except (OSError, CarbonLiteError) as exc:  # landed or not: read back to know
                failure = exc
            try:
                found = self.storage.read(path)
            except FileNotFoundError:
                continue  # not there (yet): write again, the same bytes
            except (OSError, CarbonLiteError) as exc:
                failure = exc
                continue
            return found == data
        info = actions[-1]
        commit_id = info.commit_id if isinstance(info, CommitInfo) else ""
        raise CommitStateUnknownError(
            f"could not tell whether version {version} of {self.uri!r} was committed: writing "
            f"and reading back {self.storage.uri(path)} failed ({failure!r}). Nothing this "
            "commit wrote was deleted; check `history` (a version whose commitInfo.commit_id is "
            f"{commit_id!r} is this commit) before retrying, and run `recover` once the storage "
            "is healthy",
            version=version,
            commit_id=commit_id,
        )

    def placement(self, version: int, commit_id: str) -> Placement:
        """Where ``version``, just created by the commit ``commit_id``, stands: ``"committed"``
        (in the log's history), ``"fork"`` (created where ``clean`` had removed the log, so no
        reader of the retained log sees it) or ``"unknown"`` (cannot be told; see
        docs/LOG.md, "The fork guard").

        The common case costs two reads: no checkpoint at or past ``version`` and the version
        before it still there. Otherwise (another writer may already have read this version,
        built on it and checkpointed; or ``clean`` removed what lies before it) the chain of
        commit ids from this version to the newest checkpoint decides. Nothing is deleted."""
        if version == 0:
            return "committed"
        pointer = self.last_checkpoint()
        if (pointer is None or pointer < version) and self.storage.exists(
            self.version_path(version - 1)
        ):
            return "committed"
        if pointer is None or pointer < version:
            # the version before is gone: clean kept a checkpoint at or past this one
            pointer = max((c for c in self.listing().checkpoints if c >= version), default=None)
            if pointer is None:
                return "unknown"
        return self._descends(version, commit_id, pointer)

    def _descends(self, version: int, commit_id: str, checkpoint: int) -> Placement:
        """Whether checkpoint ``checkpoint`` (>= ``version``) descends from this commit's
        ``version``: follow the parent links of the versions after it, then the checkpoint's own
        commit id."""
        link = commit_id
        for v in range(version + 1, checkpoint + 1):
            info = self._commit_info(v)
            if info is None:
                # Cleaned away. clean deletes versions oldest first, so had this version been
                # in the history it would have gone before v: still here, it is a fork.
                return "fork" if self.storage.exists(self.version_path(version)) else "unknown"
            if not info.parent_commit_id:
                return "unknown"  # written by a writer that did not record its parent
            if info.parent_commit_id != link:
                return "fork"
            link = info.commit_id
        snapshot = self.try_read_checkpoint(checkpoint)
        if snapshot is None or not snapshot.commit_id:
            return "unknown"
        return "committed" if snapshot.commit_id == link else "fork"

    def _commit_info(self, version: int) -> CommitInfo | None:
        """The commit info of ``version`` (None when it is not there)."""
        try:
            data = self.storage.read(self.version_path(version))
        except FileNotFoundError:
            return None
        return decode_commit_info(data, where=self.storage.uri(self.version_path(version)))

    def exists(self) -> bool:
        return (
            self.storage.exists(self.version_path(0))
            or self.storage.exists(self._pointer)
            or bool(self.listing().versions)
        )

    def listing(self) -> LogListing:
        versions, checkpoints = [], []
        for status in self.storage.list(self.log_dir):
            name = status.path.rsplit("/", 1)[-1]
            if m := _VERSION_RE.match(name):
                versions.append(int(m.group(1)))
            elif m := _CHECKPOINT_RE.match(name):
                checkpoints.append(int(m.group(1)))
        return LogListing(sorted(versions), sorted(checkpoints))

    # --- checkpoints --------------------------------------------------------------------------

    def read_checkpoint(self, version: int) -> Snapshot:
        """The snapshot of checkpoint ``version``; ``FileNotFoundError`` if its document (or,
        format 1/2, its blocklet index) is missing. Manifests are read when entries are needed."""
        path, index_path = self.checkpoint_files(version)
        snapshot = decode_checkpoint(
            self.storage.read(path), self.uri, where=self.storage.uri(path), store=self.manifests
        )
        if snapshot.metadata.format_version > LOG_FORMAT_VERSION:
            raise UnsupportedFormatError(
                f"table {self.uri!r} uses log format version {snapshot.metadata.format_version}; "
                f"this CarbonLite reads up to {LOG_FORMAT_VERSION}: upgrade carbonlite to open it"
            )
        refs = snapshot.manifests.refs if snapshot.manifests is not None else ()
        if any(r.is_legacy for r in refs) and not self.storage.exists(index_path):
            raise FileNotFoundError(self.storage.uri(index_path))
        return snapshot

    def write_checkpoint(
        self, snapshot: Snapshot, *, merge_limit: int | None = MAX_COMMIT_MERGE_ENTRIES
    ) -> Snapshot:
        """Write the checkpoint of ``snapshot``, move the pointer forward to it, and return
        ``snapshot`` rebased on the checkpoint's manifests (so the next checkpoint reuses them).

        Format 3: new manifests first (the entries committed since the previous checkpoint,
        and any merges), then the document that lists them. Tables of format 1 and 2 get the
        checkpoint of their format (one blocklet index of every entry) until upgraded."""
        document_path, index_path = self.checkpoint_files(snapshot.version)
        if snapshot.metadata.format_version < MANIFEST_FORMAT_VERSION:
            document, index = encode_legacy_checkpoint(snapshot, index_path.rsplit("/", 1)[-1])
            self.storage.put_if_absent(index_path, index)  # first: the document refers to it
            self.storage.put_if_absent(document_path, document)
            self._advance_pointer(snapshot.version)
            return snapshot
        refs, written = plan_manifests(snapshot, self.manifests, merge_limit=merge_limit)
        for ref, data, table in written:
            self.storage.put_if_absent(self.manifest_path(ref), data)
            self.manifests.put(ref, table)
        reach("checkpoint.after_manifests")
        if not self.storage.put_if_absent(document_path, encode_checkpoint(snapshot, refs)):
            return snapshot  # checkpointed already: what was just written is left to clean
        if not all(self.storage.exists(self.manifest_path(ref)) for ref, _, _ in written):
            # stalled past clean's minimum age for unreferenced manifests: withdraw
            self.storage.delete(document_path)
            raise CorruptDataError(
                "a manifest of this checkpoint was removed before its document was written",
                path=self.storage.uri(document_path),
            )
        reach("checkpoint.after_document")
        self._advance_pointer(snapshot.version)
        self.manifests.forget(refs)
        return snapshot.with_manifests(ManifestSet(refs, self.manifests, snapshot.physical_schema))

    def _advance_pointer(self, version: int) -> None:
        current = self.last_checkpoint()
        if current is None or current < version:
            self.storage.put(self._pointer, json.dumps({"version": version}).encode())

    def last_checkpoint(self) -> int | None:
        try:
            return int(json.loads(self.storage.read(self._pointer))["version"])
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, OverflowError):
            return None  # a damaged pointer is only a hint; listing finds the checkpoints

    # --- snapshots ----------------------------------------------------------------------------

    def load_latest(self) -> Snapshot:
        """The newest snapshot. Raises :class:`TableNotFoundError` when there is no table, and
        :class:`CorruptDataError` when the log has a hole before its newest version."""
        # Without a usable checkpoint, opening lists the log; the listing, taken before the
        # replay, names only versions the replay must reach, unless the log has a hole.
        start, listing = self._starting_snapshot()
        latest = self.update(start)
        if listing is not None:
            beyond = [v for v in listing.versions if v > latest.version]
            if beyond:
                raise CorruptDataError(
                    f"the log of {self.uri!r} is missing version {latest.version + 1} while "
                    f"versions up to {max(beyond)} exist: the file was deleted or lost. Restore "
                    "it from a backup or copy of the table",
                    path=self.storage.uri(self.version_path(latest.version + 1)),
                )
        return latest

    def _starting_snapshot(self) -> tuple[Snapshot, LogListing | None]:
        """The newest readable checkpoint (the pointer is only a hint), else version 0; with
        the listing of the log when one was needed to find it."""
        pointer = self.last_checkpoint()
        if pointer is not None:
            snapshot = self.try_read_checkpoint(pointer)
            if snapshot is not None:
                return snapshot, None
        listing = self.listing()
        for c in reversed(listing.checkpoints):
            if c != pointer:
                snapshot = self.try_read_checkpoint(c)
                if snapshot is not None:
                    return snapshot, listing
        try:
            zero = self.read_actions(0, None)
        except FileNotFoundError:
            zero = None
        if zero is not None:
            return Snapshot.from_actions(self.uri, 0, zero), listing
        if listing.versions or listing.checkpoints:
            raise CorruptDataError(
                f"the log of {self.uri!r} starts at version "
                f"{min(listing.versions + listing.checkpoints)} and holds no readable checkpoint "
                "to start from",
                path=self.storage.uri(self.log_dir),
            )
        raise TableNotFoundError(f"no CarbonLite table at {self.uri!r} (no {LOG_DIR}/ found)")

    def try_read_checkpoint(self, version: int) -> Snapshot | None:
        """:meth:`read_checkpoint`, or None when the checkpoint is missing or damaged."""
        try:
            return self.read_checkpoint(version)
        except FileNotFoundError:
            return None
        except CorruptDataError as exc:
            _logger.warning("skipping damaged checkpoint %d of %s: %s", version, self.uri, exc)
            return None

    def update(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` advanced through every version committed after it."""
        latest = snapshot
        for latest in self.advance(snapshot):  # noqa: B007 - the last one is the answer
            pass
        return latest

    def advance(self, snapshot: Snapshot) -> Iterator[Snapshot]:
        """The snapshot of each version committed after ``snapshot``, in order. When ``clean``
        removed the versions right after it (a snapshot older than the log retention), the
        next one yielded is the newest checkpoint: the versions between are gone. So it is when
        the next version was not built on ``snapshot`` (its parent commit id differs): the
        snapshot stands on a fork (docs/LOG.md, "The fork guard")."""
        if self._maybe_cleaned_under(snapshot):
            snapshot = self._past_cleaned(snapshot)
            yield snapshot
        while True:
            try:
                actions = self.read_actions(snapshot.version + 1, snapshot)
            except FileNotFoundError:
                after = self._after_missing(snapshot)
                if after is None:
                    return
                if after is not snapshot:
                    snapshot = after
                    yield snapshot
                continue
            if not _continues(snapshot, actions):
                snapshot = self._past_cleaned(snapshot)
                yield snapshot
                continue
            snapshot = self._at_checkpoint(snapshot.apply(snapshot.version + 1, actions))
            reach("log.after_read")
            yield snapshot

    def _maybe_cleaned_under(self, snapshot: Snapshot) -> bool:
        """Whether ``clean`` removed the version ``snapshot`` stands on. Only a snapshot older
        than the log retention can be, and only then is it looked up: a version created later
        at the next number (a stale writer's fork) must not be read as its successor."""
        retention_ms = TableProperties(snapshot.properties).log_retention * 1000
        if time.time() * 1000 - snapshot.timestamp < retention_ms or snapshot.version == 0:
            return False
        return not self.storage.exists(self.version_path(snapshot.version))

    def _at_checkpoint(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot``, or the same state read from its version's checkpoint when another
        writer wrote one: its entries then lie in that checkpoint's manifests, so a
        long-lived reader or writer holds (and would checkpoint) only entries committed since.
        The snapshot's own count says where a writer wrote one (``checkpoint_policy.py``)."""
        if not checkpoint_due(snapshot) or not any(
            f.has_tail for s in snapshot.segments.values() for f in s.files.values()
        ):
            return snapshot
        checkpoint = self.try_read_checkpoint(snapshot.version)
        return snapshot if checkpoint is None else checkpoint

    def _after_missing(self, snapshot: Snapshot) -> Snapshot | None:
        """Version ``snapshot.version + 1`` is not there: None when ``snapshot`` is the latest,
        ``snapshot`` itself when that version just appeared (read it again), the newest
        checkpoint when ``clean`` removed the log behind ``snapshot``. A hole in the log is a
        :class:`CorruptDataError`; a log that vanished, :class:`TableNotFoundError`."""
        v = snapshot.version
        if self.storage.exists(self.version_path(v)):
            if not self.storage.exists(self.version_path(v + 2)):
                return None
            if self.storage.exists(self.version_path(v + 1)):
                return snapshot  # committed between the two looks
            raise CorruptDataError(
                f"the log of {self.uri!r} is missing version {v + 1}: versions {v} and {v + 2} "
                "exist, so the file was deleted or lost. Restore it from a backup or copy of the "
                "table; until then the table cannot be read past version "
                f"{v} and nothing can be committed",
                path=self.storage.uri(self.version_path(v + 1)),
            )
        return self._past_cleaned(snapshot)

    def _past_cleaned(self, snapshot: Snapshot) -> Snapshot:
        """The newest checkpoint after ``snapshot``, whose version is gone from the log
        (cleaned away) or was a fork; :class:`TableNotFoundError` when the whole log is gone."""
        v = snapshot.version
        pointer = self.last_checkpoint()
        candidates = [pointer] if pointer is not None and pointer > v else []
        if not candidates:
            listing = self.listing()
            if not listing.versions and not listing.checkpoints and pointer is None:
                raise TableNotFoundError(
                    f"the table at {self.uri!r} is gone: its log ({LOG_DIR}/) was deleted after "
                    f"this Table loaded version {v}; nothing was written"
                )
            candidates = [c for c in reversed(listing.checkpoints) if c > v]
        for c in candidates:
            checkpoint = self.try_read_checkpoint(c)
            if checkpoint is not None:
                return checkpoint
        raise CorruptDataError(
            f"version {v} of {self.uri!r}, which this Table had loaded, is no longer in the log "
            "(or the next version was not built on it), and no readable checkpoint after it can "
            "stand in for it; open the table again",
            path=self.storage.uri(self.version_path(v)),
        )

    def load_version(self, version: int, latest: Snapshot | None = None) -> Snapshot:
        """The snapshot at ``version`` (time travel): from the newest checkpoint at or before
        it, found without listing (:meth:`_checkpoint_before`), then forward."""
        if version < 0:
            raise VersionNotFoundError(f"versions start at 0, got {version}")
        if latest is not None and version == latest.version:
            return latest
        if latest is not None and version > latest.version:
            raise VersionNotFoundError(
                f"table {self.uri!r} has no version {version}; the latest is {latest.version}"
            )
        start = self._checkpoint_before(version, latest)
        if start is None:
            try:
                start = Snapshot.from_actions(self.uri, 0, self.read_actions(0, None))
            except FileNotFoundError:
                start = self._listed_start(version)
        snapshot = start
        while snapshot.version < version:
            try:
                actions = self.read_actions(snapshot.version + 1, snapshot)
            except FileNotFoundError:
                self._missing_in_history(snapshot.version + 1, version)
                raise VersionNotFoundError(
                    f"table {self.uri!r} has no version {version}; the latest is {snapshot.version}"
                ) from None
            snapshot = snapshot.apply(snapshot.version + 1, actions)
        return snapshot

    _PROBES = 4
    """Checkpoints probed below a version, of each kind, before time travel falls back to
    version 0 or a listing."""

    def _checkpoint_before(self, version: int, latest: Snapshot | None) -> Snapshot | None:
        """The newest readable checkpoint at or before ``version`` among the pointer's, the
        versions due one by entries just below it, and the few multiples of the checkpoint
        interval below it (None if none of them is). Where checkpoints were due by entries is
        in ``recent_checkpoints``: of ``latest`` for versions of its last two intervals, else
        of the checkpoint at the first multiple of the interval after ``version``."""
        props = latest.properties if latest is not None else {}
        interval = TableProperties(props).checkpoint_interval
        multiples = [version - version % interval - k * interval for k in range(self._PROBES)]
        candidates = [*multiples, *self._due_by_entries(version, interval, latest)]
        pointer = self.last_checkpoint()
        if pointer is not None and pointer <= version:
            candidates.append(pointer)
        for c in sorted({c for c in candidates if c > 0}, reverse=True):
            checkpoint = self.try_read_checkpoint(c)
            if checkpoint is not None:
                return checkpoint
        return None

    def _due_by_entries(self, version: int, interval: int, latest: Snapshot | None) -> list[int]:
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
                known = self.try_read_checkpoint(after)
                if known is not None:
                    recent = known.recent_checkpoints
                    break
        return [v for v in recent if floor < v <= version][-self._PROBES :]

    def _listed_start(self, version: int) -> Snapshot:
        """Where to replay ``version`` from when neither a probed checkpoint nor version 0 is
        there: list the log (the slow path, for missing checkpoints and clear errors)."""
        listing = self.listing()
        for c in reversed([c for c in listing.checkpoints if c <= version]):
            start = self.try_read_checkpoint(c)
            if start is not None:
                return start
        earliest = min(listing.checkpoints + listing.versions, default=None)
        raise VersionNotFoundError(
            f"version {version} of {self.uri!r} is no longer in the log (removed by clean, "
            f"or its checkpoint is damaged); the earliest version still there is {earliest}"
        )

    def _missing_in_history(self, missing: int, wanted: int) -> None:
        """Raise :class:`CorruptDataError` when ``missing`` was lost rather than never
        written: ``clean`` removes versions oldest first, so one missing after one still
        there, with later ones present, was lost."""
        listing = self.listing()
        if missing - 1 in listing.versions and any(v > missing for v in listing.versions):
            raise CorruptDataError(
                f"the log of {self.uri!r} is missing version {missing} (later versions "
                f"exist), so version {wanted} cannot be rebuilt; restore the file from "
                "a backup or copy of the table",
                path=self.storage.uri(self.version_path(missing)),
            )


def _continues(snapshot: Snapshot, actions: list[Action]) -> bool:
    """Whether ``actions`` (the next version) were built on ``snapshot``, as far as the chain
    of commit ids tells (versions of older writers carry no parent: assumed so)."""
    info = actions[-1] if actions else None
    parent = info.parent_commit_id if isinstance(info, CommitInfo) else ""
    return not parent or not snapshot.commit_id or parent == snapshot.commit_id
