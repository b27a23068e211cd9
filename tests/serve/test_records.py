"""The service's log records: a put's rows survive encoding, in the bytes an IPC stream has."""

from __future__ import annotations

import json

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
    record = encode_put(put, rows, (1, 7, 3, 2**40))
    got_put, got_rows, got_ids = decode_put(record, "test")
    assert got_put == put
    assert got_ids == (1, 7, 3, 2**40)
    assert got_rows.equals(rows)
    assert got_rows.schema.equals(SCHEMA, check_metadata=True)
    header_length = int.from_bytes(record[:4], "big")
    assert record[4 + header_length :] == _stream_bytes(rows)


def test_a_record_of_an_earlier_release_has_no_column_ids() -> None:
    """An earlier release wrote the header without ``column_ids``: the record decodes with
    None for them (``serve/conform.py`` says where such rows go)."""
    rows = pa.table({"id": [1, 2, 3]})
    header = b'{"table": "t", "producer_id": "p", "sequence": 4}'
    record = len(header).to_bytes(4, "big") + header + _stream_bytes(rows)
    put, got, ids = decode_put(record, "test")
    assert (put, got.to_pylist(), ids) == (PutRequest("t", "p", 4), rows.to_pylist(), None)
    # carried forward, it is written as it was
    assert encode_put(put, rows, None) == record


@pytest.mark.parametrize("ids", [[1], [1, 2, 3], [0, 1], [1, True], ["1", 2], {"a": 1}, 5])
def test_column_ids_that_do_not_fit_the_rows_are_named_corrupt(ids: object) -> None:
    rows = pa.table({"id": [1], "name": ["x"]})
    record = bytearray(encode_put(PutRequest("t", "p", 0), rows, (1, 2)))
    length = int.from_bytes(record[:4], "big")
    header = record[4 : 4 + length].replace(b"[1, 2]", json.dumps(ids).encode())
    forged = len(header).to_bytes(4, "big") + header + record[4 + length :]
    with pytest.raises(CorruptDataError, match="where: a put record's column_ids are not"):
        decode_put(bytes(forged), "where")
    with pytest.raises(ValueError, match="column ids for 2 columns"):
        encode_put(PutRequest("t", "p", 0), rows, (1,))


def test_a_cut_record_is_named_corrupt() -> None:
    rows = pa.table({"id": [1, 2, 3]})
    record = encode_put(PutRequest("t", "p", 0), rows, (1,))
    for cut in (2, 10, len(record) - 20):
        with pytest.raises(CorruptDataError, match="where: a put record does not decode"):
            decode_put(record[:cut], "where")
