"""Files written before their commit are protected by leases, not only by age (writer/lease.py).

``recover`` with ``min_age=0`` treats every unreferenced file as old enough: only a lease
keeps a compaction's outputs, or an object-store append, alive until its commit.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

import carbonlite as cl
from carbonlite.compaction.run import run_tasks_locally
from carbonlite.errors import CommitConflictError
from carbonlite.storage import Storage
from carbonlite.writer.lease import LEASE_DIR, Lease, read_leases
from tests.support.places import Place
from tests.support.tables import events

Put = Callable[[str, bytes], bool]


def ids(table: cl.Table) -> list[int]:
    return sorted(table.to_arrow(columns=["id"])["id"].to_pylist())


def _age(place: Place, table: cl.Table, rels: list[str]) -> None:
    """Make files look older than any min_age (local files; S3 has min_age=0 do it)."""
    if place.kind == "local":
        old = time.time() - 10 * 86400
        for rel in rels:
            os.utime(os.path.join(table.root, rel), (old, old))


def _table_to_hand_off(place: Place) -> cl.Table:
    table = place.create("t")
    for n in range(3):
        table.append(events(n * 10, 10))
    table.finish_streaming()
    return table


def test_recover_during_a_long_compaction_leaves_its_outputs(place: Place) -> None:
    """The compaction runs "longer than min_age": its outputs are old and unreferenced while
    recover runs, and survive only because the compaction holds a lease."""
    table = _table_to_hand_off(place)
    during: list[cl.Table] = []

    def slow_executor(tasks, uri, schema, storage_options, **kwargs):
        results = run_tasks_locally(tasks, uri, schema, storage_options)
        outputs = [f.file for r in results for f in r.files]
        assert outputs
        _age(place, table, outputs)
        other = place.open("t")
        result = other.recover(min_age=0)
        assert not set(result.orphans) & set(outputs), result
        assert set(outputs) <= set(result.skipped_recent)
        during.append(other)
        return results

    result = table.handoff(executor=slow_executor)
    assert during and len(result.versions) == 1
    fresh = place.open("t")
    assert [s.status for s in fresh.segments()] == ["COMPACTED", "SUCCESS"]
    assert ids(fresh) == list(range(30))
    assert fresh.verify().ok
    leases, _ = read_leases(table.storage, table.root)
    assert leases == []  # released after the commit


def test_recover_between_the_last_check_and_the_commit(place: Place, monkeypatch) -> None:
    """recover runs right before the version is written, after the writer checked its files:
    without the lease it would delete them and the version would point at nothing."""
    table = _table_to_hand_off(place)
    real = table.storage.put_if_absent
    fired = [False]

    def put_if_absent(path: str, data: bytes) -> bool:
        if path.endswith(".json") and "/_carbonlite/log/" in path and not fired[0]:
            fired[0] = True
            segments = table.storage.join(table.root, "segments")
            prefix = table.root.rstrip("/") + "/"
            rels = [s.path[len(prefix) :] for s in table.storage.list(segments, recursive=True)]
            _age(place, table, rels)
            place.open("t").recover(min_age=0)
        return real(path, data)

    monkeypatch.setattr(table.storage, "put_if_absent", put_if_absent)
    table.handoff()
    assert fired[0]
    monkeypatch.undo()
    fresh = place.open("t")
    assert ids(fresh) == list(range(30))
    assert fresh.verify().ok


@pytest.mark.s3
def test_an_object_store_append_is_leased_until_its_commit(s3_server, monkeypatch) -> None:
    """On S3 every append is a new object no writer lock guards."""
    place = Place("s3", f"s3://{s3_server.new_bucket()}", s3_server.storage_options)
    table = place.create("t")
    table.append(events(0, 10))
    real = table.storage.put_if_absent
    fired = [False]

    def put_if_absent(path: str, data: bytes) -> bool:
        if path.endswith(".json") and "/_carbonlite/log/" in path and not fired[0]:
            fired[0] = True
            leases, _ = read_leases(table.storage, table.root)
            assert [lease.owner for lease in leases] == [f"writer {table.writer_id}"]
            result = place.open("t").recover(min_age=0)
            assert result.orphans == ()
        return real(path, data)

    monkeypatch.setattr(table.storage, "put_if_absent", put_if_absent)
    table.append(events(10, 10))
    assert fired[0]
    monkeypatch.undo()
    assert ids(place.open("t")) == list(range(20))
    assert read_leases(table.storage, table.root)[0] == []


def test_an_expired_lease_protects_nothing(place: Place) -> None:
    """A writer that died holding a lease: once it expires, recover removes its files and
    the record."""
    table = place.create("t")
    table.append(events(0, 5))
    orphan = table.storage.join(table.root, "segments", "9", "dead-writer-0.cblt")
    table.storage.put(orphan, b"uncommitted bytes")
    record = {
        "lease_id": "deadbeef",
        "owner": "a crashed compaction",
        "paths": ["segments/9/"],
        "names": [],
        "expires_ms": int(time.time() * 1000) - 1,
    }
    lease_file = table.storage.join(table.root, LEASE_DIR, "deadbeef.json")
    table.storage.put(lease_file, json.dumps(record).encode())
    _age(place, table, ["segments/9/dead-writer-0.cblt"])
    result = table.recover(min_age=0)
    assert "segments/9/dead-writer-0.cblt" in result.orphans
    assert not table.storage.exists(orphan) and not table.storage.exists(lease_file)
    assert ids(place.open("t")) == list(range(5))


def test_a_lease_record_never_renamed_into_place_protects_nothing(tmp_path) -> None:
    """A writer killed inside ``Lease.acquire``, between writing the record's temporary file
    and renaming it (local storage), leaves a ``.tmp-`` file holding a live-looking record.
    It wrote no file under the lease, so the record covers nothing: recover removes the
    writer's debris at once (CI met a recover held off by one for the lease's 10 minutes),
    and the temporary file itself once it is a minute old."""
    table = cl.create_table(str(tmp_path / "t"), events(0, 1).schema)
    table.append(events(0, 5))
    orphan = os.path.join(table.root, "segments", "9", "dead-writer-0.cblt")
    os.makedirs(os.path.dirname(orphan))
    with open(orphan, "wb") as f:
        f.write(b"uncommitted bytes")
    record = {
        "lease_id": "cafe",
        "owner": "a compaction killed in acquire()",
        "paths": ["segments/9/"],
        "names": [],
        "expires_ms": int(time.time() * 1000) + 600_000,
    }
    os.makedirs(os.path.join(table.root, LEASE_DIR))
    temp = os.path.join(table.root, LEASE_DIR, ".tmp-0123456789abcdef")
    with open(temp, "w") as f:
        json.dump(record, f)
    old = time.time() - 120
    os.utime(orphan, (old, old))
    assert read_leases(table.storage, table.root)[0] == []
    result = table.recover(min_age=0)
    assert "segments/9/dead-writer-0.cblt" in result.orphans
    assert not os.path.exists(temp) or os.path.getmtime(temp) > old  # too young to go yet
    os.utime(temp, (old, old))
    table.recover(min_age=0)
    assert not os.path.exists(temp)
    assert ids(cl.open_table(table.path)) == list(range(5))


def test_a_live_lease_protects_files_however_old(place: Place) -> None:
    table = place.create("t")
    table.append(events(0, 5))
    inflight = table.storage.join(table.root, "segments", "9", "slow-writer-0.cblt")
    with Lease(table.storage, table.root, owner="test", names=["slow-writer-"]):
        table.storage.put(inflight, b"not committed yet")
        _age(place, table, ["segments/9/slow-writer-0.cblt"])
        result = table.recover(min_age=0)
        assert "segments/9/slow-writer-0.cblt" in result.skipped_recent
        assert table.storage.exists(inflight)
    assert table.recover(min_age=0).orphans == ("segments/9/slow-writer-0.cblt",)


def test_a_lease_not_renewed_in_time_refuses_the_commit(tmp_path) -> None:
    table = cl.create_table(tmp_path / "t", events(0, 1).schema)
    storage: Storage = table.storage
    lease = Lease(storage, table.root, owner="test", paths=["segments/"], seconds=3.0)
    with lease:
        lease.check()  # fresh: a full term left
        # what a heartbeat that could not renew leaves: under a third of the term
        lease._record = replace(lease.record, expires_ms=int(time.time() * 1000) + 500)
        with pytest.raises(CommitConflictError, match="not renewed in time"):
            lease.check()


def test_the_heartbeat_renews_the_lease(tmp_path) -> None:
    table = cl.create_table(tmp_path / "t", events(0, 1).schema)
    with Lease(table.storage, table.root, owner="test", paths=["x/"], seconds=0.6) as lease:
        first = lease.record.expires_ms
        time.sleep(0.5)
        lease.check()  # renewed by the heartbeat, so still most of its term left
        assert lease.record.expires_ms > first
        (stored,), _ = read_leases(table.storage, table.root)
        assert stored.expires_ms == lease.record.expires_ms


def test_a_lease_kept_for_an_unknown_outcome_is_never_deleted_by_a_later_release(tmp_path):
    table = cl.create_table(tmp_path / "t", events(0, 1).schema)
    lease = Lease(table.storage, table.root, owner="test", paths=["x/"]).acquire()
    lease.release(keep_record=True)
    lease.release()  # e.g. a finalizer: only the first release acts
    (kept,), _ = read_leases(table.storage, table.root)
    assert kept.lease_id == lease.record.lease_id


def test_a_spark_writer_dropped_without_commit_releases_its_lease(tmp_path) -> None:
    """Spark normally calls commit or abort; a writer dropped without either must not leave a
    heartbeat renewing its lease forever."""
    import gc

    from carbonlite.driver import plan_write
    from carbonlite.spark.sink import _LeasedWriter

    table = cl.create_table(tmp_path / "t", events(0, 1).schema)
    writer = _LeasedWriter()
    writer._hold(plan_write(table, overwrite=False), "spark stream")
    assert len(read_leases(table.storage, table.root)[0]) == 1
    assert "_lease" not in writer.__getstate__()  # never shipped to executors
    del writer
    gc.collect()
    assert read_leases(table.storage, table.root)[0] == []


@pytest.mark.parametrize("outcome", ["committed", "conflict", "unknown"])
def test_the_spark_driver_releases_its_lease_unless_the_outcome_is_unknown(tmp_path, outcome):
    from carbonlite.writer.distributed import commit_leased

    table = cl.create_table(tmp_path / "t", events(0, 1).schema)
    lease = Lease(table.storage, table.root, owner="spark stream", paths=["segments/0/"])
    lease.acquire()

    def commit() -> None:
        if outcome == "conflict":
            raise CommitConflictError("lost")
        if outcome == "unknown":
            raise cl.CommitStateUnknownError("cannot tell", version=3, commit_id="c")

    if outcome == "committed":
        commit_leased(lease, commit)
    else:
        with pytest.raises(cl.CarbonLiteError):
            commit_leased(lease, commit)
    left = read_leases(table.storage, table.root)[0]
    assert len(left) == (1 if outcome == "unknown" else 0)
