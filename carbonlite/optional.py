"""Optional dependencies (pandas, Polars, DuckDB, Spark), imported only when used."""

from __future__ import annotations

import importlib
from typing import Any

from carbonlite.errors import MissingDependencyError

__all__ = ["require"]


def require(module: str, extra: str) -> Any:
    """``module`` imported, or :class:`MissingDependencyError` saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(
            f"this needs {module}, which is not installed: pip install 'carbonlite[{extra}]'"
        ) from None
