"""Change queries: the rows each commit inserted or deleted, with the commit's version and time."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from tests.support.tables import EVENTS, events, rows

CHANGE_NAMES = ["_change_type", "_commit_version", "_commit_timestamp"]


def change_rows(changes: pa.Table) -> list[tuple[str, int, int]]:
    """(change type, version, id) of each change row, in order."""
    return list(
        zip(
            changes.column("_change_type").to_pylist(),
            changes.column("_commit_version").to_pylist(),
            changes.column("id").to_pylist(),
            strict=True,
        )
    )


def test_appends_are_inserts(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS, properties={"blocklet_max_rows": "2"})
    t.append(events(0, 3))
    t.append(events(3, 2))
    t.append(events(5, 1))
    changes = t.changes(0)
    assert changes.schema.names == [*EVENTS.names, *CHANGE_NAMES]
    assert changes.schema.field("_commit_timestamp").type == pa.timestamp("ms", tz="UTC")
    assert change_rows(changes) == [
        ("insert", 1, 0),
        ("insert", 1, 1),
        ("insert", 1, 2),
        ("insert", 2, 3),
        ("insert", 2, 4),
        ("insert", 3, 5),
    ]
    assert rows(changes.select(EVENTS.names)) == rows(events(0, 6))
    times = {r.version: r.timestamp for r in t.history()}
    for version, stamp in zip(
        changes.column("_commit_version").to_pylist(),
        changes.column("_commit_timestamp").to_pylist(),
        strict=True,
    ):
        assert stamp == times[version]


def test_a_range_of_versions(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    for n in range(5):
        t.append(events(10 * n, 2))
    assert change_rows(t.changes(2, 3)) == [
        ("insert", 2, 10),
        ("insert", 2, 11),
        ("insert", 3, 20),
        ("insert", 3, 21),
    ]
    assert change_rows(t.changes(5, 5)) == [("insert", 5, 40), ("insert", 5, 41)]
    assert t.changes(0, 0).num_rows == 0  # creating the table changes no rows
    assert [v for _, v, _ in change_rows(t.changes(4))] == [4, 4, 5, 5]


def test_overwrite_deletes_the_old_rows_and_inserts_the_new(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    t.append(events(0, 2))
    t.append(events(2, 1))
    t.overwrite(events(100, 2))
    changes = t.changes(3)
    assert change_rows(changes) == [
        ("delete", 3, 0),
        ("delete", 3, 1),
        ("delete", 3, 2),
        ("insert", 3, 100),
        ("insert", 3, 101),
    ]
    deleted = changes.filter(pc.field("_change_type") == "delete").select(EVENTS.names)
    assert rows(deleted) == rows(events(0, 3))
    assert change_rows(t.changes(1)) == [
        ("insert", 1, 0),
        ("insert", 1, 1),
        ("insert", 2, 2),
        ("delete", 3, 0),
        ("delete", 3, 1),
        ("delete", 3, 2),
        ("insert", 3, 100),
        ("insert", 3, 101),
    ]


def test_add_columns_contributes_nothing_and_widens_the_rows(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    t.append(events(0, 2))
    t.add_columns(pa.field("extra", pa.string()))
    t.append(events(2, 1).append_column("extra", pa.array(["x"])))
    assert t.changes(2, 2).num_rows == 0
    changes = t.changes(1)
    assert changes.schema.names == [*EVENTS.names, "extra", *CHANGE_NAMES]
    assert change_rows(changes) == [("insert", 1, 0), ("insert", 1, 1), ("insert", 3, 2)]
    assert changes.column("extra").to_pylist() == [None, None, "x"]
    assert t.changes(1, 1).schema.names == [*EVENTS.names, *CHANGE_NAMES]  # as of version 1


def test_commits_without_rows_contribute_nothing(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    t.append(events(0, 1))
    t.append(EVENTS.empty_table(), txn=("app", 1))  # a version with only the batch id
    t.append(events(1, 1))
    assert change_rows(t.changes(1)) == [("insert", 1, 0), ("insert", 3, 1)]


def test_changes_across_a_segment_roll_over(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS, properties={"streaming_segment_max_bytes": "2kb"})
    for n in range(12):
        t.append(events(10 * n, 3))
    assert len(t.segments()) >= 2
    changes = t.changes(1)
    assert set(changes.column("_change_type").to_pylist()) == {"insert"}
    assert rows(changes.select(EVENTS.names)) == rows(t.to_arrow())


def test_invalid_ranges(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    t.append(events(0, 1))
    with pytest.raises(cl.InvalidOptionError, match="start_version <= end_version"):
        t.changes(1, 0)
    with pytest.raises(cl.InvalidOptionError):
        t.changes(-1)
    with pytest.raises(cl.VersionNotFoundError):
        t.changes(0, 5)
