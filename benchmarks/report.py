"""Small helpers the benchmark scripts share for what they print."""

from __future__ import annotations

import sys
import time

__all__ = ["progress", "yes_no"]

_START = time.perf_counter()


def progress(message: str) -> None:
    """A progress line on stderr, with the seconds since start (stdout carries the summary)."""
    print(f"[{time.perf_counter() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


def yes_no(met: bool) -> str:
    """A target's verdict for a markdown table."""
    return "yes" if met else "**no**"
