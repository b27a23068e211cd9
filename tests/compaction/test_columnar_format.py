"""``columnar_format``: new tables hand off and compact to Parquet, older tables keep blocklet
files, compaction converts; planning prunes Parquet files exactly as blocklet files (the same
``ScanPlan`` counts), and a Parquet reader no one here wrote (pyarrow.dataset) reads the files
with the table's column ids as field ids."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import carbonlite as cl
from carbonlite.format.field_ids import field_id
from carbonlite.metadata.columns import column_ids
from tests.support.places import Place

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
PROPS = {
    "handoff_blocklet_rows": "500",
    "bloom_filter_columns": "name",
    "secondary_index_columns": "id",
}


def rows(first: int, n: int) -> pa.Table:
    ids = list(range(first, first + n))
    return pa.table(
        {"id": ids, "name": [f"n{i}" for i in ids], "score": [i / 4 for i in ids]}, schema=SCHEMA
    )


def columnar_files(t: cl.Table) -> list[str]:
    snap = t.refresh().snapshot()
    return sorted(
        f.path
        for s in snap.segments.values()
        if s.format == "COLUMNAR" and s.status == "SUCCESS"
        for f in s.files.values()
    )


def filled(t: cl.Table, batches: int = 3) -> cl.Table:
    """``batches`` handed-off segments of 2,000 rows each, then a streaming one."""
    for b in range(batches):
        t.append(rows(b * 2000, 2000))
        t.finish_streaming()
        t.handoff()
    t.append(rows(batches * 2000, 100))
    return t


def canonical(table: pa.Table) -> list[dict[str, object]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])  # type: ignore[arg-type, return-value]


def test_a_new_table_hands_off_to_parquet_that_pyarrow_reads(tmp_path: Path) -> None:
    t = filled(cl.create_table(tmp_path / "t", SCHEMA, properties=PROPS))
    assert t.properties["columnar_format"] == "parquet"
    files = columnar_files(t)
    assert len(files) == 3 and all(f.endswith(".parquet") for f in files)
    paths = [str(tmp_path / "t" / f) for f in files]
    read = ds.dataset(paths, format="parquet").to_table()
    assert canonical(read) == canonical(t.to_arrow(filter=pc.field("id") < 6000))
    ids = column_ids(t.snapshot().metadata)
    for path in paths:
        assert [field_id(f) for f in pq.read_schema(path)] == list(ids)
        assert pq.ParquetFile(path).metadata.num_row_groups == 4  # 500 rows a blocklet
    t.delete(pc.field("id").isin(list(range(0, 6100, 3))))  # deletion vectors on Parquet files
    assert t.count_rows() == 6100 - len(range(0, 6100, 3))
    assert t.verify().ok


def test_a_table_without_the_property_keeps_blocklet_files(tmp_path: Path) -> None:
    """A table created before Parquet existed has no ``columnar_format``: its columnar files
    stay blocklet files."""
    t = cl.create_table(tmp_path / "t", SCHEMA, properties=PROPS)
    t.unset_properties(["columnar_format"])
    assert t.effective_properties["columnar_format"] == "carbonlite"
    filled(t, batches=2)
    assert all(f.endswith(".cblt") for f in columnar_files(t))
    assert t.count_rows() == 4100


def test_compaction_converts_files_of_the_other_format(tmp_path: Path) -> None:
    t = cl.create_table(
        tmp_path / "t", SCHEMA, properties={**PROPS, "columnar_format": "carbonlite"}
    )
    filled(t, batches=2)
    t.delete(pc.field("id").isin([5, 2500]))
    t.set_properties({"columnar_format": "parquet"})
    t.append(rows(10_000, 2000))
    t.finish_streaming()
    t.handoff()
    kinds = {f.rsplit(".", 1)[1] for f in columnar_files(t)}
    assert kinds == {"cblt", "parquet"}
    before = canonical(t.to_arrow())
    t.compact("major")
    assert all(f.endswith(".parquet") for f in columnar_files(t))
    assert canonical(t.to_arrow()) == before
    t.set_properties({"columnar_format": "carbonlite"})  # and back
    t.compact("major")
    assert all(f.endswith(".cblt") for f in columnar_files(t))
    assert canonical(t.to_arrow()) == before
    assert t.verify().ok


FILTERS = [
    pc.field("id") == 4321,
    (pc.field("id") >= 1000) & (pc.field("id") < 1200),
    pc.field("name") == "n77",
    pc.field("name").isin(["n5", "n4999", "absent"]),
    pc.field("id").isin([10, 3999, 5999]),
    pc.field("score") > 1400.0,
]


@pytest.mark.parametrize("index", range(len(FILTERS)))
def test_planning_prunes_parquet_files_as_blocklet_files(tmp_path: Path, index: int) -> None:
    """The same rows in both formats: every filter selects the same blocklets by the same
    means (statistics, bloom filters, the secondary index) and reads the same rows."""
    tables = {
        kind: filled(
            cl.create_table(tmp_path / kind, SCHEMA, properties={**PROPS, "columnar_format": kind})
        )
        for kind in ("parquet", "carbonlite")
    }
    flt = FILTERS[index]
    plans = {kind: t.scan(filter=flt).plan for kind, t in tables.items()}
    counts = {
        kind: (
            p.blocklets_total,
            p.blocklets_selected,
            p.blocklets_pruned_by_stats,
            p.blocklets_pruned_by_bloom,
            p.blocklets_pruned_by_index,
            p.num_rows,
        )
        for kind, p in plans.items()
    }
    assert counts["parquet"] == counts["carbonlite"]
    got = {kind: canonical(t.to_arrow(filter=flt)) for kind, t in tables.items()}
    assert got["parquet"] == got["carbonlite"]
    assert got["parquet"]


def test_restore_copies_a_parquet_segment_compacted_away(tmp_path: Path) -> None:
    t = filled(cl.create_table(tmp_path / "t", SCHEMA, properties=PROPS))
    t.delete(pc.field("id") < 10)
    version, before = t.version, canonical(t.to_arrow())
    t.compact("major")
    t.delete(pc.field("id") < 1000)
    t.restore(version)
    assert canonical(t.to_arrow()) == before
    assert all(f.endswith(".parquet") for f in columnar_files(t))
    assert t.verify().ok


def test_parquet_segments_on_s3(place: Place) -> None:
    t = place.create("t", properties={"handoff_blocklet_rows": "300"})
    events = t.schema
    assert events is not None
    n = 1000
    data = pa.Table.from_pylist(
        [
            {f.name: (i if pa.types.is_integer(f.type) else None) for f in t.schema}
            for i in range(n)
        ],
        schema=t.schema,
    )
    t.append(data)
    t.finish_streaming()
    t.handoff()
    assert all(f.endswith(".parquet") for f in columnar_files(t))
    assert t.count_rows() == n
    assert t.to_arrow().sort_by(t.schema.names[0]).equals(data.sort_by(t.schema.names[0]))
    assert t.verify().ok


def test_parquet_bloom_filters_take_the_tables_rate_on_index_only_columns(tmp_path: Path) -> None:
    """A table with a secondary index and no bloom filter columns sizes its Parquet bloom
    filters by ``bloom_filter_fpp`` too: a rarer false positive, a longer filter."""
    lengths = {}
    for fpp in ("0.3", "0.0001"):
        props = {"handoff_blocklet_rows": "500", "secondary_index_columns": "id"}
        t = cl.create_table(tmp_path / fpp, SCHEMA, properties={**props, "bloom_filter_fpp": fpp})
        t.append(rows(0, 1000))
        t.finish_streaming()
        t.handoff()
        [path] = columnar_files(t)
        meta = pq.ParquetFile(str(tmp_path / fpp / path)).metadata
        lengths[fpp] = [meta.row_group(g).column(0).bloom_filter_length for g in range(2)]
    assert all(n > 0 for n in lengths["0.3"])
    assert all(
        strict > loose for strict, loose in zip(lengths["0.0001"], lengths["0.3"], strict=True)
    )
