"""Table.restore: a new commit whose state equals an earlier version's."""

from __future__ import annotations

import collections
import datetime
import time

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

import carbonlite as cl

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
SMALL = {"streaming_segment_max_bytes": "2kb", "compaction_level_threshold": "2,2"}


def _batch(start: int, n: int = 10) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "v": [f"r{i}" for i in range(n)]})


def _rows(t: cl.Table, version=None) -> list[tuple]:
    data = t.to_arrow(version=version)
    return sorted(zip(data["id"].to_pylist(), data["v"].to_pylist(), strict=True))


def test_restore_undoes_appends_and_keeps_history(tmp_path):
    t = cl.create_table(str(tmp_path / "t"), SCHEMA, properties=SMALL)
    for i in range(4):
        t.append(_batch(i * 10))
    want = _rows(t, 2)
    before = _rows(t)
    result = t.restore(2)
    assert result.version == 5 and result.rows == len(want)
    assert _rows(t) == want
    assert _rows(t, 4) == before  # time travel still sees what came after
    record = t.history(1)[0]
    assert (record.operation, record.data_change, record.parameters["version"]) == (
        "RESTORE",
        True,
        "2",
    )
    # the change feed of the restore nets out to exactly the difference
    changes = t.changes(5)
    net = collections.Counter()
    for row in changes.to_pylist():
        net[(row["id"], row["v"])] += 1 if row["_change_type"] == "insert" else -1
    expected = collections.Counter(want)
    expected.subtract(collections.Counter(before))
    assert +net == +expected and -net == -expected
    t.append(_batch(100, 1))  # the table takes appends after a restore
    assert _rows(t) == sorted([*want, (100, "r0")])


def test_restore_across_compaction_only_is_not_a_data_change(tmp_path):
    t = cl.create_table(str(tmp_path / "t"), SCHEMA, properties=SMALL)
    for i in range(6):
        t.append(_batch(i * 10))
    t.finish_streaming()
    v = t.version
    t.handoff()
    t.compact("major")
    assert t.version > v
    result = t.restore(v)
    assert _rows(t) == _rows(t, v)
    assert t.history(1)[0].data_change is False  # streaming readers skip it
    assert [s.status for s in t.segments() if s.status in ("SUCCESS", "STREAMING_FINISH")]
    assert result.version == t.version


def test_restore_by_timestamp_schema_properties_and_txns(tmp_path):
    t = cl.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(_batch(0), txn=("app", 1))
    time.sleep(0.005)
    moment = datetime.datetime.now(datetime.timezone.utc)
    time.sleep(0.005)
    t.add_columns(pa.field("extra", pa.int64()))
    t.set_properties({"checkpoint_interval": "7"})
    t.append(pa.table({"id": [99], "extra": [1]}), txn=("app", 2), schema_mode="merge")
    t.restore(moment)
    assert t.schema == SCHEMA
    assert "checkpoint_interval" not in t.properties
    assert _rows(t) == _rows(t, 1)
    assert t.transaction_version("app") == 2  # never rolled back: no batch is replayed
    assert t.append(_batch(0), txn=("app", 2)).skipped


def test_restore_to_the_current_state_commits_nothing(tmp_path):
    t = cl.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(_batch(0))
    assert t.restore(t.version).version is None
    assert t.version == 1


def test_restore_refuses_when_clean_removed_the_data(tmp_path):
    t = cl.create_table(str(tmp_path / "t"), SCHEMA, properties={"log_retention": "0"})
    t.append(_batch(0))
    t.overwrite(_batch(50))
    t.clean(retention=0, force=True)
    with pytest.raises((cl.DataUnavailableError, cl.VersionNotFoundError)):
        t.restore(1)
    assert _rows(t) == sorted(zip(range(50, 60), [f"r{i}" for i in range(10)], strict=True))


def test_restore_refuses_bad_versions(tmp_path):
    t = cl.create_table(str(tmp_path / "t"), SCHEMA)
    with pytest.raises(cl.VersionNotFoundError):
        t.restore(5)
    with pytest.raises(cl.VersionNotFoundError, match="no version committed at or before"):
        t.restore(datetime.datetime(2000, 1, 1))
    with pytest.raises(cl.InvalidOptionError):
        t.restore(1.5)


OPS = st.lists(
    st.sampled_from(["append", "append", "overwrite", "finish", "handoff", "minor", "major"]),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, pick=st.integers(0, 1000), again=st.integers(0, 1000))
def test_restore_matches_time_travel_after_any_history(tmp_path_factory, ops, pick, again):
    """After any mix of appends, overwrites, handoffs and compactions, restoring version v
    gives exactly time travel's rows at v; restoring twice in a row too."""
    t = cl.create_table(str(tmp_path_factory.mktemp("r") / "t"), SCHEMA, properties=SMALL)
    n = 0
    for op in ops:
        if op == "append":
            t.append(_batch(n, 7))
            n += 7
        elif op == "overwrite":
            t.overwrite(_batch(n, 3))
            n += 3
        elif op == "finish":
            t.finish_streaming()
        elif op == "handoff":
            t.handoff()
        else:
            t.compact(op)
    for choice in (pick, again):
        target = choice % (t.version + 1)
        want = _rows(t, target)
        t.restore(target)
        assert _rows(t) == want, (ops, target)
        assert t.count_rows() == len(want)
    assert t.verify().ok


def test_recover_never_deletes_a_restores_copies_before_its_commit(tmp_path):
    """Found by the generated scenarios (seed 2536): a restore's copies are written ahead of
    its commit; ``recover(min_age=0)`` between the two deleted them, and the committed
    version named files that were gone. The copies are written under a lease."""
    from carbonlite.seams import listening
    from tests.support.holds import Holds

    uri = str(tmp_path / "t")
    t = cl.create_table(uri, SCHEMA, properties=SMALL)
    for i in range(6):
        t.append(_batch(i * 10))
    t.finish_streaming()
    t.handoff()  # the streaming segments are compacted: restoring version 3 copies them
    t.append(_batch(100))
    want = _rows(t, 3)
    holds = Holds()
    with listening(holds.listener):
        before_commit = holds.at("restore", "commit.before_put")
        thread = holds.start("restore", lambda: t.restore(3))
        before_commit.wait()
        recovered = cl.open_table(uri).recover(min_age=0)
        before_commit.release()
        thread.join()
    assert holds.outcomes["restore"].error is None
    assert _rows(cl.open_table(uri)) == want
    assert cl.open_table(uri).verify().ok, recovered
