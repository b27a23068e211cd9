"""``create_table``, ``open_table`` and ``write_table``: how a :class:`~carbonlite.table.Table`
comes to be (``write_table`` also writes its first rows, or more rows into one that exists)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from carbonlite._version import ENGINE
from carbonlite.arguments import (
    SchemaMode,
    file_in_the_way,
    names_arg,
    schema_mode_arg,
    storage_options_arg,
    table_around,
    writer_id_arg,
)
from carbonlite.clock import elapsed_ms, now_ms
from carbonlite.errors import (
    InvalidOptionError,
    SchemaMismatchError,
    TableExistsError,
    TableNotFoundError,
)
from carbonlite.format.types import check_schema, stat_kind
from carbonlite.iceberg.schema import check_iceberg_table
from carbonlite.metadata import Action, CommitInfo, Log, Snapshot, TableMetadata
from carbonlite.metadata.columns import with_column_ids
from carbonlite.metadata.partition_spec import PartitionSpec
from carbonlite.names import column_name_problems, table_location
from carbonlite.properties import NEW_TABLE_COLUMNAR_FORMAT, validate_properties
from carbonlite.reader.changes import reserved_name_problems
from carbonlite.storage import open_storage
from carbonlite.table import Table
from carbonlite.writer.append import TableWriter
from carbonlite.writer.batches import TableData, new_table_schema, schema_and_batches
from carbonlite.writer.bloom_files import check_bloom_columns
from carbonlite.writer.modify import keyed_rows
from carbonlite.writer.new_table import create_version_zero, write_new_table

__all__ = ["WriteMode", "check_new_table_place", "create_table", "open_table", "write_table"]


def _check_sort_columns(schema: pa.Schema, sort_columns: object) -> tuple[str, ...]:
    sort_columns = names_arg(sort_columns, what="sort_columns", example="['ts']", one_string=True)
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


def _check_primary_key(schema: pa.Schema, primary_key: object) -> tuple[str, ...]:
    primary_key = names_arg(primary_key, what="primary_key", example="['id']", one_string=True)
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


def _partition_spec(schema: pa.Schema, partition_by: object) -> PartitionSpec:
    if not isinstance(partition_by, str):  # a lone string is refused below: say it is a list
        partition_by = names_arg(
            partition_by, what="partition_by", example="['region', 'day(ts)']", one_string=False
        )
    if isinstance(partition_by, str) or not all(isinstance(p, str) for p in partition_by):
        raise InvalidOptionError(
            "partition_by must be a list of partition fields such as ['region', 'day(ts)'], "
            f"not {partition_by!r}"
        )
    return PartitionSpec.parse(list(partition_by), schema)


def _check_place(log: Log) -> None:
    """Refuse to create a table where ``log`` would go: in a plain file, where a table is,
    or inside another table's directory."""
    storage, root, uri = log.storage, log.root, log.uri
    blocker = file_in_the_way(storage, root)
    if blocker is not None:
        raise InvalidOptionError(
            f"cannot create a table at {uri!r}: {blocker!r} is a file, not a directory; give a "
            "path that is a directory or does not exist yet"
        )
    if log.exists():
        raise TableExistsError(f"a CarbonLite table already exists at {uri!r}")
    outer = table_around(storage, root)
    if outer is not None:
        raise InvalidOptionError(
            f"cannot create a table at {uri!r}: it is inside the table at {outer!r}, and a "
            "table's directory is its own (its recover deletes every file under segments/ that "
            "its log does not name); give a path outside it"
        )


def check_new_table_place(
    path: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None
) -> None:
    """What :func:`create_table` checks of ``path`` before it writes, for a caller that
    creates a table later and wants a bad place refused now (the Kafka ingester's
    bad-records table, made once the topic is found)."""
    options = storage_options_arg(storage_options)
    storage, root = open_storage(table_location(path), options or None)
    _check_place(Log(storage, root, storage.uri(root)))


def create_table(
    path: str | os.PathLike[str],
    schema: pa.Schema,
    *,
    sort_columns: Sequence[str] | None = (),
    primary_key: Sequence[str] | None = (),
    partition_by: Sequence[str] | None = (),
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
    new = _new_table(
        path,
        schema,
        sort_columns=sort_columns,
        primary_key=primary_key,
        partition_by=partition_by,
        properties=properties,
        storage_options=storage_options,
        writer_id=writer_id,
    )
    create_version_zero(new.log, new.actions, new.snapshot)
    return new.table(new.snapshot)


@dataclass(frozen=True, slots=True)
class _NewTable:
    """A table checked and planned, not yet created: its version 0 (``actions``, giving
    ``snapshot``), where it goes and who creates it."""

    log: Log
    actions: list[Action]
    snapshot: Snapshot
    options: Mapping[str, Any] | None
    writer_id: str

    @property
    def uri(self) -> str:
        return self.log.uri

    def table(self, snapshot: Snapshot) -> Table:
        return Table(
            self.uri, storage_options=self.options, writer_id=self.writer_id, _snapshot=snapshot
        )


def _new_table(
    path: str | os.PathLike[str],
    schema: pa.Schema,
    *,
    sort_columns: Sequence[str] | None,
    primary_key: Sequence[str] | None,
    partition_by: Sequence[str] | None,
    properties: Mapping[str, str] | None,
    storage_options: Mapping[str, Any] | None,
    writer_id: str | None,
) -> _NewTable:
    """Everything :func:`create_table` checks and plans before it writes version 0."""
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
    named = column_name_problems(schema)
    if named:
        raise InvalidOptionError(
            f"cannot create a table at {location!r}: " + "; ".join(named) + "; give every "
            "column a name of visible characters"
        )
    check_schema(schema)
    reserved = reserved_name_problems(schema.names)
    if reserved:
        raise SchemaMismatchError(f"cannot create a table at {location!r}", reserved)
    metadata = with_column_ids(
        TableMetadata(
            table_id=uuid.uuid4().hex,
            schema=schema,
            sort_columns=_check_sort_columns(schema, sort_columns),
            properties={
                "columnar_format": NEW_TABLE_COLUMNAR_FORMAT,
                **validate_properties(properties),
            },
            created_time=now_ms(),
            primary_key=_check_primary_key(schema, primary_key),
            partition_by=tuple(_partition_spec(schema, partition_by).to_json()),
        )
    )
    check_bloom_columns(metadata.properties, schema, where=location)
    check_iceberg_table(metadata, location)
    storage, root = open_storage(location, options or None)
    uri = storage.uri(root)
    log = Log(storage, root, uri)
    _check_place(log)
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
    return _NewTable(log, actions, snapshot, options, writer_id)


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


WriteMode = Literal["error", "append", "overwrite"]
_WRITE_MODES = ("error", "append", "overwrite")


def write_table(
    path: str | os.PathLike[str],
    data: TableData,
    *,
    mode: WriteMode = "error",
    partition_by: Sequence[str] | None = None,
    primary_key: Sequence[str] | None = None,
    sort_columns: Sequence[str] | None = None,
    schema_mode: SchemaMode = "strict",
    properties: Mapping[str, str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    writer_id: str | None = None,
) -> Table:
    """Write ``data`` (a pyarrow Table, RecordBatch or RecordBatchReader, an iterable of
    batches, a pandas or Polars DataFrame, any object with ``__arrow_c_stream__``) to the
    table at ``path``, creating it when there is none; returns the :class:`Table`.

    ``mode``: ``"error"`` (the default) raises :class:`TableExistsError` when a table is
    there; ``"append"`` appends to it; ``"overwrite"`` replaces its rows. A new table's
    schema is the data's: each column in its storage type (``large_string`` and
    ``string_view`` as ``string``, the binary layouts as ``binary``, ``large_list`` as
    ``list``, a dictionary as its value type), a named pandas index as a column, and no pandas
    metadata; it gets ``partition_by``, ``primary_key``, ``sort_columns`` and ``properties``
    as :func:`create_table` gives them, and the data in a second commit: all or nothing, the
    data is read and written before the table is created, so data that fails part-way leaves
    no table (``writer/new_table.py``). For an existing table these must match what it has (or
    be left out); ``schema_mode`` is as for :meth:`Table.append`."""
    mode = _write_mode_arg(mode)
    schema_mode = schema_mode_arg(schema_mode)
    location = table_location(path)
    options = storage_options_arg(storage_options)
    layout = {
        "partition_by": partition_by,
        "primary_key": primary_key,
        "sort_columns": sort_columns,
    }
    table = _existing_table(location, options, writer_id)
    if table is None:
        try:
            return _create_with(location, data, layout, properties, options, writer_id)
        except TableExistsError:
            if mode == "error":
                raise
            table = open_table(location, storage_options=options, writer_id=writer_id)
    elif mode == "error":
        raise TableExistsError(
            f"a CarbonLite table already exists at {table.path!r}; pass mode='append' or "
            "mode='overwrite' to write into it"
        )
    _check_same_layout(table, layout, properties)
    if mode == "append":
        table.append(data, schema_mode=schema_mode)
    else:
        table.overwrite(data, schema_mode=schema_mode)
    return table


def _write_mode_arg(mode: object) -> WriteMode:
    if mode == "error" or mode == "append" or mode == "overwrite":
        return mode
    raise InvalidOptionError(
        f"mode must be one of {_WRITE_MODES} ('error': refuse to write into an existing table), "
        f"not {mode!r}"
    )


def _existing_table(
    location: str, options: Mapping[str, Any] | None, writer_id: str | None
) -> Table | None:
    try:
        return open_table(location, storage_options=options, writer_id=writer_id)
    except TableNotFoundError:
        return None


def _create_with(
    location: str,
    data: TableData,
    layout: Mapping[str, Sequence[str] | None],
    properties: Mapping[str, str] | None,
    options: Mapping[str, Any] | None,
    writer_id: str | None,
) -> Table:
    """A new table of ``data``'s schema, with ``data`` in it (a second commit), or, when the
    data fails, no table (``writer/new_table.py``)."""
    incoming, batches = schema_and_batches(data)
    if incoming is None:
        raise InvalidOptionError(
            f"cannot create a table at {location!r} from data that holds no batch: its columns "
            "are unknown; give a pyarrow Table (even an empty one), or create_table(path, schema)"
        )
    schema = new_table_schema(incoming, where=repr(location))
    keys = _check_primary_key(schema, layout["primary_key"])
    if keys:  # an upsert reads them all at once anyway: check the keys before creating
        rows: TableData = keyed_rows(list(batches), schema, keys, repr(location))
    else:
        rows = batches
    new = _new_table(
        location,
        schema,
        sort_columns=layout["sort_columns"],
        primary_key=keys,
        partition_by=layout["partition_by"],
        properties=properties,
        storage_options=options,
        writer_id=writer_id,
    )
    writer = TableWriter(
        new.log.storage, new.log.root, writer_id=new.writer_id, storage_options=new.options
    )
    return new.table(write_new_table(writer, new.log, new.snapshot, new.actions, rows))


def _check_same_layout(
    table: Table, layout: Mapping[str, Sequence[str] | None], properties: Mapping[str, str] | None
) -> None:
    """Refuse to write into an existing table with a layout or properties it does not have
    (its layout is fixed when it is created; its properties change with set_properties)."""
    problems = []
    given: dict[str, tuple[str, ...] | None] = {
        "partition_by": (
            None
            if layout["partition_by"] is None
            else tuple(_partition_spec(table.schema, layout["partition_by"]).to_json())
        ),
        "primary_key": (
            None
            if layout["primary_key"] is None
            else _check_primary_key(table.schema, layout["primary_key"])
        ),
        "sort_columns": (
            None
            if layout["sort_columns"] is None
            else _check_sort_columns(table.schema, layout["sort_columns"])
        ),
    }
    for name, value in given.items():
        if value is not None and value != getattr(table, name):
            problems.append(f"{name} is {list(getattr(table, name))}, not {list(value)}")
    for key, wanted in validate_properties(properties).items():
        if table.properties.get(key) != wanted:
            problems.append(
                f"property {key} is {table.properties.get(key)!r}, not {wanted!r} "
                "(change it with set_properties)"
            )
    if problems:
        raise InvalidOptionError(
            f"the table at {table.path!r} exists with another layout:\n  " + "\n  ".join(problems)
        )
