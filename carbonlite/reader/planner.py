"""Planning a scan from a snapshot alone: segments -> files -> blocklets, pruned by statistics.

No data file is opened here. A :class:`Split` is a run of consecutive matching blocklets of
one file, read only up to the file's committed length; it is plain data, so it can be
shipped to a Spark executor and read there with :func:`carbonlite.reader.scan.read_split`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from carbonlite.errors import SchemaMismatchError
from carbonlite.metadata import BlockletEntry, Snapshot
from carbonlite.reader.expression import Filter
from carbonlite.reader.predicate import can_match

__all__ = ["DEFAULT_SPLIT_BYTES", "ScanPlan", "Split", "plan_scan", "project_schema"]

DEFAULT_SPLIT_BYTES = 128 * 1024 * 1024
"""A run of blocklets longer than this is cut into several splits (parallelism)."""


@dataclass(frozen=True, slots=True)
class Split:
    """A run of consecutive blocklets of one file, up to the file's committed length."""

    segment_id: str
    file: str
    """Path relative to the table root."""
    committed_length: int
    blocklets: tuple[BlockletEntry, ...]

    @property
    def num_rows(self) -> int:
        return sum(b.num_rows for b in self.blocklets)

    @property
    def num_bytes(self) -> int:
        return sum(b.length for b in self.blocklets)


@dataclass(frozen=True, slots=True)
class ScanPlan:
    """What a scan will read, and how much pruning saved."""

    version: int
    table_schema: pa.Schema
    schema: pa.Schema
    """The output schema (the projected columns)."""
    splits: tuple[Split, ...]
    blocklets_total: int
    blocklets_selected: int
    bytes_total: int
    bytes_selected: int

    @property
    def blocklets_pruned(self) -> int:
        return self.blocklets_total - self.blocklets_selected

    @property
    def num_rows(self) -> int:
        """Rows in the selected blocklets (before the exact filter)."""
        return sum(s.num_rows for s in self.splits)


def project_schema(schema: pa.Schema, columns: Sequence[str] | None, *, where: str) -> pa.Schema:
    if columns is None:
        return schema
    if isinstance(columns, str):
        columns = [columns]
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise SchemaMismatchError(
            f"cannot select columns {missing} from {where}", [f"its columns are {schema.names}"]
        )
    if len(set(columns)) != len(columns):
        raise SchemaMismatchError(f"columns {list(columns)} name a column twice")
    return pa.schema([schema.field(c) for c in columns])


def plan_scan(
    snapshot: Snapshot,
    *,
    columns: Sequence[str] | None,
    filter: Filter | None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
) -> ScanPlan:
    """Every live blocklet whose statistics allow a match, grouped into splits."""
    schema = project_schema(snapshot.schema, columns, where=repr(snapshot.table_path))
    types = {f.name: f.type for f in snapshot.schema}
    predicate = filter.predicate if filter is not None else None
    splits: list[Split] = []
    total = selected = bytes_total = bytes_selected = 0
    for seg, f in snapshot.iter_files():
        run: list[BlockletEntry] = []
        run_bytes = 0
        for b in f.blocklets:
            total += 1
            bytes_total += b.length
            keep = predicate is None or can_match(predicate, b.stats, b.num_rows, types)
            if run and (not keep or run_bytes + b.length > split_bytes):
                splits.append(Split(seg.segment_id, f.path, f.committed_length, tuple(run)))
                run, run_bytes = [], 0
            if keep:
                run.append(b)
                run_bytes += b.length
                selected += 1
                bytes_selected += b.length
        if run:
            splits.append(Split(seg.segment_id, f.path, f.committed_length, tuple(run)))
    return ScanPlan(
        version=snapshot.version,
        table_schema=snapshot.schema,
        schema=schema,
        splits=tuple(splits),
        blocklets_total=total,
        blocklets_selected=selected,
        bytes_total=bytes_total,
        bytes_selected=bytes_selected,
    )
