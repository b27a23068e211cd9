"""DuckDB reads CarbonLite tables, with its filters and projections pushed into the scan.

Two ways, both by DuckDB's replacement scan (a Python variable named in the SQL, or a name
given with ``con.register``):

- a :class:`~carbonlite.Table` (or a :class:`~carbonlite.TableScan` from ``t.scan(...)``) is
  an Arrow C stream: DuckDB reads every row of it (every column, whatever the query names)
  and filters on its side. Each query starts a new stream. Simple; no pushdown beyond what
  was given to ``scan``.
- :func:`source` wraps a table in a DuckDB scan source (the protocol of DuckDB 2's
  ``duckdb._sources``): DuckDB hands it the columns a query needs and the filters it can
  express in Arrow, and the scan prunes blocklets by min/max with them, decodes only those
  columns and applies the filters exactly. ``EXPLAIN`` shows the filters as pushed.

The source protocol is DuckDB's own (its pyarrow Dataset support uses it); DuckDB marks it
internal, so :func:`source` checks for it and falls back to the plain stream (no pushdown,
the same rows) on a DuckDB without it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from carbonlite.arguments import VersionLike
from carbonlite.errors import CarbonLiteError, InvalidOptionError
from carbonlite.optional import require
from carbonlite.reader.expression import check_filter
from carbonlite.table import Table

__all__ = ["pushdown_supported", "source"]


def pushdown_supported() -> bool:
    """Whether the installed DuckDB offers the scan-source protocol :func:`source` uses."""
    require("duckdb", "duckdb")
    try:
        _source_class()
    except (ImportError, AttributeError):
        return False
    return True


@functools.cache
def _source_class() -> type:
    from duckdb._sources import ArrowScanSource
    from duckdb._sources.nodes import Untranslatable
    from duckdb._sources.to_arrow import to_arrow

    class CarbonLiteSource(ArrowScanSource):
        """One table at one version, scanned afresh (and planned afresh) for every query."""

        schema_is_stable = True

        def __init__(self, table: Table, version: int) -> None:
            super().__init__(table)
            self.table = table
            self.version = version
            self.schema: pa.Schema = table.snapshot(version).schema
            self.pushed: list[Any] = []
            """The Arrow filter of the last stream, if any (for tests and debugging)."""
            self.last_scan: Any = None
            """The :class:`~carbonlite.TableScan` of the last stream (its ``plan`` says
            how many blocklets were pruned)."""

        def __repr__(self) -> str:
            return f"carbonlite.duckdb.source({self.table.path!r}, version={self.version})"

        def rows(self) -> int | None:
            return self.table.count_rows(version=self.version)

        def __arrow_c_schema__(self) -> object:
            return self.schema.__arrow_c_schema__()

        def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
            """Every row (DuckDB's replacement scan looks for this to take the object; a
            query then reads through :meth:`stream`)."""
            scan = self.table.scan(version=self.version)
            return scan.__arrow_c_stream__(requested_schema)

        def accepts(self, predicate: Any) -> bool:
            """Filters DuckDB can state in Arrow exactly and Arrow can evaluate on the
            table's types. Unlike a Parquet dataset's, these include filters NaN satisfies
            (``x > 1``, which DuckDB states as ``x > 1 or x != x``): blocklet statistics
            count NaN apart from min/max, and the pruning never skips a blocklet whose NaN
            rows could match."""
            try:
                check_filter(to_arrow(predicate, self.schema), self.schema, where="DuckDB")
            except (Untranslatable, CarbonLiteError):
                return False
            return True

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
            self.last_scan = scan
            return scan.__arrow_c_stream__(), names is not None

    return CarbonLiteSource


def source(table: Table, *, version: VersionLike | None = None) -> Any:
    """``table`` (at ``version``: a number, a datetime or an ISO 8601 string; the loaded
    version by default) as a DuckDB scan source::

        events = carbonlite.duckdb.source(t)
        duckdb.sql("SELECT kind, count(*) FROM events WHERE ts >= '2026-01-02' GROUP BY kind")

    DuckDB's projection and filters reach CarbonLite's pruning. Without DuckDB's source
    protocol, a :class:`~carbonlite.TableScan` DuckDB reads in full (the same rows)."""
    require("duckdb", "duckdb")
    if not isinstance(table, Table):
        raise InvalidOptionError(
            f"source() reads a carbonlite.Table, not {type(table).__name__} {table!r}: open it "
            "first, source(carbonlite.open_table(path))"
        )
    number = table.snapshot().version if version is None else table.version_at(version)
    if not pushdown_supported():
        return table.scan(version=number)
    return _source_class()(table, number)
