"""The change feed as a batch read (issue 40 §4): ``spark.read.format("carbonlite")
.option("readChangeFeed", "true")`` with ``startingVersion``/``startingTimestamp`` and
``endingVersion``/``endingTimestamp`` gives exactly what ``Table.changes`` gives for the same
versions, with Delta's column names; bad ranges and options are clear errors."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


@pytest.fixture
def table(tmp_path: Path) -> cl.Table:
    """Version 1 appends 0-9, 2 deletes 0-2, 3 updates 5, 4 merges 9 and 10, 5 renames v."""
    t = cl.create_table(tmp_path / "t", SCHEMA)
    t.append(pa.table({"id": list(range(10)), "v": [f"a{i}" for i in range(10)]}, schema=SCHEMA))
    t.delete(pc.field("id") < 3)
    t.update(pc.field("id") == 5, {"v": "five"})
    t.merge(pa.table({"id": [9, 10], "v": ["nine", "ten"]}, schema=SCHEMA), ["id"])
    return t


def keyed(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(version, change type, id, v, commit time in ms) of each row, sorted."""

    def ms(when: datetime.datetime) -> int:
        aware = when if when.tzinfo else when.replace(tzinfo=datetime.UTC)
        return round(aware.timestamp() * 1000)

    return sorted(
        (r["_commit_version"], r["_change_type"], r["id"], r["v"], ms(r["_commit_timestamp"]))
        for r in rows
    )


def spark_changes(spark: Any, path: Any, **options: Any) -> list[Any]:
    reader = spark.read.format("carbonlite").option("readChangeFeed", "true")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(str(path)).collect()


def iso_utc(when: datetime.datetime) -> str:
    """``when`` as the option takes it: ISO 8601, UTC, no offset."""
    aware = when if when.tzinfo else when.replace(tzinfo=datetime.UTC)
    return aware.astimezone(datetime.UTC).replace(tzinfo=None).isoformat()


@pytest.mark.parametrize(("start", "end"), [(0, None), (1, 4), (2, 3), (4, 4)])
def test_versions_read_what_table_changes_gives(
    spark: Any, table: cl.Table, start: int, end: int | None
) -> None:
    options = {"startingVersion": start} | ({} if end is None else {"endingVersion": end})
    got = spark_changes(spark, table.path, **options)
    expected = table.changes(start, end)
    assert expected.num_rows
    assert keyed([r.asDict() for r in got]) == keyed(expected.to_pylist())
    types = {r["_change_type"] for r in got}
    if start <= 4 and (end is None or end >= 4):
        assert {"update_preimage", "update_postimage"} <= types


def test_timestamps_name_the_versions(spark: Any, table: cl.Table) -> None:
    """The versions ``Table.changes`` reads for the same times (commits within one
    millisecond share a time: then both are in)."""
    history = {r.version: r.timestamp for r in cl.open_table(table.path).history()}
    start, end = iso_utc(history[2]), iso_utc(history[3])
    got = spark_changes(spark, table.path, startingTimestamp=start, endingTimestamp=end)
    expected = table.changes(history[2], history[3])
    assert {2, 3} <= {r["_commit_version"] for r in got}
    assert keyed([r.asDict() for r in got]) == keyed(expected.to_pylist())


def test_the_end_versions_schema_and_a_projection(spark: Any, table: cl.Table) -> None:
    table.rename_column("v", "w")
    df = (
        spark.read.format("carbonlite")
        .option("readChangeFeed", "true")
        .option("startingVersion", 3)
        .load(str(table.path))
    )
    assert df.columns == ["id", "w", "_change_type", "_commit_version", "_commit_timestamp"]
    got = sorted((r["_commit_version"], r["_change_type"], r["w"]) for r in df.collect())
    assert (3, "update_postimage", "five") in got
    old = (
        spark.read.format("carbonlite")
        .option("readChangeFeed", "true")
        .option("startingVersion", 3)
        .option("endingVersion", 3)
        .load(str(table.path))
    )
    assert "v" in old.columns  # the end version's names
    picked = old.select("id", "_change_type").where("_change_type = 'update_postimage'").collect()
    assert [(r["id"], r["_change_type"]) for r in picked] == [(5, "update_postimage")]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs startingVersion or startingTimestamp"),
        ({"startingVersion": 3, "endingVersion": 1}, "start_version <= end_version"),
        ({"startingVersion": 1, "startingTimestamp": "2026-01-01"}, "not both"),
        ({"startingVersion": 1, "versionAsOf": 2}, "versionAsOf does not apply"),
        ({"startingVersion": 1, "filter": "id > 1"}, "filter the DataFrame"),
        ({"startingVersion": "one"}, "startingVersion"),
        ({"startingVersion": 99}, "99"),
    ],
)
def test_bad_ranges_are_clear_errors(
    spark: Any, table: cl.Table, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(Exception, match=message) as caught:
        spark_changes(spark, table.path, **options)
    text = f"{type(caught.value).__name__}: {caught.value}"
    assert any(name in text for name in ("InvalidOptionError", "VersionNotFoundError")), text


def test_range_options_without_read_change_feed_are_refused(spark: Any, table: cl.Table) -> None:
    with pytest.raises(Exception, match="readChangeFeed"):
        spark.read.format("carbonlite").option("startingVersion", 1).load(str(table.path)).collect()
