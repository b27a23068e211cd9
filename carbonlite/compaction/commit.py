"""Committing a compaction plan: one version, ``data_change = false``.

The commit adds every output segment (SUCCESS, COLUMNAR) with its files and marks every input
COMPACTED with ``merged_into``. If it loses a race, it commits anyway when each input segment
is still exactly as planned (same status, same files, same committed lengths): appends to the
current STREAMING segment never touch a compaction's inputs, so ingestion goes on. If an input
changed (appended to, overwritten, compacted by someone else), it raises
:class:`CommitConflictError` and nothing of it becomes visible.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from carbonlite._version import ENGINE
from carbonlite.clock import elapsed_ms, now_ms
from carbonlite.compaction.execute import TaskResult
from carbonlite.compaction.plan import CompactionPlan
from carbonlite.errors import CommitConflictError
from carbonlite.metadata import (
    Action,
    CommitInfo,
    Requirement,
    SegmentAbsent,
    SegmentAdded,
    SegmentAsPlanned,
    SegmentStatusChanged,
    SegmentStreaming,
    Snapshot,
)
from carbonlite.storage import Storage

__all__ = ["CompactionCommit", "FinishStreamingCommit"]

_OPERATIONS = {"handoff": "HANDOFF", "minor": "COMPACT", "major": "COMPACT", "custom": "COMPACT"}


@dataclass(frozen=True)
class CompactionCommit:
    plan: CompactionPlan
    results: tuple[TaskResult, ...]
    storage: Storage
    root: str
    parameters: dict[str, str] = field(default_factory=dict)
    started_ms: int | None = None
    """When the round began (the commit records its duration)."""
    writer_id: str | None = None

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        """Every input segment exactly as planned; no output segment id taken."""
        requirements: list[Requirement] = []
        for task in self.plan.tasks:
            requirements.extend(
                SegmentAsPlanned(
                    planned.segment_id,
                    planned.status,
                    {s.file: s.committed_length for s in planned.splits},
                    operation=self.plan.kind,
                    deletions=planned.deletions,
                )
                for planned in task.inputs
            )
            requirements.append(SegmentAbsent(task.output_id))
        return tuple(requirements)

    def _check_outputs_exist(self) -> None:
        for result in self.results:
            for f in result.files:
                path = self.storage.join(self.root, f.file)
                if not self.storage.exists(path) or self.storage.size(path) < f.end:
                    raise CommitConflictError(
                        f"output file {f.file!r} of {self.plan.kind} is missing or short (removed by "
                        "recover while compaction ran?); nothing was committed, run it again"
                    )

    def actions(self, snapshot: Snapshot, read_version: int) -> list[Action]:
        self._check_outputs_exist()
        by_task = {r.task_id: r for r in self.results}
        actions: list[Action] = []
        rows = written = 0
        for task in self.plan.tasks:
            result = by_task[task.task_id]
            actions.append(
                SegmentAdded(
                    segment_id=task.output_id,
                    format="COLUMNAR",
                    status="SUCCESS",
                    level=task.level,
                    sorted_by=task.sort_columns,
                    partition=task.partition,
                    content_hash=task.content_hash,
                )
            )
            actions.extend(result.files)
            actions.extend(
                SegmentStatusChanged(i.segment_id, "COMPACTED", merged_into=task.output_id)
                for i in task.inputs
            )
            rows += result.rows
            written += result.bytes_written
        now = now_ms()
        actions.append(
            CommitInfo(
                operation=_OPERATIONS[self.plan.kind],
                timestamp=now,
                data_change=False,
                read_version=read_version,
                rows_added=rows,
                rows_removed=rows,
                bytes_added=written,
                bytes_removed=sum(t.num_bytes for t in self.plan.tasks),
                parameters={
                    "type": self.plan.kind,
                    "segments": ",".join(self.plan.input_segments),
                    "merged_into": ",".join(t.output_id for t in self.plan.tasks),
                    **self.parameters,
                },
                engine=ENGINE,
                files_added=sum(len(r.files) for r in self.results),
                files_removed=sum(len(i.splits) for t in self.plan.tasks for i in t.inputs),
                duration_ms=elapsed_ms(self.started_ms, now),
                writer_id=self.writer_id,
            )
        )
        return actions


@dataclass(frozen=True)
class FinishStreamingCommit:
    """Close STREAMING segments for appends (writers move on to new ones): the one of an
    unpartitioned table, every partition's in a partitioned one."""

    segment_ids: tuple[str, ...]
    started_ms: int | None = None
    writer_id: str | None = None

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        return tuple(SegmentStreaming(sid) for sid in self.segment_ids)

    def actions(self, snapshot: Snapshot, read_version: int) -> list[Action]:
        now = now_ms()
        return [
            *(SegmentStatusChanged(sid, "STREAMING_FINISH") for sid in self.segment_ids),
            CommitInfo(
                operation="FINISH STREAMING",
                timestamp=now,
                data_change=False,
                read_version=read_version,
                parameters={"segment": ",".join(self.segment_ids)},
                engine=ENGINE,
                files_added=0,
                files_removed=0,
                duration_ms=elapsed_ms(self.started_ms, now),
                writer_id=self.writer_id,
            ),
        ]
