"""The one tree of errors CarbonLite raises for domain failures.

Every message says what was expected, what was found, and where (table path, version, file,
byte offset), so that a user can act on it without reading a traceback.
"""

from __future__ import annotations

__all__ = [
    "CarbonLiteError",
    "ColumnsMovedError",
    "CommitConflictError",
    "CommitStateUnknownError",
    "CorruptDataError",
    "DataSourceError",
    "DataUnavailableError",
    "DuplicateKeyError",
    "IngestError",
    "InvalidFilterError",
    "InvalidOptionError",
    "MissingDependencyError",
    "ReplaceWhereMismatchError",
    "RowsChangedError",
    "SchemaChangedError",
    "SchemaMismatchError",
    "StaleSchemaError",
    "StorageError",
    "TableExistsError",
    "TableIdMismatchError",
    "TableNotFoundError",
    "UnsupportedFormatError",
    "UnsupportedOperationError",
    "UnsupportedStatementError",
    "UnsupportedStorageError",
    "UnsupportedTypeError",
    "VersionNotFoundError",
    "WriteRefusedError",
    "WriterConflictError",
]


class CarbonLiteError(Exception):
    """Root of every error CarbonLite raises on purpose."""


class TableNotFoundError(CarbonLiteError):
    """No CarbonLite table lives at the given path."""


class TableExistsError(CarbonLiteError):
    """A table already exists where a new one was to be created."""


class VersionNotFoundError(CarbonLiteError):
    """A table version was asked for that the log does not (or no longer) hold."""


class SchemaMismatchError(CarbonLiteError):
    """Data does not match the schema it is written into.

    ``differences`` lists one human-readable line per differing column.
    """

    def __init__(self, message: str, differences: list[str] | None = None) -> None:
        self.differences = list(differences or [])
        if self.differences:
            message = message + "\n  " + "\n  ".join(self.differences)
        super().__init__(message)


class StaleSchemaError(SchemaMismatchError):
    """Data names a column as a ``Table`` object showed it, and that column was renamed or
    dropped since (another column may have its name now): nothing is written, and the object
    still shows what it showed; ``refresh()`` it to write to the present columns."""


class ColumnsMovedError(SchemaMismatchError):
    """A commit's rows were written with columns that a commit which won the race renamed or
    dropped: nothing was committed. An append is refused (write the rows under the present
    columns); a delete, update or merge reads the table again and plans on its new schema, and
    raises this only when it keeps losing."""


class SchemaChangedError(CarbonLiteError):
    """A stream reached a version that renames, drops or widens a column of the schema it
    started with (its schema is fixed when it starts). Every row before that version was
    delivered; the same query restarted from its checkpoint reads on with the new schema.
    ``version`` is the version, ``changes`` one line per changed column."""

    def __init__(self, message: str, *, version: int, changes: list[str]) -> None:
        self.version = version
        self.changes = list(changes)
        super().__init__(message)


class UnsupportedTypeError(SchemaMismatchError):
    """A column has an Arrow type the blocklet format cannot store."""


class CommitConflictError(CarbonLiteError):
    """A commit lost a race to a concurrent commit that changed what it depended on."""

    def __init__(
        self,
        message: str,
        *,
        read_version: int | None = None,
        conflicting_version: int | None = None,
    ) -> None:
        self.read_version = read_version
        self.conflicting_version = conflicting_version
        super().__init__(message)


class RowsChangedError(CommitConflictError):
    """Rows a delete, update or merge read were changed by a commit that won the race (a
    delete of the same file, or a handoff or compaction that moved them); the operation
    reads the table again and retries, and raises this only when it keeps losing."""


class WriterConflictError(CommitConflictError):
    """Another live writer holds the same writer identity (its stream files) right now."""


class CommitStateUnknownError(CarbonLiteError):
    """Whether a commit landed cannot be told: the storage failed while writing the version
    and while reading it back. Nothing the commit wrote was deleted (a committed version may
    reference it); ``recover`` settles it later. Not a :class:`CommitConflictError`: retrying
    blindly could apply the commit twice. Look at the table (``history``) before retrying."""

    def __init__(self, message: str, *, version: int, commit_id: str) -> None:
        self.version = version
        self.commit_id = commit_id
        super().__init__(message)


class CorruptDataError(CarbonLiteError):
    """Bytes on storage are not what they should be: bad magic, checksum or length.

    ``path`` and ``offset`` name the file and the byte offset where the damage was found.
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None) -> None:
        self.path = path
        self.offset = offset
        where = []
        if path is not None:
            where.append(f"file {path!r}")
        if offset is not None:
            where.append(f"byte offset {offset}")
        if where:
            message = f"{message} (at {', '.join(where)})"
        super().__init__(message)


class UnsupportedFormatError(CarbonLiteError):
    """A file or log entry was written by a format version this library cannot read."""


class InvalidOptionError(CarbonLiteError, ValueError):
    """An option, property or argument has a value that is not allowed."""


class DuplicateKeyError(CarbonLiteError, ValueError):
    """A change would make one key ambiguous, so it is refused and nothing is committed: a
    merge source holds a key twice where it matches the table (which row wins would be
    arbitrary: deduplicate the source first), or an update or merge of a primary-key table
    would leave two live rows with one key."""


class InvalidFilterError(CarbonLiteError, ValueError):
    """A filter cannot be applied to the table (unknown column, bad operator, bad literal)."""


class ReplaceWhereMismatchError(CarbonLiteError, ValueError):
    """A write with ``replaceWhere`` holds rows its predicate does not keep (Delta refuses the
    same); nothing is committed."""


class StorageError(CarbonLiteError):
    """A filesystem operation failed in a way the table layer cannot hide."""


class WriteRefusedError(StorageError):
    """The storage refused a write before anything could land (a missing bucket, denied
    permissions): unlike a timeout or a lost response, the outcome is known."""


class UnsupportedStorageError(StorageError):
    """The filesystem cannot do what a table format needs (for example put-if-absent)."""


class TableIdMismatchError(CarbonLiteError):
    """A stream's checkpoint was made reading another table than the one now at its path (the
    table was deleted and re-created there, or the query reads another table): its offsets
    mean nothing in this one. ``checkpoint_table_id`` is the id the offsets name,
    ``table_id`` the table's. Delta refuses the same case the same way."""

    def __init__(self, message: str, *, checkpoint_table_id: str, table_id: str) -> None:
        self.checkpoint_table_id = checkpoint_table_id
        self.table_id = table_id
        super().__init__(message)


class DataSourceError(CarbonLiteError):
    """The data given to a write could not be read: its reader, generator or Arrow stream
    raised partway (a dropped connection, a bug in the generator). The write committed
    nothing; the source's own exception is the cause (``__cause__``)."""


class IngestError(CarbonLiteError):
    """What an ingester cannot take, without a bad-records table to keep it in: a Kafka
    message, a file that does not decode; or a topic it cannot read."""


class DataUnavailableError(CarbonLiteError):
    """Data that a version needs has been physically removed (for example by ``clean``)."""


class MissingDependencyError(CarbonLiteError, ImportError):
    """An optional library a call needs (pandas, Polars, DuckDB, PySpark) is not installed."""


class UnsupportedStatementError(CarbonLiteError, ValueError):
    """A SQL statement Spark would run against its catalog entry of a CarbonLite table alone
    (``ALTER TABLE``), leaving the table and the entry apart: refused before Spark runs it."""


class UnsupportedOperationError(CarbonLiteError, NotImplementedError):
    """An operation of Delta's API that CarbonLite has no counterpart for (such as
    ``optimize().executeZOrderBy``): the message says what to use instead."""
