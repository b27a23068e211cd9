"""Log actions: immutable records of what one commit changes (docs/LOG.md).

A version of the log is a list of actions written atomically. They are plain data; ``serde``
is the one place that turns them into JSON and back, ``snapshot`` the one place that applies
them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from carbonlite.format.stats import ColumnStats
from carbonlite.metadata.columns import ColumnMapping, DroppedColumn

__all__ = [
    "BLOOM_FORMAT_VERSION",
    "DELETION_VECTOR_FORMAT_VERSION",
    "LIVE_STATUSES",
    "LOG_FORMAT_VERSION",
    "PARTITION_FORMAT_VERSION",
    "SEALED_FORMAT_VERSION",
    "STATE_DIR",
    "Action",
    "BlockletEntry",
    "BlockletsAppended",
    "BloomFile",
    "BloomFiltersAdded",
    "BloomRef",
    "CommitInfo",
    "DeletionRef",
    "FilesRemoved",
    "IndexFile",
    "IndexesAdded",
    "RowsDeleted",
    "SegmentAdded",
    "SegmentFormat",
    "SegmentStatus",
    "SegmentStatusChanged",
    "StateStored",
    "TableMetadata",
    "TxnMarker",
]

LOG_FORMAT_VERSION = 7
"""Version of the log and table layout this library writes (and the newest it reads).

1: the first layout. 2: every log version and checkpoint is sealed with a CRC-32C
(``metadata/seal.py``) and a reader refuses one that is not; version-1 tables stay readable
(their files are checked where they carry a seal, and a version must end with its
``commitInfo``). 3: checkpoints list immutable manifests of blocklet entries instead of
rewriting every entry (``metadata/manifest.py``); tables of format 1 and 2 are read as they
are and keep their checkpoints until ``upgrade`` raises them to 3. 4: rows can be deleted
by deletion vectors (the ``deleteRows`` action, and the files' deletions in checkpoints); a
table of format 3 is raised to 4 by its first row-level change, in the same version. 5:
partitioned tables (``partition_by``; each segment holds one partition's rows), content
hashes of published partitions and the publisher's state tables (``storeState``); a table is
raised to 5 by its first publish, and created at 5 when it is partitioned. 6: column ids
(``metadata/columns.py``): each column has an id and a physical name in data files and
statistics, so columns can be renamed, dropped and widened and have defaults without
rewriting data; tables of older formats get ids from ``upgrade``. 7: bloom filters of
blocklets (``bloom_filter_columns``: the ``blooms`` of ``appendBlocklets``, the
``addBloomFilters`` action, the files' blooms in checkpoints) and secondary indexes of files
(``secondary_index_columns``: the ``indexes`` of ``appendBlocklets``, ``addIndexes``); a table
is raised to 7 by the version that first asks for either."""

BLOOM_FORMAT_VERSION = 7
"""The first format whose blocklets may have bloom filters."""

PARTITION_FORMAT_VERSION = 5
"""The first format version with partitions, content hashes and stored state."""

DELETION_VECTOR_FORMAT_VERSION = 4
"""The first format version whose tables may hold deletion vectors."""

SEALED_FORMAT_VERSION = 2
"""The first format version whose log files must all carry a seal."""

SegmentStatus = Literal[
    "STREAMING", "STREAMING_FINISH", "SUCCESS", "COMPACTED", "MARKED_FOR_DELETE"
]
SegmentFormat = Literal["STREAMING", "COLUMNAR"]

LIVE_STATUSES: frozenset[str] = frozenset({"STREAMING", "STREAMING_FINISH", "SUCCESS"})
"""Statuses whose segments readers see."""


@dataclass(frozen=True, slots=True)
class TableMetadata:
    """The table's identity, schema, sort columns and properties (version 0, add_columns)."""

    table_id: str
    schema: pa.Schema
    sort_columns: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    created_time: int = 0
    """Milliseconds since the epoch."""
    format_version: int = LOG_FORMAT_VERSION
    primary_key: tuple[str, ...] = ()
    """Key columns of a primary-key table (format 4 on): every append is an upsert by them."""
    partition_by: tuple[str, ...] = ()
    """Partition fields (format 5 on): ``"region"``, ``"day(ts)"``, ``"bucket(16, id)"``
    (``metadata/partition_spec.py``)."""
    columns: tuple[ColumnMapping, ...] = ()
    """Each schema column's id, physical name and default, in schema order (format 6 on;
    empty: every column lies under its own name, ``metadata/columns.py``)."""
    dropped: tuple[DroppedColumn, ...] = ()
    """Columns dropped from the schema (their pages stay in older files, unread)."""
    last_column_id: int = 0
    """The highest column id given so far: ids are never reused."""


@dataclass(frozen=True, slots=True)
class SegmentAdded:
    """A new segment, with its initial status."""

    segment_id: str
    format: SegmentFormat
    status: SegmentStatus
    level: int = 0
    """Compaction level: 0 for streaming and handed-off segments, n+1 for a merge of level n."""
    sorted_by: tuple[str, ...] = ()
    """Columns its rows are sorted by (columnar segments written by handoff/compaction)."""
    partition: tuple[Any, ...] | None = None
    """The partition every row of it belongs to, one JSON value per partition field
    (``PartitionSpec.value_to_json``); None in an unpartitioned table."""
    content_hash: str | None = None
    """The content hash of its rows (``format/row_hash.py``) when it holds a whole published
    partition; None otherwise."""


@dataclass(frozen=True, slots=True)
class BlockletEntry:
    """One committed blocklet: where it lies in its file, its rows and statistics."""

    offset: int
    length: int
    num_rows: int
    stats: Mapping[str, ColumnStats] = field(default_factory=dict)

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True, slots=True)
class BloomRef:
    """Where the bloom filters of one blocklet lie: ``length`` bytes at ``offset`` of the
    bloom file ``path`` (docs/FORMAT.md, "Bloom filter files"), a record holding a filter of
    each of ``columns`` (physical names)."""

    blocklet: int
    """Offset of the blocklet in its data file (what identifies it)."""
    path: str
    """The bloom file, relative to the table root."""
    offset: int
    length: int
    columns: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BloomFile:
    """The bloom filters of blocklets of one data file, all in the bloom file ``path`` of
    ``size`` bytes (written once, before the commit that names it). Each blocklet's record
    replaces any it had."""

    path: str
    size: int
    columns: tuple[str, ...]
    filters: tuple[BloomRef, ...]


@dataclass(frozen=True, slots=True)
class IndexFile:
    """The secondary index of one column of a data file: the file ``path`` of ``size`` bytes
    (docs/FORMAT.md, "Secondary index files"), covering the blocklets it lists (those the data
    file had when it was built)."""

    path: str
    size: int
    column: str
    """The column's physical name."""


@dataclass(frozen=True, slots=True)
class BlockletsAppended:
    """Blocklets appended to one file of a segment: the file's committed length moves
    from ``start`` to ``end``. ``start == 0`` means the file is new. ``blooms``: the bloom
    filters of (some of) those blocklets, when the table keeps them."""

    segment_id: str
    file: str
    """Path relative to the table root."""
    start: int
    end: int
    blocklets: tuple[BlockletEntry, ...]
    blooms: tuple[BloomFile, ...] = ()
    indexes: tuple[IndexFile, ...] = ()
    """Secondary indexes of the file (written with a columnar segment's files)."""

    @property
    def num_rows(self) -> int:
        return sum(b.num_rows for b in self.blocklets)


@dataclass(frozen=True, slots=True)
class DeletionRef:
    """Where the deletion vector of one blocklet lies: ``length`` bytes at ``offset`` of the
    file ``path`` (docs/FORMAT.md, "Deletion vectors"), deleting ``cardinality`` rows."""

    blocklet: int
    """Offset of the blocklet in its data file (what identifies it)."""
    path: str
    """The deletion-vector file, relative to the table root."""
    offset: int
    length: int
    cardinality: int


@dataclass(frozen=True, slots=True)
class RowsDeleted:
    """Rows of blocklets of one data file deleted: each blocklet's deletion vector becomes
    the one given (which holds every row deleted so far: a later delete writes the union).
    ``size``: bytes of the deletion-vector file ``vectors`` point into (written once)."""

    segment_id: str
    file: str
    vectors: tuple[DeletionRef, ...]
    size: int

    @property
    def dv_file(self) -> str:
        return self.vectors[0].path


@dataclass(frozen=True, slots=True)
class BloomFiltersAdded:
    """Bloom filters given to committed blocklets of one data file (``build_index``)."""

    segment_id: str
    file: str
    blooms: BloomFile


@dataclass(frozen=True, slots=True)
class IndexesAdded:
    """Secondary indexes given to a committed data file (``build_index``); each replaces the
    file's index of its column."""

    segment_id: str
    file: str
    indexes: tuple[IndexFile, ...]


@dataclass(frozen=True, slots=True)
class SegmentStatusChanged:
    segment_id: str
    status: SegmentStatus
    merged_into: str | None = None


@dataclass(frozen=True, slots=True)
class FilesRemoved:
    """Data files physically deleted (by ``clean``) from a segment readers no longer see."""

    segment_id: str
    files: tuple[str, ...]


STATE_DIR = "_carbonlite/state"
"""Where the state files of publishes live, relative to the table root."""


@dataclass(frozen=True, slots=True)
class StateStored:
    """A table of the publisher's own bookkeeping stored under ``name`` (``Table.publish``'s
    ``state``): an Arrow IPC file at ``path`` (relative to the table root) of ``size`` bytes.
    Not table data: scans never see it."""

    name: str
    path: str
    size: int
    rows: int


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """The latest batch of an application, committed in the same version as its data."""

    app_id: str
    batch_id: int


@dataclass(frozen=True, slots=True)
class CommitInfo:
    operation: str
    timestamp: int
    """Milliseconds since the epoch."""
    data_change: bool
    read_version: int | None = None
    rows_added: int = 0
    rows_removed: int = 0
    bytes_added: int = 0
    bytes_removed: int = 0
    parameters: Mapping[str, str] = field(default_factory=dict)
    engine: str = ""
    commit_id: str = ""
    """Unique per commit call (the same on every retry of it): lets a writer whose conditional
    write reported failure recognise the version as its own ("" in versions of old writers)."""
    files_added: int | None = None
    """Data files the commit created (None in versions of writers before these metrics)."""
    files_removed: int | None = None
    """Data files the commit took out of the table (compaction inputs, overwritten segments;
    for ``CLEAN``, the data files it deleted)."""
    duration_ms: int | None = None
    """How long the operation took, from its start to this commit (None: not recorded)."""
    writer_id: str | None = None
    """The writer identity that made the commit (None: not recorded)."""
    parent_commit_id: str = ""
    """The ``commit_id`` of the version this one was built on ("" when unknown: versions of
    older writers, or a parent without one). The log is a chain of commit ids: a writer tells
    its version from a fork with it, and a reader notices a version not built on the one it
    holds (docs/LOG.md, "The fork guard")."""


Action = (
    TableMetadata
    | SegmentAdded
    | BlockletsAppended
    | SegmentStatusChanged
    | FilesRemoved
    | RowsDeleted
    | BloomFiltersAdded
    | IndexesAdded
    | StateStored
    | TxnMarker
    | CommitInfo
)
