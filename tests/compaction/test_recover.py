"""``recover``: debris past committed lengths is cut, orphan files go, recent files stay,
dry runs change nothing, committed bytes are never touched, and it is safe next to a live
writer in another process."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import carbonlite as cl
from carbonlite.compaction import execute_task, plan_compaction
from carbonlite.errors import WriterConflictError
from carbonlite.storage.local import LocalStorage
from tests.compaction.lifecycle import (
    SCHEMA,
    assert_rows,
    data_files,
    file_digests,
    make_rows,
)
from tests.support import table_worker
from tests.support.batches import PROPERTIES as BATCH_PROPERTIES
from tests.support.batches import SCHEMA as BATCH_SCHEMA
from tests.support.batches import diff_rows, make_batch

PROPS = {"blocklet_max_rows": "25", "handoff_blocklet_rows": "64"}
HOURS_AGO = time.time() - 2 * 3600


def age(path: Path, when: float = HOURS_AGO) -> None:
    os.utime(path, (when, when))


def committed(t: cl.Table) -> dict[str, int]:
    """Committed length of every file the latest version references."""
    return {
        rel: f.committed_length
        for seg in t.refresh().snapshot().segments.values()
        for rel, f in seg.files.items()
    }


def committed_digests(path: Path, t: cl.Table) -> dict[str, bytes]:
    """The committed bytes of every referenced file."""
    out = {}
    for rel, length in committed(t).items():
        with open(path / rel, "rb") as f:
            out[rel] = f.read(length)
    return out


def tree(path: Path) -> dict[str, tuple[int, str]]:
    """(size, sha256) of every file under the table directory (log included)."""
    rels = [
        os.path.relpath(os.path.join(d, n), path) for d, _, names in os.walk(path) for n in names
    ]
    return file_digests(str(path), rels)


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, cl.Table, dict[str, str]]:
    """A table with every kind of crash debris, all of it two hours old:

    - ``stream``: a stream file with 777 garbage bytes past its committed length
    - ``orphan``: a data file no version references (a compaction output never committed)
    - ``stray``: an unreferenced ``.cblt`` put in a segment directory by hand
    - ``temp``: a ``.tmp-`` file in the log directory (a log put that died half way)
    """
    path = tmp_path / "t"
    t = cl.create_table(path, SCHEMA, sort_columns=["ts"], properties=PROPS)
    for i in range(3):
        t.append(make_rows(range(i * 40, (i + 1) * 40)))
        t.finish_streaming()
    t.handoff()
    t.append(make_rows(range(120, 150)))  # segment 3, STREAMING
    snap = t.snapshot()
    stream = next(iter(snap.segments["3"].files))
    with open(path / stream, "ab") as f:
        f.write(os.urandom(777))
    plan = plan_compaction(snap, "minor", None)
    assert plan.tasks == ()
    custom = plan_compaction(snap, "custom", ["0.0", "1.0"])
    result = execute_task(custom.tasks[0], t.path, snap.schema)
    orphan = result.files[0].file
    stray = "segments/2.0/stray-copy.cblt"
    (path / stray).write_bytes((path / next(iter(snap.segments["2.0"].files))).read_bytes())
    temp = "_carbonlite/log/.tmp-00000000000000000042.json"
    (path / temp).write_bytes(b'{"half a version')
    names = {"stream": stream, "orphan": orphan, "stray": stray, "temp": temp}
    for rel in names.values():
        age(path / rel)
    return path, t, names


def test_recover_cuts_debris_and_deletes_orphans(damaged: tuple[Path, cl.Table, dict]) -> None:
    path, t, names = damaged
    version = t.version
    keep = committed_digests(path, t)
    before_size = os.path.getsize(path / names["stream"])
    orphan_sizes = sum(os.path.getsize(path / names[k]) for k in ("orphan", "stray", "temp"))
    result = t.recover(min_age=0)
    assert not result.dry_run
    assert result.truncated == ((names["stream"], before_size, before_size - 777),)
    assert set(result.orphans) == {names["orphan"], names["stray"], names["temp"]}
    assert result.bytes_freed == 777 + orphan_sizes
    assert os.path.getsize(path / names["stream"]) == committed(t)[names["stream"]]
    for key in ("orphan", "stray", "temp"):
        assert not (path / names[key]).exists(), f"{key} orphan still there"
    assert committed_digests(path, t) == keep, "recover changed committed bytes"
    assert t.refresh().version == version, "recover commits nothing"
    assert t.verify().ok
    assert_rows(t.to_arrow(), range(150))
    # Idempotent: nothing more to do.
    again = t.recover(min_age=0)
    assert (again.truncated, again.orphans, again.bytes_freed) == ((), (), 0)
    # The stream goes on from the committed length.
    t.append(make_rows(range(150, 160)))
    assert_rows(cl.open_table(path).to_arrow(), range(160))


def test_default_min_age_handles_old_debris(damaged: tuple[Path, cl.Table, dict]) -> None:
    _path, t, names = damaged
    result = t.recover()  # default min_age: one hour; the debris is two hours old
    assert [r[0] for r in result.truncated] == [names["stream"]]
    assert set(result.orphans) == {names["orphan"], names["stray"], names["temp"]}
    assert t.verify().ok


def test_recent_files_are_left_alone(damaged: tuple[Path, cl.Table, dict]) -> None:
    path, t, names = damaged
    now = time.time()
    for rel in names.values():
        age(path / rel, now)  # as if a live writer or compaction just wrote them
    before = tree(path)
    result = t.recover()
    assert (result.truncated, result.orphans, result.bytes_freed) == ((), (), 0)
    assert set(result.skipped_recent) == {names["stream"], names["orphan"], names["stray"]}
    assert tree(path) == before
    # min_age says how recent is too recent.
    result = t.recover(min_age="1h")
    assert result.orphans == ()
    time.sleep(0.2)
    result = t.recover(min_age=0.1)
    # A log temp file younger than a minute may be a commit being linked: always left alone.
    assert set(result.orphans) == {names["orphan"], names["stray"]}
    assert (path / names["temp"]).exists()


def test_dry_run_changes_nothing(damaged: tuple[Path, cl.Table, dict]) -> None:
    path, t, names = damaged
    before = tree(path)
    dry = t.recover(min_age=0, dry_run=True)
    assert dry.dry_run
    assert [r[0] for r in dry.truncated] == [names["stream"]]
    assert set(dry.orphans) == {names["orphan"], names["stray"], names["temp"]}
    assert tree(path) == before
    real = t.recover(min_age=0)
    assert (real.truncated, set(real.orphans), real.bytes_freed) == (
        dry.truncated,
        set(dry.orphans),
        dry.bytes_freed,
    )


def test_recover_keeps_files_of_compacted_segments_that_time_travel_needs(
    damaged: tuple[Path, cl.Table, dict],
) -> None:
    """Files of COMPACTED segments are referenced until clean removes them: not orphans."""
    path, t, _names = damaged
    old = {
        rel
        for seg in t.snapshot().segments.values()
        if seg.status == "COMPACTED"
        for rel in seg.files
    }
    assert old
    for rel in old:
        age(path / rel)
    t.recover(min_age=0)
    assert old <= data_files(str(path))
    handoff = next(h.version for h in t.history() if h.operation == "HANDOFF")
    assert_rows(t.to_arrow(version=handoff - 1), range(120))


@pytest.mark.slow
def test_recover_is_safe_while_a_writer_appends(tmp_path: Path) -> None:
    """A writer process appends (rolling segments) while recover runs again and again with the
    default min_age; old debris elsewhere in the table is cleaned meanwhile. Every batch the
    writer committed is in the table exactly once."""
    path = tmp_path / "t"
    t = cl.create_table(
        path,
        BATCH_SCHEMA,
        properties={**BATCH_PROPERTIES, "streaming_segment_max_bytes": "48KB"},
    )
    t.append(make_batch(10_000))
    t.finish_streaming()  # segment 0: finished, its file gets old debris
    stream = next(iter(t.snapshot().segments["0"].files))
    with open(path / stream, "ab") as f:
        f.write(os.urandom(500))
    age(path / stream)
    orphan = path / "segments" / "0" / "dead-writer-0.cblt"
    orphan.write_bytes(os.urandom(1000))
    age(orphan)
    stop = tmp_path / "stop"
    progress = tmp_path / "progress"
    proc = table_worker.spawn(
        {
            "op": "append",
            "table": str(path),
            "batches": list(range(200)),
            "writer_id": "live",
            "stop_file": str(stop),
            "progress_file": str(progress),
        }
    )
    runs = cut = deleted = 0
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            result = cl.open_table(path).recover()
            runs += 1
            cut += len(result.truncated)
            deleted += len(result.orphans)
            assert all(r[0] == stream for r in result.truncated), result
            assert set(result.orphans) <= {"segments/0/dead-writer-0.cblt"}, result
            done = len(progress.read_text()) if progress.exists() else 0
            if done >= 120 and runs >= 20:
                break
            time.sleep(0.01)
    finally:
        stop.touch()
        out = table_worker.finish(proc)
    batches = [b for b, version, skipped, error in out["results"] if version is not None]
    assert len(batches) >= 120
    assert (cut, deleted) == (1, 1), "the old debris should have been cleaned exactly once"
    final = cl.open_table(path)
    problem = diff_rows(final.to_arrow(), [10_000, *batches])
    assert problem is None, problem
    assert final.verify().ok
    assert len([s for s in final.segments() if s.status == "STREAMING_FINISH"]) >= 2, (
        "segments should have rolled over while recover ran"
    )


def test_files_of_a_live_writer_are_left_alone_whatever_their_age(tmp_path: Path) -> None:
    """A writer holds its identity's lock while it may still commit what it wrote; recover
    must not cut those bytes even with min_age=0, and does cut them once the writer is gone."""
    path = tmp_path / "t"
    writer = cl.create_table(path, SCHEMA, properties=PROPS)
    writer.append(make_rows(range(0, 30)))
    stream = next(iter(writer.snapshot().segments["0"].files))
    committed_length = committed(writer)[stream]
    with open(path / stream, "ab") as f:  # bytes written but not yet committed
        f.write(os.urandom(500))
    operator = cl.open_table(path)
    with writer._writer.owned():  # the writer is mid-append
        result = operator.recover(min_age=0)
        assert result.truncated == ()
        assert stream in result.skipped_recent
        assert os.path.getsize(path / stream) == committed_length + 500
    result = operator.recover(min_age=0)
    assert result.truncated == ((stream, committed_length + 500, committed_length),)
    assert_rows(operator.to_arrow(), range(30))


def test_recover_removes_orphan_checkpoint_indexes_and_idle_locks(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = cl.create_table(path, SCHEMA, properties=PROPS)
    t.append(make_rows(range(0, 10)))
    log = path / "_carbonlite" / "log"
    stray_index = log / f"{99:020d}.checkpoint.blocklets.arrow"  # its document was never written
    stray_index.write_bytes(b"ARROW1")
    idle_lock = path / "_carbonlite" / "locks" / "gone-writer.lock"
    idle_lock.write_bytes(b"")
    for f in (stray_index, idle_lock):
        age(f)
    result = t.recover()
    assert f"_carbonlite/log/{stray_index.name}" in result.orphans
    assert not stray_index.exists() and not idle_lock.exists()
    t.append(make_rows(range(10, 20)))  # the writer's own lock comes back when it writes
    assert_rows(cl.open_table(path).to_arrow(), range(20))


def test_a_writer_whose_lock_file_is_gone_cannot_start_while_recover_cuts_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The idle writer left no lock file (its holder deletes it as it lets go). While recover
    cuts that writer's file, the writer's lock must still be held (by recover), and the lock
    file recover had to create is gone again afterwards."""
    path = tmp_path / "t"
    t = cl.create_table(path, SCHEMA, properties=PROPS)
    t.append(make_rows(range(0, 10)))
    (rel,) = data_files(path)
    stream = path / rel
    with open(stream, "ab") as f:
        f.write(os.urandom(300))  # an uncommitted tail
    age(stream)
    lock = path / "_carbonlite" / "locks" / f"{t.writer_id}.lock"
    assert not lock.exists()
    attempts: list[str] = []
    real_truncate = LocalStorage.truncate

    def truncate(self: LocalStorage, p: str, length: int) -> None:
        with pytest.raises(WriterConflictError), self.lock(str(lock), timeout=0):
            pass
        attempts.append(p)
        real_truncate(self, p, length)

    monkeypatch.setattr(LocalStorage, "truncate", truncate)
    result = cl.open_table(path).recover()
    assert len(result.truncated) == 1 and len(attempts) == 1
    assert not lock.exists(), "recover must not leave the lock files it created behind"
    monkeypatch.undo()
    t.append(make_rows(range(10, 20)))
    final = cl.open_table(path)
    assert_rows(final.to_arrow(), range(20))
    assert final.verify().ok
