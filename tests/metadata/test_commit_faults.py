"""Fault injection against the commit protocol (docs/LOG.md, "Commit protocol"), on local
storage and on S3 through a real moto server.

- A conditional write that lands but reports failure (a lost response, a client retry that
  finds the object), or that raises after landing: the commit is recognised as its own.
- A storage that fails every write and read of the version: CommitStateUnknownError, and
  nothing the commit wrote is deleted.
- A writer whose snapshot predates ``clean``: it never re-creates a removed version number.
- A deleted, a cut and a changed version file: CorruptDataError naming the version, never a
  table opened at an older version or rows of no committed version.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.storage import Storage
from tests.support.places import Place, expire_leases
from tests.support.tables import events

Put = Callable[[str, bytes], bool]
Behaviour = Callable[[Put, str, bytes], bool]


def _is_version(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return "/_carbonlite/log/" in path and name.endswith(".json") and "checkpoint" not in name


@pytest.fixture
def on_version_put(monkeypatch: pytest.MonkeyPatch) -> Callable[[Storage, Behaviour], None]:
    """Route ``put_if_absent`` of log version files through ``behaviour(real, path, data)``."""

    def patch(storage: Storage, behaviour: Behaviour) -> None:
        real = storage.put_if_absent

        def put_if_absent(path: str, data: bytes) -> bool:
            return behaviour(real, path, data) if _is_version(path) else real(path, data)

        monkeypatch.setattr(storage, "put_if_absent", put_if_absent)

    return patch


def once(fault: Behaviour) -> Behaviour:
    """``fault`` on the first call, the real write after."""
    fired = [False]

    def behaviour(real: Put, path: str, data: bytes) -> bool:
        if fired[0]:
            return real(path, data)
        fired[0] = True
        return fault(real, path, data)

    return behaviour


def land_then_report_lost(real: Put, path: str, data: bytes) -> bool:
    assert real(path, data)
    return False  # what a client retry of a landed conditional PUT hears: "exists"


def land_then_raise(real: Put, path: str, data: bytes) -> bool:
    assert real(path, data)
    raise OSError("connection reset by peer (the response was lost)")


def ids(table: cl.Table) -> list[int]:
    return sorted(table.to_arrow(columns=["id"])["id"].to_pylist())


def log_file(table: cl.Table, version: int) -> str:
    return table.storage.join(table.root, "_carbonlite", "log", f"{version:020d}.json")


def data_files(table: cl.Table) -> dict[str, int]:
    """Every data file under the table, with its size."""
    listed = table.storage.list(table.storage.join(table.root, "segments"), recursive=True)
    return {s.path: s.size for s in listed}


def _rel(table: cl.Table, path: str) -> str:
    return path[len(table.root.rstrip("/")) + 1 :]


def data_bytes_of(files: dict[str, int]) -> int:
    return sum(files.values())


def data_bytes(table: cl.Table) -> int:
    return data_bytes_of(data_files(table))


# --- a write that lands but reports failure ------------------------------------------------------


@pytest.mark.parametrize("fault", [land_then_report_lost, land_then_raise])
def test_an_append_whose_write_landed_is_its_own_success(place, on_version_put, fault) -> None:
    table = place.create("t")
    table.append(events(0, 10))
    on_version_put(table.storage, once(fault))
    result = table.append(events(10, 10))  # no txn: a retry by the user would duplicate
    assert result.version == 2 and not result.skipped
    fresh = place.open("t")
    assert fresh.version == 2
    assert ids(fresh) == list(range(20))  # once, not lost, not twice
    assert [h.operation for h in fresh.history()] == ["APPEND", "APPEND", "CREATE TABLE"]


@pytest.mark.parametrize("fault", [land_then_report_lost, land_then_raise])
def test_a_handoff_whose_write_landed_keeps_its_outputs(place, on_version_put, fault) -> None:
    table = place.create("t")
    for n in range(3):
        table.append(events(n * 10, 10))
    table.finish_streaming()
    on_version_put(table.storage, once(fault))
    result = table.handoff()
    assert len(result.versions) == 1
    fresh = place.open("t")
    assert fresh.version == result.versions[0]
    assert [s.status for s in fresh.segments()] == ["COMPACTED", "SUCCESS"]
    assert ids(fresh) == list(range(30))  # the outputs were not deleted
    assert fresh.verify().ok
    fresh.clean(retention=0, force=True)  # removes the inputs; the outputs stay readable
    assert ids(place.open("t")) == list(range(30))


def test_a_lost_write_of_a_transaction_is_not_skipped_as_a_replay(place, on_version_put) -> None:
    table = place.create("t")
    on_version_put(table.storage, once(land_then_report_lost))
    result = table.append(events(0, 5), txn=("app", 7))
    assert result.version == 1 and not result.skipped
    assert table.transaction_version("app") == 7
    assert table.append(events(0, 5), txn=("app", 7)).skipped  # a real replay is skipped
    assert ids(place.open("t")) == list(range(5))


# --- a write whose outcome cannot be told ------------------------------------------------------


def _storage_down_for_versions(
    table: cl.Table, on_version_put: Callable[[Storage, Behaviour], None], monkeypatch
) -> None:
    """Every conditional write of a version fails, and so does every read of a version the
    writer tried to write: nothing can tell whether it landed."""
    attempted: set[str] = set()

    def down(real: Put, path: str, data: bytes) -> bool:
        attempted.add(path)
        raise OSError("storage unavailable")

    on_version_put(table.storage, down)
    real_read = table.storage.read

    def read(path: str, start: int = 0, end: int | None = None) -> bytes:
        if path in attempted:
            raise OSError("storage unavailable")
        return real_read(path, start, end)

    monkeypatch.setattr(table.storage, "read", read)


def test_an_undecidable_append_raises_commit_state_unknown(place, on_version_put, monkeypatch):
    table = place.create("t")
    table.append(events(0, 10))
    before = data_files(table)
    _storage_down_for_versions(table, on_version_put, monkeypatch)
    with pytest.raises(cl.CommitStateUnknownError) as info:
        table.append(events(10, 10))
    assert info.value.version == 2 and info.value.commit_id
    assert "history" in str(info.value) and "recover" in str(info.value)
    assert not isinstance(info.value, cl.CommitConflictError)  # no blind retry
    assert data_bytes(table) > data_bytes_of(before)  # what it wrote is still there
    monkeypatch.undo()
    fresh = place.open("t")
    assert fresh.version == 1 and ids(fresh) == list(range(10))
    fresh.append(events(10, 10))
    assert ids(place.open("t")) == list(range(20))


def test_an_undecidable_handoff_deletes_nothing(place, on_version_put, monkeypatch) -> None:
    table = place.create("t")
    for n in range(2):
        table.append(events(n * 10, 10))
    table.finish_streaming()
    before = data_files(table)
    _storage_down_for_versions(table, on_version_put, monkeypatch)
    with pytest.raises(cl.CommitStateUnknownError):
        table.handoff()
    outputs = set(data_files(table)) - set(before)
    assert outputs  # the handoff's outputs are still there: a committed version may need them
    monkeypatch.undo()
    fresh = place.open("t")
    assert ids(fresh) == list(range(20))
    # The outputs stay leased for a whole term: a version landing late may still need them.
    assert set(fresh.recover(min_age=0).skipped_recent) >= {_rel(fresh, p) for p in outputs}
    assert set(data_files(fresh)) >= outputs
    assert expire_leases(fresh) == 1
    fresh.recover(min_age=0)  # settles it: the version never landed, so the outputs go
    assert data_files(fresh) == before
    assert ids(place.open("t")) == list(range(20))


# --- a writer older than clean -----------------------------------------------------------------

CLEANED = {"checkpoint_interval": "5", "log_retention": "0s"}


def _commit_and_clean(place: Place) -> None:
    """Another writer commits versions 2..6 (checkpoint at 5) and cleans the log behind it."""
    other = place.open("t")
    for n in range(1, 6):
        other.append(events(n * 10, 10))
    assert other.version == 6
    cleaned = other.clean(retention=0, force=True)
    assert any(p.endswith(f"{2:020d}.json") for p in cleaned.log_files)


def test_a_stale_writer_does_not_recreate_a_cleaned_version(place) -> None:
    stale = place.create("t", properties=CLEANED)
    stale.append(events(0, 10))
    assert stale.version == 1
    _commit_and_clean(place)
    result = stale.append(events(60, 10))
    assert result.version == 7
    assert not stale.storage.exists(log_file(stale, 2))
    fresh = place.open("t")
    assert fresh.version == 7
    assert ids(fresh) == list(range(70))


@pytest.mark.parametrize("pointer", ["pointer", "no-pointer"])
def test_a_version_landing_in_the_cleaned_log_is_left_and_the_commit_retried(
    place, on_version_put, pointer
):
    """The clean happens between the writer's last look at the log and its conditional write,
    so the write of version 2 succeeds: the writer must notice that no checkpoint descends from
    it and commit on top of the real latest version. The fork is left in place (a writer never
    deletes a version it created), unread by anyone, and the next clean removes it."""
    stale = place.create("t", properties=CLEANED)
    stale.append(events(0, 10))
    reader = place.open("t")  # a reader standing on version 1, which clean removes

    def clean_first(real: Put, path: str, data: bytes) -> bool:
        _commit_and_clean(place)
        if pointer == "no-pointer":
            stale.storage.delete(stale.storage.join(stale.root, "_carbonlite", "_last_checkpoint"))
        return real(path, data)

    on_version_put(stale.storage, once(clean_first))
    result = stale.append(events(60, 10))
    assert result.version == 7
    assert stale.storage.exists(log_file(stale, 2))  # the fork, left in place
    fresh = place.open("t")
    assert fresh.version == 7 and ids(fresh) == list(range(70))
    # the stale reader skips the fork (its own version was cleaned away) to the checkpoint
    assert reader.refresh().version == 7 and ids(reader) == list(range(70))
    assert all(fresh.to_arrow(version=v).num_rows == 10 * v for v in (5, 6))
    fresh.clean(retention=0, force=True)
    assert not fresh.storage.exists(log_file(fresh, 2))  # clean removes it
    assert ids(place.open("t")) == list(range(70))


# --- damaged logs --------------------------------------------------------------------------------


def _table_with_versions(place: Place, n: int, **kwargs: Any) -> cl.Table:
    table = place.create("t", **kwargs)
    for i in range(n):
        table.append(events(i * 10, 10))
    return table


def test_a_missing_version_in_the_middle_is_corrupt(place) -> None:
    """Versions 0-3 and 5-6 present: not a table at version 3, a CorruptDataError naming 4,
    and a Table that had loaded version 3 neither reads past the hole nor commits into it."""
    table = _table_with_versions(place, 3, properties={"checkpoint_max_entries": "100000"})
    stale = place.open("t")
    for i in range(3, 6):
        table.append(events(i * 10, 10))
    table.storage.delete(log_file(table, 4))
    with pytest.raises(cl.CorruptDataError, match="missing version 4") as info:
        place.open("t")
    assert info.value.path is not None and info.value.path.endswith(f"{4:020d}.json")
    files = data_files(table)
    with pytest.raises(cl.CorruptDataError, match="missing version 4"):
        stale.append(events(100, 10))
    assert not table.storage.exists(log_file(table, 4))  # the hole was not filled
    assert data_files(table) == files  # and nothing was written


def test_a_missing_version_behind_a_checkpoint_is_corrupt_where_it_is_needed(place) -> None:
    table = _table_with_versions(place, 3, properties={"checkpoint_interval": "3"})
    stale = place.open("t")  # version 3
    for i in range(3, 6):
        table.append(events(i * 10, 10))  # versions 4..6, checkpoint at 6
    table.storage.delete(log_file(table, 5))
    latest = place.open("t")  # the checkpoint at 6 stands in for 5
    assert latest.version == 6 and ids(latest) == list(range(60))
    with pytest.raises(cl.CorruptDataError, match="missing version 5"):
        latest.to_arrow(version=5)
    with pytest.raises(cl.CorruptDataError, match="missing version 5"):
        stale.append(events(100, 10))
    assert not table.storage.exists(log_file(table, 5))


def test_a_version_cut_at_a_line_boundary_is_corrupt_not_fewer_actions(place) -> None:
    """The review's case: a handoff version cut after its first lines (its removals gone)
    returned 2,524 rows against 2,036 committed. Now it is refused."""
    table = _table_with_versions(place, 3, properties={"checkpoint_max_entries": "100000"})
    table.finish_streaming()
    version = table.handoff().versions[0]
    path = log_file(table, version)
    data = table.storage.read(path)
    lines = data.split(b"\n")
    table.storage.put(path, b"\n".join(lines[:2]) + b"\n")  # addSegment + appendBlocklets only
    with pytest.raises(cl.CorruptDataError, match=f"{version:020d}.json"):
        place.open("t").to_arrow()


def test_one_changed_digit_in_a_statistic_never_drops_rows(place) -> None:
    table = _table_with_versions(place, 2)
    path = log_file(table, 2)
    data = table.storage.read(path)
    # the first blocklet's max id: 19 -> 10 would prune every row with id > 10
    damaged = data.replace(b'"max":19', b'"max":10', 1)
    assert damaged != data
    table.storage.put(path, damaged)
    with pytest.raises(cl.CorruptDataError, match="damaged"):
        place.open("t").to_arrow(filter=pc.field("id") > 15)


def test_a_table_deleted_under_a_table_object_is_not_found_and_nothing_is_created(tmp_path):
    path = tmp_path / "t"
    table = cl.create_table(path, events(0, 1).schema)
    table.append(events(0, 10))
    shutil.rmtree(path)
    with pytest.raises(cl.TableNotFoundError, match="gone"):
        table.refresh()
    with pytest.raises(cl.TableNotFoundError):
        table.append(events(10, 10))
    with pytest.raises(cl.TableNotFoundError):
        table.handoff()
    assert not path.exists()  # no directory, no stray data file, no lock file re-created


@pytest.mark.s3
def test_a_table_deleted_from_s3_under_a_table_object_is_not_found(s3_server) -> None:
    place = Place("s3", f"s3://{s3_server.new_bucket()}", s3_server.storage_options)
    table = place.create("t")
    table.append(events(0, 10))
    for status in table.storage.list(table.root, recursive=True):
        table.storage.delete(status.path)
    with pytest.raises(cl.TableNotFoundError):
        table.append(events(10, 10))
    assert table.storage.list(table.root, recursive=True) == []
