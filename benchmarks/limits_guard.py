"""The regression guard of ``bench_limits.py``: which figures fell below 80% of their goal.

    from limits_guard import below_guard
    failing = below_guard(json.loads(Path("benchmarks/results/limits.json").read_text()))

A figure is ``{"ratio": r, "goal": g, "better": "higher" | "lower"}``. A ``higher`` figure
fails the guard when ``r < share * g``; a ``lower`` one (a memory multiple, p99 over p50)
when ``r > g / share``. ``share`` is 0.8 by default: a margin for the noise of a small,
shared machine, so the guard catches regressions, not a busy minute.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GUARD_SHARE", "below_guard"]

GUARD_SHARE = 0.8


def below_guard(results: dict[str, Any], share: float = GUARD_SHARE) -> list[str]:
    """One line per figure of ``results["figures"]`` past the guard (empty when all pass)."""
    failing = []
    for name, figure in results["figures"].items():
        ratio, goal, better = figure["ratio"], figure["goal"], figure["better"]
        if better == "higher" and not ratio >= share * goal:
            failing.append(f"{name}: {ratio:.3g} < {share:g} x goal {goal:g}")
        elif better == "lower" and not ratio <= goal / share:
            failing.append(f"{name}: {ratio:.3g} > goal {goal:g} / {share:g}")
        elif better not in ("higher", "lower"):
            raise ValueError(f"figure {name!r}: better must be 'higher' or 'lower', not {better!r}")
    return failing
