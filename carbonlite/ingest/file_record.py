"""The record of the files a table has ingested from one source, kept bounded.

It lives in the table, committed in the same version as the rows it accounts for: a marker
``files:<source>`` (a generation number, moved by compare-and-set) and a state table of the
same name (``Table.append(state=...)``, an Arrow file under ``_carbonlite/state``) listing
the files by path relative to the source, each with the version of it that was read
(:class:`FileVersion`: its modification time, size and, on an object store, ETag). A file
listed again under the same path as another version (replaced) is a new file.

Bounded the way Spark's file source bounds its seen-files map (``maxFileAge``): the record
keeps the files modified at or after its *horizon*, the newest file's modification time
minus ``max_file_age``; every file modified before the horizon counts as ingested, whether
it is listed or not. A source that runs for years keeps a record of the files of the last
``max_file_age`` (7 days by default), never more. The one thing it gives up: a file that
first appears with a modification time already behind the horizon is not ingested (the
ingester counts and reports it as too old).

The horizon never passes what it has no right to: a time ahead of the ingester's clock (a
producer's skewed clock, a copy that kept a future time) counts as the clock's now, so one
such file cannot make every ordinary file after it look too old; and it stays at or before
the oldest file listed and not read yet (``unread_ms``: one left for a later listing, one a
later commit takes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from carbonlite.errors import CorruptDataError
from carbonlite.metadata import Snapshot
from carbonlite.storage import Storage
from carbonlite.writer.publish import read_state

__all__ = ["FILE_RECORD_SCHEMA", "FileRecord", "FileVersion", "record_name"]

FILE_RECORD_SCHEMA = pa.schema(
    [
        pa.field("file", pa.string(), nullable=False),
        pa.field("modified_ms", pa.int64(), nullable=False),
        pa.field("size", pa.int64()),
        pa.field("etag", pa.string()),
    ]
)
"""The state table: one row per file kept, its path relative to the source and the version
of it that was read: modification time (milliseconds since the epoch), size in bytes (null
in a record kept before sizes were), and an object store's ETag (null for files of other
storage)."""

_EARLIER_SCHEMA = pa.schema([FILE_RECORD_SCHEMA.field(0), FILE_RECORD_SCHEMA.field(1)])
"""The state table as kept before versions had a size and an ETag: read, never written."""

_MAX_NAME = 200
"""The longest state name a table takes (``write_states``)."""


def record_name(kind: str, source: str) -> str:
    """The marker and state name of the record of ``source`` (a normalised URI) of ``kind``
    (``files``, or ``files-bad`` in a bad-records table): the URI itself when it fits, else
    its SHA-256 (the state's metadata keeps the URI)."""
    name = f"{kind}:{source}"
    if len(name) <= _MAX_NAME:
        return name
    return f"{kind}:sha256:{hashlib.sha256(source.encode()).hexdigest()}"


@dataclass(frozen=True, slots=True)
class FileVersion:
    """What tells one version of a file from another under the same path."""

    modified_ms: int
    """Modification time, milliseconds since the epoch."""
    size: int | None = None
    """Bytes (None: recorded before sizes were)."""
    etag: str | None = None
    """An object store's ETag: it changes whenever the object's bytes may have (None: the
    storage has none, or recorded before ETags were)."""

    def same(self, other: FileVersion) -> bool:
        """Whether ``other`` is this version of the file: the same ETag when both have one (an
        object uploaded again with the same bytes is the same file); else the same
        modification time and, when both know it, the same size."""
        if self.etag is not None and other.etag is not None:
            return self.etag == other.etag
        if self.modified_ms != other.modified_ms:
            return False
        return self.size is None or other.size is None or self.size == other.size


def _version(version: FileVersion | int) -> FileVersion:
    return version if isinstance(version, FileVersion) else FileVersion(version)


@dataclass(frozen=True)
class FileRecord:
    """The files of one source a table holds, as of one of its versions."""

    name: str
    """Its marker's and state's name (:func:`record_name`)."""
    source: str
    generation: int | None = None
    """The marker's value: moved by one with each commit (None: nothing ingested yet)."""
    horizon_ms: int = 0
    """Files modified before it count as ingested (milliseconds since the epoch)."""
    files: Mapping[str, FileVersion] = field(default_factory=dict)
    """Path relative to the source -> the version of it read, of the files at or after the
    horizon."""

    def holds(self, file: str, version: FileVersion | int) -> bool:
        """Whether the file at ``file`` as ``version`` (a listing's; or its modification
        time alone) counts as ingested: recorded as that version, or behind the horizon."""
        version = _version(version)
        return version.modified_ms < self.horizon_ms or self._recorded(file, version)

    def behind(self, file: str, version: FileVersion | int) -> bool:
        """Whether the file is behind the horizon without being recorded as that version
        (too old to tell whether it was ingested: it is not)."""
        version = _version(version)
        return version.modified_ms < self.horizon_ms and not self._recorded(file, version)

    def replaces(self, file: str, version: FileVersion | int) -> FileVersion | None:
        """The version recorded under ``file`` when ``version`` is another one (the file was
        replaced since it was ingested), else None."""
        recorded = self.files.get(file)
        if recorded is None or recorded.same(_version(version)):
            return None
        return recorded

    def _recorded(self, file: str, version: FileVersion) -> bool:
        recorded = self.files.get(file)
        return recorded is not None and recorded.same(version)

    @property
    def next_generation(self) -> int:
        return 0 if self.generation is None else self.generation + 1

    def marker(self) -> dict[str, tuple[int | None, int]]:
        """The compare-and-set move a commit adding files to it makes."""
        return {self.name: (self.generation, self.next_generation)}

    def with_files(
        self,
        added: Mapping[str, FileVersion | int],
        max_age_ms: int,
        *,
        now_ms: int | None = None,
        unread_ms: int | None = None,
    ) -> FileRecord:
        """The record after a commit of ``added`` (path -> the version read, or its
        modification time alone): the next generation, the horizon moved up to the newest
        file's time minus ``max_age_ms`` (never back), and the files behind it forgotten.

        ``now_ms``: the committer's clock; a time ahead of it counts as it (a file stamped in
        the future never moves the horizon past what the clock allows). ``unread_ms``: the
        oldest modification time of the files listed and not read yet; the horizon stays at
        or before it."""
        files = {**self.files, **{f: _version(v) for f, v in added.items()}}
        times = (v.modified_ms for v in files.values())
        newest = max(times if now_ms is None else (min(t, now_ms) for t in times), default=None)
        horizon = self.horizon_ms
        if newest is not None:
            wanted = newest - max_age_ms
            if unread_ms is not None:
                wanted = min(wanted, unread_ms)
            horizon = max(horizon, wanted)
        kept = {f: v for f, v in files.items() if v.modified_ms >= horizon}
        return FileRecord(self.name, self.source, self.next_generation, horizon, kept)

    # --- the state table ------------------------------------------------------------------------

    def to_arrow(self) -> pa.Table:
        files = sorted(self.files)
        versions = [self.files[f] for f in files]
        return pa.table(
            {
                "file": files,
                "modified_ms": [v.modified_ms for v in versions],
                "size": [v.size for v in versions],
                "etag": [v.etag for v in versions],
            },
            schema=FILE_RECORD_SCHEMA.with_metadata(
                {
                    "source": self.source,
                    "generation": str(self.generation),
                    "horizon_ms": str(self.horizon_ms),
                }
            ),
        )

    @classmethod
    def empty(cls, kind: str, source: str) -> FileRecord:
        return cls(record_name(kind, source), source)

    @classmethod
    def of(
        cls, kind: str, source: str, snapshot: Snapshot, storage: Storage, root: str
    ) -> FileRecord:
        """The record of ``source`` in ``snapshot`` (empty when it has none)."""
        empty = cls.empty(kind, source)
        generation = snapshot.txns.get(empty.name)
        stored = snapshot.states.get(empty.name)
        if generation is None and stored is None:
            return empty
        where = f"the record of files ingested from {source!r} ({empty.name!r})"
        if generation is None or stored is None:
            raise CorruptDataError(
                f"{where} is incomplete at version {snapshot.version}: it has "
                f"{'a state table' if stored else 'a marker'} but no "
                f"{'marker' if stored else 'state table'}; they are only ever committed together"
            )
        table = read_state(storage, root, stored)
        meta = table.schema.metadata or {}
        shape = table.schema.remove_metadata()
        if (
            shape not in (FILE_RECORD_SCHEMA, _EARLIER_SCHEMA)
            or meta.get(b"generation") != str(generation).encode()
        ):
            raise CorruptDataError(
                f"{where} at version {snapshot.version} is not the record of generation "
                f"{generation} (its state file {stored.path!r} says "
                f"{meta.get(b'generation', b'none').decode()!r}, schema {shape})"
            )
        n = table.num_rows
        columns = [
            table.column(name).to_pylist() if name in shape.names else [None] * n
            for name in FILE_RECORD_SCHEMA.names
        ]
        files = {
            file: FileVersion(modified, size, etag)
            for file, modified, size, etag in zip(*columns, strict=True)
        }
        return cls(empty.name, source, generation, int(meta.get(b"horizon_ms", b"0")), files)
