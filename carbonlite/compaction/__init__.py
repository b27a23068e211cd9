"""Segment lifecycle: handoff, minor/major/custom compaction, clean, recover, verify.

Handoff and compaction are plan -> execute -> commit: plans are plain data, tasks run
anywhere (threads here, Spark executors via ``carbonlite.spark.compact``), and one log
version with ``data_change = false`` commits the result.
"""

from __future__ import annotations

from carbonlite.compaction.clean import CleanResult
from carbonlite.compaction.execute import TaskResult, execute_task
from carbonlite.compaction.plan import (
    CompactionKind,
    CompactionPlan,
    CompactionTask,
    plan_compaction,
)
from carbonlite.compaction.progress import ProgressCallback
from carbonlite.compaction.recover import RecoverResult
from carbonlite.compaction.run import CompactionResult, TaskExecutor, run_tasks_locally
from carbonlite.compaction.verify import Problem, VerifyResult

__all__ = [
    "CleanResult",
    "CompactionKind",
    "CompactionPlan",
    "CompactionResult",
    "CompactionTask",
    "Problem",
    "ProgressCallback",
    "RecoverResult",
    "TaskExecutor",
    "TaskResult",
    "VerifyResult",
    "execute_task",
    "plan_compaction",
    "run_tasks_locally",
]
