"""Manifests: columns named like manifest fields never clash, damage and loss are named."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl

CLASHING = pa.schema(
    [("file", pa.int64()), ("offset", pa.string()), ("length", pa.float64()), ("rows", pa.int32())]
)


def make(path: Path, commits: int = 6) -> cl.Table:
    t = cl.create_table(
        path, CLASHING, properties={"checkpoint_interval": "5", "checkpoint_max_entries": "100000"}
    )
    for i in range(commits):
        t.append(
            pa.table(
                {
                    "file": [i * 10, i * 10 + 1],
                    "offset": [f"o{i}", None],
                    "length": [float(i), 0.5],
                    "rows": pa.array([i, i], pa.int32()),
                },
                schema=CLASHING,
            )
        )
    return t


def manifest_file(path: Path) -> Path:
    """The one manifest of a table checkpointed once."""
    (found,) = (path / "_carbonlite" / "manifests").iterdir()
    return found


def test_columns_named_like_index_fields_keep_their_statistics(tmp_path: Path) -> None:
    path = tmp_path / "t"
    written = make(path).to_arrow()
    t = cl.open_table(path)  # from the checkpoint at version 5
    entries = [b for _s, f in t.snapshot().iter_files() for b in f.blocklets]
    assert [b.stats["file"].min for b in entries] == [0, 10, 20, 30, 40, 50]
    assert entries[3].stats["offset"].null_count == 1
    plan = t.plan_splits(filter=pc.field("file") >= 50)
    assert (plan.blocklets_total, plan.blocklets_selected) == (6, 1)
    assert t.to_arrow().equals(written)


def test_a_damaged_manifest_is_named_when_entries_are_needed(tmp_path: Path) -> None:
    path = tmp_path / "t"
    make(path)
    manifest = manifest_file(path)
    data = bytearray(manifest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    manifest.write_bytes(bytes(data))
    t = cl.open_table(path)  # opening needs no entries
    assert t.count_rows() == 12
    with pytest.raises(cl.CorruptDataError, match="checksum") as info:
        t.to_arrow()
    assert str(manifest) in str(info.value)


def test_a_missing_manifest_is_named(tmp_path: Path) -> None:
    path = tmp_path / "t"
    make(path)
    manifest = manifest_file(path)
    os.unlink(manifest)
    t = cl.open_table(path)
    assert t.count_rows() == 12
    with pytest.raises(cl.CorruptDataError, match="gone") as info:
        t.to_arrow()
    assert str(manifest) in str(info.value)
