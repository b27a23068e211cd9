"""Delete, update and merge from Spark, run on the executors (carbonlite/spark/row_change_job.py,
carbonlite/spark/merge_builder.py): results checked against ``Table.delete``/``update``/
``merge`` on a twin table or against a plain Python model, the same log entries (deletion
vectors, change feed), and the conflict rules with a concurrent append or delete forced at
the seam ``row_change.after_plan``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

import carbonlite as cl
from carbonlite.seams import listening
from carbonlite.spark.merge_builder import CarbonMergeBuilder, equi_keys
from carbonlite.spark.row_change_job import (
    delete_rows,
    kept_columns,
    referenced_columns,
    text_of,
    update_rows,
)
from tests.support.spark_jobs import MERGE_CLUSTER_ROWS

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("k", pa.string())])
DDL = "id long, v long, k string"
ROWS = 40


def make(path: Path, **kwargs: Any) -> cl.Table:
    """A table of ``ROWS`` rows in two appends, blocklets of 8 rows (several files and
    blocklets for the tasks to share)."""
    t = cl.create_table(path, SCHEMA, properties={"blocklet_max_rows": "8"}, **kwargs)
    for lo, hi in ((0, ROWS // 2), (ROWS // 2, ROWS)):
        ids = list(range(lo, hi))
        t.append(pa.table({"id": ids, "v": ids, "k": [f"k{i % 3}" for i in ids]}, schema=SCHEMA))
    return t


def content(path: Path | str) -> dict[int, tuple[int | None, str | None]]:
    rows = cl.open_table(path).to_arrow().to_pylist()
    got = {r["id"]: (r["v"], r["k"]) for r in rows}
    assert len(got) == len(rows), "a key appears twice"
    return got


def result(df: Any) -> dict[str, Any]:
    rows = df.collect()
    assert len(rows) == 1
    return rows[0].asDict()


def test_delete_with_a_sql_string_and_a_column_as_table_delete_does(
    spark: Any, tmp_path: Path
) -> None:
    twin = make(tmp_path / "twin")
    table = make(tmp_path / "t")
    got = result(delete_rows(spark, table, "t.id % 3 = 0 and t.k <> 'k1'", alias="t"))
    twin.delete(pc.field("id").isin(list(range(0, ROWS, 3))) & (pc.field("k") != "k1"))
    assert got == {
        "num_affected_rows": 14,
        "num_updated_rows": 0,
        "num_deleted_rows": 14,
        "num_inserted_rows": 0,
        "version": 3,
    }
    got = result(delete_rows(spark, cl.open_table(table.path), F.col("id") >= 35))
    twin.delete(pc.field("id") >= 35)
    assert got["num_deleted_rows"] == 3 and got["version"] == 4  # 36 and 39 were gone
    assert content(table.path) == content(twin.path)
    history = cl.open_table(table.path).history()
    assert [h.operation for h in history[:2]] == ["DELETE", "DELETE"]
    assert history[0].parameters["predicate"] == ">=(id, 35)"  # as PySpark prints it
    # the same kind of log entries: deletion vectors only, the change feed alike
    twin_history = cl.open_table(twin.path).history()
    for mine, theirs in zip(history[:2], twin_history[:2], strict=True):
        assert (mine.rows, mine.rows_removed, mine.files_added) == (
            theirs.rows,
            theirs.rows_removed,
            theirs.files_added,
        )
    assert (history[0].rows, history[0].rows_removed) == (0, 3)
    spark_feed = (
        cl.open_table(table.path).changes(3, 4).sort_by("id").select(["id", "_change_type"])
    )
    twin_feed = cl.open_table(twin.path).changes(3, 4).sort_by("id").select(["id", "_change_type"])
    assert spark_feed.equals(twin_feed)


def test_update_with_expressions_as_table_update_does(spark: Any, tmp_path: Path) -> None:
    twin = make(tmp_path / "twin")
    table = make(tmp_path / "t")
    got = result(update_rows(spark, table, "k = 'k2'", {"v": "v * 100", "k": F.upper(F.col("k"))}))
    twin.update(pc.field("k") == "k2", {"v": pc.field("v") * 100, "k": "K2"})
    assert got["num_updated_rows"] == 13 and got["num_affected_rows"] == 13
    assert got["version"] == 3
    assert content(table.path) == content(twin.path)
    got = result(update_rows(spark, cl.open_table(table.path), None, {"v": F.lit(None)}))
    assert got["num_updated_rows"] == ROWS
    assert {v for v, _ in content(table.path).values()} == {None}


def test_merge_applies_the_first_clause_whose_condition_holds(spark: Any, tmp_path: Path) -> None:
    """Every clause kind, with conditions, in an order where a later clause would also hold:
    checked against a plain Python model of Delta's semantics."""
    table = make(tmp_path / "t")
    source = [(i, i * 10, "src") for i in range(30, 50)]  # 30..39 match, 40..49 do not
    src = spark.createDataFrame(source, DDL).alias("s")
    got = result(
        CarbonMergeBuilder(spark, table, src, "t.id = s.id", alias="t")
        .whenMatchedDelete("s.id < 32")
        .whenMatchedUpdate("t.k = 'k0'", {"v": "s.v + t.v", "k": "'matched k0'"})
        .whenMatchedUpdate(set={"v": F.col("s.v")})
        .whenNotMatchedInsert("s.id % 2 = 0", values={"id": "s.id", "v": F.col("s.v")})
        .whenNotMatchedInsertAll("s.id = 41")
        .whenNotMatchedBySourceUpdate("t.id < 3", {"v": "-t.v"})
        .whenNotMatchedBySourceDelete("t.k = 'k1' and t.id < 20")
        .execute()
    )
    model = {i: (i, f"k{i % 3}") for i in range(ROWS)}
    counts = {"updated": 0, "deleted": 0, "inserted": 0}
    by_id = {row[0]: row for row in source}
    for i in list(model):
        if i in by_id:
            if i < 32:
                del model[i]
                counts["deleted"] += 1
            elif model[i][1] == "k0":
                model[i] = (by_id[i][1] + i, "matched k0")
                counts["updated"] += 1
            else:
                model[i] = (by_id[i][1], model[i][1])
                counts["updated"] += 1
        elif i < 3:
            model[i] = (-i, model[i][1])
            counts["updated"] += 1
        elif model[i][1] == "k1" and i < 20:
            del model[i]
            counts["deleted"] += 1
    for i, v, k in source:
        if i >= ROWS and i % 2 == 0:
            model[i] = (v, None)
            counts["inserted"] += 1
        elif i == 41:
            model[i] = (v, k)
            counts["inserted"] += 1
    assert content(table.path) == model
    assert got == {
        "num_affected_rows": sum(counts.values()),
        "num_updated_rows": counts["updated"],
        "num_deleted_rows": counts["deleted"],
        "num_inserted_rows": counts["inserted"],
        "version": 3,
    }
    info = cl.open_table(table.path).history()[0]
    assert info.operation == "MERGE" and info.parameters["condition"] == "t.id = s.id"
    assert info.parameters["rows_inserted"] == str(counts["inserted"])


def test_update_all_insert_all_as_table_merge_does_with_the_same_change_feed(
    spark: Any, tmp_path: Path
) -> None:
    twin = make(tmp_path / "twin")
    table = make(tmp_path / "t")
    source = pa.table(
        {"id": [5, 17, 33, 60, 61], "v": [-5, -17, -33, -60, -61], "k": ["a", "b", "c", "d", None]},
        schema=SCHEMA,
    )
    got = result(
        CarbonMergeBuilder(
            spark,
            table,
            spark.createDataFrame(source.to_pylist(), DDL).alias("src"),
            F.col("tgt.id") == F.col("src.id"),
            alias="tgt",
        )
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .whenNotMatchedBySourceDelete("tgt.id >= 38")
        .execute()
    )
    expected = twin.merge(source, ["id"], when_not_matched_by_source="ignore")
    twin.delete(pc.field("id").isin([38, 39]))
    assert got["num_updated_rows"] == expected.rows_updated == 3
    assert got["num_inserted_rows"] == expected.rows_inserted == 2
    assert got["num_deleted_rows"] == 2
    assert content(table.path) == content(twin.path)
    feed = cl.open_table(table.path).changes(3, 3)
    twin_feed = cl.open_table(twin.path).changes(3, 4)
    columns = ["id", "v", "k", "_change_type"]
    assert (
        feed.select(columns)
        .sort_by([("id", "ascending"), ("_change_type", "ascending")])
        .equals(
            twin_feed.select(columns).sort_by([("id", "ascending"), ("_change_type", "ascending")])
        )
    )
    # compaction sees the merged rows as it sees Table.merge's: the deleted ones stay deleted
    for path in (table.path, twin.path):
        t = cl.open_table(path)
        t.finish_streaming()
        t.handoff()
        assert {s.status for s in t.segments()} >= {"COMPACTED"}
    assert content(table.path) == content(twin.path)
    assert cl.open_table(table.path).count_rows() == ROWS + 2 - 2


def test_a_target_row_matched_twice_is_refused_and_a_merge_changing_nothing_commits_nothing(
    spark: Any, tmp_path: Path, merge_route: str
) -> None:
    table = make(tmp_path / "t")
    twice = spark.createDataFrame([(7, 1, "a"), (7, 2, "b"), (8, 3, "c")], DDL).alias("s")
    shown = {
        "executors": r"t\.id = s\.id: 1 row of the table is .*'id': 7, 'v': 7",
        "driver": r"1 row of the table is matched by more than one source row on \['id'\]",
    }[merge_route]
    with pytest.raises(cl.DuplicateKeyError, match=shown):
        CarbonMergeBuilder(
            spark, table, twice, "t.id = s.id", alias="t"
        ).whenMatchedUpdateAll().execute()
    assert cl.open_table(table.path).version == 2
    written = [p.name for p in (tmp_path / "t" / "segments").rglob("*") if "change-" in p.name]
    assert written == []  # the tasks' parts were discarded (and no vector was written)
    assert list((tmp_path / "t" / "segments").rglob("*.dv")) == []
    # no clause applies to any joined row: nothing written, no version
    got = result(
        CarbonMergeBuilder(spark, cl.open_table(table.path), twice, "t.id = s.id", alias="t")
        .whenMatchedUpdate("s.v > 100", {"v": "s.v"})
        .execute()
    )
    assert got == {
        "num_affected_rows": 0,
        "num_updated_rows": 0,
        "num_deleted_rows": 0,
        "num_inserted_rows": 0,
        "version": None,
    }
    assert cl.open_table(table.path).version == 2


def test_a_partitioned_table_gets_new_rows_in_their_partitions(
    spark: Any, tmp_path: Path, merge_route: str
) -> None:
    table = make(tmp_path / "t", partition_by=["k"])
    src = spark.createDataFrame([(1, 100, "k1"), (2, 200, "k0"), (90, 900, "k9")], DDL)
    got = result(
        CarbonMergeBuilder(spark, table, src.alias("s"), "t.id = s.id", alias="t")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    assert (got["num_updated_rows"], got["num_inserted_rows"]) == (2, 1)
    after = content(table.path)
    assert after[1] == (100, "k1") and after[2] == (200, "k0") and after[90] == (900, "k9")
    reopened = cl.open_table(table.path)
    snapshot = reopened.snapshot()
    for split in reopened.plan_splits().splits:  # each segment holds its partition's rows
        partition = snapshot.segments[split.segment_id].partition
        ks = {k for b in reopened.read_split(split, columns=["k"]) for k in b.column(0).to_pylist()}
        assert partition is not None and ks == {partition[0]}
    assert sorted(p.value for p in reopened.partitions()) == [("k0",), ("k1",), ("k2",), ("k9",)]
    assert sum(p.rows for p in reopened.partitions()) == ROWS + 1


def test_a_primary_key_table_keeps_one_row_per_key(
    spark: Any, tmp_path: Path, merge_route: str
) -> None:
    keyed_schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()), ("k", pa.string())]
    )
    table = cl.create_table(tmp_path / "t", keyed_schema, primary_key=["id"])
    table.append(
        pa.table({"id": [1, 2, 3], "v": [10, 20, 30], "k": ["a", "b", "c"]}, schema=keyed_schema)
    )
    src = spark.createDataFrame([(2, 22, "x"), (4, 44, "y")], DDL).alias("s")
    got = result(
        CarbonMergeBuilder(spark, table, src, "t.id = s.id", alias="t")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    assert (got["num_updated_rows"], got["num_inserted_rows"], got["version"]) == (1, 1, 2)
    assert content(table.path) == {1: (10, "a"), 2: (22, "x"), 3: (30, "c"), 4: (44, "y")}
    # matched on another column, the insert would give key 3 a second row
    clash = spark.createDataFrame([(3, 0, "zz")], DDL).alias("s")
    with pytest.raises(cl.DuplicateKeyError, match=r"primary keys \['id'\].*\(3\)"):
        (
            CarbonMergeBuilder(spark, cl.open_table(table.path), clash, "t.k = s.k", alias="t")
            .whenNotMatchedInsertAll()
            .execute()
        )
    assert cl.open_table(table.path).version == 2
    # an error a task raises reaches the driver as the same CarbonLite error
    with pytest.raises(
        cl.SchemaMismatchError, match=r"^data does not match.*\n.*'id' is declared non-nullable"
    ):
        (
            CarbonMergeBuilder(spark, cl.open_table(table.path), clash, "t.id = s.v", alias="t")
            .whenNotMatchedInsert(values={"v": "s.v"})  # no id: null
            .execute()
        )
    assert cl.open_table(table.path).version == 2


def test_a_partitioned_primary_key_table_moves_a_row_between_partitions(
    spark: Any, tmp_path: Path, merge_route: str
) -> None:
    keyed = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()), ("k", pa.string())]
    )
    table = cl.create_table(tmp_path / "t", keyed, primary_key=["id"], partition_by=["k"])
    table.append(pa.table({"id": [1, 2, 3], "v": [10, 20, 30], "k": ["a", "a", "b"]}, schema=keyed))
    src = spark.createDataFrame([(2, 22, "b"), (4, 44, "c")], DDL).alias("s")
    got = result(
        CarbonMergeBuilder(spark, table, src, "t.id = s.id", alias="t")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    assert (got["num_updated_rows"], got["num_inserted_rows"]) == (1, 1)
    assert content(table.path) == {1: (10, "a"), 2: (22, "b"), 3: (30, "b"), 4: (44, "c")}
    reopened = cl.open_table(table.path)
    assert {p.value: p.rows for p in reopened.partitions()} == {("a",): 1, ("b",): 2, ("c",): 1}


def _once_at_plan(action: Callable[[], None]) -> Callable[[str], None]:
    """A seam listener running ``action`` the first time a change has planned."""
    plans: list[str] = []

    def listener(seam: str) -> None:
        if seam == "row_change.after_plan":
            plans.append(seam)
            if len(plans) == 1:
                action()

    listener.plans = plans  # type: ignore[attr-defined]
    return listener


def test_an_append_landing_during_the_job_does_not_conflict(spark: Any, tmp_path: Path) -> None:
    table = make(tmp_path / "t")
    other = cl.open_table(table.path)
    extra = pa.table({"id": [100, 101], "v": [0, 0], "k": ["n", "n"]}, schema=SCHEMA)
    listener = _once_at_plan(lambda: other.append(extra))
    with listening(listener):
        got = result(update_rows(spark, table, "id < 10", {"v": "v + 1000"}))
    assert listener.plans == ["row_change.after_plan"]  # type: ignore[attr-defined]
    assert got["version"] == 4 and got["num_updated_rows"] == 10
    after = content(table.path)
    assert after[100] == (0, "n") and after[0] == (1000, "k0") and len(after) == ROWS + 2
    assert [h.operation for h in cl.open_table(table.path).history()[:2]] == ["UPDATE", "APPEND"]


def test_a_delete_of_the_same_rows_winning_makes_the_merge_plan_again(
    spark: Any, tmp_path: Path, merge_on_executors: None
) -> None:
    """The concurrent delete commits after the job pinned its snapshot: the job's vectors
    were computed from the rows as they were, its commit loses (RowsChangedError) and it runs
    again on the newest version, where the deleted rows are gone."""
    table = make(tmp_path / "t")
    other = cl.open_table(table.path)
    listener = _once_at_plan(lambda: other.delete(pc.field("id") < 5))
    src = spark.createDataFrame([(i, -i, "s") for i in range(0, 10)], DDL).alias("s")
    with listening(listener):
        got = result(
            CarbonMergeBuilder(spark, table, src, "t.id = s.id", alias="t")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )
    # the merge's first plan, the delete's own, the merge's second
    assert len(listener.plans) == 3  # type: ignore[attr-defined]
    assert (got["num_updated_rows"], got["num_inserted_rows"], got["version"]) == (5, 5, 4)
    after = content(table.path)
    assert {i: after[i] for i in range(10)} == {i: (-i, "s") for i in range(10)}
    assert len(after) == ROWS
    assert [h.operation for h in cl.open_table(table.path).history()[:2]] == ["MERGE", "DELETE"]
    # the first run's vectors were discarded: every vector a Spark task wrote is in use
    snapshot = cl.open_table(table.path).snapshot()
    in_use = {
        ref.path.rsplit("/", 1)[-1]
        for seg in snapshot.segments.values()
        for f in seg.files.values()
        for ref in f.deletions.values()
    }
    by_tasks = {
        p.name for p in (tmp_path / "t").rglob("*.dv") if re.search(r"-p\d{5}-a\d+\.dv$", p.name)
    }
    assert by_tasks and by_tasks <= in_use


def test_bad_input_is_refused_before_anything_is_written(spark: Any, tmp_path: Path) -> None:
    table = make(tmp_path / "t")
    with pytest.raises(
        cl.SchemaMismatchError, match="names columns \\['nope'\\] the table does not have"
    ):
        update_rows(spark, table, None, {"nope": "1"})
    with pytest.raises(
        cl.InvalidOptionError, match=r"SQL expression string or a pyspark\.sql\.Column"
    ):
        update_rows(spark, table, None, {"v": 1})  # type: ignore[dict-item]
    with pytest.raises(cl.InvalidOptionError, match="Spark cannot resolve it"):
        delete_rows(spark, table, "no_such_column > 1")
    builder = CarbonMergeBuilder(
        spark, table, spark.createDataFrame([], DDL), "t.id = id", alias="t"
    )
    with pytest.raises(cl.InvalidOptionError, match="at least one clause"):
        builder.execute()
    with pytest.raises(cl.InvalidOptionError, match="only the last may omit its condition"):
        builder.whenMatchedDelete().whenMatchedUpdateAll().execute()
    assert cl.open_table(table.path).version == 2


@pytest.mark.slow
@pytest.mark.spark_job("merge_cluster_driver")
def test_a_merge_on_a_local_cluster_runs_in_the_executors(spark_jobs: Any) -> None:
    """tests/support/spark_merge_cluster_driver.py: on ``local-cluster[2,1,1024]`` the driver
    runs no task, so the rewrite was done by the executors' processes; the result equals
    ``Table.merge`` of the same source into a twin table."""
    job = spark_jobs.start("merge_cluster_driver")
    outcome = job.wait(600)
    assert outcome.returncode == 0, (
        f"exit {outcome.returncode}:\n{outcome.stdout}\n{outcome.stderr[-4000:]}"
    )
    summary = json.loads(outcome.stdout.strip().splitlines()[-1])
    assert summary["executors"] == 2
    assert summary["worker_parents"] == 2, "the tasks did not run in two executors' Python workers"
    assert summary["same_rows"], summary.get("problem")
    half = MERGE_CLUSTER_ROWS // 10
    assert summary["expected"] == [half, half]
    assert summary["result"]["num_updated_rows"] == half
    assert summary["result"]["num_inserted_rows"] == half
    assert summary["result"]["version"] == 2
    assert summary["merge_tasks"] >= 2  # reading, joining and writing tasks, on the executors


def test_what_the_target_reads_and_the_keys_a_merge_records(spark: Any, tmp_path: Path) -> None:
    """The reading tasks decode only the columns the expressions name (more when the source
    has the same names, never fewer; all of them behind a ``*``), and a merge on equalities
    of same-named columns records them as ``on`` for the change feed."""
    table = make(tmp_path / "t")
    assert referenced_columns(table, ["t.id = s.id", F.col("k") == "x", None]) == ["id", "k"]
    assert referenced_columns(table, ["v * 2", "`k` is null"]) == ["v", "k"]
    assert referenced_columns(table, ["s.other = 1"]) == []
    assert referenced_columns(table, ["hash(struct(*)) = 1"]) is None
    assert referenced_columns(table, [F.col("t.*").isNotNull()]) is None
    assert kept_columns(["id"], table, {"v": "1"}) == ["id", "k"]
    names = SCHEMA.names
    assert equi_keys("t.id = s.id", names) == ["id"]
    assert equi_keys("(t.id = s.id) AND (t.k = s.k)", names) == ["id", "k"]
    assert equi_keys(
        text_of((F.col("t.id") == F.col("s.id")) & (F.col("t.k") == F.col("s.k"))), names
    ) == ["id", "k"]
    assert equi_keys("t.id = s.v", names) == []
    assert equi_keys("t.id = s.id and t.v > 3", names) == []
