"""Exactly-once ingestion of the finished files other engines write (Flink's ``FileSink``,
Flume's HDFS sink, Spark's batch file writers, any writer that renames a file into place
when it is done).

Each commit holds the rows of a batch of files and, in the SAME log version, the record of
the files ingested from the source (``carbonlite/ingest/file_record.py``): a marker moved by
compare-and-set and a state table listing the files. So a SIGKILL at any moment loses and
duplicates nothing (the files of a commit that did not land are read again), and two
ingesters of one source never both commit a file: the second's commit finds the marker
moved, commits nothing (``TxnMovedError``, or a skipped result), reads the record again and
goes on with the files it does not hold.

A file that does not decode as the format, or whose rows do not fit the table, goes whole
(its bytes, path and the error) to the bad-records table, recorded there exactly once the
same way (``files-bad:<source>``), before the main table records it as ingested; without
that table it stops the ingester with an :class:`IngestError` naming it, and nothing past the
last commit is committed. A file that changed since it was listed, or is gone, is left for a
later listing.

The record keeps the version of each file it read (modification time, size, ETag): a file
replaced under the same path is a new file, read and recorded again. What the ingester
cannot trust is said in a warning (the ``carbonlite.ingest.files`` logger) and counted in
the result, never used silently: a file stamped ahead of the clock (read; its time does not
move the record's horizon), a replaced file, a symbolic link in the source (never followed).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from carbonlite.clock import now_ms
from carbonlite.errors import (
    CarbonLiteError,
    IngestError,
    InvalidOptionError,
    SchemaMismatchError,
)
from carbonlite.ingest.decode import check_json_columns
from carbonlite.ingest.file_formats import check_format, decode_file
from carbonlite.ingest.file_notes import FileIngestResult, note_taken, warn_skipped
from carbonlite.ingest.file_record import FileRecord, FileVersion
from carbonlite.ingest.file_source import FileSource, Listing, SourceFile
from carbonlite.ingest.options import check_batch_rows, check_positive_seconds
from carbonlite.ingest.targets import create_bad_records, open_bad_records, open_target
from carbonlite.metadata import TxnMovedError
from carbonlite.metadata.columns import layout_of, retired_names
from carbonlite.seams import reach
from carbonlite.storage import open_storage, split_protocol
from carbonlite.table import Table
from carbonlite.writer.batches import conformed_batches

__all__ = [
    "FILE_BAD_RECORDS_SCHEMA",
    "FILE_METADATA_COLUMNS",
    "FileIngestResult",
    "FileIngester",
]

FILE_BAD_RECORDS_SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("file", pa.string()),
        ("size", pa.int64()),
        ("modified", pa.timestamp("ms", tz="UTC")),
        ("content", pa.binary()),
        ("error", pa.string()),
    ]
)
"""A file that could not be ingested: the source, its path below it, its size, modification
time and every byte, and why."""

FILE_METADATA_COLUMNS = ("_file_path", "_file_modified")
"""Columns the ingester fills from the file rather than its rows, when the table has them:
the path below the source, and the file's modification time."""

_GIVE_EVERY_COLUMN = (
    "write every column of the table into the files, or give the table a default for the "
    "missing ones (add_columns(..., defaults=...)) before they are ingested"
)

_SCHEMA_RETRIES = 3
"""Times a batch is read again after its commit was refused for a schema change meanwhile."""

DEFAULT_MAX_FILE_AGE = 7 * 24 * 3600.0
"""Seconds behind the newest file after which a file counts as ingested (Spark's
``maxFileAge`` default)."""


class _NotTaken(CarbonLiteError):
    """A file of a batch that is not committed with it (raised out of the rows the append
    reads, so nothing is committed; the batch is written again without it)."""

    def __init__(self, file: SourceFile, why: str) -> None:
        super().__init__(f"{file.relative}: {why}")
        self.file = file
        self.why = why


class _Unreadable(_NotTaken):
    """It does not decode as the format, or its rows do not fit the table."""

    def __init__(self, file: SourceFile, cause: Exception) -> None:
        lines = (" ".join(line.split()) for line in str(cause).splitlines())
        super().__init__(file, "; ".join(line for line in lines if line) or type(cause).__name__)
        self.cause = cause


class _NotReady(_NotTaken):
    """It changed since it was listed, or is gone: a later listing decides."""


@dataclass
class _Batch:
    """One attempt at a commit: the files it may take, those found bad before (recorded,
    not read), and what it read."""

    record: FileRecord
    files: list[SourceFile]
    bad: list[SourceFile]
    unread: Sequence[SourceFile] = ()
    """The files of the listing the record does not hold: the horizon stays at or before
    the oldest of them this batch does not take."""
    consumed: list[SourceFile] = field(default_factory=list)
    """Files read to their end, in order."""
    count: int = 0
    """Their rows."""
    after: FileRecord | None = None
    """The record it commits, once its rows are written."""
    now_ms: int = 0
    """The clock when the record it commits was made."""

    def rows(self, ingester: FileIngester, metadata: Any) -> Iterator[pa.RecordBatch]:
        """The rows of its files, file after file until ``max_batch_rows`` is reached."""
        skip = {f.relative for f in self.bad}
        for f in self.files:
            if f.relative in skip:
                continue
            if self.consumed and self.count >= ingester.max_batch_rows:
                return
            rows = 0
            for batch in ingester._file_rows(f, metadata):
                rows += batch.num_rows
                yield batch
            reach("files.after_file")
            self.consumed.append(f)
            self.count += rows

    @property
    def taken(self) -> list[SourceFile]:
        """The files its commit records: bad ones, and those read."""
        return [*self.bad, *self.consumed]

    def state(self, max_age_ms: int) -> dict[str, pa.Table]:
        """The record with its files (bad ones too), called once its rows are written."""
        done = {f.relative: f.version for f in self.taken}
        unread = [
            f.modified_ms
            for f in self.unread
            if f.relative not in done and not self.record.holds(f.relative, f.version)
        ]
        self.now_ms = now_ms()
        self.after = self.record.with_files(
            done, max_age_ms, now_ms=self.now_ms, unread_ms=min(unread, default=None)
        )
        return {self.record.name: self.after.to_arrow()}


class FileIngester:
    """Ingest the final files below ``source`` into ``table`` (a :class:`Table` or the path
    of an existing table), exactly once.

    ``format``: ``"parquet"``, ``"json"`` (newline-delimited), ``"csv"`` (with a header line)
    or ``"arrow"`` (IPC file or stream). ``storage_options``: for S3 paths (the table's, the
    source's, the bad-records table's). ``max_batch_rows`` and ``max_latency`` (seconds) bound
    a commit: it takes files until their rows reach ``max_batch_rows`` (a file is never
    split), and a file is committed at most about ``max_latency`` after it was written (the
    ingester waits that long for more files to commit together). ``max_file_age`` (seconds):
    how far behind the newest file a file may appear and still be ingested; the record of
    ingested files keeps that window and no more. ``bad_records``: path of a table for files
    that cannot be ingested (created at the first one). ``glob``: only files whose path below
    the source matches it. ``progress``: called after each commit with the result so far.

    Every argument is checked before anything is read; a bad one raises
    :class:`InvalidOptionError` saying what was expected."""

    def __init__(
        self,
        table: str | Table,
        source: str,
        *,
        format: str = "parquet",
        storage_options: Mapping[str, Any] | None = None,
        max_batch_rows: int = 100_000,
        max_latency: float = 1.0,
        max_file_age: float = DEFAULT_MAX_FILE_AGE,
        bad_records: str | None = None,
        glob: str | None = None,
        writer_id: str | None = None,
        progress: Callable[[FileIngestResult], None] | None = None,
    ) -> None:
        self.format = check_format(format)
        self.max_batch_rows = check_batch_rows(max_batch_rows)
        self.max_latency = check_positive_seconds(max_latency, what="max_latency")
        self.max_file_age_ms = round(
            check_positive_seconds(max_file_age, what="max_file_age") * 1000
        )
        if not isinstance(table, str | Table):
            raise InvalidOptionError(
                f"table must be a Table or the path of one, not {type(table).__name__}"
            )
        self.source = FileSource(source, storage_options, glob)
        if isinstance(table, Table):
            self.table = table
        else:
            self.table = open_target(table, _options_for(table, storage_options), writer_id)
        self._check_apart(self.table, "table", storage_options)
        if self.format == "json":
            check_json_columns(self._data_schema(self.table.schema), repr(self.table.path))
        self.bad_records = bad_records
        self.storage_options = storage_options
        self.bad: Table | None = None
        if bad_records is not None:
            self._check_apart(bad_records, "bad_records table", storage_options)
            self.bad = open_bad_records(
                bad_records,
                self.table,
                FILE_BAD_RECORDS_SCHEMA,
                _options_for(bad_records, storage_options),
            )
        self.progress = progress
        self.stop_event = threading.Event()
        self.result = FileIngestResult()
        self._poll = min(0.25, self.max_latency / 4)
        self._warned: set[str] = set()
        """Entries of the source warned about as skipped (each once while it stays)."""

    def _check_apart(
        self, table: Table | str, what: str, storage_options: Mapping[str, Any] | None
    ) -> None:
        """A table below the source would be ingested into itself; a source below the table
        is the table's own files."""
        if isinstance(table, Table):
            where = table.storage.uri(table.root)
        else:
            options = _options_for(table, storage_options)
            storage, root = open_storage(table, dict(options) if options else None)
            where = storage.uri(root)
        where, source = where.rstrip("/"), self.source.uri.rstrip("/")
        if where == source or where.startswith(source + "/") or source.startswith(where + "/"):
            raise InvalidOptionError(
                f"the {what} {where!r} and the source {source!r} overlap: keep the table out of "
                "the directory the engine writes its files into (and the source out of the table)"
            )

    @staticmethod
    def _data_schema(schema: pa.Schema) -> pa.Schema:
        """The table's columns that come from the files' rows."""
        return pa.schema([f for f in schema if f.name not in FILE_METADATA_COLUMNS])

    # --- the record --------------------------------------------------------------------------

    def _record(self, held: FileRecord | None = None) -> FileRecord:
        """The record in the table's latest version (``held`` again when it is still that)."""
        snapshot = self.table.refresh().snapshot()
        if held is not None and snapshot.txns.get(held.name) == held.generation:
            return held
        return FileRecord.of(
            "files", self.source.uri, snapshot, self.table.storage, self.table.root
        )

    # --- running -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Finish the current commit and return from :meth:`run`."""
        self.stop_event.set()

    def run(self, *, stop_at_end: bool = False, handle_sigterm: bool = False) -> FileIngestResult:
        """Ingest until :meth:`stop` (or SIGTERM with ``handle_sigterm``), or with
        ``stop_at_end`` until every final file listed at the start is ingested (or kept as
        bad)."""
        if handle_sigterm:
            signal.signal(signal.SIGTERM, lambda *_: self.stop_event.set())
        record = self._record()
        targets: set[str] | None = None
        due_at: dict[str, float] = {}  # when (monotonic) to commit each file: its first listing's
        while True:
            started = time.monotonic()
            listing = self.source.scan()
            listed_in = time.monotonic() - started
            record = self._record(record)
            reach("files.after_list")
            self._warned = warn_skipped(listing, self.source.uri, self._warned, self.result)
            unread = fresh = self._fresh(listing, record)
            if stop_at_end and targets is None:
                targets = {f.relative for f in fresh}
            if targets is not None:
                fresh = [f for f in fresh if f.relative in targets]
            self.result.pending = len(fresh)
            if not fresh:
                if targets is not None or self.stop_event.is_set():
                    break
                self.stop_event.wait(max(self._poll, 2 * listed_in))
                continue
            now, wall = time.monotonic(), time.time()
            for f in fresh:
                if f.relative not in due_at:
                    due_at[f.relative] = self._due(f, now, wall)
            due = min(due_at[f.relative] for f in fresh)
            if targets is None and not self.stop_event.is_set() and now < due:
                self.stop_event.wait(min(due - now, max(self._poll, 2 * listed_in)))
                continue
            commits = self.result.commits
            record = self._ingest(fresh, record, unread)
            due_at = {f.relative: due_at[f.relative] for f in fresh}
            if self.stop_event.is_set() and targets is None:
                break
            if self.result.commits == commits:  # every file changing, or another's turn
                self.stop_event.wait(max(self._poll, 2 * listed_in))
        return self.result

    def _fresh(self, listing: Listing, record: FileRecord) -> list[SourceFile]:
        """The files of ``listing`` the record does not hold as the version listed (those
        behind its horizon are counted: ingested long ago, or published too late; not read
        either way)."""
        fresh = []
        behind = 0
        for f in listing.files:
            if record.behind(f.relative, f.version):
                behind += 1
            elif not record.holds(f.relative, f.version):
                fresh.append(f)
        self.result.behind_horizon = behind
        return fresh

    def _due(self, file: SourceFile, seen: float, seen_wall: float) -> float:
        """When (monotonic) ``file``, first listed at ``seen`` (``seen_wall`` by the wall
        clock), is to be committed: ``max_latency`` after it was written, or after it was
        first listed when its time is not to be trusted (in the future)."""
        age = seen_wall - file.modified_ms / 1000
        return seen + self.max_latency - min(max(age, 0.0), self.max_latency)

    def _ingest(
        self, fresh: list[SourceFile], record: FileRecord, unread: Sequence[SourceFile]
    ) -> FileRecord:
        """Commit ``fresh`` (oldest first) in batches; the record once they are in, or once
        the rest must wait for a later listing (they changed, or another ingester moved the
        record first). ``unread``: every file of the listing the record did not hold."""
        left = list(fresh)
        while left and not self.stop_event.is_set():
            record, later, committed = self._commit_batch(left, record, unread)
            if not committed:
                break
            left = [
                f
                for f in left
                if not record.holds(f.relative, f.version) and f.relative not in later
            ]
        return record

    def _commit_batch(
        self, files: list[SourceFile], record: FileRecord, unread: Sequence[SourceFile]
    ) -> tuple[FileRecord, set[str], bool]:
        """One commit of the first of ``files`` (until ``max_batch_rows``): (the record
        after it, the files it left for a later listing, whether it committed: not when
        another ingester moved the record first, or when no file was ready)."""
        bad: list[SourceFile] = []
        later: set[str] = set()
        refused = 0
        while True:
            ready = [f for f in files if f.relative not in later]
            if not ready:
                return record, later, False
            batch = _Batch(record, ready, bad, unread)
            metadata = self.table.refresh().snapshot().metadata
            try:
                result = self.table.append(
                    batch.rows(self, metadata),
                    markers=record.marker(),
                    state=lambda b=batch: b.state(self.max_file_age_ms),  # type: ignore[misc]
                )
            except _Unreadable as exc:
                self._refuse_or_keep(exc)
                bad.append(exc.file)
                continue
            except _NotReady as exc:
                self.result.not_ready += 1
                later.add(exc.file.relative)
                continue
            except TxnMovedError:
                self.result.restarts += 1
                return self._record(), later, False
            except SchemaMismatchError:
                # a column its rows were conformed to was renamed or dropped since (the
                # commit requires ColumnsAsWritten): read the files again under the new schema
                refused += 1
                if refused >= _SCHEMA_RETRIES:
                    raise
                continue
            if result.skipped or batch.after is None:
                self.result.restarts += 1
                return self._record(), later, False
            reach("files.after_commit")
            self.result.commits += 1
            self.result.files += len(batch.consumed)
            self.result.rows += batch.count
            note_taken(batch.taken, batch.record, batch.now_ms, self.source.uri, self.result)
            if self.progress is not None:
                self.progress(self.result)
            return batch.after, later, True

    def _file_rows(self, f: SourceFile, metadata: Any) -> Iterator[pa.RecordBatch]:
        """The rows of one file in the table's shape (``metadata``: the table's);
        :class:`_Unreadable` or :class:`_NotReady` when they cannot be taken now."""
        schema = metadata.schema
        data_schema = self._data_schema(schema)
        defaults = layout_of(metadata).defaults
        where = f"file {f.relative!r}"
        try:
            if f.size == 0 and self.format == "csv":
                self._check_ready(f)  # no rows (its decoder wants a header line)
                return
            with self.source.open(f) as handle:
                decoded = decode_file(
                    self.format,
                    handle,
                    data_schema,
                    where=repr(self.table.path),
                    retired=retired_names(metadata),
                    defaults=defaults,
                )
                for batch in decoded:
                    for conformed in conformed_batches(
                        batch,
                        data_schema,
                        where=where,
                        fill_missing=False,
                        defaults=defaults,
                        metadata=metadata,
                        fix=_GIVE_EVERY_COLUMN,
                    ):
                        yield self._with_metadata(conformed, f, schema)
        except CarbonLiteError as exc:
            if not isinstance(exc, SchemaMismatchError):
                raise  # the storage's, not the file's
            self._check_ready(f)
            raise _Unreadable(f, exc) from exc
        except Exception as exc:  # the decoder's: what the bytes are
            self._check_ready(f)
            raise _Unreadable(f, exc) from exc
        self._check_ready(f)

    def _check_ready(self, f: SourceFile) -> None:
        """:class:`_NotReady` unless the file is still the version listed (what was read)."""
        now = self.source.current(f)
        if now is None:
            raise _NotReady(f, "gone since it was listed")
        if not _unchanged(f.version, now):
            raise _NotReady(f, f"changed since it was listed ({f.size} bytes then, {now.size} now)")

    def _with_metadata(
        self, rows: pa.RecordBatch, f: SourceFile, schema: pa.Schema
    ) -> pa.RecordBatch:
        if not any(name in schema.names for name in FILE_METADATA_COLUMNS):
            return rows
        values = {
            "_file_path": pa.scalar(f.relative, pa.string()),
            "_file_modified": pa.scalar(f.modified_ms, pa.timestamp("ms", tz="UTC")),
        }
        columns = {name: rows.column(name) for name in rows.schema.names}
        for name, value in values.items():
            if name in schema.names:
                target = schema.field(name).type
                columns[name] = pa.repeat(value, rows.num_rows).cast(target)
        return pa.record_batch([columns[n] for n in schema.names], schema=schema)

    # --- files that cannot be ingested -------------------------------------------------------

    def _refuse_or_keep(self, exc: _Unreadable) -> None:
        """Keep the file in the bad-records table, or stop the ingester."""
        f = exc.file
        if self.bad is None and self.bad_records is not None:
            self.bad = create_bad_records(
                self.bad_records,
                self.table,
                FILE_BAD_RECORDS_SCHEMA,
                _options_for(self.bad_records, self.storage_options),
            )
        if self.bad is None:
            message = (
                f"file {f.relative!r} of {self.source.uri} cannot be ingested into "
                f"{self.table.path!r} as {self.format}: {exc.why} (nothing past the last commit "
                "was committed; give a bad-records table to keep going, or move the file out "
                "of the source)"
            )
            if isinstance(exc.cause, SchemaMismatchError):
                raise SchemaMismatchError(message) from exc.cause
            raise IngestError(message) from exc.cause
        self._keep_bad(f, exc.why)

    def _keep_bad(self, f: SourceFile, why: str) -> None:
        """Commit ``f`` to the bad-records table with its record there, unless it holds it."""
        assert self.bad is not None
        while True:
            snapshot = self.bad.refresh().snapshot()
            kept = FileRecord.of(
                "files-bad", self.source.uri, snapshot, self.bad.storage, self.bad.root
            )
            if kept.holds(f.relative, f.version):
                return  # kept before: a restart or another ingester read it already
            row = pa.table(
                {
                    "source": [self.source.uri],
                    "file": [f.relative],
                    "size": [f.size],
                    "modified": pa.array([f.modified_ms], pa.timestamp("ms", tz="UTC")),
                    "content": [self.source.read_all(f)],
                    "error": [why],
                },
                schema=FILE_BAD_RECORDS_SCHEMA,
            )
            after = kept.with_files({f.relative: f.version}, self.max_file_age_ms, now_ms=now_ms())
            try:
                result = self.bad.append(
                    row, markers=kept.marker(), state={kept.name: after.to_arrow()}
                )
            except TxnMovedError:
                continue
            if result.skipped:
                continue
            reach("files.after_bad_commit")
            self.result.bad_files += 1
            return


def _unchanged(listed: FileVersion, now: FileVersion) -> bool:
    """Whether the file is still the version listed: the same version, and the same size
    (what was read was that many bytes)."""
    return listed.same(now) and (now.size is None or now.size == listed.size)


def _options_for(path: str, storage_options: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``storage_options`` for an S3 path; local paths take none."""
    return storage_options if split_protocol(path)[0] == "s3" else None
