"""Auto compaction of a partitioned stream: the Spark sink's small per-partition files
converge (``compaction/auto.py``), every row stays there once, and a streaming reader of the
table sees each row once across the compactions."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from carbonlite import open_table
from tests.spark.streams import finish, memory_name
from tests.support.spark_data import SOURCE_DDL, assert_same_rows, write_source_files

pytestmark = pytest.mark.spark

BATCHES = 8
MIN_FILES = 1
LEVELS = (2, 2)  # compaction_level_threshold: small, so that 8 batches compact minor too


def files_per_partition(path: str, *, live: bool) -> dict[Any, int]:
    """Files per partition: of the live segments, or every streaming file ever committed
    (what the table would hold without compaction)."""
    snapshot = open_table(path).snapshot()
    counts: Counter[Any] = Counter()
    for seg in snapshot.segments.values():
        if (seg in snapshot.live_segments()) if live else seg.format == "STREAMING":
            counts[seg.partition] += len(seg.files)
    return dict(counts)


def stream_into(spark: Any, source: str, table: str, ck: str) -> Any:
    return finish(
        spark.readStream.schema(SOURCE_DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(source)
        .writeStream.format("carbonlite")
        .option("checkpointLocation", ck)
        .option("partitionBy", "k")
        .option("property.auto_compaction", "true")
        .option("property.auto_compaction_min_files", str(MIN_FILES))
        .option("property.compaction_level_threshold", ",".join(map(str, LEVELS)))
        .trigger(availableNow=True)
        .start(table)
    )


@pytest.mark.slow  # 24 s of micro-batches; tests/compaction/test_auto.py covers the rule
def test_partitioned_stream_converges_and_readers_see_rows_once(
    spark: Any, tmp_path: Path, stop_queries: None
) -> None:
    source = str(tmp_path / "src")
    expected = pa.concat_tables(write_source_files(source, BATCHES, 10))
    auto = str(tmp_path / "auto")
    stream_into(spark, source, auto, str(tmp_path / "ck"))

    without = files_per_partition(auto, live=False)
    with_auto = files_per_partition(auto, live=True)
    assert set(without) == set(with_auto) and len(without) > 1
    # without it, one file per partition and micro-batch piles up
    assert max(without.values()) >= BATCHES - 2, without
    # with it: at most MIN_FILES streaming files, fewer than a level's threshold of segments
    # per level (each of one file), and the top level's
    bound = MIN_FILES + sum(n - 1 for n in LEVELS) + BATCHES // (MIN_FILES + 1) // 4
    assert max(with_auto.values()) <= bound, (with_auto, without)
    t = open_table(auto)
    assert_same_rows(t.to_arrow(), expected, context="auto-compacted table")
    operations = Counter(h.operation for h in t.history())
    assert operations["STREAMING UPDATE"] == BATCHES
    assert operations["HANDOFF"] >= 1 and operations["COMPACT"] >= 1, operations
    assert all(not h.data_change for h in t.history() if h.operation in ("HANDOFF", "COMPACT"))

    # a streaming reader from the first version reads every commit, compacted ones included
    name = memory_name()
    finish(
        spark.readStream.format("carbonlite")
        .option("startingVersion", 1)
        .option("maxFilesPerTrigger", 3)
        .load(auto)
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    seen = spark.table(name).toArrow()
    assert seen.num_rows == expected.num_rows, "a row was read twice, or missed"
    assert_same_rows(seen.select(expected.column_names), expected, context="stream read")
