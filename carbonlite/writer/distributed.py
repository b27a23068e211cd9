"""The workers' side of a write planned once, done by many workers and committed once (the
protocol behind the Spark sinks; the driver's side, planning and the commit, is
:mod:`carbonlite.driver`).

:func:`write_part` (each worker) writes its rows as blocklets into a file of its own, and
returns the appended range as plain data; :func:`write_partitioned_part` writes one file per
partition.

File names keep workers apart. On storage that appends (local disks), a part appends to
``<tag>-p<partition>-a<attempt>-s<schema>.cblt`` batch after batch, after cutting it back to
its committed length (``<schema>`` fingerprints the schema the file is written in, so a
schema change starts new files); under the file's lock it first checks that the log has not moved the file
past the plan (a zombie attempt of an earlier batch would otherwise cut committed bytes). On
object stores every part is a new object named after the plan, the partition and the attempt,
created with put-if-absent, so a zombie can never overwrite an object a version references.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from carbonlite.errors import CarbonLiteError
from carbonlite.metadata import BlockletsAppended, Log
from carbonlite.storage import open_storage
from carbonlite.writer.append import WRITER_LOCK_TIMEOUT, lock_path
from carbonlite.writer.bloom_files import discard_blooms
from carbonlite.writer.lease import Lease
from carbonlite.writer.partition_files import PartitionFile, write_partition_files
from carbonlite.writer.replace_where import checked_batches
from carbonlite.writer.stream_file import write_blocklets
from carbonlite.writer.write_plan import WritePlan, check_not_stale, part_file, task_lock_name

if TYPE_CHECKING:
    pass

__all__ = [
    "abort_parts",
    "commit_leased",
    "lease_plan",
    "write_part",
    "write_partitioned_part",
]


def _skipped(
    plan: WritePlan, batches: Iterable[pa.RecordBatch], app_id: str | None, batch_id: int | None
) -> bool:
    """Whether the plan writes nothing for this worker (the transaction was committed before,
    or a save mode ignores the write); its rows are then read to the end and dropped."""
    if not (plan.skip or plan.done(app_id, batch_id)):
        return False
    for _ in batches:  # already committed (a replay) or ignored: write nothing
        pass
    return True


def _checked(plan: WritePlan, batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    """With ``replaceWhere``, every row is checked against its predicate as it is written."""
    if plan.replace_where is None:
        return batches
    return checked_batches(batches, plan.replace_where, plan.schema, where=repr(plan.uri))


def write_part(
    plan: WritePlan,
    batches: Iterable[pa.RecordBatch],
    *,
    tag: str,
    partition: int,
    attempt: int,
    app_id: str | None = None,
    batch_id: int | None = None,
) -> BlockletsAppended | None:
    """Write one worker's rows; None when it wrote nothing (no rows, or the plan skips)."""
    if _skipped(plan, batches, app_id, batch_id):
        return None
    batches = _checked(plan, batches)
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    file = part_file(plan, tag, partition, attempt)
    if not plan.append_files:
        return _write(storage, root, plan, file, 0, batches)
    name = task_lock_name(tag, partition, attempt)
    with storage.lock(lock_path(storage, root, name), timeout=WRITER_LOCK_TIMEOUT):
        committed = plan.committed.get(file, 0)
        latest = Log(storage, root, storage.uri(root)).load_latest()
        uri = storage.uri(storage.join(root, file))
        check_not_stale(latest, plan, plan.segment_id, file, committed, uri)
        return _write(storage, root, plan, file, committed, batches)


def _write(
    storage: Any,
    root: str,
    plan: WritePlan,
    file: str,
    committed: int,
    batches: Iterable[pa.RecordBatch],
) -> BlockletsAppended | None:
    return write_blocklets(
        storage,
        root,
        segment_id=plan.segment_id,
        file=file,
        committed_length=committed,
        schema=plan.schema,
        batches=plan.conformed(batches),
        storage_options=plan.storage_options,
        compression_level=plan.compression_level,
        codec=plan.codec,
        max_rows=plan.blocklet_max_rows,
        max_bytes=plan.blocklet_max_bytes,
        layout=plan.layout,
        blooms=plan.blooms,
    )


def write_partitioned_part(
    plan: WritePlan,
    batches: Iterable[pa.RecordBatch],
    *,
    tag: str,
    partition: int,
    attempt: int,
    app_id: str | None = None,
    batch_id: int | None = None,
    reuse: bool = False,
) -> list[PartitionFile]:
    """Write one worker's rows into a partitioned table: one file per partition, with
    ``reuse`` (a stream) the task's own file in each partition's STREAMING segment, appended
    to from batch to batch (``write_partition_files``)."""
    if _skipped(plan, batches, app_id, batch_id):
        return []
    return write_partition_files(
        plan,
        _checked(plan, batches),
        spec_json=plan.partition_by,
        tag=tag,
        task=partition,
        attempt=attempt,
        hashed=False,
        reuse=reuse,
    )


def lease_plan(plan: WritePlan, owner: str) -> Lease | None:
    """A lease over the segments the plan's workers write into, held on the driver from planning
    until the commit or abort: recover leaves their files alone while the write is in flight,
    however long it takes (writer/lease.py)."""
    if plan.skip:
        return None
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    paths = [f"segments/{plan.segment_id}/"]
    paths.extend(f"segments/{sid}/" for sid, _ in plan.partition_streams.values())
    return Lease(storage, root, owner=owner, paths=paths).acquire()


def commit_leased(lease: Lease | None, commit: Callable[[], Any]) -> None:
    """Run ``commit`` if ``lease`` still holds, then release it (``Lease.__exit__`` leaves the
    record to expire when the commit's outcome is unknown: a late version may need the files)."""
    if lease is None:
        commit()
        return
    with lease:  # held since planning
        lease.check()
        commit()


def abort_parts(plan: WritePlan, parts: Sequence[BlockletsAppended | None]) -> None:
    """Cut the files of an aborted write back to their committed lengths, or delete the new
    ones (best effort: the next writer of each file does it anyway)."""
    storage, root = open_storage(plan.uri, plan.storage_options or None)
    try:
        snap = Log(storage, root, storage.uri(root)).load_latest()
    except CarbonLiteError:
        return
    for a in parts:
        if a is None:
            continue
        seg = snap.segments.get(a.segment_id)
        f = seg.files.get(a.file) if seg is not None else None
        committed = f.committed_length if f is not None else 0
        path = storage.join(root, a.file)
        try:
            if committed == 0:
                storage.delete(path)
            elif committed == a.start and storage.supports_append:
                storage.truncate(path, committed)
        except OSError:
            pass
        if committed <= a.start:  # not committed: nothing names its bloom files
            discard_blooms(storage, root, a.blooms)
