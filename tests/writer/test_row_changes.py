"""Row-level changes through the Table API: delete, update, merge and primary-key upserts,
merge-on-read with deletion vectors, their conflicts, and what maintenance does with them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.metadata import RowsDeleted

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])
SMALL = {"blocklet_max_rows": "4"}


def rows(ids: list[int], *, v: int = 0) -> pa.Table:
    return pa.table(
        {"id": ids, "v": [i * 10 + v for i in ids], "s": [f"s{i}" for i in ids]}, schema=SCHEMA
    )


def ids(t: cl.Table, **kwargs: Any) -> list[int]:
    return sorted(t.to_arrow(**kwargs).column("id").to_pylist())


def dv_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*.dv")}


def race_before_commit(monkeypatch: pytest.MonkeyPatch, first_attempt: Any) -> list[int]:
    """Run ``first_attempt()`` (another writer's commit) once a row change has planned, right
    before it writes its vectors; returns the list of plans made (one entry each)."""
    from carbonlite.writer import row_changes

    real = row_changes.row_changes
    plans: list[int] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        plans.append(1)
        if len(plans) == 1:
            monkeypatch.setattr(row_changes, "row_changes", real)  # the other writer's own
            first_attempt()
            monkeypatch.setattr(row_changes, "row_changes", racing)
        return real(*args, **kwargs)

    monkeypatch.setattr(row_changes, "row_changes", racing)
    return plans


@pytest.fixture
def table(tmp_path: Path) -> cl.Table:
    t = cl.create_table(tmp_path / "t", SCHEMA, properties=SMALL)
    t.append(rows(list(range(10))))
    t.append(rows(list(range(10, 20))))
    return t


def test_delete_by_expression_and_dnf_with_time_travel(table: cl.Table) -> None:
    first = table.delete(pc.field("id") < 3)
    assert (first.version, first.operation, first.rows) == (3, "DELETE", 3)
    assert table.delete([("id", "in", [4, 5, 12]), ("s", "=", "s19")]).version is None  # AND
    second = table.delete([[("id", "in", [4, 5, 12])], [("s", "=", "s19")]])  # OR
    assert second.rows == 4
    assert ids(table) == [i for i in range(3, 19) if i not in (4, 5, 12)]
    assert table.count_rows() == 13
    assert ids(table, version=2) == list(range(20))
    assert ids(table, version=3) == list(range(3, 20))
    assert cl.open_table(table.path).count_rows(version=3) == 17
    nothing = table.delete(pc.field("id") > 100)
    assert (nothing.version, nothing.rows) == (None, 0)
    assert table.version == 4


def test_delete_everything_and_the_scan_skips_fully_deleted_blocklets(table: cl.Table) -> None:
    table.delete(pc.field("id") < 8)  # blocklets of 4 rows: the first two go entirely
    plan = table.plan_splits()
    assert plan.blocklets_selected == plan.blocklets_total - 2
    assert table.delete(None).rows == 12
    assert table.to_arrow().num_rows == 0 and table.count_rows() == 0
    assert table.plan_splits().blocklets_selected == 0


def test_update_with_scalars_and_expressions(table: cl.Table) -> None:
    result = table.update(pc.field("id") >= 15, {"v": pc.field("v") + 1, "s": "new"})
    assert (result.operation, result.rows) == ("UPDATE", 5)
    got = {r["id"]: (r["v"], r["s"]) for r in table.to_arrow().to_pylist()}
    assert got[15] == (151, "new") and got[19] == (191, "new") and got[14] == (140, "s14")
    assert table.count_rows() == 20
    changes = table.changes(result.version).to_pylist()
    kinds = sorted((r["_change_type"], r["id"], r["v"]) for r in changes)
    assert kinds == sorted(
        [("update_preimage", i, i * 10) for i in range(15, 20)]
        + [("update_postimage", i, i * 10 + 1) for i in range(15, 20)]
    )


def test_update_refuses_unknown_columns_and_values_that_do_not_fit(table: cl.Table) -> None:
    with pytest.raises(cl.SchemaMismatchError, match="nope"):
        table.update(pc.field("id") == 1, {"nope": 1})
    with pytest.raises(cl.SchemaMismatchError, match="'not a number' does not fit column 'v'"):
        table.update(pc.field("id") == 1, {"v": "not a number"})
    with pytest.raises(cl.InvalidOptionError, match="set must map"):
        table.update(pc.field("id") == 1, {})
    assert table.version == 2 and not dv_files(Path(table.path))


def test_merge_updates_inserts_and_deletes(table: cl.Table) -> None:
    source = pa.table({"id": [1, 2, 30], "v": [-1, -2, -30]})  # s left out
    result = table.merge(source, on=["id"])
    assert result == cl.MergeResult(3, rows_updated=2, rows_inserted=1, rows_deleted=0)
    got = {r["id"]: (r["v"], r["s"]) for r in table.to_arrow().to_pylist()}
    assert got[1] == (-1, "s1")  # columns the source lacks keep the table's values
    assert got[30] == (-30, None)  # an inserted row gets nulls for them
    assert len(got) == 21
    kinds = sorted((r["_change_type"], r["id"]) for r in table.changes(3).to_pylist())
    assert kinds == [
        ("insert", 30),
        ("update_postimage", 1),
        ("update_postimage", 2),
        ("update_preimage", 1),
        ("update_preimage", 2),
    ]
    dropped = table.merge(
        pa.table({"id": [3, 4, 99]}),
        on="id",
        when_matched="delete",
        when_not_matched="ignore",
    )
    assert (dropped.rows_deleted, dropped.rows_inserted) == (2, 0)
    assert 3 not in ids(table) and 99 not in ids(table)
    kept = table.merge(
        pa.table({"id": [5, 6]}),
        on=["id"],
        when_matched="ignore",
        when_not_matched_by_source="delete",
    )
    assert kept.rows_deleted == 21 - 2 - 2  # every row but 5 and 6
    assert ids(table) == [5, 6]


def test_merge_refuses_a_table_row_matched_twice_and_commits_nothing(table: cl.Table) -> None:
    with pytest.raises(cl.DuplicateKeyError, match="more than one source row"):
        table.merge(pa.table({"id": [1, 1], "v": [0, 1]}), on=["id"])
    assert table.version == 2 and not dv_files(Path(table.path))
    # duplicates that match nothing are inserted as given, and null keys never match
    result = table.merge(pa.table({"id": [50, 50, None], "v": [1, 2, 3]}), on=["id"])
    assert (result.rows_inserted, result.rows_updated) == (3, 0)
    assert table.count_rows() == 23


def test_merge_arguments_are_checked(table: cl.Table) -> None:
    with pytest.raises(cl.InvalidOptionError, match="when_matched"):
        table.merge(rows([1]), on=["id"], when_matched="upsert")  # type: ignore[arg-type]
    with pytest.raises(cl.InvalidOptionError, match="on must name"):
        table.merge(rows([1]), on=[])
    with pytest.raises(cl.SchemaMismatchError, match="extra"):
        table.merge(pa.table({"id": [1], "extra": [1]}), on=["id"])
    with pytest.raises(cl.SchemaMismatchError, match="key columns"):
        table.merge(pa.table({"v": [1]}), on=["id"])
    assert table.merge(SCHEMA.empty_table(), on=["id"]).version is None


def test_a_delete_that_loses_its_rows_to_a_concurrent_delete_plans_again(
    table: cl.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between planning and committing, another writer deletes rows of the same file: the
    first commit fails its requirement, its vectors are discarded, and it plans again."""
    other = cl.open_table(table.path)
    calls = race_before_commit(monkeypatch, lambda: other.delete(pc.field("id") == 0))
    result = table.delete(pc.field("id") < 3)
    assert len(calls) == 2 and result.version == 4 and result.rows == 2
    assert ids(table) == list(range(3, 20))
    live = {ref.path for _s, f in table.snapshot().iter_files() for _o, ref in f.deletion_items()}
    assert dv_files(Path(table.path)) == live | {
        d.dv_file
        for v in range(3, 5)
        for d in table.log.read_actions(v, table.snapshot())
        if isinstance(d, RowsDeleted)
    }


def test_appends_never_conflict_with_a_delete(
    table: cl.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = cl.open_table(table.path)
    calls = race_before_commit(monkeypatch, lambda: other.append(rows([100, 101])))  # same file
    table.delete(pc.field("id") < 3)
    assert len(calls) == 1  # no second plan
    assert ids(table) == [*range(3, 20), 100, 101]


def test_compaction_racing_a_delete_never_resurrects_a_row(table: cl.Table) -> None:
    """A delete commits while a handoff is executing: the handoff's commit sees it and runs
    its round again, so the deleted row stays deleted."""
    from carbonlite.compaction.run import run_tasks_locally

    table.finish_streaming()
    other = cl.open_table(table.path)
    rounds = []

    def executor(tasks: Any, uri: str, schema: pa.Schema, options: Any) -> Any:
        rounds.append(1)
        results = run_tasks_locally(tasks, uri, schema, options)
        if len(rounds) == 1:
            other.delete(pc.field("id") == 7)
        return results

    result = table.handoff(executor=executor)
    assert len(rounds) == 2 and result.rows == 19
    assert ids(table) == [i for i in range(20) if i != 7]
    assert [s.status for s in table.segments()] == ["COMPACTED", "SUCCESS"]


def test_handoff_and_compaction_apply_deletion_vectors(table: cl.Table) -> None:
    table.delete(pc.field("id").isin([1, 2, 17]))
    table.update(pc.field("id") == 5, {"v": 0})
    before = table.to_arrow().sort_by("id")
    table.finish_streaming()
    table.handoff()
    table.append(rows([40, 41]))
    table.finish_streaming()
    table.handoff()
    table.compact("major")
    assert (
        table.to_arrow()
        .sort_by("id")
        .equals(pa.concat_tables([before, rows([40, 41])]).sort_by("id"))
    )
    live = [f for s, f in table.snapshot().iter_files()]
    assert live and not any(f.deletions for f in live)  # the rewritten data carries none
    assert table.verify().ok


def test_clean_deletes_vectors_with_their_files_and_recover_keeps_live_ones(
    table: cl.Table,
) -> None:
    path = Path(table.path)
    table.delete(pc.field("id") < 2)
    table.delete(pc.field("id") == 5)
    stray = path / "segments" / "0" / "stray.cblt.0123456789abcdef.dv"
    stray.write_bytes(b"uncommitted")
    assert len(dv_files(path)) == 3
    recovered = table.recover(min_age=0)
    assert "segments/0/stray.cblt.0123456789abcdef.dv" in recovered.orphans
    assert len(dv_files(path)) == 2 and ids(table) == [i for i in range(2, 20) if i != 5]
    table.finish_streaming()
    table.handoff()
    result = table.clean(retention=0, force=True)
    assert sum(f.endswith(".dv") for f in result.files) == 2
    assert not dv_files(path)
    assert ids(table) == [i for i in range(2, 20) if i != 5]


def test_verify_and_scans_catch_a_damaged_deletion_vector(table: cl.Table) -> None:
    table.delete(pc.field("id") == 3)
    (dv,) = dv_files(Path(table.path))
    target = Path(table.path) / dv
    data = bytearray(target.read_bytes())
    data[-6] ^= 0xFF
    target.write_bytes(bytes(data))
    problems = table.verify().problems
    assert len(problems) == 1 and problems[0].file == dv and "checksum" in problems[0].message
    with pytest.raises(cl.CorruptDataError, match="deletion vector"):
        table.to_arrow()
    assert ids(table, version=2) == list(range(20))  # versions before it still read


def test_restore_keeps_the_rows_deleted_at_that_version(table: cl.Table) -> None:
    table.delete(pc.field("id").isin([1, 6]))  # 3
    want = ids(table)
    table.delete(pc.field("id") > 10)
    table.finish_streaming()
    table.handoff()
    assert table.restore(3).version is not None
    assert ids(table) == want and table.count_rows() == len(want)
    assert table.verify().ok


def test_the_first_row_change_raises_a_format_3_table_to_format_4(tmp_path: Path) -> None:
    path = tmp_path / "v3"
    shutil.copytree(Path(__file__).parents[1] / "data" / "golden_v3", path)
    t = cl.open_table(path)
    assert t.snapshot().metadata.format_version == 3
    before = t.count_rows()
    result = t.delete(pc.field("id") == 104)
    assert result.rows == 1 and t.count_rows() == before - 1
    assert cl.open_table(path).snapshot().metadata.format_version == 4


# --- primary-key tables ------------------------------------------------------------------------


@pytest.fixture
def keyed(tmp_path: Path) -> cl.Table:
    return cl.create_table(tmp_path / "pk", SCHEMA, primary_key=["id"], properties=SMALL)


def test_appends_to_a_primary_key_table_upsert(keyed: cl.Table) -> None:
    first = keyed.append(pa.table({"id": [1, 2, 3, 1], "v": [1, 2, 3, 4], "s": [None] * 4}))
    assert (first.operation, first.rows) == ("UPSERT", 3)
    keyed.append(pa.table({"id": [2, 4], "v": [20, 40], "s": ["b", "d"]}))
    got = {r["id"]: (r["v"], r["s"]) for r in keyed.to_arrow().to_pylist()}
    assert got == {1: (4, None), 2: (20, "b"), 3: (3, None), 4: (40, "d")}
    kinds = sorted((r["_change_type"], r["id"]) for r in keyed.changes(2).to_pylist())
    assert kinds == [("insert", 4), ("update_postimage", 2), ("update_preimage", 2)]
    assert cl.open_table(keyed.path).primary_key == ("id",)


def test_primary_key_upserts_are_exactly_once_and_refuse_null_keys(keyed: cl.Table) -> None:
    assert keyed.append(rows([1]), txn=("app", 1)).version == 1
    assert keyed.append(rows([1], v=5), txn=("app", 1)).skipped
    with pytest.raises(cl.SchemaMismatchError, match="nulls"):
        keyed.append(pa.table({"id": [None, 2], "v": [1, 2], "s": ["a", "b"]}))
    with pytest.raises(cl.InvalidOptionError, match="add_columns"):
        keyed.append(rows([3]), schema_mode="merge")
    assert keyed.to_arrow().to_pylist() == rows([1]).to_pylist()
    assert not [p for p in Path(keyed.path).rglob("*.dv")]


def test_stale_writers_of_a_primary_key_table_never_make_two_rows_of_a_key(
    keyed: cl.Table,
) -> None:
    other = cl.open_table(keyed.path)  # loaded before any row exists
    keyed.append(rows([1, 2]))
    other.append(rows([2, 3], v=7))  # plans on its stale state first, then sees keyed's commit
    got = {r["id"]: r["v"] for r in cl.open_table(keyed.path).to_arrow().to_pylist()}
    assert got == {1: 10, 2: 27, 3: 37}


def test_overwrite_and_delete_on_a_primary_key_table(keyed: cl.Table) -> None:
    keyed.append(rows([1, 2]))
    keyed.overwrite(pa.table({"id": [7, 7, 8], "v": [1, 2, 3], "s": ["a", "b", "c"]}))
    assert sorted(keyed.to_arrow().select(["id", "v"]).to_pylist(), key=str) == [
        {"id": 7, "v": 2},
        {"id": 8, "v": 3},
    ]
    assert keyed.delete(pc.field("id") == 7).rows == 1
    keyed.append(rows([7]))
    assert ids(keyed) == [7, 8]


def test_invalid_primary_keys_are_refused(tmp_path: Path) -> None:
    with pytest.raises(cl.InvalidOptionError, match="'nope' is not in the schema"):
        cl.create_table(tmp_path / "a", SCHEMA, primary_key=["nope"])
    with pytest.raises(cl.InvalidOptionError, match="repeats"):
        cl.create_table(tmp_path / "b", SCHEMA, primary_key=["id", "id"])
    assert not (tmp_path / "a").exists()


def test_a_merge_source_read_once_is_planned_again_after_a_lost_race(
    table: cl.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-shot source (a RecordBatchReader) still has its rows when the merge plans again."""
    other = cl.open_table(table.path)
    calls = race_before_commit(monkeypatch, lambda: other.delete(pc.field("id") == 1))
    source = pa.RecordBatchReader.from_batches(SCHEMA, rows([2, 3, 40], v=1).to_batches())
    result = table.merge(source, on=["id"])
    assert len(calls) == 2 and (result.rows_updated, result.rows_inserted) == (2, 1)
    got = {r["id"]: r["v"] for r in table.to_arrow().to_pylist()}
    assert 1 not in got and got[2] == 21 and got[3] == 31 and got[40] == 401


def test_upserts_with_cached_keys_see_deletes_handoffs_and_other_writers(
    keyed: cl.Table,
) -> None:
    """The Table's key cache holds decoded keys of committed blocklets only; deletions come
    from the snapshot at every use, and files another writer or a handoff made are read."""
    keyed.append(rows([1, 2, 3]))
    keyed.append(rows([3, 4], v=1))  # reads (and caches) the keys of the first blocklet
    other = cl.open_table(keyed.path)
    other.delete(pc.field("id") == 1)
    other.append(rows([5]))
    keyed.append(rows([1, 5], v=2))  # 1 was deleted: inserted again; 5 is other's: updated
    got = {r["id"]: r["v"] for r in cl.open_table(keyed.path).to_arrow().to_pylist()}
    assert got == {1: 12, 2: 20, 3: 31, 4: 41, 5: 52}
    keyed.finish_streaming()
    keyed.handoff()
    keyed.append(rows([2, 6], v=3))
    got = {r["id"]: r["v"] for r in cl.open_table(keyed.path).to_arrow().to_pylist()}
    assert got == {1: 12, 2: 23, 3: 31, 4: 41, 5: 52, 6: 63}
    assert keyed._key_cache.nbytes > 0  # it was used


def test_row_changes_on_local_disk_and_s3(place: Any) -> None:
    """Deletion-vector files are written with put-if-absent and read by byte range: the same
    operations give the same rows on an object store, and clean removes the vectors."""
    t = cl.create_table(
        place.uri("rows"),
        SCHEMA,
        primary_key=["id"],
        properties=SMALL,
        storage_options=place.storage_options,
    )
    t.append(rows(list(range(10))))
    t.append(rows([1, 2, 11], v=1))
    t.delete(pc.field("id") > 8)
    t.update(pc.field("id") == 0, {"v": -1})
    want = {0: -1, **{i: i * 10 for i in range(3, 9)}, 1: 11, 2: 21}
    fresh = cl.open_table(place.uri("rows"), storage_options=place.storage_options)
    assert {r["id"]: r["v"] for r in fresh.to_arrow().to_pylist()} == want
    assert fresh.verify().ok
    fresh.finish_streaming()
    fresh.handoff()
    cleaned = fresh.clean(retention=0, force=True)
    assert any(f.endswith(".dv") for f in cleaned.files)
    assert {r["id"]: r["v"] for r in fresh.to_arrow().to_pylist()} == want


def test_an_overwrite_counts_only_the_rows_it_removes(table: cl.Table) -> None:
    table.delete(pc.field("id") < 5)
    table.overwrite(rows([100]))
    assert table.history(1)[0].rows_removed == 15
