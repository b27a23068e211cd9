"""Reading planned splits: committed bytes only, requested columns only, exact filter applied.

Blocklets are decoded in parallel on the shared thread pool and come out in plan order.
Files written before a column was added lack it; its values read as nulls.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from carbonlite.errors import CorruptDataError, DataUnavailableError, SchemaMismatchError
from carbonlite.format import BlockletMeta
from carbonlite.format.data_files import DataFileReader, open_data_file
from carbonlite.format.deletion_vector import DeletionVector
from carbonlite.format.pages import ordered_map
from carbonlite.metadata import BlockletEntry, DeletionRef
from carbonlite.metadata.columns import ColumnLayout
from carbonlite.reader.expression import Filter
from carbonlite.reader.planner import ScanPlan, Split
from carbonlite.storage import Storage

__all__ = [
    "ROW_POSITION",
    "SplitReader",
    "TableScan",
    "plan_batches",
    "read_splits",
    "scan_plan",
]

ROW_POSITION = "_carbonlite_row"
"""The column ``read_blocklet(..., positions=True)`` adds: each row's position in its blocklet."""


class SplitReader:
    """Reads blocklets of splits, keeping each file open once; safe across threads."""

    def __init__(
        self,
        storage: Storage,
        root: str,
        table_schema: pa.Schema,
        *,
        storage_options: Mapping[str, Any] | None = None,
        version: int | None = None,
        layout: ColumnLayout,
    ) -> None:
        self.storage = storage
        self.root = root
        self.table_schema = table_schema
        self.layout = layout
        """Where each column of ``table_schema`` lies in data files (``metadata/columns.py``)."""
        self.storage_options = dict(storage_options or {})
        self.version = version
        self._readers: dict[tuple[str, int], DataFileReader] = {}
        self._dv_files: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def _dv_file(self, rel: str) -> bytes:
        """The whole deletion-vector file ``rel``, read once per reader: one file holds the
        vectors of many blocklets (one commit's, for one data file) and is small."""
        with self._lock:
            data = self._dv_files.get(rel)
        if data is None:
            try:
                data = self.storage.read(self.storage.join(self.root, rel))
            except FileNotFoundError:
                raise DataUnavailableError(
                    f"deletion-vector file {rel!r} is gone from storage (removed by clean, or "
                    "deleted by hand)"
                ) from None
            with self._lock:
                self._dv_files[rel] = data
        return data

    def deletion_vector(self, ref: DeletionRef, rows: int) -> DeletionVector:
        """The deletion vector ``ref`` points to (of a blocklet of ``rows`` rows), checked."""
        where = f"deletion vector at {ref.offset} of {ref.path!r}"
        data = memoryview(self._dv_file(ref.path))[ref.offset : ref.offset + ref.length]
        try:
            vector = DeletionVector.decode(data)
        except ValueError as exc:
            raise CorruptDataError(f"{where} is damaged: {exc}", path=ref.path) from None
        if vector.row_count != rows or vector.cardinality != ref.cardinality:
            raise CorruptDataError(
                f"{where} covers {vector.row_count} rows and deletes {vector.cardinality}; the "
                f"log says its blocklet has {rows} rows and {ref.cardinality} deleted",
                path=ref.path,
            )
        return vector

    def _reader(self, split: Split) -> DataFileReader:
        key = (split.file, split.committed_length)  # a change feed reads one file at many lengths
        with self._lock:
            reader = self._readers.get(key)
            if reader is None:
                uri = self.storage.uri(self.storage.join(self.root, split.file))
                try:
                    reader = open_data_file(
                        uri, end=split.committed_length, storage_options=self.storage_options
                    )
                except FileNotFoundError:
                    at = f" at version {self.version}" if self.version is not None else ""
                    raise DataUnavailableError(
                        f"data file {split.file!r} of segment {split.segment_id!r}{at} is gone "
                        "from storage (removed by clean, or deleted by hand)"
                    ) from None
                self._readers[key] = reader
            return reader

    def read_blocklet(
        self,
        split: Split,
        blocklet: BlockletEntry,
        output: pa.Schema,
        filter: Filter | None,
        *,
        positions: bool = False,
        rows: tuple[int, int] | None = None,
    ) -> pa.RecordBatch:
        """The live rows of ``blocklet`` (deleted ones skipped) that ``filter`` keeps, in
        ``output``'s columns; with ``positions``, plus a last column :data:`ROW_POSITION`
        (uint32) giving each row's position in the blocklet. ``rows``: only the rows
        ``[start, stop)`` of the blocklet (a stream batch that ends or starts inside it)."""
        reader = self._reader(split)
        needed = [
            f
            for f in self.table_schema
            if f.name in output.names or (filter is not None and f.name in filter.columns)
        ]
        meta = BlockletMeta(blocklet.offset, blocklet.length, blocklet.num_rows)
        if self.layout.is_identity:
            present = [f.name for f in needed if f.name in reader.schema.names]
            batch = reader.read_blocklet(meta, present)
        else:
            batch, present = self._read_mapped(reader, meta, needed)
        ref = split.deletion_of(blocklet) if split.deletions else None
        start, stop = (0, blocklet.num_rows) if rows is None else rows
        whole = (start, stop) == (0, blocklet.num_rows)
        keep = None if ref is None else self.deletion_vector(ref, blocklet.num_rows).keep_mask()
        if keep is not None and not whole:
            keep = keep.slice(start, stop - start)
        if not needed and not positions:
            if keep is not None:
                return _rows_only(pc.sum(keep).as_py() or 0)
            return batch if whole else _rows_only(stop - start)
        arrays = [
            batch.column(f.name) if f.name in present else pa.nulls(blocklet.num_rows, f.type)
            for f in needed
        ]
        names = [f.name for f in needed]
        if positions:
            arrays.append(pa.array(np.arange(blocklet.num_rows, dtype=np.uint32)))
            needed.append(pa.field(ROW_POSITION, pa.uint32(), nullable=False))
        batch = _typed(arrays, needed, split)
        if not whole:
            batch = batch.slice(start, stop - start)
        if keep is not None:
            batch = batch.filter(keep)
        if filter is not None:
            batch = filter.apply(batch)
        wanted = [*output.names, ROW_POSITION] if positions else output.names
        if names + ([ROW_POSITION] if positions else []) != wanted:
            batch = batch.select(wanted) if wanted else _rows_only(batch.num_rows)
        return batch

    def _read_mapped(
        self, reader: DataFileReader, meta: BlockletMeta, needed: list[pa.Field]
    ) -> tuple[pa.RecordBatch, list[str]]:
        """The columns ``needed`` (logical) of a blocklet read under their physical names, cast
        up to the schema's types, defaults where the file lacks them; and the names read."""
        file_schema = reader.schema
        wanted = sorted(
            {n for f in needed for n in self.layout.file_names(f.name) if n in file_schema.names}
        )
        raw = reader.read_blocklet(meta, wanted)
        arrays, present = [], []
        for f in needed:
            array = self.layout.read_column(f, file_schema, raw.column, meta.num_rows)
            if array is not None:
                arrays.append(array)
                present.append(f.name)
        fields = [f for f in needed if f.name in present]
        if not fields:
            return _rows_only(meta.num_rows), present
        return _typed(arrays, fields, None), present

    def close(self) -> None:
        with self._lock:
            for reader in self._readers.values():
                reader.close()
            self._readers.clear()
            self._dv_files.clear()


def _typed(arrays: list[pa.Array], fields: list[pa.Field], split: Split | None) -> pa.RecordBatch:
    """A batch of ``arrays`` in the types of ``fields`` (a file's older, narrower types are
    cast up). A value that does not fit is a :class:`SchemaMismatchError`: a file written
    while a column was wider, read with a schema a restore narrowed again (``changes()``
    across that restore)."""
    try:
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        wider = [
            f"{f.name!r} holds {a.type}, the schema read with has {f.type}"
            for a, f in zip(arrays, fields, strict=True)
            if a.type != f.type
        ]
        where = f" in {split.file!r}" if split is not None else ""
        raise SchemaMismatchError(
            f"rows{where} do not fit the schema they are read with ({exc}): they were written "
            "while a column was wider than it is now (a restore to a version before its "
            "widening); read a range of versions that does not cross that restore",
            wider,
        ) from None


def _rows_only(num_rows: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_struct_array(pa.nulls(num_rows, pa.struct([])))


def read_splits(
    reader: SplitReader,
    splits: Sequence[Split],
    output: pa.Schema,
    filter: Filter | None,
) -> Iterator[pa.RecordBatch]:
    """Every selected blocklet of ``splits``, filtered and projected, decoded in parallel."""
    tasks: Iterable[tuple[Split, int]] = ((s, i) for s in splits for i in range(len(s.blocklets)))

    def read(task: tuple[Split, int]) -> pa.RecordBatch:
        split, index = task
        rows = split.row_range(index) if split.start_row or split.stop_row is not None else None
        return reader.read_blocklet(split, split.blocklets[index], output, filter, rows=rows)

    for batch in ordered_map(read, tasks):
        if batch.num_rows:
            yield batch


def plan_batches(
    storage: Storage,
    root: str,
    plan: ScanPlan,
    filter: Filter | None,
    *,
    storage_options: Mapping[str, Any] | None,
) -> Generator[pa.RecordBatch, None, None]:
    """Every row of ``plan``, batch by batch; closing the generator stops the read-ahead and
    closes the files."""
    split_reader = SplitReader(
        storage,
        root,
        plan.table_schema,
        storage_options=storage_options,
        version=plan.version,
        layout=plan.layout,
    )
    try:
        for batch in read_splits(split_reader, plan.splits, plan.schema, filter):
            yield batch if batch.schema.equals(plan.schema) else batch.cast(plan.schema)
    finally:
        split_reader.close()


def scan_plan(
    storage: Storage,
    root: str,
    plan: ScanPlan,
    filter: Filter | None,
    *,
    storage_options: Mapping[str, Any] | None,
) -> pa.RecordBatchReader:
    """A reader over every row of ``plan``."""
    batches = plan_batches(storage, root, plan, filter, storage_options=storage_options)
    return pa.RecordBatchReader.from_batches(plan.schema, batches)


class TableScan:
    """A planned scan that any number of consumers can read, each from the start.

    It has the surface of a ``pyarrow.RecordBatchReader`` (``schema``, ``read_next_batch``,
    ``read_all``, ``read_pandas``, iteration, ``close``, a context manager), which reads one
    stream through; and ``__arrow_c_stream__`` (the Arrow PyCapsule interface), which starts a
    fresh stream over the same plan at every call, so DuckDB, Polars or ``pa.table(scan)``
    can read it once per query instead of finding it consumed. The plan, and so the version
    and the blocklets read, is fixed when the scan is made.
    """

    def __init__(
        self,
        storage: Storage,
        root: str,
        plan: ScanPlan,
        filter: Filter | None,
        *,
        storage_options: Mapping[str, Any] | None,
    ) -> None:
        self.plan = plan
        self.filter = filter
        self._storage = storage
        self._root = root
        self._storage_options = storage_options
        self._current: pa.RecordBatchReader | None = None

    def __repr__(self) -> str:
        return (
            f"TableScan(version={self.plan.version}, columns={self.schema.names}, "
            f"blocklets={self.plan.blocklets_selected}/{self.plan.blocklets_total})"
        )

    @property
    def schema(self) -> pa.Schema:
        return self.plan.schema

    def to_batches(self) -> Generator[pa.RecordBatch, None, None]:
        """A new generator over every batch of the scan (closing it stops the reading)."""
        return plan_batches(
            self._storage, self._root, self.plan, self.filter, storage_options=self._storage_options
        )

    def to_reader(self) -> pa.RecordBatchReader:
        """A new ``pyarrow.RecordBatchReader`` over every row of the scan."""
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def to_table(self) -> pa.Table:
        """Every row of the scan in one ``pyarrow.Table`` (a new read each call)."""
        return self.to_reader().read_all()

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self.to_reader().__arrow_c_stream__(requested_schema)

    # --- the RecordBatchReader surface: one stream, read through --------------------------

    def _reader(self) -> pa.RecordBatchReader:
        if self._current is None:
            self._current = self.to_reader()
        return self._current

    def read_next_batch(self) -> pa.RecordBatch:
        return self._reader().read_next_batch()

    def read_all(self) -> pa.Table:
        return self._reader().read_all()

    def read_pandas(self, **options: Any) -> Any:
        return self._reader().read_pandas(**options)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return iter(self._reader())

    def close(self) -> None:
        if self._current is not None:
            self._current.close()

    def __enter__(self) -> TableScan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
