"""The work each path of ``bench_limits.py`` does per operation, counted (issue 38).

    python benchmarks/work_counts.py [--only NAME,...] [--record] [--output PATH]

A timed ratio depends on the machine: a loaded one gives another figure for the same code.
A count does not. For each path of ``bench_limits.py`` (small sizes) this runs the path's
operation in a fresh process with every kind of work counted, and divides by the number of
operations:

- ``storage_requests``: calls into the storage layer (``Storage`` methods, a range reader's
  reads, an appender's writes and flushes; a call made inside another counts once);
- ``log_reads``: those requests that read a file of the log (``_carbonlite/log/``);
- ``bytes_read`` / ``bytes_written``: bytes through those requests, and the frames the Flight
  service writes to its write-ahead log;
- ``fsyncs``: ``os.fsync`` and ``os.fdatasync``;
- ``files_opened``: ``os.open`` and ``open``;
- ``blocklets_decoded``: blocklets read by ``BlockletFileReader.read_blocklet`` and row
  groups by ``ParquetBlockletReader.read_blocklet``;
- ``calls``: calls of CarbonLite's own Python functions (a profiler hook on every thread,
  Flight's handler threads included); other packages' calls are not counted, so a new
  pyarrow cannot move the figure.

The first operation of a path is a warm-up (imports, caches) and is not counted. Post-commit
steps run inline so a checkpoint is counted in the commit that triggers it, never in
whichever operation a background thread happens to overlap.

``benchmarks/results/work-counts.json`` holds the recorded counts; ``tests/test_work_counts.py``
(the default tier) holds every count to its record within :data:`TOLERANCE`, above and below:
more work is a regression, less is an improvement to record (``--record`` rewrites the file
and prints what moved). The timed ratios stay in ``bench_limits.py``, run by hand.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RECORD = Path(__file__).resolve().parent / "results" / "work-counts.json"
PATHS = (
    "bulk_append",
    "open",
    "full_scan",
    "range_after_handoff",
    "commit",
    "small_appends",
    "flight_puts",
    "flight_doget",
    "republish",
)
METRICS = (
    "storage_requests",
    "log_reads",
    "bytes_read",
    "bytes_written",
    "fsyncs",
    "files_opened",
    "blocklets_decoded",
    "calls",
)
TOLERANCE = {"relative": 0.02, "absolute": 0.5}
"""A count per operation may differ from its record by 2% or by 0.5, whichever is more:
bytes move a little with the digits of a process id in the log; one more request, fsync or
opened file per operation does not hide in that."""

_LOG_DIR = "/_carbonlite/log/"


class Counts:
    """Every counter of one run, and whether counting is on (off during set-up)."""

    def __init__(self) -> None:
        self.on = False
        self.work: collections.Counter[str] = collections.Counter()
        self.functions: collections.Counter[str] = collections.Counter()
        self._local = threading.local()

    def add(self, metric: str, amount: int = 1) -> None:
        if self.on:
            self.work[metric] += amount

    @contextlib.contextmanager
    def request(self) -> Iterator[bool]:
        """Yields whether this storage call is the outermost one on its thread (counted)."""
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        try:
            yield depth == 0
        finally:
            self._local.depth = depth


def _nbytes(value: Any) -> int:
    """Bytes of ``value`` (bytes, a memoryview, an Arrow buffer), 0 for anything else."""
    try:
        return memoryview(value).nbytes
    except TypeError:
        return 0


def _counted(counts: Counts, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a storage method named ``name``) counting its requests and bytes."""

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        with counts.request() as outermost:
            if outermost:  # counted before the call: a request that raises is still one
                counts.add("storage_requests")
                if name in ("read", "read_buffer"):
                    path = args[0] if name == "read" and args else getattr(self, "path", "")
                    if _LOG_DIR in "/" + str(path):
                        counts.add("log_reads")
                elif name in ("put", "put_if_absent", "append", "write"):
                    counts.add("bytes_written", _nbytes(args[1] if name != "write" else args[0]))
            result = fn(self, *args, **kwargs)
            if outermost and name in ("read", "read_buffer"):
                counts.add("bytes_read", _nbytes(result))
            return result

    return method


_STORAGE_METHODS = (
    "exists",
    "size",
    "read",
    "open_reader",
    "list",
    "put_if_absent",
    "put",
    "swap",
    "open_appender",
    "append",
    "truncate",
    "delete",
    "lock",
    "is_locked",
    "delete_empty_dirs",
)


def _instrument_storage(counts: Counts) -> None:
    from carbonlite.storage import local

    for name in _STORAGE_METHODS:
        if name in vars(local.LocalStorage) or hasattr(local.LocalStorage, name):
            setattr(
                local.LocalStorage, name, _counted(counts, name, getattr(local.LocalStorage, name))
            )
    for name in ("read", "read_buffer"):
        setattr(
            local._LocalRangeReader,
            name,
            _counted(counts, name, getattr(local._LocalRangeReader, name)),
        )
    for name in ("write", "flush"):
        setattr(
            local._LocalAppender, name, _counted(counts, name, getattr(local._LocalAppender, name))
        )
    from carbonlite.serve import wal  # the service's write-ahead log writes with os.write

    real_write = wal.WriteAheadLog._write_locked

    @functools.wraps(real_write)
    def write_frame(self: Any, frame: bytes) -> None:
        counts.add("bytes_written", len(frame))
        real_write(self, frame)

    wal.WriteAheadLog._write_locked = write_frame  # type: ignore[method-assign]


def _instrument_os(counts: Counts) -> None:
    import builtins
    import io

    def counting(metric: str, real: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(real)
        def call(*args: Any, **kwargs: Any) -> Any:
            counts.add(metric)
            return real(*args, **kwargs)

        return call

    os.fsync = counting("fsyncs", os.fsync)
    os.fdatasync = counting("fsyncs", os.fdatasync)
    os.open = counting("files_opened", os.open)
    builtins.open = io.open = counting("files_opened", builtins.open)


def _instrument_calls(counts: Counts) -> Callable[[], None]:
    """A profiler hook counting calls of CarbonLite's functions on every thread; returns what
    installs it on the current thread (for threads Python did not start, e.g. gRPC's)."""
    import carbonlite

    package = os.path.dirname(carbonlite.__file__) + os.sep

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and counts.on:
            code = frame.f_code
            if code.co_filename.startswith(package):
                counts.work["calls"] += 1
                counts.functions[
                    f"{code.co_filename[len(package) :]}:{getattr(code, 'co_qualname', code.co_name)}"
                ] += 1

    def install() -> None:
        if sys.getprofile() is not hook:
            sys.setprofile(hook)

    threading.setprofile(hook)
    install()
    return install


def _instrument_blocklets(counts: Counts) -> None:
    from carbonlite.format import parquet_file, reader

    for kind in (reader.BlockletFileReader, parquet_file.ParquetBlockletReader):
        real = kind.read_blocklet

        @functools.wraps(real)
        def read_blocklet(self: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            counts.add("blocklets_decoded")
            return _real(self, *args, **kwargs)

        kind.read_blocklet = read_blocklet  # type: ignore[method-assign]


# --- the paths ------------------------------------------------------------------------------


class Run:
    """One path's run: set-up uncounted, then ``measure(op, n)``."""

    def __init__(self, scratch: Path, counts: Counts, install: Callable[[], None]) -> None:
        self.scratch, self.counts, self.install = scratch, counts, install
        self.operations = 0

    @contextlib.contextmanager
    def uncounted(self) -> Iterator[None]:
        """Set-up inside an operation (a fresh table), not counted as its work."""
        on, self.counts.on = self.counts.on, False
        try:
            yield
        finally:
            self.counts.on = on

    def measure(self, op: Callable[[int], object], n: int) -> None:
        """``op(0)`` as a warm-up, then ``op(1)`` ... ``op(n)`` counted."""
        op(0)
        self.counts.on = True
        try:
            for i in range(1, n + 1):
                op(i)
        finally:
            self.counts.on = False
        self.operations = n


def _events(rows: int, seed: int = 0) -> Any:
    from datagen import event_table

    return event_table(rows, seed=seed)


def _streamed(path: Path, data: Any, per_append: int, *, handoff: bool = False) -> None:
    """A table of ``data`` in appends of ``per_append`` rows (set-up, not counted); with
    ``handoff``, its streaming segment finished and handed off."""
    import carbonlite as cl

    table = cl.create_table(path, data.schema, sort_columns=["ts"])
    for first in range(0, data.num_rows, per_append):
        table.append(data.slice(first, per_append))
    if handoff:
        table.finish_streaming()
        table.handoff()
    table.close()


def path_bulk_append(run: Run) -> None:
    import carbonlite as cl

    data = _events(100_000)

    def op(i: int) -> None:
        with run.uncounted():
            table = cl.create_table(run.scratch / f"bulk-{i}", data.schema, sort_columns=["ts"])
        table.append(data)
        table.close()

    run.measure(op, 2)


def path_open(run: Run) -> None:
    """``open_table`` of a table of 30 small commits (its log read from the newest
    checkpoint on: the log files read on open)."""
    import carbonlite as cl

    data = _events(3_000)
    path = run.scratch / "opened"
    _streamed(path, data, 100)

    def op(i: int) -> None:
        if cl.open_table(path).snapshot().version != 30:
            raise RuntimeError("open_table did not reach the latest version")

    run.measure(op, 5)


def path_full_scan(run: Run) -> None:
    import carbonlite as cl

    data = _events(200_000)
    path = run.scratch / "scan"
    cl.create_table(path, data.schema, sort_columns=["ts"]).append(data)

    def op(i: int) -> None:
        if cl.open_table(path).to_arrow().num_rows != data.num_rows:
            raise RuntimeError("the full scan lost rows")

    run.measure(op, 3)


def path_range_after_handoff(run: Run) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    import carbonlite as cl

    data = _events(200_000)
    path = run.scratch / "handed"
    _streamed(path, data, 20_000, handoff=True)
    ts = np.sort(pc.cast(data.column("ts"), pa.int64()).to_numpy())
    lo, hi = int(ts[len(ts) // 2]), int(ts[len(ts) // 2 + len(ts) // 100])
    ts_type = data.schema.field("ts").type
    expr = (pc.field("ts") >= pa.scalar(lo, ts_type)) & (pc.field("ts") < pa.scalar(hi, ts_type))
    opened = cl.open_table(path)

    def op(i: int) -> None:
        opened.to_arrow(filter=expr)

    run.measure(op, 5)


def _appends(run: Run, rows: int, n: int) -> None:
    import carbonlite as cl

    data = _events((n + 1) * rows, seed=1)
    table = cl.create_table(run.scratch / "commits", data.schema, sort_columns=["ts"])

    def op(i: int) -> None:
        table.append(data.slice(i * rows, rows))

    run.measure(op, n)
    table.close()


def path_commit(run: Run) -> None:
    _appends(run, 1_000, 40)


def path_small_appends(run: Run) -> None:
    _appends(run, 100, 80)


@contextlib.contextmanager
def _serving(run: Run, root: Path) -> Iterator[tuple[Any, Any]]:
    """``carbonlite serve`` of ``root`` in this process (flushed only when asked), with its
    gRPC handler threads counted, and a client of it; both closed afterwards."""
    import pyarrow.flight as flight

    from carbonlite.serve.service import FlightService

    for name in ("do_put", "do_get", "get_flight_info"):  # gRPC's threads: hook them too
        real = getattr(FlightService, name)

        def handler(self: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            run.install()
            return _real(self, *args, **kwargs)

        setattr(FlightService, name, handler)
    service = FlightService(str(root), port=0, flush_interval=3600.0, flush_rows=10**9)
    client = flight.FlightClient(f"grpc://127.0.0.1:{service.port}")
    try:
        yield service, client
    finally:
        client.close()
        service.shutdown()
        service.close()


def path_flight_puts(run: Run) -> None:
    import bench_serve

    import carbonlite as cl
    from tests.support.flight_service import put

    root = run.scratch / "served"
    cl.create_table(root / "events", bench_serve.SCHEMA)
    puts = 20
    with _serving(run, root) as (service, client):

        def op(i: int) -> None:
            for seq in range(i * puts, (i + 1) * puts):
                put(client, "events", "p", seq, bench_serve.batch("p", seq, 100))
            service.flush_all()

        run.measure(op, 2)
    run.operations *= puts  # per put


def path_flight_doget(run: Run) -> None:
    import bench_serve
    import pyarrow.flight as flight

    data = _events(200_000)
    root = run.scratch / "served"
    _streamed(root / "events", data, 50_000, handoff=True)
    descriptor = flight.FlightDescriptor.for_path("events")
    with _serving(run, root) as (_service, client):

        def op(i: int) -> None:
            if bench_serve.read_parallel(client, descriptor).num_rows != data.num_rows:
                raise RuntimeError("DoGet lost rows")

        run.measure(op, 3)


def path_republish(run: Run) -> None:
    import bench_publish

    import carbonlite as cl

    data = bench_publish.with_parts(50_000, 50)
    base = run.scratch / "published"
    cl.create_table(base, data.schema, partition_by=["part"]).publish(data)
    modified, chosen = bench_publish.changed_copy(data, 50, 0.02)

    def op(i: int) -> None:
        path = run.scratch / f"publish-{i}"
        with run.uncounted():
            shutil.copytree(base, path)
        result = cl.open_table(path).publish(modified)
        if {v[0] for v in result.changed} != chosen:
            raise RuntimeError(f"publish changed {result.changed}, not {chosen}")

    run.measure(op, 2)


def count_path(name: str) -> dict[str, Any]:
    """Run path ``name`` in this process, counted; its counts per operation."""
    sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
    counts = Counts()
    install = _instrument_calls(counts)  # before any thread starts, so every thread has it
    _instrument_os(counts)
    _instrument_storage(counts)
    _instrument_blocklets(counts)
    from carbonlite.metadata import post_commit

    post_commit.default_mode = "inline"
    with tempfile.TemporaryDirectory(prefix=f"work-{name}-") as scratch:
        run = Run(Path(scratch), counts, install)
        globals()[f"path_{name}"](run)
    sys.setprofile(None)
    threading.setprofile(None)
    per_op = {m: round(counts.work[m] / run.operations, 2) for m in METRICS}
    top = {f: round(c / run.operations, 2) for f, c in counts.functions.most_common(40)}
    return {"operations": run.operations, "per_operation": per_op, "top_calls": top}


def measure(name: str) -> dict[str, Any]:
    """Path ``name`` counted in a fresh interpreter (no warm cache from another path)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(Path(__file__).resolve().parent)]),
        "PYTHONHASHSEED": "0",
        "PYSPARK_PYTHON": sys.executable,
    }
    proc = subprocess.run(
        [sys.executable, __file__, "--child", name],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"counting {name} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def departures(name: str, got: dict[str, float], recorded: dict[str, float]) -> list[str]:
    """One line per metric of ``got`` outside the tolerance around ``recorded``."""
    lines = []
    for metric in METRICS:
        was, now = recorded[metric], got[metric]
        slack = max(TOLERANCE["absolute"], TOLERANCE["relative"] * was)
        if abs(now - was) > slack:
            way = "more" if now > was else "less"
            lines.append(
                f"{name}.{metric}: {now:g} per operation, recorded {was:g} ({way} work; "
                f"allowed {was:g} +/- {slack:g})"
            )
    return lines


OPERATIONS = {
    "bulk_append": "one append of 100,000 rows to a new table",
    "open": "`open_table` after 30 small commits",
    "full_scan": "open + `to_arrow()` of 200,000 rows",
    "range_after_handoff": "a 1% `ts` range after handoff, 200,000 rows",
    "commit": "an append of 1,000 rows",
    "small_appends": "an append of 100 rows",
    "flight_puts": "one put of 100 rows, flushed by 20",
    "flight_doget": "GetFlightInfo + every DoGet, 200,000 rows handed off",
    "republish": "`publish` with 1 of 50 partitions changed",
}
"""What one operation of each path is, for the markdown table."""


def markdown(recorded: dict[str, Any]) -> str:
    """The recorded counts as the table of docs/BENCHMARKS.md."""
    lines = [
        "| path (operation) | " + " | ".join(m.replace("_", " ") for m in METRICS) + " |",
        "|---|" + "---:|" * len(METRICS),
    ]
    for name in PATHS:
        counts = recorded["paths"][name]
        cells = [f"{counts[m]:,.2f}".rstrip("0").rstrip(".") for m in METRICS]
        lines.append(f"| `{name}` ({OPERATIONS[name]}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated paths: " + ",".join(PATHS))
    parser.add_argument("--record", action="store_true", help=f"rewrite {RECORD.name}")
    parser.add_argument("--output", type=Path, help="write the counts here as JSON")
    parser.add_argument("--markdown", action="store_true", help="print the record as a table")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(count_path(args.child)))
        return
    if args.markdown:
        print(markdown(json.loads(RECORD.read_text())))
        return
    names = args.only.split(",") if args.only else list(PATHS)
    unknown = sorted(set(names) - set(PATHS))
    if unknown:
        parser.error(f"unknown paths {unknown}; the paths are {', '.join(PATHS)}")
    recorded = json.loads(RECORD.read_text()) if RECORD.exists() else {"paths": {}}
    results = {name: measure(name) for name in names}
    for name, result in results.items():
        print(f"{name}: {json.dumps(result['per_operation'])}")
        if name in recorded["paths"]:
            for line in departures(name, result["per_operation"], recorded["paths"][name]):
                print(f"  {line}")
    if args.output:
        args.output.write_text(json.dumps(results, indent=2) + "\n")
    if args.record:
        for name, result in results.items():
            recorded["paths"][name] = result["per_operation"]
        recorded["tolerance"] = TOLERANCE
        RECORD.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
        print(f"recorded in {RECORD}")


if __name__ == "__main__":
    main()
