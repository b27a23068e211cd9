"""``build_index``: bloom filters for blocklets written before the table asked for them.

Every live blocklet lacking a filter of one of the columns (``bloom_filter_columns`` plus
the columns asked for) is read, its filters built, and written into one new bloom file per
data file; one commit (``addBloomFilters`` actions, ``data_change = false``) attaches them,
and adds the columns asked for to ``bloom_filter_columns`` in the same version, so every
blocklet written later gets them too. A blocklet's record holds every column the table asks
for, replacing the one it had.

Ingestion never waits: appends and compaction go on while the blocklets are read. A data
file that a handoff or compaction retired meanwhile is left out of the commit (its bloom file
becomes an orphan that ``recover`` removes); blocklets that appeared meanwhile without
filters are picked up by another round, at most :data:`MAX_ROUNDS` in all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from carbonlite._version import ENGINE
from carbonlite.clock import elapsed_ms, now_ms
from carbonlite.errors import InvalidOptionError
from carbonlite.format.bloom import BloomSpec, build_bloom_record
from carbonlite.format.pages import ordered_map
from carbonlite.metadata import (
    Action,
    BlockletEntry,
    BloomFiltersAdded,
    CommitInfo,
    FileState,
    Log,
    MetadataUnchanged,
    Requirement,
    SegmentState,
    Snapshot,
    TableMetadata,
    commit,
)
from carbonlite.metadata.columns import stamped
from carbonlite.properties import TableProperties
from carbonlite.reader.planner import Split
from carbonlite.reader.scan import SplitReader
from carbonlite.seams import reach
from carbonlite.writer.bloom_files import bloom_spec, discard_blooms, write_bloom_file
from carbonlite.writer.table_metadata import with_properties

__all__ = ["MAX_ROUNDS", "IndexBuildResult", "build_index"]

MAX_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class IndexBuildResult:
    """What ``build_index`` did."""

    version: int | None
    """The last version it committed (None: nothing was missing, nothing committed)."""
    columns: tuple[str, ...]
    """The table's ``bloom_filter_columns`` afterwards."""
    blocklets: int = 0
    """Blocklets given filters."""
    files: int = 0
    """Bloom files written (one per data file)."""
    bytes_written: int = 0
    rows_read: int = 0


@dataclass
class _IndexCommit:
    """A commit as data (``metadata/commit.py``): the filters of files still live when it
    lands, and the new ``bloom_filter_columns`` if they changed."""

    added: tuple[BloomFiltersAdded, ...]
    metadata: tuple[TableMetadata, TableMetadata] | None
    columns: tuple[str, ...]
    started_ms: int
    writer_id: str | None
    dropped: list[BloomFiltersAdded] = field(default_factory=list)

    @property
    def requirements(self) -> Sequence[Requirement]:
        return () if self.metadata is None else (MetadataUnchanged(self.metadata[0]),)

    def actions(self, snapshot: Snapshot, read_version: int) -> list[Action]:
        kept = [a for a in self.added if _live(snapshot, a.segment_id, a.file) is not None]
        self.dropped = [a for a in self.added if a not in kept]
        now = now_ms()
        out: list[Action] = []
        if self.metadata is not None:
            out.append(stamped(self.metadata[1], snapshot.version + 1))
        out.extend(kept)
        out.append(
            CommitInfo(
                operation="BUILD INDEX",
                timestamp=now,
                data_change=False,
                read_version=read_version,
                parameters={
                    "columns": ",".join(self.columns),
                    "blocklets": str(sum(len(a.blooms.filters) for a in kept)),
                },
                engine=ENGINE,
                files_added=len(kept),
                files_removed=0,
                duration_ms=elapsed_ms(self.started_ms, now),
                writer_id=self.writer_id,
            )
        )
        return out


def _live(snapshot: Snapshot, segment_id: str, path: str) -> FileState | None:
    seg = snapshot.segments.get(segment_id)
    return seg.files.get(path) if seg is not None and seg.is_live else None


def _columns(snapshot: Snapshot, columns: Sequence[str] | None) -> tuple[str, ...]:
    """The table's bloom columns with ``columns`` added, in order."""
    if columns is not None and (
        isinstance(columns, str) or not all(isinstance(c, str) for c in columns)
    ):
        raise InvalidOptionError(
            f"build_index takes a list of column names such as ['user_id'], not {columns!r}"
        )
    have = TableProperties(snapshot.properties).bloom_filter_columns
    wanted = tuple(dict.fromkeys((*have, *(columns or ()))))
    if not wanted:
        raise InvalidOptionError(
            f"{snapshot.table_path!r} has no bloom_filter_columns: name the columns to index, "
            "such as build_index(['user_id']) (CLI: carbonlite index build PATH user_id)"
        )
    return wanted


def _missing(f: FileState, spec: BloomSpec) -> list[BlockletEntry]:
    """Blocklets of ``f`` without a filter of every column of ``spec``."""
    wanted = set(spec.columns)
    out = []
    for b in f.blocklets:
        ref = f.blooms.get(b.offset)
        if ref is None or not wanted.issubset(ref.columns):
            out.append(b)
    return out


def build_index(
    log: Log,
    snapshot: Snapshot,
    columns: Sequence[str] | None,
    *,
    storage_options: Mapping[str, object] | None = None,
    writer_id: str | None = None,
) -> tuple[IndexBuildResult, Snapshot]:
    """Give every live blocklet filters of ``columns`` and of the table's
    ``bloom_filter_columns`` (which gain ``columns``). See the module docstring."""
    started = now_ms()
    snapshot = log.update(snapshot)
    wanted = _columns(snapshot, columns)
    version = None
    totals = [0, 0, 0, 0]  # blocklets, files, bytes, rows
    for _ in range(MAX_ROUNDS):
        changed = with_properties(snapshot, {"bloom_filter_columns": ",".join(wanted)})
        metadata = None if changed is None else (changed.base, changed.metadata)
        schema = snapshot.schema if changed is None else changed.metadata.schema
        properties = snapshot.properties if changed is None else changed.metadata.properties
        layout = snapshot.layout
        spec = bloom_spec(properties, schema, layout)
        assert spec is not None  # the columns were checked by with_properties
        work = [
            (seg, f, missing)
            for seg in snapshot.live_segments()
            for f in seg.files.values()
            if (missing := _missing(f, spec))
        ]
        if not work and metadata is None:
            break
        added = _write_filters(log, snapshot, work, spec, storage_options, totals)
        reach("index.before_commit")
        pending = _IndexCommit(tuple(added), metadata, wanted, started, writer_id)
        try:
            snapshot = commit(log, snapshot, pending)
        except BaseException:
            discard_blooms(log.storage, log.root, (a.blooms for a in added))
            raise
        discard_blooms(log.storage, log.root, (a.blooms for a in pending.dropped))
        for a in pending.dropped:
            totals[0] -= len(a.blooms.filters)
            totals[1] -= 1
            totals[2] -= a.blooms.size
        version = snapshot.version
    return (
        IndexBuildResult(version, wanted, totals[0], totals[1], totals[2], totals[3]),
        snapshot,
    )


def _write_filters(
    log: Log,
    snapshot: Snapshot,
    work: Sequence[tuple[SegmentState, FileState, list[BlockletEntry]]],
    spec: BloomSpec,
    storage_options: Mapping[str, object] | None,
    totals: list[int],
) -> list[BloomFiltersAdded]:
    """Read the blocklets of ``work`` and write one bloom file per data file."""
    layout = snapshot.layout
    physical = set(spec.columns)
    logical = [f for f in snapshot.schema if layout.physical(f.name) in physical]
    output = pa.schema(logical)
    reader = SplitReader(
        log.storage,
        log.root,
        snapshot.schema,
        storage_options=dict(storage_options or {}),
        version=snapshot.version,
        layout=layout,
    )
    added: list[BloomFiltersAdded] = []
    try:
        for seg, f, missing in work:
            split = Split(seg.segment_id, f.path, f.committed_length, f.blocklets)

            def record(b: BlockletEntry, split: Split = split) -> tuple[int, bytes | None, int]:
                batch = reader.read_blocklet(split, b, output, None)
                batch = batch.rename_columns([layout.physical(n) for n in batch.schema.names])
                return b.offset, build_bloom_record(batch, spec.columns, spec.fpp), batch.num_rows

            records = []
            for offset, rec, rows in ordered_map(record, missing):
                totals[3] += rows
                if rec is not None:
                    records.append((offset, rec))
            written = write_bloom_file(log.storage, log.root, f.path, records, spec.columns)
            if written is None:
                continue
            added.append(BloomFiltersAdded(seg.segment_id, f.path, written))
            totals[0] += len(written.filters)
            totals[1] += 1
            totals[2] += written.size
    except BaseException:
        discard_blooms(log.storage, log.root, (a.blooms for a in added))
        raise
    finally:
        reader.close()
    return added
