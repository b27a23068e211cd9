"""A refused commit leaves no state behind that a later commit trusts (issue 37, section 0).

Each test forces one order with the project's seams: another handle acts at the seam
(``append.after_data``) between a writer's data and its commit, in the writer's own thread. The
writer keeps state between its commits (the schema of each stream file it wrote, the key
columns a merge decoded); a commit refused or made stale by the other handle must not leave
any of it for the next commit to trust.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.errors import SchemaMismatchError
from carbonlite.seams import listening

SCHEMA = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("tmp", pa.string())])


def _table() -> cl.Table:
    return cl.create_table(f"memory://refused/{uuid.uuid4().hex}", SCHEMA)


def _once_at(seam: str, act: Callable[[], object]) -> Callable[[str], None]:
    """A listener that runs ``act`` the first time ``seam`` is reached."""
    done: list[bool] = []

    def listener(name: str) -> None:
        if name == seam and not done:
            done.append(True)
            act()

    return listener


def test_a_relocated_append_after_a_refused_one_is_readable() -> None:
    """The order of issue 37: A's first append into a segment is refused (B dropped a column
    meanwhile); A's next append writes the same, still uncommitted, file name with the new
    schema while B finishes the segment, so A's blocklets are moved to a new segment. The moved
    file must carry the schema its blocklets were written with, not the refused append's."""
    b = _table()
    b.append(pa.table({"id": [1], "kind": ["x"], "tmp": ["t"]}, schema=SCHEMA))
    a = cl.open_table(b.path, writer_id="a")
    with (
        listening(_once_at("append.after_data", lambda: b.drop_columns(["tmp"]))),
        pytest.raises(SchemaMismatchError, match="tmp"),
    ):
        a.append(pa.table({"id": [2], "kind": ["y"], "tmp": ["u"]}, schema=SCHEMA))
    with listening(_once_at("append.after_data", b.finish_streaming)):
        result = a.append(pa.table({"id": [3], "kind": ["z"]}))
    assert result.version == 4
    table = cl.open_table(b.path)
    assert sorted(table.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "kind": "x"},
        {"id": 3, "kind": "z"},
    ]
    assert table.verify().ok
    assert table.handoff().versions  # the moved file hands off like any other
    assert table.refresh().to_arrow().num_rows == 2


def test_a_refused_append_then_a_plain_one_reuses_the_file_name_with_its_own_schema() -> None:
    """Without a relocation: the file name the refused append wrote is written again from its
    start by the next append; the table reads it under the new schema."""
    b = _table()
    a = cl.open_table(b.path, writer_id="a")
    with (
        listening(_once_at("append.after_data", lambda: b.drop_columns(["tmp"]))),
        pytest.raises(SchemaMismatchError),
    ):
        a.append(pa.table({"id": [2], "kind": ["y"], "tmp": ["u"]}, schema=SCHEMA))
    a.append(pa.table({"id": [3], "kind": ["z"]}))
    a.append(pa.table({"id": [4], "kind": ["w"]}))  # appends to the file the one before made
    table = cl.open_table(b.path)
    assert table.to_arrow().column("id").to_pylist() == [3, 4]
    assert table.verify().ok


def test_merge_keys_follow_a_rename_and_a_new_column_of_the_old_name() -> None:
    """A merge decodes the key column of each blocklet once and keeps it for later merges of
    the same ``Table``. After ``id`` is renamed to ``uid`` and a new ``id`` is added (default
    7), a merge on ``id`` must match the new column's values, not the kept ones of the old."""
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    t = cl.create_table(f"memory://refused/{uuid.uuid4().hex}", schema)
    t.append(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema))
    assert t.merge(pa.table({"id": [1], "v": ["A"]}), on=["id"]).rows_updated == 1
    t.rename_column("id", "uid")
    t.add_columns(pa.field("id", pa.int64()), defaults={"id": 7})
    result = t.merge(pa.table({"id": [2], "v": ["X"], "uid": [9]}), on=["id"])
    assert (result.rows_updated, result.rows_inserted) == (0, 1)
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["uid"]) == [
        {"uid": 1, "v": "A", "id": 7},
        {"uid": 2, "v": "b", "id": 7},
        {"uid": 9, "v": "X", "id": 2},
    ]


def test_merge_keys_follow_a_rename_and_a_widening_of_the_key() -> None:
    """The kept keys of a renamed, then widened key column are read under the new name and
    type (not refused as another schema, not matched as the old type)."""
    schema = pa.schema([("id", pa.int32()), ("v", pa.string())])
    t = cl.create_table(f"memory://refused/{uuid.uuid4().hex}", schema)
    t.append(pa.table({"id": pa.array([1, 2], pa.int32()), "v": ["a", "b"]}))
    assert t.merge(pa.table({"id": pa.array([1], pa.int32()), "v": ["A"]}), on=["id"])
    t.rename_column("id", "key")
    t.widen_column("key", pa.int64())
    result = t.merge(pa.table({"key": [2, 3], "v": ["B", "C"]}), on=["key"])
    assert (result.rows_updated, result.rows_inserted) == (1, 1)
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["key"]) == [
        {"key": 1, "v": "A"},
        {"key": 2, "v": "B"},
        {"key": 3, "v": "C"},
    ]


def test_an_append_whose_segment_was_retired_and_cleaned_is_relocated() -> None:
    """A's append writes into streaming segment 0; meanwhile B restores the empty table
    (segment 0 is retired) and cleans with retention 0 (segment 0 leaves the state). The
    requirement that A's file still takes appends passed when the segment was gone, and the
    commit named a segment that does not exist (or, relocated, raised a bare KeyError); A's
    blocklets must move to a segment that takes appends."""
    b = _table()
    b.set_properties({"log_retention": "0s"})
    b.append(pa.table({"id": [1], "kind": ["x"], "tmp": ["t"]}, schema=SCHEMA))
    a = cl.open_table(b.path, writer_id="a")

    def retire_and_clean() -> None:
        b.restore(1)  # before the first append: segment 0 is retired
        b.clean(retention=0, force=True)
        assert "0" not in b.refresh().snapshot().segments

    with listening(_once_at("append.after_data", retire_and_clean)):
        result = a.append(pa.table({"id": [2], "kind": ["y"], "tmp": ["u"]}, schema=SCHEMA))
    assert result.version is not None
    table = cl.open_table(b.path)
    assert table.to_arrow(columns=["id"]).column("id").to_pylist() == [2]
    assert table.verify().ok
