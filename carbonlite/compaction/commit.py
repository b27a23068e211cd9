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
from carbonlite.compaction.execute import TaskResult
from carbonlite.compaction.plan import CompactionPlan
from carbonlite.errors import CommitConflictError
from carbonlite.metadata import (
    Action,
    CommitInfo,
    SegmentAdded,
    SegmentStatusChanged,
    Snapshot,
)
from carbonlite.storage import Storage
from carbonlite.writer.append import now_ms

__all__ = ["CompactionCommit", "FinishStreamingCommit"]

_OPERATIONS = {"handoff": "HANDOFF", "minor": "COMPACT", "major": "COMPACT", "custom": "COMPACT"}


@dataclass(frozen=True)
class CompactionCommit:
    plan: CompactionPlan
    results: tuple[TaskResult, ...]
    storage: Storage
    root: str
    parameters: dict[str, str] = field(default_factory=dict)

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        for task in self.plan.tasks:
            for planned in task.inputs:
                seg = snapshot.segments.get(planned.segment_id)
                now = (
                    None
                    if seg is None
                    else (seg.status, {p: f.committed_length for p, f in seg.files.items()})
                )
                then = (planned.status, {s.file: s.committed_length for s in planned.splits})
                if now != then:
                    raise CommitConflictError(
                        f"{self.plan.kind} of {snapshot.table_path!r} planned at version "
                        f"{read_version} lost its input: segment {planned.segment_id!r} changed "
                        f"at version {snapshot.version} (now {seg.status if seg else 'gone'}); "
                        "nothing was committed, run it again",
                        read_version=read_version,
                        conflicting_version=snapshot.version,
                    )
            if task.output_id in snapshot.segments:
                raise CommitConflictError(
                    f"segment {task.output_id!r} of {snapshot.table_path!r} was created at version "
                    f"{snapshot.version} by another compaction (read at version {read_version})",
                    read_version=read_version,
                    conflicting_version=snapshot.version,
                )

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
                )
            )
            actions.extend(result.files)
            actions.extend(
                SegmentStatusChanged(i.segment_id, "COMPACTED", merged_into=task.output_id)
                for i in task.inputs
            )
            rows += result.rows
            written += result.bytes_written
        actions.append(
            CommitInfo(
                operation=_OPERATIONS[self.plan.kind],
                timestamp=now_ms(),
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
            )
        )
        return actions


@dataclass(frozen=True)
class FinishStreamingCommit:
    """Close a STREAMING segment for appends (writers move on to a new one)."""

    segment_id: str

    def check(self, snapshot: Snapshot, read_version: int) -> None:
        seg = snapshot.segments.get(self.segment_id)
        if seg is None or seg.status != "STREAMING":
            raise CommitConflictError(
                f"segment {self.segment_id!r} of {snapshot.table_path!r} stopped streaming at "
                f"version {snapshot.version} (read at version {read_version})",
                read_version=read_version,
                conflicting_version=snapshot.version,
            )

    def actions(self, snapshot: Snapshot, read_version: int) -> list[Action]:
        return [
            SegmentStatusChanged(self.segment_id, "STREAMING_FINISH"),
            CommitInfo(
                operation="FINISH STREAMING",
                timestamp=now_ms(),
                data_change=False,
                read_version=read_version,
                parameters={"segment": self.segment_id},
                engine=ENGINE,
            ),
        ]
