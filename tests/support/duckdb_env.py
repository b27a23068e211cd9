"""A virtual environment with DuckDB 1.4.4 and its Iceberg and Avro extensions, for the Iceberg
view's third judge (docs/ICEBERG.md): the extensions are wheels on the package index for
duckdb 1.4.4, and the test environment has a newer duckdb. Made once and reused
(``tests/support/side_venv.py``; ``$CARBONLITE_DUCKDB_VENV`` and ``$CARBONLITE_DUCKDB_PYTHON``
override where and with what).

``python -m tests.support.duckdb_env`` makes it and prints its python.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.side_venv import SideVenv

DUCKDB_VERSION = "1.4.4"
EXTENSIONS_VERSION = "1.4.4.20260205"

DUCKDB_VENV = SideVenv(
    name=f"duckdb-{DUCKDB_VERSION}-iceberg",
    env="CARBONLITE_DUCKDB",
    requirements=(
        f"duckdb=={DUCKDB_VERSION}",
        f"duckdb-ext-iceberg=={EXTENSIONS_VERSION}",
        f"duckdb-ext-avro=={EXTENSIONS_VERSION}",
        "pytz",
    ),
    check="import duckdb, pytz",
    hint=f"it needs the package index for duckdb=={DUCKDB_VERSION} and its extension wheels",
    install_timeout=900,
)

SCAN = """
import glob, site, sys
import duckdb
extensions = glob.glob(site.getsitepackages()[0] + "/duckdb_ext/extensions/*/*/")[0]
con = duckdb.connect()
for name in ("avro", "iceberg"):
    con.execute(f"LOAD '{extensions}{name}.duckdb_extension'")
metadata, out = sys.argv[1], sys.argv[2]
con.execute(f"COPY (SELECT * FROM iceberg_scan('{metadata}')) TO '{out}' (FORMAT parquet)")
"""
"""Run in the venv with a metadata file and an output path: DuckDB's ``iceberg_scan`` of the
metadata, written as Parquet for the test to compare."""


def duckdb_python() -> Path:
    return DUCKDB_VENV.python()


if __name__ == "__main__":
    started = time.monotonic()
    python = duckdb_python()
    print(f"{python} ({time.monotonic() - started:.0f} s)")
