"""Auto compaction (``compaction/auto.py``) through the Spark sinks' own core path, without
Spark: many commits of one task's per-partition files (``driver.commit_parts``) keep the
files per partition bounded, every row stays there once, and the change feed shows each row
inserted once."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.compaction.auto import auto_compact, crowded_streaming_segments
from carbonlite.driver import commit_parts, plan_write
from carbonlite.metadata import TxnMarker
from carbonlite.writer.distributed import write_partitioned_part

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])
ROWS, PARTS, MIN_FILES = 6, 3, 2


def micro_batches(table: cl.Table, first: int, count: int) -> None:
    """``count`` micro-batches as the Spark sink commits them: one new file per partition."""
    for b in range(first, first + count):
        plan = plan_write(table, overwrite=False)
        ids = list(range(b * ROWS, (b + 1) * ROWS))
        batch = pa.record_batch({"id": ids, "part": [f"p{i % PARTS}" for i in ids]}, SCHEMA)
        files = write_partitioned_part(
            plan, [batch], tag="q", partition=0, attempt=0, app_id="q", batch_id=b
        )
        commit_parts(
            plan,
            [None],
            txn=TxnMarker("q", b),
            operation="STREAMING UPDATE",
            parameters={},
            writer_id="q-driver",
            partitioned=files,
        )


def live_files(table: cl.Table) -> dict[Any, int]:
    counts: Counter[Any] = Counter()
    for seg in table.refresh().snapshot().live_segments():
        counts[seg.partition] += len(seg.files)
    return dict(counts)


@pytest.mark.parametrize("auto", [False, True])
def test_micro_batches_converge_with_auto_compaction(mem_uri: str, auto: bool) -> None:
    props = {
        "auto_compaction": str(auto).lower(),
        "auto_compaction_min_files": str(MIN_FILES),
        "compaction_level_threshold": "2,2",
    }
    t = cl.create_table(mem_uri, SCHEMA, partition_by=["part"], properties=props)
    batches = 20
    micro_batches(t, 0, batches)
    files = live_files(t)
    assert len(files) == PARTS
    if auto:  # MIN_FILES streaming files, one segment below each level's threshold, the top's
        assert max(files.values()) <= MIN_FILES + 1 + 1 + batches // (MIN_FILES + 1) // 4
        ops = Counter(h.operation for h in t.history())
        assert ops["HANDOFF"] and ops["COMPACT"] and ops["FINISH STREAMING"], ops
        assert all(
            not h.data_change
            for h in t.history()
            if h.operation != "STREAMING UPDATE" and h.operation != "CREATE TABLE"
        )
    else:
        assert max(files.values()) == batches
    got = sorted(t.to_arrow().column("id").to_pylist())
    assert got == list(range(batches * ROWS))
    feed = t.changes(1)
    inserted = feed.filter(pc.field("_change_type") == "insert").column("id").to_pylist()
    assert sorted(inserted) == got, "the change feed must show each row inserted once"
    assert feed.num_rows == len(inserted)


def test_auto_compaction_only_acts_on_crowded_segments(mem_uri: str) -> None:
    t = cl.create_table(
        mem_uri,
        SCHEMA,
        partition_by=["part"],
        properties={"auto_compaction": "false", "auto_compaction_min_files": str(MIN_FILES)},
    )
    micro_batches(t, 0, MIN_FILES + 1)
    snapshot = t.refresh().snapshot()
    crowded = crowded_streaming_segments(snapshot)
    assert len(crowded) == PARTS
    # the property is off: nothing happens
    result, after = auto_compact(t.log, snapshot, storage_options={})
    assert result.versions == () and after.version == snapshot.version
    t.set_properties({"auto_compaction": "true"})
    result, after = auto_compact(t.log, t.refresh().snapshot(), storage_options={})
    assert sorted(result.closed) == sorted(crowded) and len(result.versions) == 2
    assert crowded_streaming_segments(after) == ()
    assert {s.status for s in after.segments.values() if s.segment_id in crowded} == {"COMPACTED"}
