"""The regression guard of the paths of ``benchmarks/bench_limits.py``: their work, counted.

Each path runs in a fresh interpreter (``benchmarks/work_counts.py``) with its storage
requests, log reads, bytes, fsyncs, opened files, decoded blocklets and CarbonLite function
calls counted per operation, and each count is held to ``benchmarks/results/work-counts.json``
within ``work_counts.TOLERANCE``. A loaded machine takes longer but does the same work, so
the verdict does not depend on the machine's speed. A path that does less work than recorded
fails too, saying so: record the improvement (``python benchmarks/work_counts.py --record``)
so that the guard holds the new level.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("work_counts", BENCHMARKS / "work_counts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("work_counts", module)
    spec.loader.exec_module(module)
    return module


work_counts = _load()
RECORDED = json.loads(work_counts.RECORD.read_text())


@pytest.mark.parametrize("path", work_counts.PATHS)
def test_a_path_does_the_work_it_is_recorded_to_do(path: str) -> None:
    got = work_counts.measure(path)
    lines = work_counts.departures(path, got["per_operation"], RECORDED["paths"][path])
    assert not lines, (
        "work per operation moved past its record (benchmarks/work_counts.py says what each "
        "count is; --record rewrites the record once the change is meant):\n"
        + "\n".join(lines)
        + "\nmost called functions per operation: "
        + json.dumps(dict(list(got["top_calls"].items())[:15]), indent=1)
    )


def test_every_path_and_count_is_recorded() -> None:
    assert set(RECORDED["paths"]) == set(work_counts.PATHS)
    for path, counts in RECORDED["paths"].items():
        assert set(counts) == set(work_counts.METRICS), path
    assert RECORDED["tolerance"] == work_counts.TOLERANCE


def test_a_count_is_held_within_its_tolerance_both_ways() -> None:
    recorded = {m: 100.0 for m in work_counts.METRICS} | {"fsyncs": 4.0}
    assert work_counts.departures("p", dict(recorded), recorded) == []
    within = dict(recorded) | {"calls": 102.0, "fsyncs": 4.5}  # 2%, and 0.5 absolute
    assert work_counts.departures("p", within, recorded) == []
    more = dict(recorded) | {"calls": 102.5, "fsyncs": 5.0}  # one more fsync per operation
    lines = work_counts.departures("p", more, recorded)
    assert len(lines) == 2 and all("more work" in line for line in lines), lines
    less = dict(recorded) | {"storage_requests": 97.5}
    assert ["less work" in line for line in work_counts.departures("p", less, recorded)] == [True]


def test_the_counters_see_a_request_that_raises_and_a_nested_one_once(tmp_path: Path) -> None:
    from carbonlite.storage.local import LocalStorage

    class Storage(LocalStorage):
        pass

    counts = work_counts.Counts()
    for name in ("read", "exists"):
        setattr(Storage, name, work_counts._counted(counts, name, getattr(LocalStorage, name)))
    nested = work_counts._counted(counts, "size", lambda self, path: self.read(path))
    storage = Storage()
    (tmp_path / "_carbonlite" / "log").mkdir(parents=True)
    version = tmp_path / "_carbonlite" / "log" / "1.json"
    version.write_bytes(b"{}")
    counts.on = True
    assert storage.read(str(version)) == b"{}"
    with pytest.raises(FileNotFoundError):
        storage.read(str(tmp_path / "missing"))
    nested(storage, str(version))  # one request, though it reads inside
    assert counts.work == {"storage_requests": 3, "log_reads": 1, "bytes_read": 2}
    counts.on = False
    storage.exists(str(version))
    assert counts.work["storage_requests"] == 3
