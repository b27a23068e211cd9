"""Data and checks shared by the Spark tests and their subprocess drivers.

Source files are small parquet files of ``SOURCE_SCHEMA`` rows with consecutive ids; each file
gets a distinct modification time, so Spark's file source (which orders new files by
modification time) consumes them in name order. Tables are compared as Arrow tables sorted
by a key column, cell by cell.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = [
    "KEYS",
    "SOURCE_DDL",
    "SOURCE_SCHEMA",
    "assert_same_rows",
    "sorted_by",
    "source_rows",
    "write_source_files",
]

SOURCE_SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string()), ("v", pa.float64())])
SOURCE_DDL = "id long, k string, v double"
KEYS = ("a", "b", "c", "d", "e")


def source_rows(first_id: int, count: int) -> pa.Table:
    """``count`` rows with ids ``first_id ..``; ``k`` is one of :data:`KEYS` (unevenly)."""
    ids = list(range(first_id, first_id + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([KEYS[(i * i + i // 7) % len(KEYS)] for i in ids], pa.string()),
            "v": pa.array([i * 0.5 for i in ids], pa.float64()),
        },
        schema=SOURCE_SCHEMA,
    )


def write_source_files(
    directory: str, files: int, rows_per_file: int, *, first_id: int = 0, first_file: int = 0
) -> list[pa.Table]:
    """Write ``files`` parquet files into ``directory``; returns each file's rows, in order."""
    os.makedirs(directory, exist_ok=True)
    base = time.time() - 10_000
    written = []
    for n in range(files):
        rows = source_rows(first_id + n * rows_per_file, rows_per_file)
        index = first_file + n
        path = os.path.join(directory, f"part-{index:04d}.parquet")
        pq.write_table(rows, path)
        os.utime(path, (base + index * 10, base + index * 10))
        written.append(rows)
    return written


def sorted_by(table: pa.Table, key: str | Sequence[str] = "id") -> pa.Table:
    keys = [key] if isinstance(key, str) else list(key)
    return table.sort_by([(k, "ascending") for k in keys])


def _rows(table: pa.Table, key: str | Sequence[str]) -> dict[str, list[Any]]:
    table = sorted_by(table, key)
    return {name: table.column(name).to_pylist() for name in table.column_names}


def assert_same_rows(
    got: pa.Table, expected: pa.Table, *, key: str | Sequence[str] = "id", context: str = ""
) -> None:
    """Same column names and, sorted by ``key``, the same value in every cell (NaN == NaN).

    Values are compared as Python objects, so list/struct field names that Spark and Arrow
    label differently do not matter, while every value, null and row count does."""
    where = f"{context}: " if context else ""
    assert got.column_names == expected.column_names, (
        f"{where}columns {got.column_names} != {expected.column_names}"
    )
    assert got.num_rows == expected.num_rows, (
        f"{where}{got.num_rows} rows, expected {expected.num_rows}"
    )
    a, b = _rows(got, key), _rows(expected, key)
    for name in got.column_names:
        if a[name] != b[name] and not _equal_with_nan(a[name], b[name]):
            bad = next(i for i, (x, y) in enumerate(zip(a[name], b[name], strict=True)) if x != y)
            raise AssertionError(
                f"{where}column {name!r} differs first at sorted row {bad}: "
                f"{a[name][bad]!r} != {b[name][bad]!r}"
            )


def _equal_with_nan(xs: list[Any], ys: list[Any]) -> bool:
    def same(x: Any, y: Any) -> bool:
        return x == y or (isinstance(x, float) and isinstance(y, float) and x != x and y != y)

    return len(xs) == len(ys) and all(same(x, y) for x, y in zip(xs, ys, strict=True))


def ids_of(table: pa.Table) -> list[int]:
    """The ``id`` column, sorted (duplicates kept, so a repeated row shows)."""
    return sorted(pc.cast(table.column("id"), pa.int64()).to_pylist())
