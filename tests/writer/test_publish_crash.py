"""Guarantee 1 for publishing, against real SIGKILLs: a process killed in any phase of a
publish (held at a seam of the commit protocol, the n-th time, then killed: every kill lands in
its phase however fast or loaded the machine is) leaves the table at the version before it or at the publish's own version, and every
committed version holds exactly the model's partitions (time travel included).

The worker (``tests/support/publish_worker.py``) publishes payloads that follow from a seed,
so this test replays them on a dict-of-partitions model. ``CARBONLITE_CRASH_SEED=<n>``
replays the random decisions of a failed run.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from carbonlite import create_table, open_table
from tests.support.fork_server import ForkServer
from tests.support.publish_worker import SCHEMA, apply

TRIALS = 16
SIGKILLED = -9
SEAMS = (
    "commit.before_put",
    "commit.after_put",
    "commit.before_checkpoint",
    "checkpoint.after_manifests",
    "checkpoint.after_document",
    "log.after_read",
)
"""Where a publish is held and killed: its files written and the version not yet created, the
version created and not yet checked, the checkpoint half written, a replay half done."""


class PublishCrashFailure(AssertionError):
    pass


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    s = ForkServer("tests.support.publish_worker", "publish worker", PublishCrashFailure)
    yield s
    s.close()


def rows_by_region(table: Any, version: int | None = None) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for row in table.to_arrow(version=version).to_pylist():
        out.setdefault(row["region"], []).append(tuple(row.values()))
    return {r: sorted(v) for r, v in out.items()}


@pytest.mark.slow
def test_sigkill_during_publish_leaves_the_old_or_the_new_version(
    server: ForkServer, tmp_path: Any
) -> None:
    seed = int(os.environ.get("CARBONLITE_CRASH_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    path = str(tmp_path / "t")
    create_table(path, SCHEMA, partition_by=["region"], properties={"checkpoint_interval": "3"})
    model: dict[str, list[Any]] = {}
    states: dict[int, dict[str, list[Any]]] = {0: {}}
    step = 0
    killed = 0
    for trial in range(TRIALS):
        hold = [rng.choice(SEAMS), rng.randint(1, 6)]
        pid = server.fork({"table": path, "seed": seed, "first": step, "count": 8, "hold": hold})
        done: list[tuple[int, int | None]] = []
        in_flight = None
        held = False
        line = server.next_line()
        while not line.startswith("exited"):
            if line.startswith("start"):
                in_flight = int(line.split()[1])
            elif line.startswith("done"):
                _, i, version = line.split()
                done.append((int(i), None if version == "None" else int(version)))
                in_flight = None
            elif line.startswith("held"):
                os.kill(pid, signal.SIGKILL)
                killed += 1
                held = True
            elif line.startswith("error"):
                raise PublishCrashFailure(f"seed {seed}, trial {trial}: {line}")
            line = server.next_line()
        exit_code = int(line.split()[1])
        assert exit_code == (SIGKILLED if held else 0), f"seed {seed}, trial {trial}: {line}"
        for i, version in done:
            model = apply(model, seed, i)
            if version is not None:
                states[version] = model
            step = i + 1
        table = open_table(path)
        now = rows_by_region(table)
        if in_flight is not None:
            after = apply(model, seed, in_flight)
            if now == after and now != model:
                # the killed publish committed: its version is the newest
                model = after
                states[table.version] = model
            step = in_flight + 1 if now == after else in_flight
        assert now == model, f"seed {seed}, trial {trial} (exit {exit_code}): rows differ"
        for version, expected in states.items():
            assert rows_by_region(table, version) == expected, (
                f"seed {seed}, trial {trial}: version {version} is not as committed"
            )
        problems = table.verify()
        assert problems.ok, f"seed {seed}: {problems}"
    print(f"publish crash: {killed} kills, {step} publishes, {len(states)} versions")
    assert killed >= TRIALS // 3, f"seed {seed}: only {killed} of {TRIALS} trials were killed"
    table = open_table(path)
    table.recover(min_age=0)
    assert rows_by_region(table) == model
