"""Secondary indexes (``secondary_index_columns``, docs/FILTERS.md "Secondary indexes") prune
blocklets of columnar files and never a matching row.

A differential test against pyarrow's filter of every appended row (ints, strings, floats
with ``-0.0`` and NaN, nulls; ``==``, ``is_in``, ORs, an equality ANDed with a range); then
the table's life: bloom filters on the same column (the index is consulted first), streaming
files (none), major compaction, deletes, rename and drop of the column, reopening after a
checkpoint, ``build_index(kind="secondary")`` of older files, damaged index files, ``clean``,
``recover``, and the bytes an index costs.

Ids are even and interleaved across tiny blocklets, so min/max cannot prune a lookup and only
the indexes can.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import carbonlite as cl
from carbonlite.errors import InvalidOptionError
from carbonlite.format.secondary_index import SecondaryIndex
from carbonlite.reader import bloom_prune
from carbonlite.reader.planner import ScanPlan
from carbonlite.seams import listening

ROWS = 400
BLOCKLET = 8
ABSENT = 401  # odd: never stored, inside every blocklet's bounds


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Index files are cached per process: start every test with an empty cache."""
    monkeypatch.setattr(bloom_prune, "SHARED_CACHE", bloom_prune.BloomFileCache())


def forget_index_files() -> None:
    """Make the next plan read index files again (after they were damaged on disk)."""
    bloom_prune.SHARED_CACHE = bloom_prune.BloomFileCache()


SCHEMA = pa.schema(
    [
        pa.field("n", pa.int64(), nullable=False),
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
    ]
)


def rows(first: int = 0, count: int = ROWS) -> pa.Table:
    n = list(range(first, first + count))
    ids = [2 * ((i * 37) % ROWS) for i in n]
    return pa.table({"n": n, "id": ids, "name": [f"user-{i}" for i in ids]}, schema=SCHEMA)


def new_table(tmp_path: Path, name: str = "t", **properties: str) -> cl.Table:
    props = {
        "blocklet_max_rows": str(BLOCKLET),
        "handoff_blocklet_rows": str(BLOCKLET),
        "secondary_index_columns": "id,name",
        **properties,
    }
    return cl.create_table(str(tmp_path / name), SCHEMA, properties=props)


def handed_off(tmp_path: Path, name: str = "t", **properties: str) -> cl.Table:
    t = new_table(tmp_path, name, **properties)
    t.append(rows(0, 200))
    t.append(rows(200, 200))
    t.finish_streaming()
    t.handoff()
    return t


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.sort_by("n").to_pylist()


LOOKUPS = [
    pc.field("id") == ABSENT,
    pc.field("id") == 100,
    pc.field("id").isin([ABSENT, 3, 5, 100, 102]),
    pc.field("id").isin(list(range(1, 801, 2))),  # 400 absent values
    (pc.field("id") == 7) | (pc.field("id") == 200),
    (pc.field("name") == "user-100") & (pc.field("n") >= 0),
    pc.field("name").isin(["user-1", "user-3", "user-798"]),
    (pc.field("id") == 100) | (pc.field("name") == "user-7"),
]


def check_counts(plan: ScanPlan, *, deletes: bool = False) -> None:
    """partition + stats + index + bloom + selected == total; with deletes, blocklets whose
    rows are all deleted are skipped without a count of their own."""
    counted = (
        plan.blocklets_pruned_by_partition
        + plan.blocklets_pruned_by_stats
        + plan.blocklets_pruned_by_index
        + plan.blocklets_pruned_by_bloom
        + plan.blocklets_selected
    )
    if deletes:
        assert counted <= plan.blocklets_total, plan
    else:
        assert counted == plan.blocklets_total, plan
    assert plan.blocklets_selected + plan.blocklets_pruned == plan.blocklets_total
    assert min(plan.blocklets_pruned_by_index, plan.blocklets_pruned_by_bloom) >= 0


def check_lookups(t: cl.Table, model: pa.Table, lookups: list[Any] = LOOKUPS) -> None:
    for expression in lookups:
        got = t.to_arrow(filter=expression)
        assert sorted_rows(got) == sorted_rows(model.filter(expression)), f"filter {expression}"


def plan_of(t: cl.Table, expression: Any, *, deletes: bool = False) -> ScanPlan:
    plan = t.plan_splits(filter=expression)
    check_counts(plan, deletes=deletes)
    return plan


def assert_index_prunes(t: cl.Table, column: str = "id", value: Any = ABSENT) -> ScanPlan:
    """An absent value inside every blocklet's bounds: every indexed blocklet is pruned by
    its index (a 32-bit key collision aside)."""
    plan = plan_of(t, pc.field(column) == value)
    indexed = indexed_blocklets(t)
    assert indexed > 0
    assert plan.blocklets_pruned_by_stats == 0, plan
    assert plan.blocklets_pruned_by_index == indexed, plan
    return plan


def indexed_blocklets(t: cl.Table) -> int:
    return sum(f.num_blocklets for _, f in t.snapshot().iter_files() if f.indexes)


def sidx_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.sidx")}


def data_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.cblt")}


def referenced_sidx(t: cl.Table) -> set[str]:
    return {
        path
        for seg in t.snapshot().segments.values()
        for f in seg.files.values()
        for path in f.index_files
    }


def live_indexes(t: cl.Table) -> dict[str, set[str]]:
    """Data file -> the columns (physical names) it has an index of."""
    return {f.path: set(f.indexes) for _, f in t.snapshot().iter_files()}


# --- the differential test -------------------------------------------------------------------

VALUE_OF: dict[str, tuple[pa.DataType, Callable[[int], Any]]] = {
    "int64": (pa.int64(), lambda i: i * 1_000_003 - 2**40),
    "string": (pa.string(), lambda i: f"user-{i}"),
    "float64": (pa.float64(), lambda i: i * 0.5 - 3.0),
}
POOL = range(0, 24, 2)
ABSENT_POOL = [*range(1, 24, 2), *range(1_000, 1_300)]


def _pool(kind: str) -> list[Any]:
    out = [VALUE_OF[kind][1](i) for i in POOL]
    return [*out, -0.0, 0.0, math.nan] if kind == "float64" else out


def _kschema(kind: str) -> pa.Schema:
    return pa.schema(
        [
            pa.field("n", pa.int64(), nullable=False),
            pa.field("k", VALUE_OF[kind][0]),
            pa.field("other", pa.int64()),
        ]
    )


def _batch(kind: str, values: list[Any], first: int) -> pa.Table:
    n = list(range(first, first + len(values)))
    data = {"n": n, "k": pa.array(values, VALUE_OF[kind][0]), "other": [i * 7919 % 101 for i in n]}
    return pa.table(data, schema=_kschema(kind))


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    table = table.sort_by("n")
    columns = [table.column(c).to_pylist() for c in ("n", "k", "other")]
    return [
        tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)
        for row in zip(*columns, strict=True)
    ]


@st.composite
def lookups(draw: st.DrawFn, kind: str, stored: list[Any]) -> pc.Expression:
    column_type = VALUE_OF[kind][0]
    present = [v for v in stored if v is not None] or _pool(kind)
    absent = [VALUE_OF[kind][1](i) for i in ABSENT_POOL]
    any_value = st.sampled_from(present) | st.sampled_from(absent)

    def eq(v: Any) -> pc.Expression:
        if draw(st.booleans()):
            return pc.field("k") == pa.scalar(v, column_type)
        return pc.scalar(pa.scalar(v, column_type)) == pc.field("k")

    shape = draw(st.sampled_from(["present", "absent", "isin", "big_isin", "or", "and_range"]))
    if shape == "present":
        return eq(draw(st.sampled_from(present)))
    if shape == "absent":
        return eq(draw(st.sampled_from(absent)))
    if shape in ("isin", "big_isin"):
        size = (0, 6) if shape == "isin" else (50, 200)
        values = draw(st.lists(st.sampled_from(absent), min_size=size[0], max_size=size[1]))
        values += draw(st.lists(st.sampled_from(present), max_size=2))
        if not values:
            values = [absent[0]]
        if draw(st.integers(0, 4)) == 0:
            values.append(None)
        return pc.field("k").isin(pa.array(values, column_type))
    if shape == "or":
        return eq(draw(any_value)) | eq(draw(any_value))
    low = draw(st.integers(0, 100))
    return eq(draw(any_value)) & (pc.field("other") >= low) & (pc.field("n") < 10_000)


SETTINGS = settings(
    max_examples=4,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _differential(tmp_path: Path, kind: str, data: st.DataObject) -> None:
    pool = st.sampled_from(_pool(kind)) | st.none()
    batches = data.draw(
        st.lists(st.lists(pool, min_size=1, max_size=40), min_size=1, max_size=4), "batches"
    )
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
    t = cl.create_table(
        str(tmp_path / f"t-{uuid.uuid4().hex[:12]}"),
        _kschema(kind),
        sort_columns=list(sort),
        properties=properties,
    )
    parts, first = [], 0
    for values in batches:
        part = _batch(kind, values, first)
        first += len(values)
        t.append(part)
        parts.append(part)
        if compact:
            t.finish_streaming()
            t.handoff()
    t.finish_streaming()
    t.handoff()
    if compact:
        t.compact("major")
    if streaming_after:
        part = _batch(kind, batches[0], first)
        t.append(part)
        parts.append(part)
    model = pa.concat_tables(parts)
    deleted = data.draw(st.lists(st.integers(0, max(0, first - 1)), max_size=8), "deleted rows")
    if deleted:
        t.delete(pc.field("n").isin(deleted))
        model = model.filter(pc.invert(pc.field("n").isin(deleted)))
    assert _rows(t.to_arrow()) == _rows(model)
    assert indexed_blocklets(t) > 0
    stored = model.column("k").to_pylist()
    for _ in range(6):
        expression = data.draw(lookups(kind, stored), "filter")
        expected = model.filter(expression)
        assert _rows(t.to_arrow(filter=expression)) == _rows(expected), f"filter {expression}"
        plan = plan_of(t, expression, deletes=bool(deleted))
        assert plan.num_rows >= expected.num_rows
        if not bloom_too:
            assert plan.blocklets_pruned_by_bloom == 0


@SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("kind", sorted(VALUE_OF))
def test_pruned_lookups_equal_pyarrow_filter(tmp_path: Path, kind: str, data: Any) -> None:
    _differential(tmp_path, kind, data)


@pytest.mark.slow
@settings(SETTINGS, max_examples=60)
@given(data=st.data())
@pytest.mark.parametrize("kind", sorted(VALUE_OF))
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


def test_streaming_files_get_no_index(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = new_table(tmp_path)
    t.append(rows(0, 200))
    assert sidx_files(root) == set()
    plan = plan_of(t, pc.field("id") == ABSENT)
    assert plan.blocklets_pruned_by_index == 0
    t.finish_streaming()
    t.handoff()
    t.append(rows(200, 200))  # a new streaming segment
    files = live_indexes(t)
    columnar = [p for p, cols in files.items() if cols]
    assert len(columnar) == 1 and files[columnar[0]] == {"id", "name"}
    assert all(not cols for p, cols in files.items() if p != columnar[0])
    assert {s.split(".cblt.")[0] + ".cblt" for s in sidx_files(root)} == set(columnar)
    plan = plan_of(t, pc.field("id") == ABSENT)
    assert plan.blocklets_pruned_by_index == indexed_blocklets(t) == 25
    assert plan.blocklets_selected == plan.blocklets_total - 25
    check_lookups(t, rows())


def test_major_compaction_output_is_indexed(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = new_table(tmp_path)
    for k in range(2):
        t.append(rows(200 * k, 200))
        t.finish_streaming()
        t.handoff()
    assert len(sidx_files(root)) == 4
    t.compact("major")
    files = live_indexes(t)
    assert files and all(cols == {"id", "name"} for cols in files.values())
    in_force = {ref.path for _, f in t.snapshot().iter_files() for ref in f.indexes.values()}
    assert len(in_force) == 2 * len(files)
    assert in_force <= referenced_sidx(t)
    assert referenced_sidx(t) <= sidx_files(root)
    check_lookups(t, rows())
    assert_index_prunes(t)
    assert t.verify().ok


def test_deleted_rows_never_come_back(tmp_path: Path) -> None:
    t = handed_off(tmp_path)
    t.delete(pc.field("id").isin([100, 102]))
    model = rows().filter(pc.invert(pc.field("id").isin([100, 102])))
    check_lookups(t, model)
    assert t.to_arrow(filter=pc.field("id") == 100).num_rows == 0
    plan = t.plan_splits(filter=pc.field("id") == ABSENT)
    assert plan.blocklets_pruned_by_index == plan.blocklets_total
    t.compact("major")
    check_lookups(t, model)
    assert_index_prunes(t)


def test_update_and_restore(tmp_path: Path) -> None:
    """Rows an update moves out of an indexed file are found where they went; restoring a
    version before a second handoff keeps the first file's index in force."""
    t = handed_off(tmp_path)
    version = t.version
    t.update(pc.field("id") == 100, {"id": 999})
    model = t.to_arrow()
    assert model.filter(pc.field("id") == 999).num_rows == 1
    check_lookups(t, model, [*LOOKUPS, pc.field("id") == 999, pc.field("id").isin([999, 102])])
    t.append(rows(400, 40))
    t.finish_streaming()
    t.handoff()
    t.restore(version)
    forget_index_files()
    check_lookups(t, rows())
    plan_of(t, pc.field("id") == ABSENT)  # counts add up


def test_restore_of_a_changed_file_keeps_its_index(tmp_path: Path) -> None:
    t = handed_off(tmp_path, bloom_filter_columns="name", secondary_index_columns="id")
    version = t.version
    t.delete(pc.field("id") == 100)
    t.restore(version)
    check_lookups(t, rows())
    files = [f for _, f in t.snapshot().iter_files()]
    assert all(len(f.blooms) == f.num_blocklets for f in files)  # the filters came along
    assert all(set(f.indexes) == {"id"} for f in files), [f.path for f in files]
    assert_index_prunes(t)


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


def test_build_index_of_a_column_added_with_a_default(tmp_path: Path) -> None:
    """Files written before the column was added hold none of it: their index must still
    find the default every row reads."""
    t = handed_off(tmp_path, secondary_index_columns="")
    t.add_columns([pa.field("c", pa.int64()), pa.field("e", pa.int64())], defaults={"c": 7})
    t.build_index(["c", "e"], kind="secondary")
    model = t.to_arrow()
    assert model.filter(pc.field("c") == 7).num_rows == ROWS
    lookups = [
        pc.field("c") == 7,
        pc.field("c").isin([7, 8]),
        pc.field("c") == 8,
        pc.field("e").isin(pa.array([None, 1], pa.int64())),
        pc.field("e") == 1,
    ]
    check_lookups(t, model, lookups)
    assert plan_of(t, pc.field("c") == 7).blocklets_selected == ROWS // BLOCKLET
    assert t.verify().ok


def test_rename_of_an_indexed_column(tmp_path: Path) -> None:
    t = handed_off(tmp_path)
    t.rename_column("id", "key")
    assert t.properties["secondary_index_columns"] == "key,name"
    model = rows().rename_columns(["n", "key", "name"])
    lookups = [pc.field("key") == 100, pc.field("key").isin([ABSENT, 102, 5])]
    check_lookups(t, model, lookups)
    assert_index_prunes(t, "key")
    # new files are indexed under the new name too
    t.append(rows(400, 40).rename_columns(["n", "key", "name"]))
    t.finish_streaming()
    t.handoff()
    model = pa.concat_tables([model, rows(400, 40).rename_columns(["n", "key", "name"])])
    check_lookups(t, model, lookups)
    assert_index_prunes(t, "key")
    assert all(len(cols) == 2 for cols in live_indexes(t).values())


def test_drop_of_an_indexed_column(tmp_path: Path) -> None:
    t = handed_off(tmp_path)
    t.drop_columns("id")
    assert t.properties["secondary_index_columns"] == "name"
    model = rows().drop_columns(["id"])
    lookups = [pc.field("name") == "user-100", pc.field("name").isin(["user-1", "user-2"])]
    check_lookups(t, model, lookups)
    assert_index_prunes(t, "name", "user-401")
    t.append(rows(400, 40).drop_columns(["id"]))
    t.finish_streaming()
    t.handoff()
    check_lookups(t, pa.concat_tables([model, rows(400, 40).drop_columns(["id"])]), lookups)
    assert_index_prunes(t, "name", "user-401")


def test_reopen_after_checkpoint(tmp_path: Path) -> None:
    t = handed_off(tmp_path, checkpoint_interval="2")
    t.append(rows(400, 40))
    for k in range(3):
        t.set_properties({"user.note": str(k)})
    assert list((tmp_path / "t" / "_carbonlite" / "log").glob("*.checkpoint.json"))
    model = pa.concat_tables([rows(), rows(400, 40)])
    again = cl.open_table(str(tmp_path / "t"))
    forget_index_files()
    check_lookups(again, model)
    assert_index_prunes(again)
    assert live_indexes(again) == live_indexes(t)
    assert again.properties["secondary_index_columns"] == "id,name"


# --- build_index(kind="secondary") -------------------------------------------------------


def test_build_index_of_files_handed_off_before(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = handed_off(tmp_path, secondary_index_columns="")
    model = rows()
    assert sidx_files(root) == set()
    before = {str(e): t.to_arrow(filter=e) for e in LOOKUPS}
    plan = plan_of(t, pc.field("id") == ABSENT)
    assert plan.blocklets_pruned_by_index == 0
    version = t.version
    result = t.build_index(["id"], kind="secondary")
    assert result.kind == "secondary" and result.columns == ("id",)
    assert result.version == version + 1
    assert result.files == 1 and result.blocklets == ROWS // BLOCKLET
    assert result.bytes_written == sum(p.stat().st_size for p in root.rglob("*.sidx")) > 0
    assert t.properties["secondary_index_columns"] == "id"
    for e in LOOKUPS:
        assert sorted_rows(t.to_arrow(filter=e)) == sorted_rows(before[str(e)])
    check_lookups(t, model)
    assert_index_prunes(t)
    assert t.verify().ok
    # a second call has nothing to do and commits nothing
    again = t.build_index(["id"], kind="secondary")
    assert again.version is None and again.files == 0
    assert t.version == version + 1
    # new files after that are indexed on their own
    t.append(rows(400, 40))
    t.finish_streaming()
    t.handoff()
    assert_index_prunes(t)


def test_build_index_before_any_columnar_file_and_unset(tmp_path: Path) -> None:
    """On a table of streaming files build_index only names the column (later handoffs
    index it); unsetting the property leaves existing indexes pruning and new files
    without."""
    root = tmp_path / "t"
    t = new_table(tmp_path, secondary_index_columns="")
    t.append(rows())
    result = t.build_index(["id"], kind="secondary")
    assert result.version == t.version and result.files == result.blocklets == 0
    assert t.properties["secondary_index_columns"] == "id"
    assert t.build_index(["id"], kind="secondary").version is None
    assert sidx_files(root) == set()
    t.finish_streaming()
    t.handoff()
    assert list(live_indexes(t).values()) == [{"id"}]
    assert_index_prunes(t)
    t.unset_properties(["secondary_index_columns"])
    t.append(rows(400, 40))
    t.finish_streaming()
    t.handoff()
    assert sorted(map(sorted, live_indexes(t).values())) == [[], ["id"]]
    plan = plan_of(t, pc.field("id") == ABSENT)
    assert plan.blocklets_pruned_by_index == ROWS // BLOCKLET
    check_lookups(t, pa.concat_tables([rows(), rows(400, 40)]))


@pytest.mark.parametrize(
    ("columns", "word"),
    [(["nope"], "nope"), (["flag"], "flag"), ([" "], ""), ([""], "")],
)
def test_build_index_refuses_bad_columns(tmp_path: Path, columns: list[str], word: str) -> None:
    schema = SCHEMA.append(pa.field("flag", pa.bool_()))
    t = cl.create_table(
        str(tmp_path / "t"), schema, properties={"handoff_blocklet_rows": str(BLOCKLET)}
    )
    t.append(rows().append_column("flag", pa.array([i % 2 == 0 for i in range(ROWS)])))
    t.finish_streaming()
    t.handoff()
    version, props = t.version, dict(t.properties)
    with pytest.raises(InvalidOptionError) as caught:
        t.build_index(columns, kind="secondary")
    assert word in str(caught.value)
    assert cl.open_table(str(tmp_path / "t")).version == version
    assert t.refresh().properties == props
    assert sidx_files(tmp_path / "t") == set()
    with pytest.raises(InvalidOptionError):
        t.build_index(["id"], kind="bogus")  # type: ignore[arg-type]
    assert cl.open_table(str(tmp_path / "t")).version == version


# --- damaged index files ---------------------------------------------------------------------


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "flip":
        i = len(data) - 10  # inside the ordinals
        path.write_bytes(data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1 :])
    elif how == "truncate":
        path.write_bytes(data[: len(data) - 7])
    elif how == "delete":
        path.unlink()
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
def test_damaged_index_falls_back_to_reading(tmp_path: Path, how: str) -> None:
    root = tmp_path / "t"
    t = handed_off(tmp_path, secondary_index_columns="id")
    model = rows()
    assert_index_prunes(t)
    assert t.verify().ok
    (victim,) = sidx_files(root)
    _damage(root / victim, how)
    forget_index_files()
    check_lookups(t, model)
    plan = plan_of(t, pc.field("id") == ABSENT)
    assert plan.blocklets_pruned_by_index == 0 and plan.blocklets_selected == plan.blocklets_total
    result = t.verify()
    assert not result.ok
    assert any(victim in p.file or victim in p.message for p in result.problems), result
    # a new file gets a new index that prunes
    t.append(rows(400, 40))
    t.finish_streaming()
    t.handoff()
    check_lookups(t, pa.concat_tables([model, rows(400, 40)]))
    plan = plan_of(t, pc.field("id") == ABSENT)
    assert plan.blocklets_pruned_by_index == 5


# --- clean and recover -----------------------------------------------------------------------


@pytest.mark.parametrize("reopen", [False, True])
def test_clean_deletes_index_files_with_their_data_files(tmp_path: Path, reopen: bool) -> None:
    """Also by a handle that loaded the table from a checkpoint (which must list the index
    files of retired segments too)."""
    root = tmp_path / "t"
    t = handed_off(tmp_path, checkpoint_interval="2")
    t.append(rows(400, 40))
    t.finish_streaming()
    t.handoff()
    before = sidx_files(root)
    assert len(before) == 4
    t.compact("major")
    after_compaction = sidx_files(root) - before
    assert len(after_compaction) == 2
    if reopen:
        for k in range(3):
            t.set_properties({"user.note": str(k)})
        assert list((root / "_carbonlite" / "log").glob("*.checkpoint.json"))
        t = cl.open_table(str(root))
    result = t.clean(retention=0, force=True)
    assert before <= set(result.files)
    assert sidx_files(root) == after_compaction == referenced_sidx(t) & sidx_files(root)
    for s in sidx_files(root):
        assert s.split(".cblt.")[0] + ".cblt" in data_files(root)
    check_lookups(t, pa.concat_tables([rows(), rows(400, 40)]))
    assert_index_prunes(t)
    assert t.verify().ok


def test_recover_keeps_committed_index_files_and_deletes_orphans(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = handed_off(tmp_path)
    committed = sidx_files(root)
    assert committed == referenced_sidx(t)
    data_file = next(iter(live_indexes(t)))
    orphan = root / f"{data_file}.00000000deadbeef.id.sidx"
    orphan.write_bytes(b"CLSIDX01")
    recent = root / f"{data_file}.00000000cafef00d.id.sidx"
    recent.write_bytes(b"CLSIDX01")
    old = time.time() - 7200
    os.utime(orphan, (old, old))
    for s in committed:  # committed ones as old: still kept
        os.utime(root / s, (old, old))
    result = t.recover(min_age=3600)
    assert str(orphan.relative_to(root)) in result.orphans
    assert not orphan.exists()
    assert recent.exists() and str(recent.relative_to(root)) in result.skipped_recent
    assert not set(result.orphans) & committed
    t.recover(min_age=0)
    assert not recent.exists()
    assert sidx_files(root) == committed
    forget_index_files()
    check_lookups(t, rows())
    assert_index_prunes(t)
    assert t.verify().ok


class _Crash(Exception):
    pass


@pytest.mark.parametrize("operation", ["handoff", "compact"])
def test_recover_removes_index_files_of_a_crashed_write(tmp_path: Path, operation: str) -> None:
    """A handoff or compaction dies after writing its files, before its commit: the data
    file and its index files are orphans recover removes, together."""
    root = tmp_path / "t"
    t = new_table(tmp_path)
    for k in range(2):
        t.append(rows(200 * k, 200))
        t.finish_streaming()
        if operation == "compact" or k == 0:
            t.handoff()
    before_sidx, before_data = sidx_files(root), data_files(root)
    seam = "compaction.after_execute" if operation == "compact" else "commit.before_put"

    def listener(reached: str) -> None:
        if reached == seam:
            raise _Crash(reached)

    version = t.version
    with listening(listener), pytest.raises(_Crash):
        if operation == "compact":
            t.compact("major")
        else:
            t.handoff()
    assert cl.open_table(str(root)).version == version
    new_sidx, new_data = sidx_files(root) - before_sidx, data_files(root) - before_data
    assert len(new_data) == 1 and len(new_sidx) == 2
    (written,) = new_data
    assert all(s.startswith(written + ".") for s in new_sidx)
    result = t.recover(min_age=0)
    assert set(result.orphans) == new_sidx | new_data
    assert sidx_files(root) == before_sidx and data_files(root) == before_data
    forget_index_files()
    check_lookups(t, rows())
    assert t.verify().ok


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


# --- build_index racing other writers --------------------------------------------------------


@pytest.mark.parametrize("meanwhile", ["compact", "handoff", "delete"])
def test_build_index_racing_another_writer(tmp_path: Path, meanwhile: str) -> None:
    """Another writer commits while build_index reads: indexes of retired files are
    discarded (no orphan left), a second round indexes what the other wrote, and every live
    columnar file ends with an index in force."""
    root = tmp_path / "t"
    t = new_table(tmp_path, secondary_index_columns="")
    for k in range(2):
        t.append(rows(200 * k, 200))
        t.finish_streaming()
        t.handoff()
    t.append(rows(400, 40))
    model = pa.concat_tables([rows(), rows(400, 40)])
    other = cl.open_table(str(root))
    raced = []

    def listener(seam: str) -> None:
        if seam == "index.before_commit" and not raced:
            raced.append(seam)
            if meanwhile == "compact":
                other.compact("major")
            elif meanwhile == "handoff":
                other.finish_streaming()
                other.handoff()
            else:
                other.delete(pc.field("id") == 100)

    with listening(listener):
        built = t.build_index(["id"], kind="secondary")
    assert raced
    if meanwhile == "delete":
        model = model.filter(pc.field("id") != 100)
    t = cl.open_table(str(root))
    assert built.version == t.version
    assert t.properties["secondary_index_columns"] == "id"
    assert t.build_index(kind="secondary").version is None
    columnar = {
        f.path: set(f.indexes) for _, f in t.snapshot().iter_files() if "." in f.path.split("/")[1]
    }
    assert columnar and all(cols == {"id"} for cols in columnar.values()), columnar
    in_force = {ref.path for _, f in t.snapshot().iter_files() for ref in f.indexes.values()}
    assert sidx_files(root) == in_force  # the discarded indexes are gone
    forget_index_files()
    check_lookups(t, model)
    plan = plan_of(t, pc.field("id") == ABSENT)
    assert plan.blocklets_pruned_by_index == indexed_blocklets(t) > 0
    assert t.verify().ok


# --- well-formed index files that do not belong ----------------------------------------------


def _rewrite_index(path: Path, change: Callable[[SecondaryIndex], SecondaryIndex]) -> None:
    index = SecondaryIndex.decode(path.read_bytes(), where=str(path))
    path.write_bytes(change(index).encode())


def test_verify_names_an_index_that_misses_values(tmp_path: Path) -> None:
    """An index of the logged size and a good checksum whose keys are off by one: the planner
    trusts it (it prunes a present value away), ``verify`` names it."""
    root = tmp_path / "t"
    t = handed_off(tmp_path, secondary_index_columns="id")
    (victim,) = sidx_files(root)

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
    (victim,) = sidx_files(root)

    def change(index: SecondaryIndex) -> SecondaryIndex:
        if how == "domain":
            return SecondaryIndex(index.column, "str", index.keys, index.ids, index.blocklets)
        keys = np.append(index.keys, np.uint32(2**32 - 1))
        ids = np.append(index.ids, np.uint32(0))
        return SecondaryIndex(index.column, index.domain, keys, ids, index.blocklets)

    _rewrite_index(root / victim, change)
    forget_index_files()
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
    (victim,) = sidx_files(root)
    _damage(root / victim, "truncate")
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


def test_clean_and_recover_during_build_index_keep_its_files(tmp_path: Path) -> None:
    """Between writing its index files and committing them, build_index holds a lease: a
    clean and a recover (min_age 0) running then leave the files alone."""
    root = tmp_path / "t"
    t = handed_off(tmp_path, secondary_index_columns="")
    other = cl.open_table(str(root))
    seen: list[tuple[set[str], tuple[str, ...], tuple[str, ...]]] = []

    def listener(seam: str) -> None:
        if seam == "index.before_commit" and not seen:
            pending = sidx_files(root)
            cleaned = other.clean(retention=0, force=True).files
            orphans = other.recover(min_age=0).orphans
            seen.append((pending, tuple(cleaned), tuple(orphans)))

    with listening(listener):
        built = t.build_index(["id", "name"], kind="secondary")
    ((pending, cleaned, orphans),) = seen
    assert len(pending) == 2
    assert not pending & (set(cleaned) | set(orphans))
    assert built.version == t.version and built.files == 2
    t = cl.open_table(str(root))
    in_force = {ref.path for _, f in t.snapshot().iter_files() for ref in f.indexes.values()}
    assert in_force == pending == sidx_files(root)
    check_lookups(t, rows())
    assert_index_prunes(t)
    assert t.verify().ok
