"""A virtual environment with PyFlink for the Flink end-to-end test (docs/ENGINES.md, "Flink").

PyFlink 2.3 pins ``py4j==0.10.9.7``, ``pyarrow<21``, ``pandas<2.3`` and ``apache-beam<=2.61``:
it cannot share the test environment (pyspark 4.3 needs py4j 0.10.9.9, CarbonLite's dev
extras pyarrow 26). So the test runs its Flink job with the python of a venv of its own,
made here once and reused: at ``$CARBONLITE_FLINK_VENV`` if set, else
``~/.cache/carbonlite/pyflink-2.3.0-py3XX``. It is made with the interpreter running the tests,
or ``$CARBONLITE_FLINK_PYTHON`` if set: apache-flink 2.3.0 has wheels up to CPython 3.12 and
none for 3.13, so a test run on 3.13 needs a 3.12 (or older) interpreter named there.

The venv is made under an ``fcntl`` lock (two test runs never build it at once) and marked
complete by a file written only after ``import pyflink`` worked in it; a venv without that
mark is half-built (a killed install) and is removed and made again. Making it needs the
package index (hundreds of MB of wheels, 844 MB installed); without one it fails with pip's output, never skips.

``python -m tests.support.flink_env`` makes it and prints its python (and how long it took).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

FLINK_VERSION = "2.3.0"
INSTALL_TIMEOUT = 3600
"""Seconds for ``pip install apache-flink`` (hundreds of MB of wheels, some built from source)."""
_MARK = ".carbonlite-complete"


def base_python() -> str:
    """The interpreter the venv is made with."""
    return os.environ.get("CARBONLITE_FLINK_PYTHON") or sys.executable


def venv_dir() -> Path:
    """Where the PyFlink venv is (or will be)."""
    configured = os.environ.get("CARBONLITE_FLINK_VENV")
    if configured:
        return Path(configured).expanduser()
    version = subprocess.run(
        [base_python(), "-c", "import sys; print(f'py{sys.version_info[0]}{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    return Path.home() / ".cache" / "carbonlite" / f"pyflink-{FLINK_VERSION}-{version}"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def flink_python() -> Path:
    """The python of a venv with ``apache-flink`` installed: made now unless already complete.

    Raises ``RuntimeError`` with pip's output when it cannot be made (no package index, say).
    """
    venv = venv_dir()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second run waits here while the first builds
        if not (venv / _MARK).exists():
            _build(venv)
    return venv_python(venv)


def _build(venv: Path) -> None:
    if venv.exists():
        shutil.rmtree(venv)  # no mark: an install that did not finish
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_USER")}
    _run([base_python(), "-m", "venv", str(venv)], env, timeout=300)
    python = str(venv_python(venv))
    _run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            f"apache-flink=={FLINK_VERSION}",
        ],
        env,
        timeout=INSTALL_TIMEOUT,
    )
    _run([python, "-c", "import pyflink.datastream, pyflink.common"], env, timeout=300)
    (venv / _MARK).write_text(f"apache-flink=={FLINK_VERSION}\n")


def _run(command: list[str], env: dict[str, str], *, timeout: float) -> None:
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(
            f"making the PyFlink venv: {command} did not finish in {timeout} s"
        ) from e
    if done.returncode != 0:
        raise RuntimeError(
            f"making the PyFlink venv failed (it needs the package index for "
            f"apache-flink=={FLINK_VERSION}, which has wheels up to CPython 3.12: set "
            f"CARBONLITE_FLINK_PYTHON to such an interpreter on a newer Python): "
            f"{command} exited {done.returncode}\n"
            f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )


if __name__ == "__main__":
    started = time.monotonic()
    python = flink_python()
    print(f"{python} ({time.monotonic() - started:.0f} s)")
