"""Named seams of the protocol: the points where another actor may act between two of ours.

Every step of the commit protocol that another writer, a reader, ``clean``, ``recover``, a
stream source, the Kafka ingester or the Flight service can slip in front of has a name here
and one call, ``reach("<name>")``, at the point in the code (docs/LOG.md, "Seams", lists them
with the test that explores each). Nothing listens in production: ``reach`` then costs one
global read and a ``None`` test. A test harness (``tests/support/interleave.py``) installs a
listener with :func:`listening` that pauses the actor reaching a seam and lets other actors
run first, in every order for small bounds and in seeded random orders beyond them.

A listener is called on whatever thread reaches the seam, including threads the library starts
for its own work (page encoding, lease heartbeats); it decides which of them it pauses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

__all__ = ["SEAMS", "Listener", "listening", "reach"]

Listener = Callable[[str], None]

SEAMS: dict[str, str] = {
    # the commit loop (metadata/commit.py) and the log (metadata/log.py)
    "commit.before_put": "a commit's actions are built on a snapshot; its version is not yet created",
    "commit.after_put": "a version was created by this commit; its post-write checks have not run",
    "commit.before_checkpoint": "a version is committed and checked; its checkpoint is not yet written",
    "commit.before_iceberg": "a version of a table publishing Iceberg is committed; its Iceberg metadata is not yet written",
    "log.after_read": "a reader applied one version and has not yet read the next",
    "checkpoint.after_manifests": "a checkpoint's manifests (merges included) are written; its document is not",
    "checkpoint.after_document": "a checkpoint's document is written; _last_checkpoint has not moved",
    # the history (metadata/history.py, asked through Log.look)
    "history.after_look": "the pointer (the history's floor and newest checkpoint) was read; what was read before it is not yet judged by it",
    "history.after_list": "the log was listed; nothing is decided from the listing yet",
    "history.after_chain": "a version below the floor was judged by following the chain of commit ids; the verdict is not yet acted on",
    # writers (writer/append.py, writer/row_changes.py)
    "append.after_data": "an append's blocklets are written and synced; nothing is committed",
    "row_change.after_plan": "a delete/update/merge read the rows it changes (run by Spark: pinned its snapshot); no vector is written",
    # maintenance (compaction/)
    "compaction.after_plan": "a handoff/compaction chose its inputs; no output is written",
    "compaction.after_execute": "a handoff/compaction wrote its outputs; nothing is committed",
    "clean.after_plan": "clean chose the files and log versions to delete; nothing is deleted",
    "clean.after_data_deleted": "clean deleted data files; their removeFiles is not committed",
    "clean.after_floor": "clean raised the history's floor to the checkpoint it keeps; no log file below it is deleted yet",
    "clean.before_log_delete": "clean committed; the old log files are not yet deleted",
    "recover.after_list_files": "recover listed the data files; it has not listed the leases",
    "recover.after_list_leases": "recover listed the leases; it has not re-read the log",
    "recover.before_cut": "recover decided to cut or delete a file; it has not done it",
    # leases (writer/lease.py)
    "lease.after_take": "a lease record is written; the files it covers are not",
    "lease.before_check": "a writer is about to check its lease before committing",
    # the Spark stream source (spark/stream_source.py)
    "source.after_available_now": "a stream source fixed what an availableNow query reads; its initial offset is not asked yet",
    "source.after_initial_offset": "a stream source answered its initial offset; Spark may ask again",
    "source.after_latest_offset": "a stream source planned a batch's end offset; it has not planned its partitions",
    "source.before_read": "a stream source planned a batch's partitions; no row is read",
    # the Kafka ingester (ingest/kafka.py) and the Flight service (serve/)
    "ingest.after_fetch": "the Kafka ingester fetched a batch; nothing of it is committed (the batch before it may be committing)",
    "ingest.before_commit": "the Kafka ingester split a batch into rows and bad records; neither is committed",
    "ingest.after_bad_commit": "a batch's bad records and their markers are committed to the bad-records table; its rows and their markers are not",
    "files.after_list": "the file ingester listed the source and read the table's record of it; no file is read",
    "files.after_file": "the file ingester read one file of a batch to its end; nothing of the batch is committed",
    "files.after_bad_commit": "a file that cannot be ingested is kept in the bad-records table with its record there; the table does not record it yet",
    "files.after_commit": "a batch's rows and the record of its files are committed; the ingester has not listed again",
    "index.before_commit": "build_index wrote the bloom files of the blocklets it read; nothing names them yet",
    "serve.after_wal": "a put's record is durable in the Flight service's log; the put is not in memory, answered or committed",
    "serve.before_flush_commit": "the flusher took a table's pending puts, checked its directory and read their producers' markers; their rows and markers are not committed",
    # storage (storage/*.py: Storage.swap, Storage.lock)
    "storage.before_swap_write": "a swap read the current value and computed the new one; it has not written it",
    "storage.lock_busy": "a lock's file is held by another: this one has it open and waits; it holds no lock",
}
"""Every seam, with what has and has not happened when it is reached."""

_listener: Listener | None = None


def reach(name: str) -> None:
    """Mark that this thread is at seam ``name`` (a no-op unless a listener is installed)."""
    listener = _listener
    if listener is not None:
        if name not in SEAMS:
            raise KeyError(f"unknown seam {name!r}: add it to carbonlite.seams.SEAMS")
        listener(name)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Call ``listener(name)`` at every seam reached while the block runs (one at a time)."""
    global _listener
    if _listener is not None:
        raise RuntimeError("a seam listener is already installed")
    _listener = listener
    try:
        yield
    finally:
        _listener = None
