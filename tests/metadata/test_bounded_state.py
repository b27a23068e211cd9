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
