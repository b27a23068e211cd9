"""Runs the ``carbonlite`` command in this process and holds it at a named seam, so a crash
test's SIGKILL lands in that phase on any machine, however fast or loaded.

    python -m tests.support.held_process SEAM N -- ARGS...

runs ``carbonlite ARGS...``; the N-th time any thread reaches ``SEAM`` (``carbonlite.seams``),
it prints ``held SEAM N`` on stdout and waits on stdin forever: the test kills it there. A run
that ends before (nothing left to do) exits as the command does.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

from carbonlite.cli import main as carbonlite_main
from carbonlite.seams import listening


def wait_for_stdin_to_close() -> None:
    sys.stdin.readline()  # the test kills the process here


def hold_at(
    seam: str, nth: int, wait: Callable[[], None] = wait_for_stdin_to_close
) -> AbstractContextManager[None]:
    """A listener, installed by the returned context, holding the ``nth`` reach of ``seam``:
    it prints ``held SEAM N`` and calls ``wait`` (which the test's SIGKILL ends)."""
    count = itertools.count(1)
    lock = threading.Lock()

    def listener(name: str) -> None:
        if name != seam:
            return
        with lock:
            n = next(count)
        if n == nth:
            os.write(1, f"held {seam} {n}\n".encode())
            wait()
            os._exit(3)  # the wait ended without a kill: never go on past the hold

    return listening(listener)


def main() -> None:
    seam, nth, separator, *args = sys.argv[1:]
    if separator != "--":
        raise SystemExit("usage: python -m tests.support.held_process SEAM N -- ARGS...")
    sys.argv = ["carbonlite", *args]
    with hold_at(seam, int(nth)):
        carbonlite_main()


if __name__ == "__main__":
    main()
