"""The state of one segment and of its files: what a snapshot holds per segment.

Immutable records shared between snapshots: a commit replaces the records it changes and
keeps the others (``snapshot.py``). Totals are kept as numbers, updated by each change, so
counting never walks files or blocklets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from carbonlite.errors import CorruptDataError
from carbonlite.metadata.actions import (
    LIVE_STATUSES,
    BlockletEntry,
    SegmentFormat,
    SegmentStatus,
)
from carbonlite.metadata.pmap import OrderedMap

if TYPE_CHECKING:
    from carbonlite.metadata.manifest import ManifestSet

__all__ = ["FileState", "SegmentState"]


class FileState:
    """One data file of a segment, as committed. Immutable.

    Its blocklet entries up to the checkpoint the snapshot descends from live in that
    checkpoint's manifests (``source``); those committed since are kept here (``tail``), as a
    chain of the appends' entries so an append costs the size of the append only. Counts are
    kept as numbers, so nothing needs the entries to count rows or blocklets."""

    __slots__ = (
        "_chain",
        "_entries",
        "_tail",
        "blocklet_bytes",
        "committed_length",
        "created_version",
        "modified_version",
        "num_blocklets",
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
    ) -> None:
        self.path = path
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
        )

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
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"FileState(path={self.path!r}, committed_length={self.committed_length}, "
            f"blocklets={self.num_blocklets}, rows={self.num_rows}, "
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

    @property
    def is_live(self) -> bool:
        return self.status in LIVE_STATUSES

    def with_file(self, new: FileState) -> SegmentState:
        """This segment with ``new`` added or replacing the file of the same path."""
        old = self.files.get(new.path)
        d_rows = new.num_rows - (old.num_rows if old else 0)
        d_bytes = new.committed_length - (old.committed_length if old else 0)
        d_count = new.num_blocklets - (old.num_blocklets if old else 0)
        assert isinstance(self.files, OrderedMap)
        return replace(
            self,
            files=self.files.set(new.path, new),
            num_rows=self.num_rows + d_rows,
            num_bytes=self.num_bytes + d_bytes,
            num_blocklets=self.num_blocklets + d_count,
        )

    def without_files(self, paths: Iterable[str]) -> SegmentState:
        files = self.files
        assert isinstance(files, OrderedMap)
        rows, nbytes, count = self.num_rows, self.num_bytes, self.num_blocklets
        for p in paths:
            old = files.get(p)
            if old is None:
                continue
            files = files.delete(p)
            rows -= old.num_rows
            nbytes -= old.committed_length
            count -= old.num_blocklets
        return replace(
            self,
            files=files,
            files_removed=True,
            num_rows=rows,
            num_bytes=nbytes,
            num_blocklets=count,
        )
