"""The ``carbonlite`` command-line tool (see docs/CLI.md)."""

from __future__ import annotations

# Importing a command's module registers it with ``app``: all of them, here, so that every
# user of ``app`` (the console script, ``python -m carbonlite``, tests) has every command.
from carbonlite.cli import (  # noqa: F401
    alter_cmd,
    create_cmd,
    demo_cmd,
    iceberg_cmd,
    index_cmd,
    ingest_cmd,
    maintenance,
    properties_cmd,
    serve_cmd,
)
from carbonlite.cli.app import app, main

__all__ = ["app", "main"]
