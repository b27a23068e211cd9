"""Bloom filters through the engines (docs/FILTERS.md, "Bloom filters": Polars, DuckDB and
the Flight service plan through the same planner and get the same pruning; Spark's test is
tests/spark/test_bloom_spark.py, beside its session).

The table: 4,000 rows in 16 blocklets of 250, ``k`` a shuffle of the even numbers below
8,000 (so every blocklet's min/max spans almost all of them and cannot prune a lookup) and
``s`` its string; ``k`` and ``s`` have bloom filters. A lookup of an odd ``k`` in range is
absent: only the bloom filters can skip blocklets for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import carbonlite as cl
from carbonlite.reader.scan import TableScan

N = 4_000
BLOCKLET_ROWS = 250
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("s", pa.string())])
PRESENT = (0, 2, 1234, 7998)
ABSENT = (3001, 4001, 5555)


def make_data() -> pa.Table:
    k = np.random.default_rng(29).permutation(np.arange(0, 2 * N, 2, dtype=np.int64))
    return pa.table(
        {"id": np.arange(N, dtype=np.int64), "k": k, "s": [f"s{v}" for v in k]}, schema=SCHEMA
    )


def make_table(path: Path | str) -> cl.Table:
    t = cl.create_table(
        path,
        SCHEMA,
        properties={"blocklet_max_rows": str(BLOCKLET_ROWS), "bloom_filter_columns": "k,s"},
    )
    t.append(make_data())
    return t


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> cl.Table:
    return make_table(tmp_path_factory.mktemp("bloom-engines") / "lookups")


@pytest.fixture(scope="module")
def everything(table: cl.Table) -> pa.Table:
    return table.to_arrow()


def ids_where(everything: pa.Table, column: str, value: Any) -> list[int]:
    return sorted(everything.filter(pc.field(column) == value).column("id").to_pylist())


def test_only_bloom_filters_can_prune(table: cl.Table) -> None:
    for v in ABSENT:
        plan = table.plan_splits(filter=pc.field("k") == v)
        assert plan.blocklets_total == N // BLOCKLET_ROWS
        assert plan.blocklets_pruned_by_stats == 0, v
        assert plan.blocklets_pruned_by_bloom >= plan.blocklets_total - 1, plan
    plan = table.plan_splits(filter=pc.field("k") == PRESENT[2])
    assert plan.blocklets_selected >= 1 and plan.blocklets_pruned_by_bloom >= 13


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[TableScan]:
    """Every ``TableScan`` made while the test runs (what an engine's plan was)."""
    made: list[TableScan] = []
    original = cl.Table.scan

    def recording(self: cl.Table, **kwargs: Any) -> TableScan:
        scan = original(self, **kwargs)
        made.append(scan)
        return scan

    monkeypatch.setattr(cl.Table, "scan", recording)
    return made


# --- Polars -----------------------------------------------------------------------------------


def test_polars_lookups_are_exact_and_pruned(
    table: cl.Table, everything: pa.Table, scans: list[TableScan]
) -> None:
    pl = pytest.importorskip("polars")
    import carbonlite.polars as cl_polars

    frame = cl_polars.scan(table.path)
    for v in (*PRESENT, *ABSENT):
        got = frame.filter(pl.col("k") == v).select("id").collect()
        assert sorted(got["id"].to_list()) == ids_where(everything, "k", v), v
    for v in ("s1234", "s1235", "nobody"):
        got = frame.filter(pl.col("s") == v).collect()
        assert sorted(got["id"].to_list()) == ids_where(everything, "s", v), v
    got = frame.filter(pl.col("k").is_in([PRESENT[1], ABSENT[1]])).collect()
    assert sorted(got["id"].to_list()) == ids_where(everything, "k", PRESENT[1])
    scans.clear()
    assert frame.filter(pl.col("k") == ABSENT[1]).collect().height == 0
    assert scans, "Polars did not scan through carbonlite"
    plan = scans[-1].plan
    assert plan.blocklets_pruned_by_bloom >= plan.blocklets_total - 1, plan
    assert plan.blocklets_pruned_by_stats == 0


# --- DuckDB -----------------------------------------------------------------------------------


def test_duckdb_lookups_are_exact_and_pruned(table: cl.Table, everything: pa.Table) -> None:
    duckdb = pytest.importorskip("duckdb")
    import carbonlite.duckdb as cl_duckdb

    con = duckdb.connect()
    source = cl_duckdb.source(table)
    con.register("lookups", source)
    for v in (*PRESENT, *ABSENT):
        got = con.sql(f"SELECT id FROM lookups WHERE k = {v}").fetchall()
        assert sorted(r[0] for r in got) == ids_where(everything, "k", v), v
    got = con.sql("SELECT id FROM lookups WHERE s = 's1234' OR s = 'nobody'").fetchall()
    assert sorted(r[0] for r in got) == ids_where(everything, "s", "s1234")
    got = con.sql(f"SELECT id FROM lookups WHERE k IN ({PRESENT[3]}, {ABSENT[0]})").fetchall()
    assert sorted(r[0] for r in got) == ids_where(everything, "k", PRESENT[3])
    if not cl_duckdb.pushdown_supported():
        pytest.skip("this DuckDB has no scan-source protocol: nothing is pushed down")
    assert con.sql(f"SELECT count(*) FROM lookups WHERE k = {ABSENT[2]}").fetchall() == [(0,)]
    plan = source.last_scan.plan
    assert plan.blocklets_pruned_by_bloom >= plan.blocklets_total - 1, plan
    assert plan.blocklets_pruned_by_stats == 0


# --- the Flight service -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def service_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    flight = pytest.importorskip("pyarrow.flight")
    from tests.support.flight_service import ServiceProcess

    root = tmp_path_factory.mktemp("bloom-serve")
    make_table(root / "lookups")
    with ServiceProcess(str(root)) as service:
        yield flight, service.client()
        service.terminate()


def test_flight_info_of_a_lookup_names_less_than_of_the_table(service_root: Any) -> None:
    flight, client = service_root

    def info(command: dict[str, Any]) -> Any:
        return client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)))

    def rows(got: Any) -> pa.Table:
        return pa.concat_tables(client.do_get(e.ticket).read_all() for e in got.endpoints)

    whole = info({"table": "lookups"})
    absent = info({"table": "lookups", "filter": [["k", "=", ABSENT[1]]]})
    present = info({"table": "lookups", "filter": [["k", "=", PRESENT[2]]]})
    assert whole.total_records == N
    # (the data and the hash are fixed: no false positive for this value, so no split at all)
    assert len(absent.endpoints) < len(whole.endpoints), (absent.endpoints, whole.endpoints)
    assert absent.total_bytes <= whole.total_bytes // 8, (absent, whole)
    assert absent.total_records <= BLOCKLET_ROWS  # at most one false positive's blocklet
    assert present.total_bytes <= whole.total_bytes // 4
    assert present.total_records <= 2 * BLOCKLET_ROWS
    if absent.endpoints:
        assert rows(absent).num_rows == 0
    got = rows(present)
    assert got.column("k").to_pylist() == [PRESENT[2]]
