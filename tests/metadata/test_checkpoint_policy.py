"""The checkpoint policy (``metadata/checkpoint_policy.py``): a checkpoint is due every
``checkpoint_interval`` versions and, between them, once the log entries since the last one
reach ``checkpoint_max_entries`` (plus two per segment and file). Writers write them there,
readers, writers catching up and time travel find them without listing the log, and opening
replays a bounded number of versions and entries whatever the commits hold."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import carbonlite as cl
from carbonlite.format.stats import ColumnStats
from carbonlite.metadata import (
    Action,
    BlockletEntry,
    BlockletsAppended,
    CommitInfo,
    SegmentAdded,
    SegmentStatusChanged,
    Snapshot,
    TableMetadata,
)
from carbonlite.metadata.checkpoint import decode_checkpoint, encode_checkpoint
from carbonlite.metadata.checkpoint_policy import (
    RECENT_INTERVALS,
    STATE_ENTRIES,
    VERSION_ENTRIES,
    CheckpointPolicy,
    checkpoint_due,
    log_entries,
)
from carbonlite.metadata.manifest import ManifestStore
from carbonlite.storage.local import LocalStorage
from tests.metadata.strategies import snapshot_state

SCHEMA = pa.schema([("id", pa.int64())])


def rows(first: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(first, first + n), pa.int64())})


def new_table(path: Path, **properties: str) -> cl.Table:
    """A table of one-row blocklets: an append of n rows commits n blocklet entries."""
    return cl.create_table(path, SCHEMA, properties={"blocklet_max_rows": "1", **properties})


def checkpoints(t: cl.Table) -> list[int]:
    return t.log.listing().checkpoints


class StorageCalls:
    """Every ``read`` and ``list`` of the (process-wide) local storage, by path."""

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.lists: list[str] = []

    def versions_read(self) -> list[int]:
        names = [p.rsplit("/", 1)[-1] for p in self.reads]
        return [int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json")]

    def checkpoints_read(self) -> list[int]:
        names = [p.rsplit("/", 1)[-1] for p in self.reads]
        return [int(n[:20]) for n in names if n.endswith(".checkpoint.json")]

    def clear(self) -> None:
        self.reads.clear()
        self.lists.clear()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[StorageCalls]:
    seen = StorageCalls()
    read, listing = LocalStorage.read, LocalStorage.list

    def counted_read(self: LocalStorage, path: str) -> bytes:
        seen.reads.append(path)
        return read(self, path)

    def counted_list(self: LocalStorage, path: str, **kwargs: object) -> list:
        seen.lists.append(path)
        return listing(self, path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LocalStorage, "read", counted_read)
    monkeypatch.setattr(LocalStorage, "list", counted_list)
    yield seen


# --- the policy itself ---------------------------------------------------------------------------


def test_what_a_version_weighs() -> None:
    entry = BlockletEntry(0, 10, 1)
    info = CommitInfo("APPEND", 1, True)
    append = BlockletsAppended("0", "segments/0/f.cblt", 0, 30, (entry,) * 3)
    assert log_entries([info]) == VERSION_ENTRIES + 1
    assert log_entries([append, info]) == VERSION_ENTRIES + 2 + 3


def test_due_at_multiples_and_at_the_bound_grown_by_the_state() -> None:
    policy = CheckpointPolicy(interval=10, max_entries=50)
    assert not policy.due(0, 10**6, 0)  # create_table's version
    assert policy.due(10, 0, 0) and policy.due(20, 1, 100)
    assert not policy.due(11, 49, 0) and policy.due(11, 50, 0)
    assert not policy.due(11, 50 + STATE_ENTRIES * 3 - 1, 3)
    assert policy.due(11, 50 + STATE_ENTRIES * 3, 3)


def test_a_checkpoint_is_written_between_multiples_once_entries_pass_the_bound(
    tmp_path: Path,
) -> None:
    t = new_table(tmp_path / "t", checkpoint_max_entries="50")  # interval: 100
    for i in range(20):
        t.append(rows(10 * i, 10))
    # version 0 weighs 10 and every append 20 (21 with its addSegment): the bound, 50 plus 2
    # per segment and file, is passed at version 3 (10 + 21 + 20 + 20), then every 3 versions
    assert checkpoints(t) == [3, 6, 9, 12, 15, 18]
    assert t.log.last_checkpoint() == 18
    assert [v for v in range(1, 21) if checkpoint_due(t.snapshot(v))] == checkpoints(t)
    fresh = cl.open_table(t.path)
    assert fresh.version == 20 and fresh.count_rows() == 200
    assert snapshot_state(fresh.snapshot()) == snapshot_state(t.snapshot())


def test_the_interval_still_makes_multiples_due(tmp_path: Path) -> None:
    t = new_table(tmp_path / "t", checkpoint_interval="4", checkpoint_max_entries="100000")
    for i in range(9):
        t.append(rows(i, 1))
    assert checkpoints(t) == [4, 8]


# --- opening replays a bounded amount ----------------------------------------------------------


@pytest.mark.parametrize("per_version", [1, 7, 45, 300])
def test_opening_replays_less_than_the_bound(
    tmp_path: Path, calls: StorageCalls, per_version: int
) -> None:
    bound = 48
    t = new_table(tmp_path / "t", checkpoint_max_entries=str(bound))
    for i in range(30):
        t.append(rows(per_version * i, per_version))
    calls.clear()
    fresh = cl.open_table(t.path)
    assert fresh.count_rows() == 30 * per_version
    assert calls.lists == []  # no listing
    start = fresh.log.last_checkpoint()
    assert start is not None and calls.checkpoints_read() == [start]
    replayed = calls.versions_read()
    assert replayed == list(range(start + 1, 30 + 2))  # then the miss that ends the log
    snapshot = fresh.snapshot()
    entries = sum(len(f.tail) for _, f in snapshot.iter_files())
    if start == 30:  # every version weighs more than the bound: nothing to replay
        assert per_version + VERSION_ENTRIES + 2 >= bound and entries == 0
        return
    # what the open replayed weighs less than the bound, or it would have been checkpointed
    state = len(snapshot.segments) + snapshot.num_files
    weight = (VERSION_ENTRIES + 2) * (len(replayed) - 1) + entries
    assert weight == snapshot.replay_entries < bound + STATE_ENTRIES * state


# --- readers, writers and time travel find checkpoints between multiples ------------------------


def test_a_reader_catching_up_rebases_on_checkpoints_between_multiples(
    tmp_path: Path, calls: StorageCalls
) -> None:
    t = new_table(tmp_path / "t", checkpoint_max_entries="50")
    reader = cl.open_table(t.path)  # version 0
    for i in range(20):
        t.append(rows(10 * i, 10))
    calls.clear()
    reader.refresh()
    assert calls.lists == []
    # it read each checkpoint the writer wrote as it passed it, none of the others
    assert calls.checkpoints_read() == [3, 6, 9, 12, 15, 18]
    got = reader.snapshot()
    assert got.manifests is not None and t.snapshot().manifests is not None
    assert [r.name for r in got.manifests.refs] == [r.name for r in t.snapshot().manifests.refs]
    assert sum(len(f.tail) for _, f in got.iter_files()) == 20  # versions 19 and 20 only
    assert snapshot_state(got) == snapshot_state(t.snapshot())


def test_a_writer_losing_races_rebases_on_the_winners_checkpoints(tmp_path: Path) -> None:
    t = new_table(tmp_path / "t", checkpoint_max_entries="50")
    stale = cl.open_table(t.path, writer_id="stale")
    for i in range(10):
        t.append(rows(10 * i, 10))
    stale.append(rows(1000, 10))  # loses the race for version 1, catches up to 10, commits 11
    assert stale.version == 11
    # it stands on the winners' checkpoint at 9: only versions 10 and 11 are its own entries
    assert sum(len(f.tail) for _, f in stale.snapshot().iter_files()) == 20
    assert checkpoints(t) == [3, 6, 9]
    assert cl.open_table(t.path).count_rows() == 110


@pytest.fixture
def long_log(tmp_path: Path) -> cl.Table:
    """Interval 10 and a bound met every 3 appends of 10 entries: checkpoints at 3, 6, 9, 10,
    13, 16, 19, 20, ..., 33 (43 versions)."""
    t = new_table(tmp_path / "t", checkpoint_interval="10", checkpoint_max_entries="50")
    for i in range(43):
        t.append(rows(10 * i, 10))
    assert checkpoints(t) == [3, 6, 9, 10, 13, 16, 19, 20, 23, 26, 29, 30, 33, 36, 39, 40, 43]
    return t


@pytest.mark.parametrize(
    "version",
    [
        15,  # far behind the latest: the checkpoint at 20 lists 13
        27,  # the checkpoint at 30 lists 23 and 26
        34,  # within two intervals of the latest: its own list has 33
        36,  # a checkpointed version itself
    ],
)
def test_time_travel_starts_from_the_checkpoint_just_below_without_listing(
    long_log: cl.Table, calls: StorageCalls, version: int
) -> None:
    t = long_log
    expected = snapshot_state(t.snapshot(version))
    below = max(c for c in checkpoints(t) if c <= version)
    for v in range(1, below + 1):  # nothing before that checkpoint can help any more
        (Path(t.log.version_path(v))).unlink()
    t = cl.open_table(t.path)
    calls.clear()
    got = t.snapshot(version)
    assert snapshot_state(got) == expected
    assert calls.lists == []
    assert calls.checkpoints_read()[-1] == below
    assert calls.versions_read() == list(range(below + 1, version + 1))


def test_time_travel_still_works_when_a_checkpoint_is_missing(
    long_log: cl.Table, calls: StorageCalls
) -> None:
    t = long_log
    expected = snapshot_state(t.snapshot(15))
    for part in t.log.checkpoint_files(13):
        Path(part).unlink(missing_ok=True)
    calls.clear()
    assert snapshot_state(cl.open_table(t.path).snapshot(15)) == expected
    assert calls.lists == []
    assert 10 in calls.checkpoints_read()  # the multiple below: replayed from there


# --- the count is the same on every path (hypothesis, no storage) -------------------------------

_INFO = CommitInfo("APPEND", 1, True)


def _append(snapshot: Snapshot, sid: str, n: int) -> list[Action]:
    path = f"segments/{sid}/f.cblt"
    f = snapshot.segments[sid].files.get(path)
    start = 0 if f is None else f.committed_length
    stats = {"id": ColumnStats(0, 1, 2)}
    entries = tuple(BlockletEntry(start + 10 * k, 10, 1, stats) for k in range(n))
    return [BlockletsAppended(sid, path, start, start + 10 * n, entries), _INFO]


def _roll(sid: int) -> list[Action]:
    return [
        SegmentStatusChanged(str(sid), "STREAMING_FINISH"),
        SegmentAdded(str(sid + 1), "STREAMING", "STREAMING"),
        _INFO,
    ]


def _through_checkpoint(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` written as a checkpoint document and read back (its entries aside)."""
    store = ManifestStore(lambda ref: b"", lambda ref: ref.name)
    data = encode_checkpoint(snapshot, ())
    return decode_checkpoint(data, snapshot.table_path, where="test", store=store)


@settings(max_examples=60, deadline=None)
@given(
    interval=st.integers(1, 12),
    bound=st.integers(1, 120),
    steps=st.lists(st.integers(0, 60), max_size=60),  # 0: a new segment, else n entries
    cut=st.integers(0, 60),
)
def test_the_count_is_a_function_of_the_log(
    interval: int, bound: int, steps: list[int], cut: int
) -> None:
    props = {"checkpoint_interval": str(interval), "checkpoint_max_entries": str(bound)}
    snapshot = Snapshot.from_actions(
        "memory://t", 0, [TableMetadata("t", SCHEMA, properties=props), _INFO]
    )
    snapshot = snapshot.apply(1, [SegmentAdded("0", "STREAMING", "STREAMING"), _INFO])
    history = [snapshot]
    logged: list[list[Action]] = [[]]
    due: list[int] = [1] if checkpoint_due(snapshot) else []
    sid = 0
    for n in steps:
        actions = _append(snapshot, str(sid), n) if n else _roll(sid)
        sid += 0 if n else 1
        snapshot = snapshot.apply(snapshot.version + 1, actions)
        history.append(snapshot)
        logged.append(actions)
        v = snapshot.version
        state = len(snapshot.segments) + snapshot.num_files
        assert snapshot.num_files == sum(len(s.files) for s in snapshot.segments.values())
        if checkpoint_due(snapshot):
            due.append(v)
        else:  # never does the bound's worth accumulate without a checkpoint being due
            assert snapshot.replay_entries < bound + STATE_ENTRIES * state
        assert v % interval or checkpoint_due(snapshot)  # multiples always are
        window = v - RECENT_INTERVALS * interval
        assert list(snapshot.recent_checkpoints) == [d for d in due if d % interval and d > window]
    # a reader starting from any checkpoint (also one written where none was due, as clean
    # and upgrade write them) counts exactly as one that replayed everything
    at = min(cut, len(history) - 1)
    replayed = _through_checkpoint(history[at])
    for later, actions in zip(history[at + 1 :], logged[at + 1 :], strict=True):
        replayed = replayed.apply(later.version, actions)
        assert replayed.replay_entries == later.replay_entries
        assert replayed.recent_checkpoints == later.recent_checkpoints
        assert replayed.num_files == later.num_files
