"""Hypothesis round-trips of the blocklet format: whatever is written reads back the same."""

from __future__ import annotations

import io
import math
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from carbonlite.format import BlockletFileReader, BlockletFileWriter, stat_kind
from carbonlite.format.stats import truncate_lower, truncate_upper
from tests.format.strategies import record_batches, rows, schemas

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def expected_bounds(array: pa.Array) -> tuple[object, object]:
    """What min/max must be, computed independently with pyarrow.compute."""
    kind = stat_kind(array.type)
    valid = array.drop_null()
    if kind == "float":
        valid = valid.filter(pc.invert(pc.is_nan(valid)))
    if kind is None or len(valid) == 0:
        return None, None
    if kind == "int":
        valid = (
            valid.cast(pa.int64())
            if not pa.types.is_temporal(valid.type)
            else valid.view(pa.int32() if valid.type.bit_width == 32 else pa.int64())
        )
    lo, hi = pc.min(valid).as_py(), pc.max(valid).as_py()
    if kind in ("string", "binary"):
        return truncate_lower(lo), truncate_upper(hi)
    return lo, hi


def check_stats(meta_stats, batch: pa.RecordBatch) -> None:
    for field, array in zip(batch.schema, batch.columns, strict=True):
        s = meta_stats[field.name]
        assert s.null_count == array.null_count, field.name
        lo, hi = expected_bounds(array)
        assert (s.min, s.max) == (lo, hi), f"{field.name}: {(s.min, s.max)} != {(lo, hi)}"
        if stat_kind(field.type) == "float":
            assert s.nan_count == int(pc.sum(pc.is_nan(array)).as_py() or 0)
            if s.min is not None:
                assert not math.isnan(s.min) and not math.isnan(s.max)


@pytest.mark.slow  # 6 s of reopened files: the slow tier
@SETTINGS
@given(data=st.data())
def test_appends_across_reopens_read_back_equal(data: st.DataObject) -> None:
    schema = data.draw(schemas())
    sessions = data.draw(
        st.lists(st.lists(record_batches(schema), min_size=1, max_size=3), min_size=1, max_size=3)
    )
    path = f"memory://roundtrip/{uuid.uuid4().hex}.cblt"
    written: list[pa.RecordBatch] = []
    for batches in sessions:  # each session reopens the file and appends more
        with BlockletFileWriter(path, schema) as writer:
            for batch in batches:
                meta = writer.write_batch(batch)
                assert meta.num_rows == batch.num_rows
                check_stats(meta.stats, batch)
                written.append(batch)
            end = writer.length
        reader = BlockletFileReader(path, end=end)
        assert reader.valid_length == end
        assert [m.num_rows for m in reader.blocklets()] == [b.num_rows for b in written]
    expected = pa.Table.from_batches(written, schema=schema)
    reader = BlockletFileReader(path)
    assert reader.schema.equals(schema)
    assert rows(reader.read_all()) == rows(expected)
    subset = data.draw(st.lists(st.sampled_from(schema.names), unique=True, max_size=len(schema)))
    assert rows(reader.read_all(columns=subset)) == rows(expected.select(subset))
    for meta, batch in zip(reader.blocklets(), written, strict=True):
        check_stats(meta.stats, batch)  # stats decoded from the file equal the writer's
        assert rows(reader.read_blocklet(meta, subset)) == rows(batch.select(subset))


@SETTINGS
@given(data=st.data())
def test_file_object_round_trip(data: st.DataObject) -> None:
    schema = data.draw(schemas())
    batches = data.draw(st.lists(record_batches(schema), min_size=1, max_size=4))
    buf = io.BytesIO()
    writer = BlockletFileWriter(buf, schema)
    metas = [writer.write_batch(b) for b in batches]
    writer.flush()
    buf.seek(0)
    reader = BlockletFileReader(io.BytesIO(buf.getvalue()), end=metas[-1].end)
    got = reader.read_all()
    assert rows(got) == rows(pa.Table.from_batches(batches, schema=schema))


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(st.text(max_size=200), st.binary(max_size=200)),
    st.lists(st.one_of(st.text(max_size=200), st.binary(max_size=200)), max_size=5),
)
def test_truncated_bounds_still_bound(value, others) -> None:
    same = [o for o in others if type(o) is type(value)] + [value]
    lo = truncate_lower(min(same))
    hi = truncate_upper(max(same))
    limit = 64
    enc = (lambda v: v.encode()) if isinstance(value, str) else (lambda v: v)
    assert len(enc(lo)) <= limit
    assert all(lo <= v for v in same)
    if hi is not None:
        assert len(enc(hi)) <= limit + 4
        assert all(hi >= v for v in same)
    else:  # only when every byte/char of the prefix is already the largest possible
        top = "\U0010ffff" if isinstance(value, str) else b"\xff"
        assert set(truncate_lower(max(same))) <= set(top)
