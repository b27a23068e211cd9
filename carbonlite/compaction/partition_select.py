"""Which segments a compaction of the partitions a condition names merges (``optimize()
.where("region = 'eu'")``, Delta's partition filter of OPTIMIZE).

The condition is read as ``replaceWhere`` strings are (``reader/sql_filter.py``) and may name
only the columns the table is partitioned by (their source columns for a transform such as
``day(ts)``), so that it selects whole partitions, as Delta requires; a partition is selected
unless its value rules the condition out (``reader/partition_prune.py``, the pruning reads
use). Each selected partition's finished segments (SUCCESS and STREAMING_FINISH) become one
custom compaction, when that changes anything: two or more segments, or one still in the
streaming format.
"""

from __future__ import annotations

from collections import defaultdict

from carbonlite.compaction.plan import segment_order
from carbonlite.errors import InvalidOptionError
from carbonlite.metadata import Snapshot
from carbonlite.metadata.partition_spec import PartitionSpec
from carbonlite.reader.expression import parse_filter
from carbonlite.reader.partition_prune import pruned_segments
from carbonlite.reader.sql_filter import sql_dnf

__all__ = ["partition_compactions"]


def partition_compactions(
    snapshot: Snapshot, condition: str
) -> list[tuple[tuple[object, ...], list[str]]]:
    """For each partition ``condition`` selects: its value and the ids of the segments to
    merge into one (in arrival order); partitions with nothing to merge are left out."""
    where = f"optimize().where({condition!r}) of {snapshot.table_path!r}"
    spec = PartitionSpec.from_json(list(snapshot.metadata.partition_by), snapshot.schema)
    if not spec.is_partitioned:
        raise InvalidOptionError(
            f"{where}: the table is not partitioned, so a condition cannot select partitions; "
            "use optimize().executeCompaction() to compact the whole table"
        )
    dnf = sql_dnf(condition, snapshot.schema, where=where)
    named = {column for conjunct in dnf for column, _, _ in conjunct}
    others = sorted(named - set(spec.source_columns))
    if others:
        raise InvalidOptionError(
            f"{where}: {others} are not partition columns; the condition may name only "
            f"{list(spec.source_columns)} (it selects whole partitions, as in Delta)"
        )
    filter = parse_filter(dnf, snapshot.schema, where=where)
    assert filter is not None
    skipped = pruned_segments(snapshot, filter.predicate)
    by_partition: dict[tuple[object, ...], list[str]] = defaultdict(list)
    streaming: set[tuple[object, ...]] = set()
    for seg in snapshot.live_segments():
        if seg.segment_id in skipped or seg.status not in ("SUCCESS", "STREAMING_FINISH"):
            continue
        key = tuple(seg.partition or ())
        by_partition[key].append(seg.segment_id)
        if seg.status == "STREAMING_FINISH":
            streaming.add(key)
    return [
        (key, sorted(ids, key=segment_order))
        for key, ids in sorted(by_partition.items(), key=lambda kv: repr(kv[0]))
        if len(ids) > 1 or key in streaming
    ]
