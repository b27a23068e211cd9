"""Stale actors: work that began during a scenario's set-up and is held at its first seam.

A writer that read the log long ago and has not yet put its version (a long data write, a
pause of its process) is the actor the fork guard exists for. A scenario makes one by starting
the actor's work on a thread of its own during the set-up, holding it at the first seam it
reaches (``append.after_data`` for an append) while the set-up commits past it, and then, when
the schedule starts the actor, handing that thread to the schedule
(tests/support/interleave.py): from its next seam on it pauses and resumes as the actor.

Usage::

    parker = Parker()
    with listening(parker.listener):       # during the set-up only
        parked = parker.park("s0", body)   # returns once body is held (or done)
        ...                                # the set-up commits on
    actor = Actor("s0", parked.resume)     # run by the schedule
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from carbonlite import seams

PARK_TIMEOUT = 60.0
"""Seconds the set-up waits for a parked body to reach its first seam."""


@dataclass
class Parked:
    """A body held at its first seam, on its own thread (named ``actor-<name>``, as the
    schedule names its actors' threads, so storage faults meant for the actor strike it)."""

    name: str
    thread: threading.Thread
    go: threading.Event = field(default_factory=threading.Event)
    held: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    seam: str | None = None
    result: Any = None
    error: BaseException | None = None

    def resume(self) -> Any:
        """Run on the schedule's actor thread: adopt the parked thread as this actor's, let it
        go on, wait for its end, and return or raise what it did."""
        adopted = None if self.done.is_set() else _adopt(self.thread)
        self.go.set()
        self.thread.join()
        if adopted is not None:
            adopted.pop(self.thread.ident, None)  # a dead thread's id may be reused
        if self.error is not None:
            raise self.error
        return self.result

    def release(self) -> None:
        """Let the body go on without a schedule (a set-up that failed)."""
        self.go.set()


class Parker:
    """Holds the bodies it started at their first seam; every other thread passes."""

    def __init__(self) -> None:
        self.parked: dict[int, Parked] = {}
        self.lock = threading.Lock()

    def listener(self, name: str) -> None:
        with self.lock:
            parked = self.parked.get(threading.get_ident())
        if parked is None or parked.held.is_set():
            return
        parked.seam = name
        parked.held.set()
        parked.go.wait()

    def park(self, name: str, body: Callable[[], Any]) -> Parked:
        """Start ``body`` and return once it is held at its first seam (or finished)."""

        def run() -> None:
            with self.lock:
                self.parked[threading.get_ident()] = parked
            try:
                parked.result = body()
            except BaseException as exc:
                parked.error = exc
            finally:
                parked.done.set()
                parked.held.set()

        parked = Parked(name, threading.Thread(target=run, name=f"actor-{name}", daemon=True))
        parked.thread.start()
        if not parked.held.wait(PARK_TIMEOUT):
            raise RuntimeError(f"{name} reached no seam within {PARK_TIMEOUT:.0f} s")
        return parked

    def release_all(self) -> None:
        for parked in list(self.parked.values()):
            parked.release()


def _adopt(thread: threading.Thread) -> dict[int, Any] | None:
    """Make the running schedule treat ``thread`` as the calling actor's own thread: its seams
    pause and resume this actor (the map is returned, to forget the thread once it ended).
    The schedule's listener is the bound method of its runner
    (``tests/support/interleave.py``, ``_Runner.listener``), whose ``by_thread`` maps a
    thread to its actor's slot."""
    runner = getattr(seams._listener, "__self__", None)
    by_thread = getattr(runner, "by_thread", None)
    if by_thread is None or thread.ident is None:
        return None  # no schedule: the thread runs unpaused
    by_thread[thread.ident] = by_thread[threading.get_ident()]
    return by_thread
