"""Post-commit steps: what follows a commit once its fate is settled (delta-rs's post-commit
hooks; docs/LOG.md, "Writing checkpoints").

A commit is done when its version is placed in the table's history (``commit.py``). For a
version at which a checkpoint is due (``checkpoint_policy.py``) two steps follow: writing the
checkpoint (its manifests and document) and moving the pointer to it. Neither can change the
commit's outcome. Each may fail (a transient storage error, a crash, a writer stalled past
``clean``): the commit stands, opening replays a little longer, and the failure is logged and
kept (:attr:`PostCommit.failures`) as what failed, "the checkpoint of version V could not be
written" or "the pointer could not be moved to checkpoint V", never as a failed commit.

Where they run (:data:`MODES`):

- ``"background"`` (the default): on one thread per process, off the committing call's
  path; a writer that commits faster than checkpoints are written has its queue coalesced to
  its newest due version. The checkpoint's state, rebased on its manifests, is kept by the
  ``Log`` and taken up by the writer's next refresh (``Log.rebased``), so no writer's state
  grows without bound. Pending steps are finished when the interpreter exits
  (:func:`settle_all`, up to ``EXIT_WAIT_SECONDS``) and by :meth:`PostCommit.settle`.
- ``"inline"``: on the committing thread before ``commit()`` returns (so a test harness
  reaches the checkpoint's seams in the committing actor's own order).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from carbonlite.metadata.checkpoint_policy import checkpoint_due
from carbonlite.metadata.snapshot import Snapshot
from carbonlite.seams import reach

__all__ = [
    "EXIT_WAIT_SECONDS",
    "MODES",
    "CheckpointWriter",
    "PostCommit",
    "PostCommitFailure",
    "settle_all",
]

Mode = Literal["background", "inline"]
MODES: tuple[Mode, ...] = ("background", "inline")
default_mode: Mode = "background"
"""The mode of every ``Log`` made from now on (tests set ``"inline"``)."""
EXIT_WAIT_SECONDS = 30.0
"""How long the interpreter's exit waits for pending checkpoints."""
_KEPT_FAILURES = 16

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PostCommitFailure:
    """A post-commit step that failed; the commit of ``version`` stands."""

    version: int
    step: Literal["checkpoint", "pointer", "iceberg"]
    error: BaseException

    def __str__(self) -> str:
        what = {
            "checkpoint": f"the checkpoint of version {self.version} could not be written",
            "pointer": f"the pointer could not be moved to checkpoint {self.version}",
            "iceberg": f"the Iceberg metadata of version {self.version} could not be written "
            "(the next commit or sync_iceberg() catches up)",
        }[self.step]
        return f"{what} ({self.error!r}); the commit stands"


class CheckpointWriter(Protocol):
    """What the post-commit steps ask of a log (``Log`` is one)."""

    @property
    def uri(self) -> str: ...

    @property
    def storage(self) -> Any: ...

    @property
    def root(self) -> str: ...

    def rebased(self, snapshot: Snapshot) -> Snapshot: ...

    def write_checkpoint_document(self, snapshot: Snapshot) -> Snapshot: ...

    def settled(self, checkpoint: Snapshot) -> None: ...

    def move_pointer(self, *, checkpoint: int | None = None, floor: int | None = None) -> None: ...


class PostCommit:
    """The post-commit steps of one ``Log``."""

    def __init__(self, log: CheckpointWriter, mode: Mode | None = None) -> None:
        self._log = log
        self.mode: Mode = default_mode if mode is None else mode
        self.failures: list[PostCommitFailure] = []
        """The latest failures (at most 16), oldest first."""
        self._pending: Snapshot | None = None
        self._running = False
        self._idle = threading.Condition()

    def after(self, committed: Snapshot) -> Snapshot:
        """Run (inline) or schedule (background) the steps due after ``committed``, a version of
        the history; the snapshot the committer goes on with. A table with ``iceberg`` on
        gets its Iceberg metadata first, always inline: never left to a thread a process
        may exit without (Delta's UniForm lost conversions so)."""
        if committed.properties.get("iceberg", "off") != "off":
            self._publish(committed)
        if not checkpoint_due(committed):
            return committed
        if self.mode == "inline":
            return self._run(committed)
        with self._idle:
            self._pending = committed  # a newer due version replaces an older one not begun
        _worker().submit(self)
        return committed

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until no step is pending or running; False when ``timeout`` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending is None and not self._running, timeout)

    def _take(self) -> Snapshot | None:
        with self._idle:
            job, self._pending = self._pending, None
            self._running = job is not None
            return job

    def _done(self) -> None:
        with self._idle:
            self._running = False
            self._idle.notify_all()

    def _run(self, committed: Snapshot) -> Snapshot:
        """Write the checkpoint of ``committed``, then move the pointer to it: each failure
        kept and logged as what failed. Returns ``committed`` rebased on the checkpoint."""
        log = self._log
        reach("commit.before_checkpoint")
        try:
            rebased = log.write_checkpoint_document(log.rebased(committed))
        except Exception as exc:
            self._failed(PostCommitFailure(committed.version, "checkpoint", exc))
            return committed
        log.settled(rebased)
        try:
            log.move_pointer(checkpoint=committed.version)
        except Exception as exc:
            self._failed(PostCommitFailure(committed.version, "pointer", exc))
        return rebased

    def _publish(self, committed: Snapshot) -> None:
        """Write the Iceberg metadata of ``committed``; a failure is kept and logged."""
        from carbonlite.iceberg.export import export_version

        reach("commit.before_iceberg")
        try:
            export_version(self._log.storage, self._log.root, committed)
        except Exception as exc:
            self._failed(PostCommitFailure(committed.version, "iceberg", exc))

    def _failed(self, failure: PostCommitFailure) -> None:
        _logger.warning("%s: %s", self._log.uri, failure)
        self.failures = [*self.failures, failure][-_KEPT_FAILURES:]


class _Worker:
    """The one background thread of the process, serving every ``PostCommit`` in turn."""

    def __init__(self) -> None:
        self._queue: list[PostCommit] = []
        self._current: PostCommit | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, post: PostCommit) -> None:
        with self._cond:
            if post not in self._queue:
                self._queue.append(post)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="carbonlite-post-commit", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _serve(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue))
                post = self._current = self._queue.pop(0)
            job = post._take()
            try:
                if job is not None:
                    post._run(job)
            finally:
                post._done()
                with self._cond:
                    self._current = None

    def settle(self, timeout: float) -> None:
        with self._cond:
            waiting = [*self._queue, *([self._current] if self._current else [])]
        for post in waiting:
            post.settle(timeout)


_WORKER: _Worker | None = None
_WORKER_LOCK = threading.Lock()


def _worker() -> _Worker:
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None:
            _WORKER = _Worker()
        return _WORKER


def settle_all(timeout: float = EXIT_WAIT_SECONDS) -> None:
    """Finish every pending post-commit step of this process (each waited for at most
    ``timeout`` seconds)."""
    worker = _WORKER
    if worker is not None:
        worker.settle(timeout)


def _forget_in_child() -> None:
    """A forked child has no worker thread: it starts its own when it commits."""
    global _WORKER, _WORKER_LOCK
    _WORKER = None
    _WORKER_LOCK = threading.Lock()


atexit.register(settle_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
