"""A CarbonLite error raised inside Spark comes back as itself (issue 40 §4:
carbonlite/spark/spark_errors.py): rebuilt from the text Spark wraps it in, its message
first, Spark's own tail (SQLSTATE, the streaming query's description, JVM frames) cut off.
The Spark routes (save, stream queries, load) are checked where they fail:
tests/spark/test_batch_write.py, test_schema_evolution.py, test_stream_source.py."""

from __future__ import annotations

import pytest

import carbonlite as cl
from carbonlite.spark.spark_errors import carbonlite_error

WORKER = (
    "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
    '  File "/x/sink.py", line 221, in write\n    return write_task(...)\n'
    "carbonlite.errors.SchemaMismatchError: data does not match the schema of /t\n"
    "  column 'id' is declared non-nullable but has 1 null(s)\n SQLSTATE: 38000 SQLSTATE: XXKST\n"
    "=== Streaming Query ===\nIdentifier: [id = 1]\n\tat org.apache.spark.Foo(Foo.scala:1)\n"
)


def test_a_task_error_behind_a_streaming_query_is_itself() -> None:
    error = carbonlite_error(Exception(WORKER))
    assert isinstance(error, cl.SchemaMismatchError)
    assert str(error) == (
        "data does not match the schema of /t\n"
        "  column 'id' is declared non-nullable but has 1 null(s)"
    )


def test_an_error_of_a_constructor_with_more_arguments() -> None:
    text = "carbonlite.errors.SchemaChangedError: version 3 renamed 'k'\n SQLSTATE: 38000"
    error = carbonlite_error(Exception(text))
    assert isinstance(error, cl.SchemaChangedError)
    assert str(error) == "version 3 renamed 'k'"
    assert error.version is None and error.changes is None  # Spark passed only the text
    corrupt = carbonlite_error(Exception("carbonlite.errors.CorruptDataError: bad magic (at x)"))
    assert isinstance(corrupt, cl.CorruptDataError) and corrupt.path is None


def test_an_error_of_exceptions_own_constructor() -> None:
    error = carbonlite_error(Exception("carbonlite.errors.TableExistsError: table '/t' exists"))
    assert isinstance(error, cl.TableExistsError) and error.args == ("table '/t' exists",)


def test_the_last_error_named_is_the_one_raised() -> None:
    text = (
        "carbonlite.errors.StorageError: first\n\nDuring handling...\n"
        "carbonlite.errors.CommitStateUnknownError: the commit of version 4 is unknown"
    )
    error = carbonlite_error(Exception(text))
    assert isinstance(error, cl.CommitStateUnknownError)
    assert str(error) == "the commit of version 4 is unknown"


@pytest.mark.parametrize(
    "text",
    ["Writing job failed", "carbonlite.errors.NoSuchError: x", "carbonlite.errors.annotations: x"],
)
def test_anything_else_is_left_to_spark(text: str) -> None:
    assert carbonlite_error(Exception(text)) is None
