"""Selective overwrites from Spark: the session's ``partitionOverwriteMode`` (with the write
option taking precedence, as for Spark's file sources) and ``replaceWhere``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("region", pa.string()), ("id", pa.int64())])
SESSION_MODE = "spark.sql.sources.partitionOverwriteMode"


def rows(regions: dict[str, range]) -> pa.Table:
    pairs = [(r, i) for r, ids in regions.items() for i in ids]
    return pa.table({"region": [p[0] for p in pairs], "id": [p[1] for p in pairs]}, SCHEMA)


def canon(t: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((r["region"], r["id"]) for r in t.to_pylist())


def frame(spark: Any, data: pa.Table) -> Any:
    return spark.createDataFrame(data.to_pylist(), "region string, id long").repartition(2)


@pytest.fixture
def session_mode(spark: Any) -> Iterator[Any]:
    """Sets the session's partitionOverwriteMode for one test, and restores it after."""
    before = spark.conf.get(SESSION_MODE)

    def set_mode(mode: str) -> None:
        spark.conf.set(SESSION_MODE, mode)

    yield set_mode
    spark.conf.set(SESSION_MODE, before)


START = rows({"eu": range(0, 6), "us": range(6, 10), "ap": range(10, 12)})
NEW_US = rows({"us": range(100, 103)})


def _partitioned(tmp_path: Path) -> str:
    path = str(tmp_path / "t")
    cl.create_table(path, SCHEMA, partition_by=["region"])
    cl.open_table(path).append(START)
    return path


@pytest.mark.parametrize(
    ("session", "option", "dynamic"),
    [
        ("dynamic", None, True),  # the session's setting is honoured
        ("dynamic", "static", False),  # the write option takes precedence ...
        ("static", "dynamic", True),  # ... either way
    ],
)
def test_partition_overwrite_mode_session_and_option(
    spark: Any,
    session_mode: Any,
    tmp_path: Path,
    session: str,
    option: str | None,
    dynamic: bool,
) -> None:
    path = _partitioned(tmp_path)
    session_mode(session)
    writer = frame(spark, NEW_US).write.format("carbonlite").mode("overwrite")
    if option is not None:
        writer = writer.option("partitionOverwriteMode", option)
    writer.save(path)
    got = canon(cl.open_table(path).to_arrow())
    if dynamic:  # only the partition written is replaced
        expected = canon(START.filter(pa.compute.field("region") != "us")) + canon(NEW_US)
    else:
        expected = canon(NEW_US)
    assert got == sorted(expected)
