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
from carbonlite.spark.options import SparkOptions
from carbonlite.spark.sink import CarbonLiteBatchWriter, CarbonLiteStreamWriter
from carbonlite.spark.source import CarbonLiteBatchReader, CarbonLiteStreamReader
from carbonlite.spark.types import spark_schema

__all__ = ["CarbonLiteDataSource"]


class CarbonLiteDataSource(DataSource):
    """``format("carbonlite")``: batch and streaming reads and writes of CarbonLite tables."""

    @classmethod
    def name(cls) -> str:
        return "carbonlite"

    def _options(self) -> SparkOptions:
        return SparkOptions(self.options)

    def schema(self) -> Any:
        options = self._options()
        table = open_table(options.path, storage_options=options.storage_options or None)
        version = options.get_int("versionAsOf")
        return spark_schema(table.snapshot(version).schema)

    def reader(self, schema: Any) -> DataSourceReader:
        return CarbonLiteBatchReader(self._options(), schema)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return CarbonLiteBatchWriter(self._options(), schema, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return CarbonLiteStreamWriter(self._options(), schema, overwrite)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return CarbonLiteStreamReader(self._options(), schema)
