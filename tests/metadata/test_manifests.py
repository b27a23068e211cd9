"""Manifests: columns named like manifest fields never clash, damage and loss are named."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import carbonlite as cl
from carbonlite.metadata import manifest
from carbonlite.metadata.blocklet_index import entries_table

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


SUMMARY_SCHEMA = pa.schema(
    [
        ("i", pa.int32()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("d", pa.decimal128(9, 2)),
        ("t", pa.timestamp("us")),
        ("b", pa.bool_()),
        ("l", pa.list_(pa.int8())),
    ]
)


VALUES = {
    "i": st.none() | st.integers(-(2**31), 2**31 - 1),
    "f": st.none() | st.floats(allow_nan=True) | st.sampled_from([0.0, -0.0, float("nan")]),
    "s": st.none() | st.text(max_size=40),
    "d": st.none() | st.decimals(-(10**6), 10**6, places=2, allow_nan=False),
    "t": st.none() | st.datetimes(),
    "b": st.none() | st.booleans(),
    "l": st.none() | st.lists(st.integers(-128, 127), max_size=3),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_small_manifest_is_summarized_as_arrow_summarizes_it(data: st.DataObject) -> None:
    """The Python summary of a small manifest (what every checkpoint's new manifest gets)
    equals the Arrow one: nulls, NaNs, bounds over the entries that hold values."""
    n = data.draw(st.integers(1, 40))
    columns = {
        f.name: pa.array(data.draw(st.lists(VALUES[f.name], min_size=n, max_size=n)), f.type)
        for f in SUMMARY_SCHEMA
    }
    table = pa.table(columns, schema=SUMMARY_SCHEMA)
    t = cl.create_table(
        f"memory://summary/{uuid.uuid4().hex}",
        SUMMARY_SCHEMA,
        properties={
            "blocklet_max_rows": str(data.draw(st.integers(1, 8))),
            "checkpoint_max_entries": "100000",  # no checkpoint: every entry in the tail
        },
    )
    t.append(table)
    snapshot = t.snapshot()
    groups = [(f.path, f.tail) for s in snapshot.segments.values() for f in s.files.values()]
    entries = entries_table(groups, snapshot.physical_schema)
    assert 0 < entries.num_rows <= manifest.SMALL_SUMMARY_ROWS
    small = manifest.summarize(entries, snapshot.physical_schema)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(manifest, "SMALL_SUMMARY_ROWS", 0)
        arrow = manifest.summarize(entries, snapshot.physical_schema)
    assert small == arrow
