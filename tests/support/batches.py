"""Deterministic test batches, and exact checks of what a table holds.

Batch ``b`` always has the same rows: ``batch_rows(b)`` rows numbered 0..n-1 whose payload
and value are functions of ``(b, row)``. A table is checked by rebuilding the batches it
should hold and comparing every cell, so a partial, duplicated or garbled batch is caught.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from carbonlite import open_table
from carbonlite.errors import CarbonLiteError
from carbonlite.format import BlockletFileReader

SCHEMA = pa.schema(
    [
        ("batch", pa.int64()),
        ("row", pa.int64()),
        ("payload", pa.string()),
        ("value", pa.float64()),
    ]
)

# Small blocklets, so most appends span several of them.
PROPERTIES = {"blocklet_max_rows": "20"}


def batch_rows(batch: int, max_rows: int = 240) -> int:
    """How many rows batch ``batch`` has (1..max_rows, fixed per batch id)."""
    return random.Random(batch * 7919 + 13).randint(1, max_rows)


def make_batch(batch: int, max_rows: int = 240) -> pa.Table:
    n = batch_rows(batch, max_rows)
    rows = range(n)
    return pa.table(
        {
            "batch": pa.array([batch] * n, pa.int64()),
            "row": pa.array(rows, pa.int64()),
            "payload": [f"b{batch}/r{r}/" + "x" * ((batch * 31 + r) % 23) for r in rows],
            "value": [batch * 1_000_000.0 + r * 0.5 for r in rows],
        },
        schema=SCHEMA,
    )


def expected_table(batches: Iterable[int], max_rows: int = 240) -> pa.Table:
    tables = [make_batch(b, max_rows) for b in sorted(set(batches))]
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([("batch", "ascending"), ("row", "ascending")]).combine_chunks()


def batch_ids(table: pa.Table) -> set[int]:
    return set(pc.unique(table["batch"]).to_pylist()) if table.num_rows else set()


def diff_rows(got: pa.Table, batches: Iterable[int], max_rows: int = 240) -> str | None:
    """None when ``got`` holds exactly ``batches`` (each whole, once), else what differs."""
    wanted = sorted(set(batches))
    got = got.select(SCHEMA.names)
    exp = expected_table(wanted, max_rows)
    if _sorted(got).equals(_sorted(exp)):
        return None
    have = batch_ids(got)
    lines = [f"{got.num_rows} rows read, {exp.num_rows} expected"]
    if have - set(wanted):
        lines.append(f"unexpected batches {sorted(have - set(wanted))}")
    if set(wanted) - have:
        lines.append(f"missing batches {sorted(set(wanted) - have)}")
    counts = got.group_by("batch").aggregate([("row", "count"), ("row", "count_distinct")])
    for b, n, distinct in zip(
        counts["batch"].to_pylist(),
        counts["row_count"].to_pylist(),
        counts["row_count_distinct"].to_pylist(),
        strict=True,
    ):
        want = batch_rows(b, max_rows)
        if n != want or distinct != want:
            lines.append(f"batch {b}: {n} rows ({distinct} distinct), expected {want}")
    if len(lines) == 1:
        lines.append("same batches and row counts, but cell values differ")
    return "; ".join(lines)


@dataclass
class StreamFile:
    """One stream file on disk against what the log says about it."""

    rel: str
    size: int
    committed: int | None
    """Committed length from the log; None when the log does not know the file."""
    segment_status: str | None


def stream_files(path: str, writer_id: str | None = None) -> list[StreamFile]:
    """Every data file (of ``writer_id``, or of anyone) on disk, with its committed length in
    the latest log."""
    snap = open_table(path).snapshot()
    known = {
        f.path: (f.committed_length, seg.status)
        for seg in snap.segments.values()
        for f in seg.files.values()
    }
    out = []
    seg_dir = os.path.join(path, "segments")
    for seg in sorted(os.listdir(seg_dir)) if os.path.isdir(seg_dir) else []:
        for name in sorted(os.listdir(os.path.join(seg_dir, seg))):
            if writer_id is not None and not name.startswith(f"{writer_id}-"):
                continue
            rel = f"segments/{seg}/{name}"
            committed, status = known.get(rel, (None, None))
            out.append(StreamFile(rel, os.path.getsize(os.path.join(path, rel)), committed, status))
    return out


def log_temp_files(path: str) -> list[str]:
    log_dir = os.path.join(path, "_carbonlite", "log")
    return sorted(n for n in os.listdir(log_dir) if n.startswith(".tmp-"))


def ends_in_whole_blocklets(path: str, rel: str) -> bool:
    """Whether the file ends at a blocklet boundary (False for a torn blocklet or header)."""
    try:
        with BlockletFileReader(os.path.join(path, rel)) as reader:
            return reader.valid_length == reader.size
    except CarbonLiteError:
        return False


def rows_past(path: str, f: StreamFile) -> int:
    """Rows in the readable blocklets past the committed length of ``f``."""
    start = f.committed or 0
    try:
        with BlockletFileReader(os.path.join(path, f.rel)) as reader:
            return sum(b.num_rows for b in reader.blocklets() if b.offset >= start)
    except CarbonLiteError:
        return 0
