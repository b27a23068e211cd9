"""The write-ahead log: records round-trip through a reopen with their LSNs, concurrent appends
share fsyncs, a torn tail is cut while older damage is refused, release deletes only whole
released segments, and every LSN acknowledged before a SIGKILL is replayed (hypothesis
against a plain list model for the rest)."""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbonlite.errors import (
    CarbonLiteError,
    CorruptDataError,
    InvalidOptionError,
    StorageError,
    WriterConflictError,
)
from carbonlite.serve.wal import FRAME_HEADER_SIZE, WalRecord, WriteAheadLog, segment_name

REPO = Path(__file__).resolve().parents[2]


def payload_for(lsn: int) -> bytes:
    return b"payload-%d;" % lsn * (1 + lsn % 5)


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("wal-*.log"))


def replayed(directory: Path, **options: int) -> list[WalRecord]:
    with WriteAheadLog(str(directory), **options) as log:
        return log.replay()


def fill(directory: Path, count: int, **options: int) -> list[WalRecord]:
    with WriteAheadLog(str(directory), **options) as log:
        log.replay()
        return [WalRecord(log.append(payload_for(i)), payload_for(i)) for i in range(1, count + 1)]


def test_round_trip_and_lsns_continue_after_reopen(tmp_path: Path) -> None:
    payloads = [b"", b"x", os.urandom(70_000), *(payload_for(i) for i in range(40))]
    with WriteAheadLog(str(tmp_path / "wal")) as log:
        assert log.replay() == []
        lsns = [log.append(p) for p in payloads]
    assert lsns == list(range(1, len(payloads) + 1))
    expected = [WalRecord(lsn, p) for lsn, p in zip(lsns, payloads, strict=True)]
    with WriteAheadLog(str(tmp_path / "wal")) as log:
        assert log.replay() == expected
        assert log.append(b"after") == len(payloads) + 1
    # append without an explicit replay finds the next LSN itself
    with WriteAheadLog(str(tmp_path / "wal")) as log:
        assert log.append(b"implicit") == len(payloads) + 2
    after = [WalRecord(len(payloads) + 1, b"after"), WalRecord(len(payloads) + 2, b"implicit")]
    assert replayed(tmp_path / "wal") == expected + after


def test_segments_roll_and_are_named_by_first_lsn(tmp_path: Path) -> None:
    # frames of 120 bytes, two per 240-byte segment
    with WriteAheadLog(str(tmp_path), segment_bytes=240) as log:
        for _ in range(5):
            log.append(b"p" * (120 - FRAME_HEADER_SIZE))
    assert [p.name for p in segments(tmp_path)] == [segment_name(n) for n in (1, 3, 5)]
    assert [p.stat().st_size for p in segments(tmp_path)] == [240, 240, 120]


@pytest.fixture
def fsync_monitor(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[int, int]]:
    """Inode -> file size that the latest fsync of it covered."""
    synced: dict[int, int] = {}
    real = os.fsync
    guard = threading.Lock()

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        real(fd)
        with guard:
            synced[st.st_ino] = max(synced.get(st.st_ino, 0), st.st_size)

    monkeypatch.setattr(os, "fsync", fsync)
    yield synced


def test_append_returns_only_after_an_fsync_covering_its_frame(
    tmp_path: Path, fsync_monitor: dict[int, int]
) -> None:
    with WriteAheadLog(str(tmp_path), segment_bytes=1000) as log:
        for i in range(30):
            log.append(payload_for(i))
            current = segments(tmp_path)[-1].stat()
            assert fsync_monitor.get(current.st_ino, -1) >= current.st_size
        # the directory entry of every new segment was fsync'd before records went in it
        assert tmp_path.stat().st_ino in fsync_monitor


def test_concurrent_appends_with_rollover_are_all_durable(
    tmp_path: Path, fsync_monitor: dict[int, int]
) -> None:
    got: dict[int, bytes] = {}
    guard = threading.Lock()
    with WriteAheadLog(str(tmp_path), segment_bytes=2048) as log:

        def work(t: int) -> None:
            for i in range(40):
                payload = b"%d-%d|" % (t, i) * (1 + i % 30)
                lsn = log.append(payload)
                with guard:
                    got[lsn] = payload

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        # every segment, old ones included, was fsync'd up to its last byte while open
        for path in segments(tmp_path):
            st = path.stat()
            assert fsync_monitor.get(st.st_ino) == st.st_size, path.name
    assert len(segments(tmp_path)) > 10
    assert sorted(got) == list(range(1, 321))
    assert replayed(tmp_path) == [WalRecord(lsn, got[lsn]) for lsn in range(1, 321)]


def _frame_ends(directory: Path) -> dict[int, tuple[int, int]]:
    """LSN -> (inode of its segment, offset just past its frame)."""
    ends: dict[int, tuple[int, int]] = {}
    for path in segments(directory):
        first = int(path.name[4:24])
        offset, data = 0, path.read_bytes()
        for lsn in itertools.count(first):
            if offset >= len(data):
                break
            length = int.from_bytes(data[offset + 4 : offset + 8], "little")
            offset += FRAME_HEADER_SIZE + length
            ends[lsn] = (path.stat().st_ino, offset)
    return ends


def _append_from_threads(
    log: WriteAheadLog, monitor: dict[int, int], threads_n: int, per_thread: int
) -> tuple[dict[int, dict[int, int]], list[BaseException]]:
    """Each thread appends; for each LSN returned, what fsyncs covered at that moment."""
    seen: dict[int, dict[int, int]] = {}
    errors: list[BaseException] = []
    guard = threading.Lock()
    barrier = threading.Barrier(threads_n)

    def work(t: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            try:
                lsn = log.append(b"%d:%d;" % (t, i) * (1 + i % 7))
            except CarbonLiteError as exc:
                with guard:
                    errors.append(exc)
                continue
            with guard:
                seen[lsn] = dict(monitor)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
        assert not th.is_alive(), "an appender never woke up"
    return seen, errors


def test_every_concurrent_append_returns_after_an_fsync_covering_it(
    tmp_path: Path, fsync_monitor: dict[int, int]
) -> None:
    with WriteAheadLog(str(tmp_path), segment_bytes=4096) as log:
        seen, errors = _append_from_threads(log, fsync_monitor, 8, 60)
    assert errors == []
    assert sorted(seen) == list(range(1, 481))
    ends = _frame_ends(tmp_path)
    for lsn, synced in seen.items():
        inode, end = ends[lsn]
        assert synced.get(inode, -1) >= end, f"LSN {lsn} was acknowledged before an fsync"


def test_a_failed_fsync_wakes_every_follower_and_fails_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: dict[int, int] = {}
    real, calls, guard = os.fsync, [0], threading.Lock()

    def fsync(fd: int) -> None:
        with guard:
            calls[0] += 1
            failing = calls[0] == 6
        if failing:
            time.sleep(0.05)  # followers pile up behind the failing leader
            raise OSError(5, "Input/output error")
        st = os.fstat(fd)
        real(fd)
        with guard:
            synced[st.st_ino] = max(synced.get(st.st_ino, 0), st.st_size)

    monkeypatch.setattr(os, "fsync", fsync)
    with WriteAheadLog(str(tmp_path)) as log:
        log.replay()
        seen, errors = _append_from_threads(log, synced, 8, 20)
        with pytest.raises(StorageError, match="failed earlier"):
            log.append(b"after")
    assert errors, "the failed fsync reached no appender"
    assert all(isinstance(e, StorageError) for e in errors)
    assert len(seen) + len(errors) == 160
    ends = _frame_ends(tmp_path)
    for lsn, covered in seen.items():  # what was acknowledged had been fsync'd
        inode, end = ends[lsn]
        assert covered.get(inode, -1) >= end
    monkeypatch.setattr(os, "fsync", real)
    lsns = {r.lsn for r in replayed(tmp_path)}
    assert set(seen) <= lsns


def test_group_commit_shares_fsyncs(tmp_path: Path) -> None:
    threads_n, per_thread = 16, 50
    barrier = threading.Barrier(threads_n)
    got: list[list[tuple[int, bytes]]] = [[] for _ in range(threads_n)]
    with WriteAheadLog(str(tmp_path)) as log:

        def work(t: int) -> None:
            barrier.wait()
            for i in range(per_thread):
                payload = (b"%02d:%03d:" % (t, i)).ljust(1024, b".")
                got[t].append((log.append(payload), payload))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        syncs = log.syncs
    appends = threads_n * per_thread
    for mine in got:  # each thread's LSNs increase
        assert [lsn for lsn, _ in mine] == sorted(lsn for lsn, _ in mine)
    by_lsn = dict(pair for mine in got for pair in mine)
    assert sorted(by_lsn) == list(range(1, appends + 1))
    records = replayed(tmp_path)
    assert records == [WalRecord(lsn, by_lsn[lsn]) for lsn in range(1, appends + 1)]
    assert len({r.payload for r in records}) == appends
    # One fsync per append would make syncs == 800. Grouping typically gives 30-150 here
    # (16 threads queue behind each fsync), but a loaded 2-core box can starve the waiters;
    # 0.75 keeps the test stable there and still fails whenever appends are not grouped.
    assert 1 <= syncs <= 0.75 * appends, syncs


def _copy_log(source: dict[str, bytes], target: Path) -> None:
    target.mkdir()
    for name, data in source.items():
        (target / name).write_bytes(data)


def test_torn_tail_is_cut_at_every_offset_of_the_last_frame(tmp_path: Path) -> None:
    # Payloads of 100 bytes: frames of 120 bytes, two per segment, the last segment holds one.
    options = {"segment_bytes": 2 * (FRAME_HEADER_SIZE + 100)}
    payloads = [bytes([65 + i]) * 100 for i in range(5)]
    with WriteAheadLog(str(tmp_path / "src"), **options) as log:
        for p in payloads:
            log.append(p)
    files = {p.name: p.read_bytes() for p in segments(tmp_path / "src")}
    last = max(files)
    assert len(files) == 3 and len(files[last]) == FRAME_HEADER_SIZE + 100
    intact = [WalRecord(i + 1, p) for i, p in enumerate(payloads[:-1])]
    for cut in range(len(files[last])):
        d = tmp_path / f"cut{cut}"
        _copy_log({**files, last: files[last][:cut]}, d)
        with WriteAheadLog(str(d), **options) as log:
            assert log.replay() == intact, cut
            assert (d / last).stat().st_size == 0  # cut back to the last intact frame
            if cut in (0, 1, FRAME_HEADER_SIZE - 1, FRAME_HEADER_SIZE, len(files[last]) - 1):
                assert log.append(b"new") == 5
        if cut in (0, 1, FRAME_HEADER_SIZE - 1, FRAME_HEADER_SIZE, len(files[last]) - 1):
            assert replayed(d, **options) == [*intact, WalRecord(5, b"new")], cut


def test_torn_tail_within_a_segment_keeps_the_frames_before_it(tmp_path: Path) -> None:
    records = fill(tmp_path, 6)
    (seg,) = segments(tmp_path)
    data = seg.read_bytes()
    start = len(data) - FRAME_HEADER_SIZE - len(records[-1].payload)
    seg.write_bytes(data[: start + 7])
    with WriteAheadLog(str(tmp_path)) as log:
        assert log.replay() == records[:-1]
        assert seg.stat().st_size == start
        assert log.append(b"again") == 6
    assert replayed(tmp_path) == [*records[:-1], WalRecord(6, b"again")]


def test_flipped_byte_in_the_last_frame_drops_it(tmp_path: Path) -> None:
    records = fill(tmp_path / "src", 4)
    (seg,) = segments(tmp_path / "src")
    data = seg.read_bytes()
    start = len(data) - FRAME_HEADER_SIZE - len(records[-1].payload)
    for at in range(start, len(data)):
        damaged = bytearray(data)
        damaged[at] ^= 0x5A
        d = tmp_path / f"flip{at}"
        _copy_log({seg.name: bytes(damaged)}, d)
        with WriteAheadLog(str(d)) as log:
            assert log.replay() == records[:-1], at  # dropped, never returned garbled
            assert log.append(b"fresh") == 4
        assert replayed(d) == [*records[:-1], WalRecord(4, b"fresh")]


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_damage_in_an_older_segment_raises(tmp_path: Path, damage: str) -> None:
    fill(tmp_path, 12, segment_bytes=200)
    files = segments(tmp_path)
    assert len(files) >= 3
    victim = files[1]
    data = bytearray(victim.read_bytes())
    second = FRAME_HEADER_SIZE + len(payload_for(int(victim.name[4:24])))
    if damage == "flip":
        data[second + FRAME_HEADER_SIZE + 2] ^= 1
    elif damage == "truncate":
        del data[second + 5 :]
    else:
        data += b"\0" * 30
    victim.write_bytes(bytes(data))
    before = {p.name: p.read_bytes() for p in files}
    for call in ("replay", "append"):
        with (
            WriteAheadLog(str(tmp_path), segment_bytes=200) as log,
            pytest.raises(CorruptDataError) as info,
        ):
            log.replay() if call == "replay" else log.append(b"x")
        assert info.value.path == str(victim)
        expected_offset = len(data) - 30 if damage == "garbage" else second
        assert info.value.offset == expected_offset
        assert victim.name in str(info.value)
    assert {p.name: p.read_bytes() for p in segments(tmp_path)} == before  # nothing was cut


def test_missing_or_renamed_segment_raises(tmp_path: Path) -> None:
    fill(tmp_path, 12, segment_bytes=200)
    files = segments(tmp_path)
    files[1].unlink()  # a gap in the middle
    with pytest.raises(CorruptDataError, match="removed or renamed") as info:
        replayed(tmp_path)
    assert info.value.path == str(files[2])
    # the same frames under another first LSN: intact CRCs, wrong LSNs
    files[2].rename(tmp_path / segment_name(int(files[2].name[4:24]) - 1))
    files[0].unlink()
    with pytest.raises(CorruptDataError, match="LSN"):
        replayed(tmp_path)


def test_release_deletes_whole_released_segments_only(tmp_path: Path) -> None:
    options = {"segment_bytes": 2 * (FRAME_HEADER_SIZE + 10)}  # two records per segment
    with WriteAheadLog(str(tmp_path), **options) as log:
        for i in range(1, 21):
            assert log.append(b"%010d" % i) == i
        log.release(0)
        assert len(segments(tmp_path)) == 10
        log.release(7)  # [1,2] [3,4] [5,6] go; [7,8] holds 8, which is not released
        assert segments(tmp_path)[0].name == segment_name(7)
        log.release(8)
        assert segments(tmp_path)[0].name == segment_name(9)
        log.release(8)  # nothing more
        assert log.append(b"%010d" % 21) == 21
    records = replayed(tmp_path, **options)
    assert records == [WalRecord(i, b"%010d" % i) for i in range(9, 22)]
    # releasing beyond the end keeps the segment being written, and LSNs never restart
    with WriteAheadLog(str(tmp_path), **options) as log:
        log.release(10**9)
        assert [p.name for p in segments(tmp_path)] == [segment_name(21)]
        assert log.replay() == [WalRecord(21, b"%010d" % 21)]
        assert log.append(b"x" * 11) == 22  # 30 + 31 bytes: rolls: a new segment starting at 22
        log.release(21)
        assert [p.name for p in segments(tmp_path)] == [segment_name(22)]
    with WriteAheadLog(str(tmp_path), **options) as log:
        assert log.replay() == [WalRecord(22, b"x" * 11)]
        assert log.append(b"y") == 23
    # everything older released, then the only segment's frames tear away (never acked):
    # the LSN comes from the segment's name, it does not restart at 1
    (only,) = segments(tmp_path)
    only.write_bytes(b"")
    with WriteAheadLog(str(tmp_path), **options) as log:
        assert log.replay() == []
        assert log.append(b"z") == 22
    assert replayed(tmp_path) == [WalRecord(22, b"z")]


def test_errors(tmp_path: Path) -> None:
    log = WriteAheadLog(str(tmp_path))
    for bad in ("text", bytearray(b"x"), None, 5):
        with pytest.raises(InvalidOptionError, match="must be bytes"):
            log.append(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError):
        log.release("3")  # type: ignore[arg-type]
    with pytest.raises(WriterConflictError):
        WriteAheadLog(str(tmp_path))  # one open log per directory
    assert log.append(b"a") == 1
    log.close()
    log.close()
    with pytest.raises(CarbonLiteError, match="closed"):
        log.append(b"b")
    with pytest.raises(CarbonLiteError, match="closed"):
        log.replay()
    with WriteAheadLog(str(tmp_path)) as again:  # the lock went with close
        assert again.replay() == [WalRecord(1, b"a")]
    with pytest.raises(CarbonLiteError, match="closed"):
        again.append(b"c")
    for bad_size in (0, -1, 1.5, True):
        with pytest.raises(InvalidOptionError, match="segment_bytes"):
            WriteAheadLog(str(tmp_path / "x"), segment_bytes=bad_size)  # type: ignore[arg-type]


# -- a real crash ------------------------------------------------------------------------

CRASH_SCRIPT = """
import sys, threading
from carbonlite.serve.wal import WriteAheadLog

log = WriteAheadLog(sys.argv[1], segment_bytes=16384)
log.replay()
out = threading.Lock()

def work(tag):
    i = 0
    while True:
        lsn = log.append((f"{tag}-{i};" * (1 + i % 9)).encode())
        with out:
            sys.stdout.write(f"{lsn} {tag} {i}\\n")
            sys.stdout.flush()
        i += 1

for t in range(4):
    threading.Thread(target=work, args=(f"{sys.argv[2]}.{t}",), daemon=True).start()
threading.Event().wait()
"""


def crash_payload(tag: str, i: int) -> bytes:
    return (f"{tag}-{i};" * (1 + i % 9)).encode()


def note_ack(acked: dict[int, bytes], line: bytes) -> None:
    lsn, tag, i = line.split()
    acked[int(lsn)] = crash_payload(tag.decode(), int(i))


def test_every_acknowledged_append_survives_sigkill(tmp_path: Path) -> None:
    seed = int(os.environ.get("CARBONLITE_CRASH_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    acked: dict[int, bytes] = {}
    run = 0
    # five runs, and more until the runs have crossed a segment rollover (how many records a
    # run writes before its kill lands depends on the machine's pace, not only the seed)
    while run < 5 or (len(segments(tmp_path)) <= 1 and run < 30):
        run += 1
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASH_SCRIPT, str(tmp_path), str(run)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert proc.stdout is not None
        target, lines = rng.randrange(10, 300), 0
        while lines < target:
            line = proc.stdout.readline()
            assert line, f"seed {seed}: the appender died: {proc.communicate()[1].decode()[-2000:]}"
            lines += 1
            note_ack(acked, line)
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate(timeout=30)
        for line in rest.splitlines():  # printed before the kill: acknowledged too
            note_ack(acked, line)
        records = replayed(tmp_path)
        assert [r.lsn for r in records] == list(range(1, len(records) + 1)), f"seed {seed}"
        by_lsn = {r.lsn: r.payload for r in records}
        lost = [lsn for lsn, payload in acked.items() if by_lsn.get(lsn) != payload]
        assert not lost, f"seed {seed}: acknowledged LSNs lost or changed: {lost[:10]}"
        for r in records:  # nothing garbled, acknowledged or not
            writer, _, counter = r.payload.split(b";")[0].rpartition(b"-")
            assert r.payload == crash_payload(writer.decode(), int(counter)), f"seed {seed}"
    assert len(segments(tmp_path)) > 1  # the runs crossed segment rollovers
    with WriteAheadLog(str(tmp_path), segment_bytes=16384) as log:
        n = len(log.replay())
        assert log.append(b"after the crashes") == n + 1
    assert replayed(tmp_path)[-1] == WalRecord(n + 1, b"after the crashes")


# -- hypothesis against a list model -----------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.binary(max_size=300)),
        st.tuples(st.just("reopen"), st.none()),
        st.tuples(st.just("release"), st.integers(-2, 60)),
        st.tuples(st.just("tear"), st.integers(0, 10_000)),
        st.tuples(st.just("flip"), st.integers(0, 10_000)),
    ),
    max_size=60,
)


@settings(max_examples=120, deadline=None)
@given(ops=operations, segment_bytes=st.integers(1, 1200))
def test_log_matches_a_list_model(ops: list[tuple[str, object]], segment_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model: list[WalRecord] = []  # every record not lost to a torn tail, in LSN order
        released = 0
        next_lsn = 1
        log = WriteAheadLog(tmp, segment_bytes=segment_bytes)

        def check_replay(records: list[WalRecord]) -> None:
            # a suffix of the model (released whole segments gone) holding all unreleased
            assert records == model[len(model) - len(records) :]
            assert all(r in records for r in model if r.lsn > released)

        try:
            check_replay(log.replay())
            for op, arg in ops:
                if op == "append":
                    assert isinstance(arg, bytes)
                    assert log.append(arg) == next_lsn
                    model.append(WalRecord(next_lsn, arg))
                    next_lsn += 1
                elif op == "release":
                    assert isinstance(arg, int)
                    log.release(arg)
                    released = max(released, arg)
                elif op == "reopen":
                    log.close()
                    log = WriteAheadLog(tmp, segment_bytes=segment_bytes)
                    check_replay(log.replay())
                else:  # damage the last frame, as a crash mid-append would
                    last = segments(Path(tmp))[-1] if segments(Path(tmp)) else None
                    if not model or model[-1].lsn <= released or last is None:
                        continue  # only an unacknowledged (so unreleased) record can tear
                    if last.stat().st_size == 0:
                        continue  # the last record sits in an older, closed segment
                    log.close()
                    data = bytearray(last.read_bytes())
                    frame = FRAME_HEADER_SIZE + len(model[-1].payload)
                    assert isinstance(arg, int)
                    if op == "tear":
                        del data[len(data) - 1 - arg % frame :]
                    else:
                        data[len(data) - 1 - arg % frame] ^= 0x80
                    last.write_bytes(bytes(data))
                    next_lsn = model.pop().lsn
                    log = WriteAheadLog(tmp, segment_bytes=segment_bytes)
                    check_replay(log.replay())
            log.close()
            log = WriteAheadLog(tmp, segment_bytes=segment_bytes)
            check_replay(log.replay())
            assert log.append(b"end") == next_lsn
        finally:
            log.close()
