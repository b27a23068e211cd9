"""The public commit route of writers that keep their own progress (the Kafka ingester, the
Flight service): rows and compare-and-set markers in one version (``Table.append(markers=)``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids), "v": [f"v{i}" for i in ids]}, schema=SCHEMA)


@pytest.fixture(params=[(), ("id",)], ids=["plain", "primary_key"])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> cl.Table:
    return cl.create_table(tmp_path / "t", SCHEMA, primary_key=list(request.param))


def test_rows_and_markers_commit_in_one_version(table: cl.Table) -> None:
    result = table.append(rows(1, 2), markers={"src:0": (None, 10), "src:1": (None, 3)})
    assert result.version == 1
    assert table.transaction_version("src:0") == 10
    assert table.transaction_version("src:1") == 3
    result = table.append(rows(3), markers={"src:0": (10, 11)})
    assert result.version == 2
    assert table.transaction_version("src:0") == 11
    assert table.transaction_version("src:1") == 3
    assert sorted(table.to_arrow()["id"].to_pylist()) == [1, 2, 3]
    assert table.history(limit=1)[0].version == 2


@pytest.mark.parametrize("read", [None, 9, 11])
def test_a_moved_marker_commits_nothing(table: cl.Table, read: int | None) -> None:
    table.append(rows(1), markers={"src:0": (None, 10)})
    other = cl.open_table(table.path)
    with pytest.raises(cl.TxnMovedError, match="src:0") as caught:
        other.append(rows(2), markers={"src:0": (read, 20)})
    assert isinstance(caught.value, cl.CommitConflictError)
    fresh = cl.open_table(table.path)
    assert fresh.version == 1
    assert fresh.to_arrow()["id"].to_pylist() == [1]
    assert fresh.transaction_version("src:0") == 10


def test_two_writers_of_one_range_commit_it_once(table: cl.Table) -> None:
    """Both read marker 5 and commit the same next range: the second is skipped."""
    table.append(rows(0), markers={"p": (None, 5)})
    a, b = cl.open_table(table.path), cl.open_table(table.path)
    assert a.append(rows(1), markers={"p": (5, 6)}).version == 2
    skipped = b.append(rows(1), markers={"p": (5, 6)})
    assert skipped.skipped and skipped.version is None
    assert sorted(cl.open_table(table.path).to_arrow()["id"].to_pylist()) == [0, 1]


def test_a_range_committed_in_part_commits_nothing(table: cl.Table) -> None:
    """Two markers read at 5; another writer moved only one: neither skipping nor committing
    is right."""
    table.append(rows(0), markers={"p0": (None, 5), "p1": (None, 5)})
    a, b = cl.open_table(table.path), cl.open_table(table.path)
    a.append(rows(1), markers={"p0": (5, 6)})
    with pytest.raises(cl.TxnMovedError, match=r"p1|p0"):
        b.append(rows(1, 2), markers={"p0": (5, 6), "p1": (5, 6)})
    assert cl.open_table(table.path).version == 2


@pytest.mark.parametrize(
    "markers",
    [
        [("p", (None, 1))],
        {"p": 5},
        {"p": (None,)},
        {"p": (None, 1, 2)},
        {"": (None, 1)},
        {1: (None, 1)},
        {"p": (None, -1)},
        {"p": (None, True)},
        {"p": (None, 1.5)},
        {"p": ("0", 1)},
        {"p": (3, 3)},
        {"p": (4, 3)},
        {"p": (None, "7")},
    ],
    ids=repr,
)
def test_bad_markers_are_refused(table: cl.Table, markers: Any) -> None:
    with pytest.raises(cl.InvalidOptionError, match="marker"):
        table.append(rows(1), markers=markers)
    assert cl.open_table(table.path).version == 0
