"""Selective overwrite by predicate (Delta's ``replaceWhere``): the rows of the table the
predicate keeps are replaced by the rows written, in one version.

Workers check every row they write against the predicate (:func:`checked_batches`): a row
it does not keep fails the write with :class:`ReplaceWhereMismatchError` before anything is
committed. The driver then deletes the table's matching rows by deletion vectors, written and
committed by the row-change machinery of ``writer/row_changes.py`` (the rows chosen by
:func:`select_replaced`), in the same version as the workers' blocklets
(``driver.commit_parts``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.errors import ReplaceWhereMismatchError
from carbonlite.metadata import Snapshot
from carbonlite.reader.expression import Filter, parse_filter
from carbonlite.reader.scan import SplitReader
from carbonlite.writer.row_changes import Selection, select_rows

__all__ = ["ReplacedRows", "checked_batches", "replace_filter", "select_replaced"]

_SHOWN = 3


def replace_filter(predicate: str, schema: pa.Schema, *, where: str) -> Filter:
    """The predicate of ``replaceWhere`` as a filter (:class:`InvalidFilterError` if bad)."""
    parsed = parse_filter(predicate, schema, where=where)
    assert parsed is not None  # a string is never "no filter"
    return parsed


def checked_batches(
    batches: Iterable[pa.RecordBatch], predicate: str, schema: pa.Schema, *, where: str
) -> Iterator[pa.RecordBatch]:
    """``batches`` unchanged, raising :class:`ReplaceWhereMismatchError` at the first batch
    holding a row ``predicate`` does not keep (a null comparison does not keep it)."""
    check = replace_filter(predicate, schema, where=where)
    for batch in batches:
        kept = check.apply(batch)
        if kept.num_rows != batch.num_rows:
            kept_at = pc.is_in(
                pa.array(range(batch.num_rows)), value_set=_kept_positions(batch, check)
            )
            bad = ", ".join(
                "(" + ", ".join(f"{k}={v}" for k, v in row.items()) + ")"
                for row in batch.filter(pc.invert(kept_at)).slice(0, _SHOWN).to_pylist()
            )
            raise ReplaceWhereMismatchError(
                f"the rows written to {where} with replaceWhere {predicate!r} must all match "
                f"it; {batch.num_rows - kept.num_rows} of a batch of {batch.num_rows} do not, "
                f"such as {bad}. Nothing was committed: filter the DataFrame with the same "
                "predicate, or widen replaceWhere"
            )
        yield batch


def _kept_positions(batch: pa.RecordBatch, check: Filter) -> pa.Array:
    numbered = batch.append_column("__position", pa.array(range(batch.num_rows), pa.int64()))
    return check.apply(numbered).column("__position")


@dataclass(frozen=True)
class ReplacedRows:
    """The rows a ``replaceWhere`` write deletes, as ``row_changes.commit_row_change`` plans
    them (the rows written in their place were written by the workers)."""

    selection: Selection
    predicate: str

    @property
    def data(self) -> pa.Table:  # pragma: no cover - the commit step writes the workers' rows
        raise AssertionError("a replaceWhere commits the workers' blocklets, not rows of its own")

    @property
    def parameters(self) -> dict[str, str]:
        return {"replaceWhere": self.predicate, "rows_replaced": str(self.selection.num_rows)}

    @property
    def changes_anything(self) -> bool:
        return True  # the rows written commit even when no row is replaced

    @property
    def exclusive(self) -> bool:
        return False


def select_replaced(reader: SplitReader, snapshot: Snapshot, predicate: str) -> ReplacedRows:
    """The live rows of ``snapshot`` that ``predicate`` keeps: those a ``replaceWhere`` write
    deletes (their deletion vectors are written by ``row_changes.row_changes``)."""
    check = replace_filter(predicate, snapshot.schema, where=repr(snapshot.table_path))
    selection, _ = select_rows(reader, snapshot, check, [])
    return ReplacedRows(selection, predicate)
