"""Iceberg metadata for CarbonLite tables: the columnar Parquet files of a version published
as an Iceberg table (format v2) under ``<table>/metadata/``, for every engine that reads
Iceberg (docs/ICEBERG.md). Knows tables only through snapshots and storage handles."""

from __future__ import annotations

from carbonlite.iceberg.export import IcebergState, export_version, iceberg_format, read_state
from carbonlite.iceberg.schema import IcebergTypeError, check_iceberg_table, iceberg_schema

__all__ = [
    "IcebergState",
    "IcebergTypeError",
    "check_iceberg_table",
    "export_version",
    "iceberg_format",
    "iceberg_schema",
    "read_state",
]
