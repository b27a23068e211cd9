"""Secondary indexes (``secondary_index_columns``, docs/FILTERS.md "Secondary indexes") prune
blocklets of columnar files and never a matching row.

A differential test against pyarrow's filter of every appended row (ints, strings, floats
with ``-0.0`` and NaN, nulls; ``==``, ``is_in``, ORs, an equality ANDed with a range); then
lookups the indexes must prune (string and DNF filters, bloom filters on the same column:
the index is consulted first, partitions), the bytes an index costs, and index files that
are well formed but do not belong (``verify`` names them). The table's life (handoff,
compaction, schema changes, ``build_index``, damage, ``clean``, ``recover``) is
tests/reader/test_secondary_index_lifecycle.py.

Ids are even and interleaved across tiny blocklets, so min/max cannot prune a lookup and only
the indexes can.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import carbonlite as cl
from carbonlite.format.secondary_index import SecondaryIndex
from tests.support.lookups import (
    BLOCKLET,
    INDEXED_KINDS,
    SCHEMA,
    SETTINGS,
    append_batches,
    appended,
    assert_index_prunes,
    batch,
    comparable_rows,
    damage,
    forget_side_files,
    indexed_blocklets,
    lookups,
    new_ktable,
    plan_of,
    side_files,
    sorted_rows,
)
from tests.support.lookups import INDEX_TABLES as TABLES
from tests.support.lookups import fresh_side_file_cache as fresh_side_file_cache

ROWS, ABSENT, LOOKUPS = TABLES.total, TABLES.absent, TABLES.lookups
rows, new_table, check_lookups = TABLES.rows, TABLES.new_table, TABLES.check_lookups
handed_off = TABLES.handed_off


# --- the differential test -------------------------------------------------------------------


def _differential(tmp_path: Path, kind: str, data: st.DataObject) -> None:
    batches = data.draw(appended(kind), "batches")
    per = data.draw(st.integers(2, 16), "handoff_blocklet_rows")
    streaming_after = data.draw(st.booleans(), "append after handoff")
    bloom_too = data.draw(st.booleans(), "bloom filters of k too")
    properties = {
        "secondary_index_columns": "k",
        "handoff_blocklet_rows": str(per),
        "blocklet_max_rows": "5",
    }
    if bloom_too:
        properties["bloom_filter_columns"] = "k"
    sort = data.draw(st.sampled_from([(), ("other",), ("k",)]), "sort_columns")
    compact = data.draw(st.booleans(), "handoff each batch, then major compaction")
    t = new_ktable(tmp_path, kind, properties, sort_columns=list(sort))
    parts = append_batches(t, kind, batches, handoff_each=compact)
    first = sum(len(values) for values in batches)
    t.finish_streaming()
    t.handoff()
    if compact:
        t.compact("major")
    if streaming_after:
        part = batch(kind, batches[0], first)
        t.append(part)
        parts.append(part)
    model = pa.concat_tables(parts)
    deleted = data.draw(st.lists(st.integers(0, max(0, first - 1)), max_size=8), "deleted rows")
    if deleted:
        t.delete(pc.field("n").isin(deleted))
        model = model.filter(pc.invert(pc.field("n").isin(deleted)))
    assert comparable_rows(t.to_arrow()) == comparable_rows(model)
    assert indexed_blocklets(t) > 0
    stored = model.column("k").to_pylist()
    filters = lookups(kind, stored, absent_far=300, big_isin=200, shuffle=False)
    for _ in range(6):
        expression = data.draw(filters, "filter")
        expected = model.filter(expression)
        assert comparable_rows(t.to_arrow(filter=expression)) == comparable_rows(expected), (
            f"filter {expression}"
        )
        plan = plan_of(t, expression, deletes=bool(deleted))
        assert plan.num_rows >= expected.num_rows
        if not bloom_too:
            assert plan.blocklets_pruned_by_bloom == 0


@SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("kind", INDEXED_KINDS)
def test_pruned_lookups_equal_pyarrow_filter(tmp_path: Path, kind: str, data: Any) -> None:
    _differential(tmp_path, kind, data)


@pytest.mark.slow
@settings(SETTINGS, max_examples=30)
@given(data=st.data())
@pytest.mark.parametrize("kind", INDEXED_KINDS)
def test_pruned_lookups_equal_pyarrow_filter_many(tmp_path: Path, kind: str, data: Any) -> None:
    _differential(tmp_path, kind, data)


# --- pruning that must happen ----------------------------------------------------------------


def test_index_prunes_what_min_max_cannot(tmp_path: Path) -> None:
    t = handed_off(tmp_path)
    model = rows()
    check_lookups(t, model)
    plan = assert_index_prunes(t)
    assert plan.blocklets_total == ROWS // BLOCKLET and plan.blocklets_selected == 0
    assert_index_prunes(t, "name", "user-401")
    # present values: exactly the blocklets holding them are read
    plan = plan_of(t, pc.field("id").isin([400, 402]))
    assert plan.blocklets_selected == 2
    assert plan.blocklets_pruned_by_index == plan.blocklets_total - 2
    # a big is_in of absent values: a bloom filter would let most blocklets through
    plan = plan_of(t, pc.field("id").isin(list(range(1, 801, 2))))
    assert plan.blocklets_selected == 0
    # an OR of lookups of two indexed columns
    plan = plan_of(t, (pc.field("id") == 400) | (pc.field("name") == "user-402"))
    assert plan.blocklets_selected == 2
    # an equality ANDed with a range of another column still prunes
    plan = plan_of(t, (pc.field("id") == ABSENT) & (pc.field("n") >= 3))
    assert plan.blocklets_pruned_by_index + plan.blocklets_pruned_by_stats == plan.blocklets_total
    # an OR with something no index answers prunes nothing by index
    plan = plan_of(t, (pc.field("id") == ABSENT) | (pc.field("n") == 5))
    assert plan.blocklets_pruned_by_index == 0
    # a null in is_in matches null rows: nothing refuted that may hold nulls
    with_null = pc.field("id").isin(pa.array([ABSENT, None], pa.int64()))
    check_lookups(t, model, [with_null])


@pytest.mark.parametrize(
    ("filter", "same"),
    [
        ("id = 401", pc.field("id") == ABSENT),
        ("id IN (400, 402, 3)", pc.field("id").isin([400, 402, 3])),
        ("name = 'user-401' AND n >= 0", (pc.field("name") == "user-401") & (pc.field("n") >= 0)),
        ([("id", "in", [400, 403])], pc.field("id").isin([400, 403])),
        ([("id", "=", 400), ("n", ">=", 0)], (pc.field("id") == 400) & (pc.field("n") >= 0)),
    ],
)
def test_string_and_dnf_filters_prune(tmp_path: Path, filter: Any, same: Any) -> None:
    t = handed_off(tmp_path)
    assert sorted_rows(t.to_arrow(filter=filter)) == sorted_rows(rows().filter(same))
    plan = plan_of(t, filter)
    held = rows().filter(same).num_rows  # blocklets holding a match, at most one a row
    assert plan.blocklets_selected == held
    assert plan.blocklets_pruned_by_index == plan.blocklets_total - held, plan


@pytest.mark.parametrize(
    "filter",
    [
        "id = 401 OR id = 403",
        "id = 401 OR name = 'user-403'",
        [[("id", "=", 401)], [("id", "=", 403)]],
    ],
)
def test_an_or_as_a_string_or_dnf_prunes(tmp_path: Path, filter: Any) -> None:
    t = handed_off(tmp_path)
    assert t.to_arrow(filter=filter).num_rows == 0
    expression = (pc.field("id") == 401) | (pc.field("id") == 403)
    assert plan_of(t, expression).blocklets_pruned_by_index == ROWS // BLOCKLET
    plan = plan_of(t, filter)
    assert plan.blocklets_pruned_by_index == ROWS // BLOCKLET, plan


def test_bloom_and_index_on_the_same_column(tmp_path: Path) -> None:
    """The index is consulted first; bloom filters prune only what it leaves."""
    t = handed_off(tmp_path, bloom_filter_columns="id,name", secondary_index_columns="id")
    model = rows()
    check_lookups(t, model)
    plan = assert_index_prunes(t)
    assert plan.blocklets_pruned_by_bloom == 0
    # id narrows to the one blocklet holding 400; bloom of name (no index) rules it out
    position = model.column("id").to_pylist().index(400)
    names = sorted(model.column("name").to_pylist()[position // BLOCKLET * BLOCKLET :][:BLOCKLET])
    between = names[0] + "5"  # inside that blocklet's min/max, held by no row
    assert names[0] < between < names[-1] and between not in names
    expression = (pc.field("id") == 400) & (pc.field("name") == between)
    plan = plan_of(t, expression)
    assert plan.blocklets_pruned_by_index + plan.blocklets_pruned_by_stats == (
        plan.blocklets_total - 1
    )
    assert plan.blocklets_pruned_by_index > 0
    assert plan.blocklets_pruned_by_bloom == 1 and plan.blocklets_selected == 0
    check_lookups(t, model, [expression])
    # name has only bloom filters: they prune (about 1% false positives), the index does not
    plan = plan_of(t, pc.field("name") == "user-401")
    assert plan.blocklets_pruned_by_index == 0
    assert plan.blocklets_pruned_by_bloom >= 0.8 * plan.blocklets_total


def test_partitioned_table(tmp_path: Path) -> None:
    schema = SCHEMA.append(pa.field("part", pa.string()))
    t = cl.create_table(
        str(tmp_path / "t"),
        schema,
        partition_by=["part"],
        properties={"secondary_index_columns": "id", "handoff_blocklet_rows": str(BLOCKLET)},
    )
    model = rows().append_column("part", pa.array(["a" if i % 2 else "b" for i in range(ROWS)]))
    t.append(model)
    t.finish_streaming()
    t.handoff()
    lookups = [*LOOKUPS, (pc.field("id") == 400) & (pc.field("part") == "a")]
    check_lookups(t, model, lookups)
    assert_index_prunes(t)
    plan = plan_of(t, (pc.field("id") == ABSENT) & (pc.field("part") == "a"))
    assert plan.blocklets_pruned_by_partition > 0
    assert plan.blocklets_pruned_by_partition + plan.blocklets_pruned_by_index == (
        plan.blocklets_total
    )


# --- size ------------------------------------------------------------------------------------


def test_index_bytes_per_distinct_value_and_blocklet(tmp_path: Path) -> None:
    """About 6 bytes per distinct (value, blocklet) pair: a 4-byte key, a 2-byte ordinal."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string())])
    t = cl.create_table(
        str(tmp_path / "t"),
        schema,
        properties={"secondary_index_columns": "id,s", "handoff_blocklet_rows": "2000"},
    )
    n = 20_000
    ids = [(i * 7919) % 5_000 for i in range(n)]  # repeats within and across blocklets
    t.append(pa.table({"id": ids, "s": [f"v{i % 3000}" for i in range(n)]}, schema=schema))
    t.finish_streaming()
    t.handoff()
    ((_, f),) = list(t.snapshot().iter_files())
    offsets = [b.offset for b in f.blocklets]
    assert len(offsets) == n // 2000
    for column, values in (("id", ids), ("s", [f"v{i % 3000}" for i in range(n)])):
        pairs = len({(v, i // 2000) for i, v in enumerate(values)})
        size = f.index_files[f.indexes[column].path]
        assert size == (tmp_path / "t" / f.indexes[column].path).stat().st_size
        assert 4 <= size / pairs <= 8, (column, size, pairs)


# --- well-formed index files that do not belong ----------------------------------------------


def _rewrite_index(path: Path, change: Callable[[SecondaryIndex], SecondaryIndex]) -> None:
    index = SecondaryIndex.decode(path.read_bytes(), where=str(path))
    path.write_bytes(change(index).encode())


def test_verify_names_an_index_that_misses_values(tmp_path: Path) -> None:
    """An index of the logged size and a good checksum whose keys are off by one: the planner
    trusts it (it prunes a present value away), ``verify`` names it."""
    root = tmp_path / "t"
    t = handed_off(tmp_path, secondary_index_columns="id")
    (victim,) = side_files(root, "secondary")

    def shifted(index: SecondaryIndex) -> SecondaryIndex:
        keys = index.keys.copy()
        keys[keys < np.uint32(2**32 - 1)] += np.uint32(1)
        return SecondaryIndex(index.column, index.domain, keys, index.ids, index.blocklets)

    size = (root / victim).stat().st_size
    _rewrite_index(root / victim, shifted)
    assert (root / victim).stat().st_size == size
    result = t.verify()
    assert not result.ok
    assert all(victim in p.file for p in result.problems), result
    assert any("misses values" in p.message and "'id'" in p.message for p in result.problems)


@pytest.mark.parametrize("how", ["longer", "domain"])
def test_verify_names_an_index_the_planner_refuses(tmp_path: Path, how: str) -> None:
    root = tmp_path / "t"
    t = handed_off(tmp_path, secondary_index_columns="id")
    (victim,) = side_files(root, "secondary")

    def change(index: SecondaryIndex) -> SecondaryIndex:
        if how == "domain":
            return SecondaryIndex(index.column, "str", index.keys, index.ids, index.blocklets)
        keys = np.append(index.keys, np.uint32(2**32 - 1))
        ids = np.append(index.ids, np.uint32(0))
        return SecondaryIndex(index.column, index.domain, keys, ids, index.blocklets)

    _rewrite_index(root / victim, change)
    forget_side_files()
    check_lookups(t, rows())
    assert plan_of(t, pc.field("id") == ABSENT).blocklets_pruned_by_index == 0
    result = t.verify()
    assert not result.ok
    assert any(victim in p.file or victim in p.message for p in result.problems), result


def test_warning_about_a_truncated_index_names_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "t"
    t = handed_off(tmp_path, secondary_index_columns="id")
    (victim,) = side_files(root, "secondary")
    damage(root / victim, "truncate", "secondary")
    with caplog.at_level("WARNING"):
        plan_of(t, pc.field("id") == ABSENT)
    messages = [r.getMessage() for r in caplog.records if "secondary index" in r.getMessage()]
    assert messages and all(victim in m for m in messages)
    assert not any("\x00" in m for m in messages), messages


@pytest.mark.slow
def test_a_file_of_more_than_65536_blocklets(tmp_path: Path) -> None:
    """Blocklet ordinals past 65,535 take 4 bytes; every blocklet spans small and large ids,
    so only the index prunes, up to the last blocklet."""
    schema = pa.schema([pa.field("n", pa.int64(), nullable=False), pa.field("id", pa.int64())])
    t = cl.create_table(
        str(tmp_path / "t"),
        schema,
        properties={"secondary_index_columns": "id", "handoff_blocklet_rows": "2"},
    )
    blocklets = 65_600
    ids = [v for b in range(blocklets) for v in (2 * b, 2 * (2 * blocklets - 1 - b))]
    model = pa.table({"n": range(len(ids)), "id": ids}, schema=schema)
    t.append(model)
    t.finish_streaming()
    t.handoff()
    ((_, f),) = list(t.snapshot().iter_files())
    assert f.num_blocklets == blocklets
    data = (tmp_path / "t" / f.indexes["id"].path).read_bytes()
    index = SecondaryIndex.decode(data, where="x")
    assert len(index.blocklets) == blocklets
    assert len(data) == 12 + int.from_bytes(data[8:12], "little") + 8 * len(index.keys) + 4
    last = 2 * (blocklets - 1)  # in the last blocklet (ordinal 65,599)
    lookups = [
        pc.field("id") == last,
        pc.field("id").isin([3, last, 2 * 70_000, 2 * blocklets + 1]),
        pc.field("id") == 2 * blocklets + 1,
    ]
    check_lookups_n = [sorted(t.to_arrow(filter=e)["n"].to_pylist()) for e in lookups]
    assert check_lookups_n == [sorted(model.filter(e)["n"].to_pylist()) for e in lookups]
    plan = plan_of(t, pc.field("id") == last)
    assert plan.blocklets_selected == 1 and plan.blocklets_pruned_by_stats == 0
    assert plan.blocklets_pruned_by_index == blocklets - 1
