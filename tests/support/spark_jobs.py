"""Spark drivers the tests run as subprocesses, started in the background.

A driver with its own SparkSession takes most of a minute (a JVM, Python workers, the first
micro-batch), so tests/spark/conftest.py starts every driver a selected test needs at the
beginning of the session, next to the session's own Spark, and the test collects the
result when it runs. Each driver runs in a new session (``start_new_session=True``), so a
driver that kills its process group, or a test that gives up on it, takes nothing else down.

A job is named in :data:`JOBS`; its function prepares the job's directory and returns the
command line. ``KILL_BATCH``, ``CLUSTER_FILES`` and ``CLUSTER_ROWS`` are the parameters the
tests check against.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support import REPO
from tests.support.spark_data import write_source_files

__all__ = ["JOBS", "Job", "JobResult", "start_job"]

KILL_BATCH = 1
KILL_FILES = 4
KILL_ROWS = 50
CLUSTER_FILES = 3
CLUSTER_ROWS = 400
MERGE_CLUSTER_ROWS = 2_000
DEMO_ROWS = 20_000
DEMO_JSON_ROWS = 2_000


def kill_driver(directory: Path) -> list[str]:
    """tests/support/spark_kill_driver.py over ``KILL_FILES`` files (see that module)."""
    write_source_files(str(directory / "src"), KILL_FILES, KILL_ROWS)
    spec = {
        "source": str(directory / "src"),
        "table": str(directory / "table"),
        "checkpoint": str(directory / "ck"),
        "kill_batch": KILL_BATCH,
        "report": str(directory / "killed.json"),
    }
    return [sys.executable, "-m", "tests.support.spark_kill_driver", json.dumps(spec)]


def cluster_driver(directory: Path) -> list[str]:
    """tests/support/spark_cluster_driver.py on ``local-cluster[2,1,1024]``."""
    spec = {"dir": str(directory), "files": CLUSTER_FILES, "rows": CLUSTER_ROWS}
    return [sys.executable, "-m", "tests.support.spark_cluster_driver", json.dumps(spec)]


def merge_cluster_driver(directory: Path) -> list[str]:
    """tests/support/spark_merge_cluster_driver.py on ``local-cluster[2,1,1024]``."""
    spec = {"dir": str(directory), "rows": MERGE_CLUSTER_ROWS}
    return [sys.executable, "-m", "tests.support.spark_merge_cluster_driver", json.dumps(spec)]


def demo(directory: Path) -> list[str]:
    """The installed ``carbonlite demo`` console script."""
    script = shutil.which("carbonlite")
    if script is None:
        raise RuntimeError("the carbonlite console script is not installed (pip install -e .)")
    return [script, "demo", "--dir", str(directory / "demo"), "--rows", str(DEMO_ROWS)]


def demo_json(directory: Path) -> list[str]:
    """``carbonlite demo --json`` on ``DEMO_JSON_ROWS`` events."""
    script = shutil.which("carbonlite")
    if script is None:
        raise RuntimeError("the carbonlite console script is not installed (pip install -e .)")
    return [
        script,
        "demo",
        "--dir",
        str(directory / "demo"),
        "--rows",
        str(DEMO_JSON_ROWS),
        "--json",
    ]


JOBS: dict[str, Callable[[Path], list[str]]] = {
    "kill_driver": kill_driver,
    "cluster_driver": cluster_driver,
    "merge_cluster_driver": merge_cluster_driver,
    "demo": demo,
    "demo_json": demo_json,
}


@dataclass(frozen=True)
class JobResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@dataclass
class Job:
    name: str
    directory: Path
    proc: subprocess.Popen[bytes]
    started: float
    _result: JobResult | None = None

    def wait(self, timeout: float) -> JobResult:
        """The finished job; on timeout its whole session is killed and AssertionError raised."""
        if self._result is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"background job {self.name} did not finish in {timeout} s:\n"
                    f"{self._read('stdout')}\n{self._read('stderr')[-4000:]}"
                ) from None
            self._result = JobResult(
                self.proc.returncode,
                self._read("stdout"),
                self._read("stderr"),
                time.monotonic() - self.started,
            )
        return self._result

    def _read(self, stream: str) -> str:
        return (self.directory / f"{stream}.txt").read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def start_job(name: str, directory: Path) -> Job:
    """Prepare ``directory`` and start job ``name`` in a new session, output to files there."""
    directory.mkdir(parents=True, exist_ok=True)
    argv = JOBS[name](directory)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        ),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    with open(directory / "stdout.txt", "wb") as out, open(directory / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=out, stderr=err, start_new_session=True
        )
    return Job(name, directory, proc, time.monotonic())
