"""Handoff and minor / major / custom compaction, one rule at a time: segment ids and levels,
statuses and ``merged_into``, preserved segments, size groups, bad requests, history, sort
order of outputs, and rows unchanged at every version before and after each operation."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.errors import InvalidOptionError
from tests.compaction.lifecycle import (
    SCHEMA,
    assert_rows,
    assert_versions_unchanged,
    make_rows,
    read_versions,
    sorted_file,
)

PROPS = {"blocklet_max_rows": "25", "handoff_blocklet_rows": "64"}


def finished_segments(uri: str, sizes: list[int], **props: str) -> cl.Table:
    """A table with one STREAMING_FINISH segment per size (rows in random ts order, each
    segment written by three appends)."""
    t = cl.create_table(uri, SCHEMA, sort_columns=["ts"], properties={**PROPS, **props})
    n = 0
    for size in sizes:
        for part in (size // 3, size // 3, size - 2 * (size // 3)):
            if part:
                t.append(make_rows(range(n, n + part)))
                n += part
        assert t.finish_streaming() is not None
    return t


def by_id(t: cl.Table) -> dict[str, cl.SegmentInfo]:
    return {s.id: s for s in t.segments()}


def total_rows(sizes: list[int]) -> range:
    return range(sum(sizes))


# --- handoff ----------------------------------------------------------------------------------


def test_finish_streaming_closes_the_segment_and_the_next_append_opens_one(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, SCHEMA, sort_columns=["ts"], properties=PROPS)
    assert t.finish_streaming() is None  # nothing streaming yet: no commit
    assert t.version == 0
    t.append(make_rows(range(10)))
    before = read_versions(t)
    assert t.finish_streaming() == "0"
    assert [(s.id, s.status) for s in t.segments()] == [("0", "STREAMING_FINISH")]
    assert t.finish_streaming() is None
    last = t.history(limit=1)[0]
    assert (last.operation, last.data_change, last.parameters["segment"]) == (
        "FINISH STREAMING",
        False,
        "0",
    )
    assert_versions_unchanged(t, before)
    t.append(make_rows(range(10, 20)))
    assert [(s.id, s.status) for s in t.segments()] == [
        ("0", "STREAMING_FINISH"),
        ("1", "STREAMING"),
    ]
    assert_rows(t.to_arrow(), range(20))


def test_handoff_turns_each_finished_segment_into_a_sorted_columnar_one(mem_uri: str) -> None:
    sizes = [70, 90, 40, 120]
    t = finished_segments(mem_uri, sizes)
    t.append(make_rows(range(sum(sizes), sum(sizes) + 15)))  # segment 4 keeps streaming
    before = read_versions(t)
    result = t.handoff()
    assert result.segments_compacted == ("0", "1", "2", "3")
    assert result.segments_created == ("0.0", "1.0", "2.0", "3.0")
    assert result.rows == sum(sizes)
    assert len(result.versions) == 1 and result.version == t.version
    segs = by_id(t)
    for old, size in zip(["0", "1", "2", "3"], sizes, strict=True):
        new = segs[f"{old}.0"]
        assert (segs[old].status, segs[old].merged_into) == ("COMPACTED", new.id)
        assert (new.status, new.format, new.level, new.rows) == ("SUCCESS", "COLUMNAR", 0, size)
        assert new.merged_into is None
    assert (segs["4"].status, segs["4"].rows) == ("STREAMING", 15)
    assert_versions_unchanged(t, before)
    # Outputs are sorted by ts, though the appends were not; blocklets hold 64 rows.
    snap = t.snapshot()
    for sid in result.segments_created:
        for rel, f in snap.segments[sid].files.items():
            rows, ordered = sorted_file(t, rel)
            assert ordered and rows == f.num_rows
            assert all(b.num_rows == 64 for b in f.blocklets[:-1])
    stream_file = next(iter(snap.segments["3"].files))
    assert not sorted_file(t, stream_file)[1], "the input should not have been sorted already"
    # Nothing left to hand off: no commit.
    again = t.handoff()
    assert again.versions == () and again.segments_created == ()


def test_handoff_of_segment_3_writes_3_0(mem_uri: str) -> None:
    t = finished_segments(mem_uri, [30, 30, 30])
    t.handoff()
    t.append(make_rows(range(90, 130)))
    assert t.finish_streaming() == "3"
    result = t.handoff()
    assert result.segments_compacted == ("3",)
    assert result.segments_created == ("3.0",)
    assert by_id(t)["3"].merged_into == "3.0"
    assert_rows(t.to_arrow(), range(130))


def test_history_of_maintenance_says_no_data_changed(mem_uri: str) -> None:
    t = finished_segments(mem_uri, [20] * 4)
    t.handoff()
    t.compact("minor")
    t.clean(0, force=True)
    ops = [(h.operation, h.data_change) for h in t.history(limit=3)]
    assert ops == [("CLEAN", False), ("COMPACT", False), ("HANDOFF", False)]
    compact = t.history(limit=2)[1]
    assert compact.parameters["type"] == "minor"
    assert compact.parameters["segments"] == "0.0,1.0,2.0,3.0"
    assert compact.parameters["merged_into"] == "0.1"
    assert compact.rows == compact.rows_removed == 80
    appends = [h for h in t.history() if h.operation == "APPEND"]
    assert appends and all(h.data_change for h in appends)


# --- minor ------------------------------------------------------------------------------------


def test_minor_merges_four_level_0_segments_into_one_at_level_1(mem_uri: str) -> None:
    sizes = [30, 20, 25, 35, 10]
    t = finished_segments(mem_uri, sizes)
    t.handoff()
    before = read_versions(t)
    result = t.compact("minor")
    assert result.segments_compacted == ("0.0", "1.0", "2.0", "3.0")
    assert result.segments_created == ("0.1",)
    assert len(result.versions) == 1
    segs = by_id(t)
    assert (segs["0.1"].status, segs["0.1"].level, segs["0.1"].rows) == ("SUCCESS", 1, 110)
    for sid in ("0.0", "1.0", "2.0", "3.0"):
        assert (segs[sid].status, segs[sid].merged_into) == ("COMPACTED", "0.1")
    assert (segs["4.0"].status, segs["4.0"].level) == ("SUCCESS", 0)  # a group of one waits
    for rel in t.snapshot().segments["0.1"].files:
        assert sorted_file(t, rel)[1]
    assert_versions_unchanged(t, before)
    assert t.compact("minor").versions == ()


def test_minor_cascades_to_level_2_with_thresholds_4_3(mem_uri: str) -> None:
    sizes = [12 + i for i in range(13)]
    t = finished_segments(mem_uri, sizes, compaction_level_threshold="4,3")
    t.handoff()
    before = read_versions(t)
    result = t.compact("minor")
    # Round 1: 12 level-0 segments -> 0.1, 4.1, 8.1; round 2: those three -> 0.2.
    assert result.segments_created == ("0.1", "4.1", "8.1", "0.2")
    assert result.segments_compacted == (*tuple(f"{i}.0" for i in range(12)), "0.1", "4.1", "8.1")
    assert len(result.versions) == 2
    segs = by_id(t)
    assert [(s.id, s.level) for s in t.segments() if s.status == "SUCCESS"] == [
        ("12.0", 0),
        ("0.2", 2),
    ]
    assert segs["0.2"].rows == sum(sizes[:12])
    for sid, into in [("5.0", "4.1"), ("0.1", "0.2"), ("4.1", "0.2"), ("8.1", "0.2")]:
        assert (segs[sid].status, segs[sid].merged_into) == ("COMPACTED", into)
    assert_versions_unchanged(t, before)
    # Level 2 is the last level of "4,3": nothing more to do.
    assert t.compact("minor").versions == ()
    assert_rows(t.to_arrow(), total_rows(sizes))


def test_preserved_segments_stay_out_of_compaction(mem_uri: str) -> None:
    t = finished_segments(mem_uri, [10] * 6, compaction_preserve_segments="2")
    t.handoff()
    result = t.compact("minor")
    assert result.segments_compacted == ("0.0", "1.0", "2.0", "3.0")
    segs = by_id(t)
    assert segs["4.0"].status == segs["5.0"].status == "SUCCESS"
    assert t.compact("major").versions == ()  # 0.1 plus nothing else eligible
    u = finished_segments(mem_uri + "-three", [10] * 6, compaction_preserve_segments="3")
    u.handoff()
    assert u.compact("minor").versions == ()  # only three eligible, four needed


# --- major ------------------------------------------------------------------------------------


def _handed_off_size(uri: str, rows: int) -> int:
    t = finished_segments(uri, [rows])
    t.handoff()
    return by_id(t)["0.0"].bytes


def test_major_merges_runs_of_consecutive_segments_up_to_the_size(mem_uri: str) -> None:
    small = 200
    size = _handed_off_size(mem_uri + "-probe", small)
    # Two small segments fit, three do not; a big one is over the limit by itself.
    limit = int(2.5 * size)
    sizes = [small, small, small, 6 * small, small, small]
    t = finished_segments(mem_uri, sizes, major_compaction_size=str(limit))
    t.handoff()
    got = {s.id: s.bytes for s in t.segments() if s.status == "SUCCESS"}
    assert all(got[f"{i}.0"] < limit / 2 for i in (0, 1, 2, 4, 5)), (got, limit)
    assert got["3.0"] >= limit
    before = read_versions(t)
    result = t.compact("major")
    assert result.segments_compacted == ("0.0", "1.0", "4.0", "5.0")
    assert result.segments_created == ("0.1", "4.1")
    assert len(result.versions) == 1
    segs = by_id(t)
    assert (segs["0.1"].level, segs["0.1"].rows) == (1, 2 * small)
    assert (segs["4.1"].level, segs["4.1"].rows) == (1, 2 * small)
    # 2.0 would have made the first run too big, and 3.0 is big: the run ends there, so 2.0
    # is never merged across 3.0 with 4.0.
    assert segs["2.0"].status == segs["3.0"].status == "SUCCESS"
    assert_versions_unchanged(t, before)
    for sid in ("0.1", "4.1"):
        for rel in t.snapshot().segments[sid].files:
            assert sorted_file(t, rel)[1]


# --- custom -----------------------------------------------------------------------------------


def test_custom_merges_the_named_segments_of_any_level(mem_uri: str) -> None:
    t = finished_segments(mem_uri, [20, 30, 40, 50, 60])
    t.handoff()
    t.compact("custom", segments=["1.0", "2.0"])  # -> 1.1 at level 1
    t.append(make_rows(range(200, 230)))
    t.finish_streaming()  # segment 5, STREAMING_FINISH: custom may take it as it is
    before = read_versions(t)
    result = t.compact("custom", segments=["5", "1.1", "4.0"])
    assert result.segments_compacted == ("1.1", "4.0", "5")  # in arrival order
    assert result.segments_created == ("1.2",)
    segs = by_id(t)
    assert (segs["1.2"].level, segs["1.2"].rows, segs["1.2"].status) == (2, 160, "SUCCESS")
    assert {segs[s].merged_into for s in ("1.1", "4.0", "5")} == {"1.2"}
    assert segs["0.0"].status == segs["3.0"].status == "SUCCESS"
    assert_versions_unchanged(t, before)
    assert_rows(t.to_arrow(), range(230))


def test_custom_with_bad_ids_names_each_and_commits_nothing(mem_uri: str) -> None:
    t = finished_segments(mem_uri, [20, 20])
    t.handoff()
    t.append(make_rows(range(40, 50)))  # segment 2: STREAMING
    version = t.version
    with pytest.raises(InvalidOptionError) as info:
        t.compact("custom", segments=["0.0", "nope", "1", "2"])
    message = str(info.value)
    assert "'nope' does not exist" in message
    assert "'1' is COMPACTED" in message
    assert "'2' is STREAMING" in message
    assert "'0.0'" in message.splitlines()[0]  # the request is quoted, the good id not blamed
    assert "segment '0.0'" not in message
    assert t.refresh().version == version
    with pytest.raises(InvalidOptionError, match="needs the ids"):
        t.compact("custom")
    for kind in ("minor", "major", "handoff"):  # handoff ignored them (issue 25)
        with pytest.raises(InvalidOptionError, match="only be named for a custom compaction"):
            t.compact(kind, segments=["0.0"])
    with pytest.raises(InvalidOptionError, match="unknown compaction type"):
        t.compact("sideways")  # type: ignore[arg-type]
    assert t.refresh().version == version
    assert_rows(t.to_arrow(), range(50))


# --- properties that act after commits --------------------------------------------------------


def _auto_table(uri: str) -> cl.Table:
    return cl.create_table(
        uri,
        SCHEMA,
        sort_columns=["ts"],
        properties={
            **PROPS,
            "streaming_segment_max_bytes": "3KB",
            "auto_handoff": "true",
            "auto_compaction": "true",
            "compaction_level_threshold": "2",
        },
    )


def test_auto_handoff_and_auto_compaction(mem_uri: str) -> None:
    """Small appends fill a segment over several commits; the commit that rolls it over hands
    it off, and minor compaction follows."""
    t = _auto_table(mem_uri)
    n = 0
    for _ in range(40):
        t.append(make_rows(range(n, n + 10)))
        n += 10
    segs = t.segments()
    shown = [(s.id, s.status, s.level) for s in segs]
    assert not [s for s in segs if s.status == "STREAMING_FINISH"], shown
    assert [s for s in segs if s.level == 1 and s.status != "STREAMING"], shown
    ops = [h.operation for h in t.history()]
    assert "HANDOFF" in ops and "COMPACT" in ops
    assert_rows(t.to_arrow(), range(n))
    assert t.verify().ok


def test_auto_handoff_after_an_append_that_fills_a_new_segment(mem_uri: str) -> None:
    """An append bigger than streaming_segment_max_bytes creates its segment and rolls it over
    in one commit: that is a roll-over too, and auto_handoff must hand the segment off."""
    t = _auto_table(mem_uri)
    t.append(make_rows(range(300)))
    segs = [(s.id, s.status) for s in t.segments()]
    assert ("0", "COMPACTED") in segs and ("0.0", "SUCCESS") in segs, segs
    assert_rows(t.to_arrow(), range(300))


def test_filter_results_are_the_same_after_compaction(mem_uri: str) -> None:
    t = finished_segments(mem_uri, [100] * 4)
    lo, hi = make_rows([5])["ts"][0], make_rows([77])["ts"][0]
    if pc.greater(lo, hi).as_py():
        lo, hi = hi, lo
    where = (pc.field("ts") >= lo) & (pc.field("ts") <= hi)
    before = t.to_arrow(filter=where).column("id").to_pylist()
    t.handoff()
    t.compact("minor")
    assert sorted(t.to_arrow(filter=where).column("id").to_pylist()) == sorted(before)
    assert before
