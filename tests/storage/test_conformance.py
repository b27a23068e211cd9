"""The storage contract, run against every backend: local disk, memory, and S3 (moto)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from carbonlite.errors import StorageError, UnsupportedStorageError
from carbonlite.storage import BufferedObjectAppender, open_storage
from tests.storage.conftest import Backend
from tests.support import REPO
from tests.support.s3_server import S3Server, header_dropping_proxy


def test_put_if_absent_creates_once(backend: Backend) -> None:
    s, path = backend.storage, backend.path("log", "00001.json")
    assert not s.exists(path)
    assert s.put_if_absent(path, b"first") is True
    assert s.put_if_absent(path, b"second") is False
    assert s.read(path) == b"first"
    assert s.size(path) == 5


def test_put_replaces_whole_file(backend: Backend) -> None:
    s, path = backend.storage, backend.path("pointer")
    s.put(path, b"a" * 100)
    s.put(path, b"bb")
    assert s.read(path) == b"bb"


def test_read_ranges(backend: Backend) -> None:
    s, path = backend.storage, backend.path("data.bin")
    payload = bytes(range(256)) * 40
    assert s.put_if_absent(path, payload)
    assert s.read(path, 10, 20) == payload[10:20]
    assert s.read(path, 10_000) == payload[10_000:]
    assert s.read(path, 10_230, 20_000) == payload[10_230:]
    assert s.read(path, 5, 5) == b""
    assert s.read(path, len(payload)) == b""
    assert s.read(path, len(payload) + 10, len(payload) + 20) == b""
    with s.open_reader(path) as r:
        assert r.size() == len(payload)
        assert r.read(100, 50) == payload[100:150]
        assert r.read(len(payload) - 3, 10) == payload[-3:]


def test_concurrent_range_reads_from_threads(backend: Backend) -> None:
    s, path = backend.storage, backend.path("data.bin")
    payload = os.urandom(64 * 1024)
    s.put(path, payload)
    errors: list[str] = []
    with s.open_reader(path) as r:

        def work(seed: int) -> None:
            for i in range(30):
                off = (seed * 7919 + i * 104729) % (len(payload) - 1000)
                if r.read(off, 1000) != payload[off : off + 1000]:
                    errors.append(f"thread {seed} read {off}")

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_missing_file_raises_file_not_found(backend: Backend) -> None:
    s, path = backend.storage, backend.path("nope.bin")
    assert not s.exists(path)
    with pytest.raises(FileNotFoundError):
        s.size(path)
    with pytest.raises(FileNotFoundError):
        s.read(path)


def test_list_and_delete(backend: Backend) -> None:
    s = backend.storage
    for name in ("b.json", "a.json", "sub/c.bin"):
        s.put(backend.path(name), name.encode())
    top = s.list(backend.root)
    assert [os.path.basename(f.path) for f in top] == ["a.json", "b.json"]
    assert [f.size for f in top] == [6, 6]
    assert all(f.mtime > 0 for f in top)
    everything = s.list(backend.root, recursive=True)
    assert sorted(os.path.basename(f.path) for f in everything) == ["a.json", "b.json", "c.bin"]
    assert s.list(backend.path("does-not-exist")) == []
    assert s.delete(backend.path("a.json")) is True
    assert s.delete(backend.path("a.json")) is False
    assert [os.path.basename(f.path) for f in s.list(backend.root)] == ["b.json"]


def test_status_is_the_file_as_a_listing_shows_it(backend: Backend) -> None:
    """``status`` (the file ingester's check after a read, issue 38) agrees with ``list``;
    an object store's ETag changes with the bytes, and only then."""
    s = backend.storage
    s.put(backend.path("sub", "a.json"), b"first")
    (listed,) = s.list(backend.path("sub"))
    assert s.status(listed.path) == listed
    s.put(listed.path, b"other")  # the same size
    now = s.status(listed.path)
    assert now.size == 5 and (now.etag is None) == (listed.etag is None)
    assert (listed.etag is not None) == (s.protocol == "s3")
    if listed.etag is not None:
        assert now.etag != listed.etag
        s.put(listed.path, b"other")
        assert s.status(listed.path).etag == now.etag
    with pytest.raises(FileNotFoundError):
        s.status(backend.path("sub", "missing.json"))


def test_append_truncate_when_supported(backend: Backend) -> None:
    s, path = backend.storage, backend.path("seg", "stream.bin")
    if not s.supports_append:
        with pytest.raises(UnsupportedStorageError, match="new object"):
            s.append(path, b"x")
        return
    assert s.append(path, b"hello ") == 6
    assert s.append(path, b"world") == 11
    with s.open_appender(path) as a:
        assert a.size == 11
        a.write(b"!!")
        a.flush()
        assert a.size == 13
        assert s.read(path) == b"hello world!!"
    s.truncate(path, 5)
    assert s.read(path) == b"hello"
    s.truncate(path, 5)  # a no-op, not an error
    assert s.size(path) == 5


def test_truncate_never_extends(backend: Backend) -> None:
    s, path = backend.storage, backend.path("t.bin")
    s.put(path, b"abc")
    with pytest.raises(StorageError, match="never extends"):
        s.truncate(path, 10)
    with pytest.raises(StorageError, match="negative"):
        s.truncate(path, -1)
    assert s.read(path) == b"abc"
    s.truncate(path, 1)
    assert s.read(path) == b"a"


def test_object_store_appender_writes_new_objects_only(backend: Backend) -> None:
    s, path = backend.storage, backend.path("obj.bin")
    a = BufferedObjectAppender(s, path)
    a.write(b"one ")
    a.flush()
    assert s.read(path) == b"one "
    a.write(b"two")
    a.close()
    assert s.read(path) == b"one two"
    with pytest.raises(UnsupportedStorageError, match="already exists"):
        BufferedObjectAppender(s, path)


def test_put_if_absent_race_between_threads(backend: Backend) -> None:
    s = backend.storage
    names = [backend.path(f"v{i:03d}.json") for i in range(25)]
    wins: dict[int, list[int]] = {i: [] for i in range(len(names))}
    barrier = threading.Barrier(4)

    def writer(wid: int) -> None:
        barrier.wait()
        for i, p in enumerate(names):
            if s.put_if_absent(p, str(wid).encode()):
                wins[i].append(wid)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, p in enumerate(names):
        assert len(wins[i]) == 1, f"{p}: winners {wins[i]}"
        assert s.read(p) == str(wins[i][0]).encode()


def test_put_if_absent_race_between_processes(backend: Backend) -> None:
    if backend.name == "memory":
        pytest.skip("memory:// lives inside one process; the thread race covers it")
    count = 40
    start = time.time() + 2.0
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.race_put",
                backend.uri,
                json.dumps(backend.options or {}),
                f"w{w}",
                str(start),
                str(count),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
        )
        for w in range(2)
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        results.append(set(json.loads(out)))
    assert results[0].isdisjoint(results[1]), "two processes both created the same file"
    assert results[0] | results[1] == set(range(count)), "some file was created by nobody"
    s = backend.storage
    for w, won in enumerate(results):
        for i in won:
            assert s.read(backend.path(f"race-{i:04d}.json")) == f"w{w}".encode()


def test_unknown_protocol_is_refused() -> None:
    with pytest.raises(UnsupportedStorageError, match="put-if-absent"):
        open_storage("ftp://host/table")


def test_local_without_hard_links_is_refused(tmp_path, monkeypatch) -> None:
    storage, root = open_storage(str(tmp_path))

    def no_links(src: str, dst: str) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    with pytest.raises(UnsupportedStorageError, match="hard links"):
        storage.put_if_absent(os.path.join(root, "x.json"), b"{}")
    assert not os.path.exists(os.path.join(root, "x.json"))
    assert [p for p in os.listdir(root) if p.startswith(".tmp")] == []


@pytest.mark.s3
def test_s3_server_ignoring_conditional_puts_is_refused(s3_server: S3Server) -> None:
    from carbonlite.storage.s3 import S3Storage

    bucket = s3_server.new_bucket()
    with header_dropping_proxy(s3_server.endpoint_url, {"if-none-match"}) as url:
        storage = S3Storage({**s3_server.storage_options, "endpoint_url": url})
        with pytest.raises(UnsupportedStorageError, match="ignores conditional writes"):
            storage.put_if_absent(f"{bucket}/t/_carbonlite/log/0.json", b"{}")
        assert not storage.exists(f"{bucket}/t/_carbonlite/log/0.json")
        assert storage.list(bucket, recursive=True) == [], "the probe object was left behind"
        # Through the proxy, everything but the condition still works.
        storage.put(f"{bucket}/plain", b"x")
        assert storage.read(f"{bucket}/plain") == b"x"
    # The same bucket on the honest server passes the probe.
    honest = S3Storage(s3_server.storage_options)
    assert honest.put_if_absent(f"{bucket}/t/_carbonlite/log/0.json", b"{}") is True
