"""SQL-ish filter strings (``reader/sql_filter.py``): read into the same filter as the DNF
terms they spell, with literals typed by their column; anything else is refused by place."""

from __future__ import annotations

import datetime
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.reader.expression import parse_filter

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us")),
        ("s", pa.string()),
        ("f", pa.float64()),
    ]
)
DAY = datetime.date(2026, 1, 1)


@pytest.mark.parametrize(
    ("text", "dnf"),
    [
        ("id > 5", [("id", ">", 5)]),
        ("id <> 5 and f <= 1.5", [("id", "!=", 5), ("f", "<=", 1.5)]),
        (
            "day >= '2026-01-01' AND day < DATE '2026-02-01'",
            [("day", ">=", DAY), ("day", "<", datetime.date(2026, 2, 1))],
        ),
        (
            "ts = TIMESTAMP '2026-01-01 10:30:00'",
            [("ts", "==", datetime.datetime(2026, 1, 1, 10, 30))],
        ),
        (
            "s IN ('a', 'it''s') or id BETWEEN 1 AND 3",
            [[("s", "in", ["a", "it's"])], [("id", ">=", 1), ("id", "<=", 3)]],
        ),
        (
            "(id = 1 OR id = 2) AND `s` NOT IN ('x')",
            [[("id", "=", 1), ("s", "not in", ["x"])], [("id", "=", 2), ("s", "not in", ["x"])]],
        ),
    ],
)
def test_sql_strings_are_the_filters_they_spell(text: str, dnf: Any) -> None:
    parsed = parse_filter(text, SCHEMA, where="t")
    expected = parse_filter(dnf, SCHEMA, where="t")
    assert parsed is not None and expected is not None
    assert parsed.expression.equals(expected.expression), (parsed.expression, expected.expression)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("id >", "expected a literal"),
        ("abs(id) > 1", "expected a comparison operator"),
        ("id > 1 AND", "expected a column name"),
        ("day = 'soon'", "not an ISO date"),
        ("id = 1)", "unexpected text"),
        ("nope = 1", "does not have"),
        ("  ", "empty predicate"),
    ],
)
def test_bad_sql_strings_are_refused_by_place(text: str, needle: str) -> None:
    with pytest.raises(cl.InvalidFilterError, match=needle):
        parse_filter(text, SCHEMA, where="t")


def test_a_table_reads_with_a_sql_string(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, SCHEMA)
    days = [DAY + datetime.timedelta(days=n) for n in range(40)]
    t.append(
        pa.table(
            {
                "id": list(range(40)),
                "day": days,
                "ts": [datetime.datetime(2026, 1, 1)] * 40,
                "s": ["a", "b"] * 20,
                "f": [0.5] * 40,
            },
            SCHEMA,
        )
    )
    got = t.to_arrow(filter="day >= '2026-01-31' AND s = 'a'").column("id").to_pylist()
    assert sorted(got) == [i for i in range(30, 40) if i % 2 == 0]
