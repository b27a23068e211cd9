"""Spark DDL column lists to Arrow schemas (``carbonlite/ddl.py``), and every way one can be
wrong: an ``InvalidOptionError`` that says what and where, never another exception."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbonlite.ddl import parse_schema, parse_type
from carbonlite.errors import InvalidOptionError

UTC_US = pa.timestamp("us", tz="UTC")


@pytest.mark.parametrize(
    ("ddl", "kind"),
    [
        ("boolean", pa.bool_()),
        ("BOOL", pa.bool_()),
        ("tinyint", pa.int8()),
        ("byte", pa.int8()),
        ("smallint", pa.int16()),
        ("short", pa.int16()),
        ("int", pa.int32()),
        ("Integer", pa.int32()),
        ("bigint", pa.int64()),
        ("long", pa.int64()),
        ("float", pa.float32()),
        ("real", pa.float32()),
        ("double", pa.float64()),
        ("decimal(10,2)", pa.decimal128(10, 2)),
        ("DECIMAL ( 38 , 0 )", pa.decimal128(38, 0)),
        ("decimal(5)", pa.decimal128(5, 0)),
        ("decimal", pa.decimal128(10, 0)),
        ("numeric(4, 4)", pa.decimal128(4, 4)),
        ("dec(3,1)", pa.decimal128(3, 1)),
        ("string", pa.string()),
        ("varchar(20)", pa.string()),
        ("char(3)", pa.string()),
        ("binary", pa.binary()),
        ("date", pa.date32()),
        ("timestamp", UTC_US),
        ("timestamp_ltz", UTC_US),
        ("timestamp_ntz", pa.timestamp("us")),
        ("interval day to second", pa.duration("us")),
        ("INTERVAL HOUR", pa.duration("us")),
        ("void", pa.null()),
        ("array<string>", pa.list_(pa.string())),
        ("array<array<bigint>>", pa.list_(pa.list_(pa.int64()))),
        ("map<string, array<int>>", pa.map_(pa.string(), pa.list_(pa.int32()))),
        (
            "struct<a: int, b string not null, `c d`: map<string,double> comment 'x'>",
            pa.struct(
                [
                    ("a", pa.int32()),
                    pa.field("b", pa.string(), nullable=False),
                    ("c d", pa.map_(pa.string(), pa.float64())),
                ]
            ),
        ),
        ("struct<>", pa.struct([])),
    ],
)
def test_each_type(ddl: str, kind: pa.DataType) -> None:
    assert parse_type(ddl) == kind
    assert parse_schema(f"c {ddl}") == pa.schema([("c", kind)])


def test_a_schema_of_columns() -> None:
    schema = parse_schema(
        "id BIGINT NOT NULL COMMENT 'the key', ts timestamp, name string, "
        "price decimal(10,2), tags array<string>, `odd name` int, `a``b` date"
    )
    assert schema == pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("ts", UTC_US),
            ("name", pa.string()),
            ("price", pa.decimal128(10, 2)),
            ("tags", pa.list_(pa.string())),
            ("odd name", pa.int32()),
            ("a`b", pa.date32()),
        ]
    )
    assert parse_schema("  timestamp timestamp ,\n\tstring string  ").names == [
        "timestamp",
        "string",
    ]


@pytest.mark.parametrize(
    ("ddl", "needles"),
    [
        ("", ("the schema is empty",)),
        ("   ", ("the schema is empty",)),
        ("id integr", ("unknown type 'integr' for 'id'", "character 4")),
        ("id bigint, ts", ("column 'ts' has no type",)),
        ("bigint", ("column 'bigint' has no type",)),
        (", id int", ("expected a column name, found ','", "character 1")),
        ("id int,", ("expected a column name, found nothing", "at the end")),
        ("id int,, x int", ("expected a column name, found ','",)),
        ("id int, id string", ("names 'id' more than once",)),
        ("s struct<a int, a string>", ("struct 's' names 'a' more than once",)),
        ("tags array<string", ("expected '>' to close array<",)),
        ("m map<string, int", ("expected '>' to close map<",)),
        ("s struct<a int", ("expected ',' between the fields of struct 's'",)),
        ("p decimal(10,2", ("expected ')' to close decimal(",)),
        ("id int)", ("unbalanced ')'",)),
        ("a array<int>>", ("unbalanced '>'",)),
        ("a array<>", ("expected the type of 'a.element'",)),
        ("m map<string>", ("between the key and value types",)),
        ("p decimal(50,2)", ("decimal(50, 2) is out of range",)),
        ("p decimal(0)", ("decimal(0, 0) is out of range",)),
        ("p decimal(4,5)", ("decimal(4, 5) is out of range",)),
        ("p decimal(x)", ("expected the precision",)),
        ("v varchar", ("expected '(' after varchar",)),
        ("x interval year to month", ("only day-time intervals",)),
        ("x interval day to month", ("expected day, hour, minute or second after TO",)),
        ("id int; drop table", ("unexpected character ';'",)),
        ("id int not", ("expected 'null' after NOT",)),
        ("id int comment", ("expected a quoted comment after COMMENT",)),
        ("id int comment 'x' not null", ("expected ',' between columns, found 'not'",)),
        ("1d int", ("expected a column name, found '1'",)),
        ("`unclosed int", ("unexpected character '`'",)),
        ("id variant", ("unknown type 'variant'",)),
        ("a " + "array<" * 5000 + "int" + ">" * 5000, ("more than 64 levels deep",)),
    ],
)
def test_bad_ddl_says_what_and_where(ddl: str, needles: tuple[str, ...]) -> None:
    with pytest.raises(InvalidOptionError) as raised:
        parse_schema(ddl)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"schema {ddl[:40]!r}"[:-1])
    for needle in needles:
        assert needle in message, message


def test_not_text() -> None:
    with pytest.raises(InvalidOptionError, match="DDL text, not int"):
        parse_schema(5)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdeintgrsmapucl<>(),: `'0123456789\n", max_size=40))
def test_any_text_parses_or_is_an_invalid_option(ddl: str) -> None:
    """No text makes the parser fail in any other way (an IndexError, a recursion, a hang)."""
    try:
        schema = parse_schema(ddl)
    except InvalidOptionError as exc:
        assert str(exc)
    else:
        assert isinstance(schema, pa.Schema) and len(schema) >= 1
