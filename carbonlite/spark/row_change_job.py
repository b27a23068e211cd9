"""Delete, update and merge from Spark, run on the executors (docs/SPARK.md, "Row-level
changes from Spark"): a translation of DataFrames onto the distributed change of
``carbonlite/driver_changes.py`` and ``carbonlite/writer/distributed_changes.py``.

The target is a DataFrame read by ``mapInArrow`` tasks from the pinned snapshot's blocklets,
each row carrying its location (file, blocklet, position) in hidden columns; Spark filters
or joins it and decides each row's action; the changed rows are repartitioned by data file,
so one task writes each file's deletion vector and its share of the new rows; the tasks
send back only what they wrote (pickled :class:`ChangeTaskResult`), and the driver commits
it in one version.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.errors import AnalysisException, PythonException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from carbonlite.driver_changes import run_distributed_change
from carbonlite.errors import InvalidOptionError, SchemaMismatchError
from carbonlite.spark.spark_errors import carbonlite_error
from carbonlite.spark.types import cast_for_spark, relabel_from_spark, spark_arrow_schema
from carbonlite.spark.types import spark_schema as spark_schema_of
from carbonlite.table import Table
from carbonlite.writer.distributed_changes import (
    ACTION_COLUMN,
    ACTION_DELETE,
    ACTION_UPDATE,
    BLOCKLET_COLUMN,
    FILE_COLUMN,
    POSITION_COLUMN,
    ChangeJob,
    ChangeTaskResult,
    located_schema,
    read_located,
    write_changes,
)
from carbonlite.writer.modify import MergeResult
from carbonlite.writer.touched import Touched, condition_terms

__all__ = [
    "RESULT_DDL",
    "ExprLike",
    "condition_touched",
    "delete_rows",
    "expression",
    "kept_columns",
    "referenced_columns",
    "resolved",
    "result_frame",
    "run_change",
    "target_frame",
    "task_error",
    "text_of",
    "unqualified",
    "update_rows",
    "value_columns",
]

ExprLike = str | Column
"""A condition or value: a SQL expression string or a ``pyspark.sql.Column``."""

RESULT_DDL = (
    "num_affected_rows long, num_updated_rows long, num_deleted_rows long, "
    "num_inserted_rows long, version long"
)
"""The one-row DataFrame a delete, update or merge returns (Delta's metric names, plus the
committed version: null when nothing changed)."""

Changes = Callable[[DataFrame], DataFrame]
"""Builds the changed rows (location, :data:`ACTION_COLUMN`, the table's columns where
rows are written) from the target DataFrame."""


def expression(value: Any, what: str, where: str) -> Column:
    """``value`` (a SQL string or a Column) as a Column; anything else refused."""
    if isinstance(value, Column):
        return value
    if isinstance(value, str) and value.strip():
        try:
            return F.expr(value)
        except Exception as exc:  # a ParseException: pyspark's text, first line
            raise InvalidOptionError(
                f"{where}: the {what} {value!r} is not a SQL expression: "
                f"{str(exc).strip().splitlines()[0]}"
            ) from None
    raise InvalidOptionError(
        f"{where}: the {what} must be a SQL expression string or a pyspark.sql.Column "
        f'(such as "v + 1" or F.lit(0)), not {value!r}'
    )


def text_of(value: ExprLike | None) -> str:
    """How a condition or value reads in the commit's parameters."""
    if value is None:
        return "true"
    if isinstance(value, str):
        return value
    text = str(value)  # Column<'>=(id, 35)'>: PySpark 4 prints no SQL of a Column
    return text[8:-2] if text.startswith("Column<'") and text.endswith("'>") else text


_IDENTIFIER = re.compile(r"`([^`]+)`|([A-Za-z_][A-Za-z0-9_]*)")
_STAR = re.compile(r"(?:^|[.(,])\s*\*\s*(?:$|[),])")
"""A ``*`` that stands for columns (``t.*``, ``struct(*)``), not a multiplication."""


def referenced_columns(table: Table, expressions: Iterable[ExprLike | None]) -> list[str] | None:
    """The table's columns the expressions may refer to (every name in their text that is
    a column's: more than needed when the source has the same names, never fewer), or None
    (all columns) when one of them may stand for columns it does not name (``*``). The
    target DataFrame reads only these (the reading tasks decode nothing else)."""
    names = set(table.schema.names)
    found: set[str] = set()
    for value in expressions:
        if value is None:
            continue
        text = text_of(value)
        if _STAR.search(text):
            return None
        found.update(n for pair in _IDENTIFIER.findall(text) for n in pair if n in names)
    return [n for n in table.schema.names if n in found]


def value_columns(
    table: Table, assignments: Mapping[str, ExprLike] | None, what: str, where: str
) -> dict[str, Column]:
    """``assignments`` (column -> SQL string or Column) checked against the table's columns."""
    if not isinstance(assignments, Mapping) or not assignments:
        raise InvalidOptionError(
            f"{where}: {what} must map the table's column names to SQL expressions or "
            f'Columns, such as {{"v": "s.v"}} or {{"v": F.col("v") + 1}}, not '
            f"{assignments!r}"
        )
    unknown = [name for name in assignments if name not in table.schema.names]
    if unknown:
        raise SchemaMismatchError(
            f"{where}: {what} names columns {unknown} the table does not have",
            [f"its columns are {table.schema.names}"],
        )
    return {name: expression(v, f"value of {name!r}", where) for name, v in assignments.items()}


def target_frame(spark: SparkSession, job: ChangeJob) -> DataFrame:
    """The live rows of the job's snapshot, read on the executors, with their location."""
    located = located_schema(job.read_schema)
    arrow = spark_arrow_schema(located)
    groups = len(job.groups)

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for group in batch.column(0).to_pylist():
                for rows in read_located(job, group):
                    yield cast_for_spark(rows, arrow)

    ids = spark.range(0, groups, 1, max(1, groups))
    return ids.mapInArrow(read, spark_schema_of(located))


def _write_tasks(
    job: ChangeJob, changes: DataFrame, partitions: int, inserts: bool
) -> list[ChangeTaskResult]:
    """Run the writing tasks: the changed rows of one data file go to one task (inserted rows,
    which have no file, spread by a hash of their values)."""
    key = F.col(FILE_COLUMN)
    if inserts:
        values = [F.col(name) for name in job.plan.schema.names]
        spread = F.lit(-1) - F.pmod(F.xxhash64(*values), F.lit(partitions))  # not a file number
        key = F.coalesce(key.cast("long"), spread)
    shuffled = changes.repartition(partitions, key)

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else 0
        # unique in the application: a resubmitted stage numbers its attempts from 0 again
        attempt = ctx.taskAttemptId() if ctx is not None else 0
        schema = job.plan.schema
        result = write_changes(
            job, (relabel_from_spark(b, schema) for b in batches), task=task, attempt=attempt
        )
        yield pa.RecordBatch.from_pydict({"result": [pickle.dumps(result)]})

    try:
        rows = shuffled.mapInArrow(write, "result binary").collect()
    except PythonException as exc:
        raise task_error(exc) from None
    return [pickle.loads(row["result"]) for row in rows]


def task_error(exc: PythonException) -> Exception:
    """The CarbonLite error a Spark task raised (such as a NOT NULL column given nulls), as
    the same class with the same message on the driver; other failures as they are."""
    return carbonlite_error(exc) or exc


def run_change(
    spark: SparkSession,
    table: Table,
    changes: Changes,
    *,
    operation: str,
    parameters: Mapping[str, str],
    description: str,
    inserts: bool = False,
    columns: Sequence[str] | None = None,
    touched: Touched | None = None,
) -> DataFrame:
    """Run a delete, update or merge whose changed rows ``changes`` builds from the target
    DataFrame (of the table's ``columns``, None: all; of the rows ``touched`` allows, None:
    every live row); the one-row result (:data:`RESULT_DDL`)."""
    parallelism = max(1, spark.sparkContext.defaultParallelism)

    def run(job: ChangeJob) -> list[ChangeTaskResult]:
        changed = resolved(changes, target_frame(spark, job), description)
        return _write_tasks(job, changed, parallelism, inserts)

    outcome = run_distributed_change(
        table,
        run,
        operation=operation,
        parameters=parameters,
        description=description,
        parallelism=parallelism,
        columns=columns,
        touched=touched,
    )
    return result_frame(spark, outcome)


def resolved(changes: Changes, target: DataFrame, description: str) -> DataFrame:
    """The changed rows ``changes`` builds from ``target``; a condition or value Spark cannot
    resolve (a column neither side has) refused as :class:`InvalidOptionError`."""
    try:
        return changes(target)
    except AnalysisException as exc:
        raise InvalidOptionError(
            f"{description}: Spark cannot resolve it: {str(exc).strip().splitlines()[0]}"
        ) from None


def result_frame(spark: SparkSession, outcome: MergeResult) -> DataFrame:
    """The one-row DataFrame of a change's counts and version (:data:`RESULT_DDL`)."""
    updated, deleted, inserted = outcome.rows_updated, outcome.rows_deleted, outcome.rows_inserted
    row = (updated + deleted + inserted, updated, deleted, inserted, outcome.version)
    names = [part.split()[0] for part in RESULT_DDL.split(",")]
    # from Arrow: a local relation Spark collects without running a job on Python workers
    columns = {name: pa.array([value], pa.int64()) for name, value in zip(names, row, strict=True)}
    return spark.createDataFrame(pa.table(columns))


def _located(target: DataFrame) -> list[Column]:
    return [target[FILE_COLUMN], target[BLOCKLET_COLUMN], target[POSITION_COLUMN]]


def _aliased(target: DataFrame, alias: str | None) -> DataFrame:
    return target.alias(alias) if alias else target


def delete_rows(
    spark: SparkSession,
    table: Table,
    condition: str | Column | None,
    *,
    alias: str | None = None,
) -> DataFrame:
    """Delete the rows ``condition`` holds for (every row when None) in one commit, by
    deletion vectors written on the executors."""
    where = f"delete from {table.path!r}"
    cond = None if condition is None else expression(condition, "condition", where)

    def changes(target: DataFrame) -> DataFrame:
        t = _aliased(target, alias)
        rows = t if cond is None else t.where(cond)
        return rows.select(*_located(t), F.lit(ACTION_DELETE).alias(ACTION_COLUMN))

    return run_change(
        spark,
        table,
        changes,
        operation="DELETE",
        parameters={"predicate": text_of(condition)},
        description=where,
        columns=referenced_columns(table, [condition]),
        touched=condition_touched(table, condition, alias, where),
    )


def update_rows(
    spark: SparkSession,
    table: Table,
    condition: str | Column | None,
    set: Mapping[str, str | Column],
    *,
    alias: str | None = None,
) -> DataFrame:
    """Set columns of the rows ``condition`` holds for (every row when None) in one commit:
    ``set`` maps a column to a SQL expression or Column of the row's old values. Each updated
    row is deleted and written again, on the executors."""
    where = f"update of {table.path!r}"
    cond = None if condition is None else expression(condition, "condition", where)
    values = value_columns(table, set, "set", where)
    types = {f.name: f.dataType for f in spark_schema_of(table.schema).fields}

    def changes(target: DataFrame) -> DataFrame:
        t = _aliased(target, alias)
        rows = t if cond is None else t.where(cond)
        new = [
            (values[name] if name in values else t[name]).cast(types[name]).alias(name)
            for name in types
        ]
        return rows.select(*_located(t), F.lit(ACTION_UPDATE).alias(ACTION_COLUMN), *new)

    return run_change(
        spark,
        table,
        changes,
        operation="UPDATE",
        parameters={"predicate": text_of(condition), "set": ",".join(sorted(values))},
        description=where,
        columns=kept_columns(referenced_columns(table, [condition, *set.values()]), table, values),
        touched=condition_touched(table, condition, alias, where),
    )


_QUOTED = re.compile(r"('(?:[^']|'')*'|`(?:[^`]|``)+`)")


def unqualified(text: str, alias: str | None) -> str:
    """``text`` with ``alias.`` taken off the column names it qualifies (``t.id > 5`` reads
    ``id > 5``), string literals and quoted names left as they are."""
    if not alias:
        return text
    qualifier = re.compile(rf"(?<![\w.`]){re.escape(alias)}\.")
    parts = _QUOTED.split(text)
    return "".join(p if n % 2 else qualifier.sub("", p) for n, p in enumerate(parts))


def condition_touched(
    table: Table, condition: ExprLike | None, alias: str | None, where: str
) -> Touched | None:
    """The rows a delete's or update's ``condition`` can hold for, when it is a SQL string
    CarbonLite reads exactly as Spark does (``touched.condition_terms``): the target is then
    read pruned by it. None (every row) otherwise: a Column, or anything Spark alone reads."""
    if not isinstance(condition, str):
        return None
    terms = condition_terms(unqualified(condition, alias), table.schema, where=where)
    return None if terms is None else Touched(condition=terms)


def kept_columns(
    found: list[str] | None, table: Table, assigned: Mapping[str, Any]
) -> list[str] | None:
    """``found`` plus the columns an update leaves as they are (it writes the row whole,
    so it reads them); None stays None (all columns)."""
    if found is None:
        return None
    return [n for n in table.schema.names if n in found or n not in assigned]
