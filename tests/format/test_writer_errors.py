"""What a user gets wrong with the file API gets a clear CarbonLiteError."""

from __future__ import annotations

import io
import math

import pyarrow as pa
import pytest

from carbonlite.errors import InvalidOptionError, SchemaMismatchError, UnsupportedTypeError
from carbonlite.format import BlockletFileReader, BlockletFileWriter, split_into_blocklets

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])


def test_batch_with_wrong_types_lists_every_difference() -> None:
    w = BlockletFileWriter(io.BytesIO(), SCHEMA)
    bad = pa.record_batch({"id": pa.array(["1"]), "extra": pa.array([1])})
    with pytest.raises(SchemaMismatchError) as info:
        w.write_batch(bad)
    text = str(info.value)
    assert "'id': expected type int64, found string" in text
    assert "'name' (string) is missing" in text
    assert "'extra' (int64) is not in the schema" in text
    assert len(info.value.differences) == 3


def test_nulls_in_a_non_nullable_column_are_refused() -> None:
    w = BlockletFileWriter(io.BytesIO(), SCHEMA)
    with pytest.raises(SchemaMismatchError, match="non-nullable but has 1 null"):
        w.write_batch(pa.record_batch({"id": pa.array([1, None]), "name": pa.array(["a", "b"])}))


def test_columns_in_another_order_are_reordered() -> None:
    buf = io.BytesIO()
    w = BlockletFileWriter(buf, SCHEMA)
    meta = w.write_batch(pa.record_batch({"name": pa.array(["a"]), "id": pa.array([7])}))
    got = BlockletFileReader(io.BytesIO(buf.getvalue()), end=meta.end).read_all()
    assert got.to_pylist() == [{"id": 7, "name": "a"}]


def test_dictionary_columns_are_refused_with_a_hint() -> None:
    schema = pa.schema([("d", pa.dictionary(pa.int8(), pa.string()))])
    with pytest.raises(UnsupportedTypeError, match="cast it to its value type string"):
        BlockletFileWriter(io.BytesIO(), schema)


def test_reopen_with_another_schema_is_refused(tmp_path) -> None:
    path = str(tmp_path / "f.cblt")
    with BlockletFileWriter(path, SCHEMA) as w:
        w.write_batch(
            pa.record_batch({"id": pa.array([1]), "name": pa.array(["x"])}, schema=SCHEMA)
        )
    with pytest.raises(SchemaMismatchError, match="different schema"):
        BlockletFileWriter(path, pa.schema([("id", pa.int32())]))
    with pytest.raises(InvalidOptionError, match="truncate_to"):
        BlockletFileWriter(path, truncate_to=3)


def test_new_file_needs_a_schema(tmp_path) -> None:
    with pytest.raises(InvalidOptionError, match="schema is needed"):
        BlockletFileWriter(str(tmp_path / "new.cblt"))


def test_unknown_column_read_is_named(tmp_path) -> None:
    path = str(tmp_path / "f.cblt")
    with BlockletFileWriter(path, SCHEMA) as w:
        w.write_batch(
            pa.record_batch({"id": pa.array([1]), "name": pa.array(["x"])}, schema=SCHEMA)
        )
    with pytest.raises(SchemaMismatchError, match=r"cannot read columns \['nope'\]"):
        BlockletFileReader(path).read_all(columns=["nope"])


def test_empty_column_selection_keeps_row_counts(tmp_path) -> None:
    path = str(tmp_path / "f.cblt")
    with BlockletFileWriter(path, SCHEMA) as w:
        w.write_batch(
            pa.record_batch({"id": pa.array([1, 2, 3]), "name": pa.array(["x"] * 3)}, schema=SCHEMA)
        )
    assert BlockletFileReader(path).read_all(columns=[]).num_rows == 3


def test_bad_options() -> None:
    with pytest.raises(InvalidOptionError, match="compression_level"):
        BlockletFileWriter(io.BytesIO(), SCHEMA, compression_level=99)
    with pytest.raises(InvalidOptionError, match="positive"):
        list(split_into_blocklets([], max_rows=0))


def test_write_cuts_blocklets_by_rows_and_bytes(tmp_path) -> None:
    path = str(tmp_path / "f.cblt")
    table = pa.table(
        {"id": pa.array(range(10_000), pa.int64()), "name": pa.array(["x" * 100] * 10_000)}
    )
    with BlockletFileWriter(path, SCHEMA.remove(0).insert(0, pa.field("id", pa.int64()))) as w:
        by_rows = w.write(table, max_rows=3_000)
        by_bytes = w.write(table, max_bytes=200_000)
    assert [m.num_rows for m in by_rows] == [3000, 3000, 3000, 1000]
    assert (
        all(m.num_rows <= 200_000 // 100 for m in by_bytes)
        and sum(m.num_rows for m in by_bytes) == 10_000
    )
    assert BlockletFileReader(path).read_all().num_rows == 20_000


def test_nan_only_float_column_has_no_bounds_but_counts_nans() -> None:
    schema = pa.schema([("f", pa.float64())])
    w = BlockletFileWriter(io.BytesIO(), schema)
    meta = w.write_batch(pa.record_batch({"f": pa.array([math.nan, None, math.nan])}))
    s = meta.stats["f"]
    assert (s.min, s.max, s.nan_count, s.null_count) == (None, None, 2, 1)
    meta = w.write_batch(pa.record_batch({"f": pa.array([math.nan, -2.5, 7.0, -math.inf])}))
    s = meta.stats["f"]
    assert (s.min, s.max, s.nan_count) == (-math.inf, 7.0, 1)


def test_write_merges_small_chunks_into_full_blocklets(tmp_path) -> None:
    schema = pa.schema([("id", pa.int64())])
    chunks = [
        pa.record_batch({"id": pa.array(range(i, i + 100), pa.int64())})
        for i in range(0, 50_000, 100)
    ]
    with BlockletFileWriter(str(tmp_path / "f.cblt"), schema) as w:
        metas = w.write(chunks, max_rows=20_000)
    assert [m.num_rows for m in metas] == [20_000, 20_000, 10_000]
    back = BlockletFileReader(str(tmp_path / "f.cblt")).read_all()
    assert back.column("id").to_pylist() == list(range(50_000))
