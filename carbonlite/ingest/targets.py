"""The tables an ingester writes: the target, which must exist, and the bad-records table,
made at the first bad record (a refused run leaves no table behind).

Shared by the Kafka ingester and the file ingester; each passes its own bad-records schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from carbonlite.create import check_new_table_place, create_table, open_table
from carbonlite.errors import InvalidOptionError, TableExistsError, TableNotFoundError
from carbonlite.format.conform import schema_differences
from carbonlite.table import Table

__all__ = ["create_bad_records", "open_bad_records", "open_target"]


def open_target(
    path: str, storage_options: Mapping[str, Any] | None, writer_id: str | None
) -> Table:
    """The table to ingest into, which must exist."""
    try:
        return open_table(path, storage_options=storage_options, writer_id=writer_id)
    except TableNotFoundError as exc:
        raise TableNotFoundError(
            f"{exc}; the ingester needs an existing table with the data's columns: create one "
            "first, e.g. carbonlite create PATH --schema 'id bigint, ts timestamp, name string'"
        ) from None


def open_bad_records(
    path: str, table: Table, schema: pa.Schema, storage_options: Mapping[str, Any] | None
) -> Table | None:
    """The bad-records table at ``path``, which must be another table than ``table`` and
    have the columns of ``schema``; None when there is none yet (:func:`create_bad_records`
    makes it at the first bad record), after checking that one can be created there."""
    try:
        bad = open_table(path, storage_options=storage_options)
    except TableNotFoundError:
        try:
            check_new_table_place(path, storage_options=storage_options)
        except TableExistsError:  # another ingester made it just now
            bad = open_table(path, storage_options=storage_options)
        else:
            return None
    return _checked(path, bad, table, schema)


def create_bad_records(
    path: str, table: Table, schema: pa.Schema, storage_options: Mapping[str, Any] | None
) -> Table:
    """The bad-records table at ``path``, created now with ``schema`` unless another
    ingester just did."""
    try:
        bad = create_table(path, schema, storage_options=storage_options)
    except TableExistsError:  # another ingester made it just now
        bad = open_table(path, storage_options=storage_options)
    return _checked(path, bad, table, schema)


def _checked(path: str, bad: Table, table: Table, schema: pa.Schema) -> Table:
    if bad.table_id == table.table_id:
        raise InvalidOptionError(
            f"bad_records {path!r} is the table being ingested into; give a table of its own"
        )
    problems = schema_differences(schema, bad.schema)  # extra columns too
    if problems:
        raise InvalidOptionError(
            f"bad_records {bad.path!r} is not a bad-records table of this ingester: "
            + "; ".join(problems)
            + "; give a new path (it is created) or a table made by the same kind of ingester"
        )
    return bad
