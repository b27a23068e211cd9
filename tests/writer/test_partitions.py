"""Partitioned tables: rows routed to one segment per partition, pruning by partition value
from metadata alone, dynamic partition overwrite, and handoff/compaction that never mix
partitions."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.errors import InvalidOptionError
from carbonlite.metadata import FileAppendable, SegmentNotWritableError

UTC = dt.timezone.utc
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("region", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("value", pa.float64()),
    ]
)
DAY = dt.datetime(2026, 11, 24, tzinfo=UTC)


def rows(ids: range, *, regions: tuple[str, ...] = ("eu", "us", "ap"), days: int = 2) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": ids,
            "region": [regions[i % len(regions)] for i in ids],
            "ts": [DAY + dt.timedelta(days=i % days, minutes=i) for i in ids],
            "value": [i * 0.5 for i in ids],
        },
        schema=SCHEMA,
    )


def sorted_rows(t: pa.Table) -> pa.Table:
    return t.sort_by("id").combine_chunks()


@pytest.fixture
def table(tmp_path: Path) -> cl.Table:
    return cl.create_table(tmp_path / "t", SCHEMA, partition_by=["region", "day(ts)"])


def test_rows_go_to_one_segment_per_partition(table: cl.Table) -> None:
    data = rows(range(60))
    table.append(data)
    assert sorted_rows(table.to_arrow()).equals(sorted_rows(data))
    snap = table.snapshot()
    live = snap.live_segments()
    assert len(live) == 6  # 3 regions x 2 days
    assert all(seg.partition is not None for seg in live)
    infos = table.partitions()
    days = [DAY.date(), (DAY + dt.timedelta(days=1)).date()]
    assert [p.value for p in infos] == [(r, d) for r in ("ap", "eu", "us") for d in days]
    assert all(p.segments == 1 and p.files == 1 and p.rows == 10 for p in infos)
    for p in infos:
        region, day = p.value
        start = dt.datetime.combine(day, dt.time(), tzinfo=UTC)
        expr = (
            (pc.field("region") == region)
            & (pc.field("ts") >= start)
            & (pc.field("ts") < start + dt.timedelta(days=1))
        )
        assert table.to_arrow(filter=expr).num_rows == 10
        assert p.name == f"region={region}/ts_day={day.isoformat()}"


def test_later_appends_grow_the_partitions_streaming_segments(table: cl.Table) -> None:
    table.append(rows(range(60)))
    first = {s.segment_id for s in table.snapshot().live_segments()}
    table.append(rows(range(60, 120)))
    assert {s.segment_id for s in table.snapshot().live_segments()} == first
    table.append(rows(range(120, 130), regions=("sa",)))  # a new partition: a new segment
    assert len(table.snapshot().live_segments()) == 8
    assert table.count_rows() == 130


def test_a_filter_on_partition_columns_prunes_whole_segments(table: cl.Table) -> None:
    data = rows(range(600))
    table.append(data)
    expr = pc.field("region") == "eu"
    plan = table.plan_splits(filter=expr)
    segments = {s.segment_id for s in plan.splits}
    eu = {s.segment_id for s in table.snapshot().live_segments() if s.partition[0] == "eu"}
    assert segments == eu
    assert sorted_rows(table.to_arrow(filter=expr)).equals(sorted_rows(data.filter(expr)))
    # a range on ts keeps only the day(ts) partitions it can reach
    second_day = pc.field("ts") >= DAY + dt.timedelta(days=1)
    plan = table.plan_splits(filter=second_day)
    spec_days = {table.snapshot().segments[s.segment_id].partition for s in plan.splits}
    assert len(spec_days) == 3  # one day of each of the three regions
    assert sorted_rows(table.to_arrow(filter=second_day)).equals(
        sorted_rows(data.filter(second_day))
    )
    # not, or, is_null stay exact
    for expr in (
        ~(pc.field("region") == "eu"),
        (pc.field("region") == "eu") | (pc.field("region") == "us"),
        pc.field("region").is_null(),
        pc.field("region").isin(["us", "xx"]),
    ):
        assert sorted_rows(table.to_arrow(filter=expr)).equals(sorted_rows(data.filter(expr)))


def test_null_partition_values_have_a_partition_of_their_own(table: cl.Table) -> None:
    data = pa.table(
        {
            "id": [1, 2, 3],
            "region": ["eu", None, None],
            "ts": [DAY, DAY, None],
            "value": [1.0, 2.0, 3.0],
        },
        schema=SCHEMA,
    )
    table.append(data)
    assert len(table.partitions()) == 3
    assert table.to_arrow(filter=pc.field("region").is_null()).num_rows == 2
    assert table.to_arrow(filter=pc.field("ts").is_null()).column("id").to_pylist() == [3]
    assert table.to_arrow(filter=pc.field("region") == "eu").column("id").to_pylist() == [1]


def test_dynamic_overwrite_replaces_only_the_partitions_given(table: cl.Table) -> None:
    data = rows(range(60))
    table.append(data)
    eu_new = rows(range(1000, 1010), regions=("eu",), days=1)
    table.overwrite(eu_new, partitions="dynamic")
    untouched = data.filter(
        ~((pc.field("region") == "eu") & (pc.field("ts") < DAY + dt.timedelta(days=1)))
    )
    expected = pa.concat_tables([untouched, eu_new])
    assert sorted_rows(table.to_arrow()).equals(sorted_rows(expected))
    table.overwrite(eu_new)  # "all": everything else goes
    assert sorted_rows(table.to_arrow()).equals(sorted_rows(eu_new))
    with pytest.raises(InvalidOptionError, match="'all' or 'dynamic'"):
        table.overwrite(eu_new, partitions="static")  # type: ignore[arg-type]


def test_dynamic_overwrite_of_an_unpartitioned_table_replaces_everything(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "u", SCHEMA)
    t.append(rows(range(10)))
    t.overwrite(rows(range(5)), partitions="dynamic")
    assert t.count_rows() == 5
    assert t.partitions() == []


def test_handoff_and_compaction_keep_partitions_apart(tmp_path: Path) -> None:
    t = cl.create_table(
        tmp_path / "t",
        SCHEMA,
        partition_by=["region"],
        sort_columns=["id"],
        properties={"compaction_level_threshold": "2,2"},
    )
    data = []
    for n in range(4):
        batch = rows(range(n * 20, n * 20 + 20), regions=("eu", "us"))
        data.append(batch)
        t.append(batch)
        closed = t.finish_streaming()
        assert closed is not None and len(closed.split(",")) == 2
        t.handoff()
    snap = t.snapshot()
    success = [s for s in snap.live_segments() if s.status == "SUCCESS"]
    assert len(success) == 8 and all(s.format == "COLUMNAR" for s in success)
    t.compact("minor")
    live = t.snapshot().live_segments()
    assert sorted(s.partition for s in live) == [("eu",), ("us",)]  # 4 -> 2 -> 1 per partition
    assert all(s.level == 2 for s in live)
    everything = pa.concat_tables(data)
    assert sorted_rows(t.to_arrow()).equals(sorted_rows(everything))
    for seg in live:
        region = seg.partition[0]
        got = t.to_arrow(filter=pc.field("region") == region)
        assert got.num_rows == seg.live_rows
        assert set(got.column("region").to_pylist()) == {region}


def test_custom_compaction_refuses_to_mix_partitions(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA, partition_by=["region"])
    t.append(rows(range(10), regions=("eu", "us")))
    t.finish_streaming()
    t.handoff()
    ids = [s.segment_id for s in t.snapshot().live_segments()]
    with pytest.raises(InvalidOptionError, match="different partitions"):
        t.compact("custom", segments=ids)


def test_partitions_survive_checkpoints_and_time_travel(tmp_path: Path) -> None:
    t = cl.create_table(
        tmp_path / "t",
        SCHEMA,
        partition_by=["bucket(4, id)"],
        properties={"checkpoint_interval": "2"},
    )
    versions = []
    for n in range(5):
        t.append(rows(range(n * 10, n * 10 + 10)))
        versions.append(t.version)
    reopened = cl.open_table(t.path)
    assert reopened.partition_by == ("bucket(4, id)",)
    assert [p.rows for p in reopened.partitions()] == [p.rows for p in t.partitions()]
    assert sum(p.rows for p in reopened.partitions(versions[1])) == 20
    for seg in reopened.snapshot().live_segments():
        (bucket,) = seg.partition
        assert 0 <= bucket < 4
    probe = reopened.to_arrow(filter=pc.field("id") == 17)
    assert probe.column("id").to_pylist() == [17]


def test_a_segment_of_another_partition_is_not_adopted(table: cl.Table) -> None:
    table.append(rows(range(3), regions=("eu",), days=1))
    snap = table.snapshot()
    (seg,) = snap.live_segments()
    same = FileAppendable(seg.segment_id, "x.cblt", 0, creates=True, partition=seg.partition)
    same.check(snap, snap.version)  # a concurrent writer made it for our partition: adopt it
    other = FileAppendable(seg.segment_id, "x.cblt", 0, creates=True, partition=("us", "x"))
    with pytest.raises(SegmentNotWritableError):
        other.check(snap, snap.version)


def test_concurrent_writers_of_different_partitions_both_land(tmp_path: Path) -> None:
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA, partition_by=["region"])
    a = cl.open_table(path, writer_id="a")
    b = cl.open_table(path, writer_id="b")
    stale = a.snapshot()
    b.append(rows(range(5), regions=("us",)))  # takes the next segment id for "us"
    # a still plans on the version before b's commit: its new "eu" segment gets the same id
    result, _ = a._writer.write(a.log, stale, rows(range(5, 10), regions=("eu",)))
    assert result.version is not None
    t = cl.open_table(path)
    assert sorted((s.partition, s.live_rows) for s in t.snapshot().live_segments()) == [
        (("eu",), 5),
        (("us",), 5),
    ]
    assert sorted(t.to_arrow(filter=pc.field("region") == "eu").column("id").to_pylist()) == [
        5,
        6,
        7,
        8,
        9,
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (["nope"], "nope"),
        (["day(value)"], "value"),
        (["bucket(0, id)"], "bucket"),
        (["region", "region"], "region"),
        (["frobnicate(ts)"], "frobnicate"),
    ],
)
def test_bad_partition_specs_are_refused(tmp_path: Path, spec: list[str], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        cl.create_table(tmp_path / "t", SCHEMA, partition_by=spec)
    assert not (tmp_path / "t").exists()
    with pytest.raises(InvalidOptionError, match="list of partition fields"):
        cl.create_table(tmp_path / "t", SCHEMA, partition_by="region")  # type: ignore[arg-type]


def test_a_partitioned_primary_key_table_upserts_across_partitions(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "t", SCHEMA, primary_key=["id"], partition_by=["region"])
    t.append(rows(range(6)))  # ids 0..5 over eu, us, ap
    moved = rows(range(0, 2), regions=("sa",))  # ids 0 and 1 change partition
    t.append(moved)
    got = sorted_rows(t.to_arrow())
    assert got.column("id").to_pylist() == list(range(6))
    assert got.column("region").to_pylist()[:2] == ["sa", "sa"]
    assert {p.value[0]: p.rows for p in t.partitions()} == {"sa": 2, "eu": 1, "us": 1, "ap": 2}
    assert t.to_arrow(filter=pc.field("region") == "eu").column("id").to_pylist() == [3]
