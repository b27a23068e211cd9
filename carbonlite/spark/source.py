"""The Spark batch source: ``spark.read.format("carbonlite")``, and what the stream sources
share with it (partitions of splits, reading them on executors, the requested columns, the
``carbonlite.spark`` log lines).

Partitions are runs of blocklets (splits) from the snapshot, pruned by min/max with the option
``filter`` and the filters Spark pushes (opt-in); a user schema or the option ``columns``
naming a subset of the columns reads only those. The stream source is
carbonlite/spark/stream_source.py.
"""

from __future__ import annotations

import functools
import json
import logging
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition

from carbonlite.create import open_table
from carbonlite.errors import (
    InvalidOptionError,
    SchemaMismatchError,
)
from carbonlite.metadata.columns import IDENTITY, ColumnLayout, former_name_problems
from carbonlite.reader.expression import parse_filter
from carbonlite.reader.planner import ScanPlan, Split
from carbonlite.reader.scan import SplitReader, read_splits
from carbonlite.spark.filters import to_expression
from carbonlite.spark.options import TAIL_OPTION, SparkOptions
from carbonlite.spark.types import cast_for_spark, spark_arrow_schema
from carbonlite.spark.types import spark_schema as spark_schema_of
from carbonlite.storage import open_storage
from carbonlite.table import Table

__all__ = [
    "LOG",
    "CarbonLiteBatchReader",
    "CarbonLitePushdownReader",
    "SplitsPartition",
    "log_at_info",
    "log_plan",
    "nullable_of",
    "open_from",
    "partitions_of",
    "read_partition",
    "read_version",
    "requested_columns",
]

LOG = logging.getLogger("carbonlite.spark")

PARTITION_BYTES = 128 * 1024 * 1024


@dataclass
class SplitsPartition(InputPartition):
    """One Spark task's share: splits to read, plus what is needed to read them anywhere."""

    uri: str
    storage_options: dict[str, Any]
    table_schema: pa.Schema
    columns: list[str]
    nullable: list[bool] | None = None
    """Spark's nullability of each column (the user schema's); None: the table's."""
    splits: list[Split] = field(default_factory=list)
    filter: pc.Expression | None = None
    version: int | None = None
    layout: ColumnLayout = IDENTITY
    """Where the columns lie in data files (``metadata/columns.py``)."""


def group_splits(splits: Sequence[Split], target: int = PARTITION_BYTES) -> list[list[Split]]:
    """Pack splits in order into groups of about ``target`` bytes."""
    groups: list[list[Split]] = []
    size = 0
    for s in splits:
        if not groups or size + s.num_bytes > target:
            groups.append([])
            size = 0
        groups[-1].append(s)
        size += s.num_bytes
    return groups


class _ReaderFields(Protocol):
    uri: str
    storage_options: dict[str, Any]
    table_schema: pa.Schema
    columns: list[str]
    nullable: list[bool] | None
    layout: ColumnLayout


def partitions_of(
    reader: _ReaderFields,
    splits: Sequence[Split],
    *,
    filter: pc.Expression | None = None,
    version: int | None = None,
) -> list[InputPartition]:
    """Spark partitions of about PARTITION_BYTES each, carrying what executors need."""
    return [
        SplitsPartition(
            uri=reader.uri,
            storage_options=reader.storage_options,
            table_schema=reader.table_schema,
            columns=reader.columns,
            nullable=reader.nullable,
            splits=group,
            filter=filter,
            version=version,
            layout=reader.layout,
        )
        for group in group_splits(splits)
    ]


def read_partition(p: SplitsPartition) -> Iterator[pa.RecordBatch]:
    """Rows of a partition as Spark-typed Arrow batches (runs on an executor)."""
    storage, root = open_storage(p.uri, p.storage_options or None)
    output = pa.schema([p.table_schema.field(c) for c in p.columns])
    target = spark_arrow_schema(output)
    if p.nullable is not None:
        target = pa.schema([f.with_nullable(n) for f, n in zip(target, p.nullable, strict=True)])
    parsed = (
        parse_filter(p.filter, p.table_schema, where=repr(p.uri)) if p.filter is not None else None
    )
    reader = SplitReader(
        storage,
        root,
        p.table_schema,
        storage_options=p.storage_options,
        version=p.version,
        layout=p.layout,
    )
    try:
        for batch in read_splits(reader, p.splits, output, parsed):
            yield cast_for_spark(batch, target)
    finally:
        reader.close()


def requested_columns(
    table_schema: pa.Schema, spark_schema: Any, where: str, metadata: Any = None
) -> list[str]:
    """The columns a user schema asks for, checked against the table: each must exist, with
    the Spark type the table's column reads as; a NOT NULL field needs a NOT NULL column (a
    nullable field may name a NOT NULL column: the rows are the same). ``metadata`` (the
    table's): a missing column's error names the rename or drop behind it."""
    if spark_schema is None:
        return table_schema.names
    names = [f.name for f in spark_schema.fields]
    missing = [n for n in names if n not in table_schema.names]
    if missing:
        hints = former_name_problems(missing, metadata) if metadata is not None else []
        advice = (
            " (a catalog table keeps the schema it was registered with: after a schema "
            "change, call carbonlite.spark.register_table again)"
            if hints
            else ""
        )
        raise SchemaMismatchError(
            f"the schema given to read {where} names columns the table does not have: "
            f"{missing}{advice}",
            [*hints, f"the table's columns are {table_schema.names}"],
        )
    table_fields = {f.name: f for f in spark_schema_of(table_schema).fields}
    differences = []
    for f in spark_schema.fields:
        have = table_fields[f.name]
        if f.dataType != have.dataType:
            differences.append(
                f"{f.name}: the schema says {f.dataType.simpleString()}, the table's column "
                f"reads as {have.dataType.simpleString()}"
            )
        elif not f.nullable and have.nullable:
            differences.append(
                f"{f.name}: the schema says NOT NULL, the table's column is nullable"
            )
    if differences:
        raise SchemaMismatchError(
            f"the schema given to read {where} does not fit the table's columns: give each "
            "column with the type it reads as (NOT NULL only for a NOT NULL column)",
            differences,
        )
    return names


def nullable_of(table_schema: pa.Schema, spark_schema: Any) -> list[bool] | None:
    """The nullability Spark expects of each requested column: the user schema's, which Spark
    checks exactly (a nullable field over a NOT NULL column reads as nullable)."""
    if spark_schema is None:
        return None
    return [bool(f.nullable) for f in spark_schema.fields]


def open_from(options: SparkOptions) -> Table:
    return open_table(options.path, storage_options=options.storage_options or None)


def _filter_option(options: SparkOptions, schema: pa.Schema, where: str) -> pc.Expression | None:
    """The option ``filter``: DNF terms as JSON, ``[["id", ">", 100], ["kind", "=", "a"]]`` (AND)
    or a list of such lists (OR of ANDs). Part of the DataFrame's definition, so it prunes and
    filters every query of that DataFrame alike."""
    text = options.get("filter")
    if text is None or not text.strip():
        return None
    try:
        terms = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidOptionError(
            f"option filter={text!r} is not JSON ({exc}); give DNF terms such as "
            '[["id", ">", 100], ["kind", "in", ["a", "b"]]]'
        ) from None
    if not isinstance(terms, list) or not terms:
        raise InvalidOptionError(
            f"option filter={text!r} must be a JSON list of [column, op, value] terms (AND), or "
            "a list of such lists (OR of ANDs)"
        )
    parsed = parse_filter(terms, schema, where=where)
    return parsed.expression if parsed is not None else None


def log_at_info() -> logging.Logger:
    if LOG.level == logging.NOTSET:
        LOG.setLevel(logging.INFO)  # a Spark worker has no logging set up; INFO is our lines'
    return LOG


NO_FILTER_HINT = (
    "none (a where() without filterPushdown=true is applied by Spark after reading every "
    'blocklet: to prune, give the option filter, e.g. filter=\'[["id", ">", 100]]\', or '
    "filterPushdown=true; docs/SPARK.md, Pruning and filter pushdown)"
)
"""What a batch scan's log line says when it has no filter: the two routes that prune."""


def log_plan(what: str, plan: ScanPlan, filter: pc.Expression | None) -> None:
    """One INFO line per planned scan: the blocklets and bytes pruning kept. Spark runs the
    planning in a Python worker: with ``spark.sql.pyspark.worker.logging.enabled=true`` the line
    is in ``spark.tvf.python_worker_logs()`` (logger ``carbonlite.spark``)."""
    log_at_info()
    LOG.info(
        "carbonlite scan of %s at version %d: %d of %d blocklets selected (%d of %d bytes), "
        "%d pruned (%d by bloom filters); filter %s",
        what,
        plan.version,
        plan.blocklets_selected,
        plan.blocklets_total,
        plan.bytes_selected,
        plan.bytes_total,
        plan.blocklets_pruned,
        plan.blocklets_pruned_by_bloom,
        filter if filter is not None else NO_FILTER_HINT,
    )


class CarbonLiteBatchReader(DataSourceReader):
    """``spark.read.format("carbonlite").load(path)``, without filter pushdown: every query of a
    DataFrame reads the rows its definition names (options ``versionAsOf``, ``filter``, the
    user schema), whatever Spark 4.3 reuses between queries (docs/SPARK.md, Known problems)."""

    def __init__(self, options: SparkOptions, spark_schema: Any) -> None:
        table = open_from(options)
        self.snapshot_version = read_version(options, table)
        self.uri = table.path
        self.storage_options = table.storage_options
        snapshot = table.snapshot(self.snapshot_version)
        self.table_schema = snapshot.schema
        self.layout = snapshot.layout
        self.columns = requested_columns(
            self.table_schema, spark_schema, repr(self.uri), snapshot.metadata
        )
        self.nullable = nullable_of(self.table_schema, spark_schema)
        self.option_filter = _filter_option(options, self.table_schema, repr(self.uri))
        self.pushed: list[pc.Expression] = []
        self.tail_only = options.get_bool(TAIL_OPTION)
        """Only the files Spark's Parquet reader does not read (``spark/native_read.py``)."""

    def _filter(self) -> pc.Expression | None:
        parts = ([self.option_filter] if self.option_filter is not None else []) + self.pushed
        return functools.reduce(operator.and_, parts) if parts else None

    def partitions(self) -> list[InputPartition]:
        table = open_table(self.uri, storage_options=self.storage_options or None)
        expression = self._filter()
        plan = table.plan_splits(
            columns=self.columns,
            filter=expression,
            version=self.snapshot_version,
            tail_only=self.tail_only,
        )
        log_plan(repr(self.uri), plan, expression)
        return partitions_of(
            self, plan.splits, filter=expression, version=self.snapshot_version
        ) or [
            SplitsPartition(
                self.uri, self.storage_options, self.table_schema, self.columns, self.nullable
            )
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitsPartition)
        yield from read_partition(partition)


class CarbonLitePushdownReader(CarbonLiteBatchReader):
    """The batch reader with ``pushFilters`` (opt-in: option ``filterPushdown=true``, or
    ``register(spark, filter_pushdown=True)``). Spark 4.3 stores the reader it planned for one
    query's pushed filters on the DataFrame's relation and reuses it for later queries of that
    DataFrame that push none, and for every scan of it in one query (a union or self-join with
    different filters): those read the wrong rows. See docs/SPARK.md, Known problems."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        types = {f.name: f.type for f in self.table_schema}
        for f in filters:
            expression = to_expression(f, types)
            if expression is None:
                yield f
            else:
                self.pushed.append(expression)


def read_version(options: SparkOptions, table: Table) -> int:
    """The version a batch read sees: ``versionAsOf``, or ``timestampAsOf`` (an ISO 8601 time,
    UTC without an offset: the latest version committed at or before it), or the latest."""
    version = options.get_int("versionAsOf")
    when = options.get("timestampAsOf")
    if version is not None and when is not None:
        raise InvalidOptionError(
            "give versionAsOf or timestampAsOf, not both: they each name the version to read"
        )
    if when is not None:
        return table.version_at(when, what="timestampAsOf")
    return table.version if version is None else table.snapshot(version).version
