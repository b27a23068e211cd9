"""The Flight service across schema changes made by another writer while it runs: a put
under a renamed or dropped column's name is refused naming the change and its version, and
writes nothing; puts taken before the change are read and committed under the present
names; after a widening older-typed puts are cast up; after an added column with a default,
puts without it get the default; reads (GetFlightInfo, DoGet) see the present schema and
filter a renamed column."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import carbonlite as cl
from tests.support.flight_service import ServiceProcess, put, read_all

SCHEMA = pa.schema([("id", pa.int64()), ("b", pa.int32()), ("gone", pa.string())])
SLOW = ("--flush-interval", "3600", "--flush-rows", "100000000")
"""Every put stays in memory (and the log) until SIGTERM."""


def _rows(ids: list[int], **columns: object) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), **columns})  # type: ignore[arg-type]


def _by_id(table: pa.Table) -> list[dict[str, object]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])  # type: ignore[arg-type, return-value]


@pytest.fixture
def root(tmp_path: Path) -> str:
    cl.create_table(tmp_path / "t", SCHEMA)
    return str(tmp_path)


def test_puts_under_a_renamed_or_dropped_name_are_refused_earlier_ones_kept(root: str) -> None:
    table = cl.open_table(os.path.join(root, "t"))
    with ServiceProcess(root, *SLOW) as service:
        client = service.client()
        taken = _rows([1], b=pa.array([10], pa.int32()), gone=["x"])
        assert put(client, "t", "p", 0, taken)["skipped"] is False
        renamed = table.rename_column("b", "c").version
        dropped = table.drop_columns("gone").version
        old = _rows([2], b=pa.array([20], pa.int32()))
        with pytest.raises(
            flight.FlightServerError,
            match=rf"schema mismatch: .*column 'b' was renamed to 'c' at version {renamed}",
        ) as refused:
            put(client, "t", "p", 1, old)
        assert json.loads(refused.value.extra_info) == {
            "kind": "invalid",
            "error": "SchemaMismatchError",
        }
        with pytest.raises(
            flight.FlightServerError, match=rf"column 'gone' was dropped at version {dropped}"
        ):
            put(client, "t", "p", 1, _rows([3], c=pa.array([30], pa.int32()), gone=["y"]))
        # the refused puts wrote nothing: the same sequence is free for the next one
        assert (
            put(client, "t", "p", 1, _rows([4], c=pa.array([40], pa.int32())))["skipped"] is False
        )
        # the put taken before the changes reads under the present names
        info = client.get_flight_info(flight.FlightDescriptor.for_path("t"))
        assert info.schema.names == ["id", "c"]
        got = read_all(client, flight.FlightDescriptor.for_path("t"))
        assert _by_id(got) == [{"id": 1, "c": 10}, {"id": 4, "c": 40}]
        command = {"table": "t", "filter": [["c", "<", 20]]}  # on rows still in memory
        memory = read_all(client, flight.FlightDescriptor.for_command(json.dumps(command)))
        assert _by_id(memory) == [{"id": 1, "c": 10}]
        assert service.terminate() == 0  # flushes: the earlier put is not stuck
    assert not any("flush of table" in line and "failed" in line for line in service.stderr)
    assert _by_id(table.refresh().to_arrow()) == [{"id": 1, "c": 10}, {"id": 4, "c": 40}]
    assert table.transaction_version("flight:p") == 1


def test_widened_and_defaulted_columns_and_reads_after_a_rename(root: str) -> None:
    table = cl.open_table(os.path.join(root, "t"))
    table.append(_rows([0], b=pa.array([0], pa.int32()), gone=["z"]))
    with ServiceProcess(root, "--flush-interval", "0.2") as service:
        client = service.client()
        table.rename_column("b", "c")
        table.widen_column("c", pa.int64())
        table.add_columns(pa.field("n", pa.int64()), defaults={"n": 7})
        # an int32 'c' (the older type) is cast up; a put without 'n' gets its default
        put(client, "t", "p", 0, _rows([1], c=pa.array([1], pa.int32()), gone=["a"]))
        put(client, "t", "p", 1, _rows([2], c=pa.array([2**40], pa.int64()), n=[5]))
        want = [
            {"id": 0, "c": 0, "gone": "z", "n": 7},
            {"id": 1, "c": 1, "gone": "a", "n": 7},
            {"id": 2, "c": 2**40, "gone": None, "n": 5},
        ]
        info = client.get_flight_info(flight.FlightDescriptor.for_path("t"))
        assert info.schema == pa.schema(
            [("id", pa.int64()), ("c", pa.int64()), ("gone", pa.string()), ("n", pa.int64())]
        )
        assert _by_id(read_all(client, flight.FlightDescriptor.for_path("t"))) == want
        command = {"table": "t", "columns": ["id", "c"], "filter": [["c", ">=", 1]]}
        filtered = read_all(client, flight.FlightDescriptor.for_command(json.dumps(command)))
        assert _by_id(filtered) == [{"id": 1, "c": 1}, {"id": 2, "c": 2**40}]
        assert service.terminate() == 0
    assert _by_id(table.refresh().to_arrow()) == want
