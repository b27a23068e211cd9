"""The golden table written by format version 1 (``tests/data/make_golden.py``) reads back
exactly, version by version, with this and every later CarbonLite."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from tests.data.make_golden import (
    APP,
    describe_history,
    describe_segments,
    jsonable_rows,
    jsonable_schema,
    rows_for,
)

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden_v1"
EXPECTED = json.loads((DATA / "golden_v1_expected.json").read_text())
LATEST = EXPECTED["latest_version"]


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    """A private copy: tests never touch the checked-in table."""
    path = tmp_path / "golden_v1"
    shutil.copytree(GOLDEN, path)
    return path


def test_the_golden_table_is_small_and_complete() -> None:
    files = sorted(str(p.relative_to(GOLDEN)) for p in GOLDEN.rglob("*") if p.is_file())
    size = sum((GOLDEN / f).stat().st_size for f in files)
    size += (DATA / "golden_v1_expected.json").stat().st_size
    assert size < 200_000
    versions = [f for f in files if re.fullmatch(r"_carbonlite/log/\d{20}\.json", f)]
    assert versions == [f"_carbonlite/log/{v:020d}.json" for v in range(LATEST + 1)]
    checkpoints = [f for f in files if f.endswith(".checkpoint.json")]
    assert checkpoints == [
        f"_carbonlite/log/{v:020d}.checkpoint.json" for v in EXPECTED["checkpoints"]
    ]
    assert EXPECTED["checkpoints"]  # the golden history is long enough to checkpoint
    assert all(f.endswith(".cblt") for f in files if f.startswith("segments/"))
    assert (GOLDEN / "_carbonlite" / "_last_checkpoint").exists()


def test_every_version_reads_as_written(golden: Path) -> None:
    t = cl.open_table(golden)
    assert t.version == LATEST
    for version, want in EXPECTED["versions"].items():
        data = t.to_arrow(version=int(version))
        assert jsonable_schema(data.schema) == want["schema"], version
        assert jsonable_rows(data) == want["rows"], version
        assert t.count_rows(version=int(version)) == want["count"] == len(want["rows"])


def test_history_segments_and_metadata(golden: Path) -> None:
    t = cl.open_table(golden)
    assert describe_history(t) == EXPECTED["history"]
    times = [h.timestamp for h in t.history()]
    assert times == sorted(times, reverse=True)
    assert describe_segments(t) == EXPECTED["segments"]
    assert list(t.sort_columns) == EXPECTED["sort_columns"]
    assert t.properties == EXPECTED["properties"]
    assert t.transaction_version(APP) == EXPECTED["txns"][APP]


def test_opening_from_the_golden_checkpoint(golden: Path) -> None:
    last = EXPECTED["checkpoints"][-1]
    for version in range(last):
        (golden / "_carbonlite" / "log" / f"{version:020d}.json").unlink()
    t = cl.open_table(golden)
    for version in range(last, LATEST + 1):
        assert (
            jsonable_rows(t.to_arrow(version=version)) == EXPECTED["versions"][str(version)]["rows"]
        )
    with pytest.raises(cl.VersionNotFoundError):
        t.to_arrow(version=last - 2)
    # The checkpoint's blocklet index keeps every statistic: a replay from version 0 (of a
    # fresh copy) plans exactly the same pruned scan.
    replayed = t.snapshot(last)
    from_log = [b for _s, f in replayed.iter_files() for b in f.blocklets]
    assert from_log and all(b.stats for b in from_log)
    assert len(EXPECTED["versions"][str(last)]["rows"]) == sum(b.num_rows for b in from_log)


def test_this_version_keeps_writing_to_the_golden_table(golden: Path) -> None:
    t = cl.open_table(golden, writer_id="golden")  # the golden table's own writer id
    assert t.append(rows_for(range(500, 502), extra=True), txn=(APP, 2)).skipped
    t.append(rows_for(range(500, 502), extra=True), txn=(APP, 3))
    t.add_columns(pa.field("later", pa.int8()))
    t.append(rows_for(range(502, 503), extra=True))
    fresh = cl.open_table(golden)
    assert fresh.version == LATEST + 3
    got = fresh.to_arrow()
    expected_ids = [r["id"] for r in EXPECTED["versions"][str(LATEST)]["rows"]]
    assert got.column("id").to_pylist() == [*expected_ids, 500, 501, 502]
    assert got.column("later").null_count == got.num_rows
    latest_names = [column[0] for column in EXPECTED["versions"][str(LATEST)]["schema"]]
    assert got.schema.names == [*latest_names, "later"]
    assert (
        jsonable_rows(got.slice(0, len(expected_ids)).drop_columns(["later"]))
        == (EXPECTED["versions"][str(LATEST)]["rows"])
    )
    for version, want in EXPECTED["versions"].items():  # history is unchanged
        assert jsonable_rows(fresh.to_arrow(version=int(version))) == want["rows"]
