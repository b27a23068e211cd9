"""Save modes and output modes Spark cannot pass to a Python data source.

Spark refuses ``ErrorIfExists`` (the default of ``df.write``) and ``Ignore`` for Python data
sources before any of the source's code runs, and rejects ``outputMode("update")`` with an
internal-looking assertion. For ``format("carbonlite")`` only, these wrappers remember the
format and modes set on the (classic, non-Connect) ``DataFrameWriter``/``DataStreamWriter``:
``error``/``ignore`` are then run as an append that carries the requested mode as the option
``carbonlite.saveMode``, which the batch writer enforces; ``update`` raises
:class:`~carbonlite.errors.InvalidOptionError` naming the supported modes.

Spark runs a Python data source's ``writer()`` in a Python worker that has no SparkSession, so
session settings the sink honours are read here, on the driver, and passed on as options:
``spark.sql.sources.partitionOverwriteMode`` as ``carbonlite.sessionPartitionOverwriteMode``
(the write option ``partitionOverwriteMode`` takes precedence, as for Spark's file sources).
"""

from __future__ import annotations

import functools
from typing import Any

from carbonlite.errors import InvalidOptionError

__all__ = ["install_writer_patches"]

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
        if _is_ours(source) and requested in _SAVE_MODES_VIA_OPTION:
            options = {**options, "carbonlite.saveMode": requested}
            return original_save(self, path, format, "append", partitionBy, **options)
        return original_save(self, path, format, mode, partitionBy, **options)

    DataFrameWriter.format = format  # type: ignore[method-assign]
    DataFrameWriter.mode = mode  # type: ignore[method-assign]
    DataFrameWriter.save = save  # type: ignore[method-assign]

    stream_format = DataStreamWriter.format
    stream_output_mode = DataStreamWriter.outputMode
    stream_start = DataStreamWriter.start

    @functools.wraps(stream_format)
    def sformat(self: Any, source: str) -> Any:
        self._carbonlite_format = source
        return stream_format(self, source)

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
        return stream_start(self, path, format, outputMode, *args, **kwargs)

    DataStreamWriter.format = sformat  # type: ignore[method-assign]
    DataStreamWriter.outputMode = output_mode  # type: ignore[method-assign]
    DataStreamWriter.start = start  # type: ignore[method-assign]
    DataFrameWriter._carbonlite_patched = True  # type: ignore[attr-defined]
