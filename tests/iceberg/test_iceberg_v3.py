"""Iceberg v3 (``iceberg = v3``): deletes are deletion vectors in Puffin files, nanosecond
timestamps are Iceberg types. pyiceberg and Polars read each case as CarbonLite does (the
checks of test_iceberg_view.py), and the Puffin files are what the spec gives."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.table import StaticTable
from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
from pyiceberg.table.puffin import PuffinFile

import carbonlite as cl
from carbonlite.iceberg import read_state
from tests.iceberg.test_iceberg_view import (
    SCHEMA_CHANGES,
    _filled,
    assert_readers_agree,
    canonical,
    handed_off,
    latest_metadata,
    new_table,
    rows,
)


def test_deletes_are_deletion_vectors_in_puffin_files(tmp_path: Path) -> None:
    t = _filled(tmp_path, "v3")
    t.delete(pc.field("id").isin(list(range(0, 2000, 3))))
    assert_readers_agree(t)
    _, doc = read_state(t.storage, t.root)  # type: ignore[misc]
    assert doc["format-version"] == 3
    table = StaticTable.from_metadata(latest_metadata(t))
    tasks = list(table.scan().plan_files())
    deletes = {d.file_path for task in tasks for d in task.delete_files}
    assert deletes and all(p.endswith(".puffin") for p in deletes)
    (puffin,) = deletes
    vectors = deletion_vectors_from_puffin_file(PuffinFile(Path(puffin).read_bytes()))
    deleted = {v.referenced_data_file: v.to_vector().to_pylist() for v in vectors}
    assert sum(len(v) for v in deleted.values()) == len(range(0, 2000, 3))
    data_files = {task.file.file_path: task.file.record_count for task in tasks}
    for path, positions in deleted.items():  # each vector names a data file, within its rows
        assert path in data_files and max(positions) < data_files[path]
    t.update(pc.field("id") < 50, {"score": pc.scalar(-2.0)})
    handed_off(t)
    assert_readers_agree(t)
    t.merge(rows(1990, 20), on=["id"], when_matched="update", when_not_matched="insert")
    handed_off(t)
    assert_readers_agree(t)


@pytest.mark.parametrize("change", sorted(SCHEMA_CHANGES))
def test_schema_changes(tmp_path: Path, change: str) -> None:
    t = _filled(tmp_path, "v3")
    t.delete(pc.field("id").isin([1, 2, 3]))
    SCHEMA_CHANGES[change](t)
    t.append(rows(2000, 600, t.schema))
    handed_off(t)
    assert_readers_agree(t)


def test_partitions_compaction_restore_and_clean(tmp_path: Path) -> None:
    t = new_table(tmp_path / "t", "v3", partition_by=["day(ts)"])
    t.append(rows(0, 1000))
    t.append(rows(100_000, 1000))
    handed_off(t)
    version = t.version
    t.delete(pc.field("id") < 100)
    assert_readers_agree(t)
    t.compact("major")
    assert_readers_agree(t)
    t.restore(version)
    assert_readers_agree(t)
    t.clean(retention=0, force=True)
    assert_readers_agree(t)


def test_nanosecond_timestamps(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("ns", tz="UTC"))])
    t = cl.create_table(tmp_path / "t", schema, properties={"iceberg": "v3"})
    base = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    ticks = [int(base.timestamp()) * 10**9 + i * 1_001 for i in range(100)]  # not whole micros
    t.append(pa.table({"id": range(100), "ts": pa.array(ticks, pa.timestamp("ns", tz="UTC"))}))
    handed_off(t)
    got = StaticTable.from_metadata(latest_metadata(t)).scan().to_arrow()
    assert got.schema.field("ts").type.unit == "ns"
    assert got.sort_by("id").column("ts").cast(pa.int64()).to_pylist() == ticks
    assert canonical(t.to_arrow()) == canonical(got)


def test_switching_v2_to_v3_rewrites_the_view(tmp_path: Path) -> None:
    t = _filled(tmp_path, "v2")
    t.delete(pc.field("id") < 10)
    t.set_properties({"iceberg": "v3"})
    _, doc = read_state(t.storage, t.root)  # type: ignore[misc]
    assert doc["format-version"] == 3
    assert_readers_agree(t)
