"""A reader that goes away (issue 38 §3: ``carbonlite inspect PATH --blocklets | head -1``
exited 1). Every command, human or ``--json``, carries on when its stdout is closed: its exit
status is its own, and nothing is printed about the pipe.

The pipe is made small (one page, ``F_SETPIPE_SZ``), each command's output is checked to be
more than twice as large, and the test reads only the first line: the command is still
writing when the reader closes its end, so a write fails, on any machine, however fast.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from tests.cli.conftest import invoke
from tests.support import REPO

PIPE_BYTES = 4096
COLUMNS = 200

COMMANDS = [
    ("inspect", "--blocklets"),
    ("inspect", "--blocklets", "--json"),
    ("history",),
    ("history", "--json"),
    ("files",),
    ("files", "--json"),
    ("segments",),
    ("segments", "--json"),
]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """150 commits, each its own segment (the size limit rolls every one over) of two
    blocklets: every command above prints far more than the pipe holds."""
    path = tmp_path_factory.mktemp("pipe") / "t"
    t = cl.create_table(
        path,
        pa.schema([("id", pa.int64())]),
        properties={"blocklet_max_rows": "5", "streaming_segment_max_bytes": "1"},
    )
    for n in range(0, 1500, 10):
        t.append(pa.table({"id": list(range(n, n + 10))}))
    return path


def first_line_then_close(table: Path, args: tuple[str, ...]) -> tuple[int, str, str]:
    """Run ``carbonlite`` on ``table`` into a one-page pipe, read its first line byte by byte
    and close the pipe. Returns (status, the line, stderr)."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    proc = subprocess.Popen(
        [sys.executable, "-m", "carbonlite", args[0], str(table), *args[1:]],
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": str(COLUMNS)},
    )
    os.close(write_end)
    got = b""
    try:
        while not got.endswith(b"\n"):
            byte = os.read(read_end, 1)
            if not byte:
                break
            got += byte
    finally:
        os.close(read_end)  # the reader goes away
    _, err = proc.communicate(timeout=120)
    return proc.returncode, got.decode(), err


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a) for a in COMMANDS])
def test_a_command_whose_reader_leaves_finishes_as_it_would(
    table: Path, args: tuple[str, ...]
) -> None:
    whole = invoke(args[0], table, *args[1:], columns=COLUMNS)
    assert whole.exit_code == 0, whole.stderr
    assert len(whole.stdout.encode()) > 2 * PIPE_BYTES, "the output must not fit in the pipe"
    status, first, err = first_line_then_close(table, args)
    assert first == whole.stdout.splitlines(keepends=True)[0]
    assert (status, err) == (0, "")


def test_an_error_keeps_its_status_and_message_when_stdout_is_closed(tmp_path: Path) -> None:
    status, got, err = first_line_then_close(tmp_path / "nothing", ("inspect", "--blocklets"))
    assert (status, got) == (1, "")
    assert err.startswith("error: TableNotFoundError: no CarbonLite table at"), err
    assert "Traceback" not in err
