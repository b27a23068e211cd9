"""DuckDB 1.4's ``iceberg_scan`` (its own Iceberg and Avro extensions, in a venv of its own:
tests/support/duckdb_env.py) reads the Iceberg view as CarbonLite reads the table, column by
column, after every kind of change. Slow tier: the venv is made once (about 30 s)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import carbonlite as cl
from tests.iceberg.test_iceberg_view import (
    SCHEMA_CHANGES,
    canonical,
    handed_off,
    latest_metadata,
    new_table,
    rows,
)
from tests.support.duckdb_env import SCAN, duckdb_python

pytestmark = pytest.mark.slow


def duckdb_reads(t: cl.Table, out: Path) -> pa.Table:
    """DuckDB's read of the table's latest Iceberg metadata."""
    done = subprocess.run(
        [str(duckdb_python()), "-c", SCAN, latest_metadata(t), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return pq.read_table(out)


def _changed(t: cl.Table) -> None:
    t.delete(pc.field("id").isin(list(range(0, 2000, 7))))
    t.update(pc.field("id") < 20, {"score": pc.scalar(-1.0)})
    handed_off(t)


CASES: dict[str, Callable[[cl.Table], Any]] = {
    "appends": lambda t: None,
    "deletes_and_updates": _changed,
    "merge": lambda t: handed_off(
        t.merge(rows(1990, 20), on=["id"], when_matched="update", when_not_matched="insert") and t
    ),
    **{f"schema_{k}": change for k, change in SCHEMA_CHANGES.items()},
    "compaction": lambda t: (t.append(rows(2000, 500)), handed_off(t), t.compact("major")),
}


@pytest.mark.parametrize("version", ["v2", "v3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_duckdb_reads_what_carbonlite_reads(tmp_path: Path, case: str, version: str) -> None:
    """v2 (position-delete files) and v3 (deletion vectors in Puffin files) alike."""
    t = new_table(
        tmp_path / "t", version, partition_by=["day(ts)"] if case == "compaction" else None
    )
    t.append(rows(0, 1000))
    t.append(rows(100_000, 1000))
    handed_off(t)
    CASES[case](t)
    t = t.refresh()
    got = duckdb_reads(t, tmp_path / "duckdb.parquet")
    ours = t.to_arrow()
    assert got.schema.names == ours.schema.names
    got_rows, our_rows = canonical(got), canonical(ours)
    assert len(got_rows) == len(our_rows)
    for name in ours.schema.names:  # column by column (a wrong field id reads all NULL)
        assert [r[name] for r in got_rows] == [r[name] for r in our_rows], name
