"""The ``carbonlite`` command-line tool (see docs/CLI.md)."""

from __future__ import annotations

from carbonlite.cli.app import app, main

__all__ = ["app", "main"]
