"""Every way Hadoop, Spark and fsspec write a local path opens the same table."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.errors import UnsupportedStorageError
from carbonlite.storage import split_protocol


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("/data/t", ("file", "/data/t")),
        ("file:/data/t", ("file", "/data/t")),  # Hadoop's Path, Spark's LOCATION
        ("file:///data/t", ("file", "/data/t")),
        ("file://localhost/data/t", ("file", "/data/t")),
        ("FILE:/data/t", ("file", "/data/t")),
        ("local:///data/t", ("file", "/data/t")),  # fsspec's alias
        ("file:/data/a%20b", ("file", "/data/a%20b")),  # string forms do not encode
        ("rel/t", ("file", "rel/t")),
        ("s3a://bucket/t", ("s3", "bucket/t")),
        ("memory://t", ("memory", "t")),
    ],
)
def test_split_protocol(uri: str, expected: tuple[str, str]) -> None:
    assert split_protocol(uri) == expected


def test_a_remote_file_uri_is_refused() -> None:
    with pytest.raises(UnsupportedStorageError, match="another host"):
        split_protocol("file://fileserver/data/t")


@pytest.mark.parametrize("form", ["file:{p}", "file://{p}", "file://localhost{p}", "local://{p}"])
def test_every_local_form_opens_the_same_table(tmp_path: Path, form: str) -> None:
    t = cl.create_table(tmp_path / "t", pa.schema([("i", pa.int64())]))
    t.append(pa.table({"i": [1, 2, 3]}))
    same = cl.open_table(form.format(p=tmp_path / "t"))
    assert same.path == t.path
    assert same.to_arrow().column("i").to_pylist() == [1, 2, 3]
    same.append(pa.table({"i": [4]}))
    assert t.refresh().count_rows() == 4
