from __future__ import annotations

from tests.support.tables import mem_uri

__all__ = ["mem_uri"]
