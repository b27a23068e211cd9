"""A worker for the schema change crash test: one schema change or one append, held at a seam
for the test's SIGKILL.

    python -m tests.support.schema_change_worker serve     # fork server

A spec: ``{"table": path, "op": op, "hold": [seam, n], "pause": [seam, n] or null}``, ``op``
one of ``rename`` (kind -> label), ``drop`` (n), ``widen`` (n to int64), ``add`` (z, int32,
default 0) and ``append`` (``ids``, written with the schema the handle opened with); with
``"golden": true`` the schema change is the one of ``GOLDEN_OPS`` (a format 5 table). The n-th
time the worker reaches the ``pause`` seam it prints ``paused SEAM`` and reads a line (the test
acts meanwhile, then lets it go on); the n-th time it reaches the ``hold`` seam it prints
``held SEAM`` and waits for the kill. Forked children write unbuffered lines to stdout:

    pid <pid>           first line
    opened <version>    the handle is open
    paused <seam>       waiting for a line on stdin
    held <seam> <n>     waiting at the seam, to be killed
    done <version>      the operation returned
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

import carbonlite
from carbonlite.seams import listening
from tests.support.fork_server import out, read_line, serve

SCHEMA = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("n", pa.int32())])

OPS: dict[str, Callable[[carbonlite.Table], Any]] = {
    "rename": lambda t: t.rename_column("kind", "label"),
    "drop": lambda t: t.drop_columns(["n"]),
    "widen": lambda t: t.widen_column("n", pa.int64()),
    "add": lambda t: t.add_columns([pa.field("z", pa.int32())], defaults={"z": 0}),
}


GOLDEN_OPS: dict[str, Callable[[carbonlite.Table], Any]] = {
    "rename": lambda t: t.rename_column("note", "memo"),
    "drop": lambda t: t.drop_columns(["flag"]),
    "widen": lambda t: t.widen_column("day", pa.timestamp("us")),
    "add": lambda t: t.add_columns([pa.field("z", pa.int32())], defaults={"z": 0}),
}
"""Schema changes of a copy of ``tests/data/golden_v5`` (log format 5): each gives the table
column ids in the same version (format 6). The date -> timestamp widening moves the column to
a new physical name."""


def after(op: str, schema: dict[str, pa.DataType]) -> dict[str, pa.DataType]:
    """The schema (name -> type, in order) after schema change ``op``."""
    if op == "rename":
        return {("label" if n == "kind" else n): t for n, t in schema.items()}
    if op == "drop":
        return {n: t for n, t in schema.items() if n != "n"}
    if op == "widen":
        return {n: (pa.int64() if n == "n" else t) for n, t in schema.items()}
    assert op == "add", op
    return {**schema, "z": pa.int32()}


def rows(ids: list[int], kind: str, schema: pa.Schema) -> pa.Table:
    """Rows ``ids`` written by ``kind`` with ``schema``: ``n`` is the id, the string column
    (``kind`` or ``label``) the writer, ``z`` left out (a writer leaving out a column with a
    default)."""
    columns = {}
    for f in schema:
        if f.name in ("id", "n"):
            columns[f.name] = pa.array(ids, f.type)
        elif pa.types.is_string(f.type):
            columns[f.name] = pa.array([kind] * len(ids), f.type)
    return pa.table(columns)


@contextmanager
def seams(hold: list[Any], pause: list[Any] | None) -> Iterator[None]:
    counts: dict[str, Iterator[int]] = {}
    lock = threading.Lock()

    def listener(name: str) -> None:
        with lock:
            n = next(counts.setdefault(name, itertools.count(1)))
        if pause is not None and [name, n] == list(pause):
            out(f"paused {name}")
            read_line()
        if [name, n] == list(hold):
            out(f"held {name} {n}")
            threading.Event().wait()

    with listening(listener):
        yield


def run(spec: dict[str, Any]) -> None:
    table = carbonlite.open_table(spec["table"], writer_id=f"worker-{spec['op']}")
    out(f"opened {table.version}")
    with seams(spec["hold"], spec.get("pause")):
        if spec["op"] == "append":
            result = table.append(rows(spec["ids"], "worker", table.schema))
        elif spec.get("golden"):
            result = GOLDEN_OPS[spec["op"]](table)
        else:
            result = OPS[spec["op"]](table)
        table.log.post_commit.settle()  # its checkpoint, if due: still inside the seams
    out(f"done {result.version}")


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve(run)
    else:
        raise SystemExit("usage: python -m tests.support.schema_change_worker serve")
