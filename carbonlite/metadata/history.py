"""Which log files are the table's history: one rule, in one place (docs/LOG.md, "One history").

Version files are created with put-if-absent and never rewritten; only ``clean`` deletes
them, the oldest first, below a checkpoint it keeps. A writer standing on a version ``clean``
removed can then create a version at a number ``clean`` freed: a *fork*, which no reader of
the retained log may take for the history and whose writer must not be told it committed.
Placement of a version just created, reading forward, opening, time travel, listing the
history, cleaning and checkpointing all ask one value, :class:`History`, one look at the log,
and decide by one argument:

**The floor.** The pointer document ``_carbonlite/_last_checkpoint`` holds two numbers that
only grow (every change is an atomic ``Storage.swap`` that keeps the larger of old and new):
``version``, the newest checkpoint a writer finished (where opening starts: a hint, whose
lagging costs only replay), and ``floor``: ``clean`` raises the floor to the checkpoint it
keeps *before* it deletes any log file below it. So no log file at or above the floor has
ever been deleted, and a fork, which needs its number's version deleted first, only ever lies
below the floor as it was when the fork was written. Hence, for any version file:

    read (or created) before a look whose floor is at or below its number, it is the
    history's version of that number (:meth:`History.holds`).

Below the floor the chain of commit ids decides. Each version records the commit id of the
version it was built on; one commit never creates two versions of the same number, so the
links followed down from a version the floor vouches for name exactly one file per number
(:meth:`History.place`). A checkpoint is only ever written of a version of the history (by
its committer once placed, or by ``clean`` and ``upgrade`` of the state they read), so the
checkpoint the pointer names, and any checkpoint at or above the floor, is the history's.

A pointer without a floor (written by an earlier release, or damaged, or none yet) is judged
from the log itself: version 0 still there means nothing was ever cleaned (floor 0), else the
oldest listed checkpoint is where the retained history starts (one listing, until the next
checkpoint or ``clean`` writes a pointer with a floor).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from carbonlite.metadata.actions import Action, CommitInfo

__all__ = ["History", "Placement", "Pointer", "built_on"]

Placement = Literal["committed", "fork", "unknown"]
"""Where a version a commit just created stands (``History.place``)."""


@dataclass(frozen=True, slots=True)
class Pointer:
    """The pointer document: the newest finished checkpoint and the floor."""

    checkpoint: int | None
    """The newest checkpoint a writer finished (None: none yet)."""
    floor: int | None
    """No log file at or above it was ever deleted (None: not recorded, an earlier release)."""

    def encode(self) -> bytes:
        body: dict[str, int] = {}
        if self.checkpoint is not None:
            body["version"] = self.checkpoint  # the member earlier releases read
        if self.floor is not None:
            body["floor"] = self.floor
        return json.dumps(body, separators=(",", ":")).encode()

    @staticmethod
    def decode(data: bytes | None) -> Pointer | None:
        """The pointer in ``data``; None when there is none or it does not parse (a damaged
        pointer is only a lost hint: the log is listed instead)."""
        if data is None:
            return None
        try:
            body = json.loads(data)
            checkpoint = body.get("version")
            floor = body.get("floor")
            if checkpoint is not None and (type(checkpoint) is not int or checkpoint < 0):
                return None
            if floor is not None and (type(floor) is not int or floor < 0):
                return None
        except (ValueError, TypeError, AttributeError):
            return None
        return Pointer(checkpoint, floor)

    def moved(self, *, checkpoint: int | None, floor: int | None, known_floor: int) -> Pointer:
        """This pointer with ``checkpoint`` and ``floor`` raised (never lowered); a pointer
        without a floor takes ``known_floor`` (judged from the log before the move)."""
        old_floor = self.floor if self.floor is not None else known_floor
        return Pointer(
            _max(self.checkpoint, checkpoint),
            max(old_floor, floor if floor is not None else old_floor),
        )


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass(frozen=True, slots=True)
class History:
    """One look at the log: its floor and its newest finished checkpoint, as the pointer (or,
    without a floor in it, the log itself) said at one moment."""

    floor: int
    """The oldest version of the retained history: nothing at or above it was ever deleted."""
    checkpoint: int | None
    """The newest checkpoint known (the pointer's; None: none yet)."""
    recorded: bool = True
    """Whether the floor was read from the pointer (False: judged from the log)."""

    def holds(self, version: int) -> bool:
        """Whether the file of ``version``, read (or created) before this look, is the
        history's version of that number (the module's argument)."""
        return version >= self.floor

    def place(
        self,
        version: int,
        commit_id: str,
        commit_info: Callable[[int], CommitInfo | None],
        exists: Callable[[int], bool],
    ) -> Placement:
        """Where ``version``, created by the commit ``commit_id`` before this look, stands.

        At or above the floor: committed. Below it, follow the parent links of the versions
        after it up to the floor's version, the history's (``commit_info``: a version's
        commit info, None when the file is gone; ``exists``: whether a version file is there):

        - every link holds up to the floor: committed (another writer built on it, and
          ``clean`` removed the log below them since);
        - a link names another parent, or a version after it is gone while it is still there
          (``clean`` deletes the oldest first, so had it been the history's it would have gone
          before any later one): a fork, created where ``clean`` had removed the log;
        - a version written by an earlier release (no parent recorded), or ``version`` itself
          gone meanwhile (``clean`` ran during the commit): unknown."""
        if self.holds(version):
            return "committed"
        link = commit_id
        for v in range(version + 1, self.floor + 1):
            info = commit_info(v)
            if info is None:
                return "fork" if exists(version) else "unknown"
            if not info.parent_commit_id:
                return "unknown"
            if info.parent_commit_id != link:
                return "fork"
            link = info.commit_id
        return "committed"


def built_on(commit_id: str, actions: Sequence[Action]) -> bool:
    """Whether the version whose actions are ``actions`` was built on the commit ``commit_id``
    (the link of the chain; a version of an earlier release records no parent, and a state
    of one no commit id: taken as linked)."""
    info = actions[-1] if actions else None
    parent = info.parent_commit_id if isinstance(info, CommitInfo) else ""
    return not parent or not commit_id or parent == commit_id
