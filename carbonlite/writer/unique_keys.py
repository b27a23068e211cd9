"""One row per key in a primary-key table: the check an update or merge passes before it commits.

An upsert keeps keys unique by construction (it matches the table's rows by the key and
writes the last row of each). An update that sets a key column, or a merge (whose ``on``
may not be the key, and which inserts source rows it did not match), could leave two live
rows with one key: :func:`check_unique_keys` refuses that with :class:`DuplicateKeyError`,
against the snapshot the change was planned on. The plan is then committed with
``exclusive`` (``DataUnchangedSince``): a data commit that lands between the plan and the
commit (an upsert of the same key, say) makes the change plan again on the newer snapshot,
where the check runs again.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.errors import DuplicateKeyError, SchemaMismatchError
from carbonlite.metadata import Snapshot
from carbonlite.reader.expression import Filter, parse_filter
from carbonlite.reader.planner import plan_scan
from carbonlite.reader.scan import ROW_POSITION, SplitReader
from carbonlite.writer.row_changes import Selection, read_positions

__all__ = ["check_published_keys", "check_unique_keys", "key_range_filter"]

_SHOWN = 5
"""Keys a message lists at most."""


def key_range_filter(
    source: pa.Table, on: Sequence[str], schema: pa.Schema, where: str
) -> Filter | None:
    """A filter that keeps every target row whose keys lie within the source's key range
    (what min/max pruning can use); None when some key column has no non-null value."""
    terms = []
    for key in on:
        bounds = pc.min_max(source.column(key))
        low, high = bounds["min"], bounds["max"]
        if not low.is_valid:
            return None
        terms.append((pc.field(key) >= low) & (pc.field(key) <= high))
    expression = terms[0]
    for term in terms[1:]:
        expression = expression & term
    return parse_filter(expression, schema, where=where)


def _shown(keys: pa.Table) -> str:
    rows = [tuple(r.values()) for r in keys.slice(0, _SHOWN).to_pylist()]
    text = ", ".join(repr(r[0] if len(r) == 1 else r) for r in rows)
    return text + (f" and {keys.num_rows - _SHOWN} more" if keys.num_rows > _SHOWN else "")


def _repeated(written: pa.Table, keys: list[str]) -> pa.Table:
    """The keys ``written`` holds more than once."""
    counts = written.group_by(keys, use_threads=False).aggregate([([], "count_all")])
    return counts.filter(pc.greater(counts.column("count_all"), 1)).select(keys)


def _kept_rows(
    reader: SplitReader, selection: Selection, written: pa.Table, keys: list[str], where: str
) -> pa.Table:
    """The keys of live rows of ``selection.snapshot`` in ``written``'s key range that the
    change does not delete."""
    snapshot = selection.snapshot
    output = pa.schema([snapshot.schema.field(k) for k in keys])
    filter = key_range_filter(written, keys, snapshot.schema, where)
    if filter is None:
        return output.empty_table()
    splits = plan_scan(snapshot, columns=keys, filter=filter).splits
    kept = []
    for split, blocklet, batch in read_positions(reader, splits, output, filter):
        deleted = selection.positions(split, blocklet)
        if len(deleted):
            gone = pc.is_in(batch.column(ROW_POSITION), value_set=pa.array(deleted, pa.uint32()))
            batch = batch.filter(pc.invert(gone))
        kept.append(batch.select(keys))
    return pa.Table.from_batches(kept, schema=output)


def check_unique_keys(
    reader: SplitReader, selection: Selection, written: pa.Table, operation: str, where: str
) -> None:
    """Refuse a change of a primary-key table that deletes ``selection`` and writes
    ``written`` if it would leave a null key, or two live rows with one key: two written rows
    with the same key, or a written row with the key of a row the change leaves in place."""
    keys = list(selection.snapshot.metadata.primary_key)
    if not keys or not written.num_rows:
        return
    written = _checked_written(written, keys, operation, where)
    kept = _kept_rows(reader, selection, written, keys, where)
    _check_no_clash(kept, written, keys, operation, where, selection.snapshot.version)


def check_published_keys(
    reader: SplitReader,
    snapshot: Snapshot,
    written: pa.Table,
    replaced: Collection[tuple[Any, ...]],
    where: str,
) -> None:
    """Refuse a publish into a primary-key table that would leave a null key or two live rows
    with one key: two written rows with the same key (in one partition or in two), or a
    written row with the key of a row in a partition the publish keeps (a key that moved to
    another partition must leave its old one in the same publish)."""
    keys = list(snapshot.metadata.primary_key)
    if not keys or not written.num_rows:
        return
    written = _checked_written(written, keys, "publish", where)
    output = pa.schema([snapshot.schema.field(k) for k in keys])
    filter = key_range_filter(written, keys, snapshot.schema, where)
    splits = [
        s
        for s in plan_scan(snapshot, columns=keys, filter=filter).splits
        if snapshot.segments[s.segment_id].partition not in replaced
    ]
    kept = pa.Table.from_batches(
        [b.select(keys) for _, _, b in read_positions(reader, splits, output, filter)],
        schema=output,
    )
    _check_no_clash(kept, written, keys, "publish", where, snapshot.version)


def _checked_written(written: pa.Table, keys: list[str], operation: str, where: str) -> pa.Table:
    """The key columns of ``written``, refused when a key is null or repeated."""
    written = written.select(keys)
    for key in keys:
        if written.column(key).null_count:
            raise SchemaMismatchError(
                f"{operation} of {where} would write {written.column(key).null_count} rows "
                f"with a null primary key {key!r}; every row of a primary-key table needs a key"
            )
    twice = _repeated(written, keys)
    if twice.num_rows:
        raise DuplicateKeyError(
            f"{operation} of {where} would write rows with the same primary key {keys} "
            f"({_shown(twice)}): a primary-key table holds one row per key, so nothing was "
            "committed (make the new keys distinct)"
        )
    return written


def _check_no_clash(
    kept: pa.Table, written: pa.Table, keys: list[str], operation: str, where: str, version: int
) -> None:
    clash = kept.join(written, keys=keys, join_type="left semi", use_threads=False)
    if clash.num_rows:
        raise DuplicateKeyError(
            f"{operation} of {where} would write rows with primary keys {keys} that rows it "
            f"leaves in place hold at version {version} ({_shown(clash)}): a primary-key "
            "table holds one row per key, so nothing was committed (choose other keys, or "
            "delete or change those rows in the same change)"
        )
