"""A small table of every kind of column the engines translate filters on, in 11 blocklets."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.reader.scan import SplitReader

N = 5_000
"""Rows of version 1, in blocklets of 500 (10 blocklets); version 2 adds one of 10 rows."""
UTC = datetime.timezone.utc
START = datetime.datetime(2026, 1, 1, tzinfo=UTC)

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("k", pa.string()),
        ("x", pa.float64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("d", pa.date32()),
        ("i32", pa.int32()),
        ("flag", pa.bool_()),
    ]
)


def make_data(n: int = N) -> pa.Table:
    """``id`` sorted; ``k`` with nulls; ``x`` random with NaN and nulls; ``ts`` and ``d``
    increasing; ``i32`` unsorted with negatives; ``flag`` with nulls."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=n).tolist()
    for i in range(0, n, 97):
        x[i] = float("nan")
    for i in range(5, n, 89):
        x[i] = None
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "k": pa.array([None if i % 11 == 0 else f"k{i % 7}" for i in range(n)]),
            "x": pa.array(x, pa.float64()),
            "ts": pa.array(
                [START + datetime.timedelta(minutes=i) for i in range(n)], SCHEMA.field("ts").type
            ),
            "d": pa.array(
                [START.date() + datetime.timedelta(days=i // 100) for i in range(n)], pa.date32()
            ),
            "i32": pa.array([(i * 7919) % 1000 - 500 for i in range(n)], pa.int32()),
            "flag": pa.array([None if i % 13 == 0 else i % 3 == 0 for i in range(n)]),
        },
        schema=SCHEMA,
    )


LATE = pa.table({"id": pa.array(range(N, N + 10), pa.int64()), "k": ["late"] * 10})
"""Version 2: ten more rows, every other column null."""


@pytest.fixture(scope="package")
def table(tmp_path_factory: pytest.TempPathFactory) -> cl.Table:
    """The table at version 2 (version 1: ``make_data()``; version 2: ``LATE`` appended)."""
    path = str(tmp_path_factory.mktemp("engines") / "t")
    t = cl.create_table(path, SCHEMA, sort_columns=["id"], properties={"blocklet_max_rows": "500"})
    t.append(make_data())
    t.append(LATE, schema_mode="merge")  # the other columns null
    return t


@pytest.fixture(scope="package")
def everything(table: cl.Table) -> pa.Table:
    """Every row at the latest version, read plainly: what the engines are compared with."""
    return table.to_arrow()


@pytest.fixture
def blocklets_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Offsets of the blocklets read while the test runs (any thread)."""
    seen: list[int] = []
    original = SplitReader.read_blocklet

    def counting(self, split, blocklet, output, filter, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(blocklet.offset)
        return original(self, split, blocklet, output, filter, **kwargs)

    monkeypatch.setattr(SplitReader, "read_blocklet", counting)
    return seen


def rows(data: object) -> list[dict[str, object]]:
    """The rows of an Arrow table (or of anything ``pa.table`` takes), with NaN written as
    the string ``"NaN"`` so that equal tables compare equal."""
    table = data if isinstance(data, pa.Table) else pa.table(data)
    return [
        {k: "NaN" if isinstance(v, float) and v != v else v for k, v in row.items()}
        for row in table.to_pylist()
    ]


def assert_same(got: object, want: pa.Table) -> None:
    """``got`` holds exactly ``want``'s rows, in order, with its schema."""
    table = got if isinstance(got, pa.Table) else pa.table(got)
    assert table.schema == want.schema
    assert rows(table) == rows(want)
