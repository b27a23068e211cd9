"""One row per key in a primary-key table (issue 25): an update or merge that would leave two
live rows with one key raises DuplicateKeyError and commits nothing, also when the key it
writes is upserted by another writer between its plan and its commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.seams import listening

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])


def rows(ids: list[int], v: int = 0) -> pa.Table:
    return pa.table({"id": ids, "v": [i * 10 + v for i in ids]}, schema=SCHEMA)


def content(path: str) -> dict[int, int]:
    """Live rows by key, as a fresh reader sees them; fails on a key held twice."""
    got = cl.open_table(path).to_arrow().to_pylist()
    keys = [r["id"] for r in got]
    assert len(keys) == len(set(keys)), f"a key is held twice: {sorted(keys)}"
    return {r["id"]: r["v"] for r in got}


@pytest.fixture
def keyed(tmp_path: Path) -> cl.Table:
    t = cl.create_table(
        tmp_path / "pk", SCHEMA, primary_key=["id"], properties={"blocklet_max_rows": "2"}
    )
    t.append(rows([1, 2, 3]))
    return t


def test_the_reported_update_is_refused_and_a_later_upsert_keeps_one_row(
    keyed: cl.Table,
) -> None:
    """Issue 25: update(id == 1, {id: 2}) made two rows of key 2, which a later upsert of 2
    duplicated again."""
    with pytest.raises(cl.DuplicateKeyError, match=r"primary keys \['id'\].*version 1 \(2\)"):
        keyed.update(pc.field("id") == 1, {"id": 2})
    assert keyed.refresh().version == 1
    assert not list(Path(keyed.path).rglob("*.dv"))
    keyed.append(rows([2], v=5))
    assert content(keyed.path) == {1: 10, 2: 25, 3: 30}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda t: t.update(None, {"id": 7}), r"same primary key.*\(7\)"),
        (lambda t: t.update(pc.field("id") <= 2, {"id": pc.field("id") + 1}), r"\(3\)"),
        (lambda t: t.merge(rows([8, 8]), on=["id"]), r"same primary key.*\(8\)"),
        (lambda t: t.merge(pa.table({"v": [10], "id": [3]}), on=["v"]), r"leaves in place"),
        (lambda t: t.merge(pa.table({"v": [99], "id": [1]}), on=["v"]), r"leaves in place"),
    ],
    ids=[
        "all-to-one-key",
        "shift-onto-a-kept-row",
        "merge-inserts-a-key-twice",
        "merge-on-another-column-moves-a-key",
        "merge-on-another-column-inserts-a-key",
    ],
)
def test_changes_that_would_hold_a_key_twice_commit_nothing(
    keyed: cl.Table, change: Any, match: str
) -> None:
    with pytest.raises(cl.DuplicateKeyError, match=match):
        change(keyed)
    assert keyed.refresh().version == 1
    assert content(keyed.path) == {1: 10, 2: 20, 3: 30}
    assert not list(Path(keyed.path).rglob("*.dv"))


def test_changes_that_keep_keys_unique_still_commit(keyed: cl.Table) -> None:
    keyed.update(pc.field("id") == 3, {"id": 4})  # onto a free key
    keyed.update(pc.field("id") == 2, {"id": 3})  # onto the key just freed
    keyed.update(None, {"id": pc.field("id") + 10})  # every key moves at once
    assert content(keyed.path) == {11: 10, 13: 20, 14: 30}
    keyed.merge(pa.table({"v": [10], "id": [1]}), on=["v"])  # a merge moving a key
    keyed.merge(rows([13, 20], v=1), on=["id"])  # updates 13, inserts 20
    assert content(keyed.path) == {1: 10, 13: 131, 14: 30, 20: 201}


def test_a_key_set_to_null_is_refused(keyed: cl.Table, tmp_path: Path) -> None:
    nullable = pa.schema([("id", pa.int64()), ("v", pa.int64())])
    t = cl.create_table(tmp_path / "n", nullable, primary_key=["id"])
    t.append(pa.table({"id": [1], "v": [1]}, schema=nullable))
    with pytest.raises(cl.SchemaMismatchError, match="null primary key 'id'"):
        t.update(None, {"id": None})
    with pytest.raises(cl.SchemaMismatchError, match="non-nullable"):
        keyed.update(None, {"id": None})
    assert t.refresh().version == 1 and keyed.refresh().version == 1


def test_a_key_upserted_between_plan_and_commit_makes_the_update_plan_again_and_fail(
    keyed: cl.Table,
) -> None:
    """The check runs on the snapshot the change planned on; another writer upserting the
    key after that plan makes the commit's requirements fail (``RowsUnchangedSince``, and
    ``DataUnchangedSince`` as the change is exclusive), so the update plans again on the
    newer version, where the key is taken: DuplicateKeyError, nothing committed by it."""
    other = cl.open_table(keyed.path)
    plans: list[int] = []

    def upsert_key_4_after_the_first_plan(seam: str) -> None:
        if seam == "row_change.after_plan":
            plans.append(keyed.version)
            if len(plans) == 1:
                other.append(rows([4], v=7))  # its own plan reaches this seam too: len 2

    with (
        listening(upsert_key_4_after_the_first_plan),
        pytest.raises(cl.DuplicateKeyError, match=r"version 2 \(4\)"),
    ):
        keyed.update(pc.field("id") == 1, {"id": 4})
    assert len(plans) == 2  # the update's plan and the upsert's; the update's second raised
    assert content(keyed.path) == {1: 10, 2: 20, 3: 30, 4: 47}
    assert [h.operation for h in cl.open_table(keyed.path).history()][:2] == ["UPSERT", "UPSERT"]


def test_an_update_committed_first_makes_a_stale_upsert_replace_its_row(
    keyed: cl.Table,
) -> None:
    """The other order: an upsert planned before the update commits plans again after it
    (upserts are exclusive) and replaces the row the update wrote."""
    other = cl.open_table(keyed.path)
    fired: list[str] = []

    def update_first(seam: str) -> None:
        if seam == "row_change.after_plan" and not fired:
            fired.append(seam)
            keyed.update(pc.field("id") == 1, {"id": 4})

    with listening(update_first):
        other.append(rows([4], v=7))
    assert content(keyed.path) == {2: 20, 3: 30, 4: 47}


# --- publishing into a primary-key table --------------------------------------------------------

REGIONS = pa.schema([pa.field("id", pa.int64(), nullable=False), ("r", pa.string())])


def in_region(region: str, *ids: int) -> pa.Table:
    return pa.table({"id": list(ids), "r": [region] * len(ids)}, schema=REGIONS)


@pytest.fixture
def regional(tmp_path: Path) -> cl.Table:
    table = cl.create_table(tmp_path / "pr", REGIONS, primary_key=["id"], partition_by=["r"])
    table.append(pa.concat_tables([in_region("eu", 1, 2), in_region("us", 3)]))
    return table


def placed(table: cl.Table) -> dict[int, str]:
    rows = cl.open_table(table.path).to_arrow().to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), rows
    return {r["id"]: r["r"] for r in rows}


@pytest.mark.parametrize(
    "payload",
    [
        {"us": in_region("us", 3, 1)},  # key 1 stays in eu, which the publish keeps
        {"ap": in_region("ap", 5, 5)},  # one key twice in a partition
        {"ap": in_region("ap", 5), "sa": in_region("sa", 5)},  # one key in two partitions
    ],
    ids=["kept-partition", "twice", "two-partitions"],
)
def test_a_publish_that_would_repeat_a_key_commits_nothing(
    regional: cl.Table, payload: dict[str, pa.Table]
) -> None:
    with pytest.raises(cl.DuplicateKeyError):
        regional.publish(payload)
    assert cl.open_table(regional.path).version == 1
    assert placed(regional) == {1: "eu", 2: "eu", 3: "us"}


def test_a_key_moves_when_its_old_partition_is_published_with_it(regional: cl.Table) -> None:
    result = regional.publish({"us": in_region("us", 3, 1), "eu": in_region("eu", 2)})
    assert result.version == 2
    assert placed(regional) == {1: "us", 2: "eu", 3: "us"}
    # a snapshot publish drops every partition not given: the key may go anywhere
    regional.publish({"ap": in_region("ap", 1, 2, 3)}, mode="snapshot")
    assert placed(regional) == {1: "ap", 2: "ap", 3: "ap"}


def test_a_key_appended_between_plan_and_commit_makes_the_publish_plan_again_and_fail(
    regional: cl.Table,
) -> None:
    """The keys are checked on the version the publish planned on, and a publish commits as
    an overwrite (``DataUnchangedSince``): an append of a clashing key landing before its
    commit makes it plan again, where the key is found."""
    other = cl.open_table(regional.path)
    fired: list[str] = []

    def append_key_9_first(seam: str) -> None:
        if seam == "commit.before_put" and not fired:
            fired.append(seam)
            other.append(in_region("eu", 9))

    with listening(append_key_9_first), pytest.raises(cl.DuplicateKeyError, match=r"\(9\)"):
        regional.publish({"ap": in_region("ap", 9)})
    assert placed(regional) == {1: "eu", 2: "eu", 3: "us", 9: "eu"}
