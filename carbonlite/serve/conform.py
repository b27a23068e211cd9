"""A put's rows in a table's columns: by name when it is taken, by column id ever after.

A put is conformed to the table's latest schema when it arrives (:func:`conformed_put`), as
``Table.append`` conforms data: by name, so a put naming a renamed or dropped column is
refused. Its rows are then held in that schema, with the id of each of their columns (kept
in the write-ahead log too). Whatever the table's schema is when the rows are read from
memory or flushed, before or after a restart, they are put into its columns by those ids
(:func:`held_rows`, the one place that does it): a column renamed since is moved to its
present name (two names swapped stay each with its own values), a dropped one is left out
(its values never come back, also when a new column takes its name), a widened one is cast
up, and one added since reads its default (else null).

A record written by an earlier release of the service holds no column ids. Its rows are
placed by name only when no name can have moved from one column to another since the table
was created: no column was ever renamed or dropped (none has a former name, none is listed
as dropped) and the record's columns stand in the table's order. Otherwise they are not
placed (:class:`UnplacedPutError`): the table's flush fails, reported by the healthcheck,
and the put waits in memory and in the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from carbonlite.errors import CarbonLiteError
from carbonlite.metadata.columns import column_ids, columns_now, layout_of
from carbonlite.writer.batches import conformed_batches

__all__ = ["UnplacedPutError", "conformed_put", "held_rows"]


class UnplacedPutError(CarbonLiteError):
    """An acknowledged put whose values cannot be told to belong to the table's columns: it
    is not flushed (nor read), and waits in memory and in the write-ahead log."""


def _in_schema(data: pa.Table, metadata: Any, where: str) -> pa.Table:
    """``data`` in the table's schema, as ``Table.append`` conforms it (the casts it allows;
    columns the data leaves out read their default, else null); a column under a name the
    table renamed or dropped is refused, naming the change and its version."""
    if data.schema.equals(metadata.schema):
        return data
    batches = conformed_batches(
        data,
        metadata.schema,
        where=where,
        fill_missing=True,  # a put may leave out nullable columns (docs/SERVE.md)
        defaults=layout_of(metadata).defaults,
        metadata=metadata,
    )
    return pa.Table.from_batches(list(batches), schema=metadata.schema)


def conformed_put(data: pa.Table, metadata: Any, where: str) -> tuple[pa.Table, tuple[int, ...]]:
    """A put's rows in the schema of the table's metadata (by name), and the id of each of
    their columns."""
    return _in_schema(data, metadata, where), column_ids(metadata)


def held_rows(rows: pa.Table, ids: Sequence[int] | None, metadata: Any, where: str) -> pa.Table:
    """Rows taken earlier with column ids ``ids`` (None: a log record of an earlier release)
    in the present columns of ``metadata`` (see the module doc); ``where`` names the put
    ("put 3 of producer 'p' to table 't'")."""
    if ids is None:
        ids = _ids_by_name(rows.schema.names, metadata, where)
    if len(ids) != rows.num_columns:
        raise UnplacedPutError(
            f"{where} holds {rows.num_columns} columns and {len(ids)} column ids"
        )
    keep: list[int] = []
    present: list[str] = []
    unknown: list[str] = []
    for i, (name, column) in enumerate(
        zip(rows.schema.names, columns_now(ids, metadata), strict=True)
    ):
        if column is None:
            unknown.append(name)
        elif column.name is not None:  # else dropped since: left out
            keep.append(i)
            present.append(column.name)
    if unknown:
        raise UnplacedPutError(
            f"{where} was acknowledged with columns {unknown} whose ids the table never gave "
            "(was the table replaced by another at its path?); it waits in the service's "
            "write-ahead log"
        )
    if present != rows.schema.names:
        rows = rows.select(keep).rename_columns(present)
    return _in_schema(rows, metadata, where)


def _ids_by_name(names: Sequence[str], metadata: Any, where: str) -> tuple[int, ...]:
    """Column ids for rows of a log record without them, by name, when no name can have
    moved between columns (see the module doc); :class:`UnplacedPutError` otherwise."""
    renamed = [
        f.name for f, c in zip(metadata.schema, metadata.columns, strict=False) if c.former_names
    ]
    dropped = [d.name for d in metadata.dropped]
    positions = [metadata.schema.get_field_index(n) for n in names]
    problems = []
    if renamed:
        problems.append(f"the columns now named {renamed} were renamed")
    if dropped:
        problems.append(f"the columns {dropped} were dropped")
    if (
        not renamed
        and not dropped
        and (min(positions, default=0) < 0 or positions != sorted(positions))
    ):
        problems.append(
            f"its columns {list(names)} do not stand in the table's order {metadata.schema.names}"
        )
    if problems:
        raise UnplacedPutError(
            f"{where} was logged by an earlier release of the service, which kept no column "
            f"ids, and {' and '.join(problems)} in the table, so which column each of its "
            "values was acknowledged in cannot be told. It waits in the write-ahead log, "
            "neither flushed nor read, and so do the table's later puts; to go on without "
            "them, stop the service and move its write-ahead log directory aside"
        )
    ids = column_ids(metadata)
    return tuple(ids[p] for p in positions)
