"""Bloom filter files: the filters of a write's blocklets, in one file beside the data file.

A writer asked for bloom filters (table property ``bloom_filter_columns``) gets each
blocklet's record from the format writer (``format/bloom.py``), and writes them into one new
file ``<data file>.<token>.bloom`` (put-if-absent) once the data is durable; the
``appendBlocklets`` action that commits the blocklets names it (:class:`BloomFile`). A bloom
file is never changed; a file of blocklets that outlives it (``build_index``) gets a new one.
Layout: docs/FORMAT.md, "Bloom filter files".
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa

from carbonlite.errors import CommitConflictError, InvalidOptionError
from carbonlite.format.bloom import BLOOM_FILE_MAGIC, BloomSpec, bloom_supported
from carbonlite.format.meta import BlockletMeta
from carbonlite.metadata.actions import BloomFile, BloomRef
from carbonlite.metadata.columns import ColumnLayout
from carbonlite.properties import TableProperties
from carbonlite.storage import Storage

__all__ = [
    "BLOOM_SUFFIX",
    "INDEXED_PROPERTIES",
    "bloom_path",
    "bloom_spec",
    "blooms_of",
    "check_bloom_columns",
    "copy_blooms",
    "discard_blooms",
    "write_bloom_file",
]

BLOOM_SUFFIX = ".bloom"


def bloom_spec(
    properties: Mapping[str, str], schema: pa.Schema, layout: ColumnLayout
) -> BloomSpec | None:
    """The bloom filters a write into a table of ``properties`` and ``schema`` (table column
    names) builds, by physical column name; None when the table asks for none."""
    props = TableProperties(properties)
    names = [
        n
        for n in props.bloom_filter_columns
        if n in schema.names and bloom_supported(schema.field(n).type)
    ]
    if not names:
        return None
    return BloomSpec(tuple(layout.physical(n) for n in names), props.bloom_filter_fpp)


INDEXED_PROPERTIES = ("bloom_filter_columns", "secondary_index_columns")
"""Properties that name columns to index: each must name columns of the schema whose type
can be indexed."""


def check_bloom_columns(properties: Mapping[str, str], schema: pa.Schema, *, where: str) -> None:
    """Refuse a ``bloom_filter_columns`` or ``secondary_index_columns`` that names a column
    ``schema`` lacks or one whose type cannot be indexed."""
    props = TableProperties(properties)
    problems = []
    for key in INDEXED_PROPERTIES:
        for name in getattr(props, key):
            if name not in schema.names:
                problems.append(f"{key}: {name!r} is not a column (the columns are {schema.names})")
            elif not bloom_supported(schema.field(name).type):
                problems.append(
                    f"{key}: {name!r} is {schema.field(name).type}: indexes serve equality "
                    "lookups of integers, floats, decimals, strings, binaries, dates, times and "
                    "timestamps"
                )
    if problems:
        raise InvalidOptionError(
            f"the indexed columns of {where!r} cannot be kept:\n  " + "\n  ".join(problems)
        )


def bloom_path(data_file: str, token: str) -> str:
    """The bloom filter file of ``data_file`` that the write ``token`` writes."""
    return f"{data_file}.{token}{BLOOM_SUFFIX}"


def write_bloom_file(
    storage: Storage,
    root: str,
    data_file: str,
    records: Sequence[tuple[int, bytes]],
    columns: Sequence[str],
) -> BloomFile | None:
    """Write the records ``(blocklet offset, record)`` of blocklets of ``data_file`` into a new
    bloom file; None when there are none. Nothing refers to it until a commit names it."""
    if not records:
        return None
    path = bloom_path(data_file, uuid.uuid4().hex[:16])
    parts = [BLOOM_FILE_MAGIC]
    refs = []
    size = len(BLOOM_FILE_MAGIC)
    for blocklet, record in records:
        refs.append(BloomRef(blocklet, path, size, len(record), tuple(columns)))
        parts.append(record)
        size += len(record)
    if not storage.put_if_absent(storage.join(root, path), b"".join(parts)):
        raise CommitConflictError(
            f"bloom filter file {path!r} exists already (a name clash); nothing was "
            "committed, run the operation again"
        )
    return BloomFile(path, size, tuple(columns), tuple(refs))


def blooms_of(
    storage: Storage,
    root: str,
    data_file: str,
    metas: Iterable[BlockletMeta],
    spec: BloomSpec | None,
) -> tuple[BloomFile, ...]:
    """The bloom file of blocklets just written to ``data_file`` (none without ``spec``)."""
    if spec is None:
        return ()
    records = [(m.offset, m.bloom) for m in metas if m.bloom is not None]
    written = write_bloom_file(storage, root, data_file, records, spec.columns)
    return () if written is None else (written,)


def copy_blooms(
    storage: Storage,
    root: str,
    data_file: str,
    moved: Sequence[tuple[BloomRef, int]],
) -> tuple[BloomFile, ...]:
    """Blocklets moved into ``data_file`` keep their filters: each ``(ref, new offset)``'s
    record is copied into one new bloom file of ``data_file`` (one read per source file), so
    no two data files share a bloom file and ``clean`` may delete it with its data file.
    Filters whose file is gone are left behind: a blocklet without one is simply read."""
    if not moved:
        return ()
    sources: dict[str, bytes | None] = {}
    by_columns: dict[tuple[str, ...], list[tuple[int, bytes]]] = {}
    for ref, offset in moved:
        if ref.path not in sources:
            try:
                sources[ref.path] = storage.read(storage.join(root, ref.path))
            except FileNotFoundError:
                sources[ref.path] = None
        data = sources[ref.path]
        if data is None or ref.offset + ref.length > len(data):
            continue
        record = data[ref.offset : ref.offset + ref.length]
        by_columns.setdefault(ref.columns, []).append((offset, record))
    out = []
    for columns, records in by_columns.items():
        written = write_bloom_file(storage, root, data_file, records, columns)
        if written is not None:
            out.append(written)
    return tuple(out)


def discard_blooms(storage: Storage, root: str, blooms: Iterable[BloomFile]) -> None:
    """Delete bloom files of a write that was not committed (best effort: ``recover`` removes
    what is left)."""
    for b in blooms:
        with contextlib.suppress(OSError):
            storage.delete(storage.join(root, b.path))
