"""A worker for the publish crash test: runs a numbered sequence of publishes whose payloads
follow from a seed (``payload``), so the test can replay them on a dict-of-partitions model.

    python -m tests.support.publish_worker serve     # fork server

A spec: ``{"table": path, "seed": n, "first": i, "count": k, "hold": [seam, n]}``: publishes
``first`` .. ``first + k - 1``, held (for the test's SIGKILL) the n-th time it reaches the seam
(``carbonlite.seams``). Forked children write unbuffered lines to stdout:

    pid <pid>           first line
    start <i>           publish i begins
    done <i> <version>  publish i returned (``None``: it found nothing to change)
    held <seam> <n>     waiting at the seam, to be killed
    finished            every publish ran
"""

from __future__ import annotations

import random
import sys
import threading
from typing import Any

import pyarrow as pa

import carbonlite
from tests.support.fork_server import out, serve
from tests.support.held_process import hold_at

SCHEMA = pa.schema([("region", pa.string()), ("id", pa.int64()), ("payload", pa.string())])
REGIONS = [f"r{n}" for n in range(6)]


def payload(seed: int, i: int) -> tuple[str, dict[str, pa.Table], dict[str, pa.Table]]:
    """(mode, partitions given, state) of publish ``i``: a few partitions, some emptied, some
    the same rows as before in another order (decided by the seed alone)."""
    rng = random.Random(seed * 100_003 + i)
    mode = "snapshot" if rng.random() < 0.2 else "incremental"
    given = {}
    for region in rng.sample(REGIONS, rng.randint(1, 4)):
        n = 0 if rng.random() < 0.15 else rng.randint(1, 300)
        version = rng.randint(0, 2)  # few versions of the rows: a repeat is often unchanged
        ids = list(range(n))
        rng.shuffle(ids)
        given[region] = pa.table(
            {
                "region": [region] * n,
                "id": ids,
                "payload": [f"{region}-{j}-v{version}" + "x" * 40 for j in ids],
            },
            schema=SCHEMA,
        )
    state = {"step": pa.table({"i": [i], "seed": [seed]})}
    return mode, given, state


def apply(model: dict[str, list[Any]], seed: int, i: int) -> dict[str, list[Any]]:
    """The model after publish ``i``."""
    mode, given, _ = payload(seed, i)
    new = {} if mode == "snapshot" else dict(model)
    if mode == "snapshot":
        new.update({r: v for r, v in model.items() if r in given})
    for region, rows in given.items():
        if rows.num_rows:
            new[region] = sorted(tuple(r.values()) for r in rows.to_pylist())
        else:
            new.pop(region, None)
    return new


def run(spec: dict[str, Any]) -> None:
    seam, nth = spec["hold"]
    with hold_at(seam, nth, wait=threading.Event().wait):
        publish(spec)


def publish(spec: dict[str, Any]) -> None:
    table = carbonlite.open_table(spec["table"], writer_id="publisher")
    for i in range(spec["first"], spec["first"] + spec["count"]):
        out(f"start {i}")
        mode, given, state = payload(spec["seed"], i)
        result = table.publish(given, mode=mode, state=state)  # type: ignore[arg-type]
        out(f"done {i} {result.version}")
    out("finished")


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve(run)
    else:
        raise SystemExit("usage: python -m tests.support.publish_worker serve")
