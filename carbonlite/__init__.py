"""CarbonLite: a streaming columnar table format for Python and Spark."""

from __future__ import annotations

from carbonlite._version import __version__
from carbonlite.errors import (
    CarbonLiteError,
    CommitConflictError,
    CommitStateUnknownError,
    CorruptDataError,
    DataUnavailableError,
    InvalidFilterError,
    InvalidOptionError,
    MissingDependencyError,
    SchemaMismatchError,
    StorageError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedFormatError,
    UnsupportedStorageError,
    UnsupportedTypeError,
    VersionNotFoundError,
)
from carbonlite.reader.scan import TableScan
from carbonlite.table import (
    CommitRecord,
    CommitResult,
    SegmentInfo,
    Table,
    create_table,
    open_table,
)

__all__ = [
    "CarbonLiteError",
    "CommitConflictError",
    "CommitRecord",
    "CommitResult",
    "CommitStateUnknownError",
    "CorruptDataError",
    "DataUnavailableError",
    "InvalidFilterError",
    "InvalidOptionError",
    "MissingDependencyError",
    "SchemaMismatchError",
    "SegmentInfo",
    "StorageError",
    "Table",
    "TableExistsError",
    "TableNotFoundError",
    "TableScan",
    "UnsupportedFormatError",
    "UnsupportedStorageError",
    "UnsupportedTypeError",
    "VersionNotFoundError",
    "__version__",
    "create_table",
    "open_table",
]
