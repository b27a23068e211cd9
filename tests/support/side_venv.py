"""Virtual environments of their own for tests whose engine cannot share the test environment
(PyFlink pins an old pyarrow; DuckDB's Iceberg extension exists for duckdb 1.4, the test
environment has a newer duckdb).

A :class:`SideVenv` is made once and reused: at ``$<ENV>_VENV`` if set, else
``~/.cache/carbonlite/<name>-py3XX``, with the interpreter running the tests or
``$<ENV>_PYTHON``. It is made under an ``fcntl`` lock (two test runs never build it at once)
and marked complete by a file written only after its check import worked in it; a venv without
that mark is half-built (a killed install) and is removed and made again. Making it needs the
package index; without one it fails with pip's output, never skips.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SideVenv"]

_MARK = ".carbonlite-complete"


@dataclass(frozen=True)
class SideVenv:
    name: str
    """``pyflink-2.3.0``: the cache directory's name, before the Python version."""
    env: str
    """The prefix of the environment variables that override it (``CARBONLITE_FLINK``)."""
    requirements: tuple[str, ...]
    check: str
    """Python code that must run in it (the imports the tests need)."""
    hint: str
    """What to tell when it cannot be made."""
    install_timeout: float = 3600

    def base_python(self) -> str:
        """The interpreter the venv is made with."""
        return os.environ.get(f"{self.env}_PYTHON") or sys.executable

    def venv_dir(self) -> Path:
        """Where the venv is (or will be)."""
        configured = os.environ.get(f"{self.env}_VENV")
        if configured:
            return Path(configured).expanduser()
        version = subprocess.run(
            [
                self.base_python(),
                "-c",
                "import sys; print(f'py{sys.version_info[0]}{sys.version_info[1]}')",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        return Path.home() / ".cache" / "carbonlite" / f"{self.name}-{version}"

    def python(self) -> Path:
        """The venv's python: the venv is made now unless already complete. Raises
        ``RuntimeError`` with pip's output when it cannot be made."""
        venv = self.venv_dir()
        venv.parent.mkdir(parents=True, exist_ok=True)
        with open(venv.parent / f".{venv.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a second run waits here while the first builds
            if not (venv / _MARK).exists():
                self._build(venv)
        return venv / "bin" / "python"

    def _build(self, venv: Path) -> None:
        if venv.exists():
            shutil.rmtree(venv)  # no mark: an install that did not finish
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_USER")}
        self._run([self.base_python(), "-m", "venv", str(venv)], env, timeout=300)
        python = str(venv / "bin" / "python")
        install = [python, "-m", "pip", "install", "--disable-pip-version-check"]
        self._run([*install, *self.requirements], env, timeout=self.install_timeout)
        self._run([python, "-c", self.check], env, timeout=300)
        (venv / _MARK).write_text("\n".join(self.requirements) + "\n")

    def _run(self, command: list[str], env: dict[str, str], *, timeout: float) -> None:
        try:
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(
                f"making the {self.name} venv: {command} did not finish in {timeout} s"
            ) from e
        if done.returncode != 0:
            raise RuntimeError(
                f"making the {self.name} venv failed ({self.hint}): {command} exited "
                f"{done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
            )
