"""Data and checks shared by the segment-lifecycle tests.

Row ``i`` of every test table is a pure function of ``i``: its ``ts`` is a scrambled function
of the id, so appends arrive in random ``ts`` order and a sorted output is a real property of
compaction, not of the input. A table is checked by rebuilding the rows it should hold from
their ids and comparing every cell after sorting by id (ids are unique, so a duplicated or
lost row changes the comparison).
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

import carbonlite as cl
from carbonlite.format.data_files import open_data_file

__all__ = [
    "SCHEMA",
    "assert_rows",
    "assert_versions_unchanged",
    "canonical",
    "data_files",
    "file_digests",
    "make_rows",
    "read_versions",
    "rows_differ",
    "sorted_file",
    "ts_of",
]

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("name", pa.string()),
        pa.field("value", pa.float64()),
    ]
)
BASE_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
TS_SPAN_US = 86_400_000_000  # one day


def ts_of(ids: pa.Array) -> pa.Array:
    """A scrambled timestamp (microseconds since the epoch) for each id, within one day."""
    scrambled = pc.bit_wise_and(pc.multiply(ids, 2_654_435_761), 0x7FFFFFFF)
    return pc.add(pc.multiply(scrambled, TS_SPAN_US // 0x7FFFFFFF), BASE_US)


def make_rows(ids: Iterable[int] | range) -> pa.Table:
    """The rows of ``ids``: the same id always gives the same row."""
    arr = pa.array(list(ids) if not isinstance(ids, range) else ids, pa.int64())
    names = pc.binary_join_element_wise("name-", pc.cast(arr, pa.string()), "")
    names = pc.if_else(pc.equal(pc.bit_wise_and(arr, 7), 3), pa.scalar(None, pa.string()), names)
    return pa.table(
        {
            "id": arr,
            "ts": ts_of(arr).cast(pa.int64()).view(pa.timestamp("us", tz="UTC")),
            "name": names,
            "value": pc.multiply(pc.cast(arr, pa.float64()), 0.5),
        },
        schema=SCHEMA,
    )


def _canonical(table: pa.Table) -> pa.Table:
    return table.select(SCHEMA.names).sort_by("id").combine_chunks()


def rows_differ(got: pa.Table, ids: Iterable[int]) -> str | None:
    """None when ``got`` holds exactly the rows of ``ids`` (each once), else what differs."""
    ids = sorted(ids)
    if got.num_rows == len(ids) and _canonical(got).equals(_canonical(make_rows(ids))):
        return None
    counts = Counter(got.column("id").to_pylist())
    want = set(ids)
    seen = set(counts)
    dupes = sorted(i for i, n in counts.items() if n > 1)
    lines = [f"{got.num_rows} rows, expected {len(ids)}"]
    if dupes:
        lines.append(f"duplicated ids {dupes[:10]}")
    if want - seen:
        lines.append(f"missing ids {sorted(want - seen)[:10]}")
    if seen - want:
        lines.append(f"unexpected ids {sorted(seen - want)[:10]}")
    if len(lines) == 1:
        lines.append("same ids, but cell values differ")
    return "; ".join(lines)


def assert_rows(got: pa.Table, ids: Iterable[int], context: str = "") -> None:
    problem = rows_differ(got, ids)
    assert problem is None, f"{context}: {problem}" if context else problem


def sorted_file(table: cl.Table, rel: str, column: str = "ts") -> tuple[int, bool]:
    """(rows, whether they are sorted by ``column``) of one data file of ``table``."""
    uri = table.storage.uri(table.storage.join(table.root, rel))
    with open_data_file(uri, storage_options=table.storage_options or None) as reader:
        values = reader.read_all([column]).column(column)
    if len(values) < 2:
        return len(values), True
    ints = values.cast(pa.int64()) if pa.types.is_timestamp(values.type) else values
    ordered = pc.all(pc.less_equal(ints.slice(0, len(ints) - 1), ints.slice(1))).as_py()
    return len(values), bool(ordered)


def data_files(path: str) -> set[str]:
    """Every file under ``segments/`` of a local table, relative to the table root."""
    out = set()
    for dirpath, _, names in os.walk(os.path.join(path, "segments")):
        for n in names:
            out.add(os.path.relpath(os.path.join(dirpath, n), path))
    return out


def file_digests(path: str, rels: Iterable[str]) -> dict[str, tuple[int, str]]:
    """(size, sha256) of each file of a local table."""
    out = {}
    for rel in rels:
        with open(os.path.join(path, rel), "rb") as f:
            data = f.read()
        out[rel] = (len(data), hashlib.sha256(data).hexdigest())
    return out


def canonical(table: pa.Table) -> pa.Table:
    """``table`` sorted by id, one chunk per column: equal tables hold equal row multisets."""
    return _canonical(table)


def read_versions(table: cl.Table) -> dict[int, pa.Table]:
    """Every version of ``table`` read by time travel, canonical."""
    return {v: canonical(table.to_arrow(version=v)) for v in range(table.refresh().version + 1)}


def assert_versions_unchanged(table: cl.Table, before: dict[int, pa.Table]) -> dict[int, pa.Table]:
    """Every version in ``before`` still reads the same rows, and every version committed
    since holds the rows of the last of them (a maintenance operation changes no data).
    Returns the versions as read now."""
    now = read_versions(table)
    for v, rows in before.items():
        assert now[v].equals(rows), (
            f"version {v} changed: {now[v].num_rows} rows, was {rows.num_rows}"
        )
    last = before[max(before)]
    for v in range(max(before) + 1, max(now) + 1):
        assert now[v].equals(last), f"new version {v} changed the rows"
    return now
