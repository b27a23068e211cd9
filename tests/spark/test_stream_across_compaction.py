"""A stream that reads across handoff and compaction commits (``data_change = false``: they
rewrite rows already delivered into new segments) delivers every row exactly once.

The source table rolls a segment over at every append. A first run of the query (``availableNow``,
``maxFilesPerTrigger=1``, a CarbonLite sink with a checkpoint) delivers what is there; then
more rows are appended, the segments are closed, handed off and compacted, more rows come;
a second run from the same checkpoint must deliver exactly the new rows, none of the rewritten
ones. The sink is compared row by row with the source's appends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from carbonlite import create_table, open_table
from tests.spark.streams import data_batches, finish
from tests.support.spark_data import SOURCE_DDL, SOURCE_SCHEMA, assert_same_rows, source_rows

pytestmark = pytest.mark.spark

ROWS = 40


def run_query(spark: Any, source: str, sink: str, checkpoint: str) -> Any:
    return finish(
        spark.readStream.format("carbonlite")
        .schema(SOURCE_DDL)
        .option("maxFilesPerTrigger", 1)
        .load(source)
        .writeStream.format("carbonlite")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(sink)
    )


@pytest.mark.slow
def test_stream_delivers_each_row_once_across_handoff_and_compaction(
    spark: Any, tmp_path: Path, stop_queries: None
) -> None:
    source, sink, ck = str(tmp_path / "source"), str(tmp_path / "sink"), str(tmp_path / "ck")
    t = create_table(
        source,
        SOURCE_SCHEMA,
        sort_columns=["id"],
        properties={"streaming_segment_max_bytes": "1", "compaction_level_threshold": "4"},
    )
    # ids descending within each append: sorting by id really moves rows around.
    chunks = [source_rows(n * ROWS, ROWS)[::-1] for n in range(6)]

    for chunk in chunks[:3]:  # segments 0..2, each rolled over by its append
        t.append(chunk)
    first = run_query(spark, source, sink, ck)
    assert [p["numInputRows"] for p in data_batches(first)] == [ROWS] * 3
    assert_same_rows(open_table(sink).to_arrow(), pa.concat_tables(chunks[:3]), context="run 1")

    t.append(chunks[3])  # segment 3
    handoff = t.handoff()
    assert handoff.segments_created == ("0.0", "1.0", "2.0", "3.0")
    t.append(chunks[4])  # segment 4, between the rewrites
    minor = t.compact("minor")
    assert minor.segments_created == ("0.1",)
    t.append(chunks[5])
    t.handoff()
    assert [h.operation for h in t.history(limit=5)] == [
        "HANDOFF",
        "APPEND",
        "COMPACT",
        "APPEND",
        "HANDOFF",
    ]

    second = run_query(spark, source, sink, ck)
    assert [p["numInputRows"] for p in data_batches(second)] == [ROWS] * 3, (
        "the second run should deliver exactly the three new appends, one file per batch"
    )
    got = open_table(sink).to_arrow()
    assert got.num_rows == 6 * ROWS
    assert_same_rows(got, pa.concat_tables(chunks), context="run 2")

    # A third run after more maintenance and no new rows delivers nothing.
    assert t.compact("custom", segments=["0.1", "4.0", "5.0"]).versions
    third = run_query(spark, source, sink, ck)
    assert sum(p["numInputRows"] for p in third.recentProgress) == 0
    assert open_table(sink).count_rows() == 6 * ROWS
