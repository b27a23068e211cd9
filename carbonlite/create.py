"""``create_table`` and ``open_table``: how a :class:`~carbonlite.table.Table` comes to be."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from carbonlite._version import ENGINE
from carbonlite.arguments import file_in_the_way, storage_options_arg, writer_id_arg
from carbonlite.clock import elapsed_ms, now_ms
from carbonlite.errors import (
    InvalidOptionError,
    SchemaMismatchError,
    TableExistsError,
    TableNotFoundError,
)
from carbonlite.format.types import check_schema, stat_kind
from carbonlite.metadata import Action, CommitInfo, Log, Snapshot, TableMetadata
from carbonlite.metadata.partition_spec import PartitionSpec
from carbonlite.names import table_location
from carbonlite.properties import validate_properties
from carbonlite.storage import open_storage
from carbonlite.table import Table

__all__ = ["create_table", "open_table"]


def _check_sort_columns(schema: pa.Schema, sort_columns: Sequence[str]) -> tuple[str, ...]:
    if isinstance(sort_columns, str):
        sort_columns = [sort_columns]
    problems = []
    for c in sort_columns:
        if c not in schema.names:
            problems.append(f"sort column {c!r} is not in the schema {schema.names}")
        elif stat_kind(schema.field(c).type) is None:
            problems.append(
                f"sort column {c!r} has type {schema.field(c).type}, which has no order"
            )
    if len(set(sort_columns)) != len(sort_columns):
        problems.append(f"sort columns {list(sort_columns)} repeat a column")
    if problems:
        raise InvalidOptionError("invalid sort columns:\n  " + "\n  ".join(problems))
    return tuple(sort_columns)


def _check_primary_key(schema: pa.Schema, primary_key: Sequence[str]) -> tuple[str, ...]:
    if isinstance(primary_key, str):
        primary_key = [primary_key]
    problems = []
    for c in primary_key:
        if not isinstance(c, str) or c not in schema.names:
            problems.append(f"primary key column {c!r} is not in the schema {schema.names}")
        elif stat_kind(schema.field(c).type) is None:
            problems.append(
                f"primary key column {c!r} has type {schema.field(c).type}, which cannot be "
                "compared as a key"
            )
    if len(set(primary_key)) != len(primary_key):
        problems.append(f"primary key {list(primary_key)} repeats a column")
    if problems:
        raise InvalidOptionError("invalid primary key:\n  " + "\n  ".join(problems))
    return tuple(primary_key)


def _partition_spec(schema: pa.Schema, partition_by: Sequence[str]) -> PartitionSpec:
    if isinstance(partition_by, str) or not all(isinstance(p, str) for p in partition_by):
        raise InvalidOptionError(
            "partition_by must be a list of partition fields such as ['region', 'day(ts)'], "
            f"not {partition_by!r}"
        )
    return PartitionSpec.parse(list(partition_by), schema)


def create_table(
    path: str | os.PathLike[str],
    schema: pa.Schema,
    *,
    sort_columns: Sequence[str] = (),
    primary_key: Sequence[str] = (),
    partition_by: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    writer_id: str | None = None,
) -> Table:
    """Create a table at ``path``; raises :class:`TableExistsError` if one is there, and
    :class:`InvalidOptionError` if ``path`` is a file.

    ``primary_key``: key columns that make it a primary-key table: every append (Python,
    Spark) is an upsert by them (the newest commit wins; within one batch the last row of a
    key), so a scan returns one row per key. Null keys are refused.

    ``partition_by``: partition fields, each a column (``"region"``) or a transform of one:
    ``year(ts)``, ``month(ts)``, ``day(ts)``, ``hour(ts)``, ``bucket(16, id)``. Every segment
    then holds one partition's rows; a filter on the partition columns skips whole
    partitions before any blocklet statistics are read (docs/LOG.md, "Partitions")."""
    started = now_ms()
    location = table_location(path)
    # the table's writer identity, chosen now so that the CREATE TABLE commit records it
    writer_id = writer_id_arg(writer_id) or uuid.uuid4().hex[:16]
    options = storage_options_arg(storage_options)
    if not isinstance(schema, pa.Schema):
        raise InvalidOptionError(f"schema must be a pyarrow.Schema, not {type(schema).__name__}")
    if len(schema) == 0:
        raise SchemaMismatchError(
            f"cannot create a table at {location!r} with an empty schema: a table needs at least "
            "one column, e.g. pa.schema([('id', pa.int64())])"
        )
    check_schema(schema)
    metadata = TableMetadata(
        table_id=uuid.uuid4().hex,
        schema=schema,
        sort_columns=_check_sort_columns(schema, sort_columns),
        properties=validate_properties(properties),
        created_time=now_ms(),
        primary_key=_check_primary_key(schema, primary_key),
        partition_by=tuple(_partition_spec(schema, partition_by).to_json()),
    )
    storage, root = open_storage(location, options or None)
    uri = storage.uri(root)
    blocker = file_in_the_way(storage, root)
    if blocker is not None:
        raise InvalidOptionError(
            f"cannot create a table at {uri!r}: {blocker!r} is a file, not a directory; give a "
            "path that is a directory or does not exist yet"
        )
    log = Log(storage, root, uri)
    if log.exists():
        raise TableExistsError(f"a CarbonLite table already exists at {uri!r}")
    actions: list[Action] = [
        metadata,
        CommitInfo(
            operation="CREATE TABLE",
            timestamp=metadata.created_time,
            data_change=False,
            parameters={
                "sort_columns": ",".join(metadata.sort_columns),
                **({"primary_key": ",".join(metadata.primary_key)} if metadata.primary_key else {}),
            },
            engine=ENGINE,
            files_added=0,
            files_removed=0,
            duration_ms=elapsed_ms(started, metadata.created_time),
            writer_id=writer_id,
            commit_id=uuid.uuid4().hex,  # the first link of the chain of commit ids
        ),
    ]
    snapshot = Snapshot.from_actions(uri, 0, actions)
    empty = Snapshot(
        table_path=uri, version=-1, timestamp=0, metadata=metadata, segments={}, txns={}
    )
    if not log.try_write(0, actions, empty):
        raise TableExistsError(f"a CarbonLite table was created at {uri!r} at the same time")
    return Table(uri, storage_options=options, writer_id=writer_id, _snapshot=snapshot)


def open_table(
    path: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    writer_id: str | None = None,
) -> Table:
    """Open the table at ``path``; raises :class:`TableNotFoundError` if there is none (also
    when ``path`` is a file)."""
    location = table_location(path)
    try:
        return Table(location, storage_options=storage_options, writer_id=writer_id)
    except (TableNotFoundError, FileNotFoundError, NotADirectoryError) as exc:
        storage, root = open_storage(location, storage_options_arg(storage_options))
        blocker = file_in_the_way(storage, root)
        if blocker is None and isinstance(exc, TableNotFoundError):
            raise
        if blocker is None:  # pragma: no cover - Log turns absence into TableNotFound
            raise TableNotFoundError(f"no CarbonLite table at {location!r}") from exc
        raise TableNotFoundError(
            f"no CarbonLite table at {storage.uri(root)!r}: {blocker!r} is a file, not a "
            "directory; give the table's directory (the one holding _carbonlite/)"
        ) from None
