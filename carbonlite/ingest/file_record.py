"""The record of the files a table has ingested from one source, kept bounded.

It lives in the table, committed in the same version as the rows it accounts for: a marker
``files:<source>`` (a generation number, moved by compare-and-set) and a state table of the
same name (``Table.append(state=...)``, an Arrow file under ``_carbonlite/state``) listing
the files by path relative to the source, each with its modification time.

Bounded the way Spark's file source bounds its seen-files map (``maxFileAge``): the record
keeps the files modified at or after its *horizon*, the newest file's modification time
minus ``max_file_age``; every file modified before the horizon counts as ingested, whether
it is listed or not. A source that runs for years keeps a record of the files of the last
``max_file_age`` (7 days by default), never more. The one thing it gives up: a file that
first appears with a modification time already behind the horizon is not ingested (the
ingester counts and reports it as too old).
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

__all__ = ["FILE_RECORD_SCHEMA", "FileRecord", "record_name"]

FILE_RECORD_SCHEMA = pa.schema(
    [
        pa.field("file", pa.string(), nullable=False),
        pa.field("modified_ms", pa.int64(), nullable=False),
    ]
)
"""The state table: one row per file kept, its path relative to the source and its
modification time (milliseconds since the epoch)."""

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
    files: Mapping[str, int] = field(default_factory=dict)
    """Path relative to the source -> modification time, of the files at or after the
    horizon."""

    def holds(self, file: str, modified_ms: int) -> bool:
        """Whether the file counts as ingested: listed, or behind the horizon."""
        return modified_ms < self.horizon_ms or file in self.files

    def behind(self, file: str, modified_ms: int) -> bool:
        """Whether the file is behind the horizon without having been listed (too old to
        tell whether it was ingested: it is not)."""
        return modified_ms < self.horizon_ms and file not in self.files

    @property
    def next_generation(self) -> int:
        return 0 if self.generation is None else self.generation + 1

    def marker(self) -> dict[str, tuple[int | None, int]]:
        """The compare-and-set move a commit adding files to it makes."""
        return {self.name: (self.generation, self.next_generation)}

    def with_files(self, added: Mapping[str, int], max_age_ms: int) -> FileRecord:
        """The record after a commit of ``added`` (path -> modification time): the next
        generation, the horizon moved up to the newest file's time minus ``max_age_ms``
        (never back), and the files behind it forgotten."""
        files = {**self.files, **added}
        newest = max(files.values(), default=None)
        horizon = self.horizon_ms
        if newest is not None:
            horizon = max(horizon, newest - max_age_ms)
        kept = {f: t for f, t in files.items() if t >= horizon}
        return FileRecord(self.name, self.source, self.next_generation, horizon, kept)

    # --- the state table ------------------------------------------------------------------------

    def to_arrow(self) -> pa.Table:
        files = sorted(self.files)
        return pa.table(
            {"file": files, "modified_ms": [self.files[f] for f in files]},
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
        if (
            table.schema.remove_metadata() != FILE_RECORD_SCHEMA
            or meta.get(b"generation") != str(generation).encode()
        ):
            raise CorruptDataError(
                f"{where} at version {snapshot.version} is not the record of generation "
                f"{generation} (its state file {stored.path!r} says "
                f"{meta.get(b'generation', b'none').decode()!r}, schema {table.schema.remove_metadata()})"
            )
        files = dict(
            zip(
                table.column("file").to_pylist(),
                table.column("modified_ms").to_pylist(),
                strict=True,
            )
        )
        return cls(empty.name, source, generation, int(meta.get(b"horizon_ms", b"0")), files)
