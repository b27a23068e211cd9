"""Performance at the limit (issue 30): each path as a ratio to its own ceiling, same run.

    python benchmarks/bench_limits.py [--quick] [--repeat 5] [--only NAME,...] [--output PATH]

Every ceiling is computed in this process, in this run, doing the same essential work (the
same rows, the same bytes made durable where ours are), and its repetitions are interleaved
with ours (A, B, B, A, ...), best of ``--repeat`` for throughputs. Each ratio is defined so
that higher is better and 1.0 is "as fast as the ceiling": throughputs ours / ceiling,
latencies ceiling / ours. Names for ``--only`` (sizes full / ``--quick``):

- ``bulk_append``: one append of ``datagen.event_table`` (5M / 300k rows) into a new table
  (``create_table`` untimed) vs ``pa.ipc.new_stream`` with LZ4 (our streaming codec), the
  same table in 65,536-row batches (our blocklet size), to a local file, plus one fsync.
- ``full_scan``: ``open_table(path).to_arrow()`` of that table vs
  ``pa.ipc.open_stream(file).read_all()`` of that file.
- ``range_after_handoff``: the same rows streamed in 50 / 10 appends, ``finish_streaming``,
  ``handoff``; ``table.to_arrow(filter=1% range of ts)`` on the opened table vs an Arrow IPC
  *file* of the rows sorted by ``ts`` in batches of ``handoff_blocklet_rows`` (zstd level 1,
  as handoff writes), read with ``open_file(...).get_batch(i)`` for exactly the batches whose
  ``ts`` min/max (noted when it was written, untimed) overlap the range, then filtered.
- ``commit`` (``limits_commit.py``): 1,000-row appends to a fresh table (1,000 / 60 timed
  after 5 warm-up) alternating with a loop that writes, per commit, the bytes one of ours adds
  to the table directory (median over the warm-up: data + log version) with one ``os.write``
  to a new file, then as many file and directory fsyncs as a warm-up commit of ours made
  (counted by wrapping ``os.fsync``/``os.fdatasync``; ``storage/local.py``: the data file's
  fdatasync, the version's temporary file's fsync, the log directory's fsync). ``--repeat``
  runs, each on a fresh table; figures: the best run's ceiling p50 / our p50, the same for
  p99, and our lowest p99 / p50 of a run (goal <= 2, issue 37). The JSON keeps every run, with our
  commits that synced more (checkpoints) and our p99 without them.
- ``flight_puts``: 8 producer processes x 150 / 20 puts of 100 rows to ``carbonlite serve``
  (``--flush-interval 0.2``) vs the same producers against ``bench_serve``'s bare Flight
  server that appends each put to a ``WriteAheadLog`` and answers. Puts/s.
- ``flight_doget``: the handed-off table of ``range_after_handoff`` served by
  ``carbonlite serve``, read whole by ``GetFlightInfo`` + every endpoint's ``DoGet`` at once
  (``bench_serve.read_parallel``) vs ``Table.to_arrow()`` in this process.
- ``republish``: ``bench_publish``'s setup (5M / 200k rows in 1,000 / 100 partitions, 1% of
  them changed): ``Table.publish`` (hash diff) vs ``Table.overwrite`` of the same data, each
  on a fresh copy; ratio overwrite / publish (goal >= 20), bytes written beside it.
- ``small_appends``: 5,000 / 500 ``Table.append`` of 100 rows (each a durable commit) vs the
  same batches written to one ``pa.ipc.new_stream`` (LZ4), each followed by an fsync. The
  issue's 1M appends would take hours here; 5,000 are chosen instead, enough for over a
  thousand checkpoint cycles (one every 4 small commits by default), so the rate settles
  (20,000 gave 216 a second in ``results/limits-run1.json``; three runs of 5,000 gave 181-221).
- ``memory``: ``limits_memory.py``'s three checks (a 5M / 500k-row append's peak RSS beyond
  the process's baseline over its Arrow bytes, goal <= 1.5; a streaming scan of a 5M / 1M-row
  table against a set 64 MB budget, goal <= 1; ``carbonlite serve`` after 100,000 / 2,000
  puts against its buffer's limits, goal <= 1). These are lower-is-better figures.

``--quick`` only shows that every path runs: at its sizes process start-up and noise swamp
several ratios (``flight_puts`` above all: 20 puts per producer). Full sizes take about 11
minutes on an idle 2-core machine; the JSON's ``path_seconds`` says where they go.

One line per figure on stdout (``name: ratio x (ours ..., ceiling ..., goal >= G)``), then a
markdown table; JSON in ``benchmarks/results/limits.json`` (``limits-quick.json`` with
``--quick``). ``limits_guard.below_guard`` lists the figures below the regression guard's bar.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import bench_publish
import bench_serve
import limits_commit
import limits_memory
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
from datagen import event_table
from limits_commit import timed, tree_bytes
from limits_guard import below_guard
from report import progress, run_facts, yes_no

import carbonlite as cl
from carbonlite.properties import PROPERTIES
from tests.support.flight_service import ServiceProcess

RESULTS_DIR = Path(__file__).resolve().parent / "results"
BLOCKLET_ROWS = int(PROPERTIES["blocklet_max_rows"].default)
HANDOFF_ROWS = int(PROPERTIES["handoff_blocklet_rows"].default)
LZ4 = pa.ipc.IpcWriteOptions(compression="lz4")
ZSTD1 = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=1))
PATHS = (
    "bulk_append",
    "full_scan",
    "range_after_handoff",
    "commit",
    "flight_puts",
    "flight_doget",
    "republish",
    "small_appends",
    "memory",
)


@dataclass(frozen=True, slots=True)
class Config:
    rows: int
    """bulk_append, full_scan, range_after_handoff, flight_doget."""
    range_appends: int
    commits: int
    commit_warmup: int
    producers: int
    puts: int
    """flight_puts: per producer."""
    publish_rows: int
    partitions: int
    small_appends: int
    memory_rows: int
    """memory: the append's rows."""
    scan_rows: int
    """memory: the streamed table's rows."""
    service_puts: int
    repeat: int


FULL = Config(
    rows=5_000_000,
    range_appends=50,
    commits=1_000,
    commit_warmup=5,
    producers=8,
    puts=150,
    publish_rows=5_000_000,
    partitions=1_000,
    small_appends=5_000,
    memory_rows=5_000_000,
    scan_rows=5_000_000,
    service_puts=100_000,
    repeat=5,
)
QUICK = Config(
    rows=300_000,
    range_appends=10,
    commits=60,
    commit_warmup=5,
    producers=8,
    puts=20,
    publish_rows=200_000,
    partitions=100,
    small_appends=500,
    memory_rows=500_000,
    scan_rows=1_000_000,
    service_puts=2_000,
    repeat=2,
)


@dataclass(frozen=True, slots=True)
class Figure:
    """One ratio against its goal: ``better`` says which way is good."""

    name: str
    ratio: float
    goal: float
    ours: str
    ceiling: str
    better: Literal["higher", "lower"] = "higher"
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def met(self) -> bool:
        return self.ratio >= self.goal if self.better == "higher" else self.ratio <= self.goal

    def as_json(self, path: str) -> dict[str, Any]:
        """The figure in the results JSON, with the path (``--only`` name) that measures it."""
        return {
            "path": path,
            "ratio": self.ratio,
            "goal": self.goal,
            "better": self.better,
            "met": self.met,
            "ours": self.ours,
            "ceiling": self.ceiling,
            "detail": self.detail,
        }

    def line(self) -> str:
        sign = ">=" if self.better == "higher" else "<="
        return (
            f"{self.name}: {self.ratio:.3f} x (ours {self.ours}, ceiling {self.ceiling}, "
            f"goal {sign} {self.goal:g})"
        )


def interleaved(
    ours: Callable[[], object],
    ceiling: Callable[[], object],
    repeat: int,
    before: Callable[[str], None] | None = None,
) -> dict[str, list[float]]:
    """Seconds of ``repeat`` runs of each, A B then B A, ... (``before(side)`` untimed)."""
    times: dict[str, list[float]] = {"ours": [], "ceiling": []}
    sides = [("ours", ours), ("ceiling", ceiling)]
    for r in range(repeat):
        for side, fn in sides if r % 2 == 0 else sides[::-1]:
            if before is not None:
                before(side)
            times[side].append(timed(fn))
    return times


class FreshSides:
    """``interleaved``'s ``before``: a new table at ``path`` (sorted by ``ts``) before each run
    of ours, no stream file at ``stream`` before each run of the ceiling."""

    def __init__(self, path: Path, stream: Path, schema: pa.Schema) -> None:
        self.path, self.stream, self.schema = path, stream, schema
        self._table: cl.Table | None = None

    def __call__(self, side: str) -> None:
        if side == "ours":
            shutil.rmtree(self.path, ignore_errors=True)
            self._table = cl.create_table(self.path, self.schema, sort_columns=["ts"])
        else:
            self.stream.unlink(missing_ok=True)

    @property
    def table(self) -> cl.Table:
        """The table of ours' latest run."""
        if self._table is None:
            raise RuntimeError("no run of ours yet")
        return self._table


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_stream(path: Path, data: pa.Table) -> None:
    """The bulk-append ceiling: an LZ4 Arrow IPC stream in blocklet-sized batches, fsynced."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, data.schema, options=LZ4) as w:
        w.write_table(data, max_chunksize=BLOCKLET_ROWS)
    fsync_path(path)


def mb_s(nbytes: int, seconds: float) -> str:
    return f"{nbytes / 1e6 / seconds:,.0f} MB/s"


class Work:
    """The run's scratch directory and what several paths share, built on first use."""

    def __init__(self, root: Path, cfg: Config) -> None:
        self.root, self.cfg = root, cfg
        self._data: pa.Table | None = None
        self.bulk_table: Path | None = None
        self.bulk_stream: Path | None = None
        self._handed_off: Path | None = None

    @property
    def data(self) -> pa.Table:
        if self._data is None:
            self._data = event_table(self.cfg.rows)
            progress(f"{self._data.num_rows:,} event rows ({self._data.nbytes / 1e6:.0f} MB)")
        return self._data

    def handed_off(self) -> Path:
        """The rows streamed in ``range_appends`` appends, finished and handed off, as table
        ``events`` under a root ``carbonlite serve`` can serve."""
        if self._handed_off is None:
            path = self.root / "served" / "events"
            table = cl.create_table(path, self.data.schema, sort_columns=["ts"])
            step = -(-self.data.num_rows // self.cfg.range_appends)
            progress(f"streaming {self.cfg.range_appends} appends, then handoff")
            for first in range(0, self.data.num_rows, step):
                table.append(self.data.slice(first, step))
            table.finish_streaming()
            table.handoff()
            table.close()  # its checkpoints written before anything reads it
            self._handed_off = path
        return self._handed_off

    def bulk(self) -> tuple[Path, Path]:
        """The bulk-append table and IPC stream (``bulk_append`` leaves them; else built once
        here, untimed)."""
        if self.bulk_table is None or self.bulk_stream is None:
            self.bulk_table, self.bulk_stream = self.root / "bulk", self.root / "bulk.arrows"
            table = cl.create_table(self.bulk_table, self.data.schema, sort_columns=["ts"])
            table.append(self.data)
            table.close()
            write_stream(self.bulk_stream, self.data)
        return self.bulk_table, self.bulk_stream


# --- bulk append and full scan ------------------------------------------------------------------


def bulk_append(work: Work) -> list[Figure]:
    data, ours_path, stream = work.data, work.root / "bulk", work.root / "bulk.arrows"
    fresh = FreshSides(ours_path, stream, data.schema)

    def ceiling() -> None:
        write_stream(stream, data)

    progress(f"bulk_append: {data.num_rows:,} rows, best of {work.cfg.repeat}")

    def ours() -> None:
        fresh.table.append(data)
        fresh.table.log.post_commit.settle()  # its checkpoint, written in the background

    times = interleaved(ours, ceiling, work.cfg.repeat, fresh)
    if fresh.table.count_rows() != data.num_rows:
        raise RuntimeError("the bulk append does not hold every row")
    work.bulk_table, work.bulk_stream = ours_path, stream
    ours, ceil = min(times["ours"]), min(times["ceiling"])
    return [
        Figure(
            "bulk_append",
            ceil / ours,
            0.9,
            mb_s(data.nbytes, ours),
            mb_s(data.nbytes, ceil),
            detail={
                "rows": data.num_rows,
                "arrow_bytes": data.nbytes,
                "seconds": times,
                "bytes_written": {"ours": tree_bytes(ours_path), "ceiling": stream.stat().st_size},
            },
        )
    ]


def full_scan(work: Work) -> list[Figure]:
    path, stream = work.bulk()
    rows, nbytes = work.data.num_rows, work.data.nbytes
    got: dict[str, int] = {}

    def ours() -> None:
        got["ours"] = cl.open_table(path).to_arrow().num_rows

    def ceiling() -> None:
        with pa.OSFile(str(stream)) as source:
            got["ceiling"] = pa.ipc.open_stream(source).read_all().num_rows

    ours()  # warm-up: both files in the page cache
    ceiling()
    progress(f"full_scan: {rows:,} rows, best of {work.cfg.repeat}")
    times = interleaved(ours, ceiling, work.cfg.repeat)
    if got != {"ours": rows, "ceiling": rows}:
        raise RuntimeError(f"the full scans read {got}, not {rows} rows each")
    o, c = min(times["ours"]), min(times["ceiling"])
    return [Figure("full_scan", c / o, 0.9, mb_s(nbytes, o), mb_s(nbytes, c), detail=times)]


# --- a 1% range after handoff -------------------------------------------------------------------


def range_after_handoff(work: Work) -> list[Figure]:
    path, data = work.handed_off(), work.data
    ipc_file = work.root / "sorted.arrow"
    ts_of = pc.cast(data.column("ts"), pa.int64()).to_numpy()
    order = np.argsort(ts_of, kind="stable")
    ordered = data.take(pa.array(order))
    spans: list[tuple[int, int]] = []
    with (
        pa.OSFile(str(ipc_file), "wb") as sink,
        pa.ipc.new_file(sink, data.schema, options=ZSTD1) as writer,
    ):
        for batch in ordered.to_batches(max_chunksize=HANDOFF_ROWS):
            raw = pc.cast(batch.column("ts"), pa.int64())
            spans.append((pc.min(raw).as_py(), pc.max(raw).as_py()))
            writer.write_batch(batch)
    sorted_ts = ts_of[order]
    lo = int(sorted_ts[len(sorted_ts) // 2])
    hi = int(sorted_ts[min(len(sorted_ts) - 1, len(sorted_ts) // 2 + len(sorted_ts) // 100)])
    ts_type = data.schema.field("ts").type
    expr = (pc.field("ts") >= pa.scalar(lo, ts_type)) & (pc.field("ts") < pa.scalar(hi, ts_type))
    expected = int(np.count_nonzero((ts_of >= lo) & (ts_of < hi)))
    table = cl.open_table(path)
    got: dict[str, pa.Table] = {}

    def ours() -> None:
        got["ours"] = table.to_arrow(filter=expr)

    def ceiling() -> None:
        wanted = [i for i, (low, high) in enumerate(spans) if high >= lo and low < hi]
        with pa.OSFile(str(ipc_file)) as source:
            reader = pa.ipc.open_file(source)
            batches = [reader.get_batch(i) for i in wanted]
        got["ceiling"] = pa.Table.from_batches(batches, data.schema).filter(expr)

    ours()
    ceiling()
    if (
        sorted(got["ours"].column("id").to_pylist())
        != sorted(got["ceiling"].column("id").to_pylist())
        or got["ours"].num_rows != expected
    ):
        raise RuntimeError(f"the range scans disagree (expected {expected} rows)")
    progress(f"range_after_handoff: {expected:,} rows, best of {work.cfg.repeat}")
    times = interleaved(ours, ceiling, work.cfg.repeat)
    plan = table.plan_splits(filter=expr)
    selected = sum(1 for low, high in spans if high >= lo and low < hi)
    o, c = min(times["ours"]), min(times["ceiling"])
    return [
        Figure(
            "range_after_handoff",
            c / o,
            0.7,
            f"{o * 1000:.1f} ms",
            f"{c * 1000:.1f} ms",
            detail={
                "rows": expected,
                "seconds": times,
                "blocklets_read": [plan.blocklets_selected, plan.blocklets_total],
                "bytes_read": plan.bytes_selected,
                "ceiling_batches_read": [selected, len(spans)],
            },
        )
    ]


# --- commit latency ----------------------------------------------------------------------------


def commit(work: Work) -> list[Figure]:
    cfg = work.cfg
    progress(
        f"commit: {cfg.commits} appends of 1,000 rows, each beside its ceiling, "
        f"best of {cfg.repeat}"
    )
    runs = []
    for r in range(cfg.repeat):
        root = work.root / f"commit-{r}"
        root.mkdir()
        runs.append(limits_commit.measure_commits(root, cfg.commits, cfg.commit_warmup))
        shutil.rmtree(root)
    return commit_figures(runs)


def commit_figures(runs: list[dict[str, Any]]) -> list[Figure]:
    """The commit figures of ``measure_commits`` runs: each the best run's ratio (the two
    sides of a run alternate commit by commit, so a slower disk or a busier minute weighs on
    both; pairing the best p50 of one run with the best of another does not cancel it)."""

    def ratio(d: dict[str, Any], q: str) -> float:
        return float(d[q]["ceiling"] / d[q]["ours"])

    def ours_spread(d: dict[str, Any]) -> float:
        return float(d["p99_ms"]["ours"] / d["p50_ms"]["ours"])

    d50 = max(runs, key=lambda d: ratio(d, "p50_ms"))
    d99 = max(runs, key=lambda d: ratio(d, "p99_ms"))
    dsp = min(runs, key=ours_spread)
    r50, r99, spread = ratio(d50, "p50_ms"), ratio(d99, "p99_ms"), ours_spread(dsp)
    detail = {
        "ratios": {
            "p50": [ratio(d, "p50_ms") for d in runs],
            "p99": [ratio(d, "p99_ms") for d in runs],
            "p99_over_p50": [ours_spread(d) for d in runs],
        },
        "runs": runs,
    }
    return [
        Figure(
            "commit_p50",
            r50,
            0.8,
            f"p50 {d50['p50_ms']['ours']:.2f} ms",
            f"p50 {d50['p50_ms']['ceiling']:.2f} ms",
            detail=detail,
        ),
        Figure(
            "commit_p99",
            r99,
            0.8,
            f"p99 {d99['p99_ms']['ours']:.2f} ms",
            f"p99 {d99['p99_ms']['ceiling']:.2f} ms",
        ),
        Figure(
            "commit_p99_over_p50",
            spread,
            2.0,  # issue 37 (issue 30 asked for 3)
            f"p99/p50 {spread:.2f}",
            f"p99/p50 {dsp['p99_ms']['ceiling'] / dsp['p50_ms']['ceiling']:.2f}",
            better="lower",
        ),
    ]


# --- Flight ------------------------------------------------------------------------------------


def flight_puts(work: Work) -> list[Figure]:
    cfg = work.cfg
    total = cfg.producers * cfg.puts
    shape = argparse.Namespace(producers=cfg.producers, puts=cfg.puts, rows_per_put=100)
    rates: dict[str, list[float]] = {"ours": [], "ceiling": []}
    syncs: list[int] = []
    for r in range(cfg.repeat):
        for side in ("ours", "ceiling") if r % 2 == 0 else ("ceiling", "ours"):
            progress(f"flight_puts {r + 1}/{cfg.repeat}: {side}, {total:,} puts")
            if side == "ceiling":
                wal = work.root / f"bare-wal-{r}"
                rates[side].append(bench_serve.ceiling_puts_per_s(shape, str(wal)))
                shutil.rmtree(wal, ignore_errors=True)
                continue
            root = work.root / f"puts-{r}"
            root.mkdir()
            cl.create_table(root / "events", bench_serve.SCHEMA)
            with ServiceProcess(str(root), "--flush-interval", "0.2") as service:
                seconds = bench_serve.run_producers(
                    bench_serve.flight_producer, service.port, cfg.producers, cfg.puts, 100
                )
                health = json.loads(
                    next(
                        iter(service.client().do_action(flight.Action("healthcheck", b"")))
                    ).body.to_pybytes()
                )
                syncs.append(health["wal_syncs"])
                if service.terminate() != 0:
                    raise RuntimeError("the service did not stop cleanly")
            if cl.open_table(root / "events").count_rows() != total * 100:
                raise RuntimeError("the service lost or duplicated puts")
            rates[side].append(total / seconds)
            shutil.rmtree(root, ignore_errors=True)
    o, c = max(rates["ours"]), max(rates["ceiling"])
    return [
        Figure(
            "flight_puts",
            o / c,
            0.9,
            f"{o:,.0f} puts/s",
            f"{c:,.0f} puts/s",
            detail={"puts": total, "puts_per_s": rates, "service_wal_syncs": syncs},
        )
    ]


def flight_doget(work: Work) -> list[Figure]:
    path = work.handed_off()
    rows = work.data.num_rows
    with ServiceProcess(str(path.parent)) as service:
        client = service.client()
        descriptor = flight.FlightDescriptor.for_path("events")
        got: dict[str, int] = {}

        def ours() -> None:
            got["ours"] = bench_serve.read_parallel(client, descriptor).num_rows

        def ceiling() -> None:
            got["ceiling"] = cl.open_table(path).to_arrow().num_rows

        ours()  # warm-up: files and connections opened
        ceiling()
        progress(f"flight_doget: {rows:,} rows, best of {work.cfg.repeat}")
        times = interleaved(ours, ceiling, work.cfg.repeat)
        endpoints = len(client.get_flight_info(descriptor).endpoints)
    if got != {"ours": rows, "ceiling": rows}:
        raise RuntimeError(f"the reads returned {got}, not {rows} rows each")
    o, c = min(times["ours"]), min(times["ceiling"])
    nbytes = work.data.nbytes
    detail = {"rows": rows, "endpoints": endpoints, "seconds": times}
    return [Figure("flight_doget", c / o, 0.8, mb_s(nbytes, o), mb_s(nbytes, c), detail=detail)]


# --- republish and small appends ---------------------------------------------------------------


def republish(work: Work) -> list[Figure]:
    cfg = work.cfg
    data = bench_publish.with_parts(cfg.publish_rows, cfg.partitions)
    progress(f"republish: {cfg.publish_rows:,} rows in {cfg.partitions:,} partitions")
    folder = work.root / "publish"
    folder.mkdir()
    with contextlib.redirect_stdout(sys.stderr):  # bench_publish's progress goes to stdout
        r = bench_publish.republish(folder, data, cfg.partitions, 0.01, cfg.repeat)
    shutil.rmtree(folder, ignore_errors=True)
    return [
        Figure(
            "republish",
            r["ratio"],
            20.0,
            f"publish {r['publish']['best_s'] * 1000:.0f} ms",
            f"overwrite {r['overwrite']['best_s'] * 1000:.0f} ms",
            detail={**r, "rows": cfg.publish_rows, "partitions": cfg.partitions},
        )
    ]


def small_appends(work: Work) -> list[Figure]:
    n = work.cfg.small_appends
    data = event_table(n * 100, seed=4)
    batches = [data.slice(i * 100, 100) for i in range(n)]
    stream = work.root / "small.arrows"
    fresh = FreshSides(work.root / "small", stream, data.schema)

    def ours() -> None:
        for b in batches:
            fresh.table.append(b)
        fresh.table.log.post_commit.settle()  # the checkpoints written in the background

    def ceiling() -> None:
        with (
            pa.OSFile(str(stream), "wb") as sink,
            pa.ipc.new_stream(sink, data.schema, options=LZ4) as writer,
        ):
            for b in batches:
                writer.write_table(b)
                os.fsync(sink.fileno())

    progress(f"small_appends: {n:,} appends of 100 rows, best of {work.cfg.repeat}")
    times = interleaved(ours, ceiling, work.cfg.repeat, fresh)
    if fresh.table.count_rows() != n * 100:
        raise RuntimeError("the small appends lost rows")
    o, c = n / min(times["ours"]), n / min(times["ceiling"])
    detail = {"appends": n, "seconds": times}
    return [
        Figure(
            "small_appends", o / c, 0.5, f"{o:,.0f} appends/s", f"{c:,.0f} appends/s", detail=detail
        )
    ]


# --- memory ------------------------------------------------------------------------------------


def memory(work: Work) -> list[Figure]:
    cfg = work.cfg
    a = limits_memory.append_memory(work.root, cfg.memory_rows)
    b = limits_memory.scan_memory(work.root, cfg.scan_rows, cfg.range_appends)
    c = limits_memory.service_memory(work.root, cfg.service_puts, cfg.producers)
    mb = 1e6
    return [
        Figure(
            "memory_append",
            a["ratio"],
            1.5,
            f"peak +{a['growth'] / mb:,.0f} MB",
            f"{a['arrow_bytes'] / mb:,.0f} MB of Arrow rows",
            better="lower",
            detail=a,
        ),
        Figure(
            "memory_scan",
            b["ratio"],
            1.0,
            f"peak +{b['growth'] / mb:,.1f} MB over {b['batches']} batches",
            f"budget {b['budget'] / mb:,.1f} MB (table {b['arrow_bytes'] / mb:,.0f} MB)",
            better="lower",
            detail=b,
        ),
        Figure(
            "memory_service",
            c["ratio"],
            1.0,
            f"peak +{c['growth'] / mb:,.0f} MB after {c['puts']:,} puts",
            f"limit {c['limit'] / mb:,.0f} MB",
            better="lower",
            detail=c,
        ),
    ]


# --- the run -----------------------------------------------------------------------------------

RUNNERS: dict[str, Callable[[Work], list[Figure]]] = {
    "bulk_append": bulk_append,
    "full_scan": full_scan,
    "range_after_handoff": range_after_handoff,
    "commit": commit,
    "flight_puts": flight_puts,
    "flight_doget": flight_doget,
    "republish": republish,
    "small_appends": small_appends,
    "memory": memory,
}


def markdown(figures: list[Figure], facts: dict[str, str]) -> str:
    lines = [
        f"{facts['machine']}; {facts['date']}",
        "",
        "| figure | ours | ceiling | ratio | goal | met |",
        "|---|---:|---:|---:|---|---|",
    ]
    for f in figures:
        sign = ">=" if f.better == "higher" else "<="
        lines.append(
            f"| {f.name} | {f.ours} | {f.ceiling} | **{f.ratio:.3f}** | {sign} {f.goal:g} | "
            f"{yes_no(f.met)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke-test sizes (seconds each)")
    parser.add_argument("--repeat", type=int, default=None, help="best of N (5; 2 with --quick)")
    parser.add_argument("--only", default=",".join(PATHS), help="comma-separated paths to run")
    parser.add_argument("--output", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args()
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(only) - set(PATHS))
    if unknown:
        parser.error(f"unknown path(s) {', '.join(unknown)}; choose from {', '.join(PATHS)}")
    cfg = QUICK if args.quick else FULL
    if args.repeat is not None:
        cfg = replace(cfg, repeat=args.repeat)
    output = args.output or RESULTS_DIR / ("limits-quick.json" if args.quick else "limits.json")
    facts = run_facts()
    load_start = os.getloadavg()
    figures: list[Figure] = []
    path_of: dict[str, str] = {}
    path_seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-limits-") as tmp:
        work = Work(Path(tmp), cfg)
        for name in (n for n in PATHS if n in only):
            start = time.perf_counter()
            for figure in RUNNERS[name](work):
                print(figure.line(), flush=True)
                figures.append(figure)
                path_of[figure.name] = name
            path_seconds[name] = round(time.perf_counter() - start, 1)
    results = {
        **facts,
        "quick": args.quick,
        "config": asdict(cfg),
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "path_seconds": path_seconds,
        "figures": {f.name: f.as_json(path_of[f.name]) for f in figures},
    }
    failing = below_guard(results)
    results["below_guard"] = failing
    print()
    print(markdown(figures, facts))
    if failing:
        print(f"\nbelow the guard: {'; '.join(failing)}")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwritten to {output}")


if __name__ == "__main__":
    main()
