"""Plan -> execute -> commit, for handoff and compaction.

Execution is pluggable: :func:`run_tasks_locally` runs tasks in a thread pool; the Spark
integration passes an executor that runs them on Spark executors. The commit is always one
log version on the caller's side.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from carbonlite.clock import now_ms
from carbonlite.compaction.commit import CompactionCommit, FinishStreamingCommit
from carbonlite.compaction.execute import TaskResult, execute_task
from carbonlite.compaction.plan import CompactionKind, CompactionTask, plan_compaction
from carbonlite.compaction.progress import ProgressCallback, ProgressCounter
from carbonlite.errors import CommitConflictError, RowsChangedError
from carbonlite.metadata import Log, Snapshot, commit
from carbonlite.seams import reach
from carbonlite.storage import Storage
from carbonlite.writer.bloom_files import discard_blooms
from carbonlite.writer.lease import Lease
from carbonlite.writer.row_changes import MAX_ROW_CHANGE_ATTEMPTS

__all__ = [
    "CompactionResult",
    "TaskExecutor",
    "finish_streaming",
    "run_compaction",
    "run_tasks_locally",
    "streaming_segments",
]

_logger = logging.getLogger(__name__)

TaskExecutor = Callable[
    [Sequence[CompactionTask], str, pa.Schema, Mapping[str, Any]], list[TaskResult]
]
"""Runs tasks somewhere and returns their results: (tasks, table uri, schema, storage options)."""


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What a handoff or compaction did (all rounds of it).

    A minor compaction may merge again, in a later round, segments it created in an earlier
    one: ``segments_compacted`` and ``segments_created`` list every segment of every round,
    ``rows`` counts each row once (the rows of the segments that were there before it ran),
    and ``bytes_read`` / ``bytes_written`` are what every round read and wrote."""

    kind: str
    versions: tuple[int, ...]
    """The versions committed (one per round; empty when there was nothing to do)."""
    segments_compacted: tuple[str, ...]
    segments_created: tuple[str, ...]
    rows: int
    """Rows compacted: those of the input segments that existed before the run, each once."""
    bytes_read: int
    bytes_written: int
    seconds: float

    @property
    def inputs(self) -> tuple[str, ...]:
        """The segments merged that existed before the run (not those of an earlier round)."""
        created = set(self.segments_created)
        return tuple(s for s in self.segments_compacted if s not in created)

    @property
    def outputs(self) -> tuple[str, ...]:
        """The segments the run left behind (not those a later round merged again)."""
        merged = set(self.segments_compacted)
        return tuple(s for s in self.segments_created if s not in merged)

    @property
    def version(self) -> int | None:
        """The last committed version, or None when nothing was done."""
        return self.versions[-1] if self.versions else None


def run_tasks_locally(
    tasks: Sequence[CompactionTask],
    uri: str,
    schema: pa.Schema,
    storage_options: Mapping[str, Any],
    *,
    on_done: Callable[[TaskResult], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[TaskResult]:
    """Run tasks here, two at a time (each task also decodes and encodes in parallel);
    ``on_done`` is called with each result as its task finishes (from a worker thread), and
    ``progress(n)`` as each task reads and writes (see :func:`execute_task`)."""

    def one(task: CompactionTask) -> TaskResult:
        result = execute_task(task, uri, schema, storage_options, progress=progress)
        if on_done is not None:
            on_done(result)
        return result

    if len(tasks) == 1:
        return [one(tasks[0])]
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="carbonlite-compact") as pool:
        return list(pool.map(one, tasks))


def _discard_outputs(storage: Storage, root: str, results: Sequence[TaskResult]) -> None:
    for result in results:
        for f in result.files:
            try:
                storage.delete(storage.join(root, f.file))
            except OSError as exc:  # recover removes what is left
                _logger.warning("could not remove uncommitted output %s: %s", f.file, exc)
            discard_blooms(storage, root, f.blooms)
            for index in f.indexes:
                with contextlib.suppress(OSError):
                    storage.delete(storage.join(root, index.path))


def run_compaction(
    log: Log,
    snapshot: Snapshot,
    kind: CompactionKind,
    *,
    storage_options: Mapping[str, Any],
    segments: Sequence[str] | None = None,
    executor: TaskExecutor | None = None,
    progress: ProgressCallback | None = None,
    writer_id: str | None = None,
) -> tuple[CompactionResult, Snapshot]:
    """Run ``kind`` to completion: minor compaction repeats while a level fills up (4 level-0
    segments make a level-1 one, which may complete a group of level-1 segments, ...).

    ``progress(done, total)`` counts bytes (``carbonlite/compaction/progress.py``): twice the
    input bytes of each round, once as they are read and once as their rows are written; a
    further round adds to the total. Tasks that run elsewhere (``executor``) report only when
    their round is done. ``writer_id`` is recorded in each commit."""
    started = time.perf_counter()
    counter = ProgressCounter(progress)

    def run_here(
        tasks: Sequence[CompactionTask],
        uri: str,
        schema: pa.Schema,
        storage_options: Mapping[str, Any],
    ) -> list[TaskResult]:
        return run_tasks_locally(tasks, uri, schema, storage_options, progress=counter.advance)

    run: TaskExecutor = executor or run_here
    versions: list[int] = []
    compacted: list[str] = []
    created: list[str] = []
    rows = read = written = 0
    lost_rounds = 0
    while True:
        round_started = now_ms()
        snapshot = log.update(snapshot)
        plan = plan_compaction(snapshot, kind, segments)
        if not plan.tasks:
            break
        counter.add_total(2 * sum(t.num_bytes for t in plan.tasks))
        outputs = [f"segments/{t.output_id}/" for t in plan.tasks]
        reach("compaction.after_plan")
        with Lease(log.storage, log.root, owner=kind, paths=outputs) as lease:
            results = run(plan.tasks, log.uri, snapshot.schema, storage_options)
            reach("compaction.after_execute")
            pending = CompactionCommit(
                plan,
                tuple(results),
                log.storage,
                log.root,
                started_ms=round_started,
                writer_id=writer_id,
            )
            try:
                reach("lease.before_check")
                lease.check()
                snapshot = commit(log, snapshot, pending)
            except CommitConflictError as exc:
                _discard_outputs(log.storage, log.root, results)
                if isinstance(exc, RowsChangedError) and lost_rounds < MAX_ROW_CHANGE_ATTEMPTS:
                    # a delete won the race: the round reads the rows again (never resurrects)
                    lost_rounds += 1
                    continue
                raise
        counter.finish()
        versions.append(snapshot.version)
        earlier = set(created)  # made by an earlier round: their rows are counted already
        rows += sum(i.num_rows for t in plan.tasks for i in t.inputs if i.segment_id not in earlier)
        compacted.extend(plan.input_segments)
        created.extend(t.output_id for t in plan.tasks)
        read += sum(r.bytes_read for r in results)
        written += sum(r.bytes_written for r in results)
        if kind != "minor":
            break
    result = CompactionResult(
        kind=kind,
        versions=tuple(versions),
        segments_compacted=tuple(compacted),
        segments_created=tuple(created),
        rows=rows,
        bytes_read=read,
        bytes_written=written,
        seconds=time.perf_counter() - started,
    )
    return result, snapshot


def streaming_segments(snapshot: Snapshot, more_files_than: int | None = None) -> tuple[str, ...]:
    """The STREAMING segments of ``snapshot`` (only those holding more than
    ``more_files_than`` files, when given)."""
    return tuple(
        s.segment_id
        for s in snapshot.live_segments()
        if s.status == "STREAMING" and (more_files_than is None or len(s.files) > more_files_than)
    )


def finish_streaming(
    log: Log, snapshot: Snapshot, *, writer_id: str | None = None
) -> tuple[str | None, Snapshot]:
    """Close the STREAMING segments (one per partition); (their ids joined by commas, new
    snapshot), or (None, same) if there is none."""
    started = now_ms()
    for _ in range(_FINISH_ATTEMPTS):
        snapshot = log.update(snapshot)
        ids = streaming_segments(snapshot)
        if not ids:
            return None, snapshot
        pending = FinishStreamingCommit(ids, started_ms=started, writer_id=writer_id)
        try:
            return ",".join(ids), commit(log, snapshot, pending)
        except CommitConflictError:
            if len(ids) == 1:  # someone else closed it first (a roll-over): closed either way
                return ids[0], log.update(snapshot)
    raise CommitConflictError(
        f"gave up closing the STREAMING segments of {log.uri!r}: others kept closing some of "
        f"them first ({_FINISH_ATTEMPTS} attempts)"
    )


_FINISH_ATTEMPTS = 10
