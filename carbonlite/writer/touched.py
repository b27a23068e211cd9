"""What a delete, update or merge run by an engine can touch, so that its target is read
pruned (issue 40 §2; delta-rs #3636 asks the same of delta-rs).

The engine (Spark) works out :class:`Touched` from the change before it runs: a condition
every row it deletes or updates satisfies (a delete's or update's own condition, when it is
one CarbonLite reads exactly as Spark does), and for a merge, the values its equality keys
can match (the source's keys). The driver plans the job's splits with
:func:`plan_filter` (min/max, partitions, bloom filters and the secondary index prune files
and blocklets before one is opened), and each reading task keeps only the rows
:func:`row_filter` and :func:`keep_touched` keep, so the engine shuffles only rows the change
may touch.

Pruning is only ever a superset of what the change touches: every row the change's own
condition or join could select is read; the engine still decides each row itself.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from carbonlite.errors import InvalidFilterError
from carbonlite.reader.expression import Filter, parse_filter
from carbonlite.reader.sql_filter import sql_dnf

__all__ = [
    "PROBED_KEYS",
    "Touched",
    "condition_terms",
    "keep_touched",
    "plan_filter",
    "prunable_type",
    "row_filter",
]

PROBED_KEYS = 4_096
"""Key values at most that the plan's filter lists for bloom filters and the secondary index to
probe (each value is probed in every candidate blocklet, and parsing a long list costs about
15 us a value); more keys prune by their range at planning and by the whole set in the reading
tasks."""

_Term = tuple[str, str, Any]


@dataclass(frozen=True)
class Touched:
    """What a change can touch: rows for which ``condition`` holds (DNF terms, an OR of ANDs
    of ``(column, op, value)``; None: any row) and whose ``keys`` columns each hold one of
    the given values (distinct, sorted, not null, of the column's type: :meth:`of_keys`)."""

    condition: list[list[_Term]] | None = None
    keys: Mapping[str, pa.Array] = field(default_factory=dict)

    @classmethod
    def of_keys(cls, keys: Mapping[str, Any]) -> Touched:
        """Rows whose columns each hold one of ``keys``' values (Arrow arrays, or anything
        ``pa.array`` takes; in any order, repeated and null ones allowed)."""
        distinct = {}
        for name, given in keys.items():
            values = given if isinstance(given, (pa.Array, pa.ChunkedArray)) else pa.array(given)
            found = pc.unique(values.drop_null())
            distinct[name] = found.take(pc.sort_indices(found))
        return cls(keys=distinct)

    @property
    def nothing(self) -> bool:
        """No row can be touched (a key without a value: every source key is null)."""
        return any(len(values) == 0 for values in self.keys.values())


def prunable_type(t: pa.DataType) -> bool:
    """Whether CarbonLite compares values of ``t`` exactly as Spark does (equality and order):
    integers, strings, binary and dates. Not floats (Spark's joins take -0.0 for 0.0 and NaN
    for NaN), timestamps (Spark sees nanoseconds cut to microseconds), decimals, booleans
    (nothing to prune) or nested types."""
    return (
        pat.is_integer(t)
        or pat.is_string(t)
        or pat.is_large_string(t)
        or pat.is_binary(t)
        or pat.is_large_binary(t)
        or pat.is_date32(t)
    )


def _literal_fits(t: pa.DataType, value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return bool(value) and all(_literal_fits(t, v) for v in value)
    if isinstance(value, bool):
        return False
    if pat.is_integer(t):
        return isinstance(value, int)
    if pat.is_string(t) or pat.is_large_string(t):
        return isinstance(value, str)
    if pat.is_date32(t):
        return isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
    return False


def condition_terms(text: str, schema: pa.Schema, *, where: str) -> list[list[_Term]] | None:
    """``text`` (a SQL condition) as DNF terms CarbonLite evaluates exactly as Spark does, or
    None when it is not one: what ``replaceWhere`` strings accept (``sql_filter``), comparing
    integer, string and date columns with literals of their own kind."""
    try:
        dnf = sql_dnf(text, schema, where=where)
    except InvalidFilterError:
        return None
    types = {f.name: f.type for f in schema}
    for conjunct in dnf:
        for column, _, value in conjunct:
            t = types.get(column)
            if t is None or not prunable_type(t) or not _literal_fits(t, value):
                return None
    return dnf


def plan_filter(touched: Touched, schema: pa.Schema, *, where: str) -> Filter | None:
    """The filter the change's splits are planned with and its reading tasks apply: the
    condition, and each key's range (with its values, when there are at most
    :data:`PROBED_KEYS`, for bloom filters and the secondary index); None: no pruning."""
    keyed: list[_Term] = []
    for name, values in touched.keys.items():
        if len(values) == 0:
            continue
        bounds = pc.min_max(values)
        keyed += [(name, ">=", bounds["min"].as_py()), (name, "<=", bounds["max"].as_py())]
        if len(values) <= PROBED_KEYS:
            keyed.append((name, "in", values.to_pylist()))
    if touched.condition is None and not keyed:
        return None
    conjuncts = touched.condition if touched.condition is not None else [[]]
    return parse_filter([[*c, *keyed] for c in conjuncts], schema, where=where)


def row_filter(touched: Touched, schema: pa.Schema, *, where: str) -> Filter | None:
    """The filter the reading tasks apply to each blocklet's rows: the condition alone (the
    keys are kept exactly by :func:`keep_touched`, so the plan's key terms would only repeat
    that work); None: none."""
    if touched.condition is None:
        return None
    return parse_filter(touched.condition, schema, where=where)


def keep_touched(batch: pa.RecordBatch, keys: Mapping[str, pa.Array]) -> pa.RecordBatch:
    """The rows of ``batch`` whose key columns each hold one of ``keys``' values (as
    :meth:`Touched.of_keys` gives them)."""
    mask = None
    for name, values in keys.items():
        found = _members(batch.column(name), values)
        mask = found if mask is None else pc.and_(mask, found)
    return batch if mask is None else batch.filter(mask)


def _members(column: pa.Array, values: pa.Array) -> pa.Array:
    """Whether each value of ``column`` is one of the sorted ``values`` (null: false).
    Integers and dates by binary search in NumPy: ``pc.is_in`` hashes the whole value set
    again on every call, 40 ms for 200,000 keys, once per blocklet."""
    if not len(values) or not (pat.is_integer(values.type) or pat.is_date32(values.type)):
        return pc.fill_null(pc.is_in(column, value_set=values), False)
    valid = column.is_valid()
    present = pc.fill_null(column.cast(values.type), values[0]).to_numpy(zero_copy_only=False)
    sorted_values = values.to_numpy(zero_copy_only=False)
    at = np.minimum(np.searchsorted(sorted_values, present), len(sorted_values) - 1)
    return pc.and_(valid, pa.array(sorted_values[at] == present))
