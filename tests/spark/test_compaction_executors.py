"""Handoff and compaction with their tasks on Spark executors (``carbonlite.spark.compact``)
produce the same segments and the same rows as running them locally."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import carbonlite as cl
import carbonlite.spark
from tests.compaction.lifecycle import SCHEMA, canonical, make_rows, sorted_file

pytestmark = pytest.mark.spark


def _segments(t: cl.Table) -> list[tuple[str, str, int, int, str | None]]:
    return [(s.id, s.status, s.level, s.rows, s.merged_into) for s in t.segments()]


def test_spark_compact_matches_the_local_run(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "on-spark"
    t = cl.create_table(
        path,
        SCHEMA,
        sort_columns=["ts"],
        properties={"blocklet_max_rows": "500", "handoff_blocklet_rows": "1000"},
    )
    for s in range(5):
        for a in range(3):
            first = s * 3000 + a * 1000
            t.append(make_rows(range(first, first + 1000)))
        t.finish_streaming()
    t.append(make_rows(range(15_000, 15_500)))  # still streaming: left alone
    local_path = tmp_path / "local"
    shutil.copytree(path, local_path)
    local = cl.open_table(local_path)

    on_spark = carbonlite.spark.compact(spark, str(path), "handoff")
    here = local.handoff()
    assert on_spark.segments_created == here.segments_created == ("0.0", "1.0", "2.0", "3.0", "4.0")
    assert on_spark.segments_compacted == here.segments_compacted
    assert on_spark.rows == here.rows == 15_000
    t = cl.open_table(path)
    assert _segments(t) == _segments(local)
    assert canonical(t.to_arrow()).equals(canonical(local.to_arrow()))
    assert canonical(t.to_arrow()).equals(canonical(make_rows(range(15_500))))
    for sid in on_spark.segments_created:
        for rel in t.snapshot().segments[sid].files:
            assert sorted_file(t, rel)[1], f"{rel} is not sorted by ts"
    assert t.history(limit=1)[0].data_change is False

    on_spark = carbonlite.spark.compact(spark, str(path), "minor")
    here = local.compact("minor")
    assert on_spark.segments_created == here.segments_created == ("0.1",)
    t = cl.open_table(path)
    assert _segments(t) == _segments(local)
    assert canonical(t.to_arrow()).equals(canonical(local.to_arrow()))
    assert t.verify().ok

    on_spark = carbonlite.spark.compact(spark, str(path), "custom", segments=["0.1", "4.0"])
    assert on_spark.segments_created == ("0.2",)
    assert canonical(cl.open_table(path).to_arrow()).equals(canonical(make_rows(range(15_500))))
