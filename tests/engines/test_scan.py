"""``Table.scan`` returns a TableScan: a RecordBatchReader's surface, and an Arrow C stream
any number of consumers read from the start; a Table is an Arrow C stream of itself."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

import carbonlite as cl
from tests.engines.conftest import LATE, SCHEMA, N, assert_same, make_data


def test_a_scan_is_read_again_by_every_consumer(table, everything):
    scan = table.scan(columns=["id", "k"], filter=pc.field("id") < 700)
    want = everything.select(["id", "k"]).filter(pc.field("id") < 700)
    assert isinstance(scan, cl.TableScan)
    assert_same(scan, want)
    assert_same(scan, want)  # a fresh stream, not "already consumed"
    assert_same(pa.RecordBatchReader.from_stream(scan).read_all(), want)
    assert_same(scan.to_table(), want)
    assert scan.plan.blocklets_selected == 2  # ids 0-499 and 500-999 of 11 blocklets


def test_the_record_batch_reader_surface_reads_one_stream_through(table, everything):
    want = everything.filter(pc.field("id") < 1200)
    with table.scan(filter=[("id", "<", 1200)]) as scan:
        assert scan.schema == SCHEMA
        first = scan.read_next_batch()
        rest = list(scan)  # the same stream, continued
        assert_same(pa.Table.from_batches([first, *rest]), want)
        with pytest.raises(StopIteration):
            scan.read_next_batch()
    assert_same(table.scan(filter=[("id", "<", 1200)]).read_all(), want)
    frame = table.scan(columns=["id"], filter=[("id", "<", 3)]).read_pandas()
    assert frame["id"].tolist() == [0, 1, 2]


def test_a_scan_keeps_its_version_and_a_table_its_loaded_one(tmp_path):
    t = cl.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(make_data(100))
    scan = t.scan()
    other = cl.open_table(t.path)  # loaded at version 1
    t.append(LATE, schema_mode="merge")
    assert pa.table(scan).num_rows == 100  # planned at version 1
    assert pa.table(other).num_rows == 100  # other's loaded version
    assert pa.table(t).num_rows == 110
    other.refresh()
    assert pa.table(other).num_rows == 110
    assert_same(t.scan(version=1), make_data(100))


def test_a_requested_schema_is_honoured(table, everything):
    wanted = pa.schema([("id", pa.int64()), ("k", pa.large_string())])
    scan = table.scan(columns=["id", "k"])
    got = pa.RecordBatchReader.from_stream(scan, schema=wanted).read_all()
    assert got.schema == wanted
    assert got.column("k").to_pylist() == everything.column("k").to_pylist()


def test_an_empty_table_and_an_empty_result(tmp_path, table):
    empty = cl.create_table(str(tmp_path / "e"), SCHEMA)
    assert pa.table(empty).num_rows == 0 and pa.table(empty).schema == SCHEMA
    none = table.scan(columns=["k"], filter=pc.field("id") > 10**9)
    assert none.plan.blocklets_selected == 0
    assert pa.table(none).num_rows == 0 and pa.table(none).schema.names == ["k"]


def test_a_scan_appends_into_another_table(tmp_path, table, everything):
    copy = cl.create_table(str(tmp_path / "copy"), SCHEMA)
    copy.append(table.scan(filter=pc.field("id") >= N))
    assert_same(copy.to_arrow(), everything.filter(pc.field("id") >= N))


def test_closing_the_batches_stops_the_read_ahead(table, blocklets_read):
    batches = table.scan(columns=["id"], version=1).to_batches()
    assert next(batches).column("id")[0].as_py() == 0
    batches.close()
    read = len(blocklets_read)
    assert read < 10  # of 10: the pool reads a few ahead, never the whole table
    assert list(batches) == []


def test_the_nearest_form_for_pyarrow_dataset_users(table, everything):
    """A dataset scanner's arguments (``columns``, ``filter`` as a compute expression) are
    ``scan``'s; an API that insists on a Dataset gets an in-memory one of the result."""
    expression = (pc.field("k") == "k3") & (pc.field("id") < 2000)
    want = ds.dataset(everything).to_table(columns=["id", "x"], filter=expression)
    assert_same(table.scan(columns=["id", "x"], filter=expression).read_all(), want)
    dataset = ds.dataset(table.scan(columns=["id", "x"], filter=expression).read_all())
    assert (
        dataset.count_rows(filter=pc.field("id") < 100)
        == want.filter(pc.field("id") < 100).num_rows
    )


def test_importing_carbonlite_imports_no_engine():
    code = (
        "import sys, carbonlite, carbonlite.polars, carbonlite.duckdb\n"
        "print(sorted({'pandas', 'polars', 'duckdb', 'pyspark'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
