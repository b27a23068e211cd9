"""``carbonlite.write_table``: create-or-write from data, as deltalake's ``write_deltalake``."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite import seams
from carbonlite.storage import open_storage
from tests.support.places import Place

pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")

UTC = datetime.timezone.utc


def _ids(t: cl.Table) -> list[int]:
    return sorted(cl.open_table(t.path).to_arrow().column("id").to_pylist())


def test_a_pandas_frame_makes_a_clean_schema(tmp_path: Path) -> None:
    df = pd.DataFrame(
        {
            "id": [1, 2],
            "name": ["a", None],
            "kind": pd.Categorical(["x", "y"]),
            "ts": pd.to_datetime(["2026-01-01", "2026-01-02"], utc=True),
        }
    ).set_index("id")  # a named index is data
    t = cl.write_table(tmp_path / "t", df)
    assert t.schema.names == ["id", "name", "kind", "ts"]
    assert t.schema.types[:3] == [pa.int64(), pa.string(), pa.string()]  # not a dictionary
    assert pa.types.is_timestamp(t.schema.field("ts").type) and t.schema.field("ts").type.tz
    assert t.schema.metadata is None  # no pandas metadata
    assert cl.open_table(t.path).schema == t.schema
    assert t.to_arrow().to_pylist()[0]["id"] == 1 and t.version == 1
    assert [h.operation for h in t.history()] == ["APPEND", "CREATE TABLE"]


def test_layouts_become_one_storage_type_each(tmp_path: Path) -> None:
    data = pa.table(
        {
            "s": pa.array(["a"], pa.large_string()),
            "v": pa.array(["b"], pa.string_view()),
            "b": pa.array([b"x"], pa.large_binary()),
            "bv": pa.array([b"y"], pa.binary_view()),
            "l": pa.array([[1]], pa.large_list(pa.int32())),
            "d": pa.array(["k"]).dictionary_encode(),
        }
    ).replace_schema_metadata({"pandas": "{}"})
    t = cl.write_table(tmp_path / "t", data)
    assert t.schema == pa.schema(
        [
            ("s", pa.string()),
            ("v", pa.string()),
            ("b", pa.binary()),
            ("bv", pa.binary()),
            ("l", pa.list_(pa.int32())),
            ("d", pa.string()),
        ]
    )
    assert t.to_arrow().to_pylist() == [
        {"s": "a", "v": "b", "b": b"x", "bv": b"y", "l": [1], "d": "k"}
    ]


@pytest.mark.parametrize(
    "make",
    [
        lambda: pa.table({"id": [1, 2]}),
        lambda: pa.record_batch({"id": [1, 2]}),
        lambda: pa.table({"id": [1, 2]}).to_reader(),
        lambda: pa.table({"id": [1, 2]}).to_batches(),
        lambda: pl.DataFrame({"id": [1, 2]}),
        lambda: pd.DataFrame({"id": [1, 2]}),
    ],
    ids=["table", "batch", "reader", "batches", "polars", "pandas"],
)
def test_every_kind_of_data(tmp_path: Path, make: Any) -> None:
    t = cl.write_table(tmp_path / "t", make())
    assert t.schema.names == ["id"] and _ids(t) == [1, 2]
    cl.write_table(tmp_path / "t", make(), mode="append")
    assert _ids(t) == [1, 1, 2, 2]


def test_modes(tmp_path: Path) -> None:
    path = tmp_path / "t"
    first = pa.table({"id": [1, 2]})
    t = cl.write_table(path, first, mode="append")  # creates when missing
    with pytest.raises(cl.TableExistsError, match="mode='append'"):
        cl.write_table(path, first)
    assert cl.open_table(path).version == 1
    cl.write_table(path, pa.table({"id": [3]}), mode="append")
    assert _ids(t) == [1, 2, 3]
    done = cl.write_table(path, pa.table({"id": [9]}), mode="overwrite")
    assert _ids(done) == [9] and done.version == 3
    fresh = cl.write_table(tmp_path / "u", first, mode="overwrite")  # creates too
    assert _ids(fresh) == [1, 2]


def test_layout_and_properties_of_a_new_table(tmp_path: Path) -> None:
    data = pa.table({"id": [1, 1, 2], "region": ["eu", "eu", "us"], "v": [1, 2, 3]})
    t = cl.write_table(
        tmp_path / "t",
        data,
        partition_by=["region"],
        primary_key=["id"],
        sort_columns=["v"],
        properties={"blocklet_max_rows": "10"},
    )
    assert (t.partition_by, t.primary_key, t.sort_columns) == (("region",), ("id",), ("v",))
    assert t.properties == {"columnar_format": "parquet", "blocklet_max_rows": "10"}
    assert sorted(t.to_arrow().to_pylist(), key=str) == [
        {"id": 1, "region": "eu", "v": 2},
        {"id": 2, "region": "us", "v": 3},
    ]
    again = cl.write_table(
        tmp_path / "t", data.slice(2), mode="append", partition_by=["region"], primary_key="id"
    )
    assert again.version == 2


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "upsert"}, cl.InvalidOptionError, "mode must be one of"),
        ({"mode": None}, cl.InvalidOptionError, "mode must be one of"),
        ({"partition_by": ["nope"]}, cl.InvalidOptionError, "'nope'"),
        ({"partition_by": "id"}, cl.InvalidOptionError, "partition_by must be a list"),
        ({"partition_by": 5}, cl.InvalidOptionError, "partition_by must be a list"),
        ({"primary_key": ["nope"]}, cl.InvalidOptionError, "'nope' is not in the schema"),
        ({"primary_key": {"id": 1}}, cl.InvalidOptionError, "primary_key must be a list"),
        ({"sort_columns": ["nope"]}, cl.InvalidOptionError, "'nope' is not in the schema"),
        ({"properties": {"nope": "1"}}, cl.InvalidOptionError, "not a table property"),
        ({"properties": ["x"]}, cl.InvalidOptionError, "properties must be a mapping"),
        ({"storage_options": "x"}, cl.InvalidOptionError, "storage_options must be a mapping"),
        ({"schema_mode": "loose"}, cl.InvalidOptionError, "schema_mode"),
        ({"writer_id": "a/b"}, cl.InvalidOptionError, "writer_id"),
    ],
)
def test_bad_arguments_create_nothing(
    tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        cl.write_table(tmp_path / "t", pa.table({"id": [1]}), **kwargs)
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (None, cl.InvalidOptionError, "data must be"),
        ({"id": [1]}, cl.InvalidOptionError, "data must be"),
        ("id", cl.InvalidOptionError, "data must be"),
        ([], cl.InvalidOptionError, "holds no batch"),
        (pa.table({"n": pa.nulls(2)}), cl.SchemaMismatchError, "'n' holds only nulls"),
        (pa.table({"m": [1]}).drop_columns(["m"]), cl.SchemaMismatchError, "at least one column"),
        (pd.DataFrame({"id": [1, "x"]}), cl.SchemaMismatchError, "column 'id'"),
        (pl.LazyFrame({"id": [1]}), cl.InvalidOptionError, "collect"),
    ],
    ids=["none", "dict", "str", "empty-iterable", "null-column", "no-columns", "mixed", "lazy"],
)
def test_bad_data_creates_nothing(tmp_path: Path, data: Any, error: Any, match: str) -> None:
    with pytest.raises(error, match=match):
        cl.write_table(tmp_path / "t", data)
    assert not (tmp_path / "t").exists()


def test_null_keys_are_refused_before_the_table_is_created(tmp_path: Path) -> None:
    with pytest.raises(cl.SchemaMismatchError, match="nulls"):
        cl.write_table(tmp_path / "t", pa.table({"id": [1, None]}), primary_key=["id"])
    assert not (tmp_path / "t").exists()


def test_an_existing_table_keeps_its_layout(tmp_path: Path) -> None:
    path = tmp_path / "t"
    cl.write_table(path, pa.table({"id": [1], "r": ["eu"]}), partition_by=["r"])
    for kwargs, match in [
        ({"partition_by": []}, r"partition_by is \['r'\], not \[\]"),
        ({"primary_key": ["id"]}, "primary_key is"),
        ({"sort_columns": ["id"]}, "sort_columns is"),
        ({"properties": {"blocklet_max_rows": "5"}}, "set_properties"),
    ]:
        with pytest.raises(cl.InvalidOptionError, match=match):
            cl.write_table(path, pa.table({"id": [2], "r": ["us"]}), mode="append", **kwargs)
    assert cl.open_table(path).version == 1
    with pytest.raises(cl.SchemaMismatchError, match=r"'x' \(int64\) is not in the schema"):
        cl.write_table(path, pa.table({"id": [2], "x": [1]}), mode="append")
    # r, nullable, is left out: written as null; x is added
    cl.write_table(path, pa.table({"id": [2], "x": [1]}), mode="append", schema_mode="merge")
    table = cl.open_table(path)
    assert table.version == 2 and table.schema.names == ["id", "r", "x"]
    assert table.to_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "r": "eu", "x": None},
        {"id": 2, "r": None, "x": 1},
    ]


def test_a_file_in_the_way_and_an_empty_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(cl.InvalidOptionError, match="is a file"):
        cl.write_table(blocker, pa.table({"id": [1]}), mode="append")
    with pytest.raises(cl.InvalidOptionError, match="empty"):
        cl.write_table("", pa.table({"id": [1]}))
    assert blocker.read_text() == "x"


def test_an_empty_table_creates_an_empty_table(tmp_path: Path) -> None:
    t = cl.write_table(tmp_path / "t", pa.table({"id": pa.array([], pa.int32())}))
    assert t.version == 0 and t.schema == pa.schema([("id", pa.int32())])
    assert t.to_arrow().num_rows == 0


# --- all or nothing (issue 38 §3) ----------------------------------------------------------------


def _failing(first: pa.Table) -> pa.RecordBatchReader:
    """A reader of ``first`` whose source then fails (a dropped connection, say)."""

    def batches() -> Any:
        yield from first.to_batches()
        raise ConnectionError("the source went away")

    return pa.RecordBatchReader.from_batches(first.schema, batches())


def _everything(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


@pytest.mark.parametrize(
    "bad",
    [
        lambda rows: _failing(rows),
        lambda rows: [*rows.to_batches(), pa.record_batch({"other": [1]})],
        lambda rows: [*rows.to_batches(), rows.slice(0, 1).set_column(0, "id", pa.array(["x"]))],
    ],
    ids=["source_fails", "second_batch_other_columns", "second_batch_wrong_type"],
)
@pytest.mark.parametrize("partition_by", [None, ["r"]], ids=["plain", "partitioned"])
def test_a_failed_write_table_leaves_no_table(
    tmp_path: Path, bad: Any, partition_by: list[str] | None
) -> None:
    """The rows are written before the table exists: data failing part-way (after blocklets
    of several partitions were written) leaves nothing, so the same call with good data makes
    the table, instead of failing with TableExistsError."""
    path = tmp_path / "t"
    rows = pa.table({"id": list(range(40)), "r": [f"p{i % 4}" for i in range(40)]})
    props = {"blocklet_max_rows": "5"}
    with pytest.raises(cl.CarbonLiteError) as info:
        cl.write_table(path, bad(rows), partition_by=partition_by, properties=props)
    assert isinstance(info.value, (cl.DataSourceError, cl.SchemaMismatchError))
    assert not path.exists(), _everything(path)
    with pytest.raises(cl.TableNotFoundError):
        cl.open_table(path)
    t = cl.write_table(path, rows, partition_by=partition_by, properties=props)
    assert [h.operation for h in t.history()] == ["APPEND", "CREATE TABLE"]
    assert _ids(t) == list(range(40))
    assert t.verify().ok


def test_a_failed_write_table_into_a_directory_leaves_the_directory_as_it_was(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t"
    path.mkdir()
    (path / "README").write_text("the user's")
    with pytest.raises(cl.DataSourceError):
        cl.write_table(path, _failing(pa.table({"id": [1, 2]})))
    assert _everything(path) == ["README"]
    cl.write_table(path, pa.table({"id": [1, 2]}))
    assert cl.open_table(path).count_rows() == 2


def _leaves_no_object(path: str, options: dict[str, Any] | None) -> None:
    storage, root = open_storage(path, options)
    with pytest.raises(cl.DataSourceError):
        cl.write_table(
            path,
            _failing(pa.table({"id": [1, 2, 3]})),
            properties={"blocklet_max_rows": "1"},
            storage_options=options,
        )
    assert storage.list(root, recursive=True) == []
    with pytest.raises(cl.TableNotFoundError):
        cl.open_table(path, storage_options=options)
    t = cl.write_table(path, pa.table({"id": [1, 2]}), storage_options=options)
    assert sorted(t.to_arrow().column("id").to_pylist()) == [1, 2]


def test_a_failed_write_table_leaves_no_object_in_memory() -> None:
    _leaves_no_object(f"memory://write-table-{datetime.datetime.now(UTC).timestamp()}", None)


def test_a_failed_write_table_leaves_no_object_locally_or_on_s3(place: Place) -> None:
    """On S3 each blocklet write is an object of its own, written under a lease: neither the
    objects nor the lease record is left."""
    _leaves_no_object(place.uri("t"), place.storage_options)


def test_a_new_table_is_created_with_its_rows_in_the_next_version(tmp_path: Path) -> None:
    """Version 0 creates the table, version 1 holds the rows: the change feed sees them."""
    t = cl.write_table(tmp_path / "t", pa.table({"id": [3, 1, 3]}), primary_key=["id"])
    assert t.version == 1 and _ids(t) == [1, 3]
    assert sorted(t.changes(0).column("id").to_pylist()) == [1, 3]
    empty = cl.write_table(tmp_path / "e", pa.table({"id": pa.array([], pa.int64())}))
    assert empty.version == 0 and empty.count_rows() == 0


def test_a_new_primary_key_table_takes_its_first_rows_only_if_nobody_wrote_first(
    tmp_path: Path,
) -> None:
    """Between version 0 and the first rows' commit another writer may upsert into the new
    table: the first rows are then refused rather than committed beside the other's rows of
    the same key (which would make two rows of one key)."""
    path = tmp_path / "t"
    others: list[int | None] = []

    def listener(name: str) -> None:
        if name == "append.after_data" and not others:  # write_table's rows wait to commit
            others.append(None)
            others[0] = cl.open_table(path).append(pa.table({"id": [1], "v": ["other"]})).version

    with seams.listening(listener), pytest.raises(cl.CommitConflictError):
        cl.write_table(path, pa.table({"id": [1, 2], "v": ["mine", "mine"]}), primary_key=["id"])
    assert others == [1]
    assert cl.open_table(path).to_arrow().to_pylist() == [{"id": 1, "v": "other"}]
