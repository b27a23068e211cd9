"""Spark DDL column lists to Arrow schemas (``carbonlite/ddl.py``), and every way one can be
wrong: an ``InvalidOptionError`` that says what and where, never another exception. Also
columns to add with their DEFAULT literals (``parse_columns``)."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbonlite.ddl import ColumnDefinition, parse_columns, parse_schema, parse_type
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


@pytest.mark.parametrize(
    ("ddl", "field", "default"),
    [
        ("c int default 0", pa.field("c", pa.int32()), 0),
        ("c bigint default -9223372036854775808", pa.field("c", pa.int64()), -(2**63)),
        ("c tinyint default +127", pa.field("c", pa.int8()), 127),
        ("c double default -2.5e-3", pa.field("c", pa.float64()), -0.0025),
        ("c float default 3", pa.field("c", pa.float32()), 3.0),
        ("c decimal(6, 2) default 12.5", pa.field("c", pa.decimal128(6, 2)), Decimal("12.50")),
        ("c boolean default FALSE", pa.field("c", pa.bool_()), False),
        ("c string default 'a\\'b'", pa.field("c", pa.string()), "a'b"),
        ('c string default "two words"', pa.field("c", pa.string()), "two words"),
        ("c binary default 'xy'", pa.field("c", pa.binary()), b"xy"),
        ("c date default date '2024-02-29'", pa.field("c", pa.date32()), datetime.date(2024, 2, 29)),
        ("c date default '2024-02-29'", pa.field("c", pa.date32()), datetime.date(2024, 2, 29)),
        (
            "c timestamp default TIMESTAMP '2024-01-01 00:00:00.5-01:00'",
            pa.field("c", UTC_US),
            datetime.datetime(2024, 1, 1, 1, 0, 0, 500000, tzinfo=datetime.timezone.utc),
        ),
        (
            "c timestamp default DATE '2024-01-01'",
            pa.field("c", UTC_US),
            datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
        ),
        (
            "`my c` timestamp_ntz default TIMESTAMP '2024-01-01T08:00' comment 'x'",
            pa.field("my c", pa.timestamp("us")),
            datetime.datetime(2024, 1, 1, 8),
        ),
        ("c int comment 'later' default 5", pa.field("c", pa.int32()), 5),
    ],
)  # fmt: skip
def test_a_column_with_a_default(ddl: str, field: pa.Field, default: object) -> None:
    assert parse_columns(ddl) == [ColumnDefinition(field, default, has_default=True)]


def test_several_columns_some_with_defaults() -> None:
    assert parse_columns("a int, b string default 'x', c array<int>") == [
        ColumnDefinition(pa.field("a", pa.int32())),
        ColumnDefinition(pa.field("b", pa.string()), "x", has_default=True),
        ColumnDefinition(pa.field("c", pa.list_(pa.int32()))),
    ]


@pytest.mark.parametrize(
    ("ddl", "needle"),
    [
        ("c int default 2147483648", "out of its range, -2147483648 to 2147483647"),
        ("c int default 1e3", "give a whole number"),
        ("c decimal(3, 1) default 100", "does not fit"),
        ("c date default TIMESTAMP '2024-01-01 00:00:00'", "give DATE 'yyyy-mm-dd'"),
        ("c timestamp default 'yesterday'", "is not a timestamp"),
        ("c int default -x", "expected a number after '-'"),
        ("c int default DATE", "expected a quoted value after DATE"),
        ("c int default (1)", "expected a literal after DEFAULT"),
        ("c int default 1 2", "expected ',' between columns, found '2'"),
        ("c int default 1 default 2", "found 'default'"),
        ("c map<string, int> default 'x'", "defaults are for"),
        ("c int - 1", "expected ',' between columns, found '-'"),
    ],
)
def test_a_bad_default_says_what_and_where(ddl: str, needle: str) -> None:
    with pytest.raises(InvalidOptionError) as raised:
        parse_columns(ddl)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"columns {ddl!r}"[:-1])
    assert needle in message, message


def test_a_schema_takes_no_defaults() -> None:
    """``create`` has no defaults: DEFAULT is only for columns added to a table."""
    with pytest.raises(InvalidOptionError, match="found 'default'"):
        parse_schema("c int default 0")
    with pytest.raises(InvalidOptionError, match="unexpected character '-'"):
        parse_schema("c int, -1")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdefintgrsmapul<>(),: `'0123456789.-+eE\n", max_size=40))
def test_any_column_text_parses_or_is_an_invalid_option(ddl: str) -> None:
    try:
        columns = parse_columns(ddl)
    except InvalidOptionError as exc:
        assert str(exc)
    else:
        assert columns and all(isinstance(c.field, pa.Field) for c in columns)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="abcdefintgrsmapul<>(),: `'0123456789.-+", max_size=30))
def test_any_type_text_parses_or_is_an_invalid_option(ddl: str) -> None:
    try:
        kind = parse_type(ddl)
    except InvalidOptionError as exc:
        assert str(exc)
    else:
        assert isinstance(kind, pa.DataType)
