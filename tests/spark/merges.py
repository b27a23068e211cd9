"""What the merge tests from Spark share."""

from __future__ import annotations

from typing import Any

import carbonlite as cl
from carbonlite.spark.merge_builder import CarbonMergeBuilder


def upsert(spark: Any, table: cl.Table, source: Any, condition: Any = "t.id = s.id") -> Any:
    """Merge ``source`` (aliased ``s``) into ``table`` (aliased ``t``) on ``condition``,
    updating every matched row and inserting the others; the result row as a dict."""
    return (
        CarbonMergeBuilder(spark, table, source.alias("s"), condition, alias="t")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
        .collect()[0]
        .asDict()
    )
