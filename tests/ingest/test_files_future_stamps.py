"""Issue 38 §1: a file stamped in the future (a producer with a skewed clock, a copy that kept
a future time) never makes the files after it look too old. It is read, with a warning, and
its time does not move the record's horizon; and the horizon never passes a file that was
listed and not read yet (one left for a later listing). From Python and from the command."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

import carbonlite as cl
import carbonlite.cli.ingest_cmd  # registers the command
from carbonlite.ingest import FileIngester, FileIngestResult
from carbonlite.ingest.file_notes import LOGGER_NAME
from carbonlite.seams import listening
from tests.cli.conftest import invoke
from tests.support.file_ingest_data import SCHEMA, WITH_PATH, encode, ids, rows, write

DAY = 86_400.0
WEEK_MS = 7 * 86_400_000


def ingest(table: cl.Table | Path, source: Path, **kwargs: object) -> FileIngestResult:
    target = table if isinstance(table, cl.Table) else str(table)
    return FileIngester(target, str(source), format="json", **kwargs).run(  # type: ignore[arg-type]
        stop_at_end=True
    )


def horizon_ms(table: cl.Table, source: Path) -> int:
    uri = FileIngester(table, str(source), format="json").source.uri
    meta = table.refresh().state(f"files:{uri}").schema.metadata
    return int(meta[b"horizon_ms"])


def test_files_after_one_stamped_30_days_ahead_are_all_read(
    tmp_path: Path, source: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's case: two files, one 30 days ahead, then ten ordinary files. Before the
    fix the second run read none of the ten (exit 0, only ``behind_horizon`` grew)."""
    table = cl.create_table(tmp_path / "t", WITH_PATH)
    now = time.time()
    write(source, "a1.json", encode("json", rows([1])), mtime=now - 7200)
    write(source, "a2.json", encode("json", rows([2])), mtime=now - 7200)
    write(source, "future.json", encode("json", rows([100])), mtime=now + 30 * DAY)
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        first = ingest(table, source)
    assert (first.files, first.future_files, first.behind_horizon) == (3, 1, 0)
    warned = [r.getMessage() for r in caplog.records if r.name == LOGGER_NAME]
    assert len(warned) == 1 and "'future.json'" in warned[0], warned
    assert "ahead of this host's clock" in warned[0] and "30.0 days" in warned[0], warned[0]
    assert horizon_ms(table, source) <= time.time() * 1000 - WEEK_MS
    for i in range(10):
        write(source, f"b{i}.json", encode("json", rows([10 + i])))
    second = ingest(table, source)
    assert (second.files, second.rows, second.behind_horizon) == (10, 10, 0)
    assert second.future_files == 0  # warned of once: it was read before
    assert ids(table) == [1, 2, *range(10, 20), 100]
    again = ingest(table, source)
    assert (again.files, again.behind_horizon) == (0, 0)


def test_the_command_warns_of_a_future_file_and_reads_the_files_after_it(
    tmp_path: Path, source: Path
) -> None:
    table = tmp_path / "t"
    cl.create_table(table, SCHEMA)
    now = time.time()
    write(source, "a.json", encode("json", rows([1])), mtime=now - 60)
    write(source, "skewed/host-b.json", encode("json", rows([2])), mtime=now + 30 * DAY)
    args = ["ingest", "files", table, "--source", source, "--format", "json", "--stop-at-end"]
    run = invoke(*args, "--json")
    assert run.exit_code == 0, run.stderr
    assert (run.json()["files"], run.json()["future_files"]) == (2, 1)
    assert run.stderr.startswith("warning: file 'skewed/host-b.json' of "), run.stderr
    assert "ahead of this host's clock" in run.stderr and "Traceback" not in run.stderr
    for i in range(5):
        write(source, f"later-{i}.json", encode("json", rows([10 + i])))
    later = invoke(*args, "--json")
    assert later.exit_code == 0, later.stderr
    out = later.json()
    assert (out["files"], out["rows"], out["behind_horizon"], out["future_files"]) == (5, 5, 0, 0)
    assert later.stderr == ""
    assert ids(cl.open_table(table)) == [1, 2, 10, 11, 12, 13, 14]


def test_the_horizon_never_passes_a_file_left_for_a_later_listing(
    tmp_path: Path, source: Path
) -> None:
    """``slow`` (a copy that keeps its source's time, two minutes old) is still being
    written when it is read: it is left for the next listing. The commit of ``new`` meanwhile
    would put the horizon (one minute behind ``new``) past ``slow``, and ``slow`` would never
    be read; the horizon stops at it instead."""
    table = cl.create_table(tmp_path / "t", WITH_PATH)
    now = time.time()
    slow = write(source, "slow.json", encode("json", rows([1])), mtime=now - 120)
    write(source, "new.json", encode("json", rows([2])), mtime=now)
    listings: list[str] = []

    def copy_goes_on(name: str) -> None:
        if name == "files.after_list":
            listings.append(name)
            if len(listings) == 1:
                with slow.open("ab") as f:
                    f.write(encode("json", rows([3])))
                os.utime(slow, (now - 120, now - 120))  # as cp -p: the time it had

    with listening(copy_goes_on):
        result = ingest(table, source, max_file_age=60)
    assert result.not_ready == 1
    assert (result.files, result.rows) == (2, 3)
    assert ids(table) == [1, 2, 3]
    # once read, the horizon moved on past it: forgotten, counted as behind, never read again
    assert horizon_ms(table, source) >= int(now * 1000) - 60_000
    assert result.behind_horizon == 1
    assert ingest(table, source, max_file_age=60).files == 0
