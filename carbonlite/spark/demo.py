"""The demo pipeline behind ``carbonlite demo``: the invoice-style streaming job users write.

1. generate event files (parquet), 2. stream them into a CarbonLite table with
``trigger(availableNow=True)`` and ``maxFilesPerTrigger``, 3. read the table back with a
filter (pruned by min/max), 4. stream it out again with ``readStream`` into a second table
(a complete-mode aggregation), 5. show the table's history and segments.

Spark's own output (the JVM's, its Python workers', and Python warnings raised meanwhile)
goes to ``spark.log`` in the demo's directory, never into the demo's output.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from carbonlite.spark import local_session

__all__ = ["SPARK_LOG", "DemoReport", "StreamProgress", "event_table", "run_demo"]

SPARK_LOG = "spark.log"
"""Where, in the demo's directory, Spark's own output goes."""

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

    @property
    def table(self) -> str:
        """The events table the demo streamed into."""
        return os.path.join(self.directory, "events")

    @property
    def spark_log(self) -> str:
        return os.path.join(self.directory, SPARK_LOG)


StreamProgress = Callable[[int, int, int], None]
"""``progress(rows_in, batches_committed, batches_expected)`` while the events stream in: rows
and micro-batches committed to the table so far (read from the table itself)."""

ProgressDisplay = Callable[[], AbstractContextManager[StreamProgress | None]]
"""Opened for the streaming step only: gives the :data:`StreamProgress` to call meanwhile."""


@contextmanager
def _process_output_to(log: TextIO) -> Iterator[None]:
    """Point this process's stdout and stderr (file descriptors 1 and 2) at ``log`` while
    Spark's JVM starts: the JVM inherits them, so what it prints from then on (its start-up
    warnings, its log, its Python workers' output) lands in ``log``. Python's own
    ``sys.stdout`` and ``sys.stderr`` are flushed first and are back afterwards."""
    try:
        targets = [sys.__stdout__.fileno(), sys.__stderr__.fileno()]  # type: ignore[union-attr]
    except (AttributeError, OSError, ValueError):  # no real descriptors (embedded, tests)
        yield
        return
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    saved = [os.dup(fd) for fd in targets]
    try:
        for fd in targets:
            os.dup2(log.fileno(), fd)
        yield
    finally:
        for stream in (sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()
        for fd, copy in zip(targets, saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


@contextmanager
def _warnings_to(log: TextIO) -> Iterator[None]:
    """Python warnings raised meanwhile (pyspark's about the pandas version, ...) go to
    ``log``, like Spark's own."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")

        def show(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            log.write(warnings.formatwarning(message, category, filename, lineno, line))
            log.flush()

        warnings.showwarning = show
        yield


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
    progress: ProgressDisplay | None = None,
) -> DemoReport:
    """Run the whole pipeline in ``directory`` and return what it did. ``say`` gets the
    narrative (rich markup); ``progress`` is opened while the events stream in and told how
    far they got as it changes (see :data:`ProgressDisplay`); Spark's own
    output goes to ``spark.log`` there."""
    os.makedirs(directory, exist_ok=True)
    with (
        open(os.path.join(directory, SPARK_LOG), "a", encoding="utf-8") as log,
        _warnings_to(log),
    ):
        return _run(directory, rows, files, say, master, progress, log)


def _run(
    directory: str,
    rows: int,
    files: int,
    say: Callable[[str], None],
    master: str,
    progress: ProgressDisplay | None,
    log: TextIO,
) -> DemoReport:
    import carbonlite as cl

    report = DemoReport(directory)
    source = os.path.join(directory, "source")
    events = report.table
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
        with _process_output_to(log):
            spark = local_session(master, app_name="carbonlite-demo")
        say(f"    Spark's own log: {report.spark_log}")

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
        with progress() if progress is not None else nullcontext(None) as update:
            _follow(query, events, files, update)
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
            .option("filterPushdown", "true")  # one fresh DataFrame, one query
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
        per_kind = sorted(result.to_pylist(), key=lambda r: r["kind"])
        report.facts["counts"] = {r["kind"]: r["count"] for r in per_kind}
        for row in per_kind:
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


def _follow(query: Any, path: str, expected: int, progress: StreamProgress | None) -> None:
    """Wait for the streaming ``query`` into the table at ``path``, telling ``progress`` of
    the rows and micro-batches committed so far whenever they change."""
    import carbonlite as cl
    from carbonlite.errors import TableNotFoundError

    last = (-1, -1)
    table = None
    while True:
        finished = query.awaitTermination(0.25)
        if progress is not None:
            with contextlib.suppress(TableNotFoundError):  # made by the first micro-batch
                table = table.refresh() if table is not None else cl.open_table(path)
            if table is not None:
                batch = table.transaction_version(query.id)
                now = (table.count_rows(), 0 if batch is None else batch + 1)
                if now != last:
                    progress(now[0], now[1], expected)
                    last = now
        if finished:
            return


def _ddl(schema: pa.Schema) -> str:
    names = {
        pa.int64(): "long",
        pa.int32(): "int",
        pa.string(): "string",
        pa.float64(): "double",
        pa.timestamp("us", tz="UTC"): "timestamp",
    }
    return ", ".join(f"{f.name} {names[f.type]}" for f in schema)
