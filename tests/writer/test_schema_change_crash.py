"""Schema changes against real SIGKILLs: a process killed in any phase of a rename, a drop, a
widening or an added column with a default (held at a seam of the commit protocol, then killed:
every kill lands in its phase however fast or loaded the machine is), or killed while its
append races another process's schema change, leaves a table that opens with the schema of
before or of after the change (never a mix), every acknowledged row present with the values
its writer gave it, ``verify`` clean, ``recover`` harmless, and a later append committing.

The worker is ``tests/support/schema_change_worker.py``; every version writes a checkpoint
(``checkpoint_interval`` 1), so the checkpoint seams are met by every commit.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from tests.support.fork_server import ForkServer
from tests.support.schema_change_worker import OPS, SCHEMA, after, rows

SIGKILLED = -9
SEAMS = (
    "commit.before_put",
    "commit.after_put",
    "commit.before_checkpoint",
    "checkpoint.after_manifests",
    "checkpoint.after_document",
)
"""Where a schema change is held and killed: its version not yet created, created and not yet
checked, committed and its checkpoint not written, the checkpoint's manifests written and its
document not, the document written and ``_last_checkpoint`` not moved."""


class SchemaCrashFailure(AssertionError):
    pass


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    s = ForkServer("tests.support.schema_change_worker", "schema change worker", SchemaCrashFailure)
    yield s
    s.close()


def fresh_table(path: Path) -> dict[int, str]:
    """A table with rows in a columnar segment and in a streaming one: id -> writer."""
    cl.create_table(path, SCHEMA, properties={"checkpoint_interval": "1", "blocklet_max_rows": "4"})
    t = cl.open_table(path, writer_id="setup")
    t.append(rows(list(range(10)), "setup", SCHEMA))
    t.finish_streaming()
    t.handoff()
    t.append(rows(list(range(10, 16)), "setup", SCHEMA))
    return {i: "setup" for i in range(16)}


class Child:
    """One forked worker: its lines until it is held, paused or has ended."""

    def __init__(self, server: ForkServer, spec: dict[str, Any]) -> None:
        self.server = server
        self.pid = server.fork(spec)
        self.lines: list[str] = []

        self.ended = False

    def until(self, *prefixes: str) -> str:
        while True:
            line = self.server.next_line()
            self.lines.append(line)
            if line.startswith("exited"):
                self.ended = True
            if line.startswith((*prefixes, "exited")):
                return line

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        line = self.until("exited")
        assert line == f"exited {SIGKILLED}", self.lines

    def stop(self) -> None:
        """Kill it if it still runs (a failed assertion must not leave the server blocked)."""
        if not self.ended:
            os.kill(self.pid, signal.SIGKILL)
            self.until("exited")


@pytest.fixture
def children(server: ForkServer) -> Iterator[list[Child]]:
    """The test's children, each stopped at the end whatever the test's verdict."""
    started: list[Child] = []
    yield started
    for child in started:
        child.stop()


def schema_of(table: cl.Table, version: int | None = None) -> dict[str, pa.DataType]:
    return {f.name: f.type for f in table.snapshot(version).schema}


def check(path: Path, schema: dict[str, pa.DataType], writers: dict[int, str], what: str) -> None:
    """The table as a fresh handle reads it: ``schema``; the rows ``writers`` (id -> writer),
    each with its values under the present names; ``verify`` clean; every version readable;
    ``recover`` changes no row; a later append commits and reads back."""
    t = cl.open_table(path)
    assert schema_of(t) == schema, f"{what}: schema {schema_of(t)}, expected {schema}"
    read(t, schema, writers, what)
    result = t.verify()
    assert result.ok, f"{what}: {result.problems}"
    for version in range(t.version + 1):
        t.to_arrow(version=version)  # every version still reads
    t.recover(min_age=0)
    read(cl.open_table(path), schema, writers, f"{what}, after recover")
    later = list(range(1000, 1003))
    t.append(rows(later, "later", t.schema))
    writers = {**writers, **{i: "later" for i in later}}
    read(cl.open_table(path), schema, writers, f"{what}, after a later append")
    assert cl.open_table(path).verify().ok


def read(t: cl.Table, schema: dict[str, pa.DataType], writers: dict[int, str], what: str) -> None:
    got = t.to_arrow()
    assert {f.name: f.type for f in got.schema} == schema, f"{what}: read {got.schema}"
    by_id = {r["id"]: r for r in got.to_pylist()}
    assert len(by_id) == got.num_rows, f"{what}: an id twice"
    assert sorted(by_id) == sorted(writers), (
        f"{what}: ids {sorted(set(by_id) ^ set(writers))} differ from the acknowledged ones"
    )
    text = next((n for n, t in schema.items() if pa.types.is_string(t)), None)
    for i, row in by_id.items():
        if text is not None:
            assert row[text] == writers[i], f"{what}: row {row}"
        if "n" in schema:
            assert row["n"] == i, f"{what}: row {row}"
        if "z" in schema:
            assert row["z"] == 0, f"{what}: row {row} lacks the default"


@pytest.mark.parametrize("seam", SEAMS)
@pytest.mark.parametrize("op", sorted(OPS))
def test_sigkill_during_a_schema_change(
    server: ForkServer, children: list[Child], tmp_path: Path, op: str, seam: str
) -> None:
    path = tmp_path / "t"
    writers = fresh_table(path)
    before = schema_of(cl.open_table(path))
    child = Child(server, {"table": str(path), "op": op, "hold": [seam, 1]})
    children.append(child)
    line = child.until("held")
    assert line.startswith("held"), child.lines
    child.kill()
    expected = before if seam == "commit.before_put" else after(op, before)
    check(path, expected, writers, f"{op} killed at {seam}")


RACE_SEAMS = ("append.after_data", "commit.before_put", "commit.after_put")


@pytest.mark.parametrize("seam", RACE_SEAMS)
@pytest.mark.parametrize("op", sorted(OPS))
def test_sigkill_during_an_append_racing_a_schema_change(
    server: ForkServer, children: list[Child], tmp_path: Path, op: str, seam: str
) -> None:
    """The appender is paused at ``seam``, another process changes the schema, and the
    appender is killed there: its rows are in the table exactly when its version was put."""
    path = tmp_path / "t"
    writers = fresh_table(path)
    before = schema_of(cl.open_table(path))
    ids = list(range(100, 105))
    spec = {"table": str(path), "op": "append", "ids": ids, "pause": [seam, 1], "hold": ["", 0]}
    child = Child(server, spec)
    children.append(child)
    assert child.until("paused").startswith("paused"), child.lines
    OPS[op](cl.open_table(path, writer_id="changer"))
    child.kill()
    if seam == "commit.after_put":
        writers.update({i: "worker" for i in ids})
    check(path, after(op, before), writers, f"an append killed at {seam}, racing {op}")


@pytest.mark.parametrize("hold", ["commit.before_put", "commit.after_put"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_an_append_let_go_after_a_schema_change(
    server: ForkServer, children: list[Child], tmp_path: Path, op: str, hold: str
) -> None:
    """The appender's rows are written (paused after them), another process changes the
    schema, the appender goes on and is killed at ``hold``: after a rename or a drop it is
    refused (SchemaMismatchError, or its subclass ColumnsMovedError when the change
    won the race to the log) before it puts anything; after a widening or an added
    column its rows commit (read cast up, the default filled in) once its version is put."""
    path = tmp_path / "t"
    writers = fresh_table(path)
    before = schema_of(cl.open_table(path))
    ids = list(range(100, 105))
    spec = {
        "table": str(path),
        "op": "append",
        "ids": ids,
        "pause": ["append.after_data", 1],
        "hold": [hold, 1],
    }
    child = Child(server, spec)
    children.append(child)
    assert child.until("paused").startswith("paused"), child.lines
    OPS[op](cl.open_table(path, writer_id="changer"))
    server.send("go")
    line = child.until("held", "error")
    if line.startswith("error"):  # refused, before or after its first put
        assert op in ("rename", "drop"), line
        told = json.loads(line[len("error ") :])  # the subclass for a lost race is named
        assert "SchemaMismatchError" in told or "ColumnsMovedError" in told, line
        assert child.until("exited") == "exited 1"
    else:
        assert line.startswith("held"), child.lines
        assert op in ("widen", "add") or hold == "commit.before_put", (
            f"an append written before {op} put its version after it: {line}"
        )
        child.kill()
        if hold == "commit.after_put":
            writers.update({i: "worker" for i in ids})
    check(path, after(op, before), writers, f"an append let go after {op}, killed at {hold}")


GOLDEN_V5 = Path(__file__).resolve().parents[1] / "data" / "golden_v5"


def golden_after(op: str, rows: pa.Table) -> pa.Table:
    """The golden table's rows after schema change ``op`` (``GOLDEN_OPS``)."""
    if op == "rename":
        return rows.rename_columns(["memo" if n == "note" else n for n in rows.schema.names])
    if op == "drop":
        return rows.drop_columns(["flag"])
    if op == "widen":
        i = rows.schema.get_field_index("day")
        new = pa.field("day", pa.timestamp("us"))
        return rows.set_column(i, new, rows["day"].cast(new.type))
    assert op == "add", op
    return rows.append_column(pa.field("z", pa.int32()), pa.array([0] * rows.num_rows, pa.int32()))


@pytest.mark.parametrize("seam", SEAMS)
@pytest.mark.parametrize("op", sorted(OPS))
def test_sigkill_during_the_schema_change_that_gives_a_format_5_table_ids(
    server: ForkServer, children: list[Child], tmp_path: Path, op: str, seam: str
) -> None:
    """The golden table of format 5: its first schema change also raises it to format 6 and
    gives its columns ids, in one version. Killed in any phase, it is of format 5 with the old
    schema or of format 6 with the new one, its rows intact either way."""
    path = tmp_path / "golden"
    shutil.copytree(GOLDEN_V5, path)
    t = cl.open_table(path)
    t.set_properties({"checkpoint_interval": "1"})  # the change's version writes one
    old = t.to_arrow().sort_by("id")
    assert t.snapshot().metadata.format_version == 5
    child = Child(server, {"table": str(path), "op": op, "golden": True, "hold": [seam, 1]})
    children.append(child)
    assert child.until("held").startswith("held"), child.lines
    child.kill()
    changed = seam != "commit.before_put"
    want = golden_after(op, old) if changed else old
    t = cl.open_table(path)
    what = f"golden v5, {op} killed at {seam}"
    assert t.snapshot().metadata.format_version == (6 if changed else 5), what
    assert t.to_arrow().sort_by("id").equals(want), what
    assert t.verify().ok, what
    for version in range(t.version + 1):
        t.to_arrow(version=version)
    t.recover(min_age=0)
    more = want.slice(0, 3)
    more = more.set_column(0, more.schema.field(0), pa.array([10_001, 10_002, 10_003], pa.int64()))
    t.append(more)
    got = cl.open_table(path).to_arrow().sort_by("id")
    assert got.equals(pa.concat_tables([want, more]).sort_by("id")), what


KILLS = 15
"""How many SIGKILLs the loop below lands; trials where the child finishes first come on top."""


@pytest.mark.slow
def test_sigkill_loop_of_schema_changes_and_appends(
    server: ForkServer, children: list[Child], tmp_path: Path
) -> None:
    """Many kills on one table: a random schema change or append, killed at a random seam (the
    first to the third time it is reached), each outcome checked; the schema changes undo
    one another so the loop can go on (rename back, add back the dropped column)."""
    seed = int(os.environ.get("CARBONLITE_CRASH_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    path = tmp_path / "t"
    writers = fresh_table(path)
    next_id = 2000
    kills = trial = 0
    while kills < KILLS:
        trial += 1
        assert trial <= 4 * KILLS, f"seed {seed}: only {kills} kills in {trial - 1} trials"
        t = cl.open_table(path)
        schema = schema_of(t)
        choices = [op for op in OPS if after(op, schema) != schema and _applies(op, schema)]
        op = rng.choice([*choices, "append", "append"])
        seam = rng.choice(SEAMS if op != "append" else ("append.after_data", *SEAMS))
        spec: dict[str, Any] = {"table": str(path), "op": op, "hold": [seam, rng.randint(1, 2)]}
        if op == "append":
            spec["ids"] = list(range(next_id, next_id + rng.randint(1, 9)))
            next_id += 20
        child = Child(server, spec)
        children.append(child)
        line = child.until("held", "done", "error")
        assert not line.startswith("error"), f"seed {seed}, trial {trial}: {line}"
        if line.startswith("held"):
            child.kill()
            kills += 1
        else:
            assert child.until("exited") == "exited 0"
        now = schema_of(cl.open_table(path))
        what = f"seed {seed}, trial {trial}: {op} held at {spec['hold']} ({line})"
        if op == "append":
            committed = line.startswith("done") or _put(seam)
            assert now == schema, what
            if committed:
                writers.update({i: "worker" for i in spec["ids"]})
        else:
            assert now in (schema, after(op, schema)), f"{what}: schema {now}"
            if line.startswith("done") or _put(seam):
                assert now == after(op, schema), what
        check(path, now, writers, what)
        writers.update({i: "later" for i in range(1000, 1003)})
        _undo(path, now)
        read(cl.open_table(path), schema_of(cl.open_table(path)), writers, what)
        _drop_later(path, writers)


def _applies(op: str, schema: dict[str, pa.DataType]) -> bool:
    return {
        "rename": "kind" in schema,
        "drop": "n" in schema,
        "widen": schema.get("n") == pa.int32(),
        "add": "z" not in schema,
    }[op]


def _put(seam: str) -> bool:
    """Whether a worker held at ``seam`` had put its version."""
    return seam != "commit.before_put" and seam != "append.after_data"


def _undo(path: Path, schema: dict[str, pa.DataType]) -> None:
    """Rename back and drop z, so later trials meet every change again (a widened n stays)."""
    t = cl.open_table(path)
    if "label" in schema:
        t.rename_column("label", "kind")
    if "z" in schema:
        t.drop_columns(["z"])


def _drop_later(path: Path, writers: dict[int, str]) -> None:
    """Delete the later append's rows, so the next check's later append adds them again."""
    cl.open_table(path).delete([("id", ">=", 1000), ("id", "<", 1003)])
    for i in range(1000, 1003):
        writers.pop(i, None)
