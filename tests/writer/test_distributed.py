"""The planned write that Spark tasks do (carbonlite/driver.py, writer/distributed.py): parts committed once, and
zombie attempts that can neither overwrite a committed object nor cut committed bytes."""

from __future__ import annotations

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.driver import commit_parts, plan_write
from carbonlite.errors import CommitConflictError, StorageError
from carbonlite.metadata import TxnMarker
from carbonlite.storage import open_storage
from carbonlite.writer.distributed import write_part
from carbonlite.writer.write_plan import part_file
from tests.support.places import Place

SCHEMA = pa.schema([("i", pa.int64())])


def _rows(lo: int, hi: int) -> list[pa.RecordBatch]:
    return pa.table({"i": list(range(lo, hi))}, SCHEMA).to_batches()


def _ids(t: cl.Table) -> list[int]:
    return sorted(t.refresh().to_arrow().column("i").to_pylist())


def _commit(plan, parts, txn=None) -> int | None:
    return commit_parts(plan, parts, txn=txn, operation="WRITE", parameters={}, writer_id="d")


def test_parts_commit_as_one_version_and_a_transaction_only_once(place: Place) -> None:
    t = cl.create_table(place.uri("t"), SCHEMA, storage_options=place.storage_options)
    txn = TxnMarker("app", 3)
    plan = plan_write(t, overwrite=False, txn=txn)
    parts = [
        write_part(plan, _rows(10 * p, 10 * p + 10), tag="x", partition=p, attempt=0)
        for p in range(3)
    ]
    version = _commit(plan, parts, txn)
    assert version == 1 and _ids(t) == list(range(30))
    assert t.transaction_version("app") == 3
    again = plan_write(t, overwrite=False, txn=txn)  # a replay of the same transaction
    assert again.skip
    assert write_part(again, _rows(0, 10), tag="x", partition=0, attempt=0) is None
    assert _commit(again, [None], txn) is None
    assert _ids(t) == list(range(30))


def test_each_plan_writes_new_objects_on_an_object_store(place: Place) -> None:
    t = cl.create_table(place.uri("t"), SCHEMA, storage_options=place.storage_options)
    names = set()
    for batch in range(3):
        plan = plan_write(t, overwrite=False)
        part = write_part(plan, _rows(batch * 5, batch * 5 + 5), tag="q", partition=0, attempt=0)
        assert part is not None
        names.add(part.file)
        _commit(plan, [part], TxnMarker("q", batch))
    assert _ids(t) == list(range(15))
    # local disks append batch after batch to the part's file; object stores never append
    assert len(names) == (1 if place.kind == "local" else 3)


def test_a_zombie_never_overwrites_a_committed_object(s3_server) -> None:
    place = Place("s3", f"s3://{s3_server.new_bucket()}", s3_server.storage_options)
    t = cl.create_table(place.uri("t"), SCHEMA, storage_options=place.storage_options)
    plan = plan_write(t, overwrite=False)
    part = write_part(plan, _rows(0, 10), tag="z", partition=0, attempt=0)
    _commit(plan, [part])
    storage, root = open_storage(t.path, place.storage_options)
    path = storage.join(root, part_file(plan, "z", 0, 0))
    before = storage.read(path, 0, storage.size(path))
    # the same task attempt run again (a zombie of this very plan) with other rows
    with pytest.raises(StorageError, match=r"another writer|cannot append"):
        write_part(plan, _rows(100, 200), tag="z", partition=0, attempt=0)
    assert storage.read(path, 0, storage.size(path)) == before
    assert _ids(t) == list(range(10))
    assert t.verify().ok


def test_a_zombie_of_an_earlier_batch_cannot_cut_committed_bytes(tmp_path) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA)
    stale = plan_write(t, overwrite=False)  # batch 0, whose attempt will run late
    first = write_part(stale, _rows(0, 10), tag="s", partition=0, attempt=0)
    _commit(stale, [first], TxnMarker("s", 0))
    later = plan_write(t, overwrite=False)  # batch 1 appends to the same file
    part = write_part(later, _rows(10, 20), tag="s", partition=0, attempt=0)
    _commit(later, [part], TxnMarker("s", 1))
    with pytest.raises(CommitConflictError, match="stale"):
        write_part(stale, _rows(500, 600), tag="s", partition=0, attempt=0)
    assert _ids(t) == list(range(20))
    assert t.verify().ok


@pytest.mark.parametrize(
    "change",
    ["add_columns", "widen_column", "drop_columns", "rename_column"],
)
def test_a_part_writes_on_after_a_schema_change(tmp_path, change: str) -> None:
    """Issue 40 §3: a stream's part appends to the same file batch after batch; after a schema
    change of an unpartitioned table, the same part (same tag, partition and attempt: the
    first attempt, with no retry to hide a failure) writes the new schema's rows into a file
    of its own, and every row reads back in the table's schema."""
    schema = pa.schema([("id", pa.int64()), ("k", pa.string()), ("n", pa.int32())])
    t = cl.create_table(str(tmp_path / "t"), schema)

    def write(rows: pa.Table) -> None:
        plan = plan_write(t, overwrite=False)
        part = write_part(plan, rows.to_batches(), tag="q", partition=0, attempt=0)
        commit_parts(plan, [part], txn=None, operation="WRITE", parameters={}, writer_id="d")

    write(pa.table({"id": [1], "k": ["a"], "n": pa.array([10], pa.int32())}))
    write(pa.table({"id": [2], "k": ["b"], "n": pa.array([20], pa.int32())}))
    files = {f.path for _, f in t.refresh().snapshot().iter_files()}
    assert len(files) == 1, "batches of one schema append to one file"
    changed = {
        "add_columns": lambda: t.add_columns(pa.field("x", pa.int64())),
        "widen_column": lambda: t.widen_column("n", pa.int64()),
        "drop_columns": lambda: t.drop_columns(["k"]),
        "rename_column": lambda: t.rename_column("k", "kind"),
    }[change]
    changed()
    now = t.refresh().schema
    row = {"id": 3, "k": "c", "kind": "c", "n": 30, "x": 7}
    write(pa.Table.from_pylist([{n: row[n] for n in now.names}], schema=now))
    got = t.refresh().to_arrow().sort_by("id")
    assert got.schema == now
    assert got.column("id").to_pylist() == [1, 2, 3]
    assert got.column("n").to_pylist() == [10, 20, 30]
    files_after = {f.path for _, f in t.snapshot().iter_files()}
    if change == "rename_column":  # the physical schema is unchanged: the file goes on
        assert files_after == files
    else:
        assert len(files_after) == 2 and files < files_after


def test_merge_schema_adds_the_new_columns_in_the_writes_own_commit(tmp_path) -> None:
    """Issue 40 §3, Delta's mergeSchema for the Spark sinks: a plan given the rows' schema adds
    the columns the table lacks in the commit of the rows, as ``schema_mode="merge"`` does;
    a schema change committed between plan and commit refuses it (nothing committed)."""
    schema = pa.schema([("id", pa.int64()), ("k", pa.string())])
    t = cl.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({"id": [1], "k": ["a"]}))
    wider = pa.table({"id": [2], "k": ["b"], "score": [0.5]})
    plan = plan_write(t, overwrite=False, merge_schema=wider.schema)
    assert plan.schema.names == ["id", "k", "score"]
    part = write_part(plan, wider.to_batches(), tag="m", partition=0, attempt=0)
    commit_parts(plan, [part], txn=None, operation="WRITE", parameters={}, writer_id="d")
    t.refresh()
    assert t.schema.names == ["id", "k", "score"]
    assert t.to_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "k": "a", "score": None},
        {"id": 2, "k": "b", "score": 0.5},
    ]
    assert t.history(1)[0].parameters["new_columns"] == "score"

    again = pa.table({"id": [3], "k": ["c"], "score": [1.5], "extra": ["x"]})
    plan = plan_write(t, overwrite=False, merge_schema=again.schema)
    part = write_part(plan, again.to_batches(), tag="m", partition=0, attempt=0)
    t.add_columns(pa.field("other", pa.int32()))  # lands between plan and commit
    version = t.refresh().version
    with pytest.raises(CommitConflictError):
        commit_parts(plan, [part], txn=None, operation="WRITE", parameters={}, writer_id="d")
    assert t.refresh().version == version and "extra" not in t.schema.names
