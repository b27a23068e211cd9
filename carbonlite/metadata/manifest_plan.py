"""Which manifests a new checkpoint references: reuse, one new manifest, tiered merges.

A checkpoint keeps every manifest of the previous one that still describes some file of the
state, and adds one manifest holding the entries committed since (each file's ``tail``). So
a commit never re-encodes entries it did not change, and a checkpoint encodes only the
entries of the commits since the last one.

Manifests are merged like an LSM tree's runs: whenever ``MERGE_FANIN`` manifests share a
level, the oldest of them are rewritten as one manifest of the next level, dropping the
entries of files the state no longer has. Each entry is rewritten about once per level, so
the merge cost per commit stays flat; on the committing thread a merge is capped at
``MAX_COMMIT_MERGE_ENTRIES`` entries (bigger manifests are merged by ``clean``, see
:func:`plan_manifests` with ``merge_limit=None``), so a checkpoint never holds the writer for
long. A manifest all of whose segments are forgotten is simply no longer referenced.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.format.layout import crc32c
from carbonlite.metadata.blocklet_index import conform_entries, entries_table
from carbonlite.metadata.manifest import ManifestRef, ManifestStore, encode_manifest, summarize
from carbonlite.metadata.snapshot import Snapshot

__all__ = [
    "MAX_COMMIT_MERGE_ENTRIES",
    "MERGE_FANIN",
    "NewManifest",
    "merge_pending",
    "plan_manifests",
]

MERGE_FANIN = 8
"""Manifests of one level merged into one of the next."""
MAX_COMMIT_MERGE_ENTRIES = 1 << 18
"""The largest merge (in entries) a committing writer does; ``clean`` does bigger ones."""

NewManifest = tuple[ManifestRef, bytes, pa.Table]


def _make(
    table: pa.Table, snapshot: Snapshot, *, level: int, min_version: int, segments: Iterable[str]
) -> NewManifest:
    data = encode_manifest(table)
    ref = ManifestRef(
        name=f"{uuid.uuid4().hex}.arrow",
        crc32c=crc32c(data),
        entries=table.num_rows,
        rows=int(pc.sum(table.column("rows")).as_py() or 0),
        size=len(data),
        min_version=min_version,
        max_version=snapshot.version,
        level=level,
        segments=tuple(sorted(set(segments))),
        stats=summarize(table, snapshot.physical_schema),
    )
    return ref, data, table


def plan_manifests(
    snapshot: Snapshot, store: ManifestStore, *, merge_limit: int | None = MAX_COMMIT_MERGE_ENTRIES
) -> tuple[tuple[ManifestRef, ...], list[NewManifest]]:
    """The manifests a checkpoint of ``snapshot`` lists, and the new ones to write first."""
    previous = snapshot.manifests.refs if snapshot.manifests is not None else ()
    legacy = any(r.is_legacy for r in previous)
    segments = snapshot.segments
    refs = [] if legacy else [r for r in previous if any(s in segments for s in r.segments)]
    written: list[NewManifest] = []
    # Entries not in a reusable manifest: every file's tail (all of them, coming from a
    # format 2 checkpoint, whose one big index is not reused).
    groups = [
        (f.path, f.blocklets if legacy else f.tail, seg.segment_id)
        for seg in segments.values()
        for f in seg.files.values()
        if (f.num_blocklets if legacy else f.has_tail)
    ]
    if groups:
        table = entries_table(((p, e) for p, e, _ in groups), snapshot.physical_schema)
        first = max((r.max_version for r in refs), default=-1) + 1
        new = _make(table, snapshot, level=0, min_version=first, segments=(s for *_, s in groups))
        written.append(new)
        refs.append(new[0])
    while (merge := _next_merge(refs, merge_limit)) is not None:
        fresh = {ref.name: table for ref, _, table in written}  # not on storage yet
        merged = _merge(merge, snapshot, store, fresh)
        at = refs.index(merge[0])
        refs = [r for r in refs if r not in merge]
        if merged is not None:
            written.append(merged)
            refs.insert(at, merged[0])
    # a manifest merged away within this checkpoint is never written: nothing would list it
    return tuple(refs), [w for w in written if w[0] in refs]


def merge_pending(refs: Iterable[ManifestRef]) -> bool:
    """Whether some merge was left for ``clean`` (too big for a committing writer)."""
    return _next_merge(list(refs), None) is not None


def _next_merge(refs: list[ManifestRef], limit: int | None) -> list[ManifestRef] | None:
    levels: dict[int, list[ManifestRef]] = {}
    for r in refs:
        levels.setdefault(r.level, []).append(r)
    for level in sorted(levels):
        group = levels[level]
        if len(group) < MERGE_FANIN:
            continue
        chosen = sorted(group, key=lambda r: r.min_version)[:MERGE_FANIN]
        if limit is None or sum(r.entries for r in chosen) <= limit:
            return chosen
    return None


def _merge(
    inputs: list[ManifestRef],
    snapshot: Snapshot,
    store: ManifestStore,
    fresh: dict[str, pa.Table],
) -> NewManifest | None:
    """One manifest holding the entries of ``inputs`` whose files the state still has
    (``fresh``: manifests of this checkpoint, not written yet)."""
    schema = snapshot.physical_schema
    tables = [
        conform_entries(fresh[r.name], schema) if r.name in fresh else store.load(r, schema).table
        for r in inputs
    ]
    table = pa.concat_tables(
        [t.set_column(0, "file", t.column("file").cast(pa.string())) for t in tables]
    )
    live_segments = {s for r in inputs for s in r.segments if s in snapshot.segments}
    present = [p for s in live_segments for p in snapshot.segments[s].files]
    table = table.filter(pc.is_in(table.column("file"), pa.array(present, pa.string())))
    if table.num_rows == 0:
        return None
    table = conform_entries(table, schema)
    return _make(
        table,
        snapshot,
        level=max(r.level for r in inputs) + 1,
        min_version=min(r.min_version for r in inputs),
        segments=live_segments,
    )
