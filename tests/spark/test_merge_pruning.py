"""Merge, delete and update from Spark read only the target rows they can touch (issue 40 §2:
carbonlite/writer/touched.py; ``CarbonMergeBuilder._touched``, ``condition_touched``):
results equal ``Table.merge``/``delete`` on a twin, and the job the driver planned is
counted (its blocklets, its filter, its keys), never timed. Where pruning would be unsafe (a
not-matched-by-source clause, a source that is not deterministic, keys of other types, a
condition Spark reads otherwise) the whole target is read and the result is still right."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

import carbonlite as cl
import carbonlite.spark.merge_builder
from carbonlite.spark.merge_builder import CarbonMergeBuilder, matched_keys
from carbonlite.spark.row_change_job import delete_rows, unqualified, update_rows
from carbonlite.writer.distributed_changes import ChangeJob
from tests.spark.merges import upsert

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("k", pa.string())])
DDL = "id long, v long, k string"
ROWS = 60
BLOCKLETS = 6


def make(path: Path) -> cl.Table:
    """``ROWS`` rows in blocklets of 10, ``id`` sorted."""
    t = cl.create_table(path, SCHEMA, properties={"blocklet_max_rows": "10"})
    ids = list(range(ROWS))
    t.append(pa.table({"id": ids, "v": ids, "k": [f"k{i % 4}" for i in ids]}, schema=SCHEMA))
    return t


def content(path: Path | str) -> list[tuple[Any, ...]]:
    rows = [tuple(r.values()) for r in cl.open_table(path).to_arrow().to_pylist()]
    return sorted(rows, key=lambda r: [(v is None, v) for v in r])


@pytest.fixture(autouse=True)
def on_executors(merge_on_executors: None) -> None:
    """Every merge here runs on the executors, where the job the driver plans is counted
    (tests/spark/test_merge_on_driver.py tests the other route)."""


def blocklets(job: ChangeJob) -> int:
    return sum(len(s.blocklets) for group in job.groups for s in group)


SOURCE = [(12, -12, "x"), (13, -13, "x"), (47, -47, "x"), (100, 100, "new"), (None, 7, "null")]


def twin_merge(twin: cl.Table) -> cl.MergeResult:
    src = pa.table(
        {"id": [r[0] for r in SOURCE], "v": [r[1] for r in SOURCE], "k": [r[2] for r in SOURCE]},
        schema=SCHEMA,
    )
    return twin.merge(src, ["id"])


def test_a_merge_reads_only_the_blocklets_and_rows_of_the_source_keys(
    spark: Any, tmp_path: Path, jobs: list[ChangeJob]
) -> None:
    table, twin = make(tmp_path / "t"), make(tmp_path / "twin")
    got = upsert(spark, table, spark.createDataFrame(SOURCE, DDL))
    expected = twin_merge(twin)
    assert (
        (got["num_updated_rows"], got["num_inserted_rows"])
        == (
            expected.rows_updated,
            expected.rows_inserted,
        )
        == (3, 2)
    )
    assert content(table.path) == content(twin.path)
    [job] = jobs
    assert blocklets(job) == 2  # 10-19 and 40-49 of six
    assert job.keys["id"].to_pylist() == [12, 13, 47, 100]


def test_a_source_too_large_to_collect_prunes_by_its_key_range(
    spark: Any, tmp_path: Path, jobs: list[ChangeJob], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(carbonlite.spark.merge_builder, "COLLECTED_KEY_BYTES", 0)
    monkeypatch.setattr(carbonlite.spark.merge_builder, "COLLECTED_KEYS", 2)
    table, twin = make(tmp_path / "t"), make(tmp_path / "twin")
    source = [(12, -12, "x"), (25, -25, "x"), (31, 0, "x")]
    got = upsert(spark, table, spark.createDataFrame(source, DDL))
    twin.merge(
        pa.table({"id": [12, 25, 31], "v": [-12, -25, 0], "k": ["x"] * 3}, schema=SCHEMA), ["id"]
    )
    assert got["num_updated_rows"] == 3 and content(table.path) == content(twin.path)
    [job] = jobs
    assert not job.keys and job.filter is not None
    assert blocklets(job) == 3  # the blocklets of 10-39: the range, not the values


def test_a_source_of_null_keys_reads_no_target_row_and_inserts(
    spark: Any, tmp_path: Path, jobs: list[ChangeJob]
) -> None:
    table = make(tmp_path / "t")
    got = upsert(spark, table, spark.createDataFrame([(None, 1, "n")], DDL))
    assert (got["num_updated_rows"], got["num_inserted_rows"]) == (0, 1)
    assert [job.groups for job in jobs] == [[]]
    assert len(content(table.path)) == ROWS + 1


@pytest.mark.parametrize("case", ["not matched by source", "not deterministic", "other key type"])
def test_where_pruning_is_unsafe_the_whole_target_is_read(
    spark: Any, tmp_path: Path, jobs: list[ChangeJob], case: str
) -> None:
    table = make(tmp_path / "t")
    source = spark.createDataFrame([(12, -12, "x"), (100, 100, "new")], DDL)
    if case == "not deterministic":  # read twice, it could give other keys each time
        source = source.withColumn("id", F.col("id") + (F.rand() * 0).cast("long"))
    if case == "other key type":  # Spark compares int with long by casting; CarbonLite would not
        source = source.withColumn("id", F.col("id").cast("int"))
    builder = CarbonMergeBuilder(spark, table, source.alias("s"), "t.id = s.id", alias="t")
    builder.whenMatchedUpdate(set={"v": "s.v"}).whenNotMatchedInsertAll()
    if case == "not matched by source":
        builder.whenNotMatchedBySourceDelete("t.id >= 50")
    result = builder.execute().collect()[0]
    assert result["num_updated_rows"] == 1 and result["num_inserted_rows"] == 1
    assert result["num_deleted_rows"] == (10 if case == "not matched by source" else 0)
    [job] = jobs
    assert blocklets(job) == BLOCKLETS and not job.keys and job.filter is None
    got = dict((r[0], r[1]) for r in content(table.path))
    assert got[12] == -12


def test_a_delete_and_an_update_read_only_what_their_condition_holds_for(
    spark: Any, tmp_path: Path, jobs: list[ChangeJob]
) -> None:
    table, twin = make(tmp_path / "t"), make(tmp_path / "twin")
    got = delete_rows(spark, table, "t.id >= 52 AND t.k <> 'k1'", alias="t").collect()[0]
    twin.delete((pc.field("id") >= 52) & (pc.field("k") != "k1"))
    assert got["num_deleted_rows"] == 6
    got = update_rows(spark, cl.open_table(table.path), "id < 5", {"v": "v * 10"}).collect()[0]
    twin.update(pc.field("id") < 5, {"v": pc.multiply(pc.field("v"), 10)})
    assert got["num_updated_rows"] == 5
    assert content(table.path) == content(twin.path)
    assert [blocklets(job) for job in jobs] == [1, 1]
    assert all(job.filter is not None for job in jobs)


def test_a_condition_spark_reads_otherwise_is_not_used_to_prune(
    spark: Any, tmp_path: Path, jobs: list[ChangeJob]
) -> None:
    """``id = '7'`` compares as Spark casts it; a Column condition is Spark's alone."""
    table = make(tmp_path / "t")
    assert delete_rows(spark, table, "id = '7'").collect()[0]["num_deleted_rows"] == 1
    table = cl.open_table(table.path)
    assert delete_rows(spark, table, F.col("id") > 55).collect()[0]["num_deleted_rows"] == 4
    assert [blocklets(job) for job in jobs] == [BLOCKLETS, BLOCKLETS]
    assert all(job.filter is None for job in jobs)
    assert len(content(table.path)) == ROWS - 5


@pytest.mark.parametrize(
    ("condition", "keys"),
    [
        ("t.id = s.id", ["id"]),
        ("s.id = t.id", ["id"]),
        ("t.id = s.id AND t.k = s.k", ["id", "k"]),
        ("(t.id = s.id) AND s.v > 0", ["id"]),
        ("and(=(t.id, s.id), >(s.v, 0))", ["id"]),
        ("`t`.`id` = `s`.`id`", ["id"]),
        ("t.id = s.id OR t.k = s.k", []),  # either may match: no key bounds every match
        ("t.v = 1 OR t.id = s.id AND t.k = s.k", []),
        ("t.id = t.id AND t.k = s.k", ["k"]),  # both sides the target's: not a key
        ("t.id = s.other", []),
        ("id = id", []),
        ("t.nope = s.nope", []),
        ("t.id = s.id AND t.k = 'a or b'", ["id"]),  # OR inside a literal
    ],
)
def test_matched_keys(condition: str, keys: list[str]) -> None:
    assert matched_keys(condition, "t", ["id", "v", "k"]) == keys
    assert matched_keys(condition, None, ["id", "v", "k"]) == []


def test_unqualified_leaves_literals_and_other_names() -> None:
    text = "t.id > 5 AND t.k = 't.x' AND at.x = 2 AND s.t.id = 1"
    assert unqualified(text, "t") == "id > 5 AND k = 't.x' AND at.x = 2 AND s.t.id = 1"
    assert unqualified(text, None) == text
