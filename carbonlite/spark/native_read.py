"""Batch reads by Spark's own Parquet reader (issue 40 §1).

A table whose columnar segments are Parquet (``columnar_format = parquet``) is read by
``spark.read.format("carbonlite").load(path)`` as a plan of Spark's vectorized Parquet scan
over its columnar files (column pruning, filter pushdown to row groups, whole-stage code
generation) united with the Python source for the rest of the version, its streaming tail
(``Table.plan_splits(tail_only=True)``). What Spark needs to read the files as CarbonLite
does comes from :func:`carbonlite.reader.parquet_view.parquet_view`:

- each column under the name it has in the file (renamed columns keep their physical name),
  at the table's type (Spark's Parquet reader widens ``int`` to ``bigint`` and the like);
- a column a file lacks (added after the file was written) as its default, or null;
- rows deleted by deletion vectors left out by an anti-join on ``_metadata.file_path`` and
  ``_metadata.row_index`` against their positions (broadcast).

The version is fixed when the DataFrame is made (as the Python source fixes it), so every
query of the DataFrame, any union or self-join of it, reads the same rows: the plan is
Spark's own and holds no state a later query could reuse wrongly.

Spark reads Parquet columns as nullable: a user schema's NOT NULL is not kept (as
``spark.read.schema(...).parquet(...)`` keeps none).

Spark reads the Python source instead (:func:`native_dataframe` answers None) when the
version has no columnar Parquet file, when the read gives options the native plan does not
take (``filter``, ``filterPushdown``, ``nativeRead=false``), for tables outside the local
file system (Spark has no object-store connector here), and when a column's type reads in
Spark as another type than the file holds (unsigned integers, large strings and binaries,
nanosecond timestamps, times, durations, float16): those go through CarbonLite's casts.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from carbonlite.reader.parquet_view import ParquetFileRead, ParquetView
from carbonlite.spark.options import TAIL_OPTION, SparkOptions
from carbonlite.spark.source import open_from, read_version, requested_columns
from carbonlite.spark.types import spark_arrow_schema, spark_schema

__all__ = ["NATIVE_READ_OPTIONS", "native_dataframe"]

NATIVE_READ_OPTIONS = frozenset(
    {"path", "storageoptions", "versionasof", "timestampasof", "nativeread"}
)
"""Options (lower case) a native read takes; any other sends the read to the Python source."""

_FILE_KEY = "__carbonlite_file"
_ROW_KEY = "__carbonlite_row"


def native_dataframe(
    spark: Any, options: Mapping[str, str], user_schema: Any, load_python: Any
) -> Any | None:
    """The DataFrame of a batch read through Spark's Parquet reader, or None when the read
    goes to the Python source. ``load_python(options)``: the Python source's DataFrame of
    ``options`` (for the tail)."""
    opts = SparkOptions(options)
    if not opts.get_bool("nativeRead", True):
        return None
    if any(k.lower() not in NATIVE_READ_OPTIONS for k in options):
        return None
    table = open_from(opts)
    if table.storage.protocol not in ("file", "local"):
        return None
    version = read_version(opts, table)
    view = table.parquet_view(version)
    schema = view.schema
    if not view.files or not _spark_reads_as_is(schema, view):
        return None
    snapshot = table.snapshot(version)
    columns = requested_columns(schema, user_schema, repr(table.path), snapshot.metadata)
    types = {f.name: f.dataType for f in spark_schema(schema).fields}
    frames = [
        _files_frame(spark, files, columns, types, view) for files in _groups(view.files).values()
    ]
    if view.tail_files:
        tail = {
            k: v
            for k, v in options.items()
            if k.lower() not in ("versionasof", "timestampasof", "nativeread")
        }
        tail.update({"versionAsOf": str(version), TAIL_OPTION: "true"})
        frames.append(load_python(tail).select(*columns))
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


def _spark_reads_as_is(schema: pa.Schema, view: ParquetView) -> bool:
    """Whether Spark's Parquet reader gives every column the type CarbonLite's Spark source
    gives it, and tells the files' column names apart (Spark matches names ignoring case)."""
    if spark_arrow_schema(schema) != schema:  # (every timestamp there is in microseconds)
        return False
    for file in view.files:
        names = list(file.names.values())
        if len({n.lower() for n in names}) != len(names):
            return False
    return True


def _groups(files: tuple[ParquetFileRead, ...]) -> dict[Any, list[ParquetFileRead]]:
    """Files read by one scan: the same column names, and deleted rows or none."""
    groups: dict[Any, list[ParquetFileRead]] = {}
    for f in files:
        key = (tuple(sorted(f.names.items())), f.deleted is not None)
        groups.setdefault(key, []).append(f)
    return groups


def _files_frame(
    spark: Any,
    files: list[ParquetFileRead],
    columns: list[str],
    types: Mapping[str, Any],
    view: ParquetView,
) -> Any:
    """Spark's scan of ``files`` (one group), as the table's ``columns``."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    names = files[0].names
    present = [c for c in columns if c in names]
    read_schema = StructType([StructField(names[c], types[c], True) for c in present])
    df = spark.read.format("parquet").schema(read_schema).load([f.uri for f in files])
    if files[0].deleted is not None:
        df = df.select(
            "*",
            F.regexp_extract(F.col("_metadata.file_path"), r"([^/]+/[^/]+)$", 1).alias(_FILE_KEY),
            F.col("_metadata.row_index").alias(_ROW_KEY),
        )
        with_deletes = [(f.path, f.deleted) for f in files if f.deleted is not None]
        deleted = pa.table(
            {
                _FILE_KEY: pa.array(
                    [_file_key(path) for path, rows in with_deletes for _ in range(len(rows))],
                    pa.string(),
                ),
                _ROW_KEY: pa.array(np.concatenate([rows for _, rows in with_deletes]), pa.int64()),
            }
        )
        positions = spark.createDataFrame(deleted)
        df = df.join(F.broadcast(positions), [_FILE_KEY, _ROW_KEY], "left_anti")
    return df.select(*[_column(F, c, names, types, view) for c in columns])


def _file_key(path: str) -> str:
    """The last two parts of a file's path (``<segment>/<name>``), as matched against the end
    of Spark's ``_metadata.file_path``."""
    return "/".join(path.split("/")[-2:])


def _column(
    F: Any, column: str, names: Mapping[str, str], types: Mapping[str, Any], view: ParquetView
) -> Any:
    if column in names:
        return F.col(f"`{names[column]}`").alias(column)
    value = view.defaults.get(column)
    return F.lit(value).cast(types[column]).alias(column)
