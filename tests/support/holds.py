"""Forced orders by hand: hold a chosen thread at a chosen seam until the test releases it.

The interleaving harness (``interleave.py``) explores orders; a test that replays one reported
order step by step reads better with explicit holds::

    holds = Holds()
    with listening(holds.listener):
        s1 = holds.at("s1", "commit.before_put")
        thread = holds.start("s1", lambda: stale.append(rows))
        s1.wait()          # s1 stands before its put
        ...                # other actors act, on this thread
        s1.release()
        thread.join()

A hold catches the next time its thread reaches its seam after it was set; each hold fires
once. Threads without a hold pass every seam.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WAIT_SECONDS = 60.0
"""How long a test waits for a thread to reach its seam (a verdict on the protocol: it never
gets there), not a timing assumption."""


@dataclass
class Hold:
    thread: str
    seam: str
    arrived: threading.Event = field(default_factory=threading.Event)
    go: threading.Event = field(default_factory=threading.Event)

    def wait(self) -> None:
        if not self.arrived.wait(WAIT_SECONDS):
            raise AssertionError(f"{self.thread} never reached {self.seam}")

    def wait_unless_done(self, thread: threading.Thread) -> bool:
        """Wait until the thread reaches the seam (True) or ends without reaching it (False)."""
        deadline = time.monotonic() + WAIT_SECONDS
        while not self.arrived.wait(0.01):
            if not thread.is_alive():
                return self.arrived.is_set()
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.thread} neither reached {self.seam} nor ended")
        return True

    def release(self) -> None:
        self.go.set()


@dataclass
class Outcome:
    result: Any = None
    error: BaseException | None = None


class Holds:
    def __init__(self) -> None:
        self._holds: list[Hold] = []
        self._lock = threading.Lock()
        self.outcomes: dict[str, Outcome] = {}

    def at(self, thread: str, seam: str) -> Hold:
        hold = Hold(thread, seam)
        with self._lock:
            self._holds.append(hold)
        return hold

    def listener(self, name: str) -> None:
        me = threading.current_thread().name
        with self._lock:
            hold = next((h for h in self._holds if h.thread == me and h.seam == name), None)
            if hold is not None:
                self._holds.remove(hold)
        if hold is not None:
            hold.arrived.set()
            hold.go.wait()

    def start(self, name: str, run: Callable[[], Any]) -> threading.Thread:
        """Run ``run`` on a thread called ``name``; its result or error lands in
        ``outcomes[name]``."""
        outcome = self.outcomes[name] = Outcome()

        def body() -> None:
            try:
                outcome.result = run()
            except BaseException as exc:
                outcome.error = exc

        thread = threading.Thread(target=body, name=name, daemon=True)
        thread.start()
        return thread
