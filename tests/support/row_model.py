"""A plain pyarrow model of row-level changes (delete, update, merge), for the row-change
tests: what a table must hold after each operation, what the operation must report, and what
``Table.changes`` must show for it.

The model knows nothing of CarbonLite: filters are evaluated by pyarrow itself (DNF tuples
through ``pyarrow.parquet.filters_to_expression``, the convention docs/FILTERS.md follows),
updates are computed with ``pyarrow.compute`` from a small spec (:class:`Assign`), and merge
is a hash lookup of the source's keys (SQL equality: a null key matches nothing).

Rows are compared as multisets (:func:`rows_of`, :func:`diff`): order never matters, and a
duplicated or lost row is a difference.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = [
    "CHANGE_TYPES",
    "SCHEMA",
    "Assign",
    "Change",
    "apply_delete",
    "apply_merge",
    "apply_update",
    "change_rows",
    "diff",
    "filter_expression",
    "make_source",
    "matching",
    "rows_of",
]

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])
"""id (the merge key; nullable, so null keys can be tested), v, s."""

CHANGE_TYPES = ("insert", "delete", "update_preimage", "update_postimage")


def rows_of(table: pa.Table) -> Counter:
    """The rows of ``table`` (in SCHEMA's columns) as a multiset of tuples."""
    cols = [table.column(n).to_pylist() for n in SCHEMA.names]
    return Counter(zip(*cols, strict=True)) if cols else Counter()


def diff(got: Counter, want: Counter, limit: int = 8) -> str | None:
    """None when the multisets are equal, else a short description of the difference."""
    if got == want:
        return None
    extra = list((got - want).elements())
    missing = list((want - got).elements())
    return (
        f"{sum(got.values())} rows, {sum(want.values())} expected; "
        f"unexpected {len(extra)}: {sorted(extra, key=repr)[:limit]}; "
        f"missing {len(missing)}: {sorted(missing, key=repr)[:limit]}"
    )


def filter_expression(filter: Any) -> pc.Expression | None:
    """``filter`` (an Expression, DNF tuples, or None) as an Expression pyarrow evaluates."""
    if filter is None or isinstance(filter, pc.Expression):
        return filter
    return pq.filters_to_expression(filter)


def matching(table: pa.Table, filter: Any) -> np.ndarray:
    """A boolean mask of the rows ``filter`` keeps (a null result keeps no row)."""
    n = table.num_rows
    expression = filter_expression(filter)
    if expression is None:
        return np.ones(n, dtype=bool)
    indexed = table.append_column("_model_row", pa.array(np.arange(n, dtype=np.int64)))
    kept = indexed.filter(expression).column("_model_row").to_numpy()
    mask = np.zeros(n, dtype=bool)
    mask[kept] = True
    return mask


def _take(table: pa.Table, mask: np.ndarray) -> pa.Table:
    return table.filter(pa.array(mask, pa.bool_()))


@dataclass(frozen=True)
class Change:
    """What one operation did: the table after it, the rows of each change type, counts."""

    table: pa.Table
    rows: dict[str, pa.Table] = field(default_factory=dict)
    updated: int = 0
    inserted: int = 0
    deleted: int = 0

    @property
    def commits(self) -> bool:
        """Whether the operation changes anything (and so commits a version)."""
        return bool(self.updated or self.inserted or self.deleted)

    def expected_changes(self) -> dict[str, Counter]:
        return {kind: rows_of(self.rows.get(kind, SCHEMA.empty_table())) for kind in CHANGE_TYPES}


def change_rows(changes: pa.Table) -> dict[str, Counter]:
    """The rows of a ``Table.changes`` result, per change type."""
    out = {}
    for kind in CHANGE_TYPES:
        out[kind] = rows_of(changes.filter(pc.equal(changes["_change_type"], kind)))
    unknown = set(changes["_change_type"].to_pylist()) - set(CHANGE_TYPES)
    assert not unknown, f"unknown change types {unknown}"
    return out


def apply_delete(table: pa.Table, filter: Any) -> Change:
    mask = matching(table, filter)
    gone = _take(table, mask)
    return Change(_take(table, ~mask), {"delete": gone}, deleted=gone.num_rows)


@dataclass(frozen=True)
class Assign:
    """One column of an update: ``("const", value)``, ``("add", column, k)`` (column + k) or
    ``("mul", column, k)`` (column * k)."""

    kind: str
    value: Any = None
    column: str | None = None

    def expression(self) -> Any:
        """What ``Table.update`` is given: a scalar or a pyarrow.compute expression."""
        if self.kind == "const":
            return self.value
        op = {"add": lambda f, k: f + k, "mul": lambda f, k: f * k}[self.kind]
        return op(pc.field(self.column), self.value)

    def compute(self, rows: pa.Table, type: pa.DataType) -> pa.Array:
        """The new values of ``rows`` (the model's own arithmetic)."""
        if self.kind == "const":
            return pa.array([self.value] * rows.num_rows, type)
        op = pc.add if self.kind == "add" else pc.multiply
        return op(rows.column(self.column), pa.scalar(self.value, type)).cast(type)


def apply_update(table: pa.Table, filter: Any, assignments: Mapping[str, Assign]) -> Change:
    mask = matching(table, filter)
    old = _take(table, mask)
    arrays = [
        assignments[f.name].compute(old, f.type) if f.name in assignments else old.column(f.name)
        for f in table.schema
    ]
    new = pa.Table.from_arrays(arrays, schema=table.schema)
    after = pa.concat_tables([_take(table, ~mask), new])
    rows = {"update_preimage": old, "update_postimage": new}
    return Change(after, rows, updated=old.num_rows)


def _full(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` (some of ``schema``'s columns) with the others null."""
    n = rows.num_rows
    return pa.Table.from_arrays(
        [
            rows.column(f.name).cast(f.type) if f.name in rows.schema.names else pa.nulls(n, f.type)
            for f in schema
        ],
        schema=schema,
    )


def apply_merge(
    table: pa.Table,
    source: pa.Table,
    on: str | Sequence[str] = "id",
    *,
    when_matched: str = "update",
    when_not_matched: str = "insert",
    when_not_matched_by_source: str = "ignore",
) -> Change:
    """Merge ``source`` (unique keys, nulls aside; columns a subset of the table's, in any
    order) by the key columns ``on``. A key with a null in it matches nothing."""
    on = [on] if isinstance(on, str) else list(on)

    def keys_of(rows: pa.Table) -> list[tuple | None]:
        columns = [rows.column(k).to_pylist() for k in on]
        return [None if None in key else key for key in zip(*columns, strict=True)]

    keys = keys_of(source)
    present = [k for k in keys if k is not None]
    assert len(present) == len(set(present)), "the model merges sources with unique keys"
    index = {k: i for i, k in enumerate(keys) if k is not None}
    table_keys = keys_of(table)
    matched = np.array([k is not None and k in index for k in table_keys], dtype=bool)
    live_keys = {k for k in table_keys if k is not None}
    pieces = []
    rows: dict[str, list[pa.Table]] = {kind: [] for kind in CHANGE_TYPES}
    keep = ~matched if when_matched != "ignore" else np.ones(len(matched), dtype=bool)
    updated = inserted = deleted = 0
    hit = _take(table, matched)
    if when_matched == "update" and hit.num_rows:
        take = pa.array([index[k] for k in keys_of(hit)], pa.int64())
        from_source = source.take(take)
        arrays = [
            from_source.column(f.name).cast(f.type)
            if f.name in source.schema.names
            else hit.column(f.name)
            for f in table.schema
        ]
        new = pa.Table.from_arrays(arrays, schema=table.schema)
        pieces.append(new)
        rows["update_preimage"].append(hit)
        rows["update_postimage"].append(new)
        updated = hit.num_rows
    elif when_matched == "delete":
        rows["delete"].append(hit)
        deleted += hit.num_rows
    if when_not_matched_by_source == "delete":
        unmatched = _take(table, ~matched)
        rows["delete"].append(unmatched)
        deleted += unmatched.num_rows
        keep = keep & matched
    if when_not_matched == "insert":
        new_mask = np.array([k is None or k not in live_keys for k in keys], dtype=bool)
        new_rows = _full(_take(source, new_mask), table.schema)
        pieces.append(new_rows)
        rows["insert"].append(new_rows)
        inserted = new_rows.num_rows
    after = pa.concat_tables([_take(table, keep), *pieces])
    out = {
        kind: pa.concat_tables(parts) if parts else table.schema.empty_table()
        for kind, parts in rows.items()
    }
    return Change(after, out, updated=updated, inserted=inserted, deleted=deleted)


def make_source(
    keys: Sequence[int | None], v: Sequence[int | None], s: Sequence[str | None] | None
) -> pa.Table:
    """A merge source of ``keys`` with values ``v`` (and ``s`` when given)."""
    columns: dict[str, pa.Array] = {
        "id": pa.array(keys, pa.int64()),
        "v": pa.array(v, pa.int64()),
    }
    if s is not None:
        columns["s"] = pa.array(s, pa.string())
    return pa.table(columns)
