"""The demo pipeline behind ``carbonlite demo``: the invoice-style streaming job users write.

1. generate event files (parquet), 2. stream them into a CarbonLite table with
``trigger(availableNow=True)`` and ``maxFilesPerTrigger``, 3. read the table back with a
filter (pruned by min/max), 4. stream it out again with ``readStream`` into a second table
(a complete-mode aggregation), 5. show the table's history and segments.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from carbonlite.spark import local_session

__all__ = ["DemoReport", "event_table", "run_demo"]

EVENT_KINDS = ("click", "view", "purchase", "signup", "logout", "search", "share", "like")
DAY_START = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def event_table(rows: int, seed: int = 0, *, start: datetime.datetime = DAY_START) -> pa.Table:
    """``rows`` events of one day, in time order: id, ts, user, kind, value, agent."""
    rng = np.random.default_rng(seed)
    start_us = int(start.timestamp() * 1_000_000)
    ts = start_us + np.sort(rng.integers(0, 86_400_000_000, rows))
    kinds = np.array(EVENT_KINDS)[rng.integers(0, len(EVENT_KINDS), rows)]
    agents = np.char.add("user-agent/", np.char.mod("%029x", rng.integers(0, 2**63, rows)))
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "user": pa.array(rng.integers(0, 10_000, rows).astype(np.int32)),
            "kind": pa.array(kinds.tolist(), pa.string()),
            "value": pa.array(rng.normal(100.0, 25.0, rows)),
            "agent": pa.array(agents.tolist(), pa.string()),
        }
    )


@dataclass
class DemoReport:
    directory: str
    steps: list[tuple[str, float]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


@contextmanager
def _step(report: DemoReport, say: Callable[[str], None], title: str) -> Iterator[None]:
    say(f"[bold]{title}[/bold] ...")
    start = time.perf_counter()
    yield
    seconds = time.perf_counter() - start
    report.steps.append((title, seconds))
    say(f"    done in {seconds:.1f} s")


def run_demo(
    directory: str,
    rows: int,
    *,
    files: int = 10,
    say: Callable[[str], None] = print,
    master: str = "local[2]",
) -> DemoReport:
    """Run the whole pipeline in ``directory`` and return what it did."""
    import carbonlite as cl

    report = DemoReport(directory)
    source = os.path.join(directory, "source")
    events = os.path.join(directory, "events")
    counts = os.path.join(directory, "kind_counts")
    checkpoints = os.path.join(directory, "_checkpoints")
    os.makedirs(source, exist_ok=True)

    with _step(report, say, f"1. generate {rows:,} events in {files} parquet files"):
        table = event_table(rows)
        per_file = -(-rows // files)
        for i in range(files):
            pq.write_table(
                table.slice(i * per_file, per_file), os.path.join(source, f"events-{i:03d}.parquet")
            )

    with _step(report, say, "2. start Spark (local) and register the carbonlite source"):
        spark = local_session(master, app_name="carbonlite-demo")

    with _step(
        report,
        say,
        "3. stream the files into a CarbonLite table (availableNow, maxFilesPerTrigger=1)",
    ):
        stream = (
            spark.readStream.schema(_ddl(table.schema))
            .option("maxFilesPerTrigger", 1)
            .parquet(source)
        )
        query = (
            stream.writeStream.format("carbonlite")
            .option("checkpointLocation", os.path.join(checkpoints, "ingest"))
            .option("sortColumns", "ts")
            .trigger(availableNow=True)
            .start(events)
        )
        query.awaitTermination()
        t = cl.open_table(events)
        report.facts["ingested_rows"] = t.count_rows()
        report.facts["micro_batches"] = len(query.recentProgress)
        report.facts["commits"] = t.version
        say(
            f"    {t.count_rows():,} rows in {t.version} commits from {len(query.recentProgress)} micro-batches"
        )

    low = DAY_START + datetime.timedelta(hours=12)
    high = low + datetime.timedelta(minutes=15)
    with _step(report, say, "4. read it back with a filter (15 minutes of purchases)"):
        df = (
            spark.read.format("carbonlite")
            .load(events)
            .where(
                f"ts >= timestamp'{low:%Y-%m-%d %H:%M:%S}' AND ts < timestamp'{high:%Y-%m-%d %H:%M:%S}' "
                "AND kind = 'purchase'"
            )
        )
        found = df.count()
        import pyarrow.compute as pc

        plan = cl.open_table(events).plan_splits(
            filter=(pc.field("ts") >= pa.scalar(low)) & (pc.field("ts") < pa.scalar(high))
        )
        report.facts["filtered_rows"] = found
        report.facts["blocklets_read"] = plan.blocklets_selected
        report.facts["blocklets_total"] = plan.blocklets_total
        say(
            f"    {found:,} rows; min/max pruning kept {plan.blocklets_selected} of "
            f"{plan.blocklets_total} blocklets"
        )

    with _step(
        report, say, "5. stream the table out again (readStream) into a complete-mode aggregation"
    ):
        out = spark.readStream.format("carbonlite").option("maxFilesPerTrigger", 2).load(events)
        query = (
            out.groupBy("kind")
            .count()
            .writeStream.format("carbonlite")
            .outputMode("complete")
            .option("checkpointLocation", os.path.join(checkpoints, "counts"))
            .trigger(availableNow=True)
            .start(counts)
        )
        query.awaitTermination()
        result = cl.open_table(counts).to_arrow()
        total = sum(result.column("count").to_pylist())
        report.facts["counted_rows"] = total
        say(
            f"    {len(query.recentProgress)} micro-batches; counts per kind add up to {total:,} rows"
        )
        for row in sorted(result.to_pylist(), key=lambda r: r["kind"]):
            say(f"      {row['kind']:<9} {row['count']:>10,}")

    t = cl.open_table(events)
    say("[bold]6. the table[/bold]")
    for h in reversed(t.history(limit=3)):
        say(f"    v{h.version:<3} {h.operation:<17} +{h.rows:,} rows")
    for s in t.segments():
        say(
            f"    segment {s.id}: {s.status}, {s.rows:,} rows, {s.files} files, {s.blocklets} blocklets"
        )
    spark.stop()
    return report


def _ddl(schema: pa.Schema) -> str:
    names = {
        pa.int64(): "long",
        pa.int32(): "int",
        pa.string(): "string",
        pa.float64(): "double",
        pa.timestamp("us", tz="UTC"): "timestamp",
    }
    return ", ".join(f"{f.name} {names[f.type]}" for f in schema)
