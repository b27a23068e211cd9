"""Handoff sorts: after it, a narrow range filter on the sort column skips almost every
blocklet; before it (rows streamed in random ``ts`` order) min/max pruning can skip few."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

import carbonlite as cl
from tests.compaction.lifecycle import SCHEMA, assert_rows, canonical, make_rows

APPENDS = 100
ROWS_PER_APPEND = 2_000


def test_handoff_makes_a_one_percent_range_filter_skip_95_percent_of_blocklets(
    mem_uri: str,
) -> None:
    t = cl.create_table(
        mem_uri,
        SCHEMA,
        sort_columns=["ts"],
        properties={"handoff_blocklet_rows": "2048"},
    )
    for a in range(APPENDS):
        t.append(make_rows(range(a * ROWS_PER_APPEND, (a + 1) * ROWS_PER_APPEND)))
    total = APPENDS * ROWS_PER_APPEND
    everything = make_rows(range(total))
    ts = everything["ts"].cast(pa.int64())
    lo_all, hi_all = pc.min(ts).as_py(), pc.max(ts).as_py()
    lo = lo_all + (hi_all - lo_all) * 41 // 100
    hi = lo + (hi_all - lo_all) // 100
    bound = pa.timestamp("us", tz="UTC")
    where = (pc.field("ts") >= pa.scalar(lo, bound)) & (pc.field("ts") < pa.scalar(hi, bound))
    wanted = everything.filter(where)["id"].to_pylist()
    assert 0.008 * total < len(wanted) < 0.012 * total

    before = t.plan_splits(filter=where)
    assert before.blocklets_total >= APPENDS
    skipped_before = 1 - before.blocklets_selected / before.blocklets_total
    assert skipped_before < 0.10, f"random order, yet {skipped_before:.0%} skipped"
    assert_rows(t.to_arrow(filter=where), wanted, "filtered, before handoff")

    assert t.finish_streaming() == "0"
    result = t.handoff()
    assert result.segments_created == ("0.0",)
    after = t.plan_splits(filter=where)
    assert after.blocklets_total == -(-total // 2048)
    skipped_after = 1 - after.blocklets_selected / after.blocklets_total
    assert skipped_after >= 0.95, (
        f"after handoff only {skipped_after:.1%} of {after.blocklets_total} blocklets skipped"
    )
    assert after.bytes_selected < 0.05 * after.bytes_total
    assert_rows(t.to_arrow(filter=where), wanted, "filtered, after handoff")
    full = canonical(t.to_arrow())
    assert full.equals(canonical(t.to_arrow(version=result.version - 1)))
    assert_rows(full, range(total), "all rows after handoff")
