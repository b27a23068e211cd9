"""Partitioned tables and hash-diff publishing from Spark: executors write and hash their
partitions, the driver commits the changed ones once; a retried task is committed once."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

import carbonlite as cl
import carbonlite.spark

SCHEMA = pa.schema([("region", pa.string()), ("id", pa.int64()), ("v", pa.string())])


def rows(regions: dict[str, range], tag: str = "") -> pa.Table:
    out: dict[str, list[Any]] = {"region": [], "id": [], "v": []}
    for region, ids in regions.items():
        for i in ids:
            out["region"].append(region)
            out["id"].append(i)
            out["v"].append(f"{region}{i}{tag}")
    return pa.table(out, schema=SCHEMA)


def canon(t: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in t.to_pylist())


def frame(spark: Any, data: pa.Table, partitions: int = 3) -> Any:
    return spark.createDataFrame(data.to_pylist(), "region string, id long, v string").repartition(
        partitions
    )


def files_on_disk(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in (path / "segments").rglob("*.cblt") if p.is_file()}


def test_publish_from_spark_rewrites_only_what_changed(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA, partition_by=["region"])
    first = rows({"eu": range(0, 40), "us": range(40, 60), "ap": range(60, 65)})
    result = carbonlite.spark.publish(frame(spark, first), str(path))
    t = cl.open_table(path)
    assert result.version == t.version
    assert result.added == [("ap",), ("eu",), ("us",)]
    assert canon(t.to_arrow()) == canon(first)
    assert all(p.content_hash and p.segments == 1 for p in t.partitions())
    # the same rows, cut differently across tasks: nothing is committed, nothing left behind
    before = files_on_disk(path)
    again = carbonlite.spark.publish(
        frame(spark, first.take(list(range(64, -1, -1))), 4), str(path)
    )
    assert again.version is None and again.unchanged == [("ap",), ("eu",), ("us",)]
    assert cl.open_table(path).version == t.version
    assert files_on_disk(path) == before, "the unchanged partitions' new files were kept"
    # one partition changes, one goes (snapshot), state rides along
    changed = rows({"eu": range(0, 40), "us": range(40, 61)})
    deps = pa.table({"node": ["x"], "fingerprint": [7]})
    result = carbonlite.spark.publish(
        frame(spark, changed), str(path), mode="snapshot", state={"deps": deps}
    )
    t = cl.open_table(path)
    assert result.version == t.version
    assert result.changed == [("us",)] and result.unchanged == [("eu",)]
    assert result.deleted == [("ap",)] and result.added == []
    assert canon(t.to_arrow()) == canon(changed)
    assert t.state("deps").equals(deps)
    (info,) = t.history(1)
    assert info.operation == "PUBLISH" and info.rows == 21 and info.rows_removed == 25
    committed = {f.path for _, f in t.snapshot().iter_files()}
    t.recover(min_age=0)
    assert committed <= files_on_disk(path)


def test_the_publish_option_and_partition_by_on_create(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    data = rows({"eu": range(5), "us": range(5, 8)})
    (
        frame(spark, data)
        .write.format("carbonlite")
        .mode("append")
        .option("partitionBy", "region")
        .option("publish", "incremental")
        .save(path)
    )
    t = cl.open_table(path)
    assert t.partition_by == ("region",)
    assert canon(t.to_arrow()) == canon(data)
    with pytest.raises(Exception, match="'incremental' or 'snapshot'"):
        frame(spark, data).write.format("carbonlite").mode("append").option("publish", "full").save(
            path
        )
    with pytest.raises(Exception, match="mode\\('append'\\)"):
        frame(spark, data).write.format("carbonlite").mode("overwrite").option(
            "publish", "incremental"
        ).save(path)


def test_spark_writes_route_rows_and_dynamic_overwrite(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    cl.create_table(path, SCHEMA, partition_by=["region", "bucket(2, id)"])
    data = rows({"eu": range(20), "us": range(20, 30)})
    frame(spark, data).write.format("carbonlite").mode("append").save(path)
    t = cl.open_table(path)
    assert canon(t.to_arrow()) == canon(data)
    assert {p.value[0] for p in t.partitions()} == {"eu", "us"}
    assert all(s.partition is not None for s in t.snapshot().live_segments())
    files = [f.path for _, f in t.snapshot().iter_files()]
    assert files and all(re.search(r"-p\d{5}-a\d+\.cblt$", f) for f in files), (
        f"not the tasks' own files (rewritten on the driver?): {files}"
    )
    new_us = rows({"us": range(100, 104)})
    (
        frame(spark, new_us)
        .write.format("carbonlite")
        .mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .save(path)
    )
    got = cl.open_table(path).to_arrow()
    kept_us = [r for r in canon(data) if r[0] == "us" and not _same_bucket_as_new(r, new_us)]
    assert [r for r in canon(got) if r[0] == "eu"] == [r for r in canon(data) if r[0] == "eu"]
    assert {r for r in canon(got) if r[0] == "us"} >= set(canon(new_us))
    assert len([r for r in canon(got) if r[0] == "us"]) == len(kept_us) + 4


def _same_bucket_as_new(row: tuple[Any, ...], new: pa.Table) -> bool:
    from carbonlite.format.row_hash import column_hashes

    buckets = {int(h) % 2 for h in column_hashes(new.column("id"))}
    return int(column_hashes(pa.array([row[1]]))[0]) % 2 in buckets


FAIL_ID = 15_000


def _fail_first_attempt(i: int) -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if i == FAIL_ID and ctx is not None and ctx.attemptNumber() == 0:
        raise RuntimeError(f"injected failure of task attempt 0 at row {i}")
    return i


@pytest.mark.filterwarnings("ignore:Cannot infer the eval type")
def test_a_retried_task_is_published_once(spark: Any, tmp_path: Path) -> None:
    """The only task's first attempt writes files for the rows before ``FAIL_ID`` and then
    fails; Spark retries it. The retry's files are committed, the first attempt's never."""
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA, partition_by=["region"], properties={"blocklet_max_rows": "1000"})
    n = 20_000
    data = pa.table(
        {
            "region": [("eu", "us")[i % 2] for i in range(n)],
            "id": list(range(n)),
            "v": [f"v{i}" for i in range(n)],
        },
        schema=SCHEMA,
    )
    flaky = F.udf(_fail_first_attempt, T.LongType(), useArrow=False)
    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        df = spark.createDataFrame(data.to_pylist(), "region string, id long, v string")
        df = df.coalesce(1)
        df = df.select("region", flaky("id").alias("id"), "v")
        # written by the task that runs the flaky udf (publish() would shuffle first)
        df.write.format("carbonlite").mode("append").option("publish", "incremental").save(
            str(path)
        )
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    t = cl.open_table(path)
    assert t.history(1)[0].parameters["added"] == "2"
    assert canon(t.to_arrow()) == canon(data), "rows lost or published twice"
    committed = {f.path for _, f in t.snapshot().iter_files()}
    assert committed and all(p.endswith("-a1.cblt") for p in committed), committed
    failed = {p for p in files_on_disk(path) if p.endswith("-a0.cblt")}
    assert failed, "the failed attempt wrote no file: the retry was not exercised"
    assert not failed & committed
    assert len(t.history()) == 2  # create, one publish
    assert os.path.exists(path / "_carbonlite" / "log")


def test_stream_into_a_partitioned_table_commits_each_micro_batch_once(
    spark: Any, tmp_path: Path, stop_queries: None
) -> None:
    from tests.spark.streams import finish
    from tests.support.spark_data import SOURCE_DDL, write_source_files

    source, table, ck = str(tmp_path / "src"), str(tmp_path / "t"), str(tmp_path / "ck")
    files = write_source_files(source, 3, 40)
    query = (
        spark.readStream.schema(SOURCE_DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(source)
        .writeStream.format("carbonlite")
        .option("checkpointLocation", ck)
        .option("partitionBy", "k")
        .trigger(availableNow=True)
        .start(table)
    )
    finish(query)
    t = cl.open_table(table)
    assert t.partition_by == ("k",)
    everything = pa.concat_tables(files)
    assert canon(t.to_arrow()) == canon(everything)
    commits = [h for h in t.history() if h.operation != "CREATE TABLE"]
    assert len(commits) == 3  # one version per micro-batch, each touching every partition
    files = [f.path for _, f in t.snapshot().iter_files()]
    assert all(re.search(r"-p\d{5}-a\d+(-s[0-9a-f]{8})?\.cblt$", f) for f in files), files
    # the first batch's file per partition, then the task's own file in its segment
    assert {len(s.files) for s in t.snapshot().live_segments()} == {2}
    assert {s.partition for s in t.snapshot().live_segments()} == {
        (k,) for k in set(everything.column("k").to_pylist())
    }
    # each partition's segment holds exactly that partition's rows
    for p in t.partitions():
        rows = t.to_arrow(filter=pc.field("k") == p.value[0])
        assert rows.num_rows == p.rows and set(rows.column("k").to_pylist()) == {p.value[0]}


def test_a_publish_into_a_primary_key_table_never_repeats_a_key(spark: Any, tmp_path: Path) -> None:
    """The executors' files are key-checked on the driver before the commit: a key published
    into one partition while a kept partition holds it is refused, nothing committed and no
    file left; moving it with its old partition in the same publish is fine."""
    path = tmp_path / "t"
    table = cl.create_table(path, SCHEMA, partition_by=["region"], primary_key=["id"])
    table.append(rows({"eu": range(0, 3), "us": range(3, 5)}))
    before = files_on_disk(path)
    with pytest.raises(cl.DuplicateKeyError):
        carbonlite.spark.publish(frame(spark, rows({"ap": range(2, 4)})), str(path))
    assert cl.open_table(path).version == 1
    assert files_on_disk(path) == before
    moved = rows({"ap": range(2, 4), "eu": range(0, 2), "us": range(4, 5)})
    result = carbonlite.spark.publish(frame(spark, moved), str(path))
    assert result.version == 2
    assert canon(cl.open_table(path).to_arrow()) == canon(moved)
