"""The ``carbonlite`` Python data source: a thin switchboard to the sources and sinks."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from carbonlite.create import open_table
from carbonlite.reader.planner import project_schema
from carbonlite.spark.options import SparkOptions
from carbonlite.spark.sink import CarbonLiteBatchWriter, CarbonLiteStreamWriter
from carbonlite.spark.source import (
    CarbonLiteBatchReader,
    CarbonLitePushdownReader,
    CarbonLiteStreamReader,
)
from carbonlite.spark.types import spark_schema

__all__ = ["CarbonLiteDataSource", "CarbonLitePushdownDataSource"]


class CarbonLiteDataSource(DataSource):
    """``format("carbonlite")``: batch and streaming reads and writes of CarbonLite tables.

    Batch reads take no filters from Spark unless the read's option ``filterPushdown`` is
    ``true`` (or the session registered :class:`CarbonLitePushdownDataSource`): Spark 4.3 can
    apply one query's pushed filters to another (docs/SPARK.md, Known problems)."""

    filter_pushdown_default = False

    @classmethod
    def name(cls) -> str:
        return "carbonlite"

    def _options(self) -> SparkOptions:
        return SparkOptions(self.options)

    def schema(self) -> Any:
        options = self._options()
        table = open_table(options.path, storage_options=options.storage_options or None)
        version = options.get_int("versionAsOf")
        schema = table.snapshot(version).schema
        columns = options.get_list("columns")
        if columns:
            schema = project_schema(schema, columns, where=repr(table.path))
        return spark_schema(schema)

    def reader(self, schema: Any) -> DataSourceReader:
        options = self._options()
        if options.get_bool("filterPushdown", self.filter_pushdown_default):
            return CarbonLitePushdownReader(options, schema)
        return CarbonLiteBatchReader(options, schema)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return CarbonLiteBatchWriter(self._options(), schema, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return CarbonLiteStreamWriter(self._options(), schema, overwrite)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return CarbonLiteStreamReader(self._options(), schema)


class CarbonLitePushdownDataSource(CarbonLiteDataSource):
    """``carbonlite`` with filter pushdown on for every batch read that does not set
    ``filterPushdown=false``: what ``register(spark, filter_pushdown=True)`` registers."""

    filter_pushdown_default = True
