"""Mutations of the protocol that the interleaving harness must catch.

Each test breaks one rule of the commit protocol with ``monkeypatch`` (an old fork guard, a
dropped requirement, a skipped check, deletes in the wrong order, a lease ignored) and runs
the scenarios of ``test_interleavings.py``: some schedule must break the model. A harness that
let these through would be a harness that cannot fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from carbonlite.compaction import clean as clean_module
from carbonlite.compaction import recover as recover_module
from carbonlite.metadata import requirements
from carbonlite.metadata.log import Log
from tests.metadata.test_interleavings import (
    check,
    recover_during_append,
    replayed_batch,
    stale_writer_and_clean,
    two_appends,
    two_handoffs,
)
from tests.metadata.test_schema_interleavings import (
    PAUSE_AT,
    append_and_drop,
    append_and_rename,
)
from tests.metadata.test_schema_interleavings import SCENARIOS as SCHEMA_SCENARIOS
from tests.metadata.test_schema_interleavings import check as check_schemas
from tests.support.interleave import ScheduleError, explore_all, explore_random


def _caught(scenario: Callable[..., Any], *, seeds: int = 300, limit: int = 3_000) -> str:
    """The first broken schedule's message; fails the test when none is found."""
    with pytest.raises(ScheduleError) as info:
        explore_random(scenario, check, seeds=range(seeds))
        explore_all(scenario, check, limit=limit)
    return str(info.value)


def test_the_old_fork_guard_is_caught(monkeypatch) -> None:
    """Before issue 24: a checkpoint at or past a new version meant a fork (and the version
    was deleted). Another writer that read the version and checkpointed makes that wrong."""
    real = Log.placement

    def old(self: Log, version: int, commit_id: str) -> str:
        pointer = self.last_checkpoint()
        if pointer is not None and pointer >= version:
            self.storage.delete(self.version_path(version))
            return "fork"
        return real(self, version, commit_id)

    monkeypatch.setattr(Log, "placement", old)
    message = _caught(two_appends)
    assert "not contiguous" in message or "refused" in message


def test_skipping_the_post_write_check_is_caught(monkeypatch) -> None:
    """Every created version taken as committed: a stale writer's fork is acknowledged and its
    rows are lost."""
    monkeypatch.setattr(Log, "placement", lambda self, version, commit_id: "committed")
    message = _caught(stale_writer_and_clean)
    assert "!= model" in message or "two actors acknowledged" in message


def test_dropping_the_transaction_requirement_is_caught(monkeypatch) -> None:
    """Without TxnNotCommitted, a replayed micro-batch commits twice."""

    def nothing(self: Any, snapshot: Any, read_version: int) -> None:
        return None

    monkeypatch.setattr(requirements.TxnNotCommitted, "check", nothing)
    _caught(replayed_batch)


def test_cleaning_the_log_newest_first_is_caught(monkeypatch) -> None:
    """clean must delete old versions oldest first: newest first leaves a hole in front of a
    writer that is catching up."""
    real = clean_module._stale_log_files

    def newest_first(*args: Any, **kwargs: Any) -> Any:
        paths, *rest = real(*args, **kwargs)
        return (sorted(paths, reverse=True), *rest)

    monkeypatch.setattr(clean_module, "_stale_log_files", newest_first)
    _caught(stale_writer_and_clean)


def test_recover_ignoring_leases_is_caught(monkeypatch) -> None:
    """recover must leave alone the files a live lease covers (a handoff's outputs before its
    commit)."""
    real = recover_module.read_leases

    def none(*args: Any, **kwargs: Any) -> Iterator[Any]:
        _, unreadable = real(*args, **kwargs)
        return [], unreadable

    monkeypatch.setattr(recover_module, "read_leases", none)
    _caught(recover_during_append)


def test_dropping_the_compaction_requirements_is_caught(monkeypatch) -> None:
    """Without SegmentAsPlanned and SegmentAbsent, the second of two handoffs of one segment
    gets past the conflict check (replay then refuses its actions: not a clean conflict)."""

    def nothing(self: Any, snapshot: Any, read_version: int) -> None:
        return None

    monkeypatch.setattr(requirements.SegmentAsPlanned, "check", nothing)
    monkeypatch.setattr(requirements.SegmentAbsent, "check", nothing)
    _caught(two_handoffs)


@pytest.mark.parametrize(
    "scenario",
    [append_and_rename, append_and_drop, SCHEMA_SCENARIOS["update_and_drop"]],
    ids=["append_and_rename", "append_and_drop", "update_and_drop"],
)
def test_dropping_the_columns_as_written_requirement_is_caught(
    monkeypatch: pytest.MonkeyPatch, scenario: Callable[..., Any]
) -> None:
    """Without ColumnsAsWritten, an append (or an update) whose rows were written before a
    rename or a drop of one of their columns commits after it, under names the table no
    longer has."""

    def nothing(self: Any, snapshot: Any, read_version: int) -> None:
        return None

    monkeypatch.setattr(requirements.ColumnsAsWritten, "check", nothing)
    with pytest.raises(ScheduleError) as info:
        explore_all(scenario, check_schemas, limit=500, pause_at=PAUSE_AT)
    assert "written before a rename or drop" in str(info.value)


def test_the_pointer_and_predecessor_rule_is_caught(monkeypatch) -> None:
    """Before issue 37: "the pointer is below V and version V-1 exists" meant committed, and
    clean deleted the log without moving the pointer. A pointer left behind by a failed write
    and another stale writer's fork at V-1 make that wrong (issue 37's order): the stale
    writer is told it committed a version no read sees."""
    from tests.metadata.test_one_history import issue_37_order
    from tests.support.log_model import check_table

    real = Log.placement

    def old(self: Log, version: int, commit_id: str) -> str:
        pointer = self.last_checkpoint()
        if (pointer is None or pointer < version) and self.storage.exists(
            self.version_path(version - 1)
        ):
            return "committed"
        return real(self, version, commit_id)

    real_move = Log.move_pointer

    def checkpoint_only(self: Log, *, checkpoint: int | None = None, floor: int | None = None):
        if floor is None:  # clean's move (with a floor) is what the fix added
            real_move(self, checkpoint=checkpoint)

    monkeypatch.setattr(Log, "placement", old)
    monkeypatch.setattr(Log, "move_pointer", checkpoint_only)
    uri, model, _, s2 = issue_37_order(monkeypatch)
    assert s2.acknowledged and s2.version == 8  # told it committed version 8, below the floor
    with pytest.raises(AssertionError, match=r"!= model|two actors acknowledged"):
        check_table(uri, model, cleaned=True)
