"""``Storage.swap``, the atomic read-modify-write, on every backend: local disk, memory, S3.

The value under test is what ``_carbonlite/_last_checkpoint`` needs: several writers move it
forward with ``max(current, mine)`` and it never moves back, nor loses a write.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from carbonlite import seams
from carbonlite.errors import (
    CommitConflictError,
    StorageError,
    UnsupportedStorageError,
    WriterConflictError,
)
from carbonlite.storage import LocalStorage, Storage, base, local
from tests.storage.conftest import Backend
from tests.support import REPO
from tests.support.s3_server import S3Server, header_dropping_proxy

SEAM = "storage.before_swap_write"


def keep_max(mine: int) -> Callable[[bytes | None], bytes | None]:
    """The pointer's change: ``max(current, mine)``, None when the current value is as high."""

    def change(current: bytes | None) -> bytes | None:
        return None if current is not None and int(current) >= mine else str(mine).encode()

    return change


def recording(
    change: Callable[[bytes | None], bytes | None],
) -> tuple[Callable[[bytes | None], bytes | None], list[bytes | None]]:
    """``change``, and the list of the values it is called with."""
    calls: list[bytes | None] = []

    def recorded(current: bytes | None) -> bytes | None:
        calls.append(current)
        return change(current)

    return recorded, calls


def add(suffix: bytes) -> Callable[[bytes | None], bytes | None]:
    return lambda current: (current or b"") + suffix


# --- the contract ----------------------------------------------------------------------------


def test_swap_creates_keeps_and_returns_the_final_bytes(backend: Backend) -> None:
    s, path = backend.storage, backend.path("_carbonlite", "_last_checkpoint")
    change, calls = recording(keep_max(7))
    assert s.swap(path, change) == b"7"
    assert calls == [None]
    assert s.read(path) == b"7"

    change, calls = recording(keep_max(3))
    assert s.swap(path, change) == b"7"  # kept: the value after the call
    assert calls == [b"7"]
    assert s.read(path) == b"7"

    assert s.swap(path, keep_max(12)) == b"12"
    assert s.read(path) == b"12"

    missing = backend.path("_carbonlite", "nothing")
    assert s.swap(missing, lambda current: None) is None
    assert not s.exists(missing)


def test_a_deleted_object_is_created_again(backend: Backend) -> None:
    """The object vanishes between a swap's read and its write (a plain delete slips in): the
    write must not land on a value it did not see, so it is refused (S3: a 404 to If-Match)
    and the swap reads again and creates it; on local disk the change runs under the lock and
    its write simply follows the delete."""
    s, path = backend.storage, backend.path("pointer")
    s.put(path, b"old")

    def delete_first(current: bytes | None) -> bytes | None:
        if current == b"old":
            s.delete(path)
        return b"new"

    change, calls = recording(delete_first)
    assert s.swap(path, change) == b"new"
    assert s.read(path) == b"new"
    assert calls == ([b"old"] if backend.name == "local" else [b"old", None])


def test_threads_keeping_the_maximum_never_move_it_back(backend: Backend) -> None:
    s, path = backend.storage, backend.path("_carbonlite", "_last_checkpoint")
    threads_n, per_thread = 6, 8
    returned: dict[int, list[tuple[int, int]]] = {t: [] for t in range(threads_n)}
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads_n)

    def swapper(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                mine = i * threads_n + t + 1  # every value once, 1..48, interleaved by thread
                after = s.swap(path, keep_max(mine))
                assert after is not None
                returned[t].append((mine, int(after)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=swapper, args=(t,)) for t in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert int(s.read(path)) == threads_n * per_thread
    for t, pairs in returned.items():
        assert len(pairs) == per_thread
        assert all(after >= mine for mine, after in pairs), f"thread {t} moved it back: {pairs}"
        afters = [after for _, after in pairs]
        assert afters == sorted(afters), f"thread {t} saw the value go back: {afters}"


_COUNTER = """
import json, random, sys, time
from carbonlite.storage import open_storage

storage, path = open_storage(sys.argv[1])
count, start = int(sys.argv[2]), float(sys.argv[3])
bump = lambda current: str(int(current or b"0") + 1).encode()
while time.time() < start:
    time.sleep(0.001)
seen = []
for _ in range(count):
    seen.append(int(storage.swap(path, bump)))
    time.sleep(random.uniform(0, 0.003))  # outside the lock: lets the other process in
print(json.dumps(seen))
"""


def test_two_processes_never_lose_an_increment(tmp_path: Path) -> None:
    """A counter is the harshest change: any lost or doubled update shows in the total."""
    path, count = str(tmp_path / "counter"), 200
    start = time.time() + 2.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _COUNTER, path, str(count), str(start)],
            cwd=REPO,
            stdout=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    seen = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        seen.append(json.loads(out))
    assert Path(path).read_bytes() == str(2 * count).encode()
    assert sorted(seen[0] + seen[1]) == list(range(1, 2 * count + 1)), "a value came out twice"
    assert all(s == sorted(s) for s in seen)
    # the processes really raced: each swapped while the other was between its first and last
    assert seen[0][0] < seen[1][-1] and seen[1][0] < seen[0][-1]
    assert not Path(path + local.SWAP_LOCK_SUFFIX).exists()  # each holder deletes it as it goes


# --- the seam: a swapper paused between its read and its write -------------------------------


@contextmanager
def paused_at_seam(thread_name: str) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Pause the thread named ``thread_name`` the first time it reaches the swap's seam; yields
    (reached, release)."""
    reached, release = threading.Event(), threading.Event()

    def listener(name: str) -> None:
        mine = name == SEAM and threading.current_thread().name == thread_name
        if mine and not reached.is_set():  # the first time only: a retry passes
            reached.set()
            release.wait(timeout=60)

    try:
        with seams.listening(listener):
            yield reached, release
    finally:
        release.set()


def run_in_thread(name: str, fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), name=name)
    thread.start()
    return thread, out


def test_a_paused_swapper_is_overtaken_and_changes_the_newer_value(backend: Backend) -> None:
    if backend.name == "local":
        pytest.skip("a local swapper holds the lock while paused: see the test below")
    s, path = backend.storage, backend.path("pointer")
    s.put(path, b"x")
    change_a, calls_a = recording(add(b"a"))
    change_b, calls_b = recording(add(b"b"))
    with paused_at_seam("A") as (reached, release):
        a, result_a = run_in_thread("A", lambda: s.swap(path, change_a))
        assert reached.wait(timeout=30)
        assert s.swap(path, change_b) == b"xb"  # B is not held up by the paused A
        assert s.read(path) == b"xb"
        release.set()
        a.join(timeout=60)
    assert result_a == [b"xba"]
    assert calls_a == [b"x", b"xb"]  # A's first write was refused; its change saw B's value
    assert calls_b == [b"x"]
    assert s.read(path) == b"xba"


def test_a_paused_local_swapper_makes_the_others_wait(tmp_path: Path) -> None:
    s, path = LocalStorage(), str(tmp_path / "pointer")
    s.put(path, b"x")
    change_a, calls_a = recording(add(b"a"))
    change_b, calls_b = recording(add(b"b"))
    with paused_at_seam("A") as (reached, release):
        a, result_a = run_in_thread("A", lambda: s.swap(path, change_a))
        assert reached.wait(timeout=30)
        b, result_b = run_in_thread("B", lambda: s.swap(path, change_b))
        b.join(timeout=0.5)
        assert b.is_alive(), "B swapped while A held the lock"
        assert calls_b == []
        assert s.read(path) == b"x"
        release.set()
        a.join(timeout=60)
        b.join(timeout=60)
    assert result_a == [b"xa"] and result_b == [b"xab"]
    assert calls_a == [b"x"] and calls_b == [b"xa"]  # each change ran once, in turn
    assert s.read(path) == b"xab"


# --- giving up -------------------------------------------------------------------------------


def test_a_swapper_that_always_loses_gives_up_with_a_conflict(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend.name == "local":
        pytest.skip("a local swap holds the lock: it cannot lose a race")
    monkeypatch.setattr(base, "SWAP_ATTEMPTS", 4)
    monkeypatch.setattr(base, "_pause", lambda attempt: None)
    s, path = backend.storage, backend.path("pointer")
    s.put(path, b"0")
    calls: list[bytes | None] = []

    def overtaken(current: bytes | None) -> bytes | None:
        calls.append(current)
        s.put(path, f"other-{len(calls)}".encode())  # another writer always gets there first
        return b"mine"

    with pytest.raises(CommitConflictError, match="4 times in a row") as info:
        s.swap(path, overtaken)
    assert not isinstance(info.value, StorageError)
    assert calls == [b"0", b"other-1", b"other-2", b"other-3"]
    assert s.read(path) == b"other-4"


def test_a_local_swap_waits_for_its_lock_then_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "SWAP_LOCK_TIMEOUT", 0.3)
    s, path = LocalStorage(), str(tmp_path / "pointer")
    s.put(path, b"1")
    change, calls = recording(keep_max(5))
    with s.lock(path + local.SWAP_LOCK_SUFFIX, timeout=1):
        started = time.monotonic()
        with pytest.raises(WriterConflictError, match=r"could not swap .*held its lock"):
            s.swap(path, change)
        assert time.monotonic() - started >= 0.3
    assert calls == []
    assert s.read(path) == b"1"
    assert s.swap(path, change) == b"5"  # the lock is free again


def test_a_storage_without_swap_is_refused() -> None:
    bare = type(
        "BareStorage",
        (Storage,),
        {name: lambda *args, **kwargs: None for name in Storage.__abstractmethods__},
    )()
    with pytest.raises(UnsupportedStorageError, match="BareStorage cannot swap '/p'"):
        bare.swap("/p", keep_max(1))


# --- S3: what the server must honour, and answers that get lost ------------------------------


@pytest.mark.s3
def test_s3_server_ignoring_if_match_is_refused(s3_server: S3Server) -> None:
    from carbonlite.storage.s3 import S3Storage

    bucket = s3_server.new_bucket()
    path = f"{bucket}/t/_carbonlite/_last_checkpoint"
    with header_dropping_proxy(s3_server.endpoint_url, {"if-match"}) as url:
        storage = S3Storage({**s3_server.storage_options, "endpoint_url": url})
        with pytest.raises(
            UnsupportedStorageError, match=r"ignores conditional writes \(If-Match\)"
        ):
            storage.swap(path, keep_max(1))
        assert not storage.exists(path)
        assert storage.list(bucket, recursive=True) == [], "a probe object was left behind"
        # If-None-Match still reaches the server: put-if-absent is allowed, swap is not.
        assert storage.put_if_absent(f"{bucket}/created", b"1") is True
        with pytest.raises(UnsupportedStorageError, match="If-Match"):
            storage.swap(path, keep_max(1))
    honest = S3Storage(s3_server.storage_options)
    assert honest.swap(path, keep_max(1)) == b"1"
    assert honest.read(path) == b"1"


@pytest.fixture
def s3_backend(s3_server: S3Server) -> Backend:
    return Backend("s3", f"s3://{s3_server.new_bucket()}/root", s3_server.storage_options)


@pytest.fixture
def flaky_puts(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, bool], list[str]]:
    """Make conditional PUTs of one key fail after (``lands``) or instead of the real PUT, as
    when the answer is lost; returns the list of the failures raised."""
    import obstore
    from obstore.exceptions import GenericError

    real = obstore.put

    def install(key: str, lands: bool) -> list[str]:
        failures: list[str] = []

        def put(store: Any, path: str, data: Any, **kwargs: Any) -> Any:
            conditional = kwargs.get("mode") not in (None, "overwrite")
            if path != key or not conditional or (lands and failures):
                return real(store, path, data, **kwargs)
            if lands:
                real(store, path, data, **kwargs)
            failures.append(bytes(data).decode())
            raise GenericError("connection reset by peer (simulated: the answer was lost)")

        monkeypatch.setattr(obstore, "put", put)
        return failures

    return install


@pytest.mark.s3
@pytest.mark.parametrize("before", [None, b"3"], ids=["absent", "present"])
def test_s3_a_write_that_lands_but_reports_failure_is_read_back(
    s3_backend: Backend, flaky_puts: Callable[[str, bool], list[str]], before: bytes | None
) -> None:
    s, path = s3_backend.storage, s3_backend.path("_carbonlite", "_last_checkpoint")
    if before is not None:
        s.put(path, before)
    failures = flaky_puts(path.split("/", 1)[1], True)
    change, calls = recording(keep_max(5))
    assert s.swap(path, change) == b"5"
    assert failures == ["5"]  # the write landed and its answer was "lost" once
    assert calls == [before, b"5"]  # read again: the change saw its own write and kept it
    assert s.read(path) == b"5"


@pytest.mark.s3
def test_s3_writes_that_keep_failing_raise_and_leave_the_value(
    s3_backend: Backend, flaky_puts: Callable[[str, bool], list[str]]
) -> None:
    from carbonlite.storage import s3

    s, path = s3_backend.storage, s3_backend.path("_carbonlite", "_last_checkpoint")
    s.put(path, b"3")
    failures = flaky_puts(path.split("/", 1)[1], False)
    change, calls = recording(keep_max(5))
    with pytest.raises(StorageError, match="simulated") as info:
        s.swap(path, change)
    assert not isinstance(info.value, CommitConflictError)
    assert failures == ["5"] * (s3._LOST_WRITES + 1)
    assert calls == [b"3"] * (s3._LOST_WRITES + 1)
    assert s.read(path) == b"3"
