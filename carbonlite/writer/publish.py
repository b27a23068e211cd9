"""Hash-diff publishing: rewrite only the partitions whose content changed, commit once.

A publish is given the rows of some partitions. Each partition's rows are hashed
(``format/row_hash.content_hash``: independent of row order and of how rows are cut into
batches) and compared with the hash of what the table holds for it: the hash stored with a
published segment, or, when the partition took other writes since, the hash of its current
rows. Equal: the partition is left alone (nothing written). Different or new: its rows go to
a fresh segment carrying the hash, and the partition's old segments are marked for delete,
in the same version. An empty payload deletes its partition; ``snapshot`` mode also deletes
every partition that was not given. The publisher's ``state`` tables are stored in that
version too (``storeState``).
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from carbonlite.clock import now_ms
from carbonlite.errors import (
    CommitConflictError,
    CorruptDataError,
    DataUnavailableError,
    InvalidOptionError,
)
from carbonlite.format.row_hash import content_hash, grouped_content_sums
from carbonlite.metadata import Log, SegmentState, Snapshot, StateStored
from carbonlite.metadata.actions import STATE_DIR
from carbonlite.metadata.commit import backoff
from carbonlite.metadata.partition_spec import Grouping, PartitionSpec, PartitionValue
from carbonlite.reader.planner import file_split
from carbonlite.reader.scan import SplitReader, read_splits
from carbonlite.storage import Storage
from carbonlite.writer.append import RowChanges, TableWriter
from carbonlite.writer.batches import conformed_batches
from carbonlite.writer.partition_rows import PartitionRows, partition_key, partition_spec
from carbonlite.writer.unique_keys import check_published_keys

__all__ = [
    "STATE_DIR",
    "Decision",
    "Payloads",
    "PublishMode",
    "PublishResult",
    "StateArg",
    "classify",
    "plan_publish",
    "read_state",
    "run_publish",
    "write_states",
]

PublishMode = Literal["incremental", "snapshot"]


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What a publish did, by partition value (``PartitionSpec`` values, one tuple each)."""

    version: int | None
    """The committed version; None when nothing changed (no commit)."""
    added: list[PartitionValue]
    changed: list[PartitionValue]
    unchanged: list[PartitionValue]
    deleted: list[PartitionValue]


@dataclass(frozen=True, slots=True)
class Decision:
    """How each partition of a publish compares with the table (keys: JSON values)."""

    added: tuple[tuple[Any, ...], ...]
    changed: tuple[tuple[Any, ...], ...]
    unchanged: tuple[tuple[Any, ...], ...]
    deleted: tuple[tuple[Any, ...], ...]

    @property
    def replaced(self) -> frozenset[tuple[Any, ...]]:
        """Partitions whose segments the publish marks for delete."""
        return frozenset((*self.changed, *self.deleted))

    def result(self, spec: PartitionSpec, version: int | None) -> PublishResult:
        def values(keys: Sequence[tuple[Any, ...]]) -> list[PartitionValue]:
            return [spec.value_from_json(list(k)) for k in keys]

        return PublishResult(
            version,
            values(self.added),
            values(self.changed),
            values(self.unchanged),
            values(self.deleted),
        )

    def parameters(self, mode: str, states: Sequence[StateStored]) -> dict[str, str]:
        """What the commit info records of the publish."""
        out = {
            "mode": mode,
            "added": str(len(self.added)),
            "changed": str(len(self.changed)),
            "unchanged": str(len(self.unchanged)),
            "deleted": str(len(self.deleted)),
        }
        if states:
            out["state"] = ",".join(s.name for s in states)
        return out


def classify(
    spec: PartitionSpec,
    snapshot: Snapshot,
    hashes: Mapping[tuple[Any, ...], str | None],
    mode: PublishMode,
    reader: SplitReader,
) -> Decision:
    """Compare the given partitions' content hashes (None: an empty payload, which deletes
    the partition) with what ``snapshot`` holds; in ``snapshot`` mode every partition not
    given is deleted too."""
    current: dict[tuple[Any, ...], list[SegmentState]] = {}
    for seg in snapshot.live_segments():
        if seg.partition is not None:
            current.setdefault(seg.partition, []).append(seg)
    added, changed, unchanged, deleted = [], [], [], []
    for key in sorted(hashes, key=lambda k: _order(spec, k)):
        existing = current.get(key)
        new_hash = hashes[key]
        if new_hash is None:
            if existing:
                deleted.append(key)
        elif not existing:
            added.append(key)
        elif _current_hash(existing, reader, snapshot.schema) == new_hash:
            unchanged.append(key)
        else:
            changed.append(key)
    if mode == "snapshot":
        deleted.extend(sorted(current.keys() - hashes.keys(), key=lambda k: _order(spec, k)))
    return Decision(tuple(added), tuple(changed), tuple(unchanged), tuple(deleted))


class Payloads:
    """The rows a publish was given, by partition: one table of every row (conformed to the
    table's schema) and which rows belong to which partition, with each partition's content
    hash (None for an empty payload: a delete). Rows are hashed where they lie, once; only
    the partitions that get written are ever taken out."""

    def __init__(
        self,
        spec: PartitionSpec,
        data: pa.Table | Mapping[Any, pa.Table],
        schema: pa.Schema,
        where: str,
    ) -> None:
        self.where = where
        if not spec.is_partitioned:
            raise InvalidOptionError(
                f"publish needs a partitioned table; {where} has no partition_by (create it "
                "with create_table(..., partition_by=[...]))"
            )
        if isinstance(data, Mapping):
            values, tables = self._given(spec, data, schema, where)
            self.table = pa.concat_tables(tables).combine_chunks() if tables else _empty(schema)
            sizes = np.array([t.num_rows for t in tables], dtype=np.int64)
            starts = np.cumsum(sizes) - sizes
            grouping = Grouping(values, np.arange(self.table.num_rows), starts, sizes)
            _check_own_rows(spec, self.table, grouping, where)
        elif isinstance(data, pa.Table):
            self.table = _conformed(data, schema, where)
            grouping = spec.grouping(self.table)
        else:
            raise InvalidOptionError(
                "publish takes a pyarrow Table (split by the partition columns) or a mapping "
                f"from partition value to pyarrow Table, not {type(data).__name__}"
            )
        self.grouping = grouping
        self.keys = [partition_key(spec, v) for v in grouping.values]
        sums = grouped_content_sums(self.table, grouping.order, grouping.starts, grouping.sizes)
        self.hashes: dict[tuple[Any, ...], str | None] = {
            key: (s.digest(schema) if s.rows else None)
            for key, s in zip(self.keys, sums, strict=True)
        }
        self._index = {key: g for g, key in enumerate(self.keys)}

    @staticmethod
    def _given(
        spec: PartitionSpec, data: Mapping[Any, pa.Table], schema: pa.Schema, where: str
    ) -> tuple[list[PartitionValue], list[pa.Table]]:
        values, tables, seen = [], [], set()
        for key, rows in data.items():
            value = spec.normalize(key)
            k = partition_key(spec, value)
            if k in seen:
                raise InvalidOptionError(
                    f"partition {spec.describe(value)} is given twice in the publish to {where}"
                )
            seen.add(k)
            values.append(value)
            tables.append(_conformed(rows, schema, where))
        return values, tables

    def rows(self, key: tuple[Any, ...]) -> pa.Table:
        """The rows given for partition ``key``."""
        return self.table.take(pa.array(self.grouping.rows(self._index[key])))


def _check_own_rows(spec: PartitionSpec, table: pa.Table, given: Grouping, where: str) -> None:
    """Refuse payloads holding rows of other partitions than the one they are given for."""
    if not table.num_rows:
        return
    actual = spec.grouping(table)
    owner = np.repeat(np.arange(len(given.sizes)), given.sizes)  # payload of each row
    for g, value in enumerate(actual.values):
        rows = actual.rows(g)
        bad = rows[np.array([given.values[i] != value for i in owner[rows]])]
        if len(bad):
            claimed = given.values[int(owner[bad[0]])]
            raise InvalidOptionError(
                f"the rows given for partition {spec.describe(claimed)} of {where} include rows "
                f"of partition {spec.describe(value)}: each payload must hold only its own "
                "partition's rows"
            )


def _empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def _conformed(rows: Any, schema: pa.Schema, where: str) -> pa.Table:
    if not isinstance(rows, (pa.Table, pa.RecordBatch)):
        raise InvalidOptionError(
            f"a partition's rows must be a pyarrow Table or RecordBatch, not {type(rows).__name__}"
        )
    batches = list(conformed_batches(rows, schema, where=where, fill_missing=True))
    return pa.Table.from_batches(batches, schema=schema)


def plan_publish(
    spec: PartitionSpec,
    snapshot: Snapshot,
    given: Payloads,
    mode: PublishMode,
    reader: SplitReader,
) -> tuple[Decision, tuple[PartitionRows, ...]]:
    """Compare ``given`` with ``snapshot``'s partitions: the decision, and the rows to write
    (added and changed partitions, with their hashes)."""
    decided = classify(spec, snapshot, given.hashes, mode, reader)
    parts = tuple(
        PartitionRows(key, given.rows(key), given.hashes[key])
        for key in (*decided.added, *decided.changed)
    )
    if snapshot.metadata.primary_key and parts:
        # checked on the version planned on: a publish commits as an overwrite, which any
        # data commit since makes plan again (DataUnchangedSince), and check again
        written = pa.concat_tables([p.data for p in parts])
        check_published_keys(reader, snapshot, written, decided.replaced, given.where)
    return decided, parts


def _current_hash(segments: Sequence[SegmentState], reader: SplitReader, schema: pa.Schema) -> str:
    """The content hash of the rows a partition holds: stored, or computed from its rows."""
    if len(segments) == 1 and segments[0].current_hash is not None:
        return segments[0].current_hash
    splits = [file_split(seg, f) for seg in segments for f in seg.files.values()]
    batches = list(read_splits(reader, splits, schema, None))
    return content_hash(pa.Table.from_batches(batches, schema=schema))


def _order(spec: PartitionSpec, key: tuple[Any, ...]) -> tuple[Any, ...]:
    """Partition order (nulls first) of a partition key."""
    return tuple(
        (v is not None, v if v is not None else 0) for v in spec.value_from_json(list(key))
    )


StateArg = Mapping[str, pa.Table] | Callable[[], Mapping[str, pa.Table]] | None
"""State tables a write stores (name -> table), or a callable giving them once its rows are
written (``Table.append``'s ``state``)."""


def write_states(
    storage: Storage, root: str, state: Mapping[str, pa.Table] | None, where: str
) -> tuple[StateStored, ...]:
    """Each state table as a new Arrow IPC file under ``_carbonlite/state`` (not yet
    referenced: the publish's commit does that)."""
    if not state:
        return ()
    if not isinstance(state, Mapping):
        raise InvalidOptionError(
            f"state must be a mapping from name to pyarrow Table, not {type(state).__name__}"
        )
    stored = []
    for name, table in state.items():
        if not isinstance(name, str) or not name or len(name) > 200:
            raise InvalidOptionError(
                f"a state name is a non-empty string of at most 200 characters, not {name!r}"
            )
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        if not isinstance(table, pa.Table):
            raise InvalidOptionError(
                f"state {name!r} for {where} must be a pyarrow Table, not {type(table).__name__}"
            )
        sink = io.BytesIO()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        data = sink.getvalue()
        rel = f"{STATE_DIR}/{uuid.uuid4().hex}.arrow"
        if not storage.put_if_absent(storage.join(root, rel), data):  # pragma: no cover
            raise InvalidOptionError(f"state file {rel!r} exists already (uuid collision)")
        stored.append(StateStored(name=name, path=rel, size=len(data), rows=table.num_rows))
    return tuple(stored)


def read_state(storage: Storage, root: str, stored: StateStored) -> pa.Table:
    """The state table ``stored`` refers to."""
    try:
        data = storage.read(storage.join(root, stored.path))
    except FileNotFoundError:
        raise DataUnavailableError(
            f"state file {stored.path!r} of state {stored.name!r} is gone from storage (deleted "
            "by hand?)"
        ) from None
    if len(data) != stored.size:
        raise CorruptDataError(
            f"state file {stored.path!r} holds {len(data)} bytes, the log says {stored.size}",
            path=stored.path,
        )
    try:
        return pa.ipc.open_file(pa.BufferReader(data)).read_all()
    except pa.ArrowException as exc:
        raise CorruptDataError(
            f"state file {stored.path!r} does not read: {exc}", path=stored.path
        ) from None


_MAX_ATTEMPTS = 10


def run_publish(
    log: Log,
    writer: TableWriter,
    snapshot: Snapshot,
    data: pa.Table | Mapping[Any, pa.Table],
    *,
    mode: PublishMode,
    state: Mapping[str, pa.Table] | None,
    storage_options: Mapping[str, Any] | None,
) -> tuple[PublishResult, Snapshot]:
    """Publish ``data`` (see :class:`Payloads`) as one commit; (what it did, new snapshot).

    Losing the race to another data commit plans again on the new version (the payloads'
    hashes are kept), up to ten times."""
    if mode not in ("incremental", "snapshot"):
        raise InvalidOptionError(f"publish mode is 'incremental' or 'snapshot', not {mode!r}")
    started = now_ms()
    snapshot = log.update(snapshot)
    spec = partition_spec(snapshot.metadata)
    given = Payloads(spec, data, snapshot.schema, repr(log.uri))
    states = write_states(writer.storage, writer.root, state, repr(log.uri))
    for attempt in range(_MAX_ATTEMPTS):
        reader = SplitReader(
            writer.storage,
            writer.root,
            snapshot.schema,
            storage_options=storage_options,
            version=snapshot.version,
            layout=snapshot.layout,
        )
        try:
            decided, parts = plan_publish(spec, snapshot, given, mode, reader)
        finally:
            reader.close()
        if not parts and not decided.replaced and not states:
            return decided.result(spec, None), snapshot
        parameters = decided.parameters(mode, states)
        try:
            committed, snapshot = writer.write(
                log,
                snapshot,
                [],
                overwrite=True,
                operation="PUBLISH",
                changes=RowChanges(parameters=parameters, read_version=snapshot.version),
                parts=parts,
                fresh=True,
                overwrite_partitions=decided.replaced,
                states=states,
                started_ms=started,
            )
        except CommitConflictError:
            if attempt == _MAX_ATTEMPTS - 1:
                raise
            time.sleep(backoff(attempt))
            snapshot = log.update(snapshot)
            continue
        return decided.result(spec, committed.version), snapshot
    raise AssertionError("unreachable")  # pragma: no cover
