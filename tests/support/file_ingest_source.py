"""A source directory for the file ingester's crash, race and interleaving tests, and the check
that the table holds what it should.

:class:`Source` writes final files the way the engines do (to a hidden in-progress name, then a
rename into place; an object store's put), good ones whose rows are known from their number,
and damaged ones; and files that are never final (in progress, under ``_temporary``), whose
rows must never appear. :func:`check_ingested` then checks the table against it:

- every row of every good file exactly once, with its ``_file_path`` and ``_file_modified``
  (a file replaced since it was first written: each version read once, checked by the test);
- each file's rows in one version, the version in which the record of ingested files lists
  the file (as the version read), and no rows in a version that did not move the record;
- the record's marker moved by one in each version that changed the record (its generation is
  the number of commits that moved it), and its state lists every final file (bad ones too);
- every bad file in the bad-records table exactly once, with its bytes, and in the record there;
- ``verify`` clean on both tables.
"""

from __future__ import annotations

import io
import os
import random
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

import carbonlite as cl
from carbonlite.ingest.file_record import record_name
from carbonlite.ingest.file_source import FileSource, SourceFile
from carbonlite.storage import open_storage

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("payload", pa.string()),
        ("_file_path", pa.string()),
        ("_file_modified", pa.timestamp("ms", tz="UTC")),
    ]
)
"""The table: two columns from the files' rows, two the ingester fills from the file."""

ROWS_SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])
"""The files' rows."""

BAD_KINDS = ("garbage", "truncated", "missing_column", "wrong_type", "empty", "half_good")
"""Ways a file is damaged: not parquet at all, cut short, a column of the table missing, a
column of another type, no bytes, and a first row group that decodes with a second that does
not (its first rows were read, and written, before the error)."""

HALF_GOOD_ROWS = 70_000
"""Rows in a ``half_good`` file's first row group: more than the decoder's 65,536-row batch,
so a batch of them is yielded (and written) before the second row group fails."""


def file_rows(number: int, count: int) -> pa.Table:
    """The rows of good file ``number``: ids ``number * 1000 + j``."""
    ids = [number * 1000 + j for j in range(count)]
    return pa.table(
        {"id": ids, "payload": [f"{number}-{j}" for j in range(count)]}, schema=ROWS_SCHEMA
    )


def parquet_bytes(table: pa.Table, **kwargs: object) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, **kwargs)  # type: ignore[arg-type]
    return out.getvalue()


def bad_bytes(kind: str, number: int) -> bytes:
    """A damaged file of ``kind`` (:data:`BAD_KINDS`)."""
    good = parquet_bytes(file_rows(number, 20))
    if kind == "garbage":
        return b"this is not parquet " * 20
    if kind == "truncated":
        return good[: len(good) // 2]
    if kind == "missing_column":
        return parquet_bytes(pa.table({"id": [number * 1000]}))
    if kind == "wrong_type":
        return parquet_bytes(pa.table({"id": ["not a number"], "payload": ["x"]}))
    if kind == "empty":
        return b""
    if kind == "half_good":
        rows = pa.table(
            {
                "id": pa.array([number * 1000] * (HALF_GOOD_ROWS + 10), pa.int64()),
                "payload": pa.array(["h"] * (HALF_GOOD_ROWS + 10)),
            }
        )
        data = bytearray(parquet_bytes(rows, row_group_size=HALF_GOOD_ROWS, compression="none"))
        column = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(1).column(0)
        where = column.dictionary_page_offset or column.data_page_offset
        data[where : where + 16] = b"\xff" * 16  # the page header no longer decodes
        return bytes(data)
    raise ValueError(f"unknown kind {kind!r}")


@dataclass
class Source:
    """A directory (or ``memory://`` prefix) of finished files."""

    uri: str
    good: dict[str, list[int]] = field(default_factory=dict)
    """Final good files: path below the source -> its ids."""
    bad: dict[str, bytes] = field(default_factory=dict)
    """Final damaged files: path -> bytes."""
    never: list[int] = field(default_factory=list)
    """Ids of files that are never final."""
    numbers: int = 0
    """The last file number used (ids of file n: n * 1000 + j)."""
    rewritten: set[str] = field(default_factory=set)
    """Files replaced after they were first written (their time is no longer the one read;
    each version may have been read, and its rows landed, once)."""

    def __post_init__(self) -> None:
        self.storage, self.root = open_storage(self.uri, None)
        self.local = "://" not in self.uri or self.uri.startswith("file://")
        if self.local:
            os.makedirs(self.root, exist_ok=True)

    def _put(self, relative: str, data: bytes) -> None:
        """Write a file and give it its final name: a hidden in-progress name renamed into
        place (as Flink's and Hadoop's sinks do), or one put on an object store."""
        final = self.storage.join(self.root, relative)
        if not self.local:
            self.storage.put(final, data)
            return
        folder, name = os.path.split(final)
        os.makedirs(folder, exist_ok=True)
        temporary = os.path.join(folder, f".{name}.inprogress")
        with open(temporary, "wb") as f:
            f.write(data)
        os.rename(temporary, final)

    def _name(self, number: int, folder: str | None) -> str:
        name = f"part-{number:05d}.parquet"
        return name if folder is None else f"{folder}/{name}"

    def add_good(self, count: int, folder: str | None = None) -> str:
        number = self.numbers = self.numbers + 1
        relative = self._name(number, folder)
        rows = file_rows(number, count)
        self._put(relative, parquet_bytes(rows))
        self.good[relative] = rows.column("id").to_pylist()
        return relative

    def rewrite(self, relative: str, count: int) -> None:
        """Replace good file ``relative`` with ``count`` rows of the same number (its first
        rows the same)."""
        number = int(relative.rsplit("-", 1)[1].split(".")[0])
        rows = file_rows(number, count)
        self._put(relative, parquet_bytes(rows))
        self.good[relative] = rows.column("id").to_pylist()
        self.rewritten.add(relative)

    def add_bad(self, kind: str, folder: str | None = None) -> str:
        number = self.numbers = self.numbers + 1
        relative = self._name(number, folder)
        data = bad_bytes(kind, number)
        self._put(relative, data)
        self.bad[relative] = data
        return relative

    def add_never_final(self) -> None:
        """Files an ingester must never read: in progress, and under a temporary folder."""
        for relative in (
            f".part-{self.numbers + 1:05d}.parquet.inprogress",
            f"_temporary/0/part-{self.numbers + 2:05d}.parquet",
            f"part-{self.numbers + 3:05d}.parquet.tmp",
        ):
            number = self.numbers = self.numbers + 1
            rows = file_rows(number, 5)
            path = self.storage.join(self.root, relative)
            if self.local:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(parquet_bytes(rows))
            else:
                self.storage.put(path, parquet_bytes(rows))
            self.never.extend(rows.column("id").to_pylist())

    def add_random(self, rng: random.Random, bad_share: float = 0.15) -> str:
        """A good file of 20-150 rows (sometimes in a dated folder), or a damaged one."""
        folder = rng.choice([None, None, "2026-11-26", "2026-11-26/hour=10"])
        if rng.random() < bad_share:
            kind = rng.choice([k for k in BAD_KINDS if k != "half_good"])
            return self.add_bad(kind, folder)
        return self.add_good(rng.randint(20, 150), folder)

    def listed(self) -> dict[str, SourceFile]:
        """The final files as the ingester lists them."""
        return {f.relative: f for f in FileSource(self.uri, None, None).list()}

    @property
    def source_uri(self) -> str:
        """The source as the ingester names its record."""
        return self.storage.uri(self.root)

    @property
    def record(self) -> str:
        return record_name("files", self.source_uri)

    @property
    def files(self) -> set[str]:
        return set(self.good) | set(self.bad)


def record_files(table: cl.Table, name: str, version: int | None = None) -> dict[str, int]:
    """The files the record ``name`` lists at ``version`` (empty when it has none)."""
    return {f: ms for f, (ms, _) in record_versions(table, name, version).items()}


def record_versions(
    table: cl.Table, name: str, version: int | None = None
) -> dict[str, tuple[int, int | None]]:
    """The files the record ``name`` lists at ``version``, each with the version read: its
    modification time and size."""
    snapshot = table.snapshot(version)
    if name not in snapshot.states:
        return {}
    state = table.state(name, version=version)
    return {
        f: (ms, size)
        for f, ms, size in zip(
            state.column("file").to_pylist(),
            state.column("modified_ms").to_pylist(),
            state.column("size").to_pylist(),
            strict=True,
        )
    }


def check_ingested(
    table_uri: str,
    sources: list[Source],
    bad_uri: str | None = None,
    *,
    others: Counter[int] | None = None,
    complete: bool = True,
) -> dict[str, int]:
    """Check the table against the ``sources`` ingested into it (``others``: ids other writers
    appended, with no ``_file_path``). ``complete``: every final file is ingested (False: some
    may not be yet, but none twice). Returns {file: version of its commit}."""
    table = cl.open_table(table_uri)
    rows = table.to_arrow()
    ids = Counter(rows.column("id").to_pylist())
    want: Counter[int] = Counter(others or {})
    owner: dict[int, tuple[Source, str]] = {}
    for source in sources:
        for relative, file_ids in source.good.items():
            for i in file_ids:
                owner[i] = (source, relative)
    expected: Counter[int] = Counter(others or {})
    for source in sources:
        for file_ids in source.good.values():
            expected.update(file_ids)
    repeated = {i: n for i, n in ids.items() if n > max(1, expected[i])}
    assert not repeated, (
        f"rows ingested more than once (id: times): {dict(list(repeated.items())[:10])}"
    )
    for source in sources:
        never = set(source.never) & set(ids)
        assert not never, f"rows of files that are never final were ingested: {sorted(never)[:10]}"
    # each row is its file's, with its path and modification time
    modified = {
        r: f.modified_ms for s in sources for r, f in s.listed().items() if r not in s.rewritten
    }
    paths = rows.column("_file_path").to_pylist()
    times = rows.column("_file_modified").cast(pa.int64()).to_pylist()
    for i, path, ms in zip(rows.column("id").to_pylist(), paths, times, strict=True):
        if i in owner:
            assert path == owner[i][1], f"row {i} of {owner[i][1]!r} has _file_path {path!r}"
            assert ms == modified.get(path, ms), f"row {i} of {path!r}: _file_modified {ms}"
        else:
            assert i in want, f"row {i} is of no file and no other writer"
            assert path is None, f"row {i}, appended by another writer, has _file_path {path!r}"
    # each file's rows landed in one version, the one that first recorded the file
    changes = table.changes(0)
    commits: dict[str, set[int]] = {}
    for path, version in zip(
        changes.column("_file_path").to_pylist(),
        changes.column("_commit_version").to_pylist(),
        strict=True,
    ):
        if path is not None:
            commits.setdefault(path, set()).add(version)
    rewritten = {r for s in sources for r in s.rewritten}
    split = {p: v for p, v in commits.items() if len(v) > 1 and p not in rewritten}
    assert not split, f"a file's rows landed in more than one version: {split}"
    landed = {p: max(v) for p, v in commits.items()}
    for source in sources:
        _check_record(table, source, landed, complete)
        for relative, file_ids in source.good.items():
            got = Counter(i for i in file_ids if ids.get(i))
            if complete or got:
                assert got == Counter(file_ids), (
                    f"{relative}: {len(got)} of its {len(file_ids)} rows in the table"
                )
        for relative in source.bad:
            assert relative not in landed, f"rows of the bad file {relative} were ingested"
    if complete:
        for source in sources:
            for i in source.good.values():
                want.update(i)
        assert ids == want, (
            f"rows lost: {sorted((want - ids).elements())[:10]}, "
            f"extra: {sorted((ids - want).elements())[:10]}"
        )
    verified = table.verify()
    assert verified.ok, verified
    if bad_uri is not None:
        _check_bad(bad_uri, sources, complete)
    return landed


def _check_record(table: cl.Table, source: Source, landed: dict[str, int], complete: bool) -> None:
    """The record of ``source`` in every version: moved by one with each version that adds
    files to it (or another version of a file), and only then; each good file added in the
    version its rows landed (a file replaced since: in a version its rows landed)."""
    name = source.record
    generation: int | None = None
    stored_before: object = None
    before: dict[str, tuple[int, int | None]] = {}
    for version in range(table.version + 1):
        snapshot = table.snapshot(version)
        now = snapshot.txns.get(name)
        stored = snapshot.states.get(name)
        assert (now != generation) == (stored != stored_before), (
            f"version {version}: the marker went from {generation} to {now}, the state from "
            f"{stored_before} to {stored}: they move together"
        )
        files = before
        if now != generation:
            want = 0 if generation is None else generation + 1
            assert now == want, f"version {version}: the marker went from {generation} to {now}"
            files = record_versions(table, name, version)
            meta = table.state(name, version=version).schema.metadata or {}
            assert meta.get(b"generation") == str(now).encode(), (version, meta)
        added = {f for f, v in files.items() if before.get(f) != v}
        if now != generation:
            assert added, f"version {version} moved the marker and recorded no file"
        forgot = set(before) - set(files)
        assert not forgot, f"version {version} forgot files: {forgot}"
        mine = {p for p, v in landed.items() if v == version and p in source.good}
        assert mine - source.rewritten == (added & set(source.good)) - source.rewritten, (
            f"version {version}: rows of {sorted(mine)} landed, the record added {sorted(added)}"
        )
        generation, stored_before, before = now, stored, files
    listed = source.listed()
    for relative, (ms, _) in before.items():
        if relative in listed and relative not in source.rewritten:
            assert ms == listed[relative].modified_ms, f"{relative}: recorded as modified at {ms}"
    unknown = set(before) - source.files
    assert not unknown, f"the record lists files that are not final files of the source: {unknown}"
    if complete:
        missing = source.files - set(before)
        assert not missing, f"the record does not list {sorted(missing)}"


def _check_bad(bad_uri: str, sources: list[Source], complete: bool) -> None:
    bad_files = {(s.source_uri, r): d for s in sources for r, d in s.bad.items()}
    if not bad_files:
        return
    table = cl.open_table(bad_uri)
    kept = table.to_arrow()
    keys = list(
        zip(kept.column("source").to_pylist(), kept.column("file").to_pylist(), strict=True)
    )
    counts = Counter(keys)
    twice = {k: n for k, n in counts.items() if n > 1}
    assert not twice, f"bad files kept more than once: {twice}"
    unknown = set(counts) - set(bad_files)
    assert not unknown, f"good files kept as bad: {unknown}"
    if complete:
        assert set(counts) == set(bad_files), f"bad files not kept: {set(bad_files) - set(counts)}"
    for key, content in zip(keys, kept.column("content").to_pylist(), strict=True):
        assert content == bad_files[key], f"{key}: the bytes kept are not the file's"
    for source in sources:
        listed = record_files(table, record_name("files-bad", source.source_uri))
        mine = {r for s, r in counts if s == source.source_uri}
        assert set(listed) == mine, f"the bad-records record lists {listed}, the table holds {mine}"
    verified = table.verify()
    assert verified.ok, verified
