"""CarbonLite: a streaming columnar table format for Python and Spark."""

from __future__ import annotations

from carbonlite._version import __version__
from carbonlite.create import create_table, open_table, write_table
from carbonlite.errors import (
    CarbonLiteError,
    ColumnsMovedError,
    CommitConflictError,
    CommitStateUnknownError,
    CorruptDataError,
    DataSourceError,
    DataUnavailableError,
    DuplicateKeyError,
    InvalidFilterError,
    InvalidOptionError,
    MissingDependencyError,
    ReplaceWhereMismatchError,
    RowsChangedError,
    SchemaChangedError,
    SchemaMismatchError,
    StorageError,
    TableExistsError,
    TableIdMismatchError,
    TableNotFoundError,
    UnsupportedFormatError,
    UnsupportedOperationError,
    UnsupportedStatementError,
    UnsupportedStorageError,
    UnsupportedTypeError,
    VersionNotFoundError,
)
from carbonlite.metadata.requirements import TxnMovedError
from carbonlite.reader.scan import TableScan
from carbonlite.records import CommitRecord, PartitionInfo, SegmentInfo
from carbonlite.table import CommitResult, MergeResult, PublishResult, Table

__all__ = [
    "CarbonLiteError",
    "ColumnsMovedError",
    "CommitConflictError",
    "CommitRecord",
    "CommitResult",
    "CommitStateUnknownError",
    "CorruptDataError",
    "DataSourceError",
    "DataUnavailableError",
    "DuplicateKeyError",
    "InvalidFilterError",
    "InvalidOptionError",
    "MergeResult",
    "MissingDependencyError",
    "PartitionInfo",
    "PublishResult",
    "ReplaceWhereMismatchError",
    "RowsChangedError",
    "SchemaChangedError",
    "SchemaMismatchError",
    "SegmentInfo",
    "StorageError",
    "Table",
    "TableExistsError",
    "TableIdMismatchError",
    "TableNotFoundError",
    "TableScan",
    "TxnMovedError",
    "UnsupportedFormatError",
    "UnsupportedOperationError",
    "UnsupportedStatementError",
    "UnsupportedStorageError",
    "UnsupportedTypeError",
    "VersionNotFoundError",
    "__version__",
    "create_table",
    "open_table",
    "write_table",
]
