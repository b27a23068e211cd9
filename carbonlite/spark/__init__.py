"""Spark integration: the ``carbonlite`` data source (``pip install 'carbonlite[spark]'``).

    import carbonlite.spark
    carbonlite.spark.register(spark)
    df.writeStream.format("carbonlite").option("checkpointLocation", ck).start(path)

Importing ``carbonlite`` never imports pyspark; this package does, when used.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from carbonlite.spark.carbon_table import CarbonOptimizeBuilder, CarbonTable

__all__ = [
    "QUIET_LOG4J2",
    "CarbonOptimizeBuilder",
    "CarbonTable",
    "compact",
    "local_session",
    "publish",
    "register",
    "register_table",
]

QUIET_LOG4J2 = "log4j2-quiet.properties"
"""The log4j2 configuration :func:`local_session` gives Spark's JVM (next to this module)."""


def compact(spark: Any, path: str, kind: str = "minor", **kwargs: Any) -> Any:
    """Handoff/compaction with the tasks on Spark executors (see ``carbonlite.spark.compaction``)."""
    from carbonlite.spark.compaction import compact as run

    return run(spark, path, kind, **kwargs)  # type: ignore[arg-type]


def publish(
    df: Any,
    path: str,
    *,
    mode: str = "incremental",
    state: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Any:
    """Publish ``df`` into the partitioned table at ``path`` from Spark: executors write and
    hash their partitions, the driver commits the changed ones (and ``state``) in one version;
    unchanged partitions' files are discarded. ``mode="snapshot"`` also deletes the partitions
    ``df`` has no rows of. Returns a :class:`carbonlite.PublishResult` (``Table.publish``)."""
    import json
    import uuid

    from carbonlite.create import open_table
    from carbonlite.spark.publish_channel import load_result, states_option
    from carbonlite.writer.partition_rows import partition_spec
    from carbonlite.writer.publish import write_states

    table = open_table(path, storage_options=storage_options or None)
    spec = partition_spec(table.snapshot().metadata)
    states = write_states(table.storage, table.root, state, repr(table.path))
    token = uuid.uuid4().hex
    identity = [f.source for f in spec.fields if f.transform == "identity"]
    out = df.repartition(*identity) if identity else df  # a partition's rows in one task
    writer = (
        out.write.format("carbonlite")
        .mode("append")
        .option("publish", mode)
        .option("publishToken", token)
    )
    if states:
        writer = writer.option("publishState", states_option(states))
    if storage_options:
        writer = writer.option("storageOptions", json.dumps(dict(storage_options)))
    writer.save(path)
    return load_result(table, token)


def register_table(spark: Any, name: str, path: Any, **kwargs: Any) -> str:
    """Make the CarbonLite table at ``path`` the Spark catalog table ``name``: SELECT, INSERT
    INTO, ``writeTo``, ``toTable`` and ``readStream.table`` by name (see
    ``carbonlite.spark.catalog.register_table``)."""
    from carbonlite.spark.catalog import register_table as run

    return run(spark, name, path, **kwargs)


def register(spark: Any, *, filter_pushdown: bool = False) -> None:
    """Register the ``carbonlite`` data source with ``spark``, and set
    ``spark.sql.python.filterPushdown.enabled=true`` for the session, so that a read may opt in
    to filter pushdown with the option ``filterPushdown=true`` (a reader that takes no filters is
    unaffected by the setting).

    ``filter_pushdown=True`` makes pushdown the default of every batch read of the session.
    It is off by default because PySpark 4.3 reuses the reader it planned for one query's pushed
    filters in later queries of the same DataFrame that push none, and in every scan of that
    DataFrame within one query (``df.where(a).union(df.where(b))``): those read the wrong rows
    (docs/SPARK.md, "Known problems"). The option ``filter`` prunes without that problem.

    Also lets ``df.write.format("carbonlite")`` honour the save modes ``error``/
    ``errorifexists`` (the default) and ``ignore``, which Spark refuses for Python data
    sources on its own, and makes ``outputMode("update")`` fail with a clear message; a
    CarbonLite error raised inside Spark reaches the caller as itself.
    """
    from carbonlite.spark.datasource import CarbonLiteDataSource, CarbonLitePushdownDataSource
    from carbonlite.spark.patches import (
        install_error_translation,
        install_reader_patch,
        install_sql_patch,
        install_table_patch,
        install_writer_patches,
    )

    spark.dataSource.register(
        CarbonLitePushdownDataSource if filter_pushdown else CarbonLiteDataSource
    )
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    install_writer_patches()
    install_reader_patch()
    install_sql_patch()
    install_table_patch()
    install_error_translation()  # last: around the patches above


def local_session(
    master: str = "local[2]",
    *,
    app_name: str = "carbonlite",
    config: Mapping[str, str] | None = None,
) -> Any:
    """A quiet ``SparkSession`` (no UI, no progress bars, ERROR logging from the start, UTC
    session time zone, 2 shuffle partitions) with CarbonLite registered, for local work and
    tests. Spark's JVM logs with ``log4j2-quiet.properties`` (errors only), so even its
    start-up warnings stay out of the output, unless ``config`` gives
    ``spark.driver.extraJavaOptions`` with a ``log4j2.configurationFile`` of its own.

    Spark's Python workers run this interpreter unless ``PYSPARK_PYTHON`` says otherwise.
    ``config`` adds or overrides Spark settings. An active session is reused as it is
    (``getOrCreate``), apart from being registered.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        **(config or {}),
    }
    java_options = settings.get("spark.driver.extraJavaOptions", "")
    if "log4j2.configurationFile" not in java_options:
        quiet = os.path.join(os.path.dirname(os.path.abspath(__file__)), QUIET_LOG4J2)
        settings["spark.driver.extraJavaOptions"] = (
            f"{java_options} -Dlog4j2.configurationFile=file:{quiet}".strip()
        )
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
