"""Spark integration: the ``carbonlite`` data source (``pip install 'carbonlite[spark]'``).

    import carbonlite.spark
    carbonlite.spark.register(spark)
    df.writeStream.format("carbonlite").option("checkpointLocation", ck).start(path)

Importing ``carbonlite`` never imports pyspark; this package does, when used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["compact", "register"]


def compact(spark: Any, path: str, kind: str = "minor", **kwargs: Any) -> Any:
    """Handoff/compaction with the tasks on Spark executors (see ``carbonlite.spark.compaction``)."""
    from carbonlite.spark.compaction import compact as run

    return run(spark, path, kind, **kwargs)  # type: ignore[arg-type]


def register(spark: Any, *, filter_pushdown: bool = True) -> None:
    """Register the ``carbonlite`` data source with ``spark`` and turn on Python filter
    pushdown for the session (``filter_pushdown=False`` leaves the setting alone).

    Also lets ``df.write.format("carbonlite")`` honour the save modes ``error``/
    ``errorifexists`` (the default) and ``ignore``, which Spark refuses for Python data
    sources on its own, and makes ``outputMode("update")`` fail with a clear message.

    Known Spark 4.3 problem (docs/SPARK.md, "Known problems"): with pushdown on, a DataFrame
    that was first queried with a pushed filter keeps that filter when queried again without
    any (``df.where(...).collect(); df.collect()``). Use a fresh ``load()`` per query, or
    register with ``filter_pushdown=False``.
    """
    from carbonlite.spark.datasource import CarbonLiteDataSource
    from carbonlite.spark.patches import install_writer_patches

    spark.dataSource.register(CarbonLiteDataSource)
    if filter_pushdown:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    install_writer_patches()
