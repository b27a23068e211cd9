"""The state of one segment and of its files: what a snapshot holds per segment.

Immutable records shared between snapshots: a commit replaces the records it changes and
keeps the others (``snapshot.py``). Totals are kept as numbers, updated by each change, so
counting never walks files or blocklets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import immutables

from carbonlite.errors import CorruptDataError
from carbonlite.metadata.actions import (
    LIVE_STATUSES,
    BlockletEntry,
    BloomFile,
    BloomRef,
    DeletionRef,
    IndexFile,
    SegmentFormat,
    SegmentStatus,
)
from carbonlite.metadata.pmap import OrderedMap

if TYPE_CHECKING:
    from carbonlite.metadata.manifest import ManifestSet

__all__ = ["FileState", "SegmentState"]


_NO_DELETIONS: immutables.Map[int, DeletionRef] = immutables.Map()
_NO_DV_FILES: immutables.Map[str, int] = immutables.Map()
_NO_BLOOMS: immutables.Map[int, BloomRef] = immutables.Map()
_NO_INDEXES: immutables.Map[str, IndexFile] = immutables.Map()


class FileState:
    """One data file of a segment, as committed. Immutable.

    Its blocklet entries up to the checkpoint the snapshot descends from live in that
    checkpoint's manifests (``source``); those committed since are kept here (``tail``), as a
    chain of the appends' entries so an append costs the size of the append only. Counts are
    kept as numbers, so nothing needs the entries to count rows or blocklets.

    Deleted rows: ``deletions`` maps a blocklet's offset to its deletion vector (every row of
    it deleted so far), ``num_deleted`` counts them, ``deletion_version`` is the version of
    the latest delete (0: none), and ``dv_files`` lists every deletion-vector file written for
    this file with its size (superseded ones too: time travel reads them), so ``clean``
    deletes them with the data file.

    Bloom filters: ``blooms`` maps a blocklet's offset to where its filters lie, and
    ``bloom_files`` lists every bloom file written for this file with its size (superseded
    ones too), so ``clean`` deletes them with the data file. Secondary indexes: ``indexes``
    maps a column (physical name) to its index file in force, ``index_files`` lists every
    index file written for this file with its size."""

    __slots__ = (
        "_chain",
        "_entries",
        "_tail",
        "blocklet_bytes",
        "bloom_files",
        "blooms",
        "committed_length",
        "created_version",
        "deletion_version",
        "deletions",
        "dv_files",
        "index_files",
        "indexes",
        "modified_version",
        "num_blocklets",
        "num_deleted",
        "num_rows",
        "path",
        "segment_id",
        "source",
    )

    def __init__(
        self,
        path: str,
        committed_length: int,
        blocklets: tuple[BlockletEntry, ...],
        created_version: int,
        modified_version: int,
        *,
        segment_id: str = "",
        source: ManifestSet | None = None,
        counts: tuple[int, int, int] = (0, 0, 0),
        deletions: immutables.Map[int, DeletionRef] = _NO_DELETIONS,
        deletion_version: int = 0,
        dv_files: immutables.Map[str, int] = _NO_DV_FILES,
        blooms: immutables.Map[int, BloomRef] = _NO_BLOOMS,
        bloom_files: immutables.Map[str, int] = _NO_DV_FILES,
        indexes: immutables.Map[str, IndexFile] = _NO_INDEXES,
        index_files: immutables.Map[str, int] = _NO_DV_FILES,
    ) -> None:
        self.path = path
        self.indexes = indexes
        self.index_files = index_files
        self.blooms = blooms
        self.bloom_files = bloom_files
        self.deletions = deletions
        self.num_deleted = sum(ref.cardinality for ref in deletions.values())
        self.deletion_version = deletion_version
        self.dv_files = dv_files
        """Relative to the table root."""
        self.committed_length = committed_length
        self.created_version = created_version
        self.modified_version = modified_version
        self.segment_id = segment_id
        self.source = source
        """The manifests holding the entries before ``tail`` (None: all are in ``tail``)."""
        more = tuple(blocklets)
        self._chain: tuple[Any, tuple[BlockletEntry, ...]] | None = (None, more) if more else None
        self._tail: tuple[BlockletEntry, ...] | None = more
        rows, count, nbytes = counts
        self.num_rows = rows + sum(b.num_rows for b in more)
        self.num_blocklets = count + len(more)
        self.blocklet_bytes = nbytes + sum(b.length for b in more)
        """Bytes of the committed blocklets (headers of the file excluded)."""
        self._entries: tuple[BlockletEntry, ...] | None = None

    @property
    def tail(self) -> tuple[BlockletEntry, ...]:
        """Entries committed since the checkpoint of ``source`` (all of them without one)."""
        if self._tail is None:
            parts = []
            link = self._chain
            while link is not None:
                parts.append(link[1])
                link = link[0]
            self._tail = tuple(b for part in reversed(parts) for b in part)
        return self._tail

    @property
    def has_tail(self) -> bool:
        return self._chain is not None

    @property
    def blocklets(self) -> tuple[BlockletEntry, ...]:
        """Every committed blocklet, in file order (reads manifests when needed)."""
        if self._entries is None:
            if self.source is None:
                self._entries = self.tail
            else:
                found = self.source.entries(self.path, self.segment_id) + list(self.tail)
                if len(found) != self.num_blocklets:
                    raise CorruptDataError(
                        f"the manifests of {self.path!r} hold {len(found) - len(self.tail)} "
                        f"blocklets, the checkpoint counts {self.num_blocklets - len(self.tail)}: "
                        "the checkpoint or a manifest is damaged"
                    )
                self._entries = tuple(found)
        return self._entries

    def appended(self, end: int, more: tuple[BlockletEntry, ...], version: int) -> FileState:
        out = FileState(
            self.path,
            end,
            (),
            self.created_version,
            version,
            segment_id=self.segment_id,
            source=self.source,
            counts=(
                self.num_rows + sum(b.num_rows for b in more),
                self.num_blocklets + len(more),
                self.blocklet_bytes + sum(b.length for b in more),
            ),
            **self._side_state(),
        )
        out._chain = (self._chain, more) if more else self._chain
        out._tail = None if out._chain is not None else ()
        return out

    def rebased(self, source: ManifestSet) -> FileState:
        """The same file with every entry in ``source`` (just written by a checkpoint)."""
        return FileState(
            self.path,
            self.committed_length,
            (),
            self.created_version,
            self.modified_version,
            segment_id=self.segment_id,
            source=source,
            counts=(self.num_rows, self.num_blocklets, self.blocklet_bytes),
            **self._side_state(),
        )

    def _side_state(self) -> dict[str, Any]:
        """What lies beside the entries: deletion vectors and bloom filters."""
        return {
            "deletions": self.deletions,
            "deletion_version": self.deletion_version,
            "dv_files": self.dv_files,
            "blooms": self.blooms,
            "bloom_files": self.bloom_files,
            "indexes": self.indexes,
            "index_files": self.index_files,
        }

    def _same_entries(self, **changes: Any) -> FileState:
        """This file with the same entries and some of its side state replaced."""
        out = FileState(
            self.path,
            self.committed_length,
            (),
            self.created_version,
            self.modified_version,
            segment_id=self.segment_id,
            source=self.source,
            counts=(self.num_rows, self.num_blocklets, self.blocklet_bytes),
            **(self._side_state() | changes),
        )
        out._chain = self._chain
        out._tail = self._tail
        out._entries = self._entries
        return out

    def with_deletions(
        self, vectors: Iterable[DeletionRef], dv_file: str, size: int, version: int
    ) -> FileState:
        """This file with the given blocklets' deletion vectors replaced (``version``: the
        commit; ``dv_file``: the file of ``size`` bytes the vectors lie in)."""
        return self._same_entries(
            deletions=self.deletions.update({ref.blocklet: ref for ref in vectors}),
            deletion_version=version,
            dv_files=self.dv_files.set(dv_file, size),
        )

    def with_blooms(self, blooms: BloomFile) -> FileState:
        """This file with the given blocklets' bloom filters replaced by those of ``blooms``."""
        return self._same_entries(
            blooms=self.blooms.update({ref.blocklet: ref for ref in blooms.filters}),
            bloom_files=self.bloom_files.set(blooms.path, blooms.size),
        )

    def with_indexes(self, indexes: Iterable[IndexFile]) -> FileState:
        """This file with the given columns' secondary indexes replaced."""
        given = tuple(indexes)
        return self._same_entries(
            indexes=self.indexes.update({i.column: i for i in given}),
            index_files=self.index_files.update({i.path: i.size for i in given}),
        )

    @property
    def live_rows(self) -> int:
        return self.num_rows - self.num_deleted

    @property
    def side_files(self) -> dict[str, int]:
        """Every file written beside this one, with its size: deletion-vector, bloom filter
        and secondary index files (superseded ones too). ``clean`` deletes them with the data
        file."""
        return {**self.dv_files, **self.bloom_files, **self.index_files}

    def deletion_items(self) -> tuple[tuple[int, DeletionRef], ...]:
        """(blocklet offset, deletion vector) of every blocklet with deleted rows."""
        return tuple(sorted(self.deletions.items()))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FileState):
            return NotImplemented
        return (
            self.path == other.path
            and self.committed_length == other.committed_length
            and self.created_version == other.created_version
            and self.modified_version == other.modified_version
            and self.num_rows == other.num_rows
            and self.num_blocklets == other.num_blocklets
            and self.blocklets == other.blocklets
            and self.deletions == other.deletions
            and self.deletion_version == other.deletion_version
            and self.dv_files == other.dv_files
            and self.blooms == other.blooms
            and self.bloom_files == other.bloom_files
            and self.indexes == other.indexes
            and self.index_files == other.index_files
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"FileState(path={self.path!r}, committed_length={self.committed_length}, "
            f"blocklets={self.num_blocklets}, rows={self.num_rows}, deleted={self.num_deleted}, "
            f"created_version={self.created_version}, modified_version={self.modified_version})"
        )


@dataclass(frozen=True, slots=True)
class SegmentState:
    """One segment: its status, level and files (with their totals kept as numbers)."""

    segment_id: str
    format: SegmentFormat
    status: SegmentStatus
    level: int
    sorted_by: tuple[str, ...]
    created_version: int
    created_time: int
    status_version: int
    """Version of the latest status change (the creation, if none)."""
    status_time: int
    merged_into: str | None = None
    files: Mapping[str, FileState] = field(default_factory=OrderedMap)
    files_removed: bool = False
    """True once ``clean`` has physically deleted some of the segment's data."""
    num_rows: int = -1
    num_bytes: int = -1
    """Committed bytes of its files."""
    num_blocklets: int = -1
    num_deleted: int = -1
    """Rows of its files deleted by deletion vectors (``num_rows`` counts them too)."""
    partition: tuple[Any, ...] | None = None
    """Its partition's value, one JSON value per field (None: an unpartitioned table)."""
    content_hash: str | None = None
    """The content hash its rows had when it was written (a publish, or a handoff of such a
    segment); what the rows are now only while no file changed and no row was deleted
    (:attr:`current_hash`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.files, OrderedMap):
            object.__setattr__(self, "files", OrderedMap(self.files.items()))
        if self.num_rows < 0:
            object.__setattr__(self, "num_rows", sum(f.num_rows for f in self.files.values()))
            object.__setattr__(
                self, "num_bytes", sum(f.committed_length for f in self.files.values())
            )
            object.__setattr__(
                self, "num_blocklets", sum(f.num_blocklets for f in self.files.values())
            )
        if self.num_deleted < 0:
            object.__setattr__(self, "num_deleted", sum(f.num_deleted for f in self.files.values()))

    @property
    def is_live(self) -> bool:
        return self.status in LIVE_STATUSES

    @property
    def live_rows(self) -> int:
        """Rows readers see: ``num_rows`` less the deleted ones."""
        return self.num_rows - self.num_deleted

    @property
    def current_hash(self) -> str | None:
        """The content hash of the rows readers see in it, when known: the hash it was
        written with, while none of its files took an append or lost a row since."""
        if self.content_hash is None or self.num_deleted:
            return None
        if any(f.modified_version != self.created_version for f in self.files.values()):
            return None
        return self.content_hash

    def with_file(self, new: FileState) -> SegmentState:
        """This segment with ``new`` added or replacing the file of the same path."""
        old = self.files.get(new.path)
        d_rows = new.num_rows - (old.num_rows if old else 0)
        d_bytes = new.committed_length - (old.committed_length if old else 0)
        d_count = new.num_blocklets - (old.num_blocklets if old else 0)
        d_deleted = new.num_deleted - (old.num_deleted if old else 0)
        assert isinstance(self.files, OrderedMap)
        return replace(
            self,
            files=self.files.set(new.path, new),
            num_rows=self.num_rows + d_rows,
            num_bytes=self.num_bytes + d_bytes,
            num_blocklets=self.num_blocklets + d_count,
            num_deleted=self.num_deleted + d_deleted,
        )

    def without_files(self, paths: Iterable[str]) -> SegmentState:
        files = self.files
        assert isinstance(files, OrderedMap)
        rows, nbytes, count = self.num_rows, self.num_bytes, self.num_blocklets
        deleted = self.num_deleted
        for p in paths:
            old = files.get(p)
            if old is None:
                continue
            files = files.delete(p)
            rows -= old.num_rows
            nbytes -= old.committed_length
            count -= old.num_blocklets
            deleted -= old.num_deleted
        return replace(
            self,
            files=files,
            files_removed=True,
            num_rows=rows,
            num_bytes=nbytes,
            num_blocklets=count,
            num_deleted=deleted,
        )
