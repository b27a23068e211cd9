"""DuckDB reads CarbonLite tables, with its filters and projections pushed into the scan.

Two ways, both by DuckDB's replacement scan (a Python variable named in the SQL):

- a :class:`~carbonlite.Table` (or a ``Table.scan(...)``) is an Arrow C stream: DuckDB reads
  every row of it and filters on its side. Simple, no pushdown.
- :func:`source` wraps a table in a DuckDB scan source (the protocol of DuckDB 2's
  ``duckdb._sources``): DuckDB hands it the columns a query needs and the filters it can
  express in Arrow, and the scan prunes blocklets by min/max with them, decodes only those
  columns and applies the filters exactly. ``EXPLAIN`` shows the filters as pushed.

The source protocol is DuckDB's own (its pyarrow Dataset support uses it); it is marked
internal in DuckDB, so :func:`source` checks for it and falls back to the plain stream (no
pushdown, same rows) on a DuckDB without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from carbonlite.arguments import VersionLike
from carbonlite.errors import CarbonLiteError
from carbonlite.optional import require
from carbonlite.reader.expression import parse_filter
from carbonlite.table import Table

__all__ = ["pushdown_supported", "source"]


def pushdown_supported() -> bool:
    """Whether the installed DuckDB offers the scan-source protocol :func:`source` uses."""
    require("duckdb", "duckdb")
    try:
        from duckdb._sources import ArrowScanSource  # noqa: F401
        from duckdb._sources.to_arrow import to_arrow  # noqa: F401
    except ImportError:
        return False
    return True


def _source_class() -> type:
    from duckdb._sources import ArrowScanSource
    from duckdb._sources.nodes import Untranslatable
    from duckdb._sources.to_arrow import nan_may_satisfy, to_arrow

    class CarbonLiteSource(ArrowScanSource):
        """One table at one version, scanned afresh for every query."""

        schema_is_stable = True

        def __init__(self, table: Table, version: int) -> None:
            super().__init__(table)
            self.table = table
            self.version = version
            self.schema: pa.Schema = table.snapshot(version).schema
            self.pushed: list[Any] = []
            """The Arrow filters of the last stream (for tests and ``explain``)."""

        def rows(self) -> int | None:
            return self.table.count_rows(version=self.version)

        def __arrow_c_schema__(self) -> object:
            return self.schema.__arrow_c_schema__()

        def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
            return self.table.scan(version=self.version).__arrow_c_stream__(requested_schema)

        def accepts(self, predicate: Any) -> bool:
            """Filters DuckDB can state in Arrow exactly, except where NaN could match
            (min/max statistics leave NaN out, as for Parquet row groups)."""
            try:
                parse_filter(to_arrow(predicate, self.schema), self.schema, where=self.table.path)
            except (Untranslatable, CarbonLiteError):
                return False
            return not nan_may_satisfy(predicate, self.schema)

        def stream(
            self, columns: Sequence[int] | None, filters: Sequence[Any]
        ) -> tuple[object, bool]:
            expression = None
            for predicate in filters:
                term = to_arrow(predicate, self.schema)
                expression = term if expression is None else expression & term
            self.pushed = [] if expression is None else [expression]
            names = None if columns is None else [self.schema.names[i] for i in columns]
            scan = self.table.scan(columns=names, filter=expression, version=self.version)
            return scan.to_reader().__arrow_c_stream__(), names is not None

    return CarbonLiteSource


def source(table: Table, *, version: VersionLike | None = None) -> Any:
    """``table`` (at ``version``, the loaded one by default) as a DuckDB scan source::

        events = carbonlite.duckdb.source(t)
        duckdb.sql("SELECT kind, count(*) FROM events WHERE ts >= '2026-01-02' GROUP BY kind")

    DuckDB's projection and filters reach CarbonLite's pruning. Without DuckDB's source
    protocol, a scan that DuckDB reads in full (the same rows)."""
    require("duckdb", "duckdb")
    number = table.version if version is None else table.version_at(version)
    if not pushdown_supported():
        return table.scan(version=number)
    return _source_class()(table, number)
