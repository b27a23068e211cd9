"""Leases: intent records that protect files written ahead of their commit.

``recover`` deletes files no version references once they are older than ``min_age``. Age
alone cannot protect a slow writer (a compaction that runs longer than ``min_age``, a Spark
driver that commits late), and a delete landing between a writer's last check of its files
and its commit would leave the log pointing at nothing. So a writer whose files no writer
lock guards (compaction outputs, Spark task files, every writer on an object store) takes a
lease before it writes them:

1. The lease is a small JSON record ``_carbonlite/leases/<id>.json`` naming the files it
   covers (path prefixes, or file-name prefixes in any directory) and when it expires. A
   heartbeat thread renews it every third of its term while the writer works.
2. ``recover`` lists the files, then the leases, then reads the log (in that order), and
   never deletes a file a live lease covers. A file written under a lease was listed after
   the lease was created; if the lease is gone by the time recover lists leases, its writer
   released it after committing, and the log recover reads next references the file.
3. Right before committing, the writer checks that its lease still has at least a third of
   its term left (:meth:`Lease.check`); if renewals failed, it gives up with a
   :class:`CommitConflictError` instead of committing files recover may have deleted.

The one assumption is the usual one of leases: a commit finishes within a third of the
term (``DEFAULT_LEASE_SECONDS / 3``, over three minutes) of that check.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from carbonlite.errors import CommitConflictError, CommitStateUnknownError
from carbonlite.seams import reach
from carbonlite.storage import TEMP_PREFIX, FileStatus, Storage

__all__ = ["DEFAULT_LEASE_SECONDS", "LEASE_DIR", "Lease", "LeaseRecord", "read_leases"]

_logger = logging.getLogger(__name__)

LEASE_DIR = "_carbonlite/leases"
DEFAULT_LEASE_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """One lease as stored."""

    lease_id: str
    owner: str
    """What holds it (for people reading the directory): "handoff", "spark batch 7", ..."""
    paths: tuple[str, ...]
    """Path prefixes (relative to the table root) of the files it covers."""
    names: tuple[str, ...]
    """File-name prefixes it covers, in any directory."""
    expires_ms: int

    def covers(self, rel: str) -> bool:
        name = rel.rsplit("/", 1)[-1]
        return rel.startswith(self.paths) or name.startswith(self.names)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "lease_id": self.lease_id,
                "owner": self.owner,
                "paths": list(self.paths),
                "names": list(self.names),
                "expires_ms": self.expires_ms,
            }
        ).encode("utf-8")


def _now_ms() -> int:
    return int(time.time() * 1000)


def read_leases(storage: Storage, root: str) -> tuple[list[LeaseRecord], list[FileStatus]]:
    """(every readable lease, the records that do not parse)."""
    leases: list[LeaseRecord] = []
    unreadable: list[FileStatus] = []
    for status in storage.list(storage.join(root, LEASE_DIR)):
        if status.path.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
            # a record never renamed into place: its writer died inside acquire(), before
            # writing any file the lease would cover (recover deletes it as a stray)
            continue
        try:
            obj = json.loads(storage.read(status.path))
            leases.append(
                LeaseRecord(
                    lease_id=str(obj["lease_id"]),
                    owner=str(obj.get("owner", "")),
                    paths=tuple(str(p) for p in obj.get("paths", ())),
                    names=tuple(str(n) for n in obj.get("names", ())),
                    expires_ms=int(obj["expires_ms"]),
                )
            )
        except FileNotFoundError:
            continue  # released while listing
        except (ValueError, KeyError, TypeError):
            unreadable.append(status)
    return leases, unreadable


class Lease:
    """A held lease; use as a context manager around writing files and committing them."""

    def __init__(
        self,
        storage: Storage,
        root: str,
        *,
        owner: str,
        paths: Sequence[str] = (),
        names: Sequence[str] = (),
        seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self._storage = storage
        self._seconds = seconds
        self._record = LeaseRecord(uuid.uuid4().hex, owner, tuple(paths), tuple(names), 0)
        self._path = storage.join(root, LEASE_DIR, f"{self._record.lease_id}.json")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._released = False

    @property
    def record(self) -> LeaseRecord:
        return self._record

    def acquire(self) -> Lease:
        """Write the record and start the heartbeat (once: a held lease is left as it is)."""
        if self._thread is not None:
            return self
        self._renew()
        reach("lease.after_take")
        self._thread = threading.Thread(
            target=self._heartbeat,
            name=f"carbonlite-lease-{self._record.lease_id[:8]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def _renew(self) -> None:
        with self._lock:
            record = LeaseRecord(
                self._record.lease_id,
                self._record.owner,
                self._record.paths,
                self._record.names,
                _now_ms() + int(self._seconds * 1000),
            )
            self._storage.put(self._path, record.to_json())
            self._record = record

    def _heartbeat(self) -> None:
        while not self._stop.wait(self._seconds / 3):
            try:
                self._renew()
            except Exception as exc:  # check() refuses the commit once the term runs low
                _logger.warning("could not renew lease %s: %s", self._path, exc)

    def check(self) -> None:
        """Raise :class:`CommitConflictError` unless the lease has a third of its term left."""
        left_ms = self._record.expires_ms - _now_ms()
        if left_ms < self._seconds * 1000 / 3:
            raise CommitConflictError(
                f"the lease protecting this commit's files ({self._path}) was not renewed in "
                f"time ({max(left_ms, 0) / 1000:.0f} s left), so recover may have removed them; "
                "nothing was committed, write again"
            )

    def release(self, *, keep_record: bool = False) -> None:
        """Stop renewing and delete the record; ``keep_record`` leaves it to expire (when a
        commit's outcome is unknown, its files must outlive a version landing late). Only the
        first call acts."""
        if self._released:
            return
        self._released = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if keep_record:
            return
        try:
            self._storage.delete(self._path)
        except OSError as exc:  # it expires on its own; recover removes it then
            _logger.warning("could not release lease %s: %s", self._path, exc)

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release(keep_record=isinstance(exc, CommitStateUnknownError))
