"""A Spark batch read of a table while ``carbonlite serve`` writes into it: every read sees
only committed data, each put whole or not at all (never part of a flush)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from tests.support.flight_service import ServiceProcess, put

SCHEMA = pa.schema([("producer", pa.string()), ("seq", pa.int64()), ("n", pa.int64())])
ROWS = 40


@pytest.mark.slow  # a service process and Spark together: the slow tier
def test_spark_reads_only_whole_flushes_while_the_service_writes(
    spark: Any, tmp_path: Path
) -> None:
    path = tmp_path / "events"
    cl.create_table(path, SCHEMA)
    acked: list[tuple[str, int]] = []
    done = threading.Event()
    errors: list[BaseException] = []
    with ServiceProcess(str(tmp_path), "--flush-interval", "0.05") as service:

        def produce(name: str) -> None:
            try:
                client = service.client()
                seq = 0
                while not done.is_set():
                    batch = pa.table(
                        {"producer": [name] * ROWS, "seq": [seq] * ROWS, "n": list(range(ROWS))},
                        schema=SCHEMA,
                    )
                    assert put(client, "events", name, seq, batch)["skipped"] is False
                    acked.append((name, seq))
                    seq += 1
            except BaseException as exc:
                errors.append(exc)

        producers = [threading.Thread(target=produce, args=(f"p{i}",)) for i in range(3)]
        for t in producers:
            t.start()
        reads = []
        try:
            for _ in range(6):
                before = set(acked)
                got = (
                    spark.read.format("carbonlite")
                    .load(str(path))
                    .groupBy("producer", "seq")
                    .count()
                    .collect()
                )
                after = set(acked)
                counts = {(r["producer"], r["seq"]): r["count"] for r in got}
                partial = {k: n for k, n in counts.items() if n != ROWS}
                assert not partial, f"a read saw part of a put: {partial}"
                unacked = set(counts) - after
                assert not unacked, f"a read saw puts never acknowledged: {sorted(unacked)[:5]}"
                reads.append((len(before), len(counts)))
        finally:
            done.set()
            for t in producers:
                t.join(60)
        assert not errors, errors
        assert service.terminate() == 0
    assert any(n > 0 for _, n in reads), f"no read saw a flush: {reads}"
    final = cl.open_table(path).to_arrow()
    assert final.num_rows == len(acked) * ROWS
