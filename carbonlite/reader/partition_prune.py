"""Partition pruning: skipping whole segments by their partition value, from metadata alone.

A partition value bounds its source columns (``region = "eu"`` means every row's region is
"eu"; ``day(ts) = 2026-11-24`` puts every ``ts`` within that day; a bucket bounds nothing).
Those bounds are turned into the same statistics a blocklet carries, one row per segment of
an entries table (``metadata/blocklet_index.py``), and the filter is checked against all of
them at once by the columnar min/max evaluator (``prune_columns.match_mask``), before any
manifest or blocklet entry is looked at. The table is built once per snapshot, from
statistics kept per partition value.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from carbonlite.format.stats import ColumnStats, compute_column_stats
from carbonlite.metadata import BlockletEntry, Snapshot
from carbonlite.metadata.blocklet_index import entries_table
from carbonlite.metadata.partition_spec import PartitionSpec
from carbonlite.reader.predicate import Predicate
from carbonlite.reader.prune_columns import match_mask

__all__ = ["partition_stats", "pruned_segments"]


def partition_stats(
    spec: PartitionSpec, partition: tuple[Any, ...], types: Mapping[str, pa.DataType]
) -> dict[str, ColumnStats]:
    """Statistics every row of the partition (JSON values ``partition``) satisfies, as a
    blocklet's statistics would state them (for a blocklet of one row)."""
    value = spec.value_from_json(list(partition))
    stats: dict[str, ColumnStats] = {}
    for column in spec.null_columns(value):
        stats[column] = ColumnStats(null_count=1)
    for column, (lo, hi) in spec.bounds(value).items():
        if column in stats:
            continue
        computed = compute_column_stats(pa.array([lo, hi], type=types[column]))
        stats[column] = ColumnStats(null_count=0, min=computed.min, max=computed.max)
    return stats


@functools.lru_cache(maxsize=65_536)
def _cached_stats(
    spec_json: tuple[str, ...], schema: pa.Schema, partition: tuple[Any, ...]
) -> BlockletEntry:
    spec = PartitionSpec.from_json(list(spec_json), schema)
    types = {f.name: f.type for f in schema}
    return BlockletEntry(0, 0, 1, partition_stats(spec, partition, types))


def _index(snapshot: Snapshot) -> tuple[list[str], pa.Table]:
    """(segment ids, one statistics entry per live segment with a partition)."""
    spec_json = tuple(snapshot.metadata.partition_by)
    ids, groups = [], []
    for seg in snapshot.live_segments():
        if seg.partition is not None:
            ids.append(seg.segment_id)
            entry = _cached_stats(spec_json, snapshot.schema, seg.partition)
            groups.append((seg.segment_id, [entry]))
    return ids, entries_table(groups, snapshot.schema)


def pruned_segments(snapshot: Snapshot, predicate: Predicate) -> set[str]:
    """The live segments whose partition no row of which can satisfy ``predicate``."""
    ids, table = snapshot.memo("partition_index", lambda: _index(snapshot))
    if not ids:
        return set()
    types = {f.name: f.type for f in snapshot.schema}
    keep = match_mask(predicate, table, types).to_numpy(zero_copy_only=False)
    return {ids[i] for i in np.flatnonzero(~keep)}
