"""Bloom filters survive the table's life: handoff, compaction, deletes, partitions, restore,
schema changes, reopening after a checkpoint; damaged filters fall back to reading and
``verify`` names them; ``clean`` and ``recover`` delete bloom files with their data files
and never a committed one.

Every table stores even ids interleaved across tiny blocklets, so min/max cannot prune a
lookup of an odd id and only the bloom filters can; lookups are checked against pyarrow's
filter of the rows the table should hold.
"""

from __future__ import annotations

import os
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.seams import listening
from tests.support.lookups import (
    BLOCKLET,
    SCHEMA,
    assert_bloom_prunes,
    check_counts,
    damage,
    data_file_of,
    data_files,
    forget_side_files,
    plan_of,
    referenced_side_files,
    reopened_from_checkpoint,
    side_files,
    sorted_rows,
)
from tests.support.lookups import BLOOM_TABLES as TABLES
from tests.support.lookups import fresh_side_file_cache as fresh_side_file_cache

ROWS, ABSENT, LOOKUPS = TABLES.total, TABLES.absent, TABLES.lookups
rows, new_table, check_lookups = TABLES.rows, TABLES.new_table, TABLES.check_lookups


# --- maintenance -----------------------------------------------------------------------------


def test_handoff_and_major_compaction_keep_filters(tmp_path: Path) -> None:
    t = new_table(tmp_path)
    t.append(rows(0, 120))
    t.append(rows(120, 120))
    model = rows()
    check_lookups(t, model)
    assert_bloom_prunes(t)
    streaming_blooms = side_files(tmp_path / "t", "bloom")
    assert streaming_blooms
    t.finish_streaming()
    t.handoff()
    assert {s.format for s in t.segments() if s.status == "SUCCESS"} == {"COLUMNAR"}
    check_lookups(t, model)
    assert_bloom_prunes(t, "name", "user-1")
    assert side_files(tmp_path / "t", "bloom") > streaming_blooms  # the handoff's own
    t.append(rows(240, 40))
    t.finish_streaming()
    t.handoff()
    model = pa.concat_tables([model, rows(240, 40)])
    t.compact("major")
    assert len([s for s in t.segments() if s.status == "SUCCESS"]) == 1
    check_lookups(t, model)
    plan = assert_bloom_prunes(t)
    assert plan.blocklets_total == t.segments()[-1].blocklets or plan.blocklets_total > 0


def test_deleted_rows_never_come_back(tmp_path: Path) -> None:
    t = new_table(tmp_path)
    t.append(rows())
    model = rows()
    gone = pc.field("id").isin([100, 102, 7])
    t.delete(gone)
    model = model.filter(~gone)
    check_lookups(t, model)
    assert t.to_arrow(filter=pc.field("id") == 100).num_rows == 0
    assert t.to_arrow(filter=pc.field("id").isin([100, 104])).column("id").to_pylist() == [104]
    assert_bloom_prunes(t)
    t.finish_streaming()
    t.handoff()
    t.delete(pc.field("name") == "user-104")
    model = model.filter(pc.field("name") != "user-104")
    check_lookups(t, model)
    assert t.to_arrow(filter=pc.field("id").isin([100, 104, 106])).column("id").to_pylist() == [106]
    assert_bloom_prunes(t)


@pytest.mark.parametrize("partition", ["bucket(4, id)", "part"])
def test_partitions_and_bloom_filters_both_prune(tmp_path: Path, partition: str) -> None:
    schema = pa.schema([*SCHEMA, pa.field("part", pa.int32())])
    t = cl.create_table(
        str(tmp_path / "p"),
        schema,
        partition_by=[partition],
        properties={"blocklet_max_rows": str(BLOCKLET), "bloom_filter_columns": "id,name"},
    )
    data = rows().append_column("part", pa.array([i % 3 for i in range(ROWS)], pa.int32()))
    t.append(data)
    check_lookups(t, data)
    if partition == "part":
        expression = (pc.field("part") == 1) & (pc.field("id") == ABSENT)
        plan = t.plan_splits(filter=expression)
        assert t.to_arrow(filter=expression).num_rows == 0
        present = (pc.field("part") == 1) & (pc.field("id") == data.column("id")[1].as_py())
        assert sorted_rows(t.to_arrow(filter=present)) == sorted_rows(data.filter(present))
        assert plan.blocklets_pruned_by_partition > 0, plan
    else:  # a bucket bounds no column (reader/partition_prune.py): only the filters prune
        assert len(t.segments()) == 4
        plan = t.plan_splits(filter=pc.field("id") == ABSENT)
    assert plan.blocklets_pruned_by_bloom > 0, plan
    assert plan.blocklets_bloom_unreadable == 0
    check_counts(plan)
    assert plan.blocklets_pruned_by_index == 0, plan


def test_restore_keeps_filters(tmp_path: Path) -> None:
    t = new_table(tmp_path)
    t.append(rows(0, 120))
    v1 = t.version
    t.append(rows(120, 120))
    t.finish_streaming()
    t.handoff()
    t.delete(pc.field("id") == 100)
    result = t.restore(v1)
    assert result.version == t.version
    model = rows(0, 120)
    check_lookups(t, model)
    assert_bloom_prunes(t)
    assert t.to_arrow(version=v1, filter=pc.field("id") == ABSENT).num_rows == 0


def test_build_index_racing_a_handoff(tmp_path: Path) -> None:
    """A handoff commits while build_index reads: the filters of the retired file are
    discarded (no orphan left), and a second round gives the handoff's output its own."""
    root = tmp_path / "t"
    t = cl.create_table(
        str(root),
        SCHEMA,
        properties={"blocklet_max_rows": str(BLOCKLET), "handoff_blocklet_rows": str(BLOCKLET)},
    )
    t.append(rows())
    other = cl.open_table(str(root))
    raced = []

    def listener(seam: str) -> None:
        if seam == "index.before_commit" and not raced:
            raced.append(seam)
            other.finish_streaming()
            other.handoff()

    with listening(listener):
        built = t.build_index(["id"])
    assert raced
    assert built.version == t.version
    assert built.blocklets == ROWS // BLOCKLET  # those of the handoff's output only
    assert t.properties["bloom_filter_columns"] == "id"
    assert t.build_index().version is None
    # the discarded filters are gone
    assert side_files(root, "bloom") == referenced_side_files(t, "bloom")
    check_lookups(t, rows(), LOOKUPS[:4])
    assert_bloom_prunes(t)


@pytest.mark.parametrize("meanwhile", ["finish_streaming", "handoff"])
def test_relocated_append_keeps_filters(tmp_path: Path, meanwhile: str) -> None:
    """The segment stops taking appends between an append's write and its commit: the
    blocklets move to another file, their filters with them (the left-behind bloom file is an
    orphan recover removes)."""
    root = tmp_path / "t"
    t = new_table(tmp_path)
    t.append(rows(0, 120))
    other = cl.open_table(str(root))
    raced = []

    def listener(seam: str) -> None:
        if seam == "append.after_data" and not raced:
            raced.append(seam)
            other.finish_streaming()
            if meanwhile == "handoff":
                other.handoff()

    with listening(listener):
        t.append(rows(120, 120))
    assert raced
    assert [s.status for s in t.segments()][-1] == "STREAMING"
    check_lookups(t, rows())
    plan = assert_bloom_prunes(t)
    assert plan.blocklets_total == ROWS // BLOCKLET
    assert t.verify().ok
    referenced = referenced_side_files(t, "bloom")
    left_behind = side_files(root, "bloom") - referenced
    assert len(left_behind) == 1
    assert set(t.recover(min_age=0).orphans) == left_behind
    assert side_files(root, "bloom") == referenced
    forget_side_files()
    check_lookups(t, rows())
    assert_bloom_prunes(t)


def test_update_and_overwrite_write_filters_of_new_rows(tmp_path: Path) -> None:
    t = new_table(tmp_path)
    t.append(rows())
    t.update(pc.field("id") == 100, {"id": ABSENT})
    model = rows()
    model = model.set_column(
        1, "id", pc.if_else(pc.equal(model.column("id"), 100), ABSENT, model.column("id"))
    )
    check_lookups(t, model)
    assert t.to_arrow(filter=pc.field("id") == ABSENT).column("name").to_pylist() == ["user-100"]
    assert_bloom_prunes(t, "id", ABSENT + 2)
    t.overwrite(rows(0, 40))
    check_lookups(t, rows(0, 40))
    assert_bloom_prunes(t)
    assert t.build_index().version is None


def _merge(t: cl.Table, new: pa.Table) -> None:
    t.merge(new, ["n"])


def _upsert(t: cl.Table, new: pa.Table) -> None:
    t.append(new)  # a primary-key table: the row of n = 5 is replaced


@pytest.mark.parametrize("write", [_merge, _upsert])
def test_merge_and_upsert_write_filters(tmp_path: Path, write: Any) -> None:
    keyed = write is _upsert
    t = cl.create_table(
        str(tmp_path / "k"),
        SCHEMA,
        primary_key=["n"] if keyed else (),
        properties={"blocklet_max_rows": str(BLOCKLET), "bloom_filter_columns": "id,name"},
    )
    t.append(rows())
    new = pa.table({"n": [5, 9_999], "id": [ABSENT, ABSENT + 2], "name": ["x", "y"]}, schema=SCHEMA)
    write(t, new)
    model = pa.concat_tables([rows().filter(pc.field("n") != 5), new])
    check_lookups(t, model, [*LOOKUPS, pc.field("id").isin([ABSENT + 2, rows()["id"][5].as_py()])])
    assert t.build_index().version is None  # every blocklet has its filters
    assert_bloom_prunes(t, "id", ABSENT + 4)


def test_publish_writes_filters(tmp_path: Path) -> None:
    schema = pa.schema([*SCHEMA, pa.field("part", pa.string())])
    t = cl.create_table(
        str(tmp_path / "pub"),
        schema,
        partition_by=["part"],
        properties={"blocklet_max_rows": str(BLOCKLET), "bloom_filter_columns": "id,name"},
    )
    data = rows().append_column("part", pa.array(["a" if i % 2 else "b" for i in range(ROWS)]))
    t.publish(data)
    changed = data.set_column(
        1, "id", pc.if_else(pc.equal(data.column("id"), 100), ABSENT, data.column("id"))
    )
    result = t.publish(changed)
    assert result.changed and result.unchanged
    check_lookups(t, changed)
    assert t.build_index().version is None
    assert_bloom_prunes(t, "id", ABSENT + 2)
    t.overwrite(changed.filter(pc.field("part") == "a").slice(0, 16), partitions="dynamic")
    model = pa.concat_tables(
        [changed.filter(pc.field("part") == "b"), changed.filter(pc.field("part") == "a")[:16]]
    )
    check_lookups(t, model)
    assert t.build_index().version is None


def test_restore_then_clean(tmp_path: Path) -> None:
    """Restoring a version whose segments were since compacted copies them with their
    filters: clean may then delete the originals."""
    t = new_table(tmp_path)
    t.append(rows(0, 120))
    v1 = t.version
    t.append(rows(120, 120))
    t.finish_streaming()
    t.handoff()
    t.compact("major")
    t.restore(v1)
    t.clean(retention=0, force=True)
    forget_side_files()
    check_lookups(t, rows(0, 120))
    assert_bloom_prunes(t)
    assert t.verify().ok


# --- schema changes --------------------------------------------------------------------------


def test_rename_of_a_bloom_column(tmp_path: Path) -> None:
    t = new_table(tmp_path)
    t.append(rows())
    t.rename_column("id", "user_id")
    assert t.properties["bloom_filter_columns"].split(",") == ["user_id", "name"]
    model = rows().rename_columns(["n", "user_id", "name"])
    check_lookups(
        t,
        model,
        [
            pc.field("user_id") == ABSENT,
            pc.field("user_id").isin([100, 3]),
            (pc.field("user_id") == 100) | (pc.field("name") == "user-2"),
        ],
    )
    assert_bloom_prunes(t, "user_id")
    t.append(rows(ROWS, 40).rename_columns(["n", "user_id", "name"]))
    t.finish_streaming()
    t.handoff()
    model = pa.concat_tables([model, rows(ROWS, 40).rename_columns(["n", "user_id", "name"])])
    check_lookups(t, model, [pc.field("user_id") == 100, pc.field("user_id") == ABSENT])
    assert_bloom_prunes(t, "user_id")
    assert t.build_index().version is None  # every blocklet has its filters


def test_drop_of_a_bloom_column(tmp_path: Path) -> None:
    t = new_table(tmp_path)
    t.append(rows())
    t.drop_columns("name")
    assert t.properties["bloom_filter_columns"] == "id"
    model = rows().drop_columns(["name"])
    check_lookups(t, model, [pc.field("id") == ABSENT, pc.field("id").isin([100, 5])])
    assert_bloom_prunes(t)
    t.drop_columns("id")
    assert t.properties.get("bloom_filter_columns", "") == ""
    t.append(pa.table({"n": [1000]}, schema=t.schema))
    assert t.to_arrow().num_rows == ROWS + 1
    # a new column under a dropped name is a new column: the old filters never answer for it
    t.add_columns(pa.field("id", pa.int64()))
    t.append(pa.table({"n": [1001], "id": [ABSENT]}, schema=t.schema))
    assert t.to_arrow(filter=pc.field("id") == ABSENT).column("n").to_pylist() == [1001]
    assert t.to_arrow(filter=pc.field("id") == 100).num_rows == 0


def test_widen_int32_to_int64_keeps_using_old_filters(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("n", pa.int64(), nullable=False), pa.field("id", pa.int32())])
    t = cl.create_table(
        str(tmp_path / "w"),
        schema,
        properties={"blocklet_max_rows": str(BLOCKLET), "bloom_filter_columns": "id"},
    )
    t.append(rows(schema=schema))
    assert_bloom_prunes(t)
    t.widen_column("id", pa.int64())
    assert t.schema.field("id").type == pa.int64()
    big = 2**40 + 1
    t.append(pa.table({"n": [5000, 5001], "id": [big, 100]}, schema=t.schema))
    added = pa.table({"n": [5000, 5001], "id": [big, 100]}, schema=t.schema)
    model = pa.concat_tables([rows(schema=schema).cast(t.schema), added])
    lookups = [
        pc.field("id") == ABSENT,
        pc.field("id") == 100,
        pc.field("id") == big,
        pc.field("id").isin([big, ABSENT, 2**33]),
    ]
    check_lookups(t, model, lookups)
    plan = assert_bloom_prunes(t)
    assert plan.blocklets_total == ROWS // BLOCKLET + 1


def test_widen_decimal_keeps_filters_and_answers(tmp_path: Path) -> None:
    """decimal128(9, 2) -> decimal128(20, 2): the same hash domain, so old filters serve."""
    schema = pa.schema(
        [pa.field("n", pa.int64(), nullable=False), pa.field("d", pa.decimal128(9, 2))]
    )
    t = cl.create_table(
        str(tmp_path / "wd"),
        schema,
        properties={"blocklet_max_rows": str(BLOCKLET), "bloom_filter_columns": "d"},
    )
    data = pa.table(
        {
            "n": list(range(ROWS)),
            "d": [Decimal(i).scaleb(-2) for i in rows().column("id").to_pylist()],
        },
        schema=schema,
    )
    t.append(data)
    t.widen_column("d", pa.decimal128(20, 2))
    model = data.cast(t.schema)
    lookups = [
        pc.field("d") == Decimal("2.41"),
        pc.field("d") == Decimal("1.00"),
        pc.field("d").isin(pa.array([Decimal("1.00"), Decimal("2.41")], pa.decimal128(20, 2))),
    ]
    check_lookups(t, model, lookups)
    assert_bloom_prunes(t, "d", Decimal("2.41"))


# --- reopening -------------------------------------------------------------------------------


def test_reopen_after_checkpoint(tmp_path: Path) -> None:
    t = new_table(tmp_path, checkpoint_interval="2")
    parts = [rows(k * 60, 60) for k in range(4)]
    for part in parts:
        t.append(part)
    t.finish_streaming()
    t.handoff()
    t.append(rows(240, 20))
    model = pa.concat_tables([*parts, rows(240, 20)])
    assert list((tmp_path / "t" / "_carbonlite" / "log").glob("*.checkpoint.json"))
    again = cl.open_table(str(tmp_path / "t"))
    forget_side_files()
    check_lookups(again, model)
    assert_bloom_prunes(again)
    assert again.properties["bloom_filter_columns"] == "id,name"


# --- damaged filters -------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["flip", "truncate", "delete", "magic", "crc"])
def test_damaged_bloom_file_falls_back_to_reading(tmp_path: Path, how: str) -> None:
    t = new_table(tmp_path)
    t.append(rows())
    model = rows()
    assert_bloom_prunes(t)
    assert t.verify().ok
    (victim,) = side_files(tmp_path / "t", "bloom")
    damage(tmp_path / "t" / victim, how, "bloom")
    forget_side_files()
    check_lookups(t, model)
    plan = plan_of(t, pc.field("id") == ABSENT)
    assert plan.blocklets_bloom_unreadable > 0, plan
    if how in ("flip", "crc"):  # one record: the other blocklets still prune
        assert plan.blocklets_bloom_unreadable == 1
        assert plan.blocklets_pruned_by_bloom > 0
    else:
        assert plan.blocklets_bloom_unreadable == plan.blocklets_total
        assert plan.blocklets_pruned_by_bloom == 0
    result = t.verify()
    assert not result.ok
    assert any(victim in p.file or victim in p.message for p in result.problems), result
    assert all(
        victim in p.file or victim in p.message or "bloom" in p.message for p in result.problems
    )
    # the filters still intact elsewhere keep working: a new write gets a new file
    t.append(rows(ROWS, 16))
    model = pa.concat_tables([model, rows(ROWS, 16)])
    check_lookups(t, model)


# --- clean and recover -----------------------------------------------------------------------


@pytest.mark.parametrize("reopen", [False, True])
def test_clean_deletes_bloom_files_with_their_data_files(tmp_path: Path, reopen: bool) -> None:
    """Also by a handle that loaded the table from a checkpoint (which must list the bloom
    files of retired segments too)."""
    root = tmp_path / "t"
    t = new_table(tmp_path, checkpoint_interval="2")
    t.append(rows(0, 200))
    t.append(rows(200, 40))  # a second bloom file of the same data file
    before_data, before_blooms = data_files(root), side_files(root, "bloom")
    assert len(before_blooms) == 2
    assert before_blooms and all(data_file_of(b) in before_data for b in before_blooms)
    t.finish_streaming()
    t.handoff()
    handoff_blooms = side_files(root, "bloom") - before_blooms
    assert handoff_blooms
    if reopen:
        t = reopened_from_checkpoint(t, root)
    result = t.clean(retention=0, force=True)
    assert result.version is not None
    assert before_blooms <= set(result.files)
    assert side_files(root, "bloom") == handoff_blooms
    assert not data_files(root) & before_data
    for b in side_files(root, "bloom"):
        assert data_file_of(b) in data_files(root)
    check_lookups(t, rows())
    assert_bloom_prunes(t)
    assert t.verify().ok


def test_recover_keeps_committed_bloom_files_and_deletes_orphans(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = new_table(tmp_path)
    t.append(rows())
    t.finish_streaming()
    t.handoff()
    committed = side_files(root, "bloom")
    data_file = sorted(data_files(root))[-1]
    orphan = root / f"{data_file}.00000000deadbeef.bloom"
    orphan.write_bytes(b"CLBLOOM1")
    recent = root / f"{data_file}.00000000cafef00d.bloom"
    recent.write_bytes(b"CLBLOOM1")
    old = time.time() - 7200
    os.utime(orphan, (old, old))
    result = t.recover(min_age=3600)
    assert str(orphan.relative_to(root)) in result.orphans
    assert not orphan.exists()
    assert recent.exists() and str(recent.relative_to(root)) in result.skipped_recent
    assert not any(o.endswith(".bloom") and o in committed for o in result.orphans)
    assert committed <= side_files(root, "bloom")
    result = t.recover(min_age=0)
    assert not recent.exists()
    assert side_files(root, "bloom") == committed
    check_lookups(t, rows())
    assert_bloom_prunes(t)


# --- size ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fpp", "low", "high"), [(None, 1.2, 1.5), ("0.001", 2.0, 2.3)])
def test_bloom_bytes_per_row(tmp_path: Path, fpp: str | None, low: float, high: float) -> None:
    """64k-row blocklets of distinct random ids: about 10.5 bits a value at the default 1%,
    16.9 at 0.1% (docs/PROPERTIES.md)."""
    schema = pa.schema([pa.field("id", pa.int64())])
    root = tmp_path / "big"
    properties = {"blocklet_max_rows": "65536", "bloom_filter_columns": "id"}
    if fpp is not None:
        properties["bloom_filter_fpp"] = fpp
    t = cl.create_table(str(root), schema, properties=properties)
    rng = np.random.default_rng(29)
    n = 2 * 65536
    ids = rng.integers(-(2**62), 2**62, n, dtype=np.int64)
    t.append(pa.table({"id": ids}, schema=schema))
    assert t.plan_splits().blocklets_total == 2
    size = sum(p.stat().st_size for p in root.rglob("*.bloom"))
    assert low <= size / n <= high, size / n
    assert t.to_arrow(filter=pc.field("id") == int(ids[12345])).num_rows == 1


def test_false_positive_rate_of_lookups(tmp_path: Path) -> None:
    """Lookups of absent values read about fpp of the blocklets min/max leaves, not more."""
    schema = pa.schema([pa.field("id", pa.int64())])
    t = cl.create_table(
        str(tmp_path / "fpp"),
        schema,
        properties={"blocklet_max_rows": "256", "bloom_filter_columns": "id"},
    )
    rng = np.random.default_rng(7)
    stored = rng.choice(10**9, 100 * 256, replace=False) * 2  # even, unordered
    t.append(pa.table({"id": stored}, schema=schema))
    read = considered = 0
    for value in rng.choice(10**9, 100, replace=False) * 2 + 1:  # odd: absent
        plan = t.plan_splits(filter=pc.field("id") == int(value))
        considered += plan.blocklets_total - plan.blocklets_pruned_by_stats
        read += plan.blocklets_selected
    assert considered >= 9_000
    assert 0 < read / considered < 0.02, (read, considered)
