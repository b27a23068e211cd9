"""The ``carbonlite`` Python data source: a thin switchboard to the sources and sinks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from carbonlite.create import open_table
from carbonlite.errors import InvalidOptionError
from carbonlite.properties import validate_properties
from carbonlite.reader.planner import project_schema
from carbonlite.spark.options import Route, SparkOptions, check_options
from carbonlite.spark.sink import (
    CarbonLiteBatchWriter,
    CarbonLitePublishWriter,
    CarbonLiteStreamWriter,
)
from carbonlite.spark.source import (
    CarbonLiteBatchReader,
    CarbonLitePushdownReader,
    read_version,
)
from carbonlite.spark.stream_source import CarbonLiteStreamReader
from carbonlite.spark.types import spark_schema

__all__ = [
    "CarbonLiteDataSource",
    "CarbonLitePushdownDataSource",
    "check_stream_read_options",
    "check_stream_write_options",
]

_CATALOG_KEYS = frozenset({"provider", "owner", "location", "path", "storageoptions"})


class CarbonLiteDataSource(DataSource):
    """``format("carbonlite")``: batch and streaming reads and writes of CarbonLite tables.

    Batch reads take no filters from Spark unless the read's option ``filterPushdown`` is
    ``true`` (or the session registered :class:`CarbonLitePushdownDataSource`): Spark 4.3 can
    apply one query's pushed filters to another (docs/SPARK.md, Known problems)."""

    filter_pushdown_default = False

    bound_path: str | None = None
    """Set on the subclasses :func:`carbonlite.spark.register_table` binds to one table."""
    bound_storage_options: str = "{}"

    @classmethod
    def name(cls) -> str:
        return "carbonlite"

    extra_options: tuple[str, ...] = ()
    """Options a subclass takes besides the ``carbonlite`` ones."""

    def _options(self, route: Route | None = None) -> SparkOptions:
        options = dict(self.options)
        if self.bound_path is not None:
            # Spark's own keys for a catalog table (provider, owner) and any path it adds are
            # the catalog's; the table is the one this source is bound to
            for key in [k for k in options if k.lower() in _CATALOG_KEYS]:
                del options[key]
            options["path"] = self.bound_path
            options["storageOptions"] = self.bound_storage_options
        if route is not None:
            check_options(options, route, extra=self.extra_options)
        return SparkOptions(options)

    def schema(self) -> Any:
        if self.bound_path is None and "provider" in {k.lower() for k in self.options}:
            # Spark 4.3 passes a catalog table's LOCATION here, at CREATE TABLE, and never
            # again: reads and writes of the entry would find no table
            raise InvalidOptionError(
                "CREATE TABLE ... USING carbonlite is not supported: Spark 4.3 does not give a "
                "Python data source the table's LOCATION when the table is read or written, "
                "so the catalog entry could not be used. Register the table instead: "
                "carbonlite.spark.register_table(spark, 'name', '/path/to/table') (or, for SQL "
                "only: CREATE TEMPORARY VIEW name USING carbonlite OPTIONS (path '...'))"
            )
        options = self._options()
        table = open_table(options.path, storage_options=options.storage_options or None)
        if options.get_bool("readChangeFeed") and any(
            options.get(name) is not None for name in ("endingVersion", "endingTimestamp")
        ):  # a batch read of the changes up to a version: its columns
            from carbonlite.spark.change_feed import change_feed_versions

            version = change_feed_versions(options, table)[1]
        else:
            version = read_version(options, table)
        schema = table.snapshot(version).schema
        columns = options.get_list("columns")
        if columns:
            schema = project_schema(schema, columns, where=repr(table.path))
        if options.get_bool("readChangeFeed"):
            from carbonlite.spark.change_feed import with_changes

            schema = with_changes(schema)
        return spark_schema(schema)

    def reader(self, schema: Any) -> DataSourceReader:
        options = self._options("read")
        from carbonlite.spark.change_feed import RANGE_OPTIONS, CarbonLiteChangeFeedBatchReader

        if options.get_bool("readChangeFeed"):
            return CarbonLiteChangeFeedBatchReader(options, schema)
        given = [name for name in RANGE_OPTIONS if options.get(name) is not None]
        if given:
            raise InvalidOptionError(
                f"{', '.join(given)} name the versions of the change feed: add "
                ".option('readChangeFeed', 'true'), or read one version's rows with versionAsOf"
            )
        if options.get_bool("filterPushdown", self.filter_pushdown_default):
            return CarbonLitePushdownReader(options, schema)
        return CarbonLiteBatchReader(options, schema)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        options = self._options("write")
        if options.get("publish") is not None:
            return CarbonLitePublishWriter(options, schema, overwrite)
        return CarbonLiteBatchWriter(options, schema, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return CarbonLiteStreamWriter(self._options("writeStream"), schema, overwrite)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        options = self._options("readStream")
        if options.get_bool("readChangeFeed"):
            from carbonlite.spark.change_feed import CarbonLiteChangeFeedReader

            return CarbonLiteChangeFeedReader(options, schema)
        return CarbonLiteStreamReader(options, schema)


class CarbonLitePushdownDataSource(CarbonLiteDataSource):
    """``carbonlite`` with filter pushdown on for every batch read that does not set
    ``filterPushdown=false``: what ``register(spark, filter_pushdown=True)`` registers."""

    filter_pushdown_default = True


def check_stream_read_options(options: Mapping[str, str]) -> None:
    """What the options of ``spark.readStream.format("carbonlite")`` would make fail once the
    query runs, raised now: an unknown option, a bad value, a starting position the table
    does not have (the table must exist). ``DataStreamReader.load()`` calls it
    (carbonlite/spark/patches.py); the reader it builds is thrown away."""
    reader = CarbonLiteDataSource(dict(options)).streamReader(None)
    assert isinstance(reader, CarbonLiteStreamReader)
    reader.check_start()


def check_stream_write_options(options: Mapping[str, str]) -> None:
    """The same for ``df.writeStream.format("carbonlite")`` at ``start()``: unknown options, no
    path, ``storageOptions`` that are not JSON, table properties (``property.<name>``) that
    are unknown or bad. Nothing is opened or created."""
    checked = CarbonLiteDataSource(dict(options))._options("writeStream")
    checked.path  # noqa: B018 - raises when there is none
    checked.storage_options  # noqa: B018 - raises when not JSON
    validate_properties(checked.table_properties)
