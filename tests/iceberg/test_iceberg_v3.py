"""Iceberg v3 (``iceberg = v3``): deletes are deletion vectors in Puffin files, nanosecond
timestamps are Iceberg types. pyiceberg and Polars read each case as CarbonLite does (the
checks of test_iceberg_view.py), and the Puffin files are what the spec gives."""

from __future__ import annotations

import datetime as dt
import io
import itertools
from pathlib import Path
from typing import Any

import fastavro
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
    T0,
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


def _lineage(t: cl.Table) -> tuple[dict[str, Any], dict[str, tuple[int, int]]]:
    """The newest metadata document, and each data manifest of its current snapshot:
    (first row id, rows), by the manifest's segment (``seg-<id>-...``)."""
    _, doc = read_state(t.storage, t.root)  # type: ignore[misc]
    current = next(s for s in doc["snapshots"] if s["snapshot-id"] == doc["current-snapshot-id"])
    listed = fastavro.reader(
        io.BytesIO(Path(current["manifest-list"].removeprefix("file://")).read_bytes())
    )
    manifests = {}
    for m in listed:
        assert isinstance(m, dict)
        if m["content"] == 0:
            segment = m["manifest_path"].rsplit("/", 1)[-1].split("-")[1]
            manifests[segment] = (m["first_row_id"], m["added_rows_count"])
    return doc, manifests


def test_row_lineage_gives_each_row_an_id_kept_while_its_file_lives(tmp_path: Path) -> None:
    """v3 row lineage (Iceberg's first-row-id inheritance): new rows take the next ids, a
    segment's rows keep theirs across later snapshots, a rename (which writes every manifest
    again) and a delete; compaction's rewritten rows are new rows, with new ids."""
    t = handed_off(new_table(tmp_path / "t", "v3"))  # nothing yet
    t.append(rows(0, 300))
    handed_off(t)
    doc, first = _lineage(t)
    ((seg_a, (id_a, rows_a)),) = first.items()
    assert (id_a, rows_a) == (0, 300) and doc["next-row-id"] == 300
    t.append(rows(300, 200))
    handed_off(t)
    doc, second = _lineage(t)
    seg_b = next(s for s in second if s != seg_a)
    assert second == {seg_a: (0, 300), seg_b: (300, 200)} and doc["next-row-id"] == 500
    snap = StaticTable.from_metadata(latest_metadata(t)).current_snapshot()
    assert snap is not None and (snap.first_row_id, snap.added_rows) == (300, 200)
    t.rename_column("name", "title")
    t.delete(pc.field("id") < 10)
    doc, third = _lineage(t)
    assert third == second and doc["next-row-id"] == 500
    snap = StaticTable.from_metadata(latest_metadata(t)).current_snapshot()
    assert snap is not None and (snap.first_row_id, snap.added_rows) == (500, 0)
    t.compact("major")
    doc, fourth = _lineage(t)
    assert all(first_id >= 500 for first_id, _ in fourth.values())
    assert doc["next-row-id"] == 500 + sum(n for _, n in fourth.values())
    ids = sorted((first_id, first_id + n) for first_id, n in fourth.values())
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ids))  # no id given twice
    assert_readers_agree(t)


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_an_export_reads_only_deletion_vectors_it_has_not_exported(
    tmp_path: Path, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Delete files are named by the deletion vectors' places in the log: a later export whose
    deletes did not change names the same files without reading a vector again; a new delete
    reads them to write the new file. Readers agree each time."""
    from carbonlite.iceberg import export

    decoded: list[str] = []
    real = export.deleted_positions

    def counted(storage: Any, root: str, f: Any) -> Any:
        decoded.append(f.path)
        return real(storage, root, f)

    monkeypatch.setattr(export, "deleted_positions", counted)
    t = handed_off(new_table(tmp_path / "t", version))
    t.append(rows(0, 300))
    handed_off(t)
    t.delete(pc.field("id") < 10)
    assert len(decoded) == 1
    assert_readers_agree(t)
    decoded.clear()
    t.append(rows(300, 100))
    handed_off(t)  # a new segment: a new view, the same deletes
    t.rename_column("name", "title")
    assert decoded == []
    assert_readers_agree(t)
    t.delete(pc.field("id").isin([20, 320]))
    assert len(decoded) == 2  # both files' vectors changed
    assert_readers_agree(t)


@pytest.mark.parametrize("version", ["v2", "v3"])
@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_delete_file_under_the_exports_name_is_written_again(
    tmp_path: Path, version: str, damage: str
) -> None:
    """A delete file is named by the vectors it holds, so the next export finds it by name
    and does not read it whole. One cut short or overwritten (outside CarbonLite's doing)
    is written again with the bytes its name stands for, and readers read the right rows."""
    t = _filled(tmp_path, version)
    t.delete(pc.field("id") < 10)
    suffix = ".puffin" if version == "v3" else ".parquet"
    [path] = [
        p for p in (tmp_path / "t" / "metadata").iterdir() if p.name.startswith(("dv-", "del-"))
    ]
    assert path.suffix == suffix
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2] if damage == "truncated" else b"x" * len(good))
    t.append(rows(2000, 100))
    handed_off(t)  # a new segment: a new view, the same deletes
    assert path.read_bytes() == good
    assert_readers_agree(t)


def test_a_column_added_with_a_default_is_its_initial_default_in_v3(tmp_path: Path) -> None:
    """Iceberg v3 gives a column an ``initial-default``: what its rows in files written
    before it read as. pyiceberg and Polars read the rows handed off before the columns were
    added with their defaults, as CarbonLite does; v2 still refuses such a column."""
    t = _filled(tmp_path, "v3")
    defaults = {
        "count": 5,
        "label": "none",
        "since": dt.date(2026, 1, 1),
        "at": dt.datetime(2026, 1, 1, 12, 30, 0, 250, tzinfo=dt.timezone.utc),
        "ratio": 0.5,
        "flag": True,
    }
    t.add_columns(
        [
            pa.field("count", pa.int64()),
            pa.field("label", pa.string()),
            pa.field("since", pa.date32()),
            pa.field("at", pa.timestamp("us", tz="UTC")),
            pa.field("ratio", pa.float64()),
            pa.field("flag", pa.bool_()),
        ],
        defaults=defaults,
    )
    new = rows(2000, 300)
    for name, values in {
        "count": pa.array(range(300), pa.int64()),
        "label": pa.array([f"x{i}" for i in range(300)]),
        "since": pa.array([dt.date(2027, 1, 1)] * 300),
        "at": pa.array([T0] * 300, pa.timestamp("us", tz="UTC")),
        "ratio": pa.array([0.25] * 300),
        "flag": pa.array([False] * 300),
    }.items():
        new = new.append_column(name, values)
    t.append(new)
    handed_off(t)
    assert_readers_agree(t)
    _, doc = read_state(t.storage, t.root)  # type: ignore[misc]
    [schema] = [s for s in doc["schemas"] if s["schema-id"] == doc["current-schema-id"]]
    given = {f["name"]: f.get("initial-default") for f in schema["fields"]}
    assert given["count"] == 5 and given["label"] == "none" and given["since"] == "2026-01-01"
    assert given["at"] == "2026-01-01T12:30:00.000250+00:00" and given["flag"] is True
    old = StaticTable.from_metadata(latest_metadata(t)).scan(row_filter="id < 10").to_arrow()
    assert set(old.column("count").to_pylist()) == {5}
    assert set(old.column("at").to_pylist()) == {defaults["at"]}
    with pytest.raises(cl.CarbonLiteError, match="'count' has the default 5: Iceberg v2"):
        t.set_properties({"iceberg": "v2"})
