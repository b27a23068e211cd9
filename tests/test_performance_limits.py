"""Issue 30's regression guard: ``benchmarks/bench_limits.py`` against the bars of
``benchmarks/limits_guard.py``.

The guard itself (``-m limits``) runs the whole benchmark, about 11 minutes, so it is in
neither the default tier nor the slow one: ``.ci/run`` runs it last and alone
(``python -m pytest -m limits -n 0``), because every figure is a ratio to a ceiling timed in
the same process, and a second test on the other core would load one side more than the
other. A figure past its bar is measured once more (that path only) before the test fails:
a regression fails both runs, a busy minute seldom does. The unit tests below check the
guard's arithmetic and that its bars are the runs recorded in docs/BENCHMARKS.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
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


def _measure(output: Path, only: list[str] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, str(BENCHMARKS / "bench_limits.py"), "--output", str(output)]
    if only:
        cmd += ["--only", ",".join(only)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(BENCHMARKS)])}
    log = output.with_suffix(".log")
    with log.open("w") as out:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    assert proc.returncode == 0, f"bench_limits.py failed:\n{log.read_text()[-4000:]}"
    return json.loads(output.read_text())


@pytest.mark.limits
@pytest.mark.timeout(3600)
def test_no_figure_falls_below_its_guard(tmp_path: Path) -> None:
    first = _measure(tmp_path / "limits.json")
    failing = guard.figures_past_guard(first)
    if not failing:
        return
    paths = sorted({first["figures"][name]["path"] for name in failing})
    again = _measure(tmp_path / "again.json", paths)
    still = guard.figures_past_guard({"figures": {n: again["figures"][n] for n in failing}})
    assert not still, (
        "below the regression guard twice (docs/BENCHMARKS.md, 'Performance at the limit', "
        "says what each figure measures):\n"
        + "\n".join(f"first: {line}" for line in failing.values())
        + "\n"
        + "\n".join(f"again: {line}" for line in still.values())
    )
