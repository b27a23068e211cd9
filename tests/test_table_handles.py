"""A Table object reads the version it loaded until ``refresh()`` or its own write moves it
(issue 25: ``history()``, ``version_at()``, ``partitions()`` and ``changes()`` moved it,
so ``b.to_arrow()`` went from 0 rows to 2 after ``b.history(limit=1)``)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])
UTC = datetime.timezone.utc

READS: dict[str, Callable[[cl.Table], Any]] = {
    "history": lambda b: b.history(limit=1),
    "history-all": lambda b: b.history(),
    "version_at-now": lambda b: b.version_at(datetime.datetime.now(UTC)),
    "version_at-iso": lambda b: b.version_at(datetime.datetime.now(UTC).isoformat()),
    "version_at-int": lambda b: b.version_at(2),
    "partitions": lambda b: b.partitions(),
    "partitions-at": lambda b: b.partitions(2),
    "changes": lambda b: b.changes(0),
    "changes-by-time": lambda b: b.changes(datetime.datetime(2000, 1, 1, tzinfo=UTC)),
    "segments": lambda b: b.segments(),
    "transaction_version": lambda b: b.transaction_version("app"),
    "verify": lambda b: b.verify(),
    "recover-dry-run": lambda b: b.recover(dry_run=True),
    "snapshot-at-time": lambda b: b.snapshot(datetime.datetime.now(UTC)),
    "to_arrow-at-time": lambda b: b.to_arrow(version=datetime.datetime.now(UTC)),
    "to_arrow-newer-version": lambda b: b.to_arrow(version=2),
    "count_rows-newer": lambda b: b.count_rows(version=2),
    "scan-newer": lambda b: b.scan(version=2).read_all(),
    "plan_splits-newer": lambda b: b.plan_splits(version=2),
    "state-missing": lambda b: b.state("nothing"),
    "effective_properties": lambda b: b.effective_properties,
    "schema": lambda b: b.schema,
}


@pytest.fixture
def handles(tmp_path: Path) -> tuple[cl.Table, cl.Table]:
    """``a`` wrote versions 1 and 2 after ``b`` was opened at version 0 (no rows)."""
    a = cl.create_table(tmp_path / "t", SCHEMA, partition_by=["region"])
    b = cl.open_table(a.path)
    a.append(pa.table({"id": [1], "region": ["eu"]}, schema=SCHEMA), txn=("app", 1))
    a.append(pa.table({"id": [2], "region": ["us"]}, schema=SCHEMA))
    return a, b


@pytest.mark.parametrize("read", list(READS), ids=list(READS))
def test_reads_never_move_a_handle(handles: tuple[cl.Table, cl.Table], read: str) -> None:
    _, b = handles
    try:
        answer = READS[read](b)
    except cl.InvalidOptionError:  # state(): no publish stored it
        answer = None
    assert b.version == 0 and b.to_arrow().num_rows == 0, f"{read} moved the handle"
    assert pa.table(b).num_rows == 0
    if read in ("history", "partitions", "transaction_version", "segments"):
        assert answer  # the newest state of the log, all the same
    b.refresh()
    assert b.version == 2 and b.to_arrow().num_rows == 2


def test_the_reported_case(handles: tuple[cl.Table, cl.Table]) -> None:
    _, b = handles
    assert b.history(limit=1)[0].version == 2  # the newest commit, read from the log
    assert b.to_arrow().num_rows == 0  # still version 0's rows
    assert [p.value for p in b.partitions()] == [("eu",), ("us",)]
    assert b.changes(1).num_rows == 2
    assert b.version_at(datetime.datetime.now(UTC)) == 2
    assert b.to_arrow().num_rows == 0
    assert b.refresh().to_arrow().num_rows == 2


def test_writes_move_the_handle_that_writes(handles: tuple[cl.Table, cl.Table]) -> None:
    a, b = handles
    b.append(pa.table({"id": [3], "region": ["eu"]}, schema=SCHEMA))
    assert b.version == 3 and b.to_arrow().num_rows == 3
    assert a.version == 2 and a.to_arrow().num_rows == 2  # a read nothing since
