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

import time
from pathlib import Path

from tests.support.side_venv import SideVenv

FLINK_VERSION = "2.3.0"
INSTALL_TIMEOUT = 3600
"""Seconds for ``pip install apache-flink`` (hundreds of MB of wheels, some built from source)."""

FLINK_VENV = SideVenv(
    name=f"pyflink-{FLINK_VERSION}",
    env="CARBONLITE_FLINK",
    requirements=(f"apache-flink=={FLINK_VERSION}",),
    check="import pyflink.datastream, pyflink.common",
    hint=(
        f"it needs the package index for apache-flink=={FLINK_VERSION}, which has wheels up "
        "to CPython 3.12: set CARBONLITE_FLINK_PYTHON to such an interpreter on a newer Python"
    ),
    install_timeout=INSTALL_TIMEOUT,
)


def base_python() -> str:
    """The interpreter the venv is made with."""
    return FLINK_VENV.base_python()


def venv_dir() -> Path:
    """Where the PyFlink venv is (or will be)."""
    return FLINK_VENV.venv_dir()


def flink_python() -> Path:
    """The python of a venv with ``apache-flink`` installed: made now unless already complete.

    Raises ``RuntimeError`` with pip's output when it cannot be made (no package index, say).
    """
    return FLINK_VENV.python()


if __name__ == "__main__":
    started = time.monotonic()
    python = flink_python()
    print(f"{python} ({time.monotonic() - started:.0f} s)")
