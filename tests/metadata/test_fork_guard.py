"""The fork guard's verdicts (``Log.placement``), one case each; the interleavings that reach
them are explored in ``test_interleavings.py``."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

import carbonlite as cl
from carbonlite.metadata.actions import CommitInfo
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


def test_the_common_case_is_committed_without_reading_the_chain() -> None:
    t = _table()
    t.append(rows([1]))
    info = t.log._commit_info(1)
    assert info is not None and t.log.placement(1, info.commit_id) == "committed"


def test_a_version_another_writer_built_on_and_checkpointed_is_committed() -> None:
    t = _table()
    t.append(rows([1]))
    t.append(rows([2]))
    t.log.write_checkpoint(t.refresh().snapshot())  # pointer at 2, past version 1
    info = t.log._commit_info(1)
    assert info is not None
    assert t.log.placement(1, info.commit_id) == "committed"
    assert t.log.placement(1, "another commit") == "fork"


def test_a_checkpoint_of_the_version_itself_decides() -> None:
    t = _table()
    t.append(rows([1]))
    t.log.write_checkpoint(t.refresh().snapshot())  # pointer at 1
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


def test_a_reader_on_a_fork_moves_to_the_checkpoint_of_the_real_log() -> None:
    """A reader standing on a fork (version 2 of a stale writer, since removed) reads a version
    3 built on the real version 2: it moves to the newest checkpoint instead of applying 3 on
    top of the fork's rows."""
    t = _table()
    t.append(rows([1]))
    cl.open_table(t.path, writer_id="w").append(rows([9]))  # the fork's version 2
    reader = cl.open_table(t.path)
    assert reader.version == 2
    t.storage.delete(t.log.version_path(2))  # cleaned away
    t.append(rows([2]))  # the real version 2 (t still stands on 1)
    t.append(rows([3]))
    t.log.write_checkpoint(t.refresh().snapshot())
    assert reader.refresh().version == 3
    assert sorted(reader.to_arrow().column("id").to_pylist()) == [1, 2, 3]


def test_history_stops_at_a_version_the_next_was_not_built_on() -> None:
    t = _table()
    t.append(rows([1]))
    t.append(rows([2]))
    t.append(rows([3]))
    _rewrite(t, 3, parent_commit_id="not version 2")
    t.log.write_checkpoint(t.log.load_version(3))
    assert [r.version for r in cl.open_table(t.path).history()] == [3]
