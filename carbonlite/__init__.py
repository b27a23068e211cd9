"""CarbonLite: a streaming columnar table format for Python and Spark."""

from __future__ import annotations

from carbonlite.errors import (
    CarbonLiteError,
    CommitConflictError,
    CorruptDataError,
    DataUnavailableError,
    InvalidFilterError,
    InvalidOptionError,
    SchemaMismatchError,
    StorageError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedFormatError,
    UnsupportedStorageError,
    UnsupportedTypeError,
    VersionNotFoundError,
)

__version__ = "0.1.0"

__all__ = [
    "CarbonLiteError",
    "CommitConflictError",
    "CorruptDataError",
    "DataUnavailableError",
    "InvalidFilterError",
    "InvalidOptionError",
    "SchemaMismatchError",
    "StorageError",
    "TableExistsError",
    "TableNotFoundError",
    "UnsupportedFormatError",
    "UnsupportedStorageError",
    "UnsupportedTypeError",
    "VersionNotFoundError",
    "__version__",
]
