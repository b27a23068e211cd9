"""A merge from Spark that ``Table.merge`` expresses, of a source small enough to collect, runs
as ``Table.merge`` on the driver (``CarbonMergeBuilder._on_driver``, issue 40 §2): the same
rows as a twin merged by ``Table.merge`` and as the same merge run on the executors, its
condition and clauses in history, no job planned for the executors. Everything else (clause
conditions, values Spark computes, other key or column types, a source above
``spark.carbonlite.merge.driverSourceMaxBytes``) keeps the executors' route, counted by the
jobs the driver plans for them."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

import carbonlite as cl
from carbonlite.spark.merge_builder import DRIVER_SOURCE_CONF, CarbonMergeBuilder
from carbonlite.writer.distributed_changes import ChangeJob
from tests.spark.merges import upsert

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("k", pa.string())])
DDL = "id long, v long, k string"
ROWS = 30
SOURCE = pa.table(
    {"id": [3, 4, 17, 40, None], "v": [-3, -4, -17, -40, 0], "k": ["a", "b", "c", "new", "n"]},
    schema=SCHEMA,
)


def make(path: Path, schema: pa.Schema = SCHEMA, rows: pa.Table | None = None) -> cl.Table:
    t = cl.create_table(path, schema, properties={"blocklet_max_rows": "8"})
    ids = list(range(ROWS))
    t.append(
        rows
        if rows is not None
        else pa.table({"id": ids, "v": ids, "k": [f"k{i % 3}" for i in ids]}, schema=SCHEMA)
    )
    return t


def content(path: Path | str) -> list[dict[str, Any]]:
    rows = cl.open_table(path).to_arrow().to_pylist()
    return sorted(rows, key=lambda r: [(v is None, str(v)) for v in r.values()])


@pytest.fixture
def limit(spark: Any) -> Iterator[Any]:
    """Sets ``spark.carbonlite.merge.driverSourceMaxBytes`` for one test."""
    yield lambda value: spark.conf.set(DRIVER_SOURCE_CONF, value)
    spark.conf.unset(DRIVER_SOURCE_CONF)


@pytest.mark.parametrize("made_from", ["arrow", "python rows"])
def test_a_small_upsert_runs_as_table_merge_on_the_driver(
    spark: Any, tmp_path: Path, jobs: list[ChangeJob], made_from: str
) -> None:
    """A source Spark sizes (from Arrow) and one it cannot (Python rows: counted first)."""
    table, twin = make(tmp_path / "t"), make(tmp_path / "twin")
    source = (
        spark.createDataFrame(SOURCE)
        if made_from == "arrow"
        else spark.createDataFrame(SOURCE.to_pylist(), DDL)
    )
    got = upsert(spark, table, source)
    expected = twin.merge(SOURCE, ["id"])
    assert jobs == []  # nothing planned for the executors
    assert got == {
        "num_affected_rows": 5,
        "num_updated_rows": expected.rows_updated,
        "num_deleted_rows": 0,
        "num_inserted_rows": expected.rows_inserted,
        "version": 2,
    }
    assert (expected.rows_updated, expected.rows_inserted) == (3, 2)  # the null key inserted
    assert content(table.path) == content(twin.path)
    [merge, _, _] = cl.open_table(table.path).history()
    assert merge.operation == "MERGE"
    assert merge.parameters["condition"] == "t.id = s.id" and merge.parameters["on"] == "id"
    assert (
        merge.parameters["clauses"] == "WHEN MATCHED THEN UPDATE *; WHEN NOT MATCHED THEN INSERT *"
    )
    feed = cl.open_table(table.path).changes(2, 2)
    kinds = sorted(feed.column("_change_type").to_pylist())
    assert kinds == ["insert"] * 2 + ["update_postimage"] * 3 + ["update_preimage"] * 3


def test_both_routes_leave_the_same_rows_for_every_shape_table_merge_has(
    spark: Any, tmp_path: Path, jobs: list[ChangeJob], limit: Any
) -> None:
    """Each mix of matched update/delete, not-matched insert and not-matched-by-source
    delete, on the driver and then on the executors, against ``Table.merge``."""
    shapes = [
        ("update", "insert", "ignore"),
        ("delete", "ignore", "ignore"),
        ("ignore", "insert", "delete"),
        ("update", "ignore", "delete"),
    ]
    for n, (matched, not_matched, by_source) in enumerate(shapes):
        results = {}
        for route in ("driver", "executors"):
            limit("0" if route == "executors" else str(64 << 20))
            table = make(tmp_path / f"{n}-{route}")
            builder = CarbonMergeBuilder(
                spark, table, spark.createDataFrame(SOURCE).alias("s"), "t.id = s.id", alias="t"
            )
            if matched == "update":
                builder = builder.whenMatchedUpdateAll()
            elif matched == "delete":
                builder = builder.whenMatchedDelete()
            if not_matched == "insert":
                builder = builder.whenNotMatchedInsertAll()
            if by_source == "delete":
                builder = builder.whenNotMatchedBySourceDelete()
            planned = len(jobs)
            results[route] = builder.execute().collect()[0].asDict(), content(table.path)
            assert len(jobs) - planned == (route == "executors")
        twin = make(tmp_path / f"{n}-twin")
        expected = twin.merge(
            SOURCE,
            ["id"],
            when_matched=matched,  # type: ignore[arg-type]
            when_not_matched=not_matched,  # type: ignore[arg-type]
            when_not_matched_by_source=by_source,  # type: ignore[arg-type]
        )
        counts = (expected.rows_updated, expected.rows_deleted, expected.rows_inserted)
        for route, (got, rows) in results.items():
            assert (
                got["num_updated_rows"],
                got["num_deleted_rows"],
                got["num_inserted_rows"],
            ) == counts, (route, matched, not_matched, by_source)
            assert rows == content(twin.path), (route, matched, not_matched, by_source)


@pytest.mark.parametrize(
    "case",
    [
        "clause condition",
        "values Spark computes",
        "two matched clauses",
        "more than equalities",
        "keys of another name",
        "a source column of another type",
        "a float key",
        "above the limit",
    ],
)
def test_what_table_merge_cannot_say_runs_on_the_executors(
    spark: Any, tmp_path: Path, jobs: list[ChangeJob], limit: Any, case: str
) -> None:
    schema, rows, source = SCHEMA, None, spark.createDataFrame(SOURCE)
    condition = "t.id = s.id"
    clauses: list[tuple[str, Any]] = [("whenMatchedUpdateAll", {}), ("whenNotMatchedInsertAll", {})]
    if case == "clause condition":
        clauses = [("whenMatchedUpdateAll", {"condition": "s.v < -3"})]
    elif case == "values Spark computes":
        clauses = [("whenMatchedUpdate", {"set": {"v": "s.v * 2"}})]
    elif case == "two matched clauses":
        clauses = [
            ("whenMatchedDelete", {"condition": "s.v = -4"}),
            ("whenMatchedUpdateAll", {}),
        ]
    elif case == "more than equalities":
        condition = "t.id = s.id AND s.v < 0"
    elif case == "keys of another name":
        source = source.withColumnRenamed("id", "key").withColumn("id", F.col("key"))
        condition = "t.id = s.key"
    elif case == "a source column of another type":
        source = source.withColumn("v", F.col("v").cast("int"))
    elif case == "a float key":
        schema = pa.schema([("id", pa.float64()), ("v", pa.int64()), ("k", pa.string())])
        rows = pa.table({"id": [1.0, 2.0], "v": [1, 2], "k": ["a", "b"]}, schema=schema)
        source = spark.createDataFrame(pa.table({"id": [2.0], "v": [9], "k": ["z"]}))
    elif case == "above the limit":
        limit("16")
    table = make(tmp_path / "t", schema, rows)
    builder = CarbonMergeBuilder(spark, table, source.alias("s"), condition, alias="t")
    for method, kwargs in clauses:
        builder = getattr(builder, method)(**kwargs)
    got = builder.execute().collect()[0].asDict()
    assert len(jobs) == 1, case
    assert got["num_affected_rows"] >= 1


def test_the_driver_route_refuses_what_spark_refuses_and_a_bad_limit(
    spark: Any, tmp_path: Path, jobs: list[ChangeJob], limit: Any
) -> None:
    table = make(tmp_path / "t")
    source = spark.createDataFrame(SOURCE).alias("s")
    with pytest.raises(cl.InvalidOptionError, match="Spark cannot resolve it"):
        (
            CarbonMergeBuilder(spark, table, source, "t.id = q.id", alias="t")
            .whenMatchedUpdateAll()
            .execute()
        )
    missing = spark.createDataFrame(SOURCE.drop_columns(["k"])).alias("s")
    with pytest.raises(cl.SchemaMismatchError, match="it lacks 'k'"):
        CarbonMergeBuilder(
            spark, table, missing, "t.id = s.id", alias="t"
        ).whenMatchedUpdateAll().execute()
    limit("lots")
    with pytest.raises(cl.InvalidOptionError, match="driverSourceMaxBytes must be a number"):
        CarbonMergeBuilder(
            spark, table, source, "t.id = s.id", alias="t"
        ).whenMatchedUpdateAll().execute()
    assert cl.open_table(table.path).version == 1


def test_types_come_back_as_the_tables_own(
    spark: Any, tmp_path: Path, jobs: list[ChangeJob]
) -> None:
    """Timestamps in another zone, large strings, lists and structs: the rows Spark collects
    are relabeled to the table's types before ``Table.merge`` reads them."""
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("at", pa.timestamp("us", tz="Europe/Berlin")),
            ("name", pa.large_string()),
            ("tags", pa.list_(pa.string())),
            ("point", pa.struct([("x", pa.int32()), ("y", pa.float64())])),
            ("day", pa.date32()),
        ]
    )
    at = datetime.datetime(2026, 11, 29, 12, 30, tzinfo=datetime.timezone.utc)
    rows = pa.table(
        {
            "id": ["a", "b"],
            "at": [at, at],
            "name": ["x", "y"],
            "tags": [["p"], []],
            "point": [{"x": 1, "y": 1.5}, None],
            "day": [datetime.date(2026, 1, 1)] * 2,
        },
        schema=schema,
    )
    update = rows.slice(1, 1).set_column(2, "name", pa.array(["changed"], pa.large_string()))
    new = rows.slice(0, 1).set_column(0, "id", pa.array(["c"]))
    source = pa.concat_tables([update, new])
    table, twin = make(tmp_path / "t", schema, rows), make(tmp_path / "twin", schema, rows)
    got = upsert(spark, table, spark.createDataFrame(source))
    twin.merge(source, ["id"])
    assert jobs == [] and got["num_updated_rows"] == 1 and got["num_inserted_rows"] == 1
    assert cl.open_table(table.path).to_arrow().sort_by("id").equals(twin.to_arrow().sort_by("id"))


def test_a_column_spark_reads_wider_merges_on_both_routes(
    spark: Any, tmp_path: Path, merge_route: str
) -> None:
    """A ``uint32`` column reaches Spark as ``long`` and comes back narrowed by a checked
    cast, on either route; a value it cannot hold is refused and nothing is committed."""
    schema = pa.schema([("id", pa.int64()), ("v", pa.uint32()), ("k", pa.string())])
    rows = pa.table({"id": [1, 2], "v": [1, 2], "k": ["a", "b"]}, schema=schema)
    table = make(tmp_path / "t", schema, rows)
    source = pa.table({"id": [2, 3], "v": [4_000_000_000, 7], "k": ["z", "n"]})
    got = upsert(spark, table, spark.createDataFrame(source))
    assert (got["num_updated_rows"], got["num_inserted_rows"]) == (1, 1)
    after = cl.open_table(table.path).to_arrow().sort_by("id")
    assert after.schema == schema and after.column("v").to_pylist() == [1, 4_000_000_000, 7]
    too_big = spark.createDataFrame(pa.table({"id": [1], "v": [-1], "k": ["x"]}))
    with pytest.raises(cl.SchemaMismatchError, match="'v' is uint32 in the table"):
        upsert(spark, cl.open_table(table.path), too_big)
    assert cl.open_table(table.path).version == 2
