"""The Flight SQL wire codec and the statement tickets, without a server: messages round-trip
through ``Any``; bytes checked against protobuf encodings worked out by hand; malformed input
is a ``ProtocolError``; tickets refuse every change."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from carbonlite.serve.flight_sql.protocol import (
    TYPE_URL_PREFIX,
    ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult,
    CommandGetDbSchemas,
    CommandGetPrimaryKeys,
    CommandGetSqlInfo,
    CommandGetTables,
    CommandGetXdbcTypeInfo,
    CommandPreparedStatementQuery,
    CommandStatementQuery,
    ProtocolError,
    TicketStatementQuery,
    UnknownMessage,
    decode_any,
    encode_any,
    is_flight_sql,
)
from carbonlite.serve.flight_sql.tickets import StatementTicket, TicketError, TicketSigner

texts = st.text(max_size=300)
optional_texts = st.none() | texts
blobs = st.binary(max_size=300)

messages = st.one_of(
    st.builds(CommandStatementQuery, texts, st.none() | blobs),
    st.builds(ActionCreatePreparedStatementRequest, texts, st.none() | blobs),
    st.builds(CommandPreparedStatementQuery, blobs),
    st.builds(TicketStatementQuery, blobs),
    st.builds(ActionClosePreparedStatementRequest, blobs),
    st.builds(ActionCreatePreparedStatementResult, blobs, blobs, blobs),
    st.builds(CommandGetSqlInfo, st.tuples(*[st.integers(0, 2**32 - 1)] * 3)),
    st.builds(CommandGetDbSchemas, optional_texts, optional_texts),
    st.builds(
        CommandGetTables,
        optional_texts,
        optional_texts,
        optional_texts,
        st.lists(texts, max_size=4).map(tuple),
        st.booleans(),
    ),
    st.builds(CommandGetPrimaryKeys, optional_texts, optional_texts, texts),
    st.builds(CommandGetXdbcTypeInfo, st.none() | st.integers(-(2**31), 2**31 - 1)),
)


@given(messages)
def test_messages_round_trip_through_any(message: object) -> None:
    data = encode_any(message)  # type: ignore[arg-type]
    assert is_flight_sql(data)
    assert decode_any(data) == message


def test_encodings_match_protobufs() -> None:
    """Bytes worked out from the protobuf encoding rules (field key = number << 3 | wire)."""
    url = (TYPE_URL_PREFIX + "CommandStatementQuery").encode()
    query = b"SELECT 1"
    expected = (
        b"\x0a" + bytes([len(url)]) + url + b"\x12" + bytes([2 + len(query)]) + b"\x0a\x08" + query
    )
    assert encode_any(CommandStatementQuery("SELECT 1")) == expected
    # a repeated uint32 packed (proto3's default) and unpacked, 300 as a two-byte varint
    packed = b"\x0a\x03\x00\xac\x02"
    unpacked = b"\x08\x00\x08\xac\x02"
    for body in (packed, unpacked):
        assert CommandGetSqlInfo.decode(body) == CommandGetSqlInfo((0, 300))
    # unknown fields (a varint 9, a fixed64 10, a fixed32 11) are skipped
    extra = b"\x48\x01" + b"\x51" + bytes(8) + b"\x5d" + bytes(4)
    assert CommandGetTables.decode(b"\x28\x01" + extra) == CommandGetTables(include_schema=True)
    # an int32 of -5 (XDBC_BIGINT) travels as a ten-byte varint
    bigint = b"\x08" + b"\xfb" + b"\xff" * 8 + b"\x01"
    assert CommandGetXdbcTypeInfo(-5).encode() == bigint
    assert CommandGetXdbcTypeInfo.decode(bigint) == CommandGetXdbcTypeInfo(-5)
    assert CommandGetXdbcTypeInfo.decode(b"") == CommandGetXdbcTypeInfo(None)
    # GetPrimaryKeys: catalog 1, db_schema 2, table 3
    keys = b"\x12\x04main\x1a\x06events"
    assert CommandGetPrimaryKeys.decode(keys) == CommandGetPrimaryKeys(None, "main", "events")
    assert CommandGetPrimaryKeys(None, "main", "events").encode() == keys


def test_other_bytes_are_not_flight_sql() -> None:
    assert not is_flight_sql(json.dumps({"table": "events"}).encode())
    assert not is_flight_sql(b"")
    other = b"\x0a\x05hello\x12\x00"
    assert not is_flight_sql(other)
    with pytest.raises(ProtocolError, match="not a Flight SQL message's type URL"):
        decode_any(other)
    unknown = encode_any(UnknownMessage("x"))  # a Flight SQL name the service does not read
    assert decode_any(unknown) == UnknownMessage("UnknownMessage")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x0a\x05ab", "runs past the end"),
        (b"\x08" + b"\xff" * 11, "longer than 10 bytes"),
        (b"\x08\xff", "runs past the end"),
        (b"\x0b", "wire type 3"),
        (b"\x00\x01", "number 0"),
        (b"\x0a\x02\xff\xfe", "not UTF-8"),
        (b"\x08\x01", "is a number, expected a string"),
    ],
)
def test_malformed_messages_are_protocol_errors(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        CommandStatementQuery.decode(data)


def test_tickets_carry_query_versions_and_parameters() -> None:
    signer = TicketSigner()
    params = pa.table({"1": [5, 6], "2": ["a", None]})
    ticket = StatementTicket(
        "SELECT ? , ?",
        {"events": 3, "sales/eu": 0},
        params,
        markers={"events": {"p1": 4, "p2": None}},
        through={"events": {"p1": 9}},
        mark=("run-1", 12),
        past={"events@v1": 1, "sales/eu@2026-11-29T10:00:00Z": 0},
    )
    assert signer.check(signer.issue(ticket)) == ticket
    plain = StatementTicket("SELECT 1", {})
    assert signer.check(signer.issue(plain)) == plain


@given(st.integers(min_value=0), st.integers(min_value=0, max_value=7))
def test_every_changed_bit_of_a_ticket_is_refused(position: int, bit: int) -> None:
    signer = TicketSigner()
    data = bytearray(signer.issue(StatementTicket("SELECT k FROM events", {"events": 1})))
    data[position % len(data)] ^= 1 << bit
    with pytest.raises(TicketError, match="not made by this service"):
        signer.check(bytes(data))


def test_a_ticket_of_another_signer_or_cut_short_is_refused() -> None:
    data = TicketSigner().issue(StatementTicket("SELECT 1", {}))
    with pytest.raises(TicketError, match="not made by this service"):
        TicketSigner().check(data)
    for cut in (b"", data[:10], data[:-1]):
        with pytest.raises(TicketError):
            TicketSigner().check(cut)
