"""Partition pruning: skipping whole segments by their partition value, from metadata alone.

A partition value bounds its source columns (``region = "eu"`` means every row's region is
"eu"; ``day(ts) = 2026-11-24`` puts every ``ts`` within that day; a bucket bounds nothing).
Those bounds are turned into the same statistics a blocklet carries, and the filter is
checked against them by the one min/max evaluator (``predicate.can_match``), before any
manifest or blocklet entry is looked at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from carbonlite.format.stats import ColumnStats, compute_column_stats
from carbonlite.metadata import SegmentState
from carbonlite.metadata.partition_spec import PartitionSpec
from carbonlite.reader.predicate import Predicate, can_match

__all__ = ["partition_stats", "pruned_segments"]


def partition_stats(
    spec: PartitionSpec, partition: tuple[Any, ...], types: Mapping[str, pa.DataType]
) -> dict[str, ColumnStats]:
    """Statistics every row of the partition (JSON values ``partition``) satisfies, as a
    blocklet's statistics would state them (one count of rows: ``_ROWS``)."""
    value = spec.value_from_json(list(partition))
    stats: dict[str, ColumnStats] = {}
    for column in spec.null_columns(value):
        stats[column] = ColumnStats(null_count=_ROWS)
    for column, (lo, hi) in spec.bounds(value).items():
        if column in stats:
            continue
        computed = compute_column_stats(pa.array([lo, hi], type=types[column]))
        stats[column] = ColumnStats(null_count=0, min=computed.min, max=computed.max)
    return stats


_ROWS = 1
"""The row count partition statistics are checked with: only whether a row can match counts,
and a segment of a partition holds rows (an empty one is not planned anyway)."""


def pruned_segments(
    spec: PartitionSpec,
    segments: Iterable[SegmentState],
    predicate: Predicate,
    types: Mapping[str, pa.DataType],
) -> set[str]:
    """The ids of ``segments`` whose partition no row of which can satisfy ``predicate``."""
    verdicts: dict[tuple[Any, ...], bool] = {}
    pruned = set()
    for seg in segments:
        if seg.partition is None:
            continue
        keep = verdicts.get(seg.partition)
        if keep is None:
            stats = partition_stats(spec, seg.partition, types)
            keep = verdicts[seg.partition] = can_match(predicate, stats, _ROWS, types)
        if not keep:
            pruned.add(seg.segment_id)
    return pruned
