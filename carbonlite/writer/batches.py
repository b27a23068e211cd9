"""Turning what users pass to ``append`` into conformed, blocklet-sized record batches."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from carbonlite.errors import (
    CarbonLiteError,
    ColumnsMovedError,
    DataSourceError,
    InvalidOptionError,
    SchemaMismatchError,
    StaleSchemaError,
)
from carbonlite.format.casts import storage_type
from carbonlite.format.conform import conform_batch, schema_differences
from carbonlite.format.types import check_schema
from carbonlite.metadata.columns import (
    former_name_problems,
    moved_columns,
    widened_from_dates,
)
from carbonlite.reader.changes import reserved_name_problems

__all__ = [
    "ColumnsAsOf",
    "TableData",
    "check_complete",
    "check_not_moved",
    "conformed_batches",
    "iter_record_batches",
    "merged_schema",
    "new_table_schema",
    "schema_and_batches",
]

TableData = Any
"""``pyarrow.Table``, ``RecordBatch``, ``RecordBatchReader``, an iterable of batches, a pandas
or Polars DataFrame, or any object with ``__arrow_c_stream__``."""


@dataclass(frozen=True)
class ColumnsAsOf:
    """The table metadata whose columns data names: data naming a column of it that was
    renamed or dropped since is refused, even when another column has its name now. A user's
    rows, named as a ``Table`` object showed the columns, get :class:`StaleSchemaError`
    (refresh the object); rows the writer read itself from that version (``read`` True: the
    rows a delete, update or merge writes in place of those it deletes) get
    :class:`ColumnsMovedError`, on which the operation plans again."""

    metadata: Any
    read: bool = False


def _is_frame(data: object, module: str) -> bool:
    kind = type(data)
    return kind.__name__ in ("DataFrame", "LazyFrame") and kind.__module__.split(".")[0] == module


def _index_levels(data: Any) -> list[str]:
    """The levels of a pandas DataFrame's index that are data: every named one (an unnamed
    index, such as the default ``RangeIndex``, only numbers the rows). A level named as a
    column of the frame is that column when their values are the same (``set_index("id",
    drop=False)``), and refused when they differ: one of them would be lost."""
    names = [n for n in data.index.names if isinstance(n, str)]
    both = [n for n in names if n in data.columns]
    differ = [
        n
        for n in both
        if not data.index.get_level_values(n).to_series(index=data.index).equals(data[n])
    ]
    if differ:
        raise SchemaMismatchError(
            "the pandas DataFrame has an index level and a column of the same name, with "
            f"different values: {', '.join(map(repr, differ))}; a named index level is a column "
            "of its name, so rename one of them (df.rename_axis(...)) or drop the level "
            "(df.reset_index(level=..., drop=True))"
        )
    return [n for n in names if n not in both]


def _failing_column(data: Any) -> str:
    """Which column of a pandas DataFrame Arrow cannot convert, and why (for a message)."""
    for name in data.columns:
        try:
            pa.Array.from_pandas(data[name])
        except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
            return f"column {name!r}: {' '.join(str(exc).split())}"
    return "a column Arrow cannot convert"


def _from_pandas(data: Any) -> pa.Table:
    """A pandas DataFrame's columns, and the index levels :func:`_index_levels` names as
    data; an unnamed index is not data (``reset_index()`` to keep it)."""
    twice = sorted({str(n) for n in data.columns[data.columns.duplicated()]})
    if twice:
        raise SchemaMismatchError(
            f"the pandas DataFrame has more than one column named {', '.join(map(repr, twice))}: "
            "a table's columns have unique names; drop or rename the repeats first"
        )
    levels = _index_levels(data)
    if levels:
        data = data.reset_index(level=levels)
    try:
        return pa.Table.from_pandas(data, preserve_index=False)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        raise SchemaMismatchError(
            "cannot convert the pandas DataFrame to Arrow", [_failing_column(data)]
        ) from None


def _stream_reader(data: Any) -> pa.RecordBatchReader:
    """The reader of an object with ``__arrow_c_stream__``: a stream of record batches (a
    ``ChunkedArray``'s stream of plain arrays is no table's rows)."""
    try:
        return pa.RecordBatchReader.from_stream(data)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise InvalidOptionError(
            f"{type(data).__name__} is not table data: its Arrow stream is not a stream of "
            f"record batches ({' '.join(str(exc).split())}); give a table, such as "
            "pa.table({'col': array})"
        ) from None


def _pulled(source: Iterable[Any], data: object) -> Iterator[Any]:
    """The items of ``source`` (the user's reader, stream or iterable ``data``), a failure of
    the source itself raised as :class:`DataSourceError` (CarbonLite's own errors as they are)."""
    items = iter(source)
    count = 0
    while True:
        try:
            item = next(items)
        except StopIteration:
            return
        except CarbonLiteError:
            raise
        except Exception as exc:
            raise DataSourceError(
                f"reading the data to write ({type(data).__name__}) failed after {count} "
                f"batch(es): {type(exc).__name__}: {' '.join(str(exc).split())}; the rows were "
                "not committed: fix the source and write them again"
            ) from exc
        count += 1
        yield item


def iter_record_batches(data: TableData) -> Iterator[pa.RecordBatch]:
    """The record batches of ``data``, lazily for readers and iterables. A pandas
    DataFrame's named index levels are columns too (:func:`_index_levels`). Data whose columns
    are known gives at least one batch, an empty one when it holds no rows, so that its
    columns are checked as any data's; only an iterable that yields nothing gives none."""
    if _is_frame(data, "pandas"):
        yield from _at_least_one(_from_pandas(data))
    elif _is_frame(data, "polars") and type(data).__name__ == "LazyFrame":
        raise InvalidOptionError(
            "a Polars LazyFrame is a query, not data: append lazy_frame.collect() (or "
            "collect(engine='streaming')) instead"
        )
    elif isinstance(data, pa.Table):
        yield from _at_least_one(data)
    elif isinstance(data, pa.RecordBatch):
        yield data
    elif isinstance(data, pa.RecordBatchReader):
        yield from _at_least_one(data)
    elif hasattr(data, "__arrow_c_stream__") and not isinstance(data, (str, bytes)):
        yield from _at_least_one(_stream_reader(data), source=data)
    elif isinstance(data, Iterable) and not isinstance(data, (str, bytes, dict)):
        for item in _pulled(data, data):
            if isinstance(item, pa.RecordBatch):
                yield item
            elif isinstance(item, pa.Table):
                yield from _at_least_one(item)
            else:
                raise InvalidOptionError(
                    f"expected pyarrow RecordBatches in the iterable, found {type(item).__name__}"
                )
    else:
        raise InvalidOptionError(
            "data must be a pyarrow Table, RecordBatch, RecordBatchReader, an iterable of "
            "RecordBatches, a pandas or Polars DataFrame or an object with __arrow_c_stream__, "
            f"not {type(data).__name__}"
        )


def _at_least_one(
    data: pa.Table | pa.RecordBatchReader, *, source: object = None
) -> Iterator[pa.RecordBatch]:
    """The batches of a table or reader, or one empty batch of its schema when it has none.
    A reader's source failing is a :class:`DataSourceError` naming ``source`` (the user's
    object the reader reads; by default the reader)."""
    if isinstance(data, pa.Table):
        batches: Iterable[pa.RecordBatch] = data.to_batches()
    else:
        batches = _pulled(data, data if source is None else source)
    empty = True
    for batch in batches:
        empty = False
        yield batch
    if empty:
        yield pa.RecordBatch.from_pylist([], schema=data.schema)


def conformed_batches(
    data: TableData,
    schema: pa.Schema,
    *,
    where: str,
    fill_missing: bool,
    defaults: Mapping[str, Any] | None = None,
    metadata: Any = None,
    fix: str | None = None,
    shown: ColumnsAsOf | None = None,
) -> Iterator[pa.RecordBatch]:
    """Batches of ``data`` in ``schema``'s exact shape, by the rule of every writer for the
    columns (docs/ENGINES.md, "Data in"): data with no column at all is refused; a column the
    data lacks gets its ``defaults`` value (column -> value) if it has one, else, with
    ``fill_missing``, null when it is nullable (a missing non-nullable column is a
    :class:`SchemaMismatchError`). Without ``fill_missing`` (the file ingester, for which a
    file lacking a column is a bad file: docs/ENGINES.md says it differs) every column
    without a default must be given, and the error says ``fix``.
    ``metadata`` (the table's): such an error also names the rename or drop behind a column
    the data has and the table no longer does; and a column widened from date to timestamp
    takes dates. ``shown``: the metadata whose columns the data names, and what becomes of a
    column of it renamed or dropped since, in ``metadata`` (:class:`ColumnsAsOf`)."""
    from_dates = widened_from_dates(metadata) if metadata is not None else frozenset()
    checked: list[str] | None = None
    for batch in iter_record_batches(data):
        if batch.num_columns == 0:
            raise SchemaMismatchError(
                f"data for {where} has no columns (an empty DataFrame?); nothing was written: "
                f"give rows in some of the table's columns {schema.names}"
            )
        if shown is not None and batch.schema.names != checked:
            checked = batch.schema.names
            check_not_moved(checked, shown.metadata, metadata, where, read=shown.read)
        if defaults:
            batch = _with_defaults(batch, schema, defaults)
        if from_dates:
            batch = _dates_widened(batch, schema, from_dates)
        try:
            if fill_missing:
                check_complete(
                    batch.schema, schema, where=where, fix=_GIVE_REQUIRED, nullable_may_miss=True
                )
            else:
                check_complete(batch.schema, schema, where=where, fix=fix or _GIVE_EVERY_COLUMN)
            conformed = conform_batch(
                batch, schema, where=where, allow_missing_nullable=fill_missing
            )
        except SchemaMismatchError as exc:
            hints = former_name_problems(batch.schema.names, metadata) if metadata else []
            if not hints:
                raise
            raise SchemaMismatchError(
                f"data for {where} names columns the table no longer has; nothing was written: "
                "write them under the table's present names",
                [*hints, *exc.differences],
            ) from None
        yield conformed


def check_not_moved(
    names: Sequence[str], shown: Any, metadata: Any, where: str, *, read: bool = False
) -> None:
    """Refuse data whose columns ``names`` name columns of ``shown`` (table metadata a
    ``Table`` object showed) that were renamed or dropped since, in ``metadata``
    (:class:`StaleSchemaError`; with ``read``, rows a row change read from ``shown``'s
    version: :class:`ColumnsMovedError`)."""
    moved = moved_columns(names, shown, metadata)
    if moved and read:
        raise ColumnsMovedError(
            f"the rows a change to {where} read were in columns renamed or dropped since; "
            "nothing was written: it reads the table again and plans on its new schema",
            moved,
        )
    if moved:
        raise StaleSchemaError(
            f"data for {where} names columns as this Table object showed them, and the table "
            "changed them since; nothing was written: refresh() the object and write the rows "
            "under the columns it shows then",
            moved,
        )


def _dates_widened(
    batch: pa.RecordBatch, schema: pa.Schema, names: frozenset[str]
) -> pa.RecordBatch:
    """``batch`` with its dates in columns widened from date to timestamp cast up (midnight,
    UTC for a zoned column): a writer that still sends the older type is let in."""
    for i, f in enumerate(batch.schema):
        if f.name in names and pa.types.is_date(f.type) and f.name in schema.names:
            wider = schema.field(f.name).type
            batch = batch.set_column(i, f.with_type(wider), batch.column(i).cast(wider))
    return batch


def _with_defaults(
    batch: pa.RecordBatch, schema: pa.Schema, defaults: Mapping[str, Any]
) -> pa.RecordBatch:
    """``batch`` with a column of its default for each column of ``defaults`` it lacks."""
    for name, value in defaults.items():
        if name not in batch.schema.names and name in schema.names:
            column = pa.repeat(pa.scalar(value, schema.field(name).type), batch.num_rows)
            batch = batch.append_column(schema.field(name), column)
    return batch


_GIVE_REQUIRED = "they are not nullable (and have no default), so give them in the data"
_GIVE_EVERY_COLUMN = "give every column in the data"


def check_complete(
    found: pa.Schema, schema: pa.Schema, *, where: str, fix: str, nullable_may_miss: bool = False
) -> None:
    """Raise :class:`SchemaMismatchError` when data of schema ``found`` lacks columns of
    ``schema`` (only non-nullable ones with ``nullable_may_miss``), naming them and saying
    ``fix``, what to do instead; its differences list every other one too."""
    missing = [
        f.name
        for f in schema
        if f.name not in found.names and not (nullable_may_miss and f.nullable)
    ]
    if missing:
        raise SchemaMismatchError(
            f"data for {where} lacks the columns {missing} of the table: {fix}",
            schema_differences(schema, found, allow_missing_nullable=nullable_may_miss),
        )


def _stored_fields(
    fields: Iterable[pa.Field], problems: list[str], *, keep_nullability: bool
) -> list[pa.Field]:
    """``fields`` of incoming data as a table stores them: each in its storage type (one
    layout per kind: ``string`` for ``large_string`` and ``string_view``, a dictionary's value
    type, ``list`` for ``large_list``), without metadata; nullable unless
    ``keep_nullability``. A column of only nulls has no type to store: a line in
    ``problems``."""
    out = []
    for field in fields:
        t = storage_type(field.type)
        if t is None:
            problems.append(
                f"column {field.name!r} holds only nulls, so its type is unknown: give it a "
                "type in the data (or create the table or add the column with its type)"
            )
        else:
            out.append(pa.field(field.name, t, nullable=field.nullable or not keep_nullability))
    return out


def new_table_schema(incoming: pa.Schema, *, where: str) -> pa.Schema:
    """The schema a new table gets from data of schema ``incoming`` (``write_table``): the
    data's columns in their storage types, with their nullability, and no metadata (the
    ``pandas`` key pyarrow adds is not the table's)."""
    problems = reserved_name_problems(incoming.names)
    fields = _stored_fields(incoming, problems, keep_nullability=True)
    if problems:
        raise SchemaMismatchError(f"cannot make a table schema for {where} from the data", problems)
    schema = pa.schema(fields)
    check_schema(schema)
    return schema


def merged_schema(schema: pa.Schema, incoming: pa.Schema, *, where: str) -> pa.Schema:
    """``schema`` with the columns of ``incoming`` it lacks added at the end, nullable, in
    their storage types (``schema_mode="merge"``, Delta's ``mergeSchema``). Existing columns
    keep their types: incoming ones must still cast into them."""
    fresh = [f for f in incoming if f.name not in schema.names]
    problems = reserved_name_problems([f.name for f in fresh])
    new = _stored_fields(fresh, problems, keep_nullability=False)
    if problems:
        raise SchemaMismatchError(f"cannot merge the data's schema into {where}", problems)
    if not new:
        return schema
    merged = pa.schema([*schema, *new], metadata=schema.metadata)
    check_schema(merged)
    return merged


def schema_and_batches(data: TableData) -> tuple[pa.Schema | None, Iterator[pa.RecordBatch]]:
    """The schema of ``data`` (every named pandas index level a column) and its batches,
    read lazily; the schema is None only for an iterable that holds no batch at all."""
    if _is_frame(data, "pandas"):
        data = _from_pandas(data)
    elif hasattr(data, "__arrow_c_stream__") and not isinstance(
        data, (pa.Table, pa.RecordBatch, pa.RecordBatchReader, str, bytes)
    ):
        data = _stream_reader(data)
    if isinstance(data, (pa.Table, pa.RecordBatch, pa.RecordBatchReader)):
        return data.schema, iter_record_batches(data)
    batches = iter_record_batches(data)
    first = next(batches, None)
    if first is None:
        return None, iter(())
    return first.schema, itertools.chain([first], batches)
