"""Planning handoff and compaction from a snapshot: which segments merge into which.

A plan is plain data (picklable, JSON-able in spirit): each :class:`CompactionTask` names its
input segments with the exact files and committed lengths it will read, and the id, level
and sort order of the one segment it will write. Executing a task needs nothing else, so
Spark executors can run it; committing the plan later re-checks that the inputs are still
exactly as planned.

Segment ids of outputs are derived from their inputs, CarbonData style: handing off
streaming segment ``3`` writes ``3.0``; merging ``3.0, 4.0, 5.0, 6.0`` at level 1 writes
``3.1``. An input is consumed once, so an id is never made twice.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from carbonlite.errors import InvalidOptionError
from carbonlite.format.bloom import DEFAULT_BLOOM_FPP, BloomSpec
from carbonlite.format.parquet_file import is_parquet
from carbonlite.metadata import SegmentState, Snapshot
from carbonlite.metadata.columns import IDENTITY, ColumnLayout, column_ids
from carbonlite.properties import TableProperties
from carbonlite.reader.planner import Split, file_split
from carbonlite.writer.bloom_files import bloom_spec
from carbonlite.writer.index_files import index_columns

__all__ = [
    "CompactionKind",
    "CompactionPlan",
    "CompactionTask",
    "plan_compaction",
    "plan_handoff",
    "segment_order",
]

CompactionKind = Literal["handoff", "minor", "major", "custom"]


@dataclass(frozen=True, slots=True)
class SegmentInput:
    """One input segment as the plan saw it."""

    segment_id: str
    status: str
    splits: tuple[Split, ...]
    """Every file of the segment with its committed length, blocklets and deletion vectors."""
    deletions: Mapping[str, int] = field(default_factory=dict)
    """``deletion_version`` of each file with deleted rows, as planned."""

    @property
    def num_rows(self) -> int:
        """Rows it holds for readers (deleted ones not counted)."""
        return sum(s.live_rows for s in self.splits)

    @property
    def num_bytes(self) -> int:
        return sum(s.committed_length for s in self.splits)


@dataclass(frozen=True, slots=True)
class CompactionTask:
    """Merge ``inputs`` into one new COLUMNAR segment ``output_id``."""

    task_id: str
    output_id: str
    level: int
    inputs: tuple[SegmentInput, ...]
    sort_columns: tuple[str, ...]
    blocklet_rows: int
    compression_level: int
    partition: tuple[Any, ...] | None = None
    """The partition of every input (a task never mixes partitions)."""
    content_hash: str | None = None
    """The content hash of the one input's rows, when known: the output keeps it (it holds
    the same rows)."""
    layout: ColumnLayout = IDENTITY
    """Where the columns lie in data files: inputs are read through it and the output is
    written under the schema's physical names (``metadata/columns.py``)."""
    blooms: BloomSpec | None = None
    """The bloom filters the output's blocklets get (``bloom_filter_columns``)."""
    indexes: tuple[str, ...] = ()
    """The columns (physical names) the output's files get secondary indexes of."""
    columnar_format: str = "carbonlite"
    """The kind of files the output is written in (the table's ``columnar_format``):
    ``parquet`` or ``carbonlite`` (blocklet files)."""
    column_ids: tuple[int, ...] = ()
    """The id of each column of the schema (a Parquet output's field ids)."""
    lookup_fpp: float = DEFAULT_BLOOM_FPP
    """The false-positive rate of a Parquet output's bloom filters (``bloom_filter_fpp``),
    on its bloom filter and secondary index columns alike."""

    @property
    def num_rows(self) -> int:
        return sum(i.num_rows for i in self.inputs)

    @property
    def num_bytes(self) -> int:
        return sum(i.num_bytes for i in self.inputs)


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    kind: CompactionKind
    read_version: int
    tasks: tuple[CompactionTask, ...] = field(default_factory=tuple)

    @property
    def input_segments(self) -> list[str]:
        return [i.segment_id for t in self.tasks for i in t.inputs]


def segment_order(segment_id: str) -> tuple[int, int]:
    """Arrival order of a segment: its root number, then its level."""
    root, _, level = segment_id.partition(".")
    return int(root), int(level or -1)


def _input(seg: SegmentState) -> SegmentInput:
    return SegmentInput(
        segment_id=seg.segment_id,
        status=seg.status,
        splits=tuple(file_split(seg, f) for f in seg.files.values()),
        deletions={p: f.deletion_version for p, f in seg.files.items() if f.deletion_version},
    )


def _output_id(snapshot: Snapshot, inputs: Sequence[SegmentState], level: int) -> str:
    root = min(segment_order(s.segment_id)[0] for s in inputs)
    candidate = f"{root}.{level}"
    while candidate in snapshot.segments:  # never reuse an id, even of a failed-and-forgotten merge
        level += 1
        candidate = f"{root}.{level}"
    return candidate


def _task(snapshot: Snapshot, inputs: Sequence[SegmentState], level: int) -> CompactionTask:
    props = TableProperties(snapshot.properties)
    partitions = {s.partition for s in inputs}
    if len(partitions) != 1:  # the planners group by partition: this is a bug, not bad input
        raise AssertionError(
            f"a compaction task would mix partitions {sorted(map(str, partitions))}"
        )
    return CompactionTask(
        task_id=uuid.uuid4().hex[:12],
        output_id=_output_id(snapshot, inputs, level),
        level=level,
        inputs=tuple(_input(s) for s in sorted(inputs, key=lambda s: segment_order(s.segment_id))),
        sort_columns=tuple(snapshot.metadata.sort_columns),
        blocklet_rows=props.handoff_blocklet_rows,
        compression_level=props.compression_level,
        partition=inputs[0].partition,
        content_hash=inputs[0].current_hash if len(inputs) == 1 else None,
        layout=snapshot.layout,
        blooms=bloom_spec(snapshot.properties, snapshot.schema, snapshot.layout),
        indexes=index_columns(snapshot.properties, snapshot.schema, snapshot.layout),
        columnar_format=props.columnar_format,
        column_ids=column_ids(snapshot.metadata),
        lookup_fpp=props.bloom_filter_fpp,
    )


def _by_partition(segments: Sequence[SegmentState]) -> list[list[SegmentState]]:
    """``segments`` grouped by partition, each group in the given order."""
    groups: dict[Any, list[SegmentState]] = {}
    for seg in segments:
        groups.setdefault(seg.partition, []).append(seg)
    return list(groups.values())


def plan_handoff(snapshot: Snapshot) -> CompactionPlan:
    """Every STREAMING_FINISH segment becomes its own sorted COLUMNAR segment."""
    finished = [s for s in snapshot.segments.values() if s.status == "STREAMING_FINISH"]
    tasks = []
    for seg in sorted(finished, key=lambda s: segment_order(s.segment_id)):
        if seg.num_rows:
            tasks.append(_task(snapshot, [seg], 0))
    return CompactionPlan("handoff", snapshot.version, tuple(tasks))


def _candidates(snapshot: Snapshot) -> list[SegmentState]:
    """SUCCESS segments in arrival order, minus the newest ``compaction_preserve_segments``."""
    done = sorted(
        (s for s in snapshot.segments.values() if s.status == "SUCCESS"),
        key=lambda s: segment_order(s.segment_id),
    )
    keep = TableProperties(snapshot.properties).compaction_preserve_segments
    return done[: len(done) - keep] if keep else done


def _plan_minor(snapshot: Snapshot) -> list[CompactionTask]:
    thresholds = TableProperties(snapshot.properties).compaction_level_threshold
    tasks = []
    for candidates in _by_partition(_candidates(snapshot)):
        for level, threshold in enumerate(thresholds):
            at_level = [s for s in candidates if s.level == level]
            for start in range(0, len(at_level) - threshold + 1, threshold):
                tasks.append(_task(snapshot, at_level[start : start + threshold], level + 1))
    return tasks


def _in_other_format(seg: SegmentState, columnar_format: str) -> bool:
    """Whether a file of ``seg`` is not in the table's ``columnar_format``."""
    return any(is_parquet(f) != (columnar_format == "parquet") for f in seg.files)


def _plan_major(snapshot: Snapshot) -> list[CompactionTask]:
    """Runs of consecutive segments up to ``major_compaction_size`` merged, each into one; a
    segment alone in its run is rewritten when its files are not in the table's
    ``columnar_format`` (so a major compaction converts the whole table)."""
    props = TableProperties(snapshot.properties)
    limit, columnar_format = props.major_compaction_size, props.columnar_format
    tasks: list[CompactionTask] = []
    group: list[SegmentState] = []
    size = 0

    def flush() -> None:
        if len(group) >= 2 or (group and _in_other_format(group[0], columnar_format)):
            tasks.append(_task(snapshot, group, max(s.level for s in group) + 1))

    for candidates in _by_partition(_candidates(snapshot)):
        for seg in candidates:
            if seg.num_bytes >= limit:  # already large: it ends the run of consecutive segments
                flush()
                group, size = [seg], 0
                flush()  # (converted alone when it must be)
                group = []
                continue
            if group and size + seg.num_bytes > limit:
                flush()
                group, size = [], 0
            group.append(seg)
            size += seg.num_bytes
        flush()
        group, size = [], 0
    return tasks


def _shown(segments: Sequence[str]) -> str:
    """The ids a user named, for a message: the first ten and how many more."""
    ids = list(segments)
    return str(ids) if len(ids) <= 10 else f"{ids[:10]} (and {len(ids) - 10} more)"


def _plan_custom(snapshot: Snapshot, segments: Sequence[str]) -> list[CompactionTask]:
    if not segments:
        raise InvalidOptionError("custom compaction needs the ids of the segments to merge")
    chosen = []
    named = Counter(segments)
    problems = [f"segment {sid!r} is named more than once" for sid, n in named.items() if n > 1]
    for sid in dict.fromkeys(segments):
        seg = snapshot.segments.get(sid)
        if seg is None:
            problems.append(f"segment {sid!r} does not exist")
        elif seg.status not in ("SUCCESS", "STREAMING_FINISH"):
            problems.append(
                f"segment {sid!r} is {seg.status}; only SUCCESS and STREAMING_FINISH segments can merge"
            )
        else:
            chosen.append(seg)
    if len({s.partition for s in chosen}) > 1:
        problems.append(
            "they belong to different partitions ("
            + ", ".join(f"{s.segment_id}: {s.partition}" for s in chosen)
            + "); a segment holds one partition's rows"
        )
    if len(problems) > 10:
        problems[10:] = [f"and {len(problems) - 10} more problems"]
    if problems:
        raise InvalidOptionError(
            f"cannot compact segments {_shown(segments)} of {snapshot.table_path!r}:\n  "
            + "\n  ".join(problems)
        )
    return [_task(snapshot, chosen, max(s.level for s in chosen) + 1)]


def plan_compaction(
    snapshot: Snapshot, kind: CompactionKind, segments: Sequence[str] | None = None
) -> CompactionPlan:
    """The plan for ``kind`` on ``snapshot`` (possibly with no tasks: nothing to do)."""
    if segments and kind != "custom":
        raise InvalidOptionError(
            f"segments can only be named for a custom compaction, not for {kind!r}"
        )
    if kind == "handoff":
        return plan_handoff(snapshot)
    if kind == "minor":
        tasks = _plan_minor(snapshot)
    elif kind == "major":
        tasks = _plan_major(snapshot)
    elif kind == "custom":
        tasks = _plan_custom(snapshot, segments or [])
    else:
        raise InvalidOptionError(
            f"unknown compaction type {kind!r}; use 'minor', 'major', 'custom' or 'handoff'"
        )
    return CompactionPlan(kind, snapshot.version, tuple(tasks))
