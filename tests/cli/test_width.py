"""Human output fits the terminal: at 80 columns no line is longer, no value is cut short
with an ellipsis, and the values that matter (ids, statuses, counts, versions, operations,
writers, file names) are there whole; what did not fit is named under the table."""

from __future__ import annotations

import fcntl
import os
import struct
import termios
from collections.abc import Callable
from pathlib import Path

import pytest

import carbonlite as cl
from carbonlite.cli.layout import PIPE_WIDTH, Col, fit_columns, fitted_table, output_width
from tests.cli.conftest import FINISHED, TOTAL_ROWS, Run

WIDTH = 80


def assert_fits(run: Run, width: int = WIDTH) -> list[str]:
    """The words of the output (punctuation around them stripped), once every line is checked
    to fit."""
    assert run.exit_code in (0, 1), run.stderr
    lines = run.stdout.splitlines()
    assert lines, "no output"
    too_long = [line for line in lines if len(line) > width]
    assert not too_long, f"{len(too_long)} line(s) wider than {width}:\n" + "\n".join(too_long)
    assert "…" not in run.stdout and "..." not in run.stdout.replace(" .. ", " ")
    return [word.strip(",;:()[]") for word in run.stdout.split()]


def left_out(run: Run) -> str:
    """The note under the last table that names the columns left out."""
    note = " ".join(run.stdout[run.stdout.rindex("(") :].split())
    assert "left out to fit" in note
    return note


@pytest.fixture
def busy(table: Path) -> Path:
    """The table after a handoff and a minor compaction (every status, long operation names,
    two levels of segments)."""
    t = cl.open_table(table, writer_id="maintenance-writer")
    t.handoff()
    t.compact("minor")
    return table


def test_segments_at_80_columns(cli: Callable[..., Run], busy: Path) -> None:
    tokens = assert_fits(cli("segments", busy, "--all", columns=WIDTH))
    for s in cl.open_table(busy).segments():
        assert s.id in tokens and s.status in tokens and f"{s.rows:,}" in tokens
        if s.merged_into:
            assert s.merged_into in tokens
    assert "STREAMING_FINISH" not in tokens  # none left: all were handed off
    wide = cli("segments", busy, "--all").stdout  # a pipe: 200 columns, every column
    assert "start time" in wide and "left out" not in wide


def test_history_at_80_columns(cli: Callable[..., Run], busy: Path) -> None:
    """One line per commit: version, time, operation, rows, duration; at 100 columns the
    writer too."""
    run = cli("history", busy, columns=WIDTH)
    assert_fits(run)
    history = cl.open_table(busy).history()
    lines = [line for line in run.stdout.splitlines() if line[:7].strip().isdigit()]
    assert len(lines) == len(history)
    for line, r in zip(lines, history, strict=True):
        date, time_ = r.timestamp.strftime("%Y-%m-%d %H:%M:%S").split()
        assert line.split()[:3] == [str(r.version), date, time_]
        assert r.operation in line and f"{r.rows:,}" in line.split()
    assert "writer" in left_out(run) and "parameters" in left_out(run)
    wider = cli("history", busy, columns=100)
    tokens = assert_fits(wider, 100)
    assert "maintenance-writer" in tokens
    assert all(r.writer_id in tokens for r in history)


def test_inspect_at_80_columns(cli: Callable[..., Run], busy: Path) -> None:
    run = cli("inspect", busy, columns=WIDTH)
    tokens = assert_fits(run)
    t = cl.open_table(busy)
    assert t.path in tokens and t.table_id in tokens
    assert "ts (sort)" in run.stdout and "timestamp[us, tz=UTC]" in run.stdout
    assert "handoff_blocklet_rows" in tokens and "checkpoint_interval" in tokens
    for s in t.segments():
        if s.status == "SUCCESS":
            assert s.id in tokens


def test_inspect_blocklets_at_80_columns(cli: Callable[..., Run], table: Path) -> None:
    run = cli("inspect", table, "--blocklets", columns=WIDTH)
    tokens = assert_fits(run)
    info = cli("inspect", table, "--blocklets", "--json").json()
    for b in info["blocklets"]:
        assert b["file"].rsplit("/", 1)[-1] in tokens and str(b["offset"]) in tokens
        # the sort column's bounds stay, dates and times whole
        date, time_ = b["columns"]["ts"]["min"].split()
        assert date in tokens and time_ in tokens
    assert "id min..max" in left_out(run)


def test_files_at_80_columns(cli: Callable[..., Run], busy: Path) -> None:
    tokens = assert_fits(cli("files", busy, "--all", columns=WIDTH))
    for f in cl.open_table(busy).snapshot().segments.values():
        for path, state in f.files.items():
            assert path.rsplit("/", 1)[-1] in tokens
            assert f"{state.num_rows:,}" in tokens
            assert str(state.num_blocklets) in tokens


def test_verify_problems_at_80_columns(cli: Callable[..., Run], table: Path) -> None:
    snap = cl.open_table(table).snapshot()
    short = next(f for _, f in snap.iter_files())
    os.truncate(table / short.path, short.committed_length - 7)
    run = cli("verify", table, columns=WIDTH)
    assert run.exit_code == 1
    tokens = assert_fits(run)
    assert short.path in tokens and str(short.committed_length - 7) in tokens
    assert "1 problem(s)" in run.stdout


def test_maintenance_messages_at_80_columns(cli: Callable[..., Run], table: Path) -> None:
    handoff = assert_fits(cli("handoff", table, columns=WIDTH))
    assert f"{FINISHED * 40:,}" in handoff
    assert all(f"{i}.0" in handoff for i in range(FINISHED))
    clean = assert_fits(
        cli("clean", table, "--retention", "0", "--force", "--dry-run", columns=WIDTH)
    )
    for i in range(FINISHED):
        assert any(token.startswith(f"segments/{i}/") for token in clean)
    recover = assert_fits(cli("recover", table, "--dry-run", columns=WIDTH))
    assert "recover" in recover
    assert cl.open_table(table).count_rows() == TOTAL_ROWS


def test_forty_columns_still_cut_nothing(cli: Callable[..., Run], busy: Path) -> None:
    """Narrower than the columns that must stay: values fold onto more lines, but are never
    replaced by an ellipsis."""
    for command in (["history"], ["segments", "--all"], ["inspect"]):
        assert_fits(cli(*command, busy, columns=40), 40)


def test_columns_are_left_out_by_priority() -> None:
    cols = [Col("a"), Col("b", keep=10), Col("c", keep=50), Col("d", keep=10)]
    rows = [["x" * 10] * 4]
    assert fit_columns(cols, rows, 100) == [0, 1, 2, 3]
    assert fit_columns(cols, rows, 34) == [0, 1, 2]  # d: lowest, rightmost among equals
    assert fit_columns(cols, rows, 22) == [0, 2]
    assert fit_columns(cols, rows, 5) == [0]  # what must stay, stays
    text = [["x" * 10, "one two three"]]
    # a column that may wrap is left out rather than wrapped while something can go
    assert fit_columns([Col("a"), Col("b", keep=10, wrap=True)], text, 17) == [0]
    # running text counts at its squeeze (its longest word at least), and wraps
    assert fit_columns([Col("a"), Col("b", keep=10, squeeze=5)], text, 17) == [0, 1]
    # a column that must stay wraps when nothing else can go
    table, hidden = fitted_table(None, [Col("a"), Col("b", wrap=True)], text, 17)
    assert hidden == [] and [c.no_wrap for c in table.columns] == [True, False]


def test_output_width(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    with open(tmp_path / "out.txt", "w") as piped:
        assert output_width(piped) == PIPE_WIDTH
    leader, follower = os.openpty()
    try:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 93, 0, 0))
        with os.fdopen(follower, "w", closefd=False) as terminal:
            assert output_width(terminal) == 93
            monkeypatch.setenv("COLUMNS", "80")  # COLUMNS wins, as in rich and click
            assert output_width(terminal) == 80
            monkeypatch.setenv("COLUMNS", "12")
            assert output_width(terminal) == 40  # never narrower than that
    finally:
        os.close(leader)
        os.close(follower)
