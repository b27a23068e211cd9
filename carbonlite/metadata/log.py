"""The log on storage: version files, checkpoints, and the pointer to the latest checkpoint.

Layout under the table root::

    _carbonlite/log/00000000000000000000.json              version 0 (creates the table)
    _carbonlite/log/00000000000000000050.checkpoint.json   full state at version 50
    _carbonlite/_last_checkpoint                           {"version": 50}

Opening reads the pointer, the checkpoint it names, and then version files one after another
until one is missing: no listing, so the cost does not grow with the number of commits. Which
of the files are the table's history is decided by one rule (``history.py``): every reader,
writer and ``clean`` asks :meth:`Log.look`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from carbonlite.errors import (
    CarbonLiteError,
    CommitStateUnknownError,
    CorruptDataError,
    TableNotFoundError,
    UnsupportedFormatError,
    UnsupportedStorageError,
    WriteRefusedError,
)
from carbonlite.metadata.actions import LOG_FORMAT_VERSION, Action, CommitInfo
from carbonlite.metadata.checkpoint import (
    MANIFEST_FORMAT_VERSION,
    decode_checkpoint,
    encode_checkpoint,
    encode_legacy_checkpoint,
)
from carbonlite.metadata.checkpoint_policy import checkpoint_due
from carbonlite.metadata.history import History, Placement, Pointer, built_on
from carbonlite.metadata.manifest import MANIFEST_DIR, ManifestRef, ManifestSet, ManifestStore
from carbonlite.metadata.manifest_plan import MAX_COMMIT_MERGE_ENTRIES, plan_manifests
from carbonlite.metadata.post_commit import PostCommit
from carbonlite.metadata.serde import decode_actions, decode_commit_info, encode_actions
from carbonlite.metadata.snapshot import Snapshot
from carbonlite.metadata.time_travel import load_version
from carbonlite.seams import reach
from carbonlite.storage import Storage

__all__ = ["LOG_DIR", "Log", "LogListing", "Placement"]

_logger = logging.getLogger(__name__)

META_DIR = "_carbonlite"
LOG_DIR = f"{META_DIR}/log"
INDEX_SUFFIX = ".checkpoint.blocklets.arrow"
_VERSION_RE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.json$")
_UNKNOWN_STATE_TRIES = 3
"""Writes of one version (the same bytes) before its state is declared unknown."""
_REMEMBERED = 32
"""Versions whose actions a Log keeps for rebasing on a checkpoint written in the background
(one is due at least every few small commits, so a few are all it replays)."""
_RUN = 1024
"""Versions read forward before the history is looked at again (bounds what a reader far
behind holds before it knows the versions it read are the history's)."""


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
        self.post_commit = PostCommit(self)
        """The steps after each commit: its checkpoint and the pointer's move."""
        self._settled: Snapshot | None = None
        self._settled_lock = threading.Lock()
        self._recent: dict[int, list[Action]] = {}
        """Actions of the versions this Log committed or read since its newest checkpoint
        was settled: what :meth:`rebased` replays without reading them again."""

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

    def read_retained(self, version: int, snapshot: Snapshot | None) -> list[Action]:
        """:meth:`read_actions` of a version of the table's history, vouched for by a look
        after the read (``history.py``); ``FileNotFoundError`` when it is gone or below the
        floor (``clean`` removed it: a file still at its number may be a fork)."""
        actions = self.read_actions(version, snapshot)
        if not self.look().holds(version):
            raise FileNotFoundError(self.storage.uri(self.version_path(version)))
        return actions

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
        (in the table's history), ``"fork"`` (created where ``clean`` had removed the log, so
        no reader of the retained log sees it) or ``"unknown"`` (cannot be told). One look at
        the history decides (``History.place``): at or above its floor, committed (one read,
        the common case); below it, the chain of commit ids up to the floor. Nothing is
        deleted."""
        if version == 0:
            return "committed"
        history = self.look()
        verdict = history.place(version, commit_id, self._commit_info, self._version_exists)
        if not history.holds(version):
            reach("history.after_chain")
        return verdict

    def _version_exists(self, version: int) -> bool:
        return self.storage.exists(self.version_path(version))

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
        reach("history.after_list")
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
        """Write the checkpoint of ``snapshot`` (``snapshot`` must be a version of the table's
        history), move the pointer forward to it, and return ``snapshot`` rebased on the
        checkpoint's manifests (so the next checkpoint reuses them)."""
        rebased = self.write_checkpoint_document(snapshot, merge_limit=merge_limit)
        self.move_pointer(checkpoint=snapshot.version)
        return rebased

    def write_checkpoint_document(
        self, snapshot: Snapshot, *, merge_limit: int | None = MAX_COMMIT_MERGE_ENTRIES
    ) -> Snapshot:
        """The checkpoint of ``snapshot`` without the pointer move; ``snapshot`` rebased on its
        manifests (unchanged when another writer checkpointed this version first).

        Format 3: new manifests first (the entries committed since the previous checkpoint,
        and any merges), then the document that lists them. Nothing it wrote is ever deleted
        by it: a manifest it reuses that is gone stops it before the document; one it wrote
        that is gone once the document landed (``clean`` took it for debris, the writer having
        stalled past ``MANIFEST_MIN_AGE_MS``) is written again, the same bytes. Tables of
        format 1 and 2 get the checkpoint of their format (one blocklet index of every entry)
        until upgraded."""
        document_path, index_path = self.checkpoint_files(snapshot.version)
        if snapshot.metadata.format_version < MANIFEST_FORMAT_VERSION:
            document, index = encode_legacy_checkpoint(snapshot, index_path.rsplit("/", 1)[-1])
            self.storage.put_if_absent(index_path, index)  # first: the document refers to it
            self.storage.put_if_absent(document_path, document)
            return snapshot
        refs, written = plan_manifests(snapshot, self.manifests, merge_limit=merge_limit)
        for ref, data, table in written:
            self.storage.put_if_absent(self.manifest_path(ref), data)
            self.manifests.put(ref, table)
        reach("checkpoint.after_manifests")
        new = {ref.name for ref, _, _ in written}
        self._check_manifests([r for r in refs if r.name not in new], document_path)
        if not self.storage.put_if_absent(document_path, encode_checkpoint(snapshot, refs)):
            return snapshot  # checkpointed already: what was just written is left to clean
        for ref, data, _ in written:
            if not self.storage.exists(self.manifest_path(ref)):
                self.storage.put_if_absent(self.manifest_path(ref), data)
        reach("checkpoint.after_document")
        self.manifests.forget(refs)
        manifests = ManifestSet(refs, self.manifests, snapshot.physical_schema, snapshot.version)
        return snapshot.with_manifests(manifests)

    def _check_manifests(self, refs: list[ManifestRef], document_path: str) -> None:
        """Raise :class:`CorruptDataError` when a manifest a checkpoint would list again is
        gone: its state's checkpoint is older than what ``clean`` keeps."""
        for ref in refs:
            if not self.storage.exists(self.manifest_path(ref)):
                raise CorruptDataError(
                    f"manifest {ref.name} of the checkpoint this state descends from was removed "
                    "by clean (the state is older than the log retention); no checkpoint was "
                    "written, a later one will be",
                    path=self.storage.uri(document_path),
                )

    # --- the history ------------------------------------------------------------------------

    def look(self) -> History:
        """One look at the table's history (``history.py``): the floor and the newest
        checkpoint, as the pointer says now, or judged from the log when the pointer has no
        floor. :class:`TableNotFoundError` when there is no log at all."""
        pointer = Pointer.decode(self._read_pointer())
        reach("history.after_look")
        if pointer is not None and pointer.floor is not None:
            return History(pointer.floor, pointer.checkpoint)
        checkpoint = pointer.checkpoint if pointer is not None else None
        return History(self._judged_floor(), checkpoint, recorded=False)

    def _judged_floor(self) -> int:
        """The floor of a log whose pointer records none: 0 while version 0 is there (nothing
        was ever cleaned; ``clean`` deletes the oldest first), else the oldest listed checkpoint
        (``clean`` keeps one and deletes every older one)."""
        if self.storage.exists(self.version_path(0)):
            return 0
        listing = self.listing()
        if listing.checkpoints or listing.versions:
            return min(listing.checkpoints or listing.versions)
        raise TableNotFoundError(f"no CarbonLite table at {self.uri!r} (no {LOG_DIR}/ found)")

    def _read_pointer(self) -> bytes | None:
        try:
            return self.storage.read(self._pointer)
        except FileNotFoundError:
            return None

    def move_pointer(self, *, checkpoint: int | None = None, floor: int | None = None) -> None:
        """Raise the pointer's checkpoint and floor to at least these (``Storage.swap``: atomic
        against every other move, so neither ever goes back). A pointer without a floor first
        gets the one the log shows (``_judged_floor``)."""
        current = Pointer.decode(self._read_pointer())
        known = (
            current.floor
            if current is not None and current.floor is not None
            else self._judged_floor()
        )

        def change(data: bytes | None) -> bytes | None:
            old = Pointer.decode(data) or Pointer(None, None)
            new = old.moved(checkpoint=checkpoint, floor=floor, known_floor=known)
            return None if new == old else new.encode()

        self.storage.swap(self._pointer, change)

    def last_checkpoint(self) -> int | None:
        """The newest checkpoint the pointer names (None: none, or the pointer is damaged)."""
        pointer = Pointer.decode(self._read_pointer())
        return pointer.checkpoint if pointer is not None else None

    # --- snapshots ----------------------------------------------------------------------------

    def load_latest(self) -> Snapshot:
        """The newest snapshot. Raises :class:`TableNotFoundError` when there is no table, and
        :class:`CorruptDataError` when the log has a hole before its newest version."""
        # Without a usable checkpoint, opening lists the log; the listing, taken before the
        # replay, names only versions the replay must reach, unless the log has a hole.
        start, listing = self._starting_snapshot(self.look())
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

    def _starting_snapshot(self, history: History) -> tuple[Snapshot, LogListing | None]:
        """The checkpoint the pointer names, else the newest readable one at or above the
        floor, else version 0; with the listing of the log when one was needed to find it."""
        if history.checkpoint is not None:
            snapshot = self.try_read_checkpoint(history.checkpoint)
            if snapshot is not None:
                return snapshot, None
        listing = self.listing()
        for c in reversed(listing.checkpoints):
            if c != history.checkpoint and history.holds(c):
                snapshot = self.try_read_checkpoint(c)
                if snapshot is not None:
                    return snapshot, listing
        if history.floor == 0:
            try:
                return Snapshot.from_actions(self.uri, 0, self.read_actions(0, None)), listing
            except FileNotFoundError:
                pass
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
        """``snapshot`` advanced through every version committed after it (and rebased on the
        newest checkpoint this Log wrote, :meth:`rebased`)."""
        latest = start = self.rebased(snapshot)
        for latest in self.advance(start):  # noqa: B007 - the last one is the answer
            pass
        return latest

    def settled(self, checkpoint: Snapshot) -> None:
        """Keep ``checkpoint``, a state rebased on the manifests of a checkpoint this Log just
        wrote, for :meth:`rebased`."""
        with self._settled_lock:
            if self._settled is None or self._settled.version < checkpoint.version:
                self._settled = checkpoint
                self._recent = {v: a for v, a in self._recent.items() if v > checkpoint.version}

    def remember(self, version: int, actions: list[Action]) -> None:
        """Keep the actions of ``version``, a version of the history this Log committed, for
        :meth:`rebased` when its checkpoints are written in the background (the newest
        ``_REMEMBERED`` only: beyond them the versions are read again)."""
        if self.post_commit.mode != "background":
            return
        with self._settled_lock:
            if len(self._recent) >= _REMEMBERED:
                self._recent.pop(min(self._recent))
            self._recent[version] = actions

    def rebased(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with its entries up to the newest checkpoint this Log wrote taken from
        that checkpoint's manifests, the versions since replayed onto it: a writer whose
        checkpoints are written in the background takes it up on its next refresh, so it holds
        (and checkpoints) only the entries committed since. ``snapshot`` itself when there is
        nothing newer to take up, or when a version since cannot be read again."""
        with self._settled_lock:
            base = self._settled
        held = snapshot.manifests.version if snapshot.manifests is not None else -1
        if base is None or not held < base.version <= snapshot.version:
            return snapshot
        with self._settled_lock:
            recent = dict(self._recent)
        state = base
        for version in range(base.version + 1, snapshot.version + 1):
            actions = recent.get(version)
            try:
                if actions is None:
                    actions = self.read_actions(version, state)
                state = state.apply(version, actions)
            except FileNotFoundError:
                return snapshot  # cleaned away meanwhile
        return state if state.commit_id == snapshot.commit_id else snapshot

    def advance(self, snapshot: Snapshot) -> Iterator[Snapshot]:
        """The snapshot of each version of the history after ``snapshot``, in order.

        Versions are read forward while each was built on the one before (its parent commit
        id); then one look at the history judges them all (``history.py``): when the floor is
        at or below the last one read, every one is the history's and they are yielded. When it
        is above (``clean`` removed the log past them; what was read may be forks, and nothing
        after them is left), the newest checkpoint stands in for them and is yielded instead:
        the versions between are gone. A version missing between two that exist is a hole
        (:class:`CorruptDataError`); a log that vanished, :class:`TableNotFoundError`."""
        while True:
            run, missing = self._read_run(snapshot)
            try:
                history = self.look()
            except TableNotFoundError:
                raise TableNotFoundError(
                    f"the table at {self.uri!r} is gone: its log ({LOG_DIR}/) was deleted after "
                    f"this Table loaded version {snapshot.version}; nothing was written"
                ) from None
            last = run[-1] if run else snapshot
            if not history.holds(last.version):
                snapshot = self._newest_checkpoint(history, last.version)
                yield snapshot
                continue
            yield from run
            if len(run) == _RUN:
                snapshot = last
                continue
            if not missing:
                raise CorruptDataError(
                    f"version {last.version + 1} of {self.uri!r} was not built on version "
                    f"{last.version}, which the history holds: a version file was replaced. "
                    "Restore the log from a backup or copy of the table",
                    path=self.storage.uri(self.version_path(last.version + 1)),
                )
            if not self._version_exists(last.version + 2):
                return
            if self._version_exists(last.version + 1) or not self.look().holds(last.version + 1):
                # committed between the two looks, or removed by clean since the look that
                # judged the run: read on from the last version (the next look moves past it)
                snapshot = last
                continue
            raise CorruptDataError(
                f"the log of {self.uri!r} is missing version {last.version + 1}: versions "
                f"{last.version} and {last.version + 2} exist, so the file was deleted or lost. "
                "Restore it from a backup or copy of the table; until then the table cannot be "
                f"read past version {last.version} and nothing can be committed",
                path=self.storage.uri(self.version_path(last.version + 1)),
            )

    def _read_run(self, snapshot: Snapshot) -> tuple[list[Snapshot], bool]:
        """The versions after ``snapshot`` as far as each was built on the one before (at most
        ``_RUN`` of them), and whether the run ended at a missing version (else at one built
        on something else, or at the bound)."""
        run: list[Snapshot] = []
        while len(run) < _RUN:
            try:
                actions = self.read_actions(snapshot.version + 1, snapshot)
            except FileNotFoundError:
                return run, True
            if not built_on(snapshot.commit_id, actions):
                return run, False
            snapshot = self._at_checkpoint(snapshot.apply(snapshot.version + 1, actions))
            reach("log.after_read")
            run.append(snapshot)
        return run, False

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
        if checkpoint is None or (
            checkpoint.commit_id
            and snapshot.commit_id
            and checkpoint.commit_id != snapshot.commit_id
        ):
            return snapshot  # none, or of another version of that number: not this state
        return checkpoint

    def _newest_checkpoint(self, history: History, below: int) -> Snapshot:
        """The newest readable checkpoint at or above ``history``'s floor, which lies above
        version ``below``: what stands in for versions ``clean`` removed."""
        candidates = [history.checkpoint] if history.checkpoint is not None else []
        candidates += [
            c
            for c in reversed(self.listing().checkpoints)
            if history.holds(c) and c != history.checkpoint
        ]
        for c in candidates:
            checkpoint = self.try_read_checkpoint(c)
            if checkpoint is not None:
                return checkpoint
        raise CorruptDataError(
            f"version {below} of {self.uri!r}, which this Table had reached, is no longer in "
            f"the table's history (clean removed the log up to version {history.floor}), and "
            "no readable checkpoint can stand in for it; open the table again",
            path=self.storage.uri(self.version_path(below)),
        )

    def load_version(self, version: int, latest: Snapshot | None = None) -> Snapshot:
        """The snapshot at ``version`` (time travel, ``time_travel.py``); ``latest``: the
        newest snapshot the caller holds, when it has one."""
        return load_version(self, version, latest)
