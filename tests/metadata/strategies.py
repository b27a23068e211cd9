"""Hypothesis strategies for log actions, and for snapshots built by replaying them."""

from __future__ import annotations

from decimal import Context, Decimal
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from carbonlite.format.stats import ColumnStats
from carbonlite.format.types import stat_kind
from carbonlite.metadata import (
    LOG_FORMAT_VERSION,
    Action,
    BlockletEntry,
    BlockletsAppended,
    BloomFile,
    BloomFiltersAdded,
    BloomRef,
    CommitInfo,
    FilesRemoved,
    IndexesAdded,
    IndexFile,
    SegmentAdded,
    SegmentStatusChanged,
    Snapshot,
    TableMetadata,
    TxnMarker,
)

STATUSES = ["STREAMING", "STREAMING_FINISH", "SUCCESS", "COMPACTED", "MARKED_FOR_DELETE"]
FORMATS = ["STREAMING", "COLUMNAR"]

STAT_TYPES = [
    pa.int8(),
    pa.int32(),
    pa.int64(),
    pa.uint8(),
    pa.uint64(),
    pa.float32(),
    pa.float64(),
    pa.bool_(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.large_binary(),
    pa.binary(4),
    pa.decimal128(9, 2),
    pa.decimal128(38, 10),
    pa.decimal256(60, 20),
    pa.date32(),
    pa.date64(),
    pa.timestamp("s"),
    pa.timestamp("ms", tz="UTC"),
    pa.timestamp("ns", tz="Asia/Kolkata"),
    pa.time32("ms"),
    pa.time64("ns"),
    pa.duration("us"),
    # no min/max: only null counts
    pa.list_(pa.int64()),
    pa.large_list(pa.string()),
    pa.list_(pa.float64(), 3),
    pa.struct([("x", pa.int32()), ("y", pa.list_(pa.string()))]),
    pa.map_(pa.string(), pa.int64()),
    pa.null(),
]

names = st.text(min_size=1, max_size=12)
small_text = st.text(max_size=16)
counts = st.integers(0, 2**40)


def _bound(t: pa.DataType) -> st.SearchStrategy[Any]:
    kind = stat_kind(t)
    if kind == "int":
        return st.integers(-(2**63), 2**63 - 1)
    if kind == "uint":
        return st.integers(0, 2**64 - 1)
    if kind == "float":
        width = 32 if pa.types.is_float32(t) else 64
        return st.floats(width=width, allow_nan=False, allow_infinity=True)
    if kind == "bool":
        return st.booleans()
    if kind == "string":
        return st.text(max_size=70)
    if kind == "binary":
        size = t.byte_width if pa.types.is_fixed_size_binary(t) else None
        return st.binary(min_size=size or 0, max_size=size or 70)
    if kind == "decimal":
        top = 10**t.precision - 1
        return st.integers(-top, top).map(
            lambda u: Decimal(u).scaleb(-t.scale, context=Context(prec=100))
        )
    raise AssertionError(f"{t} keeps no bounds")


@st.composite
def column_stats(draw: st.DrawFn, t: pa.DataType) -> ColumnStats:
    nulls = draw(st.integers(0, 10**6))
    if stat_kind(t) is None:
        return ColumnStats(null_count=nulls)
    lo = draw(st.none() | _bound(t))
    hi = draw(st.none() | _bound(t))
    nans = draw(st.integers(0, 1000)) if stat_kind(t) == "float" else 0
    return ColumnStats(null_count=nulls, min=lo, max=hi, nan_count=nans)


@st.composite
def stat_schemas(draw: st.DrawFn, min_columns: int = 1, max_columns: int = 8) -> pa.Schema:
    column_types = draw(
        st.lists(st.sampled_from(STAT_TYPES), min_size=min_columns, max_size=max_columns)
    )
    fields = []
    for i, t in enumerate(column_types):
        metadata = draw(st.none() | st.dictionaries(small_text, small_text, max_size=2))
        nullable = draw(st.booleans()) if not pa.types.is_null(t) else True
        fields.append(pa.field(f"c{i}", t, nullable=nullable, metadata=metadata or None))
    return pa.schema(fields)


@st.composite
def blocklets(
    draw: st.DrawFn, schema: pa.Schema, start: int = 0, max_size: int = 4
) -> tuple[BlockletEntry, ...]:
    out = []
    offset = start
    for _ in range(draw(st.integers(1, max_size))):
        length = draw(st.integers(1, 10**7))
        columns = draw(st.lists(st.sampled_from(schema.names), unique=True)) if schema else []
        stats = {c: draw(column_stats(schema.field(c).type)) for c in columns}
        out.append(BlockletEntry(offset, length, draw(st.integers(0, 10**6)), stats))
        offset += length
    return tuple(out)


def table_metadata(schema: pa.Schema) -> st.SearchStrategy[TableMetadata]:
    return st.builds(
        TableMetadata,
        table_id=small_text,
        schema=st.just(schema),
        sort_columns=st.lists(st.sampled_from(schema.names), unique=True).map(tuple),
        properties=st.dictionaries(small_text, small_text, max_size=3),
        created_time=counts,
        format_version=st.just(LOG_FORMAT_VERSION),
    )


def commit_infos() -> st.SearchStrategy[CommitInfo]:
    return st.builds(
        CommitInfo,
        operation=small_text,
        timestamp=counts,
        data_change=st.booleans(),
        read_version=st.none() | counts,
        rows_added=counts,
        rows_removed=counts,
        bytes_added=counts,
        bytes_removed=counts,
        parameters=st.dictionaries(small_text, small_text, max_size=3),
        engine=small_text,
        files_added=st.none() | counts,
        files_removed=st.none() | counts,
        duration_ms=st.none() | counts,
        writer_id=st.none() | small_text,
    )


@st.composite
def bloom_files(
    draw: st.DrawFn, data_file: str, entries: tuple[BlockletEntry, ...]
) -> tuple[BloomFile, ...]:
    """No bloom file, or one with records of some of ``entries`` (format 7)."""
    chosen = draw(st.lists(st.sampled_from(entries), unique_by=lambda b: b.offset))
    if not chosen:
        return ()
    path = f"{data_file}.{draw(st.integers(0, 2**64 - 1)):016x}.bloom"
    columns = tuple(draw(st.lists(names, min_size=1, max_size=3, unique=True)))
    refs, position = [], 8
    for b in chosen:
        length = draw(st.integers(8, 10**5))
        refs.append(BloomRef(b.offset, path, position, length, columns))
        position += length
    return (BloomFile(path, position, columns, tuple(refs)),)


@st.composite
def index_files(draw: st.DrawFn, data_file: str) -> tuple[IndexFile, ...]:
    """Secondary index files of ``data_file`` (format 7), one per column."""
    columns = draw(st.lists(names, max_size=2, unique=True))
    return tuple(
        IndexFile(f"{data_file}.{draw(st.integers(0, 2**64 - 1)):016x}.{i}.sidx", size, c)
        for i, c in enumerate(columns)
        for size in [draw(st.integers(1, 10**6))]
    )


@st.composite
def blocklets_appended(draw: st.DrawFn, schema: pa.Schema) -> BlockletsAppended:
    start = draw(st.integers(0, 10**9))
    entries = draw(blocklets(schema, start))
    file = draw(small_text)
    blooms = draw(bloom_files(file, entries))
    indexes = draw(index_files(file))
    return BlockletsAppended(draw(names), file, start, entries[-1].end, entries, blooms, indexes)


@st.composite
def blooms_added(draw: st.DrawFn, schema: pa.Schema) -> BloomFiltersAdded:
    file = draw(small_text)
    entries = draw(blocklets(schema, draw(st.integers(0, 10**9))))
    blooms = draw(bloom_files(file, entries).filter(bool))
    return BloomFiltersAdded(draw(names), file, blooms[0])


def actions(schema: pa.Schema) -> st.SearchStrategy[Action]:
    """Any one action whose statistics fit ``schema``."""
    return st.one_of(
        table_metadata(schema),
        st.builds(
            SegmentAdded,
            segment_id=names,
            format=st.sampled_from(FORMATS),
            status=st.sampled_from(STATUSES),
            level=st.integers(0, 9),
            sorted_by=st.lists(names, max_size=3).map(tuple),
        ),
        blocklets_appended(schema),
        blooms_added(schema),
        st.builds(
            IndexesAdded,
            segment_id=names,
            file=small_text,
            indexes=small_text.flatmap(index_files).filter(bool),
        ),
        st.builds(
            SegmentStatusChanged,
            segment_id=names,
            status=st.sampled_from(STATUSES),
            merged_into=st.none() | names,
        ),
        st.builds(
            FilesRemoved, segment_id=names, files=st.lists(small_text, max_size=3).map(tuple)
        ),
        st.builds(TxnMarker, app_id=names, batch_id=st.integers(0, 2**62)),
        commit_infos(),
    )


# --- snapshots by replay -----------------------------------------------------------------------


TRANSITIONS = {
    "STREAMING": ["STREAMING_FINISH", "MARKED_FOR_DELETE"],
    "STREAMING_FINISH": ["COMPACTED", "MARKED_FOR_DELETE"],
    "SUCCESS": ["COMPACTED", "MARKED_FOR_DELETE"],
    "COMPACTED": [],
    "MARKED_FOR_DELETE": [],
}
"""The segment lifecycle of DESIGN.md: what each status may become."""


@st.composite
def log_histories(
    draw: st.DrawFn, max_versions: int = 8
) -> tuple[list[list[Action]], list[pa.Schema]]:
    """A valid log: versions 0..n of actions, and the schema in force after each version.

    Every version replays cleanly with ``Snapshot.apply``: segments are added with a valid
    status, blocklets are appended at each file's committed length, statuses follow the
    segment lifecycle, files are removed only from segments readers no longer see, batch ids
    grow per application, and schema changes add columns (listing the metadata first).
    """
    schema = draw(stat_schemas(max_columns=5))
    metadata = draw(table_metadata(schema))
    versions: list[list[Action]] = [[metadata, draw(commit_infos())]]
    schemas = [schema]
    files: dict[str, dict[str, int]] = {}  # segment -> file -> committed length
    entries: dict[tuple[str, str], tuple[BlockletEntry, ...]] = {}  # (segment, file) -> blocklets
    status: dict[str, str] = {}
    txns: dict[str, int] = {}
    next_segment = 0
    for _ in range(draw(st.integers(0, max_versions))):
        version: list[Action] = []
        created: set[str] = set()
        if draw(st.integers(0, 5)) == 0:  # add columns
            extra = draw(stat_schemas(max_columns=2))
            schema = pa.schema(
                [*schema, *(f.with_name(f"n{len(schema) + i}") for i, f in enumerate(extra))]
            )
            metadata = TableMetadata(
                metadata.table_id,
                schema,
                metadata.sort_columns,
                metadata.properties,
                metadata.created_time,
            )
            version.append(metadata)
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["add", "append", "status", "remove", "txn", "blooms"]))
            movable = sorted(sid for sid, s in status.items() if TRANSITIONS[s])
            gone = sorted(
                sid for sid, s in status.items() if s in ("COMPACTED", "MARKED_FOR_DELETE")
            )
            if kind == "status" and movable:
                sid = draw(st.sampled_from(movable))
                status[sid] = draw(st.sampled_from(TRANSITIONS[status[sid]]))
                merged = None
                if status[sid] == "COMPACTED":
                    merged = draw(st.none() | st.sampled_from(sorted(status)))
                version.append(SegmentStatusChanged(sid, status[sid], merged_into=merged))
            elif kind == "remove" and gone:
                sid = draw(st.sampled_from(gone))
                removed = tuple(draw(st.lists(st.sampled_from([*files[sid], "nope"]), unique=True)))
                for name in removed:
                    files[sid].pop(name, None)
                version.append(FilesRemoved(sid, removed))
            elif kind == "blooms" and (
                indexable := sorted(
                    (sid, name)
                    for (sid, name) in entries
                    if status[sid] in ("STREAMING", "STREAMING_FINISH", "SUCCESS")
                    and name in files[sid]
                )
            ):
                sid, name = draw(st.sampled_from(indexable))
                blooms = draw(bloom_files(name, entries[sid, name]))
                if blooms:
                    version.append(BloomFiltersAdded(sid, name, blooms[0]))
                indexes = draw(index_files(name))
                if indexes:
                    version.append(IndexesAdded(sid, name, indexes))
            elif kind == "txn":
                app = draw(st.sampled_from(["a", "b", "q-1"]))
                txns[app] = txns.get(app, -1) + draw(st.integers(1, 2**20))
                version.append(TxnMarker(app, txns[app]))
            elif kind == "append" and (
                appendable := sorted(
                    sid for sid in files if status[sid] == "STREAMING" or sid in created
                )
            ):
                sid = draw(st.sampled_from(appendable))
                name = draw(
                    st.sampled_from([*files[sid], f"segments/{sid}/w-{len(files[sid])}.cblt"])
                )
                start = files[sid].get(name, 0)
                more = draw(blocklets(schema, start or 16))
                files[sid][name] = more[-1].end
                entries[sid, name] = entries.get((sid, name), ()) + more
                blooms = draw(bloom_files(name, more))
                version.append(BlockletsAppended(sid, name, start, more[-1].end, more, blooms))
            else:
                sid = f"{next_segment}" if draw(st.booleans()) else f"{next_segment}.1"
                next_segment += 1
                files[sid] = {}
                created.add(sid)
                status[sid] = draw(st.sampled_from(["STREAMING", "SUCCESS"]))
                version.append(
                    SegmentAdded(
                        sid,
                        "STREAMING" if status[sid] == "STREAMING" else "COLUMNAR",
                        status[sid],
                        draw(st.integers(0, 3)),
                        tuple(draw(st.lists(st.sampled_from(schema.names), unique=True))),
                    )
                )
        version.append(draw(commit_infos()))  # every version closes with its commitInfo
        versions.append(version)
        schemas.append(schema)
    return versions, schemas


def replay(table_path: str, versions: list[list[Action]]) -> list[Snapshot]:
    """The snapshot after each version."""
    snapshots = [Snapshot.from_actions(table_path, 0, versions[0])]
    for n, version in enumerate(versions[1:], start=1):
        snapshots.append(snapshots[-1].apply(n, version))
    return snapshots


def snapshot_state(s: Snapshot) -> tuple[Any, ...]:
    """Everything a snapshot holds, as comparable values (order of segments and files too)."""
    segments = [(sid, seg, list(seg.files)) for sid, seg in s.segments.items()]
    return (
        s.table_path,
        s.version,
        s.timestamp,
        s.metadata,
        segments,
        dict(s.txns),
        s.data_version,
        s.next_segment,
        s.replay_entries,  # the checkpoint policy's count: the same on every path
        s.recent_checkpoints,
        s.num_files,  # kept by each apply, counted from a checkpoint's segments
    )
