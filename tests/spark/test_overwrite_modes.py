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


@pytest.mark.slow
def test_catalog_routes_dynamic_is_refused_by_spark_static_replaces_all(
    spark: Any, session_mode: Any, tmp_path: Path
) -> None:
    """What docs/SPARK.md says of insertInto / INSERT OVERWRITE on a registered table: Spark
    4.3 refuses a dynamic overwrite of a Python data source's table before CarbonLite runs;
    a static one reaches the sink and replaces every partition."""
    import carbonlite.spark

    path = _partitioned(tmp_path)
    name = f"ow_{tmp_path.name[-12:].replace('-', '_')}"
    carbonlite.spark.register_table(spark, name, path)
    try:
        session_mode("dynamic")
        with pytest.raises(Exception, match="does not support dynamic overwrite"):
            frame(spark, NEW_US).write.insertInto(name, overwrite=True)
        assert canon(cl.open_table(path).to_arrow()) == canon(START)
        session_mode("static")
        frame(spark, NEW_US).write.insertInto(name, overwrite=True)
        assert canon(cl.open_table(path).to_arrow()) == canon(NEW_US)
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


# --- replaceWhere -----------------------------------------------------------------------------

DAYS = pa.schema([("day", pa.date32()), ("id", pa.int64()), ("v", pa.string())])
JANUARY = "day >= '2026-01-01' AND day < '2026-02-01'"


def days(pairs: list[tuple[str, int]], tag: str) -> pa.Table:
    import datetime

    return pa.table(
        {
            "day": [datetime.date.fromisoformat(d) for d, _ in pairs],
            "id": [i for _, i in pairs],
            "v": [f"{tag}{i}" for _, i in pairs],
        },
        DAYS,
    )


def day_rows(t: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((str(r["day"]), r["id"], r["v"]) for r in t.to_pylist())


OLD = days(
    [("2025-12-31", 1), ("2026-01-01", 2), ("2026-01-15", 3), ("2026-01-31", 4), ("2026-02-01", 5)],
    "old",
)
NEW = days([("2026-01-02", 10), ("2026-01-20", 11)], "new")


def day_frame(spark: Any, data: pa.Table) -> Any:
    return spark.createDataFrame(data.to_pylist(), "day date, id long, v string").repartition(2)


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "by-month"])
def test_replace_where_replaces_the_matching_rows_in_one_version(
    spark: Any, tmp_path: Path, partitioned: bool
) -> None:
    path = str(tmp_path / "t")
    # partitioned by month: January's partition matches wholly, the others not at all;
    # unpartitioned: one file whose rows match partly (deletion vectors)
    cl.create_table(path, DAYS, partition_by=["month(day)"] if partitioned else [])
    before = cl.open_table(path).append(OLD).version
    (
        day_frame(spark, NEW)
        .write.format("carbonlite")
        .mode("overwrite")
        .option("replaceWhere", JANUARY)
        .save(path)
    )
    t = cl.open_table(path)
    assert t.version == before + 1, "the deletes and the inserts are one version"
    january = [r for r in day_rows(OLD) if r[0].startswith("2026-01")]
    kept = [r for r in day_rows(OLD) if r not in january]
    assert day_rows(t.to_arrow()) == sorted(kept + day_rows(NEW))
    feed = t.changes(t.version)
    deleted = feed.filter(pa.compute.field("_change_type") == "delete")
    inserted = feed.filter(pa.compute.field("_change_type") == "insert")
    assert day_rows(deleted.select(DAYS.names)) == january
    assert day_rows(inserted.select(DAYS.names)) == day_rows(NEW)
    assert t.history(1)[0].parameters["replaceWhere"] == JANUARY


def test_replace_where_refuses_rows_outside_the_predicate(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    cl.create_table(path, DAYS)
    version = cl.open_table(path).append(OLD).version
    stray = pa.concat_tables([NEW, days([("2026-03-01", 12)], "new")])
    with pytest.raises(cl.ReplaceWhereMismatchError) as info:
        (
            day_frame(spark, stray)
            .write.format("carbonlite")
            .mode("overwrite")
            .option("replaceWhere", JANUARY)
            .save(path)
        )
    assert "2026-03-01" in str(info.value) and "must all match" in str(info.value)
    t = cl.open_table(path)
    assert t.version == version and day_rows(t.to_arrow()) == day_rows(OLD)


def test_replace_where_option_errors(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    cl.create_table(path, DAYS)
    cl.open_table(path).append(OLD)
    for mode, predicate, needle in [
        ("append", JANUARY, "needs mode\\('overwrite'\\)"),
        ("overwrite", "day >= ", "expected a literal"),
        ("overwrite", "nope = 1", "does not have"),
    ]:
        with pytest.raises(Exception, match=needle):
            day_frame(spark, NEW).write.format("carbonlite").mode(mode).option(
                "replaceWhere", predicate
            ).save(path)
    assert day_rows(cl.open_table(path).to_arrow()) == day_rows(OLD)
