"""More careless and hostile input at the doors of the Python API, beyond test_api_doors.py:
numpy scalars, Decimal, bytes and whitespace where names belong, dates and datetimes at the
edges of their range, pandas NaT, huge numbers that overflow a float, data that does not fit
(nested, dictionary, extension and binary columns, invalid UTF-8, internal column names),
readers and generators that fail midway, filters Arrow cannot evaluate (division by zero,
failing casts, fields by position), closed handles at every door, paths that loop or are too
long, and the DuckDB and Polars helpers. Each raises a CarbonLiteError subclass and afterwards
both tables hold exactly what they held (the fixtures and the check are test_api_doors.py's).
"""

from __future__ import annotations

import datetime
import decimal
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
import carbonlite.duckdb as cl_duckdb
import carbonlite.polars as cl_polars
from tests.test_api_doors import (
    SCHEMA,
    UTC,
    Case,
    Doors,
    assert_refused_and_unchanged,
    content,
    doors,
    rows,
)

pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")

__all__ = ["doors"]  # the fixture, imported

CASES: list[tuple[str, Case, type[cl.CarbonLiteError]]] = []


def cases(prefix: str, error: type[cl.CarbonLiteError], **fns: Case) -> None:
    for name, fn in fns.items():
        CASES.append((f"{prefix}-{name}", fn, error))


E, S, F = cl.InvalidOptionError, cl.SchemaMismatchError, cl.InvalidFilterError
V, C = cl.VersionNotFoundError, cl.CarbonLiteError
PLUS_ONE = datetime.timezone(datetime.timedelta(hours=1))


def with_column(ids: list[int], name: str, values: pa.Array) -> pa.Table:
    """``rows(ids)`` with column ``name`` replaced by ``values``."""
    table = rows(ids)
    return table.set_column(table.schema.get_field_index(name), name, values)


def batch(ids: list[int]) -> pa.RecordBatch:
    return rows(ids).to_batches()[0]


def failing_reader(d: Doors) -> pa.RecordBatchReader:
    """A reader whose source fails after its first batch (a dropped connection, say)."""

    def batches() -> Iterator[pa.RecordBatch]:
        yield batch([9])
        raise RuntimeError("the source went away")

    return pa.RecordBatchReader.from_batches(SCHEMA, batches())


def failing_generator(d: Doors) -> Iterator[pa.RecordBatch]:
    yield batch([9])
    raise ConnectionError("the source went away")


def symlink_loop(d: Doors) -> Path:
    a, b = d.file.parent / "loop-a", d.file.parent / "loop-b"
    if not a.is_symlink():
        os.symlink(b, a)
        os.symlink(a, b)
    return a


def closed(d: Doors) -> cl.Table:
    table = cl.open_table(d.t.path)
    table.close()
    return table


# --- paths and tables ------------------------------------------------------------------------

cases(
    "open_table",
    C,
    whitespace=lambda d: cl.open_table("   "),
    tab=lambda d: cl.open_table("\t"),
    dot_of_tmp=lambda d: cl.open_table(str(d.file.parent) + "/."),
    log_dir=lambda d: cl.open_table(os.path.join(d.t.path, "_carbonlite")),
    symlink_loop=lambda d: cl.open_table(symlink_loop(d)),
    below_symlink_loop=lambda d: cl.open_table(symlink_loop(d) / "t"),
    name_too_long=lambda d: cl.open_table(d.file.parent / ("x" * 300)),
    path_too_long=lambda d: cl.open_table(d.file.parent / "/".join(["y" * 200] * 30)),
    surrogate=lambda d: cl.open_table(str(d.file.parent / "\udcff")),
    float=lambda d: cl.open_table(1.5),
    dict=lambda d: cl.open_table({"path": "x"}),
    numpy_array=lambda d: cl.open_table(np.array(["x"])),
    file_uri_empty=lambda d: cl.open_table("file://"),
    unknown_scheme_path=lambda d: cl.open_table("carbon://bucket/table"),
    memory_missing=lambda d: cl.open_table("memory://no-such-table-here"),
    storage_options_unknown_key=lambda d: cl.open_table(d.t.path, storage_options={"x": 1}),
    storage_options_int_key=lambda d: cl.open_table(d.t.path, storage_options={1: 2}),
    writer_id_bytes=lambda d: cl.open_table(d.t.path, writer_id=b"w"),
    writer_id_newline=lambda d: cl.open_table(d.t.path, writer_id="w\n"),
    writer_id_list=lambda d: cl.open_table(d.t.path, writer_id=["w"]),
)
cases(
    "create_table",
    C,
    name_too_long=lambda d: cl.create_table(d.new / ("x" * 300), SCHEMA),
    symlink_loop=lambda d: cl.create_table(symlink_loop(d), SCHEMA),
    schema_pandas=lambda d: cl.create_table(d.new, pd.DataFrame({"id": [1]})),
    schema_arrow_table=lambda d: cl.create_table(d.new, rows([1])),
    schema_field=lambda d: cl.create_table(d.new, pa.field("id", pa.int64())),
    column_sparse_union=lambda d: cl.create_table(
        d.new, pa.schema([("u", pa.sparse_union([pa.field("i", pa.int8())]))])
    ),
    column_list_of_dictionary=lambda d: cl.create_table(
        d.new, pa.schema([("l", pa.list_(pa.dictionary(pa.int8(), pa.string())))])
    ),
    column_change_type=lambda d: cl.create_table(d.new, pa.schema([("_change_type", pa.int8())])),
    column_row_position=lambda d: cl.create_table(
        d.new, pa.schema([("id", pa.int64()), ("_carbonlite_row", pa.int64())])
    ),
    sort_bytes=lambda d: cl.create_table(d.new, SCHEMA, sort_columns=[b"ts"]),
    sort_comma_string=lambda d: cl.create_table(d.new, SCHEMA, sort_columns="ts,name"),
    sort_whitespace=lambda d: cl.create_table(d.new, SCHEMA, sort_columns=[" ts"]),
    sort_case=lambda d: cl.create_table(d.new, SCHEMA, sort_columns=["TS"]),
    sort_numpy=lambda d: cl.create_table(d.new, SCHEMA, sort_columns=np.array(["ts"])),
    sort_list_column=lambda d: cl.create_table(
        d.new, pa.schema([("l", pa.list_(pa.int8()))]), sort_columns=["l"]
    ),
    pk_bytes=lambda d: cl.create_table(d.new, SCHEMA, primary_key=[b"id"]),
    pk_repeated=lambda d: cl.create_table(d.new, SCHEMA, primary_key=["id", "id"]),
    pk_none_item=lambda d: cl.create_table(d.new, SCHEMA, primary_key=[None]),
    pk_dict=lambda d: cl.create_table(d.new, SCHEMA, primary_key={"id": True}),
    partition_bytes=lambda d: cl.create_table(d.new, SCHEMA, partition_by=[b"region"]),
    partition_repeated=lambda d: cl.create_table(d.new, SCHEMA, partition_by=["region", "region"]),
    partition_bucket_negative=lambda d: cl.create_table(
        d.new, SCHEMA, partition_by=["bucket(-1, id)"]
    ),
    partition_bucket_fraction=lambda d: cl.create_table(
        d.new, SCHEMA, partition_by=["bucket(1.5, id)"]
    ),
    partition_bucket_no_count=lambda d: cl.create_table(d.new, SCHEMA, partition_by=["bucket(id)"]),
    partition_bucket_unknown=lambda d: cl.create_table(
        d.new, SCHEMA, partition_by=["bucket(4, nope)"]
    ),
    partition_empty_transform=lambda d: cl.create_table(d.new, SCHEMA, partition_by=["day()"]),
    partition_empty_string=lambda d: cl.create_table(d.new, SCHEMA, partition_by=[""]),
    partition_list_column=lambda d: cl.create_table(
        d.new, pa.schema([("l", pa.list_(pa.int8()))]), partition_by=["l"]
    ),
    partition_year_of_int=lambda d: cl.create_table(d.new, SCHEMA, partition_by=["year(id)"]),
    properties_huge=lambda d: cl.create_table(
        d.new, SCHEMA, properties={"blocklet_max_rows": str(2**70)}
    ),
    properties_exponent=lambda d: cl.create_table(
        d.new, SCHEMA, properties={"blocklet_max_rows": "1e3"}
    ),
    properties_blank=lambda d: cl.create_table(
        d.new, SCHEMA, properties={"checkpoint_interval": "  "}
    ),
    properties_none_value=lambda d: cl.create_table(
        d.new, SCHEMA, properties={"checkpoint_interval": None}
    ),
    properties_empty_key=lambda d: cl.create_table(d.new, SCHEMA, properties={"": "x"}),
    properties_user_int=lambda d: cl.create_table(d.new, SCHEMA, properties={"user.x": 5}),
    properties_retention_inf=lambda d: cl.create_table(
        d.new, SCHEMA, properties={"deleted_data_retention": "inf"}
    ),
    properties_retention_negative=lambda d: cl.create_table(
        d.new, SCHEMA, properties={"deleted_data_retention": "-1d"}
    ),
    properties_flag_maybe=lambda d: cl.create_table(
        d.new, SCHEMA, properties={"auto_compaction": "maybe"}
    ),
    properties_bytes_value=lambda d: cl.create_table(
        d.new, SCHEMA, properties={"checkpoint_interval": b"5"}
    ),
    storage_options_unknown_key=lambda d: cl.create_table(
        d.new, SCHEMA, storage_options={"nope": 1}
    ),
)

# --- write_table --------------------------------------------------------------------------------

cases(
    "write_table",
    C,
    sort_unknown=lambda d: cl.write_table(d.new, rows([1]), sort_columns=["nope"]),
    properties_unknown=lambda d: cl.write_table(d.new, rows([1]), properties={"nope": "1"}),
    storage_options_str=lambda d: cl.write_table(d.new, rows([1]), storage_options="x"),
    writer_id_slash=lambda d: cl.write_table(d.new, rows([1]), writer_id="a/b"),
    data_duplicate_names=lambda d: cl.write_table(
        d.new, pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    ),
    data_union=lambda d: cl.write_table(
        d.new,
        pa.table({"u": pa.UnionArray.from_sparse(pa.array([0], pa.int8()), [pa.array([1])])}),
    ),
    data_commit_timestamp=lambda d: cl.write_table(d.new, pa.table({"_commit_timestamp": [1]})),
    data_no_columns=lambda d: cl.write_table(d.new, pa.table({"x": [1]}).drop_columns(["x"])),
    data_empty_generator=lambda d: cl.write_table(d.new, iter([])),
    data_second_batch_differs=lambda d: cl.write_table(
        d.new, [batch([1]), pa.record_batch({"x": [1]})]
    ),
    append_partition_str=lambda d: cl.write_table(
        d.t.path, rows([9]), mode="append", partition_by="region"
    ),
    append_sort_differs=lambda d: cl.write_table(
        d.t.path, rows([9]), mode="append", sort_columns=["name"]
    ),
    append_properties_differ=lambda d: cl.write_table(
        d.t.path, rows([9]), mode="append", properties={"checkpoint_interval": "5"}
    ),
    append_schema_mode_bad=lambda d: cl.write_table(
        d.t.path, rows([9]), mode="append", schema_mode="loose"
    ),
    mode_upper=lambda d: cl.write_table(d.t.path, rows([9]), mode="APPEND"),
)

# --- append and its data -------------------------------------------------------------------------

cases(
    "append",
    C,
    numpy_scalar=lambda d: d.t.append(np.int64(5)),
    arrow_scalar=lambda d: d.t.append(pa.scalar(1)),
    set_of_ints=lambda d: d.t.append({1, 2}),
    generator_of_dicts=lambda d: d.t.append({"id": i} for i in [9]),
    generator_then_int=lambda d: d.t.append(x for x in [batch([9]), 5]),
    list_then_none=lambda d: d.t.append([batch([9]), None]),
    second_batch_differs=lambda d: d.t.append([batch([9]), pa.record_batch({"x": [1]})]),
    second_batch_wrong_type=lambda d: d.t.append(
        [batch([9]), with_column([10], "price", pa.array(["x"])).to_batches()[0]]
    ),
    zero_column_batch=lambda d: d.t.append(
        pa.RecordBatch.from_struct_array(pa.array([{}], pa.struct([])))
    ),
    struct_into_int=lambda d: d.t.append(
        with_column([9], "price", pa.array([{"a": 1}], pa.struct([("a", pa.int64())])))
    ),
    list_into_string=lambda d: d.t.append(with_column([9], "name", pa.array([["a"]]))),
    dictionary_of_ints_into_string=lambda d: d.t.append(
        with_column([9], "name", pa.array([1]).dictionary_encode())
    ),
    dictionary_of_strings_into_int=lambda d: d.t.append(
        with_column([9], "price", pa.array(["1"]).dictionary_encode())
    ),
    binary_invalid_utf8_into_string=lambda d: d.t.append(
        with_column([9], "name", pa.array([b"\xff\xfe"], pa.binary()))
    ),
    uuid_into_string=lambda d: d.t.append(
        with_column([9], "name", pa.array([b"0" * 16], pa.binary(16)).cast(pa.uuid()))
    ),
    bool_into_int=lambda d: d.t.append(with_column([9], "price", pa.array([True]))),
    date_into_timestamp=lambda d: d.t.append(
        with_column([9], "ts", pa.array([datetime.date(2026, 1, 1)]))
    ),
    int_into_timestamp=lambda d: d.t.append(with_column([9], "ts", pa.array([5]))),
    duration_into_timestamp=lambda d: d.t.append(
        with_column([9], "ts", pa.array([datetime.timedelta(1)]))
    ),
    time_into_timestamp=lambda d: d.t.append(with_column([9], "ts", pa.array([datetime.time(1)]))),
    decimal_into_int=lambda d: d.t.append(
        with_column([9], "price", pa.array([decimal.Decimal("1.5")]))
    ),
    decimal_huge_into_int=lambda d: d.t.append(
        with_column([9], "price", pa.array([decimal.Decimal(10**30)], pa.decimal128(38, 0)))
    ),
    float16_into_int=lambda d: d.t.append(
        with_column([9], "price", pa.array([np.float16(1.5)], pa.float16()))
    ),
    null_type_into_non_nullable=lambda d: d.t.append(with_column([9], "id", pa.nulls(1))),
    internal_change_type_extra=lambda d: d.t.append(
        rows([9]).append_column("_change_type", pa.array(["insert"]))
    ),
    index_level_extra=lambda d: d.t.append(
        rows([9]).append_column("__index_level_0__", pa.array([0]))
    ),
    row_position_extra=lambda d: d.t.append(
        rows([9]).append_column("_row_position", pa.array([0]))
    ),
    pandas_duplicate_columns=lambda d: d.t.append(
        pd.concat([rows([9]).to_pandas(), rows([9]).to_pandas()[["id"]]], axis=1)
    ),
    pandas_multiindex_columns=lambda d: d.t.append(
        pd.DataFrame([[1, 2]], columns=pd.MultiIndex.from_tuples([("id", "a"), ("id", "b")]))
    ),
    pandas_nan_into_int=lambda d: d.t.append(
        rows([9, 10]).to_pandas().assign(price=[float("nan"), 1.5])
    ),
    pandas_decimal_objects=lambda d: d.t.append(
        rows([9]).to_pandas().assign(price=[decimal.Decimal("1.5")])
    ),
    pandas_na_in_key=lambda d: d.t.append(
        rows([9, 10]).to_pandas().assign(id=pd.array([None, 1], dtype="Int64"))
    ),
    pandas_bytes_in_strings=lambda d: d.t.append(rows([9]).to_pandas().assign(name=[b"\xff"])),
    pandas_series=lambda d: d.t.append(pd.Series([1, 2])),
    polars_object_column=lambda d: d.t.append(
        pl.DataFrame({"id": [9], "o": pl.Series([object()], dtype=pl.Object)})
    ),
    polars_wrong_type=lambda d: d.t.append(
        pl.from_arrow(rows([9])).with_columns(pl.lit("x").alias("price"))
    ),
    polars_series=lambda d: d.t.append(pl.Series("id", [9])),
    merge_new_union_column=lambda d: d.t.append(
        rows([9]).append_column(
            "u", pa.UnionArray.from_sparse(pa.array([0], pa.int8()), [pa.array([1])])
        ),
        schema_mode="merge",
    ),
    merge_new_null_column=lambda d: d.t.append(
        rows([9]).append_column("n", pa.nulls(1)), schema_mode="merge"
    ),
    merge_new_row_position=lambda d: d.t.append(
        rows([9]).append_column("_carbonlite_row", pa.array([0])), schema_mode="merge"
    ),
    merge_new_commit_version=lambda d: d.t.append(
        rows([9]).append_column("_commit_version", pa.array([0])), schema_mode="merge"
    ),
    merge_wrong_type=lambda d: d.t.append(
        with_column([9], "price", pa.array(["x"])), schema_mode="merge"
    ),
    merge_duplicate_names=lambda d: d.t.append(
        rows([9]).append_column("x", pa.array([1])).append_column("x", pa.array([2])),
        schema_mode="merge",
    ),
    schema_mode_true=lambda d: d.t.append(rows([9]), schema_mode=True),
    schema_mode_trailing_space=lambda d: d.t.append(rows([9]), schema_mode="merge "),
    txn_huge=lambda d: d.t.append(rows([9]), txn=("app", 2**70)),
    txn_bytes_app=lambda d: d.t.append(rows([9]), txn=(b"app", 2)),
    txn_numpy_float=lambda d: d.t.append(rows([9]), txn=("app", np.float64(2))),
    txn_three=lambda d: d.t.append(rows([9]), txn=("app", 2, 3)),
    txn_set=lambda d: d.t.append(rows([9]), txn={"app", 2}),
    markers_list=lambda d: d.t.append(rows([9]), markers=[("m", (None, 1))]),
    markers_str=lambda d: d.t.append(rows([9]), markers="m"),
    markers_empty_name=lambda d: d.t.append(rows([9]), markers={"": (None, 1)}),
    markers_int_name=lambda d: d.t.append(rows([9]), markers={5: (None, 1)}),
    markers_value_none=lambda d: d.t.append(rows([9]), markers={"m": None}),
    markers_value_three=lambda d: d.t.append(rows([9]), markers={"m": (None, 1, 2)}),
    markers_negative=lambda d: d.t.append(rows([9]), markers={"m": (None, -1)}),
    markers_backwards=lambda d: d.t.append(rows([9]), markers={"m": (5, 5)}),
    markers_bool=lambda d: d.t.append(rows([9]), markers={"m": (None, True)}),
    markers_float=lambda d: d.t.append(rows([9]), markers={"m": (None, 1.0)}),
    markers_str_read=lambda d: d.t.append(rows([9]), markers={"m": ("0", 1)}),
    markers_huge=lambda d: d.t.append(rows([9]), markers={"m": (None, 2**70)}),
    markers_stale_absent=lambda d: d.t.append(rows([9]), markers={"app": (None, 5)}),
    markers_stale_read=lambda d: d.t.append(rows([9]), markers={"app": (0, 5)}),
    pk_markers_bad=lambda d: d.pk.append(rows([9]), markers={"m": (None, -1)}),
    pk_wrong_type=lambda d: d.pk.append(with_column([9], "price", pa.array(["x"]))),
)
cases(
    "overwrite",
    C,
    partitions_true=lambda d: d.t.overwrite(rows([9]), partitions=True),
    partitions_list=lambda d: d.t.overwrite(rows([9]), partitions=["eu"]),
    dynamic_missing_required_column=lambda d: d.t.overwrite(
        rows([9]).drop_columns(["id"]), partitions="dynamic"
    ),
    txn_negative=lambda d: d.t.overwrite(rows([9]), txn=("app", -1)),
    schema_mode_bad=lambda d: d.t.overwrite(rows([9]), schema_mode="x"),
    wrong_type=lambda d: d.t.overwrite(with_column([9], "price", pa.array(["x"]))),
)

# --- a source that fails partway: its error, chained, and nothing committed ----------------------


class FailingStream:
    """An object with ``__arrow_c_stream__`` (as Polars, DuckDB and nanoarrow hand out) whose
    stream fails after its first batch."""

    def __init__(self, d: Doors) -> None:
        self.d = d

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return failing_reader(self.d).__arrow_c_stream__(requested_schema)


cases(
    "source_fails",
    cl.DataSourceError,
    write_table_reader=lambda d: cl.write_table(d.new, failing_reader(d)),
    write_table_generator=lambda d: cl.write_table(d.new, failing_generator(d)),
    append_reader=lambda d: d.t.append(failing_reader(d)),
    append_generator=lambda d: d.t.append(failing_generator(d)),
    append_stream=lambda d: d.t.append(FailingStream(d)),
    append_merge_schema=lambda d: d.t.append(failing_reader(d), schema_mode="merge"),
    append_with_txn=lambda d: d.t.append(failing_reader(d), txn=("app", 2)),
    pk_append_reader=lambda d: d.pk.append(failing_reader(d)),
    overwrite_reader=lambda d: d.t.overwrite(failing_reader(d)),
    overwrite_dynamic=lambda d: d.t.overwrite(failing_generator(d), partitions="dynamic"),
    pk_overwrite_reader=lambda d: d.pk.overwrite(failing_reader(d)),
    merge_reader=lambda d: d.t.merge(failing_reader(d), on=["id"]),
    pk_merge_reader=lambda d: d.pk.merge(failing_reader(d), on=["id"]),
)

# --- reads: columns, filters, versions ----------------------------------------------------------

cases(
    "columns",
    C,
    bytes=lambda d: d.t.to_arrow(columns=b"id"),
    bytes_item=lambda d: d.t.to_arrow(columns=[b"id"]),
    numpy=lambda d: d.t.to_arrow(columns=np.array(["id"])),
    empty_string=lambda d: d.t.to_arrow(columns=""),
    whitespace=lambda d: d.t.to_arrow(columns=[" id"]),
    case=lambda d: d.t.to_arrow(columns=["ID"]),
    mixed=lambda d: d.t.to_arrow(columns=("id", 1)),
    generator=lambda d: d.t.to_arrow(columns=(c for c in ["id"])),
    internal=lambda d: d.t.to_arrow(columns=["_change_type"]),
    pandas_index=lambda d: d.t.to_arrow(columns=pd.Index(["id"])),
    to_pandas_int=lambda d: d.t.to_pandas(columns=5),
    to_polars_dict=lambda d: d.t.to_polars(columns={"id": 1}),
    read_split_int=lambda d: d.t.read_split(d.t.plan_splits().splits[0], columns=5),
)
cases(
    "filter",
    F,
    divide_by_zero=lambda d: d.t.to_arrow(filter=pc.divide(pc.field("price"), 0) > 1),
    failing_cast=lambda d: d.t.to_arrow(filter=pc.field("name").cast(pa.int64()) > 1),
    invert_string=lambda d: d.t.to_arrow(filter=~pc.field("name")),
    field_position_out_of_range=lambda d: d.t.to_arrow(filter=pc.field(99) > 1),
    isin_strings_on_int=lambda d: d.t.to_arrow(filter=pc.field("id").isin(["a"])),
    ts_vs_naive_datetime=lambda d: d.t.to_arrow(
        filter=pc.field("ts") > datetime.datetime(2026, 1, 1)
    ),
    column_vs_column=lambda d: d.t.to_arrow(filter=pc.field("id") > pc.field("name")),
    and_not_boolean=lambda d: d.t.to_arrow(filter=(pc.field("id") > 1) & pc.field("name")),
    list_literal=lambda d: d.t.to_arrow(filter=pc.field("id") == pc.scalar([1, 2])),
    arrow_mask=lambda d: d.t.to_arrow(filter=pa.array([True, False, True, True])),
    pandas_mask=lambda d: d.t.to_arrow(filter=pd.Series([True])),
    polars_expression=lambda d: d.t.to_arrow(filter=pl.col("id") > 1),
    dnf_empty=lambda d: d.t.to_arrow(filter=[]),
    dnf_empty_group=lambda d: d.t.to_arrow(filter=[[]]),
    dnf_between=lambda d: d.t.to_arrow(filter=[("id", "between", (1, 2))]),
    dnf_like=lambda d: d.t.to_arrow(filter=[("name", "like", "n%")]),
    dnf_upper_in=lambda d: d.t.to_arrow(filter=[("id", "IN", [1])]),
    dnf_mixed_terms=lambda d: d.t.to_arrow(filter=[("id", "=", 1), "x"]),
    dnf_not_in_string=lambda d: d.t.to_arrow(filter=[("id", "not in", "abc")]),
    dnf_in_mixed_types=lambda d: d.t.to_arrow(filter=[("name", "in", ["a", 1])]),
    dnf_in_strings_on_int=lambda d: d.t.to_arrow(filter=[("id", "in", ["a", "b"])]),
    dnf_numpy_value=lambda d: d.t.to_arrow(filter=[("id", ">", np.array([1, 2]))]),
    dnf_ts_vs_string=lambda d: d.t.to_arrow(filter=[("ts", ">", "yesterday")]),
    dnf_string_vs_int=lambda d: d.t.to_arrow(filter=[("name", "=", 5)]),
    dnf_dict_value=lambda d: d.t.to_arrow(filter=[("id", "=", {"a": 1})]),
    dnf_bytes_column=lambda d: d.t.to_arrow(filter=[(b"id", "=", 1)]),
    dnf_op_none=lambda d: d.t.to_arrow(filter=[("id", None, 1)]),
    dnf_in_generator_of_objects=lambda d: d.t.to_arrow(filter=[("id", "in", (object(),))]),
    delete_divide_by_zero=lambda d: d.t.delete(pc.divide(pc.field("price"), 0) > 1),
    delete_failing_cast=lambda d: d.t.delete(pc.field("name").cast(pa.int64()) > 1),
    delete_isin_strings=lambda d: d.t.delete(pc.field("id").isin(["a"])),
    delete_string=lambda d: d.t.delete("DELETE FROM t WHERE id = 1"),
    delete_true=lambda d: d.t.delete(True),
    update_failing_cast=lambda d: d.t.update(pc.field("name").cast(pa.int64()) > 1, {"price": 1}),
    scan_divide_by_zero=lambda d: d.t.scan(filter=pc.divide(pc.field("price"), 0) > 1).read_all(),
    to_pandas_bad=lambda d: d.t.to_pandas(filter=pc.field("nope") > 1),
    to_polars_bad=lambda d: d.t.to_polars(filter=[("nope", "=", 1)]),
    read_split_failing_cast=lambda d: list(
        d.t.read_split(d.t.plan_splits().splits[0], filter=pc.field("name").cast(pa.int64()) > 1)
    ),
)
cases(
    "version",
    C,
    pandas_nat=lambda d: d.t.to_arrow(version=pd.NaT),
    pandas_timestamp_before=lambda d: d.t.to_arrow(version=pd.Timestamp("2000-01-01", tz="UTC")),
    year_1_plus_one=lambda d: d.t.to_arrow(version=datetime.datetime(1, 1, 1, tzinfo=PLUS_ONE)),
    iso_year_1_plus_one=lambda d: d.t.to_arrow(version="0001-01-01T00:00:00+01:00"),
    whitespace=lambda d: d.t.to_arrow(version="   "),
    time=lambda d: d.t.to_arrow(version=datetime.time(12)),
    timedelta=lambda d: d.t.to_arrow(version=datetime.timedelta(days=1)),
    complex=lambda d: d.t.to_arrow(version=1j),
    numpy_uint64_max=lambda d: d.t.to_arrow(version=np.uint64(2**64 - 1)),
    numpy_int8_negative=lambda d: d.t.to_arrow(version=np.int8(-1)),
    bytes=lambda d: d.t.to_arrow(version=b"1"),
    negative_huge=lambda d: d.t.to_arrow(version=-(2**70)),
    version_at_nat=lambda d: d.t.version_at(pd.NaT),
    version_at_bytes=lambda d: d.t.version_at(b"2026-01-01"),
    version_at_empty=lambda d: d.t.version_at(""),
    snapshot_nat=lambda d: d.t.snapshot(version=pd.NaT),
    count_rows_negative=lambda d: d.t.count_rows(version=-1),
    count_rows_huge=lambda d: d.t.count_rows(version=2**70),
    segments_str=lambda d: d.t.segments("x"),
    partitions_str=lambda d: d.t.partitions("latest"),
    partitions_huge=lambda d: d.t.partitions(2**70),
    state_bad_version=lambda d: d.t.state("s", version="x"),
    verify_huge=lambda d: d.t.verify(version=2**70),
    plan_splits_negative=lambda d: d.t.plan_splits(version=-1),
    to_pandas_negative=lambda d: d.t.to_pandas(version=-1),
    to_polars_str=lambda d: d.t.to_polars(version="x"),
)
cases(
    "history",
    E,
    numpy_zero=lambda d: d.t.history(np.int64(0)),
    negative_huge=lambda d: d.t.history(-(2**70)),
    decimal=lambda d: d.t.history(decimal.Decimal(2)),
    inf=lambda d: d.t.history(float("inf")),
)
cases(
    "changes",
    C,
    nat=lambda d: d.t.changes(pd.NaT),
    end_nat=lambda d: d.t.changes(0, pd.NaT),
    end_huge=lambda d: d.t.changes(0, 2**70),
    numpy_float=lambda d: d.t.changes(np.float64(0)),
    bytes=lambda d: d.t.changes(b"0"),
    datetimes_reversed=lambda d: d.t.changes(
        datetime.datetime(2100, 1, 1, tzinfo=UTC), datetime.datetime(2001, 1, 1, tzinfo=UTC)
    ),
    year_1_plus_one=lambda d: d.t.changes(datetime.datetime(1, 1, 1, tzinfo=PLUS_ONE), -1),
    end_time=lambda d: d.t.changes(0, datetime.time(1)),
)
cases(
    "transaction_version",
    E,
    bytes=lambda d: d.t.transaction_version(b"app"),
    tuple=lambda d: d.t.transaction_version(("app", 1)),
)
cases(
    "state",
    E,
    empty=lambda d: d.t.state(""),
    bytes=lambda d: d.t.state(b"s"),
)

# --- row-level changes -------------------------------------------------------------------------

cases(
    "update",
    C,
    set_series=lambda d: d.t.update(None, pd.Series({"price": 1})),
    set_empty_name=lambda d: d.t.update(None, {"": 1}),
    set_whitespace_name=lambda d: d.t.update(None, {" price": 1}),
    set_bytes_name=lambda d: d.t.update(None, {b"price": 1}),
    numpy_nan_into_int=lambda d: d.t.update(pc.field("id") == 1, {"price": np.float64("nan")}),
    inf_into_int=lambda d: d.t.update(pc.field("id") == 1, {"price": float("inf")}),
    float_too_big_for_int=lambda d: d.t.update(pc.field("id") == 1, {"price": 1e20}),
    decimal_fraction_into_int=lambda d: d.t.update(
        pc.field("id") == 1, {"price": decimal.Decimal("1.5")}
    ),
    decimal_huge_into_int=lambda d: d.t.update(
        pc.field("id") == 1, {"price": decimal.Decimal(10**30)}
    ),
    numpy_uint64_max_into_int=lambda d: d.t.update(
        pc.field("id") == 1, {"price": np.uint64(2**64 - 1)}
    ),
    arrow_array_into_int=lambda d: d.t.update(pc.field("id") == 1, {"price": pa.array([1])}),
    arrow_string_scalar=lambda d: d.t.update(pc.field("id") == 1, {"price": pa.scalar("x")}),
    callable_into_int=lambda d: d.t.update(pc.field("id") == 1, {"price": lambda row: 1}),
    bytes_into_string=lambda d: d.t.update(pc.field("id") == 1, {"name": b"\xff"}),
    int_into_ts=lambda d: d.t.update(pc.field("id") == 1, {"ts": 5}),
    bad_string_into_ts=lambda d: d.t.update(pc.field("id") == 1, {"ts": "not a date"}),
    time_into_ts=lambda d: d.t.update(pc.field("id") == 1, {"ts": datetime.time(1)}),
    expression_divide_by_zero=lambda d: d.t.update(None, {"price": pc.field("price") / 0}),
    expression_failing_cast=lambda d: d.t.update(
        None, {"price": pc.field("name").cast(pa.int64())}
    ),
    expression_field_position=lambda d: d.t.update(None, {"price": pc.field(99)}),
    null_key_in_pk=lambda d: d.pk.update(pc.field("id") == 1, {"id": None}),
    pk_null_key_expression=lambda d: d.pk.update(
        None, {"id": pc.if_else(pc.field("id") == 1, pa.scalar(None, pa.int64()), pc.field("id"))}
    ),
    filter_unknown=lambda d: d.t.update(pc.field("nope") == 1, {"price": 1}),
)
cases(
    "merge",
    C,
    on_bytes=lambda d: d.t.merge(rows([1]), on=[b"id"]),
    on_repeated=lambda d: d.t.merge(rows([1]), on=["id", "id"]),
    on_with_none=lambda d: d.t.merge(rows([1]), on=["id", None]),
    on_numpy=lambda d: d.t.merge(rows([1]), on=np.array(["id"])),
    on_empty_string=lambda d: d.t.merge(rows([1]), on=""),
    key_string_vs_int=lambda d: d.t.merge(pa.table({"id": ["1"]}), on=["id"]),
    key_fraction=lambda d: d.t.merge(pa.table({"id": [1.5]}), on=["id"]),
    key_null_in_non_nullable=lambda d: d.t.merge(
        pa.table({"id": pa.array([None], pa.int64()), "price": [1]}), on=["id"]
    ),
    source_zero_columns=lambda d: d.t.merge(pa.table({"x": [1]}).drop_columns(["x"]), on=["id"]),
    source_generator_of_ints=lambda d: d.t.merge(iter([5]), on=["id"]),
    source_internal_column=lambda d: d.t.merge(
        rows([1]).append_column("_row_position", pa.array([0])), on=["id"]
    ),
    source_duplicate_names=lambda d: d.t.merge(
        pa.Table.from_arrays([pa.array([1]), pa.array([1])], names=["id", "id"]), on=["id"]
    ),
    source_ts_wrong_type=lambda d: d.t.merge(pa.table({"id": [1], "ts": ["x"]}), on=["id"]),
    source_lazy_frame=lambda d: d.t.merge(pl.LazyFrame({"id": [1]}), on=["id"]),
    when_matched_bool=lambda d: d.t.merge(rows([1]), on=["id"], when_matched=True),
    when_not_matched_by_source_upper=lambda d: d.t.merge(
        rows([1]), on=["id"], when_not_matched_by_source="DELETE"
    ),
    when_not_matched_list=lambda d: d.t.merge(rows([1]), on=["id"], when_not_matched=["insert"]),
)

# --- properties, columns, restore --------------------------------------------------------------

cases(
    "set_properties",
    E,
    fraction=lambda d: d.t.set_properties({"checkpoint_interval": "5.0"}),
    huge=lambda d: d.t.set_properties({"checkpoint_interval": str(2**70)}),
    none_value=lambda d: d.t.set_properties({"checkpoint_interval": None}),
    empty_key=lambda d: d.t.set_properties({"": "x"}),
    user_int=lambda d: d.t.set_properties({"user.note": 5}),
    retention_huge=lambda d: d.t.set_properties({"deleted_data_retention": "1e400s"}),
    log_retention_negative=lambda d: d.t.set_properties({"log_retention": "-1d"}),
    flag_maybe=lambda d: d.t.set_properties({"auto_compaction": "maybe"}),
    hex=lambda d: d.t.set_properties({"blocklet_max_rows": "0x10"}),
    bytes_key=lambda d: d.t.set_properties({b"checkpoint_interval": "5"}),
    str=lambda d: d.t.set_properties("checkpoint_interval=5"),
)
cases(
    "unset_properties",
    E,
    str=lambda d: d.t.unset_properties("checkpoint_interval"),
    none_item=lambda d: d.t.unset_properties([None]),
    bytes_item=lambda d: d.t.unset_properties([b"checkpoint_interval"]),
    missing_ok_int=lambda d: d.t.unset_properties(["checkpoint_interval"], missing_ok=1),
)
cases(
    "add_columns",
    C,
    empty_schema=lambda d: d.t.add_columns(pa.schema([])),
    dictionary=lambda d: d.t.add_columns(pa.field("x", pa.dictionary(pa.int8(), pa.string()))),
    mixed_list=lambda d: d.t.add_columns([pa.field("x", pa.int8()), "y"]),
    schema_duplicate=lambda d: d.t.add_columns(pa.schema([("x", pa.int8()), ("x", pa.int16())])),
    internal_change_type=lambda d: d.t.add_columns(pa.field("_change_type", pa.string())),
    internal_commit_version=lambda d: d.t.add_columns(pa.field("_commit_version", pa.int64())),
    internal_row_position=lambda d: d.t.add_columns(pa.field("_carbonlite_row", pa.int64())),
    dict_of_types=lambda d: d.t.add_columns({"x": pa.int8()}),
    data_type=lambda d: d.t.add_columns(pa.int8()),
)
cases(
    "restore",
    C,
    nat=lambda d: d.t.restore(pd.NaT),
    numpy_negative=lambda d: d.t.restore(np.int64(-1)),
    bad_iso=lambda d: d.t.restore("2026-13-01"),
    list=lambda d: d.t.restore([0]),
    year_1_plus_one=lambda d: d.t.restore(datetime.datetime(1, 1, 1, tzinfo=PLUS_ONE)),
)

# --- maintenance ---------------------------------------------------------------------------------

cases(
    "compact",
    C,
    kind_upper=lambda d: d.t.compact("MINOR"),
    kind_int=lambda d: d.t.compact(5),
    custom_without_segments=lambda d: d.t.compact("custom"),
    custom_empty_segments=lambda d: d.t.compact("custom", segments=[]),
    custom_unknown_segment=lambda d: d.t.compact("custom", segments=["999"]),
    custom_repeated_segment=lambda d: d.t.compact("custom", segments=["0", "0"]),
    custom_bytes_segment=lambda d: d.t.compact("custom", segments=[b"0"]),
    custom_numpy_segments=lambda d: d.t.compact("custom", segments=np.array(["0"])),
    custom_empty_id=lambda d: d.t.compact("custom", segments=[""]),
    minor_with_segments=lambda d: d.t.compact("minor", segments=["0"]),
)
cases(
    "clean",
    E,
    negative_timedelta=lambda d: d.t.clean(datetime.timedelta(days=-1)),
    huge_int=lambda d: d.t.clean(2**1100),
    huge_string=lambda d: d.t.clean("1e400s"),
    empty_string=lambda d: d.t.clean(""),
    decimal_nan=lambda d: d.t.clean(decimal.Decimal("NaN")),
    complex=lambda d: d.t.clean(1j),
    numpy_nan=lambda d: d.t.clean(np.float64("nan")),
    dry_run_numpy=lambda d: d.t.clean(dry_run=np.bool_(True)),
    dry_run_none=lambda d: d.t.clean(dry_run=None),
)
cases(
    "recover",
    E,
    min_age_huge_int=lambda d: d.t.recover(min_age=2**1100),
    min_age_inf=lambda d: d.t.recover(min_age=float("inf")),
    min_age_negative_timedelta=lambda d: d.t.recover(min_age=datetime.timedelta(seconds=-1)),
    min_age_list=lambda d: d.t.recover(min_age=[1]),
    dry_run_str=lambda d: d.t.recover(dry_run="yes"),
)
cases(
    "publish",
    C,
    pandas_value=lambda d: d.t.publish({("eu",): 5.5}),
    value_wrong_schema=lambda d: d.t.publish({("eu",): pa.table({"x": [1]})}),
    value_wrong_type=lambda d: d.t.publish({("eu",): with_column([1], "price", pa.array(["x"]))}),
    key_none=lambda d: d.t.publish({None: rows([1])}),
    list_of_tables=lambda d: d.t.publish([rows([1])]),
    reader=lambda d: d.t.publish(failing_reader(d)),
    mode_upper=lambda d: d.t.publish(rows([1]), mode="SNAPSHOT"),
    state_str=lambda d: d.t.publish(rows([1]), state="s"),
    state_empty_name=lambda d: d.t.publish(rows([1]), state={"": pa.table({"a": [1]})}),
    state_pandas=lambda d: d.t.publish(rows([1]), state={"s": pd.DataFrame({"a": [1]})}),
    duplicate_names=lambda d: d.t.publish(
        pa.Table.from_arrays([pa.array(["eu"]), pa.array(["eu"])], names=["region", "region"])
    ),
)

# --- a closed handle at every door ---------------------------------------------------------------

cases(
    "closed",
    E,
    history=lambda d: closed(d).history(),
    segments=lambda d: closed(d).segments(),
    partitions=lambda d: closed(d).partitions(),
    snapshot_of_a_version=lambda d: closed(d).snapshot(0),
    version_at=lambda d: closed(d).version_at(0),
    count_rows_of_a_version=lambda d: closed(d).count_rows(version=1),
    to_arrow_of_a_version=lambda d: closed(d).to_arrow(version=1),
    arrow_stream=lambda d: pa.table(closed(d)),
    plan_splits=lambda d: closed(d).plan_splits(),
    changes=lambda d: closed(d).changes(0),
    transaction_version=lambda d: closed(d).transaction_version("app"),
    state=lambda d: closed(d).state("s"),
    delete=lambda d: closed(d).delete(pc.field("id") == 1),
    update=lambda d: closed(d).update(None, {"price": 1}),
    merge=lambda d: closed(d).merge(rows([1]), on=["id"]),
    overwrite=lambda d: closed(d).overwrite(rows([9])),
    publish=lambda d: closed(d).publish(rows([1])),
    add_columns=lambda d: closed(d).add_columns(pa.field("x", pa.int8())),
    set_properties=lambda d: closed(d).set_properties({"checkpoint_interval": "5"}),
    unset_properties=lambda d: closed(d).unset_properties(["x"], missing_ok=True),
    restore=lambda d: closed(d).restore(1),
    upgrade=lambda d: closed(d).upgrade(),
    compact=lambda d: closed(d).compact("major"),
    handoff=lambda d: closed(d).handoff(),
    finish_streaming=lambda d: closed(d).finish_streaming(),
    clean=lambda d: closed(d).clean(),
    recover=lambda d: closed(d).recover(),
    verify=lambda d: closed(d).verify(),
    refresh=lambda d: closed(d).refresh(),
)

# --- the DuckDB and Polars helpers ---------------------------------------------------------------

cases(
    "duckdb_source",
    C,
    none=lambda d: cl_duckdb.source(None),
    path=lambda d: cl_duckdb.source(d.t.path),
    negative_version=lambda d: cl_duckdb.source(d.t, version=-1),
    bad_version=lambda d: cl_duckdb.source(d.t, version="x"),
    closed=lambda d: cl_duckdb.source(closed(d)),
)
cases(
    "polars_scan",
    C,
    missing=lambda d: cl_polars.scan(d.new),
    file=lambda d: cl_polars.scan(d.file),
    int=lambda d: cl_polars.scan(5),
    none=lambda d: cl_polars.scan(None),
    bad_version=lambda d: cl_polars.scan(d.t, version="x"),
    negative_version=lambda d: cl_polars.scan(d.t.path, version=-1),
    storage_options_str=lambda d: cl_polars.scan(d.t.path, storage_options="x"),
    closed=lambda d: cl_polars.scan(closed(d)),
)

IDS = [name for name, _, _ in CASES]


def test_the_sweep_is_wide_and_new() -> None:
    from tests.test_api_doors import IDS as OLD_IDS

    assert len(CASES) >= 150
    assert len(set(IDS)) == len(IDS)
    assert not set(IDS) & set(OLD_IDS)


@pytest.mark.parametrize(("name", "call", "error"), CASES, ids=IDS)
def test_more_bad_input_raises_a_carbonlite_error_and_changes_nothing(
    doors: Doors, name: str, call: Case, error: type[cl.CarbonLiteError]
) -> None:
    assert_refused_and_unchanged(doors, name, call, error)


def test_a_failing_source_is_named_and_chained(doors: Doors) -> None:
    before = content(doors.t)
    with pytest.raises(cl.DataSourceError) as info:
        doors.t.append(failing_reader(doors))
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "RuntimeError: the source went away" in str(info.value)
    assert "after 1 batch" in str(info.value)
    assert content(doors.t) == before


def test_odd_input_that_is_valid_gets_the_right_answer(doors: Doors) -> None:
    """Inputs the sweep above might have refused but that mean something exact."""
    t = doors.t
    assert t.to_arrow(filter=pc.field("price") > decimal.Decimal("15.5")).num_rows == 3
    assert t.to_arrow(filter=pc.field(2) > 15).num_rows == 3  # column 2 of the table: price
    assert t.to_arrow(filter=pc.field("ts") > datetime.date(2026, 1, 1)).num_rows == 4
    assert t.to_arrow(version=datetime.datetime(9999, 12, 31, tzinfo=UTC)).num_rows == 4
    assert t.clean(2**40, dry_run=True).dry_run  # a long retention, and a whole number of s
    t.append(rows([9]), txn=("app", 2**63 - 1))  # the largest batch id a JVM reader takes
    assert t.transaction_version("app") == 2**63 - 1
    t.add_columns(pa.field("change_type", pa.string()))  # only the exact names are reserved
    assert "change_type" in t.changes(0).column_names
