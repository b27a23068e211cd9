"""Delete, update and merge as plans: which rows go, which rows are written in their place.

Each ``plan_*`` reads one snapshot (``row_changes.select_rows``) and returns a
:class:`RowChangePlan`: the :class:`Selection` of rows to delete and the table of rows to
write. ``Table`` writes the deletion vectors and commits both in one version, and plans again
on the newest snapshot when a concurrent commit changed the rows it read
(:class:`RowsChangedError`). Updates are merge-on-read: an updated row is the old row
deleted plus the new row appended, in the same commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.errors import DuplicateKeyError, InvalidOptionError, SchemaMismatchError
from carbonlite.format.conform import conform_value
from carbonlite.metadata import BlockletEntry, Snapshot
from carbonlite.metadata.columns import former_name_problems, layout_of
from carbonlite.reader.expression import Filter
from carbonlite.reader.planner import Split, plan_scan
from carbonlite.reader.scan import ROW_POSITION, SplitReader
from carbonlite.writer.batches import TableData, conformed_batches, iter_record_batches
from carbonlite.writer.row_changes import (
    KeyCache,
    Selection,
    read_located_keys,
    read_positions,
    select_rows,
)
from carbonlite.writer.unique_keys import check_unique_keys, key_range_filter

__all__ = [
    "MatchedAction",
    "MergeResult",
    "NotMatchedAction",
    "NotMatchedBySourceAction",
    "RowChangePlan",
    "deduplicated",
    "keyed_rows",
    "plan_delete",
    "plan_merge",
    "plan_update",
    "plan_upsert",
    "source_table",
]

MatchedAction = Literal["update", "delete", "ignore"]
NotMatchedAction = Literal["insert", "ignore"]
NotMatchedBySourceAction = Literal["delete", "ignore"]


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What a merge did."""

    version: int | None
    """The committed version; None when nothing changed."""
    rows_updated: int = 0
    rows_inserted: int = 0
    rows_deleted: int = 0


@dataclass(frozen=True)
class RowChangePlan:
    """Rows to delete and rows to write in their place, planned on ``selection.snapshot``."""

    selection: Selection
    data: pa.Table
    parameters: Mapping[str, str]
    rows_updated: int = 0
    rows_inserted: int = 0
    rows_deleted: int = 0
    exclusive: bool = False
    """Requires that no other data commit landed since the plan's snapshot (an upsert)."""

    @property
    def changes_anything(self) -> bool:
        return bool(self.selection.blocklets) or self.data.num_rows > 0


def plan_delete(reader: SplitReader, snapshot: Snapshot, filter: Filter | None) -> RowChangePlan:
    """Every live row ``filter`` keeps (every live row when None) deleted."""
    selection, _ = select_rows(reader, snapshot, filter, [])
    parameters = {"predicate": str(filter.expression) if filter is not None else "true"}
    return RowChangePlan(
        selection,
        snapshot.schema.empty_table(),
        parameters,
        rows_deleted=selection.num_rows,
    )


def _assignments(
    schema: pa.Schema, assignments: Mapping[str, Any], where: str
) -> dict[str, pc.Expression]:
    if not isinstance(assignments, Mapping) or not assignments:
        raise InvalidOptionError(
            "set must map column names to new values (scalars or pyarrow.compute expressions), "
            f"such as {{'price': 0}} or {{'price': pc.field('price') * 2}}, not {assignments!r}"
        )
    unknown = [name for name in assignments if name not in schema.names]
    if unknown:
        raise SchemaMismatchError(
            f"update of {where} sets columns {unknown} the table does not have",
            [f"its columns are {schema.names}"],
        )
    out = {}
    for f in schema:
        if f.name not in assignments:
            out[f.name] = pc.field(f.name)
            continue
        value = assignments[f.name]
        if isinstance(value, pc.Expression):
            out[f.name] = value.cast(f.type)  # checked when evaluated (plan_update)
        else:
            out[f.name] = pc.scalar(conform_value(value, f, where=f"the update of {where}"))
    return out


def plan_update(
    reader: SplitReader,
    snapshot: Snapshot,
    filter: Filter | None,
    assignments: Mapping[str, Any],
    where: str,
) -> RowChangePlan:
    """Every live row ``filter`` keeps, deleted and written again with ``assignments``
    applied (expressions see the old values of the row)."""
    import pyarrow.dataset as ds  # evaluates the expressions; imports pandas, so only here

    projection = _assignments(snapshot.schema, assignments, where)
    selection, batches = select_rows(reader, snapshot, filter, None)
    old = pa.Table.from_batches(batches, schema=snapshot.schema)
    try:
        new = ds.dataset(old).to_table(columns=projection)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidOptionError(
            f"update of {where} cannot compute the new values {dict(assignments)!r}: "
            f"{str(exc).splitlines()[0]}"
        ) from None
    parameters = {
        "predicate": str(filter.expression) if filter is not None else "true",
        "set": ",".join(sorted(assignments)),
    }
    plan = RowChangePlan(selection, new, parameters, rows_updated=old.num_rows)
    if set(snapshot.metadata.primary_key) & set(assignments):
        return _keys_checked(reader, plan, "update", where)
    return plan


def _keys_checked(
    reader: SplitReader, plan: RowChangePlan, operation: str, where: str
) -> RowChangePlan:
    """``plan`` (of a change that may write new keys into a primary-key table) if it leaves
    one row per key (:func:`~carbonlite.writer.unique_keys.check_unique_keys`), made
    ``exclusive``: a data commit landing before it makes it plan again, and check again."""
    if not plan.selection.snapshot.metadata.primary_key:
        return plan
    check_unique_keys(reader, plan.selection, plan.data, operation, where)
    return dataclasses.replace(plan, exclusive=True)


# --- merge -------------------------------------------------------------------------------------

_SOURCE_ROW = "_carbonlite_source_row"
_TARGET_ROW = "_carbonlite_target_row"


def source_table(
    source: TableData, schema: pa.Schema, on: Sequence[str], where: str, metadata: Any = None
) -> pa.Table:
    """``source`` in the columns of ``schema`` it has. ``metadata`` (the table's): a column
    it has under a name the table renamed or dropped is refused naming that change."""
    batches = list(iter_record_batches(source))
    if not batches:  # an empty pyarrow Table can have no batches at all
        return schema.empty_table()
    names = batches[0].schema.names
    unknown = [n for n in names if n not in schema.names]
    if unknown:
        changes = former_name_problems(unknown, metadata) if metadata is not None else []
        raise SchemaMismatchError(
            f"merge source has columns {unknown} that {where} does not have",
            [*changes, f"its columns are {schema.names}"],
        )
    missing = [k for k in on if k not in names]
    if missing:
        raise SchemaMismatchError(f"merge source lacks the key columns {missing}")
    subset = pa.schema([schema.field(n) for n in names])
    conformed = list(conformed_batches(batches, subset, where=where, fill_missing=False))
    return pa.Table.from_batches(conformed, schema=subset)


def plan_merge(
    reader: SplitReader,
    snapshot: Snapshot,
    source: TableData,
    on: Sequence[str],
    *,
    when_matched: MatchedAction,
    when_not_matched: NotMatchedAction,
    when_not_matched_by_source: NotMatchedBySourceAction,
    where: str,
    cache: KeyCache | None = None,
    check_keys: bool = True,
    parameters: Mapping[str, str] | None = None,
) -> RowChangePlan:
    """Rows of ``source`` matched with live rows of the table by the key columns ``on``
    (SQL equality: a null key matches nothing). Matched target rows are updated (the source's
    columns replace theirs), deleted or left; unmatched source rows inserted or dropped;
    target rows no source row matches deleted or left. ``cache``: decoded keys of blocklets
    read by earlier merges of the same table (used when only the keys are read). In a
    primary-key table refused with :class:`DuplicateKeyError` when it would leave two rows
    with one key (``check_keys``; an upsert keeps keys unique by construction).
    ``parameters``: more entries for the commit's parameters (what history shows)."""
    schema = snapshot.schema
    src = source_table(source, schema, on, where, snapshot.metadata)
    src = src.append_column(_SOURCE_ROW, pa.array(np.arange(src.num_rows, dtype=np.int64)))
    needs_target_rows = when_matched == "update" and len(src.schema) - 1 < len(schema)
    targets = _read_targets(
        reader,
        snapshot,
        src,
        on,
        full_scan=when_not_matched_by_source == "delete",
        columns=None if needs_target_rows else list(on),
        cache=cache,
        where=where,
    )
    pairs = _matched_pairs(targets.rows, src, on, checked=when_matched != "ignore", where=where)
    outcome = _MergeOutcome(Selection(snapshot))
    if when_matched in ("update", "delete") and pairs.num_rows:
        outcome.delete_targets(targets, pairs.column(_TARGET_ROW).combine_chunks())
        if when_matched == "update":
            outcome.write(_updated_rows(targets.rows, src, pairs, schema, needs_target_rows))
            outcome.updated = pairs.num_rows
        else:
            outcome.deleted += pairs.num_rows
    if when_not_matched_by_source == "delete":
        unmatched = _unmatched(targets.rows.column(_TARGET_ROW), pairs.column(_TARGET_ROW))
        outcome.delete_targets(targets, unmatched)
        outcome.deleted += len(unmatched)
    if when_not_matched == "insert":
        new_rows = src.filter(_unmatched_mask(src.column(_SOURCE_ROW), pairs.column(_SOURCE_ROW)))
        if new_rows.num_rows:
            outcome.write(_in_schema(new_rows.drop_columns([_SOURCE_ROW]), schema))
            outcome.inserted = new_rows.num_rows
    parameters = {
        "on": ",".join(on),
        "when_matched": when_matched,
        "when_not_matched": when_not_matched,
        "when_not_matched_by_source": when_not_matched_by_source,
        **(parameters or {}),
    }
    plan = outcome.plan(schema, parameters)
    return _keys_checked(reader, plan, "merge", where) if check_keys else plan


@dataclass
class _Targets:
    """The live target rows a merge may touch: ``rows`` (the columns read, plus
    ``_TARGET_ROW``: ``blocklet number << 32 | position``) and the blocklets they lie in."""

    rows: pa.Table
    located: list[tuple[Split, BlockletEntry]]


def _read_targets(
    reader: SplitReader,
    snapshot: Snapshot,
    src: pa.Table,
    on: Sequence[str],
    *,
    full_scan: bool,
    columns: list[str] | None,
    cache: KeyCache | None,
    where: str,
) -> _Targets:
    """Every live row (``full_scan``), or those within the source's key range (none when
    every source key is null), in ``columns`` (None: all)."""
    schema = snapshot.schema
    filter = None
    splits: tuple[Split, ...] = ()
    if full_scan or src.num_rows:
        filter = None if full_scan else key_range_filter(src, on, schema, where)
        if full_scan or filter is not None:
            splits = plan_scan(snapshot, columns=columns, filter=filter).splits
    output = pa.schema([schema.field(n) for n in columns]) if columns is not None else schema
    if cache is not None and columns is not None:  # only keys: from the cache, one mask
        located, rows = read_located_keys(
            reader, splits, output, snapshot.layout, cache, _TARGET_ROW
        )
        return _Targets(rows, located)
    located = []
    batches: list[pa.RecordBatch] = []
    for split, blocklet, batch in read_positions(reader, splits, output, filter):
        number = len(located)
        located.append((split, blocklet))
        positions = batch.column(ROW_POSITION).to_numpy().astype(np.int64)
        target_row = pa.array((number << 32) | positions, pa.int64())
        batches.append(batch.drop_columns([ROW_POSITION]).append_column(_TARGET_ROW, target_row))
    target_schema = pa.schema([*output, pa.field(_TARGET_ROW, pa.int64())])
    return _Targets(pa.Table.from_batches(batches, schema=target_schema), located)


def _matched_pairs(
    target: pa.Table, src: pa.Table, on: Sequence[str], *, checked: bool, where: str
) -> pa.Table:
    """(keys, ``_TARGET_ROW``, ``_SOURCE_ROW``) of every match; when ``checked``, refused
    with :class:`DuplicateKeyError` if a target row is matched by two source rows."""
    keys = target.select([*on, _TARGET_ROW])
    pairs = keys.join(
        src.select([*on, _SOURCE_ROW]), keys=list(on), join_type="inner", use_threads=True
    )
    if checked and pairs.num_rows:
        per_target = pairs.group_by(_TARGET_ROW).aggregate([(_SOURCE_ROW, "count")])
        twice = pc.filter(per_target, pc.greater(per_target.column(f"{_SOURCE_ROW}_count"), 1))
        if twice.num_rows:
            raise DuplicateKeyError(
                f"merge into {where}: {twice.num_rows} "
                f"{'row of the table is' if twice.num_rows == 1 else 'rows of the table are'} "
                f"matched by more than one source row on {list(on)} (deduplicate the source "
                "by its keys)"
            )
    return pairs


def _unmatched_mask(rows: pa.ChunkedArray, matched: pa.ChunkedArray) -> pa.Array:
    return pc.invert(pc.is_in(rows, value_set=matched.combine_chunks()))


def _unmatched(rows: pa.ChunkedArray, matched: pa.ChunkedArray) -> pa.Array:
    """The entries of ``rows`` not in ``matched``."""
    return pc.filter(rows, _unmatched_mask(rows, matched)).combine_chunks()


@dataclass
class _MergeOutcome:
    """What a merge deletes and writes, counted as it is decided."""

    selection: Selection
    pieces: list[pa.Table] = field(default_factory=list)
    updated: int = 0
    inserted: int = 0
    deleted: int = 0

    def delete_targets(self, targets: _Targets, rows: pa.Array) -> None:
        _select(self.selection, targets.located, rows.to_numpy())

    def write(self, rows: pa.Table) -> None:
        self.pieces.append(rows)

    def plan(self, schema: pa.Schema, parameters: dict[str, str]) -> RowChangePlan:
        parameters.update(
            rows_updated=str(self.updated),
            rows_inserted=str(self.inserted),
            rows_deleted=str(self.deleted),
        )
        return RowChangePlan(
            self.selection,
            pa.concat_tables(self.pieces) if self.pieces else schema.empty_table(),
            parameters,
            rows_updated=self.updated,
            rows_inserted=self.inserted,
            rows_deleted=self.deleted,
        )


def _select(
    selection: Selection, located: list[tuple[Split, BlockletEntry]], rows: np.ndarray
) -> None:
    """Add target rows (``blocklet number << 32 | position``) to ``selection``."""
    if not len(rows):
        return
    rows = np.sort(rows)
    numbers = rows >> 32
    cuts = np.flatnonzero(np.diff(numbers)) + 1
    for chunk in np.split(rows, cuts):
        split, blocklet = located[int(chunk[0] >> 32)]
        selection.add(split, blocklet, (chunk & 0xFFFFFFFF).astype(np.uint32))


def _in_schema(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` (a subset of ``schema``'s columns) with the others as nulls, in its order."""
    n = rows.num_rows
    arrays = [
        rows.column(f.name) if f.name in rows.schema.names else pa.nulls(n, f.type) for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _updated_rows(
    target: pa.Table,
    src: pa.Table,
    pairs: pa.Table,
    schema: pa.Schema,
    needs_target_rows: bool,
) -> pa.Table:
    """One new row per matched target row: the source's columns, the target's for the rest."""
    from_source = src.take(pairs.column(_SOURCE_ROW))
    if not needs_target_rows:
        return _in_schema(from_source.drop_columns([_SOURCE_ROW]), schema)
    index = pc.index_in(
        pairs.column(_TARGET_ROW), value_set=target.column(_TARGET_ROW).combine_chunks()
    )
    from_target = target.take(index)
    arrays = [
        from_source.column(f.name) if f.name in src.schema.names else from_target.column(f.name)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def deduplicated(table: pa.Table, keys: Sequence[str], where: str) -> pa.Table:
    """The last row of each key of ``table``, in the order those rows came; null keys are
    refused (:class:`SchemaMismatchError`)."""
    for key in keys:
        nulls = table.column(key).null_count
        if nulls:
            raise SchemaMismatchError(
                f"primary key column {key!r} of the data for {where} holds {nulls} nulls; every "
                "row of a primary-key table needs a key"
            )
    if table.num_rows < 2:
        return table
    index = "_carbonlite_row_number"
    numbered = table.select(list(keys)).append_column(
        index, pa.array(np.arange(table.num_rows, dtype=np.int64))
    )
    last = numbered.group_by(list(keys), use_threads=False).aggregate([(index, "max")])
    keep = np.sort(last.column(f"{index}_max").to_numpy())
    return table if len(keep) == table.num_rows else table.take(pa.array(keep))


def keyed_rows(
    data: TableData, schema: pa.Schema, keys: Sequence[str], where: str, metadata: Any = None
) -> pa.Table:
    """``data`` for a primary-key table (an upsert or an overwrite): whole rows, in
    ``schema``'s columns, the last row of each key (:func:`deduplicated`). The row written
    replaces the table's whole row of its key, so a column the data lacks is what the columns
    rule (:func:`conformed_batches`) makes it in any append: its default, else null, and
    refused when it is not nullable; ``merge(data, on=keys)`` changes only some columns."""
    rows = source_table(data, schema, keys, where, metadata)
    defaults = layout_of(metadata).defaults if metadata is not None else None
    whole = conformed_batches(
        rows, schema, where=where, fill_missing=True, defaults=defaults, metadata=metadata
    )
    return deduplicated(pa.Table.from_batches(list(whole), schema=schema), keys, where)


def plan_upsert(
    reader: SplitReader,
    snapshot: Snapshot,
    data: TableData,
    where: str,
    cache: KeyCache | None = None,
) -> RowChangePlan:
    """``data`` upserted into a primary-key table: its last row of each key replaces the live
    row of that key (whole rows, :func:`keyed_rows`) or is inserted."""
    keys = snapshot.metadata.primary_key
    rows = keyed_rows(data, snapshot.schema, keys, where, snapshot.metadata)
    merged = plan_merge(
        reader,
        snapshot,
        rows,
        keys,
        when_matched="update",
        when_not_matched="insert",
        when_not_matched_by_source="ignore",
        where=where,
        cache=cache,
        check_keys=False,
    )
    parameters = {
        "on": ",".join(keys),
        "rows_updated": str(merged.rows_updated),
        "rows_inserted": str(merged.rows_inserted),
    }
    return dataclasses.replace(merged, parameters=parameters, exclusive=True)
