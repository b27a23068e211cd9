"""Columnar Parquet files (format/parquet_file.py): whatever is written reads back the same, one
row group per blocklet at the offsets the writer reports, with CarbonLite's statistics and a
field id on every field; pyarrow's own Parquet reader (no CarbonLite code) reads the same rows
and ids; damage is an error, never wrong values."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from carbonlite.errors import CorruptDataError
from carbonlite.format.bloom import BloomSpec, decode_bloom_record
from carbonlite.format.field_ids import (
    NESTED_ID_BASE,
    NESTED_IDS_PER_COLUMN,
    field_id,
    nested_fields,
    with_field_ids,
)
from carbonlite.format.parquet_file import (
    ParquetBlockletReader,
    ParquetBlockletWriter,
    row_group_spans,
)
from tests.format.strategies import record_batches, rows, schemas
from tests.format.test_roundtrip import check_stats

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _ids(schema: pa.Schema) -> list[int]:
    return [10 + 3 * i for i in range(len(schema))]


def test_lookup_columns_get_parquet_bloom_filters_in_every_row_group(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("key", pa.string()), ("flag", pa.bool_())])
    data = pa.table(
        {"id": range(1_000), "key": [f"k{i}" for i in range(1_000)], "flag": [True] * 1_000},
        schema=schema,
    )
    path = tmp_path / "f.parquet"
    writer = ParquetBlockletWriter(
        path, schema, [1, 2, 3], lookup_columns=["key", "flag"], row_group_rows=250
    )
    writer.write(data, max_rows=250)
    writer.close()
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 4
    for g in range(4):
        columns = [meta.row_group(g).column(c) for c in range(3)]
        # a boolean column has no Parquet bloom filter; one unnamed gets none
        assert [c.bloom_filter_offset is not None for c in columns] == [False, True, False]
        assert columns[1].bloom_filter_length > 0
    assert pq.read_table(path).equals(data)


@SETTINGS
@given(data=st.data(), max_rows=st.integers(1, 40))
def test_written_blocklets_read_back_equal(data: st.DataObject, max_rows: int) -> None:
    schema = data.draw(schemas())
    batches = data.draw(st.lists(record_batches(schema), min_size=1, max_size=3))
    path = f"memory://parquet/{uuid.uuid4().hex}.parquet"
    lookup = data.draw(st.lists(st.sampled_from(schema.names), unique=True, max_size=2))
    writer = ParquetBlockletWriter(path, schema, _ids(schema), lookup_columns=lookup)
    for batch in batches:
        writer.write(batch, max_rows=max_rows)
    metas = writer.close()
    want = pa.Table.from_batches(batches, schema=schema)
    assert sum(m.num_rows for m in metas) == want.num_rows
    assert all(0 < m.num_rows <= max_rows for m in metas)
    with ParquetBlockletReader(path, end=writer.length) as reader:
        assert reader.schema.equals(schema)
        assert [(b.offset, b.length, b.num_rows) for b in reader.blocklets()] == [
            (m.offset, m.length, m.num_rows) for m in metas
        ]
        got = [reader.read_blocklet(m) for m in metas]
        assert rows(pa.Table.from_batches(got, schema=schema)) == rows(want)
        first = 0
        for meta in metas:  # statistics of the rows written
            check_stats(
                meta.stats, want.slice(first, meta.num_rows).combine_chunks().to_batches()[0]
            )
            first += meta.num_rows
        for name in schema.names:  # one column alone
            one = pa.schema([schema.field(name)])
            column = pa.Table.from_batches([reader.read_blocklet(m, [name]) for m in metas], one)
            assert rows(column) == rows(want.select([name]))


def test_every_field_has_its_id_nested_ones_too(tmp_path: Path) -> None:
    """pyarrow's Parquet reader sees the id of each column and of each nested field."""
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("s", pa.struct([("x", pa.int32()), ("l", pa.list_(pa.string()))])),
            ("m", pa.map_(pa.string(), pa.struct([("a", pa.float64())]))),
        ]
    )
    rows = [{"id": 1, "s": {"x": 2, "l": ["a", None]}, "m": [("k", {"a": 0.5})]}]
    path = tmp_path / "f.parquet"
    writer = ParquetBlockletWriter(path, schema, [4, 9, 12])
    writer.write(pa.Table.from_pylist(rows, schema=schema))
    writer.close()
    read = pq.read_schema(path)
    assert [field_id(f) for f in read] == [4, 9, 12]

    def nested_ids(t: pa.DataType) -> list[int | None]:
        return [field_id(f) for _, f in nested_fields(t)]

    base = NESTED_ID_BASE
    assert nested_ids(read.field("s").type) == [
        base + 9 * NESTED_IDS_PER_COLUMN + k for k in range(3)
    ]
    assert nested_ids(read.field("m").type) == [
        base + 12 * NESTED_IDS_PER_COLUMN + k for k in range(3)
    ]
    given = with_field_ids(schema, [4, 9, 12])  # what the writer was given: the same ids
    assert [field_id(f) for _, f in nested_fields(given.field("m").type)] == nested_ids(
        read.field("m").type
    )
    assert pq.read_table(path).to_pylist() == rows


def test_row_groups_are_the_blocklets_pyarrow_sees(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    table = pa.table({"id": range(2500), "name": [f"n{i % 7}" for i in range(2500)]})
    path = tmp_path / "f.parquet"
    writer = ParquetBlockletWriter(path, schema, [1, 2], compression_level=3)
    writer.write(table, max_rows=1000)
    metas = writer.close()
    metadata = pq.ParquetFile(path).metadata
    assert metadata.num_row_groups == 3
    assert [(m.offset, m.length, m.num_rows) for m in metas] == row_group_spans(metadata)
    assert metas[0].offset == 4  # just past the magic
    for i, meta in enumerate(metas):  # each span holds exactly its row group's column chunks
        group = metadata.row_group(i)
        assert meta.length == sum(group.column(c).total_compressed_size for c in range(2))
        assert group.column(0).compression == "ZSTD"
    assert writer.length == path.stat().st_size
    assert pq.read_table(path).equals(table.cast(pq.read_schema(path)))


def test_blooms_are_built_per_row_group(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64())])
    writer = ParquetBlockletWriter(tmp_path / "f.parquet", schema, [1])
    writer.write(pa.table({"id": range(300)}), max_rows=100, blooms=BloomSpec(("id",), 0.01))
    metas = writer.close()
    assert all(m.bloom is not None for m in metas)
    assert [sorted(decode_bloom_record(m.bloom or b"", where="f")) for m in metas] == [["id"]] * 3


def test_a_file_of_another_length_than_committed_is_refused(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64())])
    path = tmp_path / "f.parquet"
    writer = ParquetBlockletWriter(path, schema, [1])
    writer.write(pa.table({"id": range(10)}))
    writer.close()
    with pytest.raises(CorruptDataError, match="committed length"):
        ParquetBlockletReader(path, end=writer.length + 1)


def _three_row_groups(tmp_path: Path) -> tuple[Path, list[Any]]:
    """A file of 3,000 rows (id, name) in three row groups, and its blocklets."""
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    table = pa.table({"id": range(3000), "name": [str(i * 7919 % 1000) for i in range(3000)]})
    path = tmp_path / "f.parquet"
    writer = ParquetBlockletWriter(path, schema, [1, 2])
    writer.write(table, max_rows=1000)
    return path, writer.close()


@pytest.mark.parametrize("where", ["page", "footer", "truncated"])
def test_damage_is_an_error_never_wrong_values(tmp_path: Path, where: str) -> None:
    path, metas = _three_row_groups(tmp_path)
    data = bytearray(path.read_bytes())
    if where == "truncated":
        data = data[: len(data) // 2]
    else:
        at = metas[1].offset + 40 if where == "page" else len(data) - 8
        data[at] ^= 0x5A
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptDataError) as caught:
        # a footer read before the damage stays cached (test_a_cached_footer_never_hides_damage)
        reader = ParquetBlockletReader(path, cached=where == "page")
        reader.read_blocklet(metas[1])
    assert str(path) in str(caught.value)
    if where == "page":  # the other row groups still read
        assert ParquetBlockletReader(path).read_blocklet(metas[0]).num_rows == 1000


def test_a_cached_footer_never_hides_damage(tmp_path: Path) -> None:
    """Footers are cached per process (a columnar file never changes): after a first read,
    damage to a page in place is still an error at the next read (page checksums), damage to
    the footer never gives wrong values, and a reader without the cache (``verify``'s) sees
    the damaged footer."""
    path, metas = _three_row_groups(tmp_path)
    assert ParquetBlockletReader(path).read_blocklet(metas[1]).num_rows == 1000  # cached now
    pristine = path.read_bytes()
    data = bytearray(pristine)
    data[len(data) - 8] ^= 0x5A  # the footer
    path.write_bytes(bytes(data))
    got = ParquetBlockletReader(path).read_blocklet(metas[1])
    assert got.column("id").to_pylist() == list(range(1000, 2000))
    with pytest.raises(CorruptDataError):
        ParquetBlockletReader(path, cached=False)
    data = bytearray(pristine)
    data[metas[1].offset + 40] ^= 0x5A  # a page
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptDataError):
        ParquetBlockletReader(path).read_blocklet(metas[1])
