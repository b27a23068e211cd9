"""Recompute the commit figures of saved ``bench_limits.py`` results from the runs they keep.

    python benchmarks/limits_recompute.py benchmarks/results/limits-run2.json ...

Used once, when the commit figures changed from "best p50 of any run against the best of any
other" to "the best run's ratio" (docs/BENCHMARKS.md, "Performance at the limit"): every run's
p50 and p99 of both sides are in the JSON, so the figures follow without measuring again. The
file is rewritten with ``commit_recomputed`` set.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench_limits import commit_figures
from limits_guard import below_guard


def recompute(path: Path) -> None:
    results = json.loads(path.read_text())
    runs = results["figures"]["commit_p50"]["detail"]["runs"]
    for f in commit_figures(runs):
        results["figures"][f.name] = f.as_json("commit")
    results["commit_recomputed"] = True
    results["below_guard"] = below_guard(results)
    path.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        recompute(Path(name))
