"""Small helpers the benchmark scripts share for what they print."""

from __future__ import annotations

import os
import platform
import sys
import time
from datetime import datetime, timezone

__all__ = ["PEAK_RSS", "progress", "run_facts", "yes_no"]

_START = time.perf_counter()


def progress(message: str) -> None:
    """A progress line on stderr, with the seconds since start (stdout carries the summary)."""
    print(f"[{time.perf_counter() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


def yes_no(met: bool) -> str:
    """A target's verdict for a markdown table."""
    return "yes" if met else "**no**"


def run_facts() -> dict[str, str]:
    """When and on what a run was measured: ``date`` (UTC) and ``machine``."""
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, "
        f"Python {platform.python_version()}",
    }


PEAK_RSS = """
def peak_rss():
    # VmHWM: this process's own peak (ru_maxrss can carry the parent's over exec)
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
"""
"""Source of ``peak_rss()`` for the child scripts benchmarks run (they import ``resource``)."""
