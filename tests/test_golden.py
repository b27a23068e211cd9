"""The golden tables, one written by each log format version (``tests/data/make_golden.py``),
read back exactly, version by version, with this and every later CarbonLite."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.metadata import LOG_FORMAT_VERSION
from carbonlite.metadata.seal import unseal
from tests.data.make_golden import (
    APP,
    describe_history,
    describe_partitions,
    describe_segments,
    jsonable_rows,
    jsonable_schema,
    rows_after_changes,
    rows_for,
)


def rows_extra(ids: range) -> pa.Table:
    return rows_for(ids, extra=True)


DATA = Path(__file__).parent / "data"
FORMATS = sorted(int(p.name.removeprefix("golden_v")) for p in DATA.glob("golden_v*") if p.is_dir())


@dataclass(frozen=True)
class Golden:
    """A private copy of one golden table (tests never touch the checked-in one)."""

    format_version: int
    source: Path
    path: Path
    expected: dict[str, Any]

    @property
    def latest(self) -> int:
        return int(self.expected["latest_version"])


@pytest.fixture(params=FORMATS, ids=lambda v: f"format-{v}")
def golden(request: pytest.FixtureRequest, tmp_path: Path) -> Golden:
    source = DATA / f"golden_v{request.param}"
    path = tmp_path / source.name
    shutil.copytree(source, path)
    expected = json.loads((DATA / f"golden_v{request.param}_expected.json").read_text())
    return Golden(request.param, source, path, expected)


def test_this_format_has_a_golden_table() -> None:
    assert FORMATS[0] == 1 and LOG_FORMAT_VERSION in FORMATS, FORMATS


def test_the_golden_table_is_small_and_complete(golden: Golden) -> None:
    source, expected = golden.source, golden.expected
    files = sorted(str(p.relative_to(source)) for p in source.rglob("*") if p.is_file())
    size = sum((source / f).stat().st_size for f in files)
    size += (DATA / f"{source.name}_expected.json").stat().st_size
    # format 5 adds partitions (twice the files), publishes and a state; 7 bloom filter and
    # secondary index files
    assert size < 400_000
    versions = [f for f in files if re.fullmatch(r"_carbonlite/log/\d{20}\.json", f)]
    assert versions == [f"_carbonlite/log/{v:020d}.json" for v in range(golden.latest + 1)]
    checkpoints = [f for f in files if f.endswith(".checkpoint.json")]
    assert checkpoints == [
        f"_carbonlite/log/{v:020d}.checkpoint.json" for v in expected["checkpoints"]
    ]
    assert expected["checkpoints"]  # the golden history is long enough to checkpoint
    kinds = (".cblt", ".dv", ".bloom", ".sidx")
    assert all(f.endswith(kinds) for f in files if f.startswith("segments/"))
    assert any(f.endswith(".dv") for f in files) == (golden.format_version >= 4)
    assert any(f.endswith(".bloom") for f in files) == (golden.format_version >= 7)
    assert any(f.endswith(".sidx") for f in files) == (golden.format_version >= 7)
    assert (source / "_carbonlite" / "_last_checkpoint").exists()
    logs = [(source / f).read_bytes().rstrip(b"\n") for f in versions]
    documents = [(source / f).read_bytes() for f in checkpoints]
    if golden.format_version >= 2:  # every log file of format 2 on is sealed
        assert all(unseal(data, 2) for data in logs) and all(unseal(d, 1) for d in documents)
    else:
        assert not any(b'"crc32c":' in data for data in [*logs, *documents])


def test_every_version_reads_as_written(golden: Golden) -> None:
    t = cl.open_table(golden.path)
    assert t.version == golden.latest
    for version, want in golden.expected["versions"].items():
        data = t.to_arrow(version=int(version))
        assert jsonable_schema(data.schema) == want["schema"], version
        assert jsonable_rows(data) == want["rows"], version
        assert t.count_rows(version=int(version)) == want["count"] == len(want["rows"])


def test_history_segments_and_metadata(golden: Golden) -> None:
    t = cl.open_table(golden.path)
    expected = golden.expected
    assert describe_history(t) == expected["history"]
    times = [h.timestamp for h in t.history()]
    assert times == sorted(times, reverse=True)
    assert describe_segments(t) == expected["segments"]
    assert list(t.sort_columns) == expected["sort_columns"]
    assert t.properties == expected["properties"]
    assert t.transaction_version(APP) == expected["txns"][APP]


def test_opening_from_the_golden_checkpoint(golden: Golden) -> None:
    expected = golden.expected
    last = expected["checkpoints"][-1]
    for version in range(last):
        (golden.path / "_carbonlite" / "log" / f"{version:020d}.json").unlink()
    t = cl.open_table(golden.path)
    for version in range(last, golden.latest + 1):
        assert (
            jsonable_rows(t.to_arrow(version=version)) == expected["versions"][str(version)]["rows"]
        )
    with pytest.raises(cl.VersionNotFoundError):
        t.to_arrow(version=last - 2)
    # The checkpoint's blocklet index keeps every statistic: a replay from version 0 (of a
    # fresh copy) plans exactly the same pruned scan.
    replayed = t.snapshot(last)
    from_log = [b for _s, f in replayed.iter_files() for b in f.blocklets]
    assert from_log and all(b.stats for b in from_log)
    deleted = sum(f.num_deleted for _s, f in replayed.iter_files())
    assert (
        len(expected["versions"][str(last)]["rows"]) == sum(b.num_rows for b in from_log) - deleted
    )
    if golden.format_version >= 5:  # the publishes after version 12 replaced every row
        deleted = sum(f.num_deleted for _s, f in t.snapshot(12).iter_files())
    assert (deleted > 0) == (golden.format_version >= 4)  # a checkpoint holds deletions


def test_bloom_filters_prune_lookups_of_the_golden_table(golden: Golden) -> None:
    """Format 7 on: lookups by id and label are pruned by the golden table's bloom filters
    (built for old blocklets, written with new ones) and find exactly the rows they should."""
    if golden.format_version < 7:
        pytest.skip("bloom filters came with format 7")
    import pyarrow.compute as pc

    t = cl.open_table(golden.path)
    rows = golden.expected["versions"][str(golden.latest)]["rows"]
    for row in rows[::3]:
        by_id = t.to_arrow(filter=pc.field("id") == row["id"])
        assert jsonable_rows(by_id) == [r for r in rows if r["id"] == row["id"]]
        if row["label"] is not None:
            by_label = t.to_arrow(filter=pc.field("label").isin([row["label"], "none"]))
            assert jsonable_rows(by_label) == [r for r in rows if r["label"] == row["label"]]
    # a label no row has, within the bounds of blocklets: only the filters rule those out
    plan = t.plan_splits(filter=pc.field("label") == "név-2000")
    assert plan.blocklets_pruned_by_bloom > 0 and plan.blocklets_selected == 0
    # an id no row has, within the bounds of blocklets: the secondary indexes rule them out
    plan = t.plan_splits(filter=pc.field("id").isin([201, 301]))
    assert plan.blocklets_pruned_by_index + plan.blocklets_pruned_by_stats > 0
    assert t.to_arrow(filter=pc.field("label") == "név-2000").num_rows == 0


def test_this_version_keeps_writing_to_the_golden_table(golden: Golden) -> None:
    expected, latest = golden.expected, golden.latest
    t = cl.open_table(golden.path, writer_id="golden")  # the golden table's own writer id
    rows = rows_after_changes if golden.format_version >= 6 else rows_extra
    assert t.append(rows(range(500, 502)), txn=(APP, 2)).skipped
    t.append(rows(range(500, 502)), txn=(APP, 3))
    t.add_columns(pa.field("later", pa.int8()))
    t.append(rows(range(502, 503)), schema_mode="merge")  # "later": nulls
    fresh = cl.open_table(golden.path)
    assert fresh.version == latest + 3
    got = fresh.to_arrow()
    expected_ids = [r["id"] for r in expected["versions"][str(latest)]["rows"]]
    assert got.column("id").to_pylist() == [*expected_ids, 500, 501, 502]
    assert got.column("later").null_count == got.num_rows
    latest_names = [column[0] for column in expected["versions"][str(latest)]["schema"]]
    assert got.schema.names == [*latest_names, "later"]
    assert (
        jsonable_rows(got.slice(0, len(expected_ids)).drop_columns(["later"]))
        == (expected["versions"][str(latest)]["rows"])
    )
    for version, want in expected["versions"].items():  # history is unchanged
        assert jsonable_rows(fresh.to_arrow(version=int(version))) == want["rows"]


def test_upgrade_raises_an_old_table_to_this_format(golden: Golden) -> None:
    """``upgrade`` (formats before this one) commits the new format version and writes a
    checkpoint whose manifests hold every entry; everything reads as before, and writing goes
    on. An already current table is left alone."""
    expected, latest = golden.expected, golden.latest
    t = cl.open_table(golden.path, writer_id="golden")
    result = t.upgrade()
    if golden.format_version == LOG_FORMAT_VERSION:
        assert result.version is None and t.version == latest
        return
    assert result.version == latest + 1 and result.operation == "UPGRADE"
    assert t.snapshot().metadata.format_version == LOG_FORMAT_VERSION
    assert t.history(1)[0].parameters == {
        "from": str(golden.format_version),
        "to": str(LOG_FORMAT_VERSION),
    }
    manifests = sorted((golden.path / "_carbonlite" / "manifests").iterdir())
    assert manifests  # the checkpoint of the upgrade lists manifests, not a blocklet index
    fresh = cl.open_table(golden.path)
    assert fresh.snapshot().manifests is not None
    assert not any(r.is_legacy for r in fresh.snapshot().manifests.refs)
    for version, want in expected["versions"].items():
        assert jsonable_rows(fresh.to_arrow(version=int(version))) == want["rows"], version
    assert jsonable_rows(fresh.to_arrow()) == expected["versions"][str(latest)]["rows"]
    # the entries of the manifests carry the statistics the old checkpoint had
    entries = [b for _s, f in fresh.snapshot().iter_files() for b in f.blocklets]
    assert entries and all(b.stats for b in entries)
    rows = rows_after_changes if golden.format_version >= 6 else rows_extra
    fresh.append(rows(range(600, 602)))
    assert cl.open_table(golden.path).count_rows() == fresh.count_rows()
    assert fresh.upgrade().version is None


def test_upgrade_from_the_command_line(golden: Golden) -> None:
    from typer.testing import CliRunner

    import carbonlite.cli.maintenance  # noqa: F401 - registers the maintenance commands
    from carbonlite.cli import app

    run = CliRunner().invoke(app, ["upgrade", str(golden.path), "--json"])
    assert run.exit_code == 0, run.output
    report = json.loads(run.output)
    assert report["to_format"] == LOG_FORMAT_VERSION
    assert report["from_format"] == golden.format_version
    assert (report["version"] is None) == (golden.format_version == LOG_FORMAT_VERSION)


def test_partitions_content_hashes_and_states(golden: Golden) -> None:
    """Format 5 on: the partitions, their content hashes and the stored state read back as
    written, and a republish of the same rows changes nothing."""
    expected = golden.expected
    t = cl.open_table(golden.path)
    if "partition_by" not in expected:
        assert t.partition_by == () and t.partitions() == []
        return
    assert list(t.partition_by) == expected["partition_by"]
    assert describe_partitions(t) == expected["partitions"]
    for name, rows in expected["states"].items():
        assert jsonable_rows(t.state(name)) == rows
    current = t.to_arrow()
    result = t.publish(current)
    assert result.version is None and len(result.unchanged) == len(expected["partitions"])
