"""Ingestion goes on during compaction: a writer process appends in a loop (its segments
rolling over) while this process closes segments, hands them off and compacts, again and
again. No batch is lost or duplicated, readers always see whole batches, and no compaction
fails because of the appends."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

import carbonlite as cl
from tests.support import table_worker
from tests.support.batches import PROPERTIES, SCHEMA, batch_ids, diff_rows

pytestmark = pytest.mark.slow

WANTED_BATCHES = 250


def test_handoff_and_minor_compaction_while_a_writer_appends(tmp_path: Path) -> None:
    path = tmp_path / "t"
    cl.create_table(
        path,
        SCHEMA,
        sort_columns=["value"],
        properties={
            **PROPERTIES,
            "streaming_segment_max_bytes": "32KB",
            "handoff_blocklet_rows": "100",
            "compaction_level_threshold": "4,3",
        },
    )
    stop, progress = tmp_path / "stop", tmp_path / "progress"
    proc = table_worker.spawn(
        {
            "op": "append",
            "table": str(path),
            "batches": list(range(2 * WANTED_BATCHES)),
            "writer_id": "ingest",
            "stop_file": str(stop),
            "progress_file": str(progress),
        }
    )
    rng = random.Random(7)
    t = cl.open_table(path)
    done = {"finish": 0, "handoff": 0, "minor": 0}
    created: list[str] = []
    reads = 0
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if rng.random() < 0.3 and t.finish_streaming() is not None:
                done["finish"] += 1
            result = t.handoff()
            done["handoff"] += bool(result.versions)
            created += result.segments_created
            result = t.compact("minor")
            done["minor"] += bool(result.versions)
            created += result.segments_created
            got = t.to_arrow(version=t.version)
            reads += 1
            problem = diff_rows(got, batch_ids(got))
            assert problem is None, f"version {t.version}: {problem}"
            written = len(progress.read_text()) if progress.exists() else 0
            enough_work = done["handoff"] >= 5 and done["minor"] >= 2
            # Stop once the writer went far enough *and* compaction really raced it; a fast
            # writer may finish first, then what it left is compacted in the next rounds.
            if written >= WANTED_BATCHES and (enough_work or written >= 2 * WANTED_BATCHES):
                if enough_work:
                    break
                if result.versions == () and not any(
                    s.status == "STREAMING_FINISH" for s in t.segments()
                ):
                    break
            time.sleep(0.02)
    finally:
        stop.touch()
        out = table_worker.finish(proc)
    committed = [b for b, version, skipped, error in out["results"] if version is not None]
    assert len(committed) >= WANTED_BATCHES, f"only {len(committed)} batches in 90 s"
    assert done["handoff"] >= 5 and done["minor"] >= 2, done
    levels = {int(sid.split(".")[1]) for sid in created}
    assert {0, 1} <= levels, created

    final = cl.open_table(path)
    problem = diff_rows(final.to_arrow(), committed)
    assert problem is None, problem
    # Hand off and compact what is left: still every batch exactly once.
    final.finish_streaming()
    final.handoff()
    final.compact("minor")
    assert not [s for s in final.segments() if s.status in ("STREAMING", "STREAMING_FINISH")]
    problem = diff_rows(final.to_arrow(), committed)
    assert problem is None, problem
    assert final.verify().ok
    history = final.history()
    maintenance = [h for h in history if h.operation in ("HANDOFF", "COMPACT")]
    assert all(not h.data_change for h in maintenance)
    # Appends and compactions interleaved: some compaction was planned before an append
    # that committed ahead of it.
    appends = {h.version for h in history if h.operation == "APPEND"}
    assert any(
        h.read_version is not None and any(h.read_version < v < h.version for v in appends)
        for h in maintenance
    ), "no compaction ever raced an append: the test did not test concurrency"
