"""Column pages: one column of a blocklet as an Arrow IPC record-batch message, compressed.

A page is the encapsulated IPC message of a one-column record batch (no schema: the file
header has it), compressed as a whole with zstd (level 1 by default) or LZ4 (the frame
format: several times faster to write, larger; what streaming blocklets use, since handoff
rewrites them with zstd) unless compression saves less than 1/32 of the bytes, in which case
it is stored raw. Whole-page zstd was measured against Arrow's own per-buffer IPC compression
(docs/FORMAT.md, "Why whole-page zstd").
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal, TypeVar

import pyarrow as pa
import zstandard

from carbonlite.format.layout import CODEC_LZ4, CODEC_NONE, CODEC_ZSTD

__all__ = [
    "DEFAULT_COMPRESSION_LEVEL",
    "PAGE_CODECS",
    "PageCodec",
    "decode_page",
    "encode_page",
    "ordered_map",
    "thread_pool",
]

DEFAULT_COMPRESSION_LEVEL = 1
PageCodec = Literal["zstd", "lz4", "none"]
"""How a writer compresses pages: zstd at its ``compression_level``, LZ4, or not at all."""
PAGE_CODECS: tuple[PageCodec, ...] = ("zstd", "lz4", "none")
_MIN_SAVING_SHIFT = 5  # store raw unless compression saves at least raw_length >> 5 bytes
_IPC_PREFIX = 8  # an encapsulated IPC message: continuation marker and metadata length

_local = threading.local()


def _compressor(level: int) -> zstandard.ZstdCompressor:
    cache: dict[int, zstandard.ZstdCompressor] | None = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    c = cache.get(level)
    if c is None:
        c = cache[level] = zstandard.ZstdCompressor(level=level, write_content_size=True)
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    d: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if d is None:
        d = _local.decompressor = zstandard.ZstdDecompressor()
    return d


_ARROW_LZ4 = pa.Codec("lz4") if pa.Codec.is_available("lz4") else None  # the LZ4 frame format


def _lz4() -> pa.Codec:
    if _ARROW_LZ4 is None:
        raise ValueError("this pyarrow build has no LZ4 codec: it cannot read or write LZ4 pages")
    return _ARROW_LZ4


def encode_page(
    array: pa.Array,
    schema1: pa.Schema,
    level: int = DEFAULT_COMPRESSION_LEVEL,
    codec: PageCodec = "zstd",
) -> tuple[bytes | pa.Buffer, int, int]:
    """(stored bytes, raw length, codec number) of one column; ``schema1`` is its one-field
    schema. ``level`` is zstd's (0 stores raw whatever ``codec`` says)."""
    raw = pa.RecordBatch.from_arrays([array], schema=schema1).serialize()
    if level <= 0 or codec == "none":
        return raw, raw.size, CODEC_NONE
    packed: bytes | pa.Buffer
    if codec == "lz4":
        out = _lz4().compress(raw)
        # A plain Buffer of exactly the frame: the ResizableBuffer Arrow returns exports its
        # whole capacity through the buffer protocol (len(memoryview) > size), which a writer
        # slicing a memoryview would write out.
        packed, number = out.slice(0, out.size), CODEC_LZ4
    else:
        packed, number = _compressor(level).compress(raw), CODEC_ZSTD
    if raw.size - len(packed) < raw.size >> _MIN_SAVING_SHIFT:
        return raw, raw.size, CODEC_NONE
    return packed, raw.size, number


_ARROW_ZSTD = pa.Codec("zstd") if pa.Codec.is_available("zstd") else None
"""Arrow's own zstd, used to decompress when pyarrow has it (zstandard otherwise): it decodes
the same standard frames into buffers of Arrow's memory pool, which reuses memory where a
new ``bytes`` object faults fresh pages in. Measured on the 2-core dev machine: 1.4 ms instead
of 2.0 ms for a 1 MB page alone; 7.9 ms instead of 9.3 ms for bench_engines.py's DuckDB 1%
query, 10% less CPU for a 2-column full scan. (Decoding the pages of one blocklet in
parallel was tried too: no faster there, and 20% more CPU. ``BlockletFileReader.read_blocklet``
now does so only when the blocklet is read alone, off the pool: bench_limits'
range_after_handoff, one 128k-row zstd blocklet, 13-16 ms -> 10-12 ms best of 9; a scan of
many blocklets still decodes one blocklet per pool thread.)"""


def _decompress(stored: bytes | memoryview, raw_length: int, codec: int) -> pa.Buffer:
    if codec == CODEC_LZ4:
        try:
            return _lz4().decompress(stored, decompressed_size=raw_length)
        except OSError as exc:
            raise ValueError(f"page does not decompress to {raw_length} bytes: {exc}") from None
    if _ARROW_ZSTD is not None:
        try:
            # Arrow refuses a frame whose content is not exactly raw_length bytes.
            return _ARROW_ZSTD.decompress(stored, decompressed_size=raw_length)
        except OSError as exc:  # Arrow reports zstd failures as plain OSError
            raise ValueError(f"page does not decompress to {raw_length} bytes: {exc}") from None
    raw = _decompressor().decompress(stored, max_output_size=raw_length)
    if len(raw) != raw_length:
        raise ValueError(f"page decompressed to {len(raw)} bytes, expected {raw_length}")
    return pa.py_buffer(raw)


def decode_page(
    stored: bytes | memoryview, raw_length: int, codec: int, schema1: pa.Schema
) -> pa.Array:
    """The column array of a stored page. Raises zstandard/Arrow errors or ValueError on
    damaged bytes."""
    buf = pa.py_buffer(stored) if codec == CODEC_NONE else _decompress(stored, raw_length, codec)
    if codec != CODEC_LZ4:
        return pa.ipc.read_record_batch(buf, schema1).column(0)
    # An LZ4 frame does not record its content size, so a raw length longer than the frame's
    # content is not refused by the decompressor: the IPC message must fill the buffer exactly
    # (prefix, metadata and body, as serialize() wrote it).
    message = pa.ipc.read_message(buf)
    if _IPC_PREFIX + message.metadata.size + message.body.size != raw_length:
        raise ValueError(
            f"page holds a message of {_IPC_PREFIX + message.metadata.size + message.body.size} "
            f"bytes, expected {raw_length}"
        )
    return pa.ipc.read_record_batch(message, schema1).column(0)


# --- the shared thread pool -------------------------------------------------------------------

_POOL_PREFIX = "carbonlite-pool"
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def thread_pool() -> ThreadPoolExecutor:
    """The process-wide pool that encodes and decodes pages (recreated after ``fork``)."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(
                    max_workers=max(2, os.cpu_count() or 2), thread_name_prefix=_POOL_PREFIX
                )
    return _pool


def _forget_pool_after_fork() -> None:
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(
    fn: Callable[[T], R], items: Iterable[T], *, window: int | None = None
) -> Iterator[R]:
    """``map(fn, items)`` on the shared pool, results in order, at most ``window`` in flight.

    Runs inline when there is one item: a thread hop costs more than a small task.
    """
    if threading.current_thread().name.startswith(_POOL_PREFIX):
        # Already on a pool thread: waiting on the pool from here could deadlock it.
        yield from map(fn, items)
        return
    it = iter(items)
    first = next(it, _END)
    if first is _END:
        return
    second = next(it, _END)
    if second is _END:
        yield fn(first)  # type: ignore[arg-type]
        return
    pool = thread_pool()
    limit = window or 2 * (pool._max_workers)
    pending: list[Future[R]] = [pool.submit(fn, first), pool.submit(fn, second)]  # type: ignore[arg-type]
    try:
        for item in it:
            while len(pending) >= limit:
                yield pending.pop(0).result()
            pending.append(pool.submit(fn, item))
        while pending:
            yield pending.pop(0).result()
    finally:
        for f in pending:
            f.cancel()


_END = object()
