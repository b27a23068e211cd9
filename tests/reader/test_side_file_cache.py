"""The cache of bloom filter and secondary index files (``reader/bloom_prune.py``,
``BloomFileCache``): each file is read once and decoded once, both kinds share one byte budget
with the least recently used out first, and a file that is gone or damaged is remembered as
such while a read error that may pass is not."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from carbonlite.format.bloom import BLOOM_FILE_MAGIC
from carbonlite.format.secondary_index import build_secondary_index
from carbonlite.reader.bloom_prune import BloomFileCache


class Fetches:
    """``fetch`` functions that count their calls, by key."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def of(self, key: str, data: bytes | Exception) -> Callable[[], bytes]:
        def fetch() -> bytes:
            self.calls[key] = self.calls.get(key, 0) + 1
            if isinstance(data, Exception):
                raise data
            return data

        return fetch


def bloom_bytes(size: int) -> bytes:
    return BLOOM_FILE_MAGIC + bytes(size - len(BLOOM_FILE_MAGIC))


INDEX = build_secondary_index("k", [pa.array([1, 2]), pa.array([3])], [0, 100]).encode()


def test_each_file_is_read_once() -> None:
    cache, fetches = BloomFileCache(), Fetches()
    for _ in range(3):
        assert cache.read("t/a.bloom", 64, fetches.of("a", bloom_bytes(64))) is not None
        found = cache.index("t/a.sidx", len(INDEX), fetches.of("i", INDEX))
        assert found is not None and found.column == "k"
    assert fetches.calls == {"a": 1, "i": 1}
    assert cache.nbytes == 64 + len(INDEX)


def test_both_kinds_share_one_budget_least_recently_used_out_first() -> None:
    cache, fetches = BloomFileCache(max_bytes=3 * len(INDEX)), Fetches()
    cache.index("t/1.sidx", len(INDEX), fetches.of("1", INDEX))
    cache.read("t/2.bloom", len(INDEX), fetches.of("2", bloom_bytes(len(INDEX))))
    cache.index("t/3.sidx", len(INDEX), fetches.of("3", INDEX))
    cache.index("t/1.sidx", len(INDEX), fetches.of("1", INDEX))  # 1 is used again: 2 is oldest
    cache.read("t/4.bloom", len(INDEX), fetches.of("4", bloom_bytes(len(INDEX))))
    assert cache.nbytes == 3 * len(INDEX)
    cache.read("t/2.bloom", len(INDEX), fetches.of("2", bloom_bytes(len(INDEX))))  # read again
    cache.index("t/1.sidx", len(INDEX), fetches.of("1", INDEX))  # 3 went out, not 1
    cache.index("t/3.sidx", len(INDEX), fetches.of("3", INDEX))
    assert fetches.calls == {"1": 1, "2": 2, "3": 2, "4": 1}
    assert cache.nbytes == 3 * len(INDEX)


def test_a_file_larger_than_the_budget_is_still_used() -> None:
    cache, fetches = BloomFileCache(max_bytes=10), Fetches()
    assert cache.read("t/a.bloom", 64, fetches.of("a", bloom_bytes(64))) is not None
    assert cache.read("t/a.bloom", 64, fetches.of("a", bloom_bytes(64))) is not None
    assert fetches.calls == {"a": 1}


def test_gone_and_damaged_files_are_remembered_and_never_used() -> None:
    cache, fetches = BloomFileCache(), Fetches()
    cases = {
        "gone.bloom": (64, FileNotFoundError("no such file")),
        "short.bloom": (64, bloom_bytes(32)),
        "foreign.bloom": (64, b"PAR1" + bytes(60)),
        "index-as-bloom.bloom": (len(INDEX), INDEX),
    }
    index_cases = {
        "gone.sidx": (len(INDEX), FileNotFoundError("no such file")),
        "short.sidx": (len(INDEX), INDEX[:-4]),
        "flipped.sidx": (len(INDEX), INDEX[:8] + bytes([INDEX[8] ^ 0xFF]) + INDEX[9:]),
        "bloom-as-index.sidx": (64, bloom_bytes(64)),
    }
    for _ in range(2):
        for key, (size, data) in cases.items():
            assert cache.read(key, size, fetches.of(key, data)) is None, key
        for key, (size, data) in index_cases.items():
            assert cache.index(key, size, fetches.of(key, data)) is None, key
    assert fetches.calls == dict.fromkeys([*cases, *index_cases], 1)
    assert cache.nbytes == 0


def test_a_read_error_that_may_pass_is_not_remembered() -> None:
    cache, fetches = BloomFileCache(), Fetches()
    assert cache.read("a.bloom", 64, fetches.of("a", OSError("connection reset"))) is None
    assert cache.index("i.sidx", len(INDEX), fetches.of("i", TimeoutError("slow"))) is None
    assert cache.read("a.bloom", 64, fetches.of("a", bloom_bytes(64))) is not None
    assert cache.index("i.sidx", len(INDEX), fetches.of("i", INDEX)) is not None
    assert fetches.calls == {"a": 2, "i": 2}


def test_a_file_read_twice_at_once_is_counted_once() -> None:
    """Two readers that both missed the file both read it; the second to finish keeps the
    first's copy and the budget counts it once."""
    cache = BloomFileCache()

    def racing() -> bytes:
        assert cache.read("a.bloom", 64, lambda: bloom_bytes(64)) is not None  # the other reader
        return bloom_bytes(64)

    assert cache.read("a.bloom", 64, racing) is not None
    assert cache.nbytes == 64
