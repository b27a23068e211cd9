"""The bars ``benchmarks/bench_limits.py`` reports its timed ratios against
(``benchmarks/limits_guard.py``): their arithmetic, and that they are the runs recorded in
docs/BENCHMARKS.md.

The benchmark itself is run by hand: a timed ratio depends on the machine's load, so no test
runs it. The performance guard of the test suite counts work instead
(``tests/test_work_counts.py``).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
RECORDED_RUNS = [BENCHMARKS / "results" / f"limits-run{i}.json" for i in (2, 3, 4)]


def _load_guard() -> ModuleType:
    spec = importlib.util.spec_from_file_location("limits_guard", BENCHMARKS / "limits_guard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


guard = _load_guard()


def _results(**figures: tuple[float, float, str]) -> dict[str, Any]:
    return {
        "figures": {
            name: {"ratio": r, "goal": g, "better": b} for name, (r, g, b) in figures.items()
        }
    }


def test_a_figure_is_held_to_80_percent_of_its_goal() -> None:
    results = _results(fast=(0.73, 0.9, "higher"), slow=(0.71, 0.9, "higher"))
    assert list(guard.figures_past_guard(results, recorded={})) == ["slow"]
    lower = _results(tight=(1.25, 1.0, "lower"), loose=(1.26, 1.0, "lower"))
    assert list(guard.figures_past_guard(lower, recorded={})) == ["loose"]


def test_a_figure_short_of_its_goal_is_held_to_its_recorded_worst() -> None:
    recorded = {"short": 0.2, "over": 1.3, "memory": 1.6}
    results = _results(
        short=(0.17, 0.8, "higher"),  # 0.17 >= 0.8 x 0.2: where it stands
        over=(0.71, 0.9, "higher"),  # met its goal every run: the goal is its bar
        memory=(2.01, 1.0, "lower"),  # 2.01 > 1.6 / 0.8
    )
    failing = guard.figures_past_guard(results, recorded=recorded)
    assert sorted(failing) == ["memory", "over"]
    assert "recorded worst 1.6" in failing["memory"] and "goal 0.9" in failing["over"]
    assert guard.below_guard(_results(short=(0.15, 0.8, "higher")), recorded=recorded) == [
        "short: 0.15 < 0.8 x recorded worst 0.2"
    ]


def test_the_bars_are_the_worst_of_the_recorded_runs() -> None:
    runs = [json.loads(p.read_text()) for p in RECORDED_RUNS]
    names = set(runs[0]["figures"])
    assert all(set(r["figures"]) == names for r in runs), "the three runs measured other figures"
    assert all(not r["quick"] for r in runs)
    worst = {}
    for name in names:
        ratios = [r["figures"][name]["ratio"] for r in runs]
        higher = runs[0]["figures"][name]["better"] == "higher"
        worst[name] = min(ratios) if higher else max(ratios)
    assert set(guard.RECORDED) == names
    for name, value in worst.items():
        assert guard.RECORDED[name] == pytest.approx(value, rel=0.005), name
