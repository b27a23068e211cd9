"""Parsed filters are kept (reader/expression.py, ``_PARSED``): the same string or Arrow
expression against the same schema is parsed once, its result the same as a fresh parse's with
the caller's ``where``; another schema, another literal type or a refused filter is parsed
again; planning a table's tails once per snapshot reads the same blocklets; and the rows a
filter keeps in one unbroken run are a slice, equal to what ``filter`` copies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import carbonlite as cl
from carbonlite.errors import InvalidFilterError
from carbonlite.reader import expression

INTS = pa.schema([("a", pa.int64()), ("s", pa.string())])
STRINGS = pa.schema([("a", pa.string()), ("s", pa.string())])


@pytest.fixture()
def parses(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The filters actually parsed (not taken from the cache) from here on."""
    monkeypatch.setattr(expression, "_PARSED", type(expression._PARSED)())
    seen: list[Any] = []
    real = expression._parse

    def counted(filter: Any, schema: pa.Schema, *, where: str) -> Any:
        seen.append(filter)
        return real(filter, schema, where=where)

    monkeypatch.setattr(expression, "_parse", counted)
    return seen


def test_the_same_filter_on_the_same_schema_is_parsed_once(parses: list[Any]) -> None:
    e = (pc.field("a") > 5) & (pc.field("s") == "x")
    first = expression.parse_filter(e, INTS, where="table one")
    again = expression.parse_filter((pc.field("a") > 5) & (pc.field("s") == "x"), INTS, where="two")
    assert len(parses) == 1
    assert first is not None and again is not None
    assert again.expression.equals(first.expression)
    assert again.predicate == first.predicate and again.columns == first.columns
    assert (first.where, again.where) == ("table one", "two")
    for _ in range(2):
        expression.parse_filter("a >= 3 AND s = 'y'", INTS, where="t")
    assert len(parses) == 2


def test_another_schema_or_literal_type_is_parsed_again(parses: list[Any]) -> None:
    assert expression.parse_filter(pc.field("a") > 5, INTS, where="t") is not None
    with pytest.raises(InvalidFilterError):
        expression.parse_filter(pc.field("a") > 5, STRINGS, where="t")
    found = expression.parse_filter(pc.field("a") > pa.scalar(5, pa.int8()), INTS, where="t")
    assert found is not None
    assert len(parses) == 3


def test_refused_filters_dnf_and_fields_by_position_are_parsed_every_time(
    parses: list[Any],
) -> None:
    for _ in range(2):
        with pytest.raises(InvalidFilterError):
            expression.parse_filter(pc.field("nope") > 1, INTS, where="t")
        expression.parse_filter([("a", ">", 1)], INTS, where="t")
        expression.parse_filter(pc.field(0) > 1, INTS, where="t")  # no serialization: not kept
    assert len(parses) == 6


def test_plans_of_one_snapshot_share_its_tail_entries(tmp_path: Path) -> None:
    t = cl.create_table(tmp_path / "t", INTS, properties={"columnar_format": "parquet"})
    for i in range(3):
        t.append(pa.table({"a": [i * 10 + j for j in range(10)], "s": ["x"] * 10}, INTS))
    t.finish_streaming()
    t.handoff()
    t.append(pa.table({"a": [100], "s": ["tail"]}, INTS))
    snapshot = t.snapshot()
    plans = [t.scan(filter=f).plan for f in (pc.field("a") >= 15, pc.field("a") == 100, None)]
    assert "tail_entries" in snapshot._memo
    got = [
        t.to_arrow(filter=f).column("a").to_pylist()
        for f in (pc.field("a") >= 15, pc.field("a") == 100)
    ]
    assert sorted(got[0]) == [*range(15, 30), 100] and got[1] == [100]
    assert plans[2].blocklets_selected >= plans[0].blocklets_selected >= plans[1].blocklets_selected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.booleans()), max_size=60), st.integers(0, 60), st.data())
def test_kept_rows_are_the_rows_filter_keeps(
    values: list[bool | None], start: int, data: st.DataObject
) -> None:
    """Masks of nulls, falses and trues, often one run of trues (a sorted range)."""
    if data.draw(st.booleans()) and values:
        run = data.draw(st.integers(0, len(values)))
        values = [start <= i < start + run for i in range(len(values))]
    mask = pa.array(values, pa.bool_())
    batch = pa.record_batch({"x": list(range(len(values))), "s": [f"v{i}" for i in values]})
    got = expression._kept(batch, mask)
    assert got.equals(batch.filter(mask))
