"""Careless and hostile input at every door of the Python API (issue 25): wrong types, None,
negative and huge numbers, NaN, empty and unknown names, lists, dicts and numpy arrays where
something else belongs, empty paths and paths that are files. Each raises a CarbonLiteError
subclass (never a raw TypeError, ValueError, KeyError, OverflowError or ArrowInvalid), and
afterwards both tables hold exactly what they held, at the same version, and nothing was
created where a table was refused.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl

pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")

UTC = datetime.timezone.utc
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("price", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("region", pa.string()),
    ]
)
T0 = datetime.datetime(2026, 1, 1, tzinfo=UTC)


def rows(ids: list[int]) -> pa.Table:
    return pa.table(
        {
            "id": ids,
            "name": [f"n{i}" for i in ids],
            "price": [i * 10 for i in ids],
            "ts": [T0 + datetime.timedelta(hours=i) for i in ids],
            "region": ["eu" if i % 2 else "us" for i in ids],
        },
        schema=SCHEMA,
    )


@dataclass
class Doors:
    """A plain table ``t`` (partitioned by region), a primary-key table ``pk``, a plain file
    ``file`` and a free path ``new`` where nothing may be created."""

    t: cl.Table
    pk: cl.Table
    file: Path
    new: Path


@pytest.fixture
def doors(tmp_path: Path) -> Doors:
    t = cl.create_table(tmp_path / "t", SCHEMA, partition_by=["region"], sort_columns=["ts"])
    t.append(rows([1, 2, 3]))
    t.append(rows([4]), txn=("app", 1))
    pk = cl.create_table(tmp_path / "pk", SCHEMA, primary_key=["id"])
    pk.append(rows([1, 2, 3]))
    file = tmp_path / "plain-file"
    file.write_text("not a table")
    return Doors(t, pk, file, tmp_path / "new")


def content(t: cl.Table) -> tuple[int, list[dict[str, Any]]]:
    fresh = cl.open_table(t.path)
    return fresh.version, sorted(fresh.to_arrow().to_pylist(), key=lambda r: r["id"])


Case = Callable[[Doors], object]
CASES: list[tuple[str, Case, type[cl.CarbonLiteError]]] = []


def case(name: str, error: type[cl.CarbonLiteError] = cl.CarbonLiteError) -> Callable[[Case], Case]:
    def add(fn: Case) -> Case:
        CASES.append((name, fn, error))
        return fn

    return add


def cases(prefix: str, error: type[cl.CarbonLiteError], **fns: Case) -> None:
    for name, fn in fns.items():
        CASES.append((f"{prefix}-{name}", fn, error))


E, S, F = cl.InvalidOptionError, cl.SchemaMismatchError, cl.InvalidFilterError
V = cl.VersionNotFoundError

# --- paths and tables ------------------------------------------------------------------------

cases(
    "open_table",
    cl.CarbonLiteError,
    empty=lambda d: cl.open_table(""),
    none=lambda d: cl.open_table(None),
    int=lambda d: cl.open_table(5),
    bytes=lambda d: cl.open_table(b"/tmp/x"),
    list=lambda d: cl.open_table(["a"]),
    nul=lambda d: cl.open_table("a\x00b"),
    newline=lambda d: cl.open_table("a\nb"),
    missing=lambda d: cl.open_table(d.new),
    file=lambda d: cl.open_table(d.file),
    below_a_file=lambda d: cl.open_table(d.file / "t"),
    bad_scheme=lambda d: cl.open_table("nosuch://x/y"),
    storage_options_str=lambda d: cl.open_table(d.t.path, storage_options="x"),
    storage_options_list=lambda d: cl.open_table(d.t.path, storage_options=[("a", 1)]),
    writer_id_empty=lambda d: cl.open_table(d.t.path, writer_id=""),
    writer_id_slash=lambda d: cl.open_table(d.t.path, writer_id="a/b"),
    writer_id_dots=lambda d: cl.open_table(d.t.path, writer_id=".."),
    writer_id_int=lambda d: cl.open_table(d.t.path, writer_id=5),
    writer_id_long=lambda d: cl.open_table(d.t.path, writer_id="w" * 500),
)
cases(
    "create_table",
    cl.CarbonLiteError,
    empty_path=lambda d: cl.create_table("", SCHEMA),
    none_path=lambda d: cl.create_table(None, SCHEMA),
    at_a_file=lambda d: cl.create_table(d.file, SCHEMA),
    below_a_file=lambda d: cl.create_table(d.file / "t", SCHEMA),
    exists=lambda d: cl.create_table(d.t.path, SCHEMA),
    schema_none=lambda d: cl.create_table(d.new, None),
    schema_dict=lambda d: cl.create_table(d.new, {"id": "int64"}),
    schema_list=lambda d: cl.create_table(d.new, [("id", pa.int64())]),
    schema_empty=lambda d: cl.create_table(d.new, pa.schema([])),
    schema_duplicate=lambda d: cl.create_table(
        d.new, pa.schema([("a", pa.int8()), ("a", pa.int8())])
    ),
    schema_union=lambda d: cl.create_table(
        d.new, pa.schema([("u", pa.dense_union([pa.field("i", pa.int8())]))])
    ),
    schema_dictionary=lambda d: cl.create_table(
        d.new, pa.schema([("d", pa.dictionary(pa.int8(), pa.string()))])
    ),
    sort_unknown=lambda d: cl.create_table(d.new, SCHEMA, sort_columns=["nope"]),
    sort_int=lambda d: cl.create_table(d.new, SCHEMA, sort_columns=5),
    sort_dict=lambda d: cl.create_table(d.new, SCHEMA, sort_columns={"ts": 1}),
    sort_items=lambda d: cl.create_table(d.new, SCHEMA, sort_columns=[None]),
    sort_repeated=lambda d: cl.create_table(d.new, SCHEMA, sort_columns=["ts", "ts"]),
    pk_unknown=lambda d: cl.create_table(d.new, SCHEMA, primary_key=["nope"]),
    pk_int=lambda d: cl.create_table(d.new, SCHEMA, primary_key=7),
    pk_numpy=lambda d: cl.create_table(d.new, SCHEMA, primary_key=np.array(["id"])),
    pk_list_column=lambda d: cl.create_table(
        d.new, pa.schema([("l", pa.list_(pa.int8()))]), primary_key=["l"]
    ),
    partition_str=lambda d: cl.create_table(d.new, SCHEMA, partition_by="region"),
    partition_unknown=lambda d: cl.create_table(d.new, SCHEMA, partition_by=["nope"]),
    partition_bucket_zero=lambda d: cl.create_table(d.new, SCHEMA, partition_by=["bucket(0, id)"]),
    partition_bucket_huge=lambda d: cl.create_table(
        d.new, SCHEMA, partition_by=[f"bucket({2**70}, id)"]
    ),
    partition_day_of_string=lambda d: cl.create_table(d.new, SCHEMA, partition_by=["day(name)"]),
    partition_unknown_transform=lambda d: cl.create_table(d.new, SCHEMA, partition_by=["week(ts)"]),
    partition_garbage=lambda d: cl.create_table(d.new, SCHEMA, partition_by=["day(ts"]),
    partition_ints=lambda d: cl.create_table(d.new, SCHEMA, partition_by=[1]),
    properties_list=lambda d: cl.create_table(d.new, SCHEMA, properties=["a"]),
    properties_str=lambda d: cl.create_table(d.new, SCHEMA, properties="blocklet_max_rows=5"),
    properties_int_value=lambda d: cl.create_table(
        d.new, SCHEMA, properties={"blocklet_max_rows": 5}
    ),
    properties_negative=lambda d: cl.create_table(
        d.new, SCHEMA, properties={"blocklet_max_rows": "-5"}
    ),
    properties_nan=lambda d: cl.create_table(
        d.new, SCHEMA, properties={"deleted_data_retention": "nan"}
    ),
    properties_zero=lambda d: cl.create_table(d.new, SCHEMA, properties={"blocklet_max_rows": "0"}),
    properties_fraction=lambda d: cl.create_table(
        d.new, SCHEMA, properties={"blocklet_max_rows": "1.5"}
    ),
    properties_unknown=lambda d: cl.create_table(d.new, SCHEMA, properties={"nope": "1"}),
    properties_none_key=lambda d: cl.create_table(d.new, SCHEMA, properties={None: "1"}),
    writer_id_control=lambda d: cl.create_table(d.new, SCHEMA, writer_id="a\tb"),
)

# --- write_table --------------------------------------------------------------------------------

cases(
    "write_table",
    cl.CarbonLiteError,
    mode_unknown=lambda d: cl.write_table(d.new, rows([1]), mode="upsert"),
    mode_none=lambda d: cl.write_table(d.new, rows([1]), mode=None),
    mode_bool=lambda d: cl.write_table(d.new, rows([1]), mode=True),
    exists=lambda d: cl.write_table(d.t.path, rows([9])),
    layout_differs=lambda d: cl.write_table(d.t.path, rows([9]), mode="append", partition_by=[]),
    pk_differs=lambda d: cl.write_table(d.pk.path, rows([9]), mode="append", primary_key=["name"]),
    missing_column=lambda d: cl.write_table(d.t.path, rows([9]).select(["name"]), mode="append"),
    overwrite_missing_column=lambda d: cl.write_table(
        d.pk.path, rows([9]).drop_columns(["id"]), mode="overwrite"
    ),
    partition_unknown=lambda d: cl.write_table(d.new, rows([1]), partition_by=["nope"]),
    data_none=lambda d: cl.write_table(d.new, None),
    data_dict=lambda d: cl.write_table(d.new, {"id": [1]}),
    data_numpy=lambda d: cl.write_table(d.new, np.arange(3)),
    data_empty_list=lambda d: cl.write_table(d.new, []),
    data_null_column=lambda d: cl.write_table(d.new, pa.table({"n": pa.nulls(1)})),
    data_null_keys=lambda d: cl.write_table(d.new, pa.table({"id": [None, 1]}), primary_key=["id"]),
    file_path=lambda d: cl.write_table(d.file, rows([1]), mode="append"),
)

# --- append, overwrite and their data ----------------------------------------------------------

cases(
    "append",
    cl.CarbonLiteError,
    none=lambda d: d.t.append(None),
    int=lambda d: d.t.append(5),
    str=lambda d: d.t.append("id,name"),
    bytes=lambda d: d.t.append(b"\x00"),
    dict=lambda d: d.t.append({"id": [9]}),
    list_of_dicts=lambda d: d.t.append([{"id": 9}]),
    list_of_frames=lambda d: d.t.append([pd.DataFrame({"id": [9]})]),
    numpy=lambda d: d.t.append(np.array([1, 2])),
    numpy_structured=lambda d: d.t.append(np.zeros(2, dtype=[("id", "i8")])),
    arrow_array=lambda d: d.t.append(pa.array([1, 2])),
    chunked_array=lambda d: d.t.append(pa.chunked_array([[1, 2]])),
    lazy_frame=lambda d: d.t.append(pl.LazyFrame({"id": [9]})),
    missing_columns=lambda d: d.t.append(rows([9]).select(["name", "price"])),
    missing_one_column=lambda d: d.t.append(rows([9]).drop_columns(["id"])),
    set_index_unknown_rest=lambda d: d.t.append(
        pd.DataFrame({"id": [9], "x": [1]}).set_index("id")
    ),
    extra_column=lambda d: d.t.append(rows([9]).append_column("extra", pa.array([1]))),
    no_columns=lambda d: d.t.append(pa.table({"x": [1]}).drop_columns(["x"])),
    duplicate_columns=lambda d: d.t.append(
        pa.Table.from_arrays([pa.array([9]), pa.array([9])], names=["id", "id"])
    ),
    string_into_int=lambda d: d.t.append(rows([9]).set_column(2, "price", pa.array(["x"]))),
    float_into_int=lambda d: d.t.append(rows([9]).set_column(2, "price", pa.array([1.5]))),
    uint64_into_int=lambda d: d.t.append(
        rows([9]).set_column(2, "price", pa.array([2**64 - 1], pa.uint64()))
    ),
    null_in_non_nullable=lambda d: d.t.append(
        rows([9, 10]).set_column(0, "id", pa.array([None, 1], pa.int64()))
    ),
    timestamp_out_of_range=lambda d: d.t.append(
        rows([9]).set_column(3, "ts", pa.array([2**62], pa.timestamp("s")))
    ),
    timestamp_finer=lambda d: d.t.append(
        rows([9]).set_column(3, "ts", pa.array([1_500], pa.timestamp("ns", tz="UTC")))
    ),
    union_column=lambda d: d.t.append(
        rows([9]).set_column(
            2, "price", pa.UnionArray.from_sparse(pa.array([0], pa.int8()), [pa.array([1])])
        )
    ),
    pandas_big_int=lambda d: d.t.append(rows([9]).to_pandas().assign(price=[2**70])),
    pandas_mixed_objects=lambda d: d.t.append(rows([9, 10]).to_pandas().assign(name=["a", 1])),
    pandas_objects=lambda d: d.t.append(rows([9]).to_pandas().assign(name=[object()])),
    pandas_int_names=lambda d: d.t.append(pd.DataFrame({0: [1], 1: [2]})),
    polars_missing=lambda d: d.t.append(pl.DataFrame({"name": ["n9"]})),
    txn_str=lambda d: d.t.append(rows([9]), txn="app"),
    txn_short=lambda d: d.t.append(rows([9]), txn=("app",)),
    txn_empty_app=lambda d: d.t.append(rows([9]), txn=("", 1)),
    txn_negative=lambda d: d.t.append(rows([9]), txn=("app", -1)),
    txn_bool=lambda d: d.t.append(rows([9]), txn=("app", True)),
    txn_float=lambda d: d.t.append(rows([9]), txn=("app", 1.0)),
    txn_none_app=lambda d: d.t.append(rows([9]), txn=(None, 1)),
    txn_dict=lambda d: d.t.append(rows([9]), txn={"app": 1}),
    schema_mode_none=lambda d: d.t.append(rows([9]), schema_mode=None),
    schema_mode_upper=lambda d: d.t.append(rows([9]), schema_mode="MERGE"),
    merge_mode_on_pk=lambda d: d.pk.append(rows([9]), schema_mode="merge"),
    pk_missing_column=lambda d: d.pk.append(rows([9]).drop_columns(["id"])),
    pk_null_key=lambda d: d.pk.append(rows([9, 10]).set_column(0, "id", pa.array([None, 1]))),
    pk_index_and_a_missing_column=lambda d: d.pk.append(
        rows([9]).to_pandas().set_index("name").drop(columns=["id"])
    ),
)
cases(
    "overwrite",
    cl.CarbonLiteError,
    partitions_none=lambda d: d.t.overwrite(rows([9]), partitions=None),
    partitions_upper=lambda d: d.t.overwrite(rows([9]), partitions="ALL"),
    missing_column=lambda d: d.t.overwrite(rows([9]).drop_columns(["id"])),
    data_none=lambda d: d.t.overwrite(None),
    pk_missing=lambda d: d.pk.overwrite(rows([9]).drop_columns(["id"])),
)

# --- reads: columns, filters, versions, timestamps ---------------------------------------------

cases(
    "columns",
    cl.CarbonLiteError,
    int=lambda d: d.t.to_arrow(columns=5),
    unknown=lambda d: d.t.to_arrow(columns=["nope"]),
    none_item=lambda d: d.t.to_arrow(columns=[None]),
    nested=lambda d: d.t.to_arrow(columns=[["id"]]),
    repeated=lambda d: d.t.to_arrow(columns=["id", "id"]),
    dict=lambda d: d.t.to_arrow(columns={"id": 1}),
    set=lambda d: d.t.to_arrow(columns={"id"}),
    empty_name=lambda d: d.t.to_arrow(columns=[""]),
    scan_unknown=lambda d: d.t.scan(columns=["nope"]),
    pandas_unknown=lambda d: d.t.to_pandas(columns=["nope"]),
    polars_unknown=lambda d: d.t.to_polars(columns=["nope"]),
    plan_splits_int=lambda d: d.t.plan_splits(columns=3),
)
cases(
    "filter",
    cl.InvalidFilterError,
    str_incomplete=lambda d: d.t.to_arrow(filter="id > "),
    str_function=lambda d: d.t.to_arrow(filter="lower(name) = 'x'"),
    str_unknown_column=lambda d: d.t.to_arrow(filter="nope > 1"),
    int=lambda d: d.t.to_arrow(filter=5),
    dict=lambda d: d.t.to_arrow(filter={"id": 1}),
    bool_true=lambda d: d.t.to_arrow(filter=True),
    numpy_bool=lambda d: d.t.to_arrow(filter=np.bool_(True)),
    unknown_column=lambda d: d.t.to_arrow(filter=pc.field("nope") > 1),
    not_boolean=lambda d: d.t.to_arrow(filter=pc.field("id") + 1),
    string_vs_int=lambda d: d.t.to_arrow(filter=pc.field("id") > "x"),
    ts_vs_string=lambda d: d.t.to_arrow(filter=pc.field("ts") > "yesterday"),
    nested_field=lambda d: d.t.to_arrow(filter=pc.field(("name", "x")) > 1),
    dnf_bad_op=lambda d: d.t.to_arrow(filter=[("id", "~", 1)]),
    dnf_short=lambda d: d.t.to_arrow(filter=[("id", ">")]),
    dnf_long=lambda d: d.t.to_arrow(filter=[("id", ">", 1, 2)]),
    dnf_unknown=lambda d: d.t.to_arrow(filter=[("nope", "=", 1)]),
    dnf_in_scalar=lambda d: d.t.to_arrow(filter=[("id", "in", 5)]),
    dnf_bad_literal=lambda d: d.t.to_arrow(filter=[("id", ">", object())]),
    dnf_or_unknown=lambda d: d.t.to_arrow(filter=[[("id", ">", 1)], [("nope", "=", 1)]]),
    dnf_column_int=lambda d: d.t.to_arrow(filter=[(1, "=", 1)]),
    dnf_list_of_str=lambda d: d.t.to_arrow(filter=["id > 1"]),
    delete_str=lambda d: d.t.delete("id >> 1"),
    delete_unknown=lambda d: d.t.delete(pc.field("nope") == 1),
    update_bad_filter=lambda d: d.t.update([("id", "~", 1)], {"price": 1}),
    plan_splits=lambda d: d.t.plan_splits(filter={"id": 1}),
)
cases(
    "version",
    cl.CarbonLiteError,
    negative=lambda d: d.t.to_arrow(version=-1),
    huge=lambda d: d.t.to_arrow(version=2**70),
    past_latest=lambda d: d.t.to_arrow(version=99),
    float=lambda d: d.t.to_arrow(version=1.0),
    nan=lambda d: d.t.to_arrow(version=float("nan")),
    bool=lambda d: d.t.to_arrow(version=True),
    digit_string=lambda d: d.t.to_arrow(version="1"),
    empty_string=lambda d: d.t.to_arrow(version=""),
    garbage_string=lambda d: d.t.to_arrow(version="yesterday"),
    bad_iso=lambda d: d.t.to_arrow(version="2026-13-45T00:00:00Z"),
    list=lambda d: d.t.to_arrow(version=[1]),
    numpy_negative=lambda d: d.t.to_arrow(version=np.int64(-1)),
    numpy_float=lambda d: d.t.to_arrow(version=np.float64(1)),
    numpy_datetime=lambda d: d.t.to_arrow(version=np.datetime64("2026-01-01")),
    date=lambda d: d.t.to_arrow(version=datetime.date(2026, 1, 1)),
    year_1=lambda d: d.t.to_arrow(version=datetime.datetime(1, 1, 1)),
    before_creation=lambda d: d.t.to_arrow(version=datetime.datetime(2000, 1, 1, tzinfo=UTC)),
    decimal=lambda d: d.t.to_arrow(version=decimal.Decimal(1)),
    scan=lambda d: d.t.scan(version=-5),
    count_rows=lambda d: d.t.count_rows(version="x"),
    snapshot=lambda d: d.t.snapshot(version=[0]),
    segments=lambda d: d.t.segments(version=99),
    partitions=lambda d: d.t.partitions(version=-1),
    verify=lambda d: d.t.verify(version=1.5),
    version_at_none=lambda d: d.t.version_at(None),
    version_at_year_1=lambda d: d.t.version_at(datetime.datetime(1, 1, 1)),
    state=lambda d: d.t.state("s", version=99),
    read_split_version=lambda d: d.t.read_split(d.t.plan_splits().splits[0], version=-1),
)
cases(
    "history",
    E,
    zero=lambda d: d.t.history(0),
    negative=lambda d: d.t.history(-1),
    float=lambda d: d.t.history(1.5),
    bool=lambda d: d.t.history(True),
    str=lambda d: d.t.history("3"),
    nan=lambda d: d.t.history(float("nan")),
    list=lambda d: d.t.history([1]),
)
cases(
    "changes",
    cl.CarbonLiteError,
    none=lambda d: d.t.changes(None),
    negative=lambda d: d.t.changes(-1),
    reversed=lambda d: d.t.changes(2, 1),
    past_latest=lambda d: d.t.changes(99),
    huge=lambda d: d.t.changes(2**70),
    float=lambda d: d.t.changes(1.5),
    bool=lambda d: d.t.changes(True),
    str=lambda d: d.t.changes("x"),
    end_str=lambda d: d.t.changes(0, "x"),
    end_negative=lambda d: d.t.changes(0, -1),
    end_before_creation=lambda d: d.t.changes(0, datetime.datetime(2000, 1, 1, tzinfo=UTC)),
    far_future=lambda d: d.t.changes(datetime.datetime(9999, 12, 31)),
    end_year_1=lambda d: d.t.changes(0, datetime.datetime(1, 1, 1)),
    date=lambda d: d.t.changes(datetime.date(2026, 1, 1)),
)
cases(
    "transaction_version",
    E,
    none=lambda d: d.t.transaction_version(None),
    int=lambda d: d.t.transaction_version(5),
    empty=lambda d: d.t.transaction_version(""),
    list=lambda d: d.t.transaction_version(["app"]),
)
cases(
    "state",
    E,
    missing=lambda d: d.t.state("nope"),
    none=lambda d: d.t.state(None),
    list=lambda d: d.t.state(["s"]),
    int=lambda d: d.t.state(5),
)
cases(
    "read_split",
    cl.CarbonLiteError,
    none=lambda d: d.t.read_split(None),
    int=lambda d: d.t.read_split(5),
    dict=lambda d: d.t.read_split({"file": "x"}),
    columns=lambda d: d.t.read_split(d.t.plan_splits().splits[0], columns=["nope"]),
    filter=lambda d: d.t.read_split(d.t.plan_splits().splits[0], filter="id >"),
)

# --- row-level changes -------------------------------------------------------------------------

cases(
    "update",
    cl.CarbonLiteError,
    set_none=lambda d: d.t.update(None, None),
    set_empty=lambda d: d.t.update(None, {}),
    set_list=lambda d: d.t.update(None, [("price", 1)]),
    set_unknown=lambda d: d.t.update(None, {"nope": 1}),
    set_int_key=lambda d: d.t.update(None, {1: 2}),
    huge=lambda d: d.t.update(pc.field("id") == 1, {"price": 2**70}),
    negative_huge=lambda d: d.t.update(pc.field("id") == 1, {"price": -(2**70)}),
    string_into_int=lambda d: d.t.update(pc.field("id") == 1, {"price": "5"}),
    fraction_into_int=lambda d: d.t.update(pc.field("id") == 1, {"price": 1.5}),
    nan_into_int=lambda d: d.t.update(pc.field("id") == 1, {"price": float("nan")}),
    bool_into_int=lambda d: d.t.update(pc.field("id") == 1, {"price": True}),
    list_into_int=lambda d: d.t.update(pc.field("id") == 1, {"price": [1]}),
    dict_into_int=lambda d: d.t.update(pc.field("id") == 1, {"price": {"a": 1}}),
    numpy_into_int=lambda d: d.t.update(pc.field("id") == 1, {"price": np.array([1])}),
    object_into_int=lambda d: d.t.update(pc.field("id") == 1, {"price": object()}),
    none_into_key=lambda d: d.t.update(pc.field("id") == 1, {"id": None}),
    int_into_string=lambda d: d.t.update(pc.field("id") == 1, {"name": 5}),
    string_into_ts=lambda d: d.t.update(pc.field("id") == 1, {"ts": "2026-01-01"}),
    date_into_ts=lambda d: d.t.update(pc.field("id") == 1, {"ts": datetime.date(2026, 1, 1)}),
    expression_unknown=lambda d: d.t.update(None, {"price": pc.field("nope") + 1}),
    expression_wrong_type=lambda d: d.t.update(None, {"price": pc.field("name")}),
    expression_overflow=lambda d: d.t.update(None, {"price": pc.field("price") * 2**62}),
    pk_duplicate=lambda d: d.pk.update(pc.field("id") == 1, {"id": 2}),
    pk_all_one_key=lambda d: d.pk.update(None, {"id": 5}),
)
cases(
    "merge",
    cl.CarbonLiteError,
    on_none=lambda d: d.t.merge(rows([1]), on=None),
    on_empty=lambda d: d.t.merge(rows([1]), on=[]),
    on_int=lambda d: d.t.merge(rows([1]), on=5),
    on_ints=lambda d: d.t.merge(rows([1]), on=[1]),
    on_unknown=lambda d: d.t.merge(rows([1]), on=["nope"]),
    on_dict=lambda d: d.t.merge(rows([1]), on={"id": 1}),
    when_matched=lambda d: d.t.merge(rows([1]), on=["id"], when_matched="upsert"),
    when_matched_none=lambda d: d.t.merge(rows([1]), on=["id"], when_matched=None),
    when_not_matched=lambda d: d.t.merge(rows([1]), on=["id"], when_not_matched="delete"),
    when_not_matched_by_source=lambda d: d.t.merge(
        rows([1]), on=["id"], when_not_matched_by_source="update"
    ),
    source_none=lambda d: d.t.merge(None, on=["id"]),
    source_dict=lambda d: d.t.merge({"id": [1]}, on=["id"]),
    source_extra=lambda d: d.t.merge(rows([1]).append_column("x", pa.array([1])), on=["id"]),
    source_without_key=lambda d: d.t.merge(rows([1]).drop_columns(["id"]), on=["id"]),
    source_wrong_type=lambda d: d.t.merge(pa.table({"id": [1], "price": ["x"]}), on=["id"]),
    source_overflow=lambda d: d.t.merge(pd.DataFrame({"id": [1], "price": [2**70]}), on=["id"]),
    source_key_twice=lambda d: d.t.merge(rows([1, 1]), on=["id"]),
    pk_inserts_a_key_twice=lambda d: d.pk.merge(rows([7, 7]), on=["id"]),
    pk_moves_onto_a_key=lambda d: d.pk.merge(pa.table({"name": ["n1"], "id": [2]}), on=["name"]),
)
cases(
    "delete",
    cl.CarbonLiteError,
    int=lambda d: d.t.delete(5),
    list_of_str=lambda d: d.t.delete(["id"]),
    not_boolean=lambda d: d.t.delete(pc.field("id")),
)

# --- properties, columns, restore --------------------------------------------------------------

cases(
    "set_properties",
    E,
    none=lambda d: d.t.set_properties(None),
    empty=lambda d: d.t.set_properties({}),
    list=lambda d: d.t.set_properties([("checkpoint_interval", "5")]),
    int_value=lambda d: d.t.set_properties({"checkpoint_interval": 5}),
    negative=lambda d: d.t.set_properties({"checkpoint_interval": "-5"}),
    unknown=lambda d: d.t.set_properties({"nope": "1"}),
    bad_duration=lambda d: d.t.set_properties({"deleted_data_retention": "7x"}),
    bad_codec=lambda d: d.t.set_properties({"stream_codec": "gzip9000"}),
)
cases(
    "unset_properties",
    E,
    none=lambda d: d.t.unset_properties(None),
    int=lambda d: d.t.unset_properties(5),
    unknown=lambda d: d.t.unset_properties(["nope"]),
    not_set=lambda d: d.t.unset_properties(["checkpoint_interval"]),
    list_of_ints=lambda d: d.t.unset_properties([1]),
    missing_ok_str=lambda d: d.t.unset_properties(["checkpoint_interval"], missing_ok="yes"),
)
cases(
    "add_columns",
    cl.CarbonLiteError,
    none=lambda d: d.t.add_columns(None),
    str=lambda d: d.t.add_columns("x"),
    int=lambda d: d.t.add_columns(5),
    empty=lambda d: d.t.add_columns([]),
    existing=lambda d: d.t.add_columns(pa.field("id", pa.int64())),
    duplicate=lambda d: d.t.add_columns([pa.field("x", pa.int8()), pa.field("x", pa.int8())]),
    non_nullable=lambda d: d.t.add_columns(pa.field("x", pa.int8(), nullable=False)),
    union=lambda d: d.t.add_columns(pa.field("u", pa.dense_union([pa.field("i", pa.int8())]))),
    list_of_str=lambda d: d.t.add_columns(["x"]),
    tuple_pair=lambda d: d.t.add_columns(("x", pa.int8())),
)
cases(
    "restore",
    cl.CarbonLiteError,
    none=lambda d: d.t.restore(None),
    negative=lambda d: d.t.restore(-1),
    huge=lambda d: d.t.restore(2**70),
    float=lambda d: d.t.restore(1.5),
    bool=lambda d: d.t.restore(True),
    str=lambda d: d.t.restore("x"),
    before_creation=lambda d: d.t.restore(datetime.datetime(2000, 1, 1, tzinfo=UTC)),
)

# --- maintenance ---------------------------------------------------------------------------------

cases(
    "compact",
    E,
    kind_none=lambda d: d.t.compact(None),
    kind_unknown=lambda d: d.t.compact("huge"),
    segments_str=lambda d: d.t.compact("custom", segments="0"),
    segments_none_item=lambda d: d.t.compact("custom", segments=[None]),
    segments_path=lambda d: d.t.compact("custom", segments=["../x"]),
    segments_int=lambda d: d.t.compact("custom", segments=[0]),
    progress_int=lambda d: d.t.compact("major", progress=5),
    executor_str=lambda d: d.t.compact("major", executor="threads"),
    handoff_progress=lambda d: d.t.handoff(progress="bar"),
    handoff_executor=lambda d: d.t.handoff(executor=5),
)
cases(
    "clean",
    E,
    negative=lambda d: d.t.clean(-1),
    nan=lambda d: d.t.clean(float("nan")),
    inf=lambda d: d.t.clean(float("inf")),
    bad_str=lambda d: d.t.clean("7x"),
    list=lambda d: d.t.clean([1]),
    bool=lambda d: d.t.clean(True),
    dry_run_str=lambda d: d.t.clean(dry_run="no"),
    force_int=lambda d: d.t.clean(force=1),
    progress_str=lambda d: d.t.clean(progress="x"),
    short_without_force=lambda d: d.t.clean(0),
)
cases(
    "recover",
    E,
    min_age_negative=lambda d: d.t.recover(min_age=-1),
    min_age_str=lambda d: d.t.recover(min_age="soon"),
    min_age_nan=lambda d: d.t.recover(min_age=float("nan")),
    dry_run_none=lambda d: d.t.recover(dry_run=None),
)
cases(
    "verify",
    cl.CarbonLiteError,
    progress_int=lambda d: d.t.verify(progress=5),
    version_str=lambda d: d.t.verify(version="latest"),
)
cases(
    "publish",
    cl.CarbonLiteError,
    none=lambda d: d.t.publish(None),
    int=lambda d: d.t.publish(5),
    mode=lambda d: d.t.publish(rows([1]), mode="all"),
    mode_none=lambda d: d.t.publish(rows([1]), mode=None),
    payload_int=lambda d: d.t.publish({("eu",): 5}),
    payload_wrong_partition=lambda d: d.t.publish({("eu",): rows([2])}),
    payload_unknown_key=lambda d: d.t.publish({("mars", "x"): rows([1])}),
    missing_column=lambda d: d.t.publish(rows([1]).drop_columns(["id"])),
    state_int=lambda d: d.t.publish(rows([1]), state=5),
    state_value=lambda d: d.t.publish(rows([1]), state={"s": 5}),
    state_key=lambda d: d.t.publish(rows([1]), state={1: pa.table({"a": [1]})}),
    unpartitioned=lambda d: d.pk.publish(rows([1])),
)


def _closed(d: Doors) -> object:
    other = cl.open_table(d.t.path)
    other.close()
    return other.to_arrow()


case("closed-handle-read", E)(_closed)
case("closed-handle-write", E)(
    lambda d: (lambda o: (o.close(), o.append(rows([9]))))(cl.open_table(d.t.path))
)

IDS = [name for name, _, _ in CASES]


def test_the_sweep_is_wide() -> None:
    assert len(CASES) >= 150
    assert len(set(IDS)) == len(IDS)


def assert_refused_and_unchanged(
    doors: Doors, name: str, call: Case, error: type[cl.CarbonLiteError]
) -> None:
    """``call`` raises ``error`` (a CarbonLiteError with a message) and leaves both tables,
    the free path and the plain file as they were."""
    before = content(doors.t), content(doors.pk)
    with pytest.raises(cl.CarbonLiteError) as info:
        call(doors)
    assert isinstance(info.value, error), f"{name}: {type(info.value).__name__}: {info.value}"
    assert str(info.value).strip(), f"{name} raised an empty message"
    assert (content(doors.t), content(doors.pk)) == before
    assert not doors.new.exists()
    assert doors.file.read_text() == "not a table"


@pytest.mark.parametrize(("name", "call", "error"), CASES, ids=IDS)
def test_bad_input_raises_a_carbonlite_error_and_changes_nothing(
    doors: Doors, name: str, call: Case, error: type[cl.CarbonLiteError]
) -> None:
    assert_refused_and_unchanged(doors, name, call, error)


def test_edge_values_that_are_not_errors_get_the_right_answer(doors: Doors) -> None:
    """Values at the edges that are valid input: an answer, not an error."""
    t = doors.t
    everything = t.changes(0)
    assert t.changes(datetime.datetime(1, 1, 1)).equals(everything)  # before the table
    assert t.to_arrow(filter=[("price", "=", 2**70)]).num_rows == 0  # no int64 is that
    assert t.to_arrow(filter=pc.field("price") < 2**63 - 1).num_rows == 4
    assert t.transaction_version("never-seen") is None
    assert t.history(2**70)[-1].operation == "CREATE TABLE"
    assert t.to_arrow(version=np.int64(1)).num_rows == 3
    assert t.to_arrow(columns="id").column_names == ["id"]
    assert t.to_arrow(columns=()).num_columns == 0
    t.update(pc.field("id") == 1, {"price": 2.0, "name": None})  # whole float, null: they fit
    assert t.to_arrow(filter=pc.field("id") == 1).to_pylist()[0]["price"] == 2
