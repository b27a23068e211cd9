"""Flight SQL's metadata calls through the ADBC driver (``adbc_get_objects`` at every depth,
``adbc_get_table_schema``, table types, ``adbc_get_info``) and plain Flight calls
(``GetPrimaryKeys``, ``GetXdbcTypeInfo``, which the ADBC driver's API does not reach), their
result schemas exactly as FlightSql.proto gives them, and ``UNIMPLEMENTED`` for what the
service does not answer."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import carbonlite as cl
from carbonlite.serve.flight_sql.protocol import (
    TYPE_URL_PREFIX,
    CommandGetCatalogs,
    CommandGetDbSchemas,
    CommandGetPrimaryKeys,
    CommandGetSqlInfo,
    CommandGetTables,
    CommandGetTableTypes,
    CommandGetXdbcTypeInfo,
    Message,
    encode_any,
)
from tests.support.flight_sql import EVENTS, SALES, adbc_connect, make_tables, sql_service

adbc_dbapi = pytest.importorskip("adbc_driver_flightsql.dbapi")

STRING = pa.utf8()


@pytest.fixture
def root(tmp_path: Path) -> str:
    make_tables(str(tmp_path))
    cl.create_table(tmp_path / "a" / "b" / "deep", pa.schema([("x", pa.int32())]))
    return str(tmp_path)


def raw_any(name: str, value: bytes = b"") -> bytes:
    """An ``Any`` of Flight SQL message ``name`` (one the service has no class for)."""
    url = (TYPE_URL_PREFIX + name).encode()
    return b"\x0a" + bytes([len(url)]) + url + b"\x12" + bytes([len(value)]) + value


def fetch(client: flight.FlightClient, message: Message) -> tuple[pa.Schema, pa.Table]:
    info = client.get_flight_info(flight.FlightDescriptor.for_command(encode_any(message)))
    parts = [client.do_get(e.ticket).read_all() for e in info.endpoints]
    return info.schema, pa.concat_tables(parts)


def tables_of(objects: list[dict]) -> dict[str, list[str]]:
    """``{schema: [table, ...]}`` of an ``adbc_get_objects`` answer's one catalog."""
    [catalog] = objects
    assert catalog["catalog_name"] == "carbonlite"
    return {
        s["db_schema_name"]: sorted(t["table_name"] for t in (s["db_schema_tables"] or []))
        for s in catalog["catalog_db_schemas"]
    }


def test_get_objects_at_every_depth(root: str) -> None:
    with sql_service(root) as service, adbc_connect(service) as conn:
        catalogs = conn.adbc_get_objects(depth="catalogs").read_all().to_pylist()
        assert [c["catalog_name"] for c in catalogs] == ["carbonlite"]

        schemas = conn.adbc_get_objects(depth="db_schemas").read_all().to_pylist()
        names = [s["db_schema_name"] for s in schemas[0]["catalog_db_schemas"]]
        assert names == ["a/b", "main", "sales"]

        tables = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        assert tables_of(tables) == {"a/b": ["deep"], "main": ["events"], "sales": ["eu", "us"]}
        [catalog] = tables
        for schema in catalog["catalog_db_schemas"]:
            for table in schema["db_schema_tables"]:
                assert table["table_type"] == "TABLE" and table["table_columns"] is None

        for depth in ("columns", "all"):
            everything = conn.adbc_get_objects(depth=depth).read_all().to_pylist()
            columns = {
                (s["db_schema_name"], t["table_name"]): [
                    (c["column_name"], c["ordinal_position"]) for c in t["table_columns"]
                ]
                for s in everything[0]["catalog_db_schemas"]
                for t in s["db_schema_tables"]
            }
            assert columns[("main", "events")] == [(n, i + 1) for i, n in enumerate(EVENTS.names)]
            assert columns[("sales", "us")] == [(n, i + 1) for i, n in enumerate(SALES.names)]
            assert columns[("a/b", "deep")] == [("x", 1)]


def test_get_objects_filters(root: str) -> None:
    with sql_service(root) as service, adbc_connect(service) as conn:
        found = conn.adbc_get_objects(
            depth="tables", db_schema_filter="sal%", table_name_filter="e_"
        ).read_all()
        assert tables_of(found.to_pylist()) == {"sales": ["eu"]}
        none = conn.adbc_get_objects(depth="tables", catalog_filter="elsewhere").read_all()
        assert none.num_rows == 0
        views = conn.adbc_get_objects(depth="tables", table_types_filter=["VIEW"]).read_all()
        assert all(not t for t in tables_of(views.to_pylist()).values())


def test_table_schema_and_table_types(root: str) -> None:
    with sql_service(root) as service, adbc_connect(service) as conn:
        assert conn.adbc_get_table_schema("eu", db_schema_filter="sales") == SALES
        assert conn.adbc_get_table_schema("events") == EVENTS
        assert conn.adbc_get_table_types() == ["TABLE"]
        info = conn.adbc_get_info()
        assert info["vendor_name"] == "CarbonLite"
        assert info["vendor_arrow_version"] == pa.__version__
        # the names it lists are the names SQL reads
        with conn.cursor() as cur:
            cur.execute('SELECT count(*) FROM carbonlite."a/b".deep')
            assert cur.fetchall() == [(0,)]


def test_metadata_schemas_are_exactly_the_specs(root: str) -> None:
    expected = {
        "catalogs": pa.schema([pa.field("catalog_name", STRING, nullable=False)]),
        "schemas": pa.schema(
            [pa.field("catalog_name", STRING), pa.field("db_schema_name", STRING, False)]
        ),
        "tables": pa.schema(
            [
                pa.field("catalog_name", STRING),
                pa.field("db_schema_name", STRING),
                pa.field("table_name", STRING, False),
                pa.field("table_type", STRING, False),
                pa.field("table_schema", pa.binary(), False),
            ]
        ),
        "types": pa.schema([pa.field("table_type", STRING, False)]),
    }
    with sql_service(root) as service:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        for key, message in (
            ("catalogs", CommandGetCatalogs()),
            ("schemas", CommandGetDbSchemas()),
            ("tables", CommandGetTables(include_schema=True)),
            ("types", CommandGetTableTypes()),
        ):
            schema, rows = fetch(client, message)
            assert schema == expected[key] and rows.schema == expected[key], key
        _, tables = fetch(
            client, CommandGetTables(db_schema_filter_pattern="main", include_schema=True)
        )
        assert tables["table_name"].to_pylist() == ["events"]
        assert pa.ipc.read_schema(pa.py_buffer(tables["table_schema"][0].as_py())) == EVENTS
        plain, _ = fetch(client, CommandGetTables())
        assert plain.names == ["catalog_name", "db_schema_name", "table_name", "table_type"]

        schema, info = fetch(client, CommandGetSqlInfo((0, 3, 504, 99999)))
        assert schema.field("info_name") == pa.field("info_name", pa.uint32(), nullable=False)
        union = schema.field("value").type
        assert [union.field(i).name for i in range(union.num_fields)] == [
            "string_value",
            "bool_value",
            "bigint_value",
            "int32_bitmask",
            "string_list",
            "int32_to_int32_list_map",
        ]
        assert info["info_name"].to_pylist() == [0, 3, 504]  # an unknown code is left out
        assert info["value"].to_pylist() == ["CarbonLite", True, '"']


def test_what_is_not_supported_answers_unimplemented(root: str) -> None:
    with sql_service(root) as service:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        for name in (
            "CommandGetExportedKeys",
            "CommandGetImportedKeys",
            "CommandGetCrossReference",
        ):
            descriptor = flight.FlightDescriptor.for_command(raw_any(name))
            with pytest.raises(pa.ArrowNotImplementedError, match=f"{name} is not supported"):
                client.get_flight_info(descriptor)
        for action in ("BeginTransaction", "CancelFlightInfo", "CloseSession"):
            with pytest.raises(pa.ArrowNotImplementedError, match=f"'{action}' is not supported"):
                list(client.do_action(flight.Action(action, b"")))
        update = flight.FlightDescriptor.for_command(raw_any("CommandStatementUpdate"))
        writer, _ = client.do_put(update, pa.schema([("a", pa.int64())]))
        with pytest.raises(pa.ArrowNotImplementedError, match=r"read-only\. Write rows with DoPut"):
            writer.write_table(pa.table({"a": [1]}))
            writer.close()
        # the service's own unknown actions are still its own error
        with pytest.raises(flight.FlightServerError, match="unknown action"):
            list(client.do_action(flight.Action("nope", b"")))


def test_ingest_through_adbc_is_refused_naming_doput(root: str) -> None:
    with sql_service(root) as service, adbc_connect(service) as conn:
        with conn.cursor() as cur, pytest.raises(adbc_dbapi.Error, match="DoPut"):
            cur.adbc_ingest("events", pa.table({"k": [1]}), mode="append")
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM events")
            assert cur.fetchall() == [(3000,)]
    assert cl.open_table(os.path.join(root, "events")).count_rows() == 3000


KEYED = pa.schema([("region", pa.string()), ("id", pa.int64()), ("v", pa.float64())])


def test_primary_keys_in_the_specs_schema(root: str) -> None:
    """Key columns in key order (not the schema's), for primary-key tables only, filtered by
    exact catalog, schema and table names."""
    cl.create_table(os.path.join(root, "keyed"), KEYED, primary_key=["id", "region"])
    cl.create_table(os.path.join(root, "sales", "keyed"), KEYED, primary_key=["region"])
    expected = pa.schema(
        [
            pa.field("catalog_name", STRING),
            pa.field("db_schema_name", STRING),
            pa.field("table_name", STRING, False),
            pa.field("column_name", STRING, False),
            pa.field("key_name", STRING),
            pa.field("key_sequence", pa.int32(), False),
        ]
    )
    with sql_service(root) as service:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        schema, rows = fetch(client, CommandGetPrimaryKeys(table="keyed"))
        assert schema == expected and rows.schema == expected
        assert rows.to_pylist() == [
            {
                "catalog_name": "carbonlite",
                "db_schema_name": "main",
                "table_name": "keyed",
                "column_name": "id",
                "key_name": None,
                "key_sequence": 1,
            },
            {
                "catalog_name": "carbonlite",
                "db_schema_name": "main",
                "table_name": "keyed",
                "column_name": "region",
                "key_name": None,
                "key_sequence": 2,
            },
            {
                "catalog_name": "carbonlite",
                "db_schema_name": "sales",
                "table_name": "keyed",
                "column_name": "region",
                "key_name": None,
                "key_sequence": 1,
            },
        ]
        _, sales = fetch(client, CommandGetPrimaryKeys("carbonlite", "sales", "keyed"))
        assert sales["column_name"].to_pylist() == ["region"]
        for no_keys in (
            CommandGetPrimaryKeys(table="events"),  # not a primary-key table
            CommandGetPrimaryKeys("elsewhere", None, "keyed"),
            CommandGetPrimaryKeys(None, "a/b", "keyed"),
            CommandGetPrimaryKeys(table="kEyed"),  # an exact name, not a pattern
        ):
            schema, rows = fetch(client, no_keys)
            assert schema == expected and rows.num_rows == 0, no_keys
        assert (
            client.get_schema(
                flight.FlightDescriptor.for_command(
                    encode_any(CommandGetPrimaryKeys(table="keyed"))
                )
            ).schema
            == expected
        )


XDBC_SCHEMA = pa.schema(
    [
        pa.field("type_name", STRING, False),
        pa.field("data_type", pa.int32(), False),
        pa.field("column_size", pa.int32()),
        pa.field("literal_prefix", STRING),
        pa.field("literal_suffix", STRING),
        pa.field("create_params", pa.list_(pa.field("item", STRING, False))),
        pa.field("nullable", pa.int32(), False),
        pa.field("case_sensitive", pa.bool_(), False),
        pa.field("searchable", pa.int32(), False),
        pa.field("unsigned_attribute", pa.bool_()),
        pa.field("fixed_prec_scale", pa.bool_(), False),
        pa.field("auto_increment", pa.bool_()),
        pa.field("local_type_name", STRING),
        pa.field("minimum_scale", pa.int32()),
        pa.field("maximum_scale", pa.int32()),
        pa.field("sql_data_type", pa.int32(), False),
        pa.field("datetime_subcode", pa.int32()),
        pa.field("num_prec_radix", pa.int32()),
        pa.field("interval_precision", pa.int32()),
    ]
)
"""GetXdbcTypeInfo's result schema, written out from FlightSql.proto."""

COLUMN_TYPES = pa.schema(
    [
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("i64", pa.int64()),
        ("u8", pa.uint8()),
        ("u16", pa.uint16()),
        ("u32", pa.uint32()),
        ("u64", pa.uint64()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("b", pa.bool_()),
        ("s", pa.string()),
        ("ls", pa.large_string()),
        ("bin", pa.binary()),
        ("fbin", pa.binary(4)),
        ("dec", pa.decimal128(10, 2)),
        ("d32", pa.date32()),
        ("d64", pa.date64()),
        ("ts_s", pa.timestamp("s")),
        ("ts_ms", pa.timestamp("ms")),
        ("ts_us", pa.timestamp("us")),
        ("ts_ns", pa.timestamp("ns")),
        ("tz_us", pa.timestamp("us", "UTC")),
        ("tz_ns", pa.timestamp("ns", "UTC")),
        ("t32", pa.time32("ms")),
        ("t64", pa.time64("ns")),
        ("dur", pa.duration("us")),
        ("nul", pa.null()),
        ("lst", pa.list_(pa.int32())),
        ("fl", pa.list_(pa.int8(), 3)),
        ("mp", pa.map_(pa.string(), pa.int64())),
        ("st", pa.struct([("a", pa.int32())])),
    ]
)
"""A column of every CarbonLite column type DuckDB reads."""


def base_type(duckdb_type: str) -> str:
    """``DECIMAL(10,2)`` -> ``DECIMAL``, ``INTEGER[]`` -> ``LIST``, ``TINYINT[3]`` ->
    ``ARRAY``, ``"NULL"`` -> ``NULL``."""
    if duckdb_type.endswith("[]"):
        return "LIST"
    if duckdb_type.endswith("]"):
        return "ARRAY"
    return duckdb_type.split("(")[0].strip('"')


def test_xdbc_type_info_covers_every_type_a_column_is_given(root: str) -> None:
    cl.create_table(os.path.join(root, "typed"), COLUMN_TYPES)
    with sql_service(root) as service:
        client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
        schema, info = fetch(client, CommandGetXdbcTypeInfo())
        assert schema == XDBC_SCHEMA and info.schema == XDBC_SCHEMA
        names = info["type_name"].to_pylist()
        assert len(names) == len(set(names))
        order = list(zip(info["data_type"].to_pylist(), names, strict=True))
        assert order == sorted(order)  # by data_type, then type_name, as the spec asks

        typeof = ", ".join(f"typeof({n}) AS {n}" for n in COLUMN_TYPES.names)
        with adbc_connect(service) as conn, conn.cursor() as cur:
            # the table is empty: one row of NULLs of its columns' types
            cur.execute(f"SELECT {typeof} FROM (SELECT NULL) LEFT JOIN typed ON true")
            [row] = cur.fetch_arrow_table().to_pylist()
        missing = {c: t for c, t in row.items() if base_type(t) not in names}
        assert not missing, missing
        assert {base_type(t) for t in row.values()} >= {"UBIGINT", "TIMESTAMP_NS", "MAP"}

        _, bigints = fetch(client, CommandGetXdbcTypeInfo(-5))  # XDBC_BIGINT
        assert bigints["type_name"].to_pylist() == ["BIGINT", "UBIGINT"]
        assert bigints["unsigned_attribute"].to_pylist() == [False, True]
        _, times = fetch(client, CommandGetXdbcTypeInfo(93))  # XDBC_TIMESTAMP
        assert set(times["sql_data_type"].to_pylist()) == {9}  # XDBC_DATETIME
        assert fetch(client, CommandGetXdbcTypeInfo(12345))[1].num_rows == 0
