"""A change's target read pruned to what it can touch (carbonlite/writer/touched.py, issue 40
§2): the job's splits planned by min/max, bloom filters and partitions, and its reading
tasks keeping only the rows the change's condition or keys allow. Work is counted (the
blocklets planned, the rows read), never timed."""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import carbonlite as cl
from carbonlite.driver_changes import plan_change, run_distributed_change
from carbonlite.writer.distributed_changes import (
    ACTION_COLUMN,
    ACTION_DELETE,
    ChangeJob,
    read_located,
    write_changes,
)
from carbonlite.writer.touched import (
    PROBED_KEYS,
    Touched,
    condition_terms,
    keep_touched,
    plan_filter,
)

SCHEMA = pa.schema(
    [("id", pa.int64()), ("k", pa.string()), ("day", pa.date32()), ("x", pa.float64())]
)
ROWS = 50
START = datetime.date(2026, 1, 1)


def rows(ids: range) -> pa.Table:
    return pa.table(
        {
            "id": list(ids),
            "k": [f"u{(i * 7) % ROWS:02d}" for i in ids],
            "day": [START + datetime.timedelta(days=i) for i in ids],
            "x": [i / 2 for i in ids],
        },
        schema=SCHEMA,
    )


@pytest.fixture
def table(tmp_path: Path) -> cl.Table:
    """Five blocklets of ten rows, ``id`` sorted (min/max prunes it), ``k`` scattered over
    every blocklet's range (only its bloom filters prune it)."""
    t = cl.create_table(
        tmp_path / "t",
        SCHEMA,
        properties={"blocklet_max_rows": "10", "bloom_filter_columns": "k"},
    )
    t.append(rows(range(ROWS)))
    return t


def planned(job: ChangeJob) -> int:
    return sum(len(s.blocklets) for group in job.groups for s in group)


def located(job: ChangeJob) -> pa.Table:
    batches = [b for g in range(len(job.groups)) for b in read_located(job, g)]
    return pa.Table.from_batches(batches) if batches else pa.table({"id": pa.array([], pa.int64())})


def test_keys_prune_blocklets_by_min_max_and_rows_by_value(table: cl.Table) -> None:
    job, _ = plan_change(table, parallelism=2, touched=Touched.of_keys({"id": [47, 12, 13, 12]}))
    assert planned(job) == 2  # the blocklets of 10-19 and 40-49, of five
    assert sorted(located(job).column("id").to_pylist()) == [12, 13, 47]
    everything, _ = plan_change(table, parallelism=2)
    assert planned(everything) == 5 and located(everything).num_rows == ROWS


def test_keys_prune_by_bloom_filters_where_min_max_cannot(table: cl.Table) -> None:
    key = f"u{(31 * 7) % ROWS:02d}"  # row 31's, in the blocklet of 30-39
    assert table.to_arrow(filter=pc.field("k") == key).column("id").to_pylist() == [31]
    job, _ = plan_change(table, parallelism=2, touched=Touched.of_keys({"k": pa.array([key])}))
    assert planned(job) < 5  # every blocklet's k range holds the key: its bloom filter says no
    assert located(job).column("id").to_pylist() == [31]


def test_a_condition_prunes_blocklets_and_rows(table: cl.Table) -> None:
    terms = condition_terms("id >= 45 OR day = '2026-01-03'", table.schema, where="t")
    assert terms is not None
    job, _ = plan_change(table, parallelism=2, touched=Touched(condition=terms))
    assert planned(job) == 2
    assert sorted(located(job).column("id").to_pylist()) == [2, 45, 46, 47, 48, 49]


def test_keys_and_a_condition_together(table: cl.Table) -> None:
    terms = condition_terms("id < 20", table.schema, where="t")
    touched = Touched(condition=terms, keys=Touched.of_keys({"id": [3, 15, 33]}).keys)
    job, _ = plan_change(table, parallelism=2, touched=touched)
    assert planned(job) == 2 and sorted(located(job).column("id").to_pylist()) == [3, 15]


def test_no_key_value_reads_nothing(table: cl.Table) -> None:
    touched = Touched.of_keys({"id": pa.array([None, None], pa.int64())})
    assert touched.nothing
    job, _ = plan_change(table, parallelism=2, touched=touched)
    assert job.groups == [] and located(job).num_rows == 0


def test_more_keys_than_probed_prune_by_range_then_by_value(table: cl.Table) -> None:
    keys = np.arange(20, 20 + 2 * (PROBED_KEYS + 1), 2)  # even ids from 20: blocklets 2-4
    filter = plan_filter(Touched.of_keys({"id": keys}), table.schema, where="t")
    assert filter is not None and "is_in" not in str(filter.expression)
    job, _ = plan_change(table, parallelism=2, touched=Touched.of_keys({"id": keys}))
    assert planned(job) == 3
    assert located(job).column("id").to_pylist() == list(range(20, ROWS, 2))
    few = plan_filter(Touched.of_keys({"id": keys[:10]}), table.schema, where="t")
    assert few is not None and "is_in" in str(few.expression)


def test_a_pruned_change_deletes_exactly_the_touched_rows(table: cl.Table) -> None:
    """The whole change, pruned: every located row is deleted, so what is gone is exactly what
    the keys touch; the others are untouched and the commit is one version."""

    def delete_all(job: ChangeJob) -> list:
        read = located(job)
        if not read.num_rows:
            return [write_changes(job, [], task=0, attempt=0)]
        actions = pa.array(np.full(read.num_rows, ACTION_DELETE, np.int32))
        changed = read.append_column(ACTION_COLUMN, actions)
        return [write_changes(job, changed.to_batches(), task=0, attempt=0)]

    result = run_distributed_change(
        table,
        delete_all,
        operation="DELETE",
        parameters={},
        description="test",
        parallelism=2,
        touched=Touched.of_keys({"id": [5, 25, 26, 99]}),
    )
    assert result.rows_deleted == 3 and result.version == 2
    left = cl.open_table(table.path).to_arrow().column("id").to_pylist()
    assert sorted(left) == [i for i in range(ROWS) if i not in (5, 25, 26)]


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ("id > 5", True),
        ("id IN (1, 2) AND k = 'u07'", True),
        ("day >= '2026-01-10'", True),
        ("k BETWEEN 'u1' AND 'u3' OR id = 4", True),
        ("x > 2.5", False),  # floats: Spark takes -0.0 for 0.0
        ("id > 2.5", False),  # a literal of another kind: Spark casts, CarbonLite compares
        ("id = '5'", False),
        ("k = 5", False),
        ("abs(id) = 5", False),  # anything sql_filter does not read: Spark alone decides
        ("id IS NULL", False),
        ("nope = 1", False),
    ],
)
def test_condition_terms_only_where_spark_compares_the_same(text: str, accepted: bool) -> None:
    assert (condition_terms(text, SCHEMA, where="t") is not None) == accepted


_INTS = st.lists(st.one_of(st.none(), st.integers(-(2**40), 2**40)), max_size=60)


@settings(max_examples=60, deadline=None)
@given(column=_INTS, keys=_INTS)
def test_keep_touched_keeps_what_is_in_keeps(column: list, keys: list) -> None:
    batch = pa.RecordBatch.from_pydict({"id": pa.array(column, pa.int64())})
    touched = Touched.of_keys({"id": pa.array(keys, pa.int64())})
    expected = [v for v in column if v is not None and v in keys]
    assert keep_touched(batch, touched.keys).column("id").to_pylist() == expected


@settings(max_examples=40, deadline=None)
@given(
    column=st.lists(st.one_of(st.none(), st.dates()), max_size=40),
    keys=st.lists(st.one_of(st.none(), st.dates()), max_size=20),
    words=st.lists(st.one_of(st.none(), st.text(max_size=3)), max_size=40),
    word_keys=st.lists(st.text(max_size=3), max_size=20),
)
def test_keep_touched_on_dates_and_strings(
    column: list, keys: list, words: list, word_keys: list
) -> None:
    batch = pa.RecordBatch.from_pydict({"d": pa.array(column, pa.date32())})
    got = keep_touched(batch, Touched.of_keys({"d": pa.array(keys, pa.date32())}).keys)
    assert got.column("d").to_pylist() == [v for v in column if v is not None and v in keys]
    batch = pa.RecordBatch.from_pydict({"w": pa.array(words, pa.string())})
    got = keep_touched(batch, Touched.of_keys({"w": pa.array(word_keys, pa.string())}).keys)
    assert got.column("w").to_pylist() == [v for v in words if v is not None and v in word_keys]
