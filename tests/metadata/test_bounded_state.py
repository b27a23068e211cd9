"""Bounded state: opening, time travel to a retained version and ``history(limit=n)`` never
list the log; ``clean`` makes the state forget what it removed and the log and manifest
directories keep only what retained versions need."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.storage.local import LocalStorage

SCHEMA = pa.schema([("id", pa.int64())])


def rows(first: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(first, first + n), pa.int64())})


def test_open_time_travel_and_history_never_list(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = cl.create_table(path, SCHEMA, properties={"checkpoint_interval": "5"})
    for i in range(23):
        t.append(rows(i * 10, 10))
    with pytest.MonkeyPatch.context() as patch:
        listed: list[str] = []

        def refuse(self: LocalStorage, p: str, *, recursive: bool = False) -> list:
            listed.append(p)
            raise AssertionError(f"listed {p}")

        patch.setattr(LocalStorage, "list", refuse)
        fresh = cl.open_table(path)
        assert fresh.version == 23 and fresh.count_rows() == 230
        for v in (1, 4, 5, 9, 12, 20, 22, 23):  # before, at and between checkpoints
            assert fresh.count_rows(version=v) == 10 * v
            assert fresh.to_arrow(version=v).num_rows == 10 * v
        assert [h.version for h in fresh.history(limit=3)] == [23, 22, 21]
        assert [h.version for h in fresh.history()] == list(range(23, -1, -1))
        fresh.append(rows(230, 10))
        assert cl.open_table(path).count_rows() == 240
        assert listed == []


def test_clean_forgets_segments_and_bounds_the_log(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = cl.create_table(
        path,
        SCHEMA,
        properties={
            "checkpoint_interval": "4",
            "log_retention": "0s",
            "streaming_segment_max_bytes": "1KB",  # every append rolls over
        },
    )
    sizes = []
    for day in range(6):
        for i in range(12):
            t.append(rows((day * 12 + i) * 10, 10))
        t.handoff()
        t.compact("minor")
        time.sleep(0.01)
        t.clean(0, force=True)
        manifests = path / "_carbonlite" / "manifests"
        old = time.time() - 3600  # unreferenced manifests older than clean's minimum age
        for m in manifests.iterdir():
            os.utime(m, (old, old))
        t.clean(0, force=True)
        snap = t.snapshot()
        assert all(s.is_live for s in snap.segments.values()), "cleaned segments are forgotten"
        log_files = len(os.listdir(path / "_carbonlite" / "log"))
        sizes.append((len(snap.segments), log_files, len(os.listdir(manifests))))
        assert t.count_rows() == (day + 1) * 120
    # the live state, the log and the manifests stay within the same bounds day after day
    assert max(s[0] for s in sizes[2:]) <= max(s[0] for s in sizes[:2]) + 4, sizes
    assert max(s[1] for s in sizes[2:]) <= max(s[1] for s in sizes[:2]) + 4, sizes
    assert max(s[2] for s in sizes[2:]) <= max(s[2] for s in sizes[:2]) + 8, sizes
    fresh = cl.open_table(path)
    assert sorted(fresh.to_arrow().column("id").to_pylist()) == list(range(720))
    assert fresh.snapshot().next_segment > max(
        int(s.split(".")[0]) for s in fresh.snapshot().segments
    )


def test_a_checkpoint_only_encodes_what_was_committed_since_the_last(tmp_path: Path) -> None:
    """Writer ``b`` opened before ``a`` checkpointed: refreshing past ``a``'s checkpoint
    rebases ``b`` on it, so ``b``'s own checkpoint writes a manifest of its interval's entries
    only, and reuses every manifest before it."""
    path = tmp_path / "t"
    a = cl.create_table(
        path, SCHEMA, properties={"checkpoint_interval": "5", "checkpoint_max_entries": "100000"}
    )
    b = cl.open_table(path)
    for i in range(5):  # versions 1..5: a checkpoints version 5
        a.append(rows(i * 10, 10))
    b.refresh()
    snap = b.snapshot()
    assert snap.manifests is not None and [r.max_version for r in snap.manifests.refs] == [5]
    assert not any(f.has_tail for s in snap.segments.values() for f in s.files.values())
    for i in range(5, 10):  # versions 6..10: b checkpoints version 10
        b.append(rows(i * 10, 10))
    refs = b.log.read_checkpoint(10).manifests.refs
    assert [r.name for r in refs[:1]] == [snap.manifests.refs[0].name]  # reused as is
    assert [(r.min_version, r.max_version, r.entries) for r in refs] == [(0, 5, 5), (6, 10, 5)]
    assert sorted(cl.open_table(path).to_arrow().column("id").to_pylist()) == list(range(100))
