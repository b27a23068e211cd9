"""The file ingester on an S3 prefix (the session's moto server): every format, not-final
keys never read, a neighbouring prefix left alone, large objects read in ranges, an object
replaced between listing and reading left for later, a damaged object kept whole in the
bad-records table, restarts ingesting nothing twice; tables on S3 and local; the command
with ``--storage-options``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.ingest import FileIngester, IngestError, file_source
from carbonlite.ingest.files import FILE_BAD_RECORDS_SCHEMA
from carbonlite.seams import listening
from tests.cli.conftest import invoke
from tests.cli.test_errors import assert_one_line_error
from tests.support.file_ingest_data import KINDS, SCHEMA, WITH_PATH, encode, format_of, put, rows
from tests.support.s3_server import S3Server

pytestmark = pytest.mark.s3

NOT_FINAL = [
    ".part-1f2e-0.inprogress.77aa",
    "2026-11-26--10/.part-1f2e-1.inprogress.0b0b",
    "_temporary/0/_temporary/attempt_0/part-00000.parquet",
    "_SUCCESS",
    ".part-0.crc",
    "FlumeData.17.tmp",
    "copy._COPYING_",
    ".staging/part-0.parquet",
]


class Bucket:
    """A fresh bucket, with the source under ``out`` and tables on S3 or on a local disk."""

    def __init__(self, server: S3Server, tmp_path: Path, tables: str) -> None:
        self.options: dict[str, Any] = server.storage_options
        self.base = f"s3://{server.new_bucket()}"
        self.source = f"{self.base}/out"
        self.tables = tables
        self.tmp_path = tmp_path

    def table_path(self, name: str) -> str:
        return f"{self.base}/{name}" if self.tables == "s3" else str(self.tmp_path / name)

    def options_for(self, path: str) -> dict[str, Any] | None:
        return self.options if path.startswith("s3://") else None

    def create(self, name: str, schema: pa.Schema = WITH_PATH) -> cl.Table:
        path = self.table_path(name)
        return cl.create_table(path, schema, storage_options=self.options_for(path))

    def open(self, name: str) -> cl.Table:
        path = self.table_path(name)
        return cl.open_table(path, storage_options=self.options_for(path))

    def put(self, relative: str, data: bytes) -> None:
        put(self.source, relative, data, self.options)

    def ingester(self, table: cl.Table | str, **kwargs: Any) -> FileIngester:
        return FileIngester(table, self.source, storage_options=self.options, **kwargs)


@pytest.fixture(params=["s3", "local"], ids=["table-s3", "table-local"])
def bucket(request: pytest.FixtureRequest, s3_server: S3Server, tmp_path: Path) -> Bucket:
    return Bucket(s3_server, tmp_path, request.param)


def per_file(table: cl.Table) -> dict[str, int]:
    paths = table.refresh().to_arrow(columns=["_file_path"])["_file_path"].to_pylist()
    return {p: paths.count(p) for p in sorted(set(paths))}


@pytest.mark.parametrize("kind", KINDS)
def test_each_format_from_a_prefix(bucket: Bucket, kind: str) -> None:
    table = bucket.create("t")
    for i in range(3):
        bucket.put(f"2026-11-26--1{i}/part-9c9c-{i}", encode(kind, rows(range(i * 10, i * 10 + 7))))
    for rel in NOT_FINAL:
        bucket.put(rel, b"not a file of any format " + rel.encode())
    put(f"{bucket.base}/out-old", "part-0", b"a neighbouring prefix: never read", bucket.options)
    put(f"{bucket.base}/outx", "part-0", b"never read either", bucket.options)
    result = bucket.ingester(table, format=format_of(kind)).run(stop_at_end=True)
    assert (result.files, result.rows, result.commits, result.bad_files) == (3, 21, 1, 0)
    assert per_file(table) == {f"2026-11-26--1{i}/part-9c9c-{i}": 7 for i in range(3)}
    assert sorted(table.to_arrow()["id"].to_pylist()) == [
        i * 10 + j for i in range(3) for j in range(7)
    ]


def test_a_restart_ingests_nothing_twice(bucket: Bucket) -> None:
    table = bucket.create("t")
    bucket.put("a/p0", encode("parquet", rows(range(5))))
    first = bucket.ingester(bucket.table_path("t")).run(stop_at_end=True)
    assert first.files == 1
    for _ in range(2):
        again = bucket.ingester(bucket.table_path("t")).run(stop_at_end=True)
        assert (again.files, again.commits) == (0, 0)
    bucket.put("a/p1", encode("parquet", rows(range(5, 8))))
    later = bucket.ingester(table).run(stop_at_end=True)
    assert (later.files, later.rows) == (1, 3)
    assert per_file(table) == {"a/p0": 5, "a/p1": 3}
    uri = bucket.ingester(table).source.uri
    assert uri.startswith("s3://") and uri.rstrip("/").endswith("/out")
    state = table.refresh().state(f"files:{uri}")
    assert sorted(state["file"].to_pylist()) == ["a/p0", "a/p1"]
    assert table.version == 2


@pytest.mark.parametrize("kind", KINDS)
def test_large_objects_are_read_in_ranges(
    bucket: Bucket, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Objects above the whole-read size (64 MiB, lowered here to 1 KiB) are decoded through
    ranged reads: the same rows."""
    monkeypatch.setattr(file_source, "_WHOLE_READ", 1024)
    table = bucket.create("t")
    data = encode(kind, rows(range(3000)), row_group_size=500)
    assert len(data) > 4 * 1024
    bucket.put("big", data)
    bucket.put("small", encode(kind, rows([5000])))
    result = bucket.ingester(table, format=format_of(kind)).run(stop_at_end=True)
    assert (result.files, result.rows) == (2, 3001)
    got = table.refresh().to_arrow()
    assert sorted(got["id"].to_pylist()) == [*range(3000), 5000]
    assert got.filter(pa.compute.equal(got["id"], 2999))["name"].to_pylist() == ["n2999"]


def test_an_object_replaced_after_listing_waits(bucket: Bucket) -> None:
    table = bucket.create("t")
    bucket.put("a.json", encode("json", rows([1])))
    bucket.put("b.json", encode("json", rows([2])))
    lists: list[str] = []

    def replace(name: str) -> None:
        if name == "files.after_list":
            lists.append(name)
            if len(lists) == 1:
                bucket.put("b.json", encode("json", rows([2, 3, 4])))

    with listening(replace):
        result = bucket.ingester(table, format="json").run(stop_at_end=True)
    assert result.not_ready >= 1
    assert per_file(table) == {"a.json": 1, "b.json": 3}
    assert sorted(table.to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]


def test_an_object_deleted_after_listing_is_skipped(bucket: Bucket) -> None:
    import boto3

    table = bucket.create("t")
    bucket.put("keep", encode("parquet", rows([1])))
    bucket.put("gone", encode("parquet", rows([2])))
    client = boto3.client(
        "s3",
        endpoint_url=bucket.options["endpoint_url"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    name = bucket.base.removeprefix("s3://")

    def delete(seam: str) -> None:
        if seam == "files.after_list":
            client.delete_object(Bucket=name, Key="out/gone")

    bad = bucket.table_path("bad")
    with listening(delete):
        result = bucket.ingester(table, bad_records=bad).run(stop_at_end=True)
    assert (result.files, result.bad_files) == (1, 0) and result.not_ready >= 1
    assert per_file(table) == {"keep": 1}


def test_a_damaged_object_goes_to_bad_records_once(bucket: Bucket) -> None:
    table = bucket.create("t")
    good = encode("parquet", rows(range(4)))
    damaged = good[: len(good) - 9]
    bucket.put("p/good", good)
    bucket.put("p/damaged", damaged)
    with pytest.raises(IngestError, match=r"file 'p/damaged' of s3://.*give a bad-records table"):
        bucket.ingester(table).run(stop_at_end=True)
    assert table.refresh().version == 0
    bad_path = bucket.table_path("bad")
    for _ in range(2):
        bucket.ingester(table, bad_records=bad_path).run(stop_at_end=True)
    bad = bucket.open("bad")
    assert bad.schema == FILE_BAD_RECORDS_SCHEMA
    kept = bad.to_arrow().to_pylist()
    assert len(kept) == 1
    assert kept[0]["file"] == "p/damaged" and kept[0]["content"] == damaged
    assert kept[0]["size"] == len(damaged) and "Parquet" in kept[0]["error"]
    assert per_file(table) == {"p/good": 4}
    assert table.refresh().version == 1 and bad.version == 1


def test_the_command_with_storage_options(bucket: Bucket) -> None:
    bucket.create("t")
    bucket.put("x/a.csv", encode("csv", rows(range(6))))
    bucket.put("x/_SUCCESS", b"")
    bucket.put("x/b.csv", b'"id","name"\nnot-a-number,"b"\n')
    options = json.dumps(bucket.options)
    args = ["ingest", "files", bucket.table_path("t"), "--source", bucket.source]
    args += ["--format", "csv", "--stop-at-end", "--storage-options", options]
    refused = invoke(*args)
    assert refused.exit_code == 1
    assert_one_line_error(refused, "IngestError", "file 'x/b.csv'", "not-a-number")
    run = invoke(*args, "--bad-records", bucket.table_path("bad"), "--json")
    assert run.exit_code == 0, run.stderr
    out = run.json()
    assert (out["files"], out["rows"], out["bad_files"], out["commits"]) == (1, 6, 1, 1)
    again = invoke(*args, "--bad-records", bucket.table_path("bad"), "--json")
    assert again.exit_code == 0 and again.json()["files"] == 0
    assert per_file(bucket.open("t")) == {"x/a.csv": 6}
    assert bucket.open("bad").count_rows() == 1


def test_an_unreachable_endpoint_is_one_line(tmp_path: Path) -> None:
    """Storage options pointing at a closed port: one line naming the source, exit 1."""
    from tests.ingest.test_kafka_bad_input import closed_port

    table = tmp_path / "t"
    cl.create_table(table, SCHEMA)
    options = json.dumps(
        {"endpoint_url": f"http://127.0.0.1:{closed_port()}", "key": "k", "secret": "s"}
    )
    run = invoke(
        "ingest",
        "files",
        table,
        "--source",
        "s3://b/out",
        "--stop-at-end",
        "--storage-options",
        options,
    )
    assert run.exit_code == 1
    assert_one_line_error(run, "StorageError", "'s3://b/out'")
    assert cl.open_table(table).version == 0
