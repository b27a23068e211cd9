"""Commit latency of two checkouts of CarbonLite, each against deltalake in the same run.

    git worktree add /tmp/before <commit>
    python benchmarks/compare_commit_latency.py /tmp/before . /tmp/before .

Runs section (a) of ``bench_table.py`` (1,000-row appends, 200 timed after 5 warm-up,
interleaved call by call with ``deltalake.write_deltalake``) once per checkout given, in the
order given, each in its own process with that checkout's ``carbonlite`` and benchmarks first
on ``sys.path``. Alternate the checkouts so that a change of load hits both. Prints one row per
run: p50/p99 of each side and the deltalake / ours ratio of the same run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_ONE_RUN = """
import json, sys, tempfile
from pathlib import Path
root = sys.argv[1]
sys.path[:0] = [root, root + "/benchmarks"]
import carbonlite, bench_table
assert carbonlite.__file__.startswith(root), carbonlite.__file__
with tempfile.TemporaryDirectory() as tmp:
    r = bench_table.bench_commit_latency(bench_table.FULL, Path(tmp))
print(json.dumps({k: r[k] for k in ("carbonlite", "deltalake", "p50_ratio", "p99_ratio")}))
"""


def main(roots: list[str]) -> None:
    print("| checkout | p50 ms | p99 ms | deltalake p50 ms | deltalake p99 ms | Delta / ours p50 |")
    print("|---|---:|---:|---:|---:|---:|")
    for root in roots:
        path = str(Path(root).resolve())
        out = subprocess.run(
            [sys.executable, "-c", _ONE_RUN, path], capture_output=True, text=True, check=True
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        ours, delta = r["carbonlite"], r["deltalake"]
        print(
            f"| {root} | {ours['p50_ms']:.2f} | {ours['p99_ms']:.2f} | {delta['p50_ms']:.2f} | "
            f"{delta['p99_ms']:.2f} | {r['p50_ratio']:.2f}x |"
        )


if __name__ == "__main__":
    main(sys.argv[1:] or ["."])
