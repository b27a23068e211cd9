"""``compact``, ``handoff``, ``clean``, ``recover`` and ``verify`` from the command line: what
they do to the table, and ``--json`` documents with the right numbers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.progress import Progress

import carbonlite as cl
from carbonlite.cli.app import err_console
from tests.cli.conftest import FINISHED, SEGMENT_ROWS, TOTAL_ROWS, Run
from tests.compaction.lifecycle import SCHEMA, assert_rows, make_rows


def files_of(path: Path, status: str) -> set[str]:
    snap = cl.open_table(path).snapshot()
    return {rel for s in snap.segments.values() if s.status == status for rel in s.files}


def test_handoff_json(cli: Callable[..., Run], table: Path) -> None:
    run = cli("handoff", table, "--json")
    assert run.exit_code == 0, run.stderr
    result = run.json()
    assert result["kind"] == "handoff"
    assert result["segments_compacted"] == [str(i) for i in range(FINISHED)]
    assert result["segments_created"] == [f"{i}.0" for i in range(FINISHED)]
    assert result["rows"] == FINISHED * SEGMENT_ROWS
    t = cl.open_table(table)
    assert result["versions"] == [t.version]
    assert result["bytes_written"] == sum(
        s.bytes for s in t.segments() if s.id in result["segments_created"]
    )
    assert result["bytes_read"] == sum(
        s.bytes for s in t.segments() if s.id in result["segments_compacted"]
    )
    assert result["seconds"] > 0
    again = cli("handoff", table, "--json").json()
    assert (again["versions"], again["segments_created"]) == ([], [])
    assert cli("handoff", table).stdout.strip() == "handoff: nothing to do"


def test_handoff_finish_closes_the_streaming_segment_first(
    cli: Callable[..., Run], table: Path
) -> None:
    run = cli("handoff", table, "--finish")
    assert run.exit_code == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "closed STREAMING segment 5"
    assert lines[1].startswith("handoff: merged 6 segment(s) [0, 1, 2, 3, 4, 5] into 6 [0.0, 1.0,")
    assert f"{TOTAL_ROWS:,} rows" in lines[1]
    t = cl.open_table(table)
    assert {s.status for s in t.segments() if "." not in s.id} == {"COMPACTED"}
    assert_rows(t.to_arrow(), range(TOTAL_ROWS))
    # --json with --finish: one document (the handoff result), nothing else on stdout.
    t.append(t.to_arrow().slice(0, 10).set_column(0, "id", [list(range(-10, 0))]))
    result = cli("handoff", table, "--finish", "--json").json()
    assert (result["segments_compacted"], result["segments_created"]) == (["6"], ["6.0"])
    assert cli("handoff", table, "--finish", "--json").json()["versions"] == []


def test_compact_minor_major_custom(cli: Callable[..., Run], table: Path) -> None:
    assert cli("compact", table, "--type", "handoff", "--json").json()["segments_created"] == [
        f"{i}.0" for i in range(FINISHED)
    ]
    minor = cli("compact", table, "--type", "minor", "--json").json()
    assert minor["kind"] == "minor"
    assert minor["segments_compacted"] == ["0.0", "1.0", "2.0", "3.0"]
    assert minor["segments_created"] == ["0.1"]
    assert minor["rows"] == 4 * SEGMENT_ROWS
    assert len(minor["versions"]) == 1
    # Default type is minor; nothing more to do.
    assert cli("compact", table, "--json").json()["versions"] == []

    major = cli("compact", table, "-t", "major", "--json").json()
    assert major["segments_compacted"] == ["0.1", "4.0"]
    assert major["segments_created"] == ["0.2"]

    t = cl.open_table(table)
    t.finish_streaming()
    custom = cli("compact", table, "--type", "custom", "--segments", "5, 0.2", "--json").json()
    assert custom["segments_compacted"] == ["0.2", "5"]
    assert custom["segments_created"] == ["0.3"]
    assert custom["rows"] == TOTAL_ROWS
    t = cl.open_table(table)
    assert [(s.id, s.level) for s in t.segments() if s.status == "SUCCESS"] == [("0.3", 3)]
    assert_rows(t.to_arrow(), range(TOTAL_ROWS))
    ops = [h["operation"] for h in cli("history", table, "--json").json()[:4]]
    assert ops == ["COMPACT", "FINISH STREAMING", "COMPACT", "COMPACT"]


def test_compact_human(cli: Callable[..., Run], table: Path) -> None:
    cl.open_table(table).handoff()
    out = cli("compact", table).stdout
    assert out.startswith("minor: merged 4 segment(s) [0.0, 1.0, 2.0, 3.0] into 1 [0.1];")
    assert f"{4 * SEGMENT_ROWS:,} rows" in out
    assert "committed version(s) 18" in out


@pytest.fixture
def progress_updates(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Stderr taken for a terminal; every progress bar update as (description, done, total)."""
    monkeypatch.setattr(err_console, "_force_terminal", True)
    updates: list[tuple[str, int, int]] = []
    real_update = Progress.update

    def update(self: Progress, task_id: Any, **kwargs: Any) -> None:
        if "completed" in kwargs:
            task = self._tasks[task_id]
            updates.append((task.description, kwargs["completed"], kwargs["total"]))
        real_update(self, task_id, **kwargs)

    monkeypatch.setattr(Progress, "update", update)
    return updates


def assert_moves_to_the_end(updates: list[tuple[str, int, int]], total: int) -> None:
    done = [d for _, d, _ in updates]
    assert done == sorted(done), "progress went backwards"
    assert all(0 <= d <= t for _, d, t in updates)
    assert updates[-1][1:] == (total, total)


def test_handoff_on_a_terminal_shows_a_progress_bar_by_bytes(
    cli: Callable[..., Run], table: Path, progress_updates: list[tuple[str, int, int]]
) -> None:
    """On a terminal a bar on stderr moves as the tasks read and write (twice the bytes of
    the inputs in all), not once per segment; stdout holds only the result."""
    finished = [s for s in cl.open_table(table).segments() if s.status == "STREAMING_FINISH"]
    run = cli("handoff", table)
    assert run.stdout.startswith(f"handoff: merged {FINISHED} segment(s)")
    assert len(run.stdout.splitlines()) == 1
    assert {d for d, _, _ in progress_updates} == {"handoff"}
    assert_moves_to_the_end(progress_updates, 2 * sum(s.bytes for s in finished))
    assert len({d for _, d, _ in progress_updates}) > FINISHED  # finer than one per segment
    t = cl.open_table(table)
    assert [s.status for s in t.segments()].count("COMPACTED") == FINISHED
    assert_rows(t.to_arrow(), range(TOTAL_ROWS))


@pytest.mark.parametrize("command", ["verify", "clean", "compact"])
def test_every_long_command_shows_a_progress_bar_on_a_terminal(
    cli: Callable[..., Run],
    table: Path,
    progress_updates: list[tuple[str, int, int]],
    command: str,
) -> None:
    t = cl.open_table(table)
    t.handoff()
    snap = t.snapshot()
    sizes = {s.id: s.bytes for s in t.segments()}
    if command == "verify":
        run = cli("verify", table)
        total = sum(f.committed_length for _, f in snap.iter_files())
        blocklets = sum(f.num_blocklets for _, f in snap.iter_files())
        assert len({d for _, d, _ in progress_updates}) >= blocklets  # one step per blocklet
    elif command == "clean":
        run = cli("clean", table, "--retention", "0s", "--force")
        total = sum(sizes[str(n)] for n in range(FINISHED))  # the handed-off segments' files
    else:
        run = cli("compact", table, "--type", "minor")
        total = 2 * sum(sizes[s] for s in ("0.0", "1.0", "2.0", "3.0"))
    assert run.exit_code == 0, run.stderr
    assert {d for d, _, _ in progress_updates} == {"minor" if command == "compact" else command}
    assert_moves_to_the_end(progress_updates, total)


def test_no_progress_bar_with_json_or_when_stderr_is_not_a_terminal(
    cli: Callable[..., Run], table: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []
    real_init = Progress.__init__

    def init(self: Progress, *args: Any, **kwargs: Any) -> None:
        started.append("bar")
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(Progress, "__init__", init)
    piped = cli("handoff", table)  # CliRunner: stderr is not a terminal
    assert piped.stderr == "" and started == []
    monkeypatch.setattr(err_console, "_force_terminal", True)
    t = cl.open_table(table)
    t.finish_streaming()
    as_json = cli("handoff", table, "--json")
    assert as_json.json()["segments_compacted"] == [str(FINISHED)]
    assert as_json.stderr == "" and started == []


def test_minor_compaction_counts_each_row_once_across_rounds(
    cli: Callable[..., Run], tmp_path: Path
) -> None:
    """Four segments with threshold 2,2: round one merges them into 0.1 and 2.1, round two
    those into 0.2. The rows compacted are the four segments' rows, not twice as many."""
    path = tmp_path / "levels"
    t = cl.create_table(
        path, SCHEMA, sort_columns=["ts"], properties={"compaction_level_threshold": "2,2"}
    )
    for n in range(4):
        t.append(make_rows(range(n * 25, n * 25 + 25)))
        t.finish_streaming()
    t.handoff()
    result = cli("compact", path, "--json").json()
    assert len(result["versions"]) == 2
    assert result["segments_compacted"] == ["0.0", "1.0", "2.0", "3.0", "0.1", "2.1"]
    assert result["segments_created"] == ["0.1", "2.1", "0.2"]
    t = cl.open_table(path)
    assert result["rows"] == 100 == t.count_rows()
    level2 = next(s for s in t.segments() if s.id == "0.2")
    assert (level2.status, level2.rows) == ("SUCCESS", 100)
    # bytes are what the rounds really read: the four inputs, then the two level-1 segments
    sizes = {s.id: s.bytes for s in t.segments()}
    assert result["bytes_read"] == sum(sizes[s] for s in result["segments_compacted"])
    t.compact("major")  # nothing to merge: one segment left
    assert [s.id for s in t.segments() if s.status == "SUCCESS"] == ["0.2"]


def test_minor_compaction_in_two_rounds_human(cli: Callable[..., Run], tmp_path: Path) -> None:
    path = tmp_path / "levels"
    t = cl.create_table(path, SCHEMA, properties={"compaction_level_threshold": "2,2"})
    for n in range(4):
        t.append(make_rows(range(n * 10, n * 10 + 10)))
        t.finish_streaming()
    t.handoff()
    out = cli("compact", path).stdout
    assert out.startswith(
        "minor: merged 4 segment(s) [0.0, 1.0, 2.0, 3.0] into 1 [0.2] in 2 rounds; "
        "40 rows compacted,"
    )


def test_clean(cli: Callable[..., Run], table: Path) -> None:
    cl.open_table(table).handoff()
    dead = files_of(table, "COMPACTED")
    assert len(dead) == FINISHED
    # Default retention (7 days): nothing is old enough.
    assert cli("clean", table, "--json").json()["files"] == []
    dry = cli("clean", table, "--retention", "0s", "--force", "--dry-run", "--json").json()
    assert dry["dry_run"] is True and dry["version"] is None
    assert set(dry["files"]) == dead
    assert dry["bytes"] == sum(os.path.getsize(table / f) for f in dead)
    assert all((table / f).exists() for f in dead)
    human = cli("clean", table, "--retention", "0s", "--force", "--dry-run").stdout
    assert human.startswith(f"would delete {FINISHED} data file(s)")
    run = cli("clean", table, "--retention", "0s", "--force", "--json")
    assert run.exit_code == 0, run.stderr
    result = run.json()
    assert result["dry_run"] is False
    assert set(result["files"]) == dead
    assert result["version"] == cl.open_table(table).version
    assert result["retention_seconds"] == 0
    assert not any((table / f).exists() for f in dead)
    assert_rows(cl.open_table(table).to_arrow(), range(TOTAL_ROWS))
    assert cli("clean", table, "--retention", "2h").stdout.startswith("deleted 0 data file(s)")


def test_clean_takes_plain_seconds(cli: Callable[..., Run], table: Path) -> None:
    """``--retention 3600`` is 3600 seconds, as the safety message says."""
    cl.open_table(table).handoff()
    dead = files_of(table, "COMPACTED")
    kept = cli("clean", table, "--retention", "3600", "--json").json()
    assert (kept["retention_seconds"], kept["files"]) == (3600, [])
    refused = cli("clean", table, "--retention", "1800")
    assert refused.exit_code == 1 and "1800 s is below the 1 hour" in refused.stderr
    gone = cli("clean", table, "--retention", "0", "--force", "--json").json()
    assert gone["retention_seconds"] == 0 and set(gone["files"]) == dead
    assert not any((table / f).exists() for f in dead)
    record = cl.open_table(table).history(1)[0]
    assert (record.operation, record.files_removed) == ("CLEAN", len(dead))
    assert record.bytes_removed == gone["bytes"]


def test_recover(cli: Callable[..., Run], table: Path) -> None:
    t = cl.open_table(table)
    stream = next(iter(t.snapshot().segments["5"].files))
    with open(table / stream, "ab") as f:
        f.write(b"x" * 100)
    orphan = table / "segments" / "2" / "orphan.cblt"
    orphan.write_bytes(b"y" * 50)
    recent = cli("recover", table, "--json").json()  # default --min-age 1h: all too recent
    assert (recent["truncated"], recent["orphans"]) == ([], [])
    assert set(recent["skipped_recent"]) == {stream, "segments/2/orphan.cblt"}
    dry = cli("recover", table, "--dry-run", "--min-age", "0s", "--json").json()
    assert dry["dry_run"] is True
    size = os.path.getsize(table / stream)
    assert dry["truncated"] == [[stream, size, size - 100]]
    assert dry["orphans"] == ["segments/2/orphan.cblt"]
    assert dry["bytes_freed"] == 150
    assert orphan.exists() and os.path.getsize(table / stream) == size
    human = cli("recover", table, "--dry-run", "--min-age", "0s").stdout
    assert human.startswith("recover would: truncate 1 file(s), delete 1 orphan(s), free 150 B")
    assert f"truncate {stream}: {size:,} -> {size - 100:,} bytes" in human
    done = cli("recover", table, "--min-age", "0s", "--json").json()
    assert done["dry_run"] is False and done["bytes_freed"] == 150
    assert not orphan.exists() and os.path.getsize(table / stream) == size - 100
    assert cli("verify", table).exit_code == 0
    # --min-age is a duration: a file changed a moment ago is left alone by 10s.
    orphan.write_bytes(b"z")
    assert cli("recover", table, "--min-age", "10s", "--json").json()["orphans"] == []
    old = time.time() - 60
    os.utime(orphan, (old, old))
    assert cli("recover", table, "--min-age", "10s", "--json").json()["orphans"] == [
        "segments/2/orphan.cblt"
    ]


def test_verify(cli: Callable[..., Run], table: Path) -> None:
    run = cli("verify", table, "--json")
    assert run.exit_code == 0, run.stderr
    result = run.json()
    t = cl.open_table(table)
    snap = t.snapshot()
    assert result["ok"] is True and result["problems"] == []
    assert result["version"] == t.version
    assert result["files_checked"] == FINISHED + 1
    assert result["blocklets_checked"] == sum(f.num_blocklets for _, f in snap.iter_files())
    assert result["rows_checked"] == TOTAL_ROWS
    human = cli("verify", table)
    assert human.exit_code == 0
    assert human.stdout.strip().endswith("OK")
    assert cli("verify", table, "--version", 4, "--json").json()["rows_checked"] == 60

    # Damage: one file truncated, one missing.
    (rel_short, short), (rel_gone, _) = list({f.path: f for _, f in snap.iter_files()}.items())[:2]
    os.truncate(table / rel_short, short.committed_length - 7)
    os.remove(table / rel_gone)
    bad = cli("verify", table, "--json")
    assert bad.exit_code == 1
    report = bad.json()
    assert report["ok"] is False
    assert sorted((p["file"], p["offset"]) for p in report["problems"]) == sorted(
        [(rel_short, short.committed_length - 7), (rel_gone, None)]
    )
    human = cli("verify", table)
    assert human.exit_code == 1
    assert "2 problem(s)" in human.stdout
    assert "the file is missing" in human.stdout
    assert human.stderr == ""  # problems are a report, not an error
