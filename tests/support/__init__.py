"""Helpers shared by the tests: worker processes, servers, data and tables."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository root: the working directory of every helper process the tests start."""
