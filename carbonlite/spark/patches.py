"""Save modes and output modes Spark cannot pass to a Python data source.

Spark refuses ``ErrorIfExists`` (the default of ``df.write``) and ``Ignore`` for Python data
sources before any of the source's code runs, and rejects ``outputMode("update")`` with an
internal-looking assertion. For ``format("carbonlite")`` only, these wrappers remember the
format and modes set on the (classic, non-Connect) ``DataFrameWriter``/``DataStreamWriter``:
``error``/``ignore`` are then run as an append that carries the requested mode as the option
``carbonlite.saveMode``, which the batch writer enforces; ``update`` raises
:class:`~carbonlite.errors.InvalidOptionError` naming the supported modes.

Streams: Spark builds a Python source's stream reader and a sink's stream writer only once the
query runs, in its own thread, so a bad option used to surface at ``awaitTermination()``
seconds later. ``DataStreamReader`` and ``DataStreamWriter`` also remember the options set with
``option``/``options``, and ``load()``/``start()`` check them for ``format("carbonlite")``
(:func:`carbonlite.spark.datasource.check_stream_read_options`) before Spark is asked.

``partitionBy``: Spark ignores ``DataStreamWriter.partitionBy`` for a Python sink (the table
was created unpartitioned) and fails a batch write given ``DataFrameWriter.partitionBy`` with
"The provided partitioning or clustering columns do not match the existing table's". For
``format("carbonlite")`` the columns given either way become the option ``partitionBy`` (the
batch writer's JVM side forgets them), so both partition a new table, and a write whose
columns differ from an existing table's partitioning is refused
(:func:`carbonlite.spark.sink.open_or_create`).

SQL: ``ALTER TABLE`` on a table registered with ``register_table`` would change only Spark's
catalog entry (every later read and insert by name then fails until ``register_table`` runs
again); ``SparkSession.sql`` refuses it with
:class:`~carbonlite.errors.UnsupportedStatementError` naming the Python call that changes the
table itself.

Reads: ``DataFrameReader.load`` for ``format("carbonlite")`` returns the plan of Spark's own
Parquet reader over the table's columnar Parquet files, united with the Python source for the
rest (``spark/native_read.py``); the reader remembers its options and user schema for it.

Errors: a CarbonLite error raised inside Spark (the sink's writer or tasks, a stream's
micro-batch, a read's schema) comes back from ``save``, ``insertInto``, ``load``,
``DataStreamWriter.start``, ``StreamingQuery.awaitTermination``/``processAllAvailable`` and
the DataFrame actions (``collect``, ``count``, ``show``, ``toPandas``, ...) as itself
(:func:`carbonlite.spark.spark_errors.carbonlite_error`), Spark's exception as its cause,
instead of behind "Writing job failed" and a Python traceback.

Spark runs a Python data source's ``writer()`` in a Python worker that has no SparkSession, so
session settings the sink honours are read here, on the driver, and passed on as options:
``spark.sql.sources.partitionOverwriteMode`` as ``carbonlite.sessionPartitionOverwriteMode``
(the write option ``partitionOverwriteMode`` takes precedence, as for Spark's file sources).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from carbonlite.errors import CarbonLiteError, InvalidOptionError
from carbonlite.spark.spark_errors import carbonlite_error

__all__ = [
    "install_error_translation",
    "install_reader_patch",
    "install_sql_patch",
    "install_table_patch",
    "install_writer_patches",
]

_FORMAT = "carbonlite"
_SAVE_MODES_VIA_OPTION = ("error", "errorifexists", "default", "ignore")
_SESSION_SETTINGS = {
    "spark.sql.sources.partitionOverwriteMode": "carbonlite.sessionPartitionOverwriteMode",
}
"""Session settings the batch sink honours, and the option each is passed on as."""


def _is_ours(source: Any) -> bool:
    return isinstance(source, str) and source.lower() == _FORMAT


def _session_options(writer: Any) -> dict[str, str]:
    """The session settings of :data:`_SESSION_SETTINGS` that are set, as options."""
    spark = getattr(writer, "_spark", None)
    if spark is None:
        return {}
    out = {}
    for setting, option in _SESSION_SETTINGS.items():
        value = spark.conf.get(setting, None)
        if value is not None:
            out[option] = str(value)
    return out


def _translating(method: Any) -> Any:
    """``method``, raising the CarbonLite error a Spark exception reports as itself."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except CarbonLiteError:
            raise
        except Exception as exc:
            ours = carbonlite_error(exc)
            if ours is None:
                raise
            raise ours from exc

    call._carbonlite_translating = True  # type: ignore[attr-defined]
    return call


_ACTIONS = ("collect", "count", "take", "head", "first", "show", "toPandas", "toArrow")
"""The DataFrame actions whose CarbonLite errors come back as themselves."""


def install_error_translation() -> None:
    """CarbonLite errors from Spark's writes, stream queries and reads as themselves (see
    the module's documentation)."""
    from pyspark.sql.classic.dataframe import DataFrame  # overrides the actions
    from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    for cls, names in (
        (DataFrameWriter, ("save", "insertInto")),
        (DataFrameReader, ("load",)),
        (DataStreamWriter, ("start",)),
        (StreamingQuery, ("awaitTermination", "processAllAvailable")),
        # a read's reader is made when an action runs (a user schema checked, a version read)
        (DataFrame, _ACTIONS),
    ):
        for name in names:
            method = getattr(cls, name)
            if not getattr(method, "_carbonlite_translating", False):
                setattr(cls, name, _translating(method))


def install_writer_patches() -> None:
    from pyspark.sql.readwriter import DataFrameWriter
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    if getattr(DataFrameWriter, "_carbonlite_patched", False):
        return

    original_format = DataFrameWriter.format
    original_mode = DataFrameWriter.mode
    original_save = DataFrameWriter.save

    @functools.wraps(original_format)
    def format(self: Any, source: str) -> Any:
        self._carbonlite_format = source
        return original_format(self, source)

    @functools.wraps(original_mode)
    def mode(self: Any, saveMode: str | None) -> Any:
        if saveMode is not None:
            self._carbonlite_mode = saveMode
        return original_mode(self, saveMode)

    @functools.wraps(original_save)
    def save(
        self: Any,
        path: str | None = None,
        format: str | None = None,
        mode: str | None = None,
        partitionBy: Any = None,
        **options: Any,
    ) -> None:
        source = format or getattr(self, "_carbonlite_format", None)
        requested = (mode or getattr(self, "_carbonlite_mode", None) or "errorifexists").lower()
        if _is_ours(source):
            options = {**_session_options(self), **options}
            options = _partitioning_as_option(self, partitionBy, options)
            partitionBy = None
            _forget_jvm_partitioning(self)
        if _is_ours(source) and requested in _SAVE_MODES_VIA_OPTION:
            options = {**options, "carbonlite.saveMode": requested}
            return original_save(self, path, format, "append", partitionBy, **options)
        return original_save(self, path, format, mode, partitionBy, **options)

    DataFrameWriter.format = format  # type: ignore[method-assign]
    DataFrameWriter.mode = mode  # type: ignore[method-assign]
    DataFrameWriter.save = save  # type: ignore[method-assign]

    stream_output_mode = DataStreamWriter.outputMode
    stream_start = DataStreamWriter.start

    @functools.wraps(stream_output_mode)
    def output_mode(self: Any, outputMode: str) -> Any:
        self._carbonlite_output_mode = outputMode
        return stream_output_mode(self, outputMode)

    @functools.wraps(stream_start)
    def start(
        self: Any,
        path: str | None = None,
        format: str | None = None,
        outputMode: str | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        source = format or getattr(self, "_carbonlite_format", None)
        requested = outputMode or getattr(self, "_carbonlite_output_mode", None)
        if _is_ours(source) and requested is not None and requested.lower() == "update":
            raise InvalidOptionError(
                "the carbonlite sink supports outputMode 'append' (new rows) and 'complete' "
                "(replace the table each batch), not 'update'; for upserts use foreachBatch"
            )
        if _is_ours(source):
            if args:  # start(path, format, outputMode, partitionBy, queryName, **options)
                kwargs.setdefault("partitionBy", args[0])
                if len(args) > 1:
                    kwargs.setdefault("queryName", args[1])
                args = ()
            kwargs = _partitioning_as_option(self, kwargs.pop("partitionBy", None), kwargs)
            _check_stream_write(self, path, kwargs)
        return stream_start(self, path, format, outputMode, *args, **kwargs)

    _remember_format(DataStreamWriter)
    _remember_partitioning(DataFrameWriter)
    _remember_partitioning(DataStreamWriter)
    _record_options_of(DataFrameWriter)
    DataStreamWriter.outputMode = output_mode  # type: ignore[method-assign]
    DataStreamWriter.start = start  # type: ignore[method-assign]
    _install_stream_option_checks()
    DataFrameWriter._carbonlite_patched = True  # type: ignore[attr-defined]


_SPARK_START_ARGUMENTS = ("partitionBy", "queryName")


def _recorded(obj: Any) -> dict[str, str]:
    """The options set on a DataStreamReader/Writer so far, by lower-cased key (Spark's keys
    are case-insensitive: the last one set wins) to (key as given, value)."""
    return {key: value for key, value in obj.__dict__.get("_carbonlite_options", {}).values()}


def _record(obj: Any, options: dict[str, Any]) -> None:
    from pyspark.sql.readwriter import to_str

    recorded = obj.__dict__.setdefault("_carbonlite_options", {})
    for key, value in options.items():
        if value is not None:
            recorded[str(key).lower()] = (str(key), to_str(value))


def _with(obj: Any, path: str | None, options: dict[str, Any]) -> dict[str, str]:
    _record(obj, options)
    if path is not None:
        _record(obj, {"path": path})
    return _recorded(obj)


def _check_stream_write(writer: Any, path: str | None, kwargs: dict[str, Any]) -> None:
    from carbonlite.spark.datasource import check_stream_write_options

    options = {k: v for k, v in kwargs.items() if k not in _SPARK_START_ARGUMENTS}
    check_stream_write_options(_with(writer, path, options))


def _install_stream_option_checks() -> None:
    """``option``/``options`` of DataStreamReader and DataStreamWriter remember what they set;
    ``DataStreamReader.load()`` checks it for ``format("carbonlite")`` (``start()`` is wrapped
    above)."""
    from pyspark.sql.streaming.readwriter import DataStreamReader, DataStreamWriter

    for cls in (DataStreamReader, DataStreamWriter):
        _record_options_of(cls)

    _remember_format(DataStreamReader)
    reader_load = DataStreamReader.load

    @functools.wraps(reader_load)
    def load(
        self: Any,
        path: str | None = None,
        format: str | None = None,
        schema: Any = None,
        **options: Any,
    ) -> Any:
        if _is_ours(format or getattr(self, "_carbonlite_format", None)):
            from carbonlite.spark.datasource import check_stream_read_options

            check_stream_read_options(_with(self, path, options))
        return reader_load(self, path, format, schema, **options)

    DataStreamReader.load = load  # type: ignore[method-assign]


def _record_options_of(cls: Any) -> None:
    """Wrap ``cls.option``/``cls.options`` to remember what they set."""
    original_option, original_options = cls.option, cls.options

    @functools.wraps(original_option)
    def option(self: Any, key: str, value: Any) -> Any:
        _record(self, {key: value})
        return original_option(self, key, value)

    @functools.wraps(original_options)
    def options(self: Any, **opts: Any) -> Any:
        _record(self, opts)
        return original_options(self, **opts)

    cls.option = option
    cls.options = options


def _remember(cls: Any, method: str, attribute: str, value: Any = lambda arg: arg) -> None:
    """Wrap ``cls.<method>`` (a setter of a reader or writer) to remember, on the instance
    as ``attribute``, ``value`` of what it was given; then it does what it did."""
    original = getattr(cls, method)

    @functools.wraps(original)
    def remembering(self: Any, *args: Any) -> Any:
        setattr(self, attribute, value(args if len(args) != 1 else args[0]))
        return original(self, *args)

    setattr(cls, method, remembering)


def _remember_format(cls: Any) -> None:
    """Wrap ``cls.format`` to remember the format on the instance (``_carbonlite_format``)."""
    _remember(cls, "format", "_carbonlite_format")


def _columns(cols: Any) -> list[str]:
    """Spark's ``partitionBy`` arguments (names, or one list of them) as a list."""
    if cols is None:
        return []
    if isinstance(cols, str):
        return [cols]
    if len(cols) == 1 and isinstance(cols[0], (list, tuple)):
        cols = cols[0]
    return [str(c) for c in cols]


def _remember_partitioning(cls: Any) -> None:
    """Wrap ``cls.partitionBy`` to remember the columns on the instance as well."""
    _remember(cls, "partitionBy", "_carbonlite_partition_by", _columns)


def _partitioning_as_option(writer: Any, argument: Any, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the columns of ``partitionBy`` (the writer's, or the argument of
    ``save``/``start``) as the option ``partitionBy``; one that names other fields than the
    option given too is an :class:`InvalidOptionError`."""
    from carbonlite.spark.sink import partition_fields

    columns = _columns(argument) or getattr(writer, "_carbonlite_partition_by", [])
    if not columns:
        return options
    given = {k.lower(): v for k, v in {**_recorded(writer), **options}.items()}.get("partitionby")
    if given is not None and partition_fields(str(given)) != columns:
        raise InvalidOptionError(
            f"partitionBy({', '.join(map(repr, columns))}) and option partitionBy={given!r} "
            "name different partition fields: give one of them"
        )
    out = {k: v for k, v in options.items() if k.lower() != "partitionby"}
    # lower case: ``partitionBy`` is a parameter of save() and start() themselves (Spark reads
    # option keys case-insensitively)
    return {**out, "partitionby": ",".join(columns)}


def _forget_jvm_partitioning(writer: Any) -> None:
    """Clear the partition columns the JVM ``DataFrameWriter`` holds (Spark refuses them for a
    Python data source; they travel as the option ``partitionBy`` instead)."""
    if not getattr(writer, "_carbonlite_partition_by", None):
        return
    try:
        jwrite = writer._jwrite
        field = jwrite.getClass().getSuperclass().getDeclaredField("partitioningColumns")
        field.setAccessible(True)
        field.set(jwrite, getattr(getattr(writer._spark._jvm.scala, "None$"), "MODULE$"))
    except Exception as exc:  # another Spark build: say what to do instead
        raise InvalidOptionError(
            "this Spark cannot hand partitionBy() to the carbonlite writer "
            f"({type(exc).__name__}); give .option('partitionBy', "
            f"{','.join(writer._carbonlite_partition_by)!r}) instead"
        ) from None


def install_reader_patch() -> None:
    """Batch reads of ``format("carbonlite")`` by Spark's Parquet reader where they can be
    (:func:`carbonlite.spark.native_read.native_dataframe`)."""
    from pyspark.sql.readwriter import DataFrameReader

    if getattr(DataFrameReader, "_carbonlite_patched", False):
        return
    _remember_format(DataFrameReader)
    _record_options_of(DataFrameReader)
    original_schema = DataFrameReader.schema
    original_load = DataFrameReader.load
    _remember(DataFrameReader, "schema", "_carbonlite_schema")

    @functools.wraps(original_load)
    def load(
        self: Any,
        path: Any = None,
        format: str | None = None,
        schema: Any = None,
        **options: Any,
    ) -> Any:
        source = format or getattr(self, "_carbonlite_format", None)
        if _is_ours(source) and (path is None or isinstance(path, str)):
            from carbonlite.spark.native_read import native_dataframe

            given = {**_recorded(self), **{k: str(v) for k, v in options.items()}}
            if path is not None:
                given["path"] = path
            user = _struct(self._spark, schema or getattr(self, "_carbonlite_schema", None))

            def python_source(opts: dict[str, str]) -> Any:
                reader = self._spark.read.format(_FORMAT).options(**opts)
                if user is not None:
                    reader = original_schema(reader, user)
                return original_load(reader)

            df = native_dataframe(self._spark, given, user, python_source)
            if df is not None:
                return df
        return original_load(self, path, format, schema, **options)

    DataFrameReader.load = load  # type: ignore[method-assign]
    DataFrameReader._carbonlite_patched = True  # type: ignore[attr-defined]


def install_table_patch() -> None:
    """``spark.table(name)`` and ``spark.read.table(name)`` of a CarbonLite table registered
    in this process read as ``spark.read.format("carbonlite").load(path)`` does, by Spark's
    Parquet reader where they can (the reader's options, ``versionAsOf`` say, go with them);
    every other table is Spark's."""
    from pyspark.sql.readwriter import DataFrameReader
    from pyspark.sql.session import SparkSession

    if getattr(DataFrameReader, "_carbonlite_table_patched", False):
        return
    original_reader_table = DataFrameReader.table
    original_session_table = SparkSession.table

    def load_bound(reader: Any, spark: Any, name: Any) -> Any:
        from carbonlite.spark.catalog import bound_here

        bound = bound_here(spark, name) if isinstance(name, str) else None
        if bound is None:
            return None
        path, storage_options = bound
        reader = reader.format(_FORMAT)
        if storage_options and "storageoptions" not in _recorded_keys(reader):
            import json

            reader = reader.option("storageOptions", json.dumps(storage_options))
        return reader.load(path)

    @functools.wraps(original_reader_table)
    def reader_table(self: Any, tableName: str) -> Any:
        df = load_bound(self, self._spark, tableName)
        return df if df is not None else original_reader_table(self, tableName)

    @functools.wraps(original_session_table)
    def session_table(self: Any, tableName: str) -> Any:
        df = load_bound(self.read, self, tableName)
        return df if df is not None else original_session_table(self, tableName)

    DataFrameReader.table = reader_table  # type: ignore[method-assign]
    SparkSession.table = session_table  # type: ignore[method-assign]
    DataFrameReader._carbonlite_table_patched = True  # type: ignore[attr-defined]


def _recorded_keys(obj: Any) -> set[str]:
    """The lower-cased keys of the options set on ``obj`` so far."""
    return set(obj.__dict__.get("_carbonlite_options", {}))


def _struct(spark: Any, schema: Any) -> Any:
    """A user schema (a ``StructType`` or a DDL string) as a ``StructType``; None: none."""
    if schema is None or not isinstance(schema, str):
        return schema
    from pyspark.sql.types import StructType

    parsed = StructType.fromDDL(schema)
    return parsed if isinstance(parsed, StructType) else StructType.fromDDL(f"struct<{schema}>")


_ALTER_TABLE = re.compile(
    r"\s*ALTER\s+TABLE\s+((?:`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)"
    r"(?:\s*\.\s*(?:`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)){0,2})",
    re.IGNORECASE,
)


def install_sql_patch() -> None:
    """``ALTER TABLE`` on a CarbonLite table registered by name is refused (see the module's
    notes) before Spark runs it; every other statement is Spark's."""
    from pyspark.sql.session import SparkSession

    if getattr(SparkSession, "_carbonlite_sql_patched", False):
        return
    original = SparkSession.sql

    @functools.wraps(original)
    def sql(self: Any, sqlQuery: str, args: Any = None, **kwargs: Any) -> Any:
        match = _ALTER_TABLE.match(sqlQuery) if isinstance(sqlQuery, str) else None
        if match is not None:
            from carbonlite.spark.catalog import is_carbonlite_table

            name = re.sub(r"\s*\.\s*", ".", match.group(1))
            if is_carbonlite_table(self, name):
                from carbonlite.errors import UnsupportedStatementError

                raise UnsupportedStatementError(
                    f"ALTER TABLE {name} would change only Spark's catalog entry of the "
                    "CarbonLite table, not the table: change the table with carbonlite "
                    "(Table.add_columns, rename_column, drop_columns, widen_column, "
                    "set_properties, unset_properties), then call "
                    f"carbonlite.spark.register_table(spark, {name!r}, path) again"
                )
        return original(self, sqlQuery, args, **kwargs)

    SparkSession.sql = sql  # type: ignore[method-assign]
    SparkSession._carbonlite_sql_patched = True  # type: ignore[attr-defined]
