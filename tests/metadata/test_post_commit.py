"""Post-commit steps (``carbonlite/metadata/post_commit.py``): checkpoints written after the
commit is settled, on the committing thread or in the background, never changing its outcome.

The rest of the suite runs in ``"inline"`` mode (tests/conftest.py) so that what a test sees
after a commit never depends on a thread's timing; these tests run the default,
``"background"``, and wait for it explicitly (``PostCommit.settle``) or hold its thread at a
seam.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import carbonlite as cl
from carbonlite.metadata import post_commit
from carbonlite.seams import listening
from tests.support.holds import Holds
from tests.support.log_model import SCHEMA, rows

WORKER = "carbonlite-post-commit"


@pytest.fixture
def background(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(post_commit, "default_mode", "background")
    yield
    post_commit.settle_all()


def _table(**properties: str) -> cl.Table:
    """A table due a checkpoint at every fourth version (and only there)."""
    uri = f"memory://post-commit/{uuid.uuid4().hex}"
    props = {"checkpoint_interval": "4", "checkpoint_max_entries": "1000", **properties}
    return cl.create_table(uri, SCHEMA, properties=props)


def test_a_commit_returns_before_its_checkpoint_is_written(background: None) -> None:
    t = _table()
    assert t.log.post_commit.mode == "background"
    holds = Holds()
    with listening(holds.listener):
        worker = holds.at(WORKER, "commit.before_checkpoint")
        for i in range(1, 5):
            assert t.append(rows([i])).version == i  # version 4 is due
        worker.wait()  # the worker holds the checkpoint of 4; the commit has returned
        assert 4 not in t.log.listing().checkpoints
        assert t.refresh().count_rows() == 4
        worker.release()
        assert t.log.post_commit.settle(60)
    assert 4 in t.log.listing().checkpoints
    assert t.log.last_checkpoint() == 4
    assert cl.open_table(t.path).count_rows() == 4


def test_checkpoints_queued_behind_a_slow_one_are_coalesced(background: None) -> None:
    """While the worker writes one checkpoint, a writer that passes two more due versions has
    only the newest written: each checkpoint is optional, the newest is what opening wants."""
    t = _table()
    holds = Holds()
    with listening(holds.listener):
        worker = holds.at(WORKER, "commit.before_checkpoint")
        for i in range(1, 5):
            t.append(rows([i]))  # due at 4: the worker takes it up and is held there
        # only then the versions due at 8 and 12: a worker slow to start (a loaded machine)
        # would otherwise find 8 due already and rightly write it instead of 4
        worker.wait()
        for i in range(5, 13):
            t.append(rows([i]))
        worker.release()
        assert t.log.post_commit.settle(60)
    assert [c for c in t.log.listing().checkpoints if c in (4, 8, 12)] == [4, 12]
    assert t.log.last_checkpoint() == 12
    reopened = cl.open_table(t.path)
    assert sorted(reopened.to_arrow().column("id").to_pylist()) == list(range(1, 13))


def test_a_writer_takes_up_its_background_checkpoints(background: None) -> None:
    """After its checkpoints are written in the background, the writer's next refresh holds
    only the entries committed since (not every entry it ever committed), and each checkpoint
    writes only the entries since the one before: no state or manifest grows with the number
    of commits."""
    t = _table()
    for i in range(1, 41):
        t.append(rows([i]))
        t.log.post_commit.settle(60)
    snapshot = t.refresh().snapshot()
    tails = [len(f.tail) for s in snapshot.segments.values() for f in s.files.values()]
    assert sum(tails) <= 4, tails
    refs = snapshot.manifests.refs if snapshot.manifests is not None else ()
    assert all(r.entries <= 4 for r in refs if r.level == 0), [r.entries for r in refs]
    assert sum(r.entries for r in refs) + sum(tails) == 40
    assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(1, 41))


def test_a_failed_background_checkpoint_leaves_the_commit(background: None, monkeypatch) -> None:
    t = _table()

    def broken(snapshot: object) -> object:
        raise OSError("disk full")

    monkeypatch.setattr(t.log, "write_checkpoint_document", broken)
    for i in range(1, 5):
        t.append(rows([i]))
    assert t.log.post_commit.settle(60)
    failure = t.log.post_commit.failures[-1]
    assert (failure.version, failure.step) == (4, "checkpoint")
    assert "the checkpoint of version 4 could not be written" in str(failure)
    assert cl.open_table(t.path).count_rows() == 4
    assert t.log.listing().checkpoints == []


def test_a_process_finishes_its_checkpoints_when_it_exits(tmp_path: Path) -> None:
    """A short-lived writer (a CLI command, a script) exits right after its commit: the
    pending checkpoint is written before the interpreter ends."""
    path = tmp_path / "t"
    script = textwrap.dedent(
        f"""
        import carbonlite as cl
        from carbonlite.metadata import post_commit
        from tests.support.log_model import SCHEMA, rows
        assert post_commit.default_mode == "background"
        props = {{"checkpoint_interval": "4", "checkpoint_max_entries": "1000"}}
        t = cl.create_table({str(path)!r}, SCHEMA, properties=props)
        for i in range(1, 5):
            t.append(rows([i]))
        """
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", script], check=True, cwd=root, timeout=120)
    table = cl.open_table(path)
    assert 4 in table.log.listing().checkpoints and table.log.last_checkpoint() == 4
