"""Rows on their way into a partitioned table: split by partition, one group per segment.

Every segment of a partitioned table holds the rows of one partition (docs/LOG.md,
"Partitions"), so a write splits its rows first and appends each group to its partition's
segment; an unpartitioned table's rows are one group with no partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from carbonlite.metadata.actions import TableMetadata
from carbonlite.metadata.partition_spec import PartitionSpec

__all__ = ["PartitionRows", "partition_key", "partition_spec", "route_rows"]


@dataclass(frozen=True, slots=True)
class PartitionRows:
    """The rows of one partition (``partition``: its JSON values, None when unpartitioned)."""

    partition: tuple[Any, ...] | None
    data: Any
    """A pyarrow Table or an iterable of RecordBatches."""
    content_hash: str | None = None
    """Set by a publish: the rows' content hash, stored with their new segment."""


def partition_spec(metadata: TableMetadata) -> PartitionSpec:
    """The table's partition spec (empty for an unpartitioned table)."""
    return PartitionSpec.from_json(list(metadata.partition_by), metadata.schema)


def partition_key(spec: PartitionSpec, value: tuple[Any, ...]) -> tuple[Any, ...]:
    """The JSON form of a partition value, as segments record it."""
    return tuple(spec.value_to_json(value))


def route_rows(
    spec: PartitionSpec, batches: Iterable[pa.RecordBatch], schema: pa.Schema
) -> list[PartitionRows]:
    """``batches`` split by ``spec``'s partitions (in partition order; rows keep their order
    within each), or one group of all of them for an unpartitioned table (not materialised)."""
    if not spec.is_partitioned:
        return [PartitionRows(None, batches)]
    table = pa.Table.from_batches(list(_nonempty(batches)), schema=schema)
    return [
        PartitionRows(partition_key(spec, value), rows.to_batches())
        for value, rows in spec.split(table)
    ]


def _nonempty(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    return (b for b in batches if b.num_rows)
