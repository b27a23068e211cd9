"""Time travel by timestamp: commit timestamps increase; version_at finds the right one."""

from __future__ import annotations

import datetime

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

import carbonlite as cl
import carbonlite.writer.append as append_module
from carbonlite.metadata.timeline import commit_timestamp

UTC = datetime.timezone.utc


def _when(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=UTC)


@pytest.fixture
def table(tmp_path):
    return cl.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))


def test_a_writer_whose_clock_is_behind_still_stamps_increasing_times(table, monkeypatch):
    table.append(pa.table({"id": [1]}))
    first = commit_timestamp(table.log, 1)
    monkeypatch.setattr(append_module, "now_ms", lambda: first - 60_000)  # a minute behind
    table.append(pa.table({"id": [2]}))
    table.append(pa.table({"id": [3]}))
    stamps = [commit_timestamp(table.log, v) for v in range(4)]
    assert stamps[2:] == [first + 1, first + 2]
    assert stamps == sorted(stamps) and len(set(stamps)) == 4
    assert table.history(1)[0].timestamp == _when(first + 2)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(gaps=st.lists(st.integers(0, 5_000), min_size=1, max_size=25), probes=st.data())
def test_version_at_is_the_last_version_at_or_before(tmp_path_factory, gaps, probes):
    t = cl.create_table(
        str(tmp_path_factory.mktemp("tl") / "t"),
        pa.schema([("id", pa.int64())]),
        properties={"checkpoint_interval": "4"},
    )
    clock = [commit_timestamp(t.log, 0)]
    original = append_module.now_ms
    try:
        for n, gap in enumerate(gaps):
            clock[0] += gap
            append_module.now_ms = lambda: clock[0]
            t.append(pa.table({"id": [n]}))
    finally:
        append_module.now_ms = original
    stamps = [commit_timestamp(t.log, v) for v in range(t.version + 1)]
    for _ in range(10):
        ms = stamps[0] + probes.draw(st.integers(0, sum(gaps) + 10))
        want = max(v for v, s in enumerate(stamps) if s <= ms)
        assert t.version_at(_when(ms)) == want
        assert t.count_rows(version=_when(ms)) == want  # one row per append
    with pytest.raises(cl.VersionNotFoundError, match="no version committed at or before"):
        t.version_at(_when(stamps[0] - 1))


def test_naive_datetimes_and_iso_strings_are_utc(table):
    table.append(pa.table({"id": [1]}))
    ms = commit_timestamp(table.log, 1)
    aware = _when(ms)
    assert table.version_at(aware) == 1
    assert table.version_at(aware.replace(tzinfo=None)) == 1
    assert table.version_at(aware.isoformat()) == 1
    assert table.version_at(aware.isoformat().replace("+00:00", "Z")) == 1
    assert table.version_at(_when(ms - 1)) == 0
    assert table.to_arrow(version=_when(ms - 1)).num_rows == 0
    assert [s.id for s in table.segments(version=aware)] == ["0"]
    changes = table.changes(_when(ms), _when(ms))
    assert changes["_commit_version"].to_pylist() == [1]
    with pytest.raises(cl.InvalidOptionError, match="ISO 8601"):
        table.version_at("yesterday")
    with pytest.raises(cl.InvalidOptionError, match="not the date"):
        table.version_at(datetime.date.today())


def test_version_at_after_clean_removed_old_versions(tmp_path):
    t = cl.create_table(
        str(tmp_path / "t"),
        pa.schema([("id", pa.int64())]),
        properties={"checkpoint_interval": "3", "log_retention": "0"},
    )
    for n in range(7):
        t.append(pa.table({"id": [n]}))
    t.clean(retention=0, force=True)
    assert not t.log.storage.exists(t.log.version_path(0))
    oldest = min(v for v in range(t.version + 1) if t.log.storage.exists(t.log.version_path(v)))
    ms = commit_timestamp(t.log, oldest)
    assert t.version_at(_when(ms)) == oldest
    with pytest.raises(cl.VersionNotFoundError, match=f"oldest version in its log is {oldest}"):
        t.version_at(_when(ms - 1))


def test_first_version_at_or_after(table):
    from carbonlite.errors import VersionNotFoundError
    from carbonlite.metadata.timeline import first_version_at_or_after

    for n in range(3):
        table.append(pa.table({"id": [n]}))
    snap = table.refresh()._snapshot
    stamps = [commit_timestamp(table.log, v) for v in range(4)]
    assert [first_version_at_or_after(table.log, snap, ms) for ms in stamps] == [0, 1, 2, 3]
    assert first_version_at_or_after(table.log, snap, stamps[1] + 1) == 2
    assert first_version_at_or_after(table.log, snap, stamps[0] - 10_000) == 0
    with pytest.raises(VersionNotFoundError, match="at or after"):
        first_version_at_or_after(table.log, snap, stamps[3] + 1)
