"""The service's log records: a put's rows survive encoding, in the bytes an IPC stream has."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbonlite.errors import CorruptDataError
from carbonlite.serve.records import PutRequest, decode_put, encode_put

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("tags", pa.list_(pa.string())),
        ("value", pa.float64()),
    ]
)


def _stream_bytes(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return sink.getvalue().to_pybytes()


row = st.tuples(
    st.integers(-(2**63), 2**63 - 1),
    st.none() | st.text(max_size=8),
    st.none() | st.lists(st.none() | st.text(max_size=3), max_size=3),
    st.none() | st.floats(allow_nan=False),
)


@settings(max_examples=60, deadline=None)
@given(chunks=st.lists(st.lists(row, max_size=6), max_size=4), sequence=st.integers(0, 2**40))
def test_a_record_is_the_put_and_its_rows_an_ipc_stream(
    chunks: list[list[tuple]], sequence: int
) -> None:
    batches = [
        pa.RecordBatch.from_pylist(
            [dict(zip(SCHEMA.names, r, strict=True)) for r in chunk], schema=SCHEMA
        )
        for chunk in chunks
    ]
    rows = pa.Table.from_batches(batches, schema=SCHEMA)
    put = PutRequest("sales/eu", "producer-ü", sequence)
    record = encode_put(put, rows)
    got_put, got_rows = decode_put(record, "test")
    assert got_put == put
    assert got_rows.equals(rows)
    assert got_rows.schema.equals(SCHEMA, check_metadata=True)
    header_length = int.from_bytes(record[:4], "big")
    assert record[4 + header_length :] == _stream_bytes(rows)


def test_a_cut_record_is_named_corrupt() -> None:
    rows = pa.table({"id": [1, 2, 3]})
    record = encode_put(PutRequest("t", "p", 0), rows)
    for cut in (2, 10, len(record) - 20):
        with pytest.raises(CorruptDataError, match="where: a put record does not decode"):
            decode_put(record[:cut], "where")
