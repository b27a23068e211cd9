"""Where a version a commit just created stands (``History.place``, asked through
``Log.placement``), one case each; the interleavings that reach them are explored in
``test_interleavings.py``, ``test_one_history.py`` and ``test_generated_orders.py``."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

import carbonlite as cl
from carbonlite.metadata.actions import CommitInfo
from carbonlite.metadata.history import History
from carbonlite.metadata.serde import encode_actions
from tests.support.log_model import SCHEMA, rows


def _table(**properties: str) -> cl.Table:
    uri = f"memory://fork-guard/{uuid.uuid4().hex}"
    return cl.create_table(uri, SCHEMA, properties={"checkpoint_interval": "100", **properties})


def _rewrite(table: cl.Table, version: int, **changes: object) -> None:
    """Replace ``version``'s commitInfo fields (an older writer's version, or another chain)."""
    before = table.log.load_version(version - 1)
    actions = table.log.read_actions(version, before)
    info = actions[-1]
    assert isinstance(info, CommitInfo)
    actions[-1] = dataclasses.replace(info, **changes)
    table.storage.delete(table.log.version_path(version))
    assert table.storage.put_if_absent(
        table.log.version_path(version), encode_actions(actions, before.schema)
    )


def _chain(*links: tuple[str, str] | None) -> dict[int, CommitInfo | None]:
    """Commit infos of versions 1, 2, ...: (commit id, parent id), None for a gone one."""
    return {
        v: None
        if link is None
        else CommitInfo("WRITE", 0, True, commit_id=link[0], parent_commit_id=link[1])
        for v, link in enumerate(links, start=1)
    }


def _place(history: History, version: int, commit_id: str, infos: dict, present: set[int]) -> str:
    return history.place(version, commit_id, infos.get, present.__contains__)


def test_at_or_above_the_floor_a_created_version_is_committed_without_the_chain() -> None:
    def no_chain(version: int) -> CommitInfo | None:
        raise AssertionError("the chain was read")

    history = History(floor=3, checkpoint=5)
    assert history.place(3, "c", no_chain, lambda v: True) == "committed"
    assert history.place(7, "c", no_chain, lambda v: True) == "committed"


def test_below_the_floor_the_chain_decides() -> None:
    history = History(floor=3, checkpoint=3)
    infos = _chain(("a", "z"), ("b", "a"), ("c", "b"))
    # built on, up to the floor's version: committed, then cleaned around
    assert _place(history, 1, "a", infos, {1, 2, 3}) == "committed"
    # version 2 was built on another commit than this one: a fork
    assert _place(history, 1, "x", infos, {1, 2, 3}) == "fork"
    # a later version gone while this one is there: clean deletes oldest first, so a fork
    assert _place(history, 1, "a", {**infos, 2: None}, {1, 3}) == "fork"
    # this version itself gone too (clean ran during the commit): unknown
    assert _place(history, 1, "a", {**infos, 2: None}, {3}) == "unknown"
    # a successor written by an earlier release (no parent recorded): unknown
    old = {**infos, 2: CommitInfo("WRITE", 0, True, commit_id="b", parent_commit_id="")}
    assert _place(history, 1, "a", old, {1, 2, 3}) == "unknown"


def test_the_common_case_reads_the_pointer_only() -> None:
    t = _table()
    t.append(rows([1]))
    info = t.log._commit_info(1)
    assert info is not None and t.log.placement(1, info.commit_id) == "committed"


def test_a_version_another_writer_built_on_is_committed_once_the_floor_passed_it() -> None:
    """The order issue 24 found: the floor (clean's) is past the version by the time its
    writer looks, the versions between still there: the chain reaches the floor."""
    t = _table()
    for i in (1, 2, 3):
        t.append(rows([i]))
    t.log.write_checkpoint(t.refresh().snapshot())
    t.log.move_pointer(floor=3)  # what clean does before it deletes anything
    info = t.log._commit_info(1)
    assert info is not None
    assert t.log.placement(1, info.commit_id) == "committed"
    assert t.log.placement(1, "another commit") == "fork"


def test_a_successor_without_a_parent_is_unknown() -> None:
    """A version after it written by an older CarbonLite (no parent recorded) cannot tell."""
    t = _table()
    t.append(rows([1]))
    t.append(rows([2]))
    _rewrite(t, 2, parent_commit_id="")
    t.log.write_checkpoint(t.log.load_version(2))
    t.log.move_pointer(floor=2)
    info = t.log._commit_info(1)
    assert info is not None and t.log.placement(1, info.commit_id) == "unknown"


def test_an_unknown_placement_raises_and_deletes_nothing(monkeypatch) -> None:
    t = _table()
    monkeypatch.setattr(type(t.log), "placement", lambda self, version, commit_id: "unknown")
    with pytest.raises(cl.CommitStateUnknownError, match="version 1") as info:
        t.append(rows([1, 2]))
    assert info.value.version == 1
    monkeypatch.undo()
    fresh = cl.open_table(t.path)
    assert fresh.version == 1 and fresh.to_arrow().num_rows == 2  # it did land
    assert fresh.log._commit_info(1).commit_id == info.value.commit_id


def test_a_storage_error_after_the_put_is_an_unknown_outcome(monkeypatch) -> None:
    """Found by generated seed 4017: a listing that failed while the commit placed the version
    it had just created escaped as an ``OSError``, which tells a user nothing committed; the
    version was there, and in the history."""
    t = _table()

    def failing(self, version: int, commit_id: str) -> str:
        raise OSError("listing failed: connection reset")

    monkeypatch.setattr(type(t.log), "placement", failing)
    with pytest.raises(cl.CommitStateUnknownError, match="reading the log to tell failed") as info:
        t.append(rows([1, 2]))
    assert info.value.version == 1 and isinstance(info.value.__cause__, OSError)
    monkeypatch.undo()
    fresh = cl.open_table(t.path)
    assert fresh.log._commit_info(1).commit_id == info.value.commit_id


def test_a_reader_left_below_the_floor_moves_to_the_newest_checkpoint() -> None:
    """A reader standing on version 2 of a stale writer reads a version 3 built on another
    version 2 (its own was removed by clean and written again): once the floor is past it, it
    moves to the newest checkpoint instead of applying 3 on top of the fork's rows."""
    t = _table()
    t.append(rows([1]))
    cl.open_table(t.path, writer_id="w").append(rows([9]))  # the fork's version 2
    reader = cl.open_table(t.path)
    assert reader.version == 2
    t.storage.delete(t.log.version_path(2))  # cleaned away
    t.append(rows([2]))  # the real version 2 (t still stands on 1)
    t.append(rows([3]))
    t.log.write_checkpoint(t.refresh().snapshot())
    t.log.move_pointer(floor=3)
    assert reader.refresh().version == 3
    assert sorted(reader.to_arrow().column("id").to_pylist()) == [1, 2, 3]


def test_a_version_not_built_on_one_the_history_holds_is_corrupt() -> None:
    """Above the floor every version file is the history's: one whose parent is not the
    version before it was replaced by hand, and reading stops there with a clear error."""
    t = _table()
    t.append(rows([1]))
    reader = cl.open_table(t.path)
    t.append(rows([2]))
    _rewrite(t, 2, parent_commit_id="not version 1")
    with pytest.raises(cl.CorruptDataError, match="was not built on version 1"):
        reader.refresh()


def test_history_stops_at_a_version_the_next_was_not_built_on() -> None:
    t = _table()
    t.append(rows([1]))
    t.append(rows([2]))
    t.append(rows([3]))
    _rewrite(t, 3, parent_commit_id="not version 2")
    t.log.write_checkpoint(t.log.load_version(3))
    assert [r.version for r in cl.open_table(t.path).history()] == [3]


def test_history_stops_at_the_floor() -> None:
    t = _table()
    for i in range(1, 6):
        t.append(rows([i]))
    t.log.write_checkpoint(t.refresh().snapshot())
    t.log.move_pointer(floor=5)  # clean raised the floor, and is about to delete below it
    assert [r.version for r in t.history()] == [5]
    with pytest.raises(cl.VersionNotFoundError, match="no longer in the log"):
        t.to_arrow(version=3)
