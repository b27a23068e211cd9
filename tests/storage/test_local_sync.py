"""The local appender syncs in the background as it writes (storage/local.py, SYNC_EVERY):
``flush`` still makes every byte durable, a failed background sync is raised by the next flush
instead of being forgotten, and ``close`` never closes the descriptor under a running sync."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from carbonlite.storage import local
from carbonlite.storage.local import LocalStorage

CHUNK = b"x" * (1024 * 1024)


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every fdatasync: the thread that ran it and the file size it covered."""
    seen: list[tuple[str, int]] = []
    real = local._datasync

    def recording(fd: int) -> None:
        real(fd)
        seen.append((threading.current_thread().name, os.fstat(fd).st_size))

    monkeypatch.setattr(local, "_datasync", recording)
    return seen


def test_syncs_start_in_the_background_and_flush_covers_the_rest(
    tmp_path: Path, syncs: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "SYNC_EVERY", 2 * len(CHUNK))
    appender = LocalStorage().open_appender(str(tmp_path / "f"))
    for _ in range(9):
        appender.write(CHUNK)
    appender.flush()
    assert any(name == "carbonlite-sync" for name, _ in syncs), "no sync ran while writing"
    assert syncs[-1][1] == 9 * len(CHUNK)  # the last sync saw every byte
    assert appender._synced_size == appender.size == 9 * len(CHUNK)
    appender.close()
    assert (tmp_path / "f").read_bytes() == CHUNK * 9


def test_a_failed_background_sync_is_raised_by_the_next_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "SYNC_EVERY", len(CHUNK))

    def failing(fd: int) -> None:
        if threading.current_thread().name == "carbonlite-sync":
            raise OSError(5, "Input/output error")
        os.fdatasync(fd)

    monkeypatch.setattr(local, "_datasync", failing)
    appender = LocalStorage().open_appender(str(tmp_path / "f"))
    appender.write(CHUNK)
    with pytest.raises(OSError, match="Input/output error"):
        appender.flush()
    appender.close()


def test_close_waits_for_a_running_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "SYNC_EVERY", len(CHUNK))
    checked: list[bool] = []

    def slow(fd: int) -> None:
        if threading.current_thread().name == "carbonlite-sync":
            time.sleep(0.3)
            try:
                os.fstat(fd)
                checked.append(True)
            except OSError:
                checked.append(False)
        os.fdatasync(fd)

    monkeypatch.setattr(local, "_datasync", slow)
    appender = LocalStorage().open_appender(str(tmp_path / "f"))
    appender.write(CHUNK)
    appender.close()
    assert checked == [True]
