"""Spark reads a table with bloom filters (docs/FILTERS.md, "Bloom filters"): lookups with
filter pushdown opted in give exactly the rows a Python read gives, and plan through the same
planner (the scan's splits are the ones ``plan_splits`` keeps after the bloom filters).

The table is tests/engines/test_bloom_engines.py's: 16 blocklets whose ``k`` values are
shuffled, so min/max cannot prune and only the bloom filters can."""

from __future__ import annotations

from typing import Any

import pyarrow.compute as pc
import pytest

import carbonlite as cl
from tests.engines.test_bloom_engines import ABSENT, PRESENT, make_table

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
]  # Polars, DuckDB and Flight cover the default tier


@pytest.fixture(scope="module")
def lookups(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("bloom-spark") / "lookups"
    make_table(path)
    return str(path)


def pushdown_read(spark: Any) -> Any:
    return spark.read.format("carbonlite").option("filterPushdown", "true")


def optimized_plan(df: Any) -> str:
    return str(df._jdf.queryExecution().optimizedPlan().toString())


def test_spark_lookups_are_exact_with_bloom_pruning(spark: Any, lookups: str) -> None:
    table = cl.open_table(lookups)
    everything = table.to_arrow()
    for v in (PRESENT[2], ABSENT[1]):
        df = pushdown_read(spark).load(lookups).where(f"k = {v}")  # a fresh DataFrame each
        assert "Filter" not in optimized_plan(df), "Spark kept the filter: it was not pushed"
        got = sorted(r["id"] for r in df.select("id").collect())
        want = everything.filter(pc.field("k") == v).column("id").to_pylist()
        assert got == sorted(want), v
        plan = table.plan_splits(filter=pc.field("k") == v)
        assert plan.blocklets_pruned_by_stats == 0
        assert plan.blocklets_pruned_by_bloom >= plan.blocklets_total - 1, plan
