"""Hash-diff publishing: only changed partitions are rewritten, everything in one commit, the
publisher's state stored with it; against a dict-of-partitions model with hypothesis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import carbonlite as cl
from carbonlite.errors import InvalidOptionError

SCHEMA = pa.schema([("region", pa.string()), ("id", pa.int64()), ("name", pa.string())])


def part(region: str, ids: list[int], *, tag: str = "") -> pa.Table:
    return pa.table(
        {"region": [region] * len(ids), "id": ids, "name": [f"n{i}{tag}" for i in ids]},
        schema=SCHEMA,
    )


def canon(t: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in t.to_pylist())


@pytest.fixture
def table(tmp_path: Path) -> cl.Table:
    return cl.create_table(tmp_path / "t", SCHEMA, partition_by=["region"])


def test_first_publish_adds_every_partition(table: cl.Table) -> None:
    data = pa.concat_tables([part("eu", [1, 2]), part("us", [3]), part("ap", [4, 5, 6])])
    result = table.publish(data)
    assert result.version == table.version
    assert result.added == [("ap",), ("eu",), ("us",)]
    assert result.changed == result.unchanged == result.deleted == []
    assert canon(table.to_arrow()) == canon(data)
    assert all(p.content_hash for p in table.partitions())
    assert table.history(1)[0].operation == "PUBLISH"


def test_republishing_the_same_rows_in_another_order_writes_nothing(table: cl.Table) -> None:
    data = pa.concat_tables([part("eu", [1, 2, 3]), part("us", [4, 5])])
    table.publish(data)
    version, files = table.version, table.snapshot().segments.keys()
    shuffled = data.take(pa.array([4, 2, 0, 3, 1]))
    result = table.publish(
        {"eu": shuffled.filter(pc.field("region") == "eu"), "us": part("us", [5, 4])}
    )
    assert result.version is None
    assert result.unchanged == [("eu",), ("us",)]
    assert result.added == result.changed == result.deleted == []
    assert table.version == version and table.snapshot().segments.keys() == files


def test_only_changed_partitions_are_rewritten(table: cl.Table) -> None:
    table.publish(pa.concat_tables([part("eu", [1, 2]), part("us", [3]), part("ap", [4])]))
    before = {s.partition: s.segment_id for s in table.snapshot().live_segments()}
    result = table.publish(
        {"eu": part("eu", [1, 2]), "us": part("us", [3], tag="x"), "sa": part("sa", [9])}
    )
    assert result.changed == [("us",)] and result.added == [("sa",)]
    assert result.unchanged == [("eu",)] and result.deleted == []
    after = {s.partition: s.segment_id for s in table.snapshot().live_segments()}
    assert after[("eu",)] == before[("eu",)] and after[("ap",)] == before[("ap",)]
    assert after[("us",)] != before[("us",)]
    info = table.history(1)[0]
    assert info.rows == 2 and info.rows_removed == 1  # only us's new row and sa's were written
    assert canon(table.to_arrow()) == canon(
        pa.concat_tables(
            [part("eu", [1, 2]), part("us", [3], tag="x"), part("ap", [4]), part("sa", [9])]
        )
    )


def test_empty_payloads_delete_and_snapshot_mode_deletes_the_rest(table: cl.Table) -> None:
    table.publish(pa.concat_tables([part("eu", [1]), part("us", [2]), part("ap", [3])]))
    result = table.publish({"eu": part("eu", []), "xx": part("xx", [])})
    assert result.deleted == [("eu",)]  # "xx" was never there: nothing to delete
    assert canon(table.to_arrow()) == canon(pa.concat_tables([part("us", [2]), part("ap", [3])]))
    result = table.publish({"us": part("us", [2])}, mode="snapshot")
    assert result.unchanged == [("us",)] and result.deleted == [("ap",)]
    assert canon(table.to_arrow()) == canon(part("us", [2]))


def test_changes_across_a_publish_are_the_changed_partitions_rows(table: cl.Table) -> None:
    table.publish(pa.concat_tables([part("eu", [1, 2]), part("us", [3]), part("ap", [4])]))
    start = table.version
    table.publish({"eu": part("eu", [1, 2]), "us": part("us", [3, 30]), "ap": part("ap", [])})
    changes = table.changes(start + 1, table.version)
    got = sorted(
        (c, r, i)
        for c, r, i in zip(
            changes.column("_change_type").to_pylist(),
            changes.column("region").to_pylist(),
            changes.column("id").to_pylist(),
            strict=True,
        )
    )
    assert got == [
        ("delete", "ap", 4),
        ("delete", "us", 3),
        ("insert", "us", 3),
        ("insert", "us", 30),
    ]


def test_appends_since_a_publish_are_hashed_from_the_rows(table: cl.Table) -> None:
    table.publish({"eu": part("eu", [1])})
    table.append(part("eu", [2]))  # the stored hash no longer describes the partition
    (info,) = table.partitions()
    assert info.content_hash is None and info.rows == 2
    result = table.publish({"eu": part("eu", [2, 1])})
    assert result.unchanged == [("eu",)] and result.version is None
    result = table.publish({"eu": part("eu", [1])})
    assert result.changed == [("eu",)]
    assert canon(table.to_arrow()) == canon(part("eu", [1]))
    assert table.partitions()[0].content_hash is not None


def test_state_is_stored_in_the_publish_commit(table: cl.Table) -> None:
    deps = pa.table({"node": ["a", "b"], "depends_on": ["b", None]})
    result = table.publish({"eu": part("eu", [1])}, state={"deps": deps})
    first = result.version
    assert table.state("deps").equals(deps)
    # state alone (nothing changed) still commits
    fingerprints = pa.table({"key": ["eu"], "fp": [123]})
    result = table.publish({"eu": part("eu", [1])}, state={"fingerprints": fingerprints})
    assert result.version == first + 1 and result.unchanged == [("eu",)]
    assert table.state("deps").equals(deps)  # kept from the publish before
    assert table.state("fingerprints").equals(fingerprints)
    with pytest.raises(InvalidOptionError, match="fingerprints"):
        table.state("fingerprints", version=first)
    assert cl.open_table(table.path).state("deps").equals(deps)
    assert table.to_arrow().num_rows == 1  # state is never table data


def test_bad_publishes_are_refused_and_change_nothing(table: cl.Table, tmp_path: Path) -> None:
    table.publish({"eu": part("eu", [1])})
    version = table.version
    with pytest.raises(InvalidOptionError, match="partition region=us"):
        table.publish({"eu": part("us", [2])})
    with pytest.raises(InvalidOptionError, match="'incremental' or 'snapshot'"):
        table.publish({"eu": part("eu", [1])}, mode="full")  # type: ignore[arg-type]
    with pytest.raises(cl.SchemaMismatchError):
        table.publish({"eu": pa.table({"region": ["eu"], "id": ["not a number"]})})
    with pytest.raises(InvalidOptionError, match="state"):
        table.publish({"eu": part("eu", [1])}, state={"": pa.table({"a": [1]})})
    assert table.version == version
    plain = cl.create_table(tmp_path / "plain", SCHEMA)
    with pytest.raises(InvalidOptionError, match="partitioned"):
        plain.publish(part("eu", [1]))


# --- against a model -----------------------------------------------------------------------

REGIONS = ["a", "b", "c", "d"]
payload = st.lists(st.integers(0, 5), max_size=4)  # ids; an empty list deletes
step = st.tuples(
    st.sampled_from(["incremental", "snapshot"]),
    st.dictionaries(st.sampled_from(REGIONS), payload, max_size=4),
    st.randoms(use_true_random=False),
    st.booleans(),  # give an Arrow table (split by the table) instead of a mapping
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(step, min_size=1, max_size=6))
def test_publish_sequences_match_a_dict_of_partitions(
    tmp_path_factory: Any, steps: list[Any]
) -> None:
    t = cl.create_table(tmp_path_factory.mktemp("pub") / "t", SCHEMA, partition_by=["region"])
    model: dict[str, list[tuple[Any, ...]]] = {}
    at_version: dict[int, dict[str, list[tuple[Any, ...]]]] = {t.version: {}}
    for mode, given_parts, rnd, as_table in steps:
        tables = {r: part(r, ids) for r, ids in given_parts.items()}
        for r in tables:  # reordered rows must not look like a change
            order = list(range(tables[r].num_rows))
            rnd.shuffle(order)
            tables[r] = tables[r].take(pa.array(order, pa.int64()))
        if as_table:
            nonempty = [x for x in tables.values() if x.num_rows]
            data: Any = pa.concat_tables(nonempty) if nonempty else part("a", [])
            given_rows = {r: canon(x) for r, x in tables.items() if x.num_rows}
        else:
            data = tables
            given_rows = {r: canon(x) for r, x in tables.items()}
        before = {r: list(v) for r, v in model.items()}
        expect_changed = {r for r, v in given_rows.items() if v and r in before and before[r] != v}
        expect_added = {r for r, v in given_rows.items() if v and r not in before}
        expect_unchanged = {r for r, v in given_rows.items() if v and before.get(r) == v}
        expect_deleted = {r for r, v in given_rows.items() if not v and r in before}
        if mode == "snapshot":
            expect_deleted |= set(before) - set(given_rows)
        result = t.publish(data, mode=mode)
        assert {v[0] for v in result.changed} == expect_changed
        assert {v[0] for v in result.added} == expect_added
        assert {v[0] for v in result.unchanged} == expect_unchanged
        assert {v[0] for v in result.deleted} == expect_deleted
        for r in expect_deleted:
            model.pop(r, None)
        for r in expect_changed | expect_added:
            model[r] = given_rows[r]
        assert (result.version is None) == (not (expect_changed | expect_added | expect_deleted))
        if result.version is not None:
            at_version[result.version] = {r: list(v) for r, v in model.items()}
        assert canon(t.to_arrow()) == sorted(row for v in model.values() for row in v)
        assert {p.value[0]: p.rows for p in t.partitions()} == {r: len(v) for r, v in model.items()}
    for version, state in at_version.items():  # time travel: every version as it was
        got = canon(t.to_arrow(version=version))
        assert got == sorted(row for v in state.values() for row in v), version


def test_clean_deletes_state_files_no_retained_version_names(tmp_path: Path) -> None:
    import os
    import time

    t = cl.create_table(
        tmp_path / "t",
        SCHEMA,
        partition_by=["region"],
        properties={"checkpoint_interval": "2", "log_retention": "1s"},
    )
    state_dir = tmp_path / "t" / "_carbonlite" / "state"
    for i in range(3):  # versions 1-3; checkpoint 2
        t.publish({"eu": part("eu", [i])}, state={"step": pa.table({"i": [i]})})
    first = t.snapshot(1).states["step"].path.rsplit("/", 1)[-1]
    orphan = state_dir / ("0" * 32 + ".arrow")  # a publish that died before its commit
    orphan.write_bytes(b"not referenced")
    old = time.time() - 7200  # both written well before checkpoint 2, as they would be
    for f in (state_dir / first, orphan):
        os.utime(f, (old, old))
    time.sleep(1.2)
    for i in range(3, 6):  # newer checkpoints; the log before them expires
        t.publish({"eu": part("eu", [i])}, state={"step": pa.table({"i": [i]})})
    newest = {s.path.rsplit("/", 1)[-1] for s in t.snapshot().states.values()}
    before = {f.name for f in state_dir.iterdir()}
    result = t.clean()
    after = {f.name for f in state_dir.iterdir()}
    gone = before - after
    assert gone == {orphan.name, first} and newest <= after
    assert gone == {p.rsplit("/", 1)[-1] for p in result.log_files if "/state/" in p}
    kept = cl.open_table(t.path)
    assert kept.state("step").column("i").to_pylist() == [5]
    for h in kept.history():  # every version the log still has reads its state
        if h.operation == "PUBLISH":
            kept.state("step", version=h.version)


def test_partitions_and_publish_on_local_disk_and_s3(place: Any) -> None:
    """The same life on an object store: new objects for every write, state files put once,
    nothing orphaned after recover."""
    from tests.support.places import Place

    assert isinstance(place, Place)
    uri = place.uri("pub")
    t = cl.create_table(uri, SCHEMA, partition_by=["region"], storage_options=place.storage_options)
    t.append(pa.concat_tables([part("eu", [1, 2]), part("us", [3])]))
    t.append(part("eu", [4]))  # the eu segment takes a second write
    first = t.publish(
        {"eu": part("eu", [1, 2, 4]), "us": part("us", [3], tag="x")},
        state={"deps": pa.table({"n": [1]})},
    )
    assert first.unchanged == [("eu",)] and first.changed == [("us",)]
    t.overwrite(part("ap", [9]), partitions="dynamic")
    fresh = cl.open_table(uri, storage_options=place.storage_options)
    assert canon(fresh.to_arrow()) == canon(
        pa.concat_tables([part("eu", [1, 2, 4]), part("us", [3], tag="x"), part("ap", [9])])
    )
    assert [p.value for p in fresh.partitions()] == [("ap",), ("eu",), ("us",)]
    assert fresh.state("deps").column("n").to_pylist() == [1]
    assert fresh.to_arrow(filter=pc.field("region") == "us").num_rows == 1
    fresh.recover(min_age=0)
    assert fresh.verify().ok
    assert fresh.count_rows() == 5
