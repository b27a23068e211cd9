"""Secondary indexes (``secondary_index_columns``) survive the table's life: streaming files
(none) and handoff, major compaction, deletes, updates, restore, rename and drop of the
column, reopening after a checkpoint, ``build_index(kind="secondary")`` of older files (also
racing other writers, ``clean`` and ``recover``), damaged index files, ``clean`` and
``recover``. Pruning itself, and index files well formed but wrong, are
tests/reader/test_secondary_index.py.

Ids are even and interleaved across tiny blocklets, so min/max cannot prune a lookup and only
the indexes can.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.errors import InvalidOptionError
from carbonlite.seams import listening
from tests.support.lookups import (
    BLOCKLET,
    SCHEMA,
    assert_index_prunes,
    damage,
    data_file_of,
    data_files,
    forget_side_files,
    indexed_blocklets,
    live_indexes,
    plan_of,
    referenced_side_files,
    reopened_from_checkpoint,
    side_files,
    sorted_rows,
)
from tests.support.lookups import INDEX_TABLES as TABLES
from tests.support.lookups import fresh_side_file_cache as fresh_side_file_cache

ROWS, ABSENT, LOOKUPS = TABLES.total, TABLES.absent, TABLES.lookups
rows, new_table, check_lookups = TABLES.rows, TABLES.new_table, TABLES.check_lookups
handed_off = TABLES.handed_off


# --- handoff, compaction, deletes, restore, schema changes, reopening -----------------------


def test_streaming_files_get_no_index(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = new_table(tmp_path)
    t.append(rows(0, 200))
    assert side_files(root, "secondary") == set()
    plan = plan_of(t, pc.field("id") == ABSENT)
    assert plan.blocklets_pruned_by_index == 0
    t.finish_streaming()
    t.handoff()
    t.append(rows(200, 200))  # a new streaming segment
    files = live_indexes(t)
    columnar = [p for p, cols in files.items() if cols]
    assert len(columnar) == 1 and files[columnar[0]] == {"id", "name"}
    assert all(not cols for p, cols in files.items() if p != columnar[0])
    assert {data_file_of(s) for s in side_files(root, "secondary")} == set(columnar)
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
    assert len(side_files(root, "secondary")) == 4
    t.compact("major")
    files = live_indexes(t)
    assert files and all(cols == {"id", "name"} for cols in files.values())
    in_force = {ref.path for _, f in t.snapshot().iter_files() for ref in f.indexes.values()}
    assert len(in_force) == 2 * len(files)
    assert in_force <= referenced_side_files(t, "secondary")
    assert referenced_side_files(t, "secondary") <= side_files(root, "secondary")
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
    forget_side_files()
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
    model = pa.concat_tables([rows(), rows(400, 40)])
    again = reopened_from_checkpoint(t, tmp_path / "t")
    forget_side_files()
    check_lookups(again, model)
    assert_index_prunes(again)
    assert live_indexes(again) == live_indexes(t)
    assert again.properties["secondary_index_columns"] == "id,name"


# --- build_index(kind="secondary") -------------------------------------------------------


def test_build_index_of_files_handed_off_before(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = handed_off(tmp_path, secondary_index_columns="")
    model = rows()
    assert side_files(root, "secondary") == set()
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
    assert side_files(root, "secondary") == set()
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
    assert side_files(tmp_path / "t", "secondary") == set()
    with pytest.raises(InvalidOptionError):
        t.build_index(["id"], kind="bogus")  # type: ignore[arg-type]
    assert cl.open_table(str(tmp_path / "t")).version == version


# --- damaged index files ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
def test_damaged_index_falls_back_to_reading(tmp_path: Path, how: str) -> None:
    root = tmp_path / "t"
    t = handed_off(tmp_path, secondary_index_columns="id")
    model = rows()
    assert_index_prunes(t)
    assert t.verify().ok
    (victim,) = side_files(root, "secondary")
    damage(root / victim, how, "secondary")
    forget_side_files()
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
    before = side_files(root, "secondary")
    assert len(before) == 4
    t.compact("major")
    after_compaction = side_files(root, "secondary") - before
    assert len(after_compaction) == 2
    if reopen:
        t = reopened_from_checkpoint(t, root)
    result = t.clean(retention=0, force=True)
    assert before <= set(result.files)
    assert (
        side_files(root, "secondary")
        == after_compaction
        == referenced_side_files(t, "secondary") & side_files(root, "secondary")
    )
    for s in side_files(root, "secondary"):
        assert data_file_of(s) in data_files(root)
    check_lookups(t, pa.concat_tables([rows(), rows(400, 40)]))
    assert_index_prunes(t)
    assert t.verify().ok


def test_recover_keeps_committed_index_files_and_deletes_orphans(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = handed_off(tmp_path)
    committed = side_files(root, "secondary")
    assert committed == referenced_side_files(t, "secondary")
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
    assert side_files(root, "secondary") == committed
    forget_side_files()
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
    before_sidx, before_data = side_files(root, "secondary"), data_files(root)
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
    new_sidx, new_data = side_files(root, "secondary") - before_sidx, data_files(root) - before_data
    assert len(new_data) == 1 and len(new_sidx) == 2
    (written,) = new_data
    assert all(s.startswith(written + ".") for s in new_sidx)
    result = t.recover(min_age=0)
    assert set(result.orphans) == new_sidx | new_data
    assert side_files(root, "secondary") == before_sidx and data_files(root) == before_data
    forget_side_files()
    check_lookups(t, rows())
    assert t.verify().ok


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
    assert side_files(root, "secondary") == in_force  # the discarded indexes are gone
    forget_side_files()
    check_lookups(t, model)
    plan = plan_of(t, pc.field("id") == ABSENT)
    assert plan.blocklets_pruned_by_index == indexed_blocklets(t) > 0
    assert t.verify().ok


def test_clean_and_recover_during_build_index_keep_its_files(tmp_path: Path) -> None:
    """Between writing its index files and committing them, build_index holds a lease: a
    clean and a recover (min_age 0) running then leave the files alone."""
    root = tmp_path / "t"
    t = handed_off(tmp_path, secondary_index_columns="")
    other = cl.open_table(str(root))
    seen: list[tuple[set[str], tuple[str, ...], tuple[str, ...]]] = []

    def listener(seam: str) -> None:
        if seam == "index.before_commit" and not seen:
            pending = side_files(root, "secondary")
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
    assert in_force == pending == side_files(root, "secondary")
    check_lookups(t, rows())
    assert_index_prunes(t)
    assert t.verify().ok
