"""``inspect``, ``segments`` and ``history``: human tables and ``--json`` holding the same
numbers as the Python API; ``--help`` for the app and every command."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import carbonlite as cl
from tests.cli.conftest import (
    COMMANDS,
    FINISHED,
    GROUPS,
    SEGMENT_ROWS,
    STREAMING_ROWS,
    TOTAL_ROWS,
    Run,
    command_paths,
)


def test_every_command_is_registered() -> None:
    assert {path[0] for path in command_paths() if path} == set(COMMANDS)
    assert {path for path in command_paths() if len(path) == 2} == {
        ("ingest", "kafka"),
        ("ingest", "files"),
        ("properties", "show"),
        ("properties", "set"),
        ("properties", "unset"),
        ("index", "build"),
        ("index", "show"),
        ("iceberg", "sync"),
        ("iceberg", "show"),
    }


def test_app_help(cli: Callable[..., Run]) -> None:
    run = cli("--help")
    assert run.exit_code == 0
    assert "Usage" in run.stdout
    for name in COMMANDS:
        assert name in run.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_command_help(cli: Callable[..., Run], command: str) -> None:
    run = cli(command, "--help")
    assert run.exit_code == 0, run.stderr
    assert f"carbonlite {command}" in run.stdout
    if command not in ("demo", "serve", *GROUPS):
        assert "--json" in run.stdout


def test_inspect_json(cli: Callable[..., Run], table: Path) -> None:
    run = cli("inspect", table, "--json")
    assert run.exit_code == 0, run.stderr
    info = run.json()
    t = cl.open_table(table)
    assert info["version"] == t.version == 16
    assert info["table_id"] == t.table_id
    assert [f["name"] for f in info["schema"]] == ["id", "ts", "name", "value"]
    assert info["schema"][0] == {
        "name": "id",
        "type": "int64",
        "nullable": False,
        "id": 1,
        "physical": "id",
        "default": None,
        "has_default": False,
        "default_literal": None,
        "former_names": [],
    }
    assert info["dropped_columns"] == [] and info["last_column_id"] == 4
    assert info["sort_columns"] == ["ts"]
    assert info["properties"] == {
        "columnar_format": "parquet",
        "blocklet_max_rows": "25",
        "handoff_blocklet_rows": "64",
    }
    snap = t.snapshot()
    assert info["summary"] == {
        "segments": FINISHED + 1,
        "live_segments": FINISHED + 1,
        "files": FINISHED + 1,
        "blocklets": sum(f.num_blocklets for _, f in snap.iter_files()),
        "rows": TOTAL_ROWS,
        "deleted_rows": 0,
        "deletion_vector_bytes": 0,
        "bytes": sum(f.committed_length for _, f in snap.iter_files()),
    }
    assert [(s["id"], s["status"], s["rows"]) for s in info["segments"]] == [
        *((str(i), "STREAMING_FINISH", SEGMENT_ROWS) for i in range(FINISHED)),
        ("5", "STREAMING", STREAMING_ROWS),
    ]
    assert "blocklets" not in info


def test_inspect_blocklets_json(cli: Callable[..., Run], table: Path) -> None:
    info = cli("inspect", table, "--blocklets", "--json").json()
    t = cl.open_table(table)
    entries = [(f.path, b) for _, f in t.snapshot().iter_files() for b in f.blocklets]
    assert len(info["blocklets"]) == len(entries) == info["summary"]["blocklets"]
    assert sum(b["rows"] for b in info["blocklets"]) == TOTAL_ROWS
    for shown, (path, entry) in zip(info["blocklets"], entries, strict=True):
        assert (shown["file"], shown["offset"], shown["length"], shown["rows"]) == (
            path,
            entry.offset,
            entry.length,
            entry.num_rows,
        )
        assert shown["columns"]["id"]["min"] == entry.stats["id"].min
        assert shown["columns"]["id"]["max"] == entry.stats["id"].max
        assert shown["columns"]["ts"]["min"].startswith("2026-01-01")  # shown as a timestamp
    assert {b["segment"] for b in info["blocklets"]} == {str(i) for i in range(FINISHED + 1)}


def test_inspect_version_time_travels(cli: Callable[..., Run], table: Path) -> None:
    info = cli("inspect", table, "--version", 4, "--json").json()
    assert info["version"] == 4
    assert info["summary"]["rows"] == 3 * SEGMENT_ROWS // 2  # three appends of 20 rows
    assert [(s["id"], s["status"]) for s in info["segments"]] == [
        ("0", "STREAMING_FINISH"),
        ("1", "STREAMING"),
    ]
    short = cli("inspect", table, "-v", 0, "--json").json()
    assert short["summary"]["rows"] == 0 and short["segments"] == []


def test_inspect_human(cli: Callable[..., Run], table: Path) -> None:
    run = cli("inspect", table)
    assert run.exit_code == 0, run.stderr
    out = run.stdout
    assert f"Table {cl.open_table(table).path}" in out
    assert "version 16" in out
    assert "ts (sort)" in out
    assert "handoff_blocklet_rows" in out
    assert f"{FINISHED + 1} live of {FINISHED + 1} segments" in out
    assert f"{TOTAL_ROWS:,} rows" in out
    assert "STREAMING_FINISH" in out
    assert "Blocklets" not in out
    with_blocklets = cli("inspect", table, "--blocklets").stdout
    assert "Blocklets" in with_blocklets and "ts min..max" in with_blocklets


def test_segments(cli: Callable[..., Run], table: Path) -> None:
    t = cl.open_table(table)
    t.handoff()
    rows = cli("segments", table, "--all", "--json").json()
    api = {s.id: s for s in t.segments()}
    assert [r["id"] for r in rows] == list(api)
    for r in rows:
        s = api[r["id"]]
        assert (r["status"], r["format"], r["level"], r["rows"], r["bytes"], r["files"]) == (
            s.status,
            s.format,
            s.level,
            s.rows,
            s.bytes,
            s.files,
        )
        assert r["merged_into"] == s.merged_into
        assert r["created_version"] == s.created_version
    assert {r["id"]: r["merged_into"] for r in rows if r["status"] == "COMPACTED"} == {
        str(i): f"{i}.0" for i in range(FINISHED)
    }
    streaming = next(r for r in rows if r["status"] == "STREAMING")
    assert streaming["end_time"] is None
    old = cli("segments", table, "--version", 3, "--json").json()
    assert [(r["id"], r["status"]) for r in old] == [("0", "STREAMING_FINISH")]
    human = cli("segments", table, "--all").stdout
    assert "merged into" in human and "0.0" in human and "COLUMNAR" in human


def test_segments_lists_the_live_ones_unless_all(cli: Callable[..., Run], table: Path) -> None:
    """Compacted segments (waiting for clean) are left out unless ``--all``, in the human
    table and in ``--json`` alike; the human table says how many it left out."""
    t = cl.open_table(table)
    t.handoff()
    live = [s.id for s in t.segments() if s.status in ("STREAMING", "STREAMING_FINISH", "SUCCESS")]
    assert live == ["5", "0.0", "1.0", "2.0", "3.0", "4.0"]
    assert [r["id"] for r in cli("segments", table, "--json").json()] == live
    human = cli("segments", table).stdout
    ids = [line.split()[0] for line in table_lines(human)]
    assert ids == live
    assert f"({FINISHED} compacted or deleted segment(s) not listed; --all lists them)" in human
    assert "COMPACTED" not in human
    every = cli("segments", table, "--all").stdout
    assert [line.split()[0] for line in table_lines(every)] == [s.id for s in t.segments()]
    assert "not listed" not in every
    inspected = cli("inspect", table).stdout
    assert "COMPACTED" not in inspected and f"{FINISHED} compacted or deleted" in inspected
    inspected_all = cli("inspect", table, "--all").stdout
    assert inspected_all.count("COMPACTED") == FINISHED and "not listed" not in inspected_all
    assert len(cli("inspect", table, "--json").json()["segments"]) == len(t.segments())


def table_lines(out: str, title: str | None = None, count: int | None = None) -> list[str]:
    """The rows of the (first, or ``title``d) table in ``out``: the lines after the header's
    rule, ``count`` of them or up to the end, a blank line or a note in parentheses."""
    lines = out.splitlines()
    start = 0 if title is None else next(i for i, line in enumerate(lines) if line.strip() == title)
    rule = next(i for i in range(start, len(lines)) if set(lines[i].strip()) == {"─"})
    rows = []
    for line in lines[rule + 1 :]:
        if len(rows) == count or not line.strip() or line.startswith("("):
            break
        rows.append(line)
    return rows


def test_files(cli: Callable[..., Run], table: Path) -> None:
    t = cl.open_table(table)
    t.handoff()
    snap = t.snapshot()
    listed = cli("files", table, "--json").json()
    expected = [
        (seg.segment_id, seg.status, f.path, f.committed_length, f.num_rows, f.num_blocklets)
        for seg in snap.segments.values()
        if seg.status != "COMPACTED"
        for f in seg.files.values()
    ]
    assert [
        (f["segment"], f["status"], f["file"], f["bytes"], f["rows"], f["blocklets"])
        for f in listed
    ] == expected
    assert sum(f["rows"] for f in listed) == TOTAL_ROWS == t.count_rows()
    every = cli("files", table, "--all", "--json").json()
    assert len(every) == sum(len(s.files) for s in snap.segments.values()) == len(listed) + FINISHED
    assert {f["status"] for f in every} == {"COMPACTED", "SUCCESS", "STREAMING"}
    old = cli("files", table, "--version", 2, "--json").json()
    assert [(f["segment"], f["rows"]) for f in old] == [("0", SEGMENT_ROWS)]
    human = cli("files", table)
    rows = table_lines(human.stdout)
    assert len(rows) == len(listed)
    for line, f in zip(rows, listed, strict=True):
        cells = line.split()
        assert cells[0] == f["segment"] and cells[1] == f["file"].rsplit("/", 1)[-1]
        assert f"{f['rows']:,}" in cells and str(f["blocklets"]) == cells[-1]
    assert human.stdout.startswith(f"{len(listed)} file(s) at version {t.version}: ")
    assert f"{TOTAL_ROWS:,} rows" in human.stdout.splitlines()[0]


def test_inspect_shows_every_property_in_force(cli: Callable[..., Run], table: Path) -> None:
    """Set ones as set, the others with their defaults (carbonlite/properties.py)."""
    from carbonlite.properties import PROPERTIES

    info = cli("inspect", table, "--json").json()
    assert info["properties"] == {
        "columnar_format": "parquet",
        "blocklet_max_rows": "25",
        "handoff_blocklet_rows": "64",
    }
    effective = info["effective_properties"]
    assert list(effective) == list(PROPERTIES)
    for key, spec in PROPERTIES.items():
        assert effective[key] == info["properties"].get(key, spec.default)
    human = cli("inspect", table).stdout
    lines = table_lines(human, "Properties", count=len(PROPERTIES))
    shown = {line.split()[0]: line.split()[1:] for line in lines}
    assert shown["blocklet_max_rows"] == ["25", "set"]
    assert shown["checkpoint_interval"] == [PROPERTIES["checkpoint_interval"].default, "default"]
    assert shown["deleted_data_retention"] == ["7d", "default"]
    assert set(shown) == set(PROPERTIES)


def test_history(cli: Callable[..., Run], table: Path) -> None:
    t = cl.open_table(table)
    t.handoff()
    rows = cli("history", table, "--json").json()
    assert [r["version"] for r in rows] == list(range(17, -1, -1))
    top = rows[0]
    assert (top["operation"], top["data_change"]) == ("HANDOFF", False)
    assert top["parameters"]["merged_into"] == "0.0,1.0,2.0,3.0,4.0"
    assert top["rows_added"] == top["rows_removed"] == FINISHED * SEGMENT_ROWS
    assert rows[1]["operation"] == "APPEND" and rows[1]["rows_added"] == STREAMING_ROWS
    assert rows[-1]["operation"] == "CREATE TABLE"
    assert [r["version"] for r in cli("history", table, "-n", 3, "--json").json()] == [17, 16, 15]
    human = cli("history", table, "--limit", 2).stdout
    assert "HANDOFF" in human and "APPEND" in human and "CREATE TABLE" not in human


def test_history_shows_metrics_and_writer(cli: Callable[..., Run], table: Path) -> None:
    """Rows, bytes and files added and removed, the duration and the writer of each commit,
    as the log records them."""
    t = cl.open_table(table, writer_id="maintainer")
    before = {s.id: s for s in t.segments()}
    t.handoff()
    after = {s.id: s for s in t.segments()}
    rows = cli("history", table, "--json").json()
    handoff, append = rows[0], rows[1]
    merged = [str(i) for i in range(FINISHED)]
    assert handoff["writer_id"] == "maintainer"
    assert handoff["files_removed"] == sum(before[s].files for s in merged) == FINISHED
    assert handoff["files_added"] == sum(after[f"{s}.0"].files for s in merged)
    assert handoff["bytes_removed"] == sum(before[s].bytes for s in merged)
    assert isinstance(handoff["duration_ms"], int) and handoff["duration_ms"] >= 0
    assert append["writer_id"] == append["parameters"]["writer_id"]  # the table's writer
    assert (append["files_added"], append["files_removed"]) == (1, 0)  # a new segment's file
    assert rows[2]["operation"] == "FINISH STREAMING" and rows[2]["files_added"] == 0
    assert rows[3]["files_added"] == 0  # the second append grows the same stream file
    assert {r["engine"] for r in rows} == {rows[0]["engine"]}
    human = cli("history", table, "-n", 2).stdout
    # one line per version (a long parameters cell goes on in lines of its own)
    lines = [line for line in table_lines(human) if line.split()[0].isdigit()]
    assert lines[0].split()[:3] == [str(handoff["version"]), *handoff["timestamp"][:19].split("T")]
    assert "HANDOFF" in lines[0] and "maintainer" in lines[0]
    assert f"{handoff['files_added']}" in lines[0].split()
    assert append["writer_id"] in lines[1]
    assert "writer_id=" not in human  # shown once, in the writer column


def test_version_flag() -> None:
    from carbonlite._version import __version__
    from tests.cli.conftest import invoke

    assert invoke("--version").stdout == f"carbonlite {__version__}\n"


def test_version_flag_prints_the_package_version() -> None:
    from typer.testing import CliRunner

    from carbonlite._version import __version__
    from carbonlite.cli.app import app as cli_app

    result = CliRunner().invoke(cli_app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"carbonlite {__version__}"


def test_deleted_rows_and_deletion_vectors_are_shown(cli: Callable[..., Run], table: Path) -> None:
    """inspect and segments count rows deleted by deletion vectors and their bytes; verify
    checks the vectors."""
    import pyarrow.compute as pc

    t = cl.open_table(table)
    deleted = t.delete(pc.field("id") < 10).rows
    assert deleted == 10
    info = cli("inspect", table, "--blocklets", "--json").json()
    assert info["summary"]["rows"] == TOTAL_ROWS - 10
    assert info["summary"]["deleted_rows"] == 10
    dv_bytes = sum(p.stat().st_size for p in table.rglob("*.dv"))
    assert info["summary"]["deletion_vector_bytes"] == dv_bytes > 0
    assert sum(b["deleted"] for b in info["blocklets"]) == 10
    segments = cli("segments", table, "--json").json()
    assert sum(s["deleted_rows"] for s in segments) == 10
    human = cli("segments", table, columns=200).stdout
    assert "deleted" in human and "dv size" in human
    assert "10 rows deleted by deletion vectors" in cli("inspect", table, columns=200).stdout
    assert "OK" in cli("verify", table).stdout


def test_partitions_lists_each_partition(cli: Callable[..., Run], tmp_path: Path) -> None:
    import pyarrow as pa

    schema = pa.schema([("region", pa.string()), ("id", pa.int64())])
    t = cl.create_table(tmp_path / "p", schema, partition_by=["region"])
    t.publish(pa.table({"region": ["eu", "eu", "us"], "id": [1, 2, 3]}, schema=schema))
    t.append(pa.table({"region": ["us"], "id": [4]}, schema=schema))
    rows = cli("partitions", tmp_path / "p", "--json").json()
    assert [(r["partition"], r["value"], r["rows"], r["segments"]) for r in rows] == [
        ("region=eu", ["eu"], 2, 1),
        ("region=us", ["us"], 2, 1),
    ]
    assert rows[0]["content_hash"] and rows[1]["content_hash"] is None  # us took an append
    assert rows[0]["last_modified_version"] == 1 and rows[1]["last_modified_version"] == 2
    segments = cli("segments", tmp_path / "p", "--json").json()
    assert sorted(s["partition"] for s in segments) == ["region=eu", "region=us"]
    assert "region=us" in cli("segments", tmp_path / "p").stdout
    human = cli("partitions", tmp_path / "p")
    assert human.exit_code == 0
    assert "region=eu" in human.stdout and "2 partition(s) by region" in human.stdout
    plain = cl.create_table(tmp_path / "plain", schema)
    run = cli("partitions", plain.path)
    assert run.exit_code == 1 and "not partitioned" in run.stderr
