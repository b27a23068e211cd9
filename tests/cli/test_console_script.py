"""The installed ``carbonlite`` console script and ``python -m carbonlite``, as real processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import carbonlite as cl
from tests.cli.conftest import COMMANDS, FINISHED, TOTAL_ROWS
from tests.support import REPO


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=120)


def test_console_script_inspect_json(table: Path) -> None:
    exe = shutil.which("carbonlite") or os.path.join(os.path.dirname(sys.executable), "carbonlite")
    assert os.path.exists(exe), "the carbonlite console script is not installed"
    done = _run([exe, "inspect", str(table), "--json"])
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["version"] == cl.open_table(table).version
    assert info["summary"]["rows"] == TOTAL_ROWS
    assert len(info["segments"]) == FINISHED + 1
    failed = _run([exe, "inspect", str(table / "missing")])
    assert failed.returncode == 1
    assert failed.stdout == ""
    assert failed.stderr.startswith("error: TableNotFoundError")
    assert "Traceback" not in failed.stderr


def test_python_dash_m_help() -> None:
    done = _run([sys.executable, "-m", "carbonlite", "--help"])
    assert done.returncode == 0, done.stderr
    for command in COMMANDS:
        assert command in done.stdout
