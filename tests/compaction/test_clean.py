"""``clean``: the retention safety minimum, dry runs, physical deletion, what time travel says
about versions whose files are gone, and log retention up to a retained checkpoint."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import pytest

import carbonlite as cl
from carbonlite.errors import DataUnavailableError, InvalidOptionError, VersionNotFoundError
from tests.compaction.lifecycle import (
    SCHEMA,
    assert_rows,
    canonical,
    data_files,
    make_rows,
    read_versions,
)

PROPS = {"blocklet_max_rows": "25", "handoff_blocklet_rows": "64"}


def compacted_table(path: Path, segments: int = 4, rows: int = 50, **props: str) -> cl.Table:
    """Segments 0..n-1 handed off into 0.0..(n-1).0, then merged by minor compaction."""
    t = cl.create_table(path, SCHEMA, sort_columns=["ts"], properties={**PROPS, **props})
    for s in range(segments):
        t.append(make_rows(range(s * rows, (s + 1) * rows)))
        t.finish_streaming()
    t.handoff()
    t.compact("minor")
    return t


def checkpointed_table(path: Path, *, log_retention: str) -> cl.Table:
    """Versions 1..10 (ten rows each), with checkpoints at 3, 6 and 9."""
    t = cl.create_table(
        path,
        SCHEMA,
        sort_columns=["ts"],
        properties={**PROPS, "checkpoint_interval": "3", "log_retention": log_retention},
    )
    for i in range(10):
        t.append(make_rows(range(i * 10, (i + 1) * 10)))
    return t


def files_of(t: cl.Table, status: str) -> set[str]:
    return {
        rel for seg in t.snapshot().segments.values() if seg.status == status for rel in seg.files
    }


@pytest.mark.parametrize(
    "retention", [0, 59 * 60, "30m", "59 minutes", datetime.timedelta(minutes=5)]
)
def test_retention_under_an_hour_is_refused_without_force(
    tmp_path: Path, retention: object
) -> None:
    t = compacted_table(tmp_path / "t")
    version, on_disk = t.version, data_files(str(tmp_path / "t"))
    with pytest.raises(InvalidOptionError, match="below the 1 hour safety minimum") as info:
        t.clean(retention)
    assert "force" in str(info.value)
    with pytest.raises(InvalidOptionError, match="below the 1 hour"):
        t.clean(retention, dry_run=True)
    assert t.refresh().version == version
    assert data_files(str(tmp_path / "t")) == on_disk


def test_bad_retention_values(tmp_path: Path) -> None:
    t = compacted_table(tmp_path / "t", segments=1)
    with pytest.raises(InvalidOptionError, match="negative"):
        t.clean(-1, force=True)
    with pytest.raises(InvalidOptionError, match="not a duration"):
        t.clean("soon")
    with pytest.raises(InvalidOptionError, match="retention must be"):
        t.clean([1])  # type: ignore[arg-type]


def test_default_and_long_retention_keep_fresh_files(tmp_path: Path) -> None:
    t = compacted_table(tmp_path / "t")
    on_disk = data_files(str(tmp_path / "t"))
    for retention in (None, "1h", 7 * 86400):
        result = t.clean(retention)
        assert (result.files, result.version, result.log_files) == ((), None, ())
    assert t.clean().retention_seconds == 7 * 86400  # deleted_data_retention's default
    assert data_files(str(tmp_path / "t")) == on_disk


def test_dry_run_lists_what_would_go_and_deletes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = compacted_table(path)
    dead = files_of(t, "COMPACTED")
    assert len(dead) == 8  # 4 stream files, 4 handoff outputs
    on_disk = data_files(str(path))
    version = t.version
    result = t.clean(0, force=True, dry_run=True)
    assert result.dry_run and result.version is None
    assert set(result.files) == dead
    sizes = sum(os.path.getsize(path / rel) for rel in dead)
    assert result.bytes == sizes
    assert data_files(str(path)) == on_disk
    assert t.refresh().version == version
    assert [h.operation for h in t.history(limit=1)] == ["COMPACT"]


def test_clean_deletes_dead_files_and_time_travel_says_they_are_gone(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = compacted_table(path)
    history = read_versions(t)
    handoff_version = next(h.version for h in t.history() if h.operation == "HANDOFF")
    compact_version = t.version
    dead = files_of(t, "COMPACTED")
    live = files_of(t, "SUCCESS")
    result = t.clean(0, force=True)
    assert set(result.files) == dead and result.version == t.version
    on_disk = data_files(str(path))
    assert not on_disk & dead, "deleted files are still there"
    assert on_disk == live
    for sid in ("0", "1", "2", "3", "0.0", "1.0", "2.0", "3.0"):
        assert not (path / "segments" / sid).exists(), f"empty directory of {sid} left behind"
    last = t.history(limit=1)[0]
    assert (last.operation, last.data_change) == ("CLEAN", False)
    assert last.parameters["files"] == "8"

    # Every version that needs a deleted file says so, naming the file; the rest read fine.
    assert t.to_arrow(version=0).num_rows == 0  # the empty table needs no file
    for v in range(1, compact_version):
        with pytest.raises(DataUnavailableError) as info:
            t.to_arrow(version=v)
        message = str(info.value)
        assert "removed by clean" in message and "is gone from storage" in message
        assert f"at version {v}" in message
        assert any(repr(rel) in message for rel in dead), message
    for v in (compact_version, t.version):
        assert canonical(t.to_arrow(version=v)).equals(history[compact_version])
    assert t.count_rows(version=handoff_version - 1) == 200  # counts come from the log alone
    assert_rows(cl.open_table(path).to_arrow(), range(200))
    assert t.verify().ok
    # Nothing is left to clean: no new version.
    again = t.clean(0, force=True)
    assert (again.files, again.version) == ((), None)


def test_clean_keeps_files_younger_than_the_retention(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = cl.create_table(path, SCHEMA, sort_columns=["ts"], properties=PROPS)
    t.append(make_rows(range(40)))
    t.finish_streaming()
    t.handoff()  # segment 0 COMPACTED now
    time.sleep(1.2)
    t.append(make_rows(range(40, 80)))
    t.finish_streaming()
    t.handoff()  # segment 1 COMPACTED a moment ago
    result = t.clean(1.0, force=True)
    assert {rel.split("/")[1] for rel in result.files} == {"0"}
    assert (path / "segments" / "1").exists()
    assert_rows(t.to_arrow(), range(80))


def test_log_retention_removes_old_log_files_only_before_a_retained_checkpoint(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t"
    t = checkpointed_table(path, log_retention="1s")
    time.sleep(1.3)
    for i in range(10, 13):  # versions 11..13, checkpoint 12 (younger than log_retention)
        t.append(make_rows(range(i * 10, (i + 1) * 10)))
    log_dir = path / "_carbonlite" / "log"
    before = sorted(os.listdir(log_dir))
    assert "00000000000000000012.checkpoint.json" in before

    dry = t.clean(dry_run=True)
    assert dry.files == () and dry.log_files
    assert sorted(os.listdir(log_dir)) == before

    result = t.clean()
    gone = {os.path.basename(p) for p in result.log_files}
    expected = {f"{v:020d}.json" for v in range(9)} | {f"{v:020d}.checkpoint.json" for v in (3, 6)}
    assert gone == expected  # manifests are younger than their minimum age: they stay
    assert set(dry.log_files) == set(result.log_files)
    left = sorted(os.listdir(log_dir))
    assert set(before) - set(left) == expected
    assert "00000000000000000009.checkpoint.json" in left and "00000000000000000009.json" in left

    # The table still opens and reads, from scratch and by time travel to retained versions.
    fresh = cl.open_table(path)
    assert fresh.version == 13
    assert_rows(fresh.to_arrow(), range(130))
    for v in (9, 10, 12, 13):
        assert_rows(fresh.to_arrow(version=v), range(v * 10))
    for v in (0, 5, 8):
        with pytest.raises(VersionNotFoundError, match="no longer in the log"):
            fresh.to_arrow(version=v)
    assert [h.version for h in fresh.history()] == list(range(13, 8, -1))
    assert fresh.verify().ok
    fresh.append(make_rows(range(130, 140)))
    assert_rows(cl.open_table(path).to_arrow(), range(140))


def test_log_retention_never_keeps_the_log_from_a_checkpoint_whose_manifest_is_damaged(
    tmp_path: Path,
) -> None:
    """The manifest checkpoint 9 added is garbage: checkpoint 9 cannot stand in for versions
    0..8, so clean keeps the log from checkpoint 6, and every version from 6 on stays readable
    by time travel."""
    path = tmp_path / "t"
    checkpointed_table(path, log_retention="0s")
    refs = cl.open_table(path).log.read_checkpoint(9).manifests.refs
    assert [r.max_version for r in refs] == [3, 6, 9]
    manifest = path / "_carbonlite" / "manifests" / refs[-1].name
    manifest.write_bytes(os.urandom(manifest.stat().st_size))
    result = cl.open_table(path).clean(0, force=True)
    gone = {os.path.basename(p) for p in result.log_files}
    assert gone == {f"{v:020d}.json" for v in range(6)} | {f"{3:020d}.checkpoint.json"}
    fresh = cl.open_table(path)
    for v in (6, 7, 8):
        assert_rows(fresh.to_arrow(version=v), range(v * 10))


def test_zero_retention_takes_dead_data_even_when_commit_times_run_ahead_of_the_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commit timestamps are kept increasing, so a burst of commits can stamp a segment's
    status a few milliseconds past this clock; ``retention=0`` still means every dead file."""
    t = compacted_table(tmp_path / "t", log_retention="0")
    dead = [s for s in t.segments() if s.status == "COMPACTED"]
    assert dead
    import carbonlite.compaction.clean as clean_module

    earliest = int(min(s.status_time for s in dead).timestamp() * 1000)
    monkeypatch.setattr(clean_module, "now_ms", lambda: earliest - 5)
    result = t.clean(retention=0, force=True)
    assert len(result.files) == sum(s.files for s in dead)
    assert {s.id for s in t.segments() if s.status == "COMPACTED" and s.files} == set()
