"""More careless and hostile invocations (after tests/cli/test_cli_doors.py, whose rules,
places and helpers these reuse): JSON storage options that parse but are wrong, S3 URIs and
endpoints that cannot be, paths with control characters, property values at the edges, DDL
edge cases, a table inside another, odd segment lists; then damaged tables, a closed stdout,
a narrow terminal and SIGINT mid-command.

Each refusal is one ``error:`` line on stderr and exit 1 (2: a usage error from click),
nothing on stdout, and nothing committed or created."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import carbonlite as cl
from tests.cli import test_cli_doors
from tests.cli.conftest import TOTAL_ROWS, invoke, make_table
from tests.cli.test_cli_doors import (
    BAD,
    NOT_FOUND,
    WIDTH,
    D,
    M,
    Places,
    T,
    assert_short_error,
    door,
)
from tests.support import REPO

places = test_cli_doors.places  # the module's fixture: a table, a file, an empty directory

S3 = "s3://bucket/t"
CLOSED = "http://127.0.0.1:9"
"""An endpoint nobody listens on (the discard port): a refused option never reaches it."""


def s3_options(**extra: object) -> str:
    return json.dumps({"endpoint_url": CLOSED, "key": "k", "secret": "s", **extra})


DEEP = "a " + "array<" * 64 + "int" + ">" * 64

MORE = [
    # --storage-options: valid JSON of the wrong shape, or options no store takes
    door(1, "inspect", T, "--storage-options", "5", needle="JSON object"),
    door(1, "inspect", T, "--storage-options", '"text"', "--json", needle="JSON object"),
    door(1, "segments", T, "--storage-options", '{"a": {"b": [1, 2]}}', needle="['a']"),
    door(1, "history", T, "--storage-options", '{"anon": true}', "--json", needle="local paths"),
    door(1, "inspect", "memory://x", "--storage-options", '{"a": 1}', needle="memory://"),
    door(
        1,
        "create",
        f"{D}/new",
        "--schema",
        "id int",
        "--storage-options",
        '{"x": 1}',
        needle="local paths",
    ),
    # S3 URIs and options: refused before any request (the endpoint is a closed port)
    door(1, "inspect", "s3://", needle="names no bucket"),
    door(1, "verify", "s3:///t", "--storage-options", s3_options(), needle="names no bucket"),
    door(
        1,
        "inspect",
        S3,
        "--storage-options",
        '{"endpoint_url": "not a url"}',
        needle="endpoint_url='not a url'",
    ),
    door(
        1,
        "inspect",
        S3,
        "--storage-options",
        '{"endpoint_url": 5}',
        "--json",
        needle="endpoint_url=5",
    ),
    door(
        1,
        "files",
        S3,
        "--storage-options",
        '{"endpoint_url": "http://127.0.0.1:99999"}',
        needle="endpoint_url",
    ),
    door(1, "inspect", S3, "--storage-options", '{"endpoint_url": "ftp://x"}', needle="ftp://x"),
    door(
        1,
        "inspect",
        S3,
        "--storage-options",
        s3_options(retry_timeout="nan"),
        needle="retry_timeout",
    ),
    door(
        1, "inspect", S3, "--storage-options", s3_options(retry_timeout=-1), needle="retry_timeout"
    ),
    door(
        1,
        "history",
        S3,
        "--storage-options",
        s3_options(retry_timeout="1e400"),
        needle="retry_timeout",
    ),
    door(1, "inspect", S3, "--storage-options", s3_options(bogus=1), needle="'bogus'"),
    door(1, "inspect", S3, "--storage-options", s3_options(anon="maybe"), needle="true or false"),
    door(1, "inspect", S3, "--storage-options", s3_options(client_options=[1]), needle="mapping"),
    door(1, "inspect", S3, "--storage-options", s3_options(ENDPOINT_URL=CLOSED), needle="twice"),
    door(1, "segments", S3, "--storage-options", s3_options(max_retries="x"), needle="a number"),
    # paths: control characters, home and variables (not expanded), other hosts
    door(1, "inspect", f"{D}/a\nb", needle="control character"),
    door(1, "verify", f"{D}/a\tb", "--json", needle="control character"),
    door(1, "inspect", "~/no-such-carbonlite-table-here", needle=NOT_FOUND),
    door(1, "inspect", "$HOME/no-such-carbonlite-table-here", needle=NOT_FOUND),
    door(1, "inspect", "file://otherhost/x", needle="another host"),
    door(1, "inspect", f"{D}/" + "x" * 300, needle="name too long"),
    # property values at the edges
    door(1, "properties", "set", T, "checkpoint_interval=0", needle="at least 1"),
    door(1, "properties", "set", T, "checkpoint_interval=-0", needle="at least 1"),
    door(1, "properties", "set", T, "checkpoint_interval=1e3", needle="whole number"),
    door(1, "properties", "set", T, "checkpoint_interval=\u0663", needle="whole number"),
    door(1, "properties", "set", T, "blocklet_max_rows=\uff11\uff10", needle="whole number"),
    door(1, "properties", "set", T, "blocklet_max_bytes=1e3", needle="not a size"),
    door(1, "properties", "set", T, "blocklet_max_bytes=1.5", needle="whole number of bytes"),
    door(1, "properties", "set", T, "blocklet_max_bytes=0.5", "--json", needle="whole number"),
    door(1, "properties", "set", T, "log_retention=1y", needle="not a duration"),
    door(1, "properties", "set", T, "log_retention=P1D", needle="not a duration"),
    door(1, "properties", "set", T, "compaction_level_threshold=4,,3", needle="at least 2"),
    door(1, "properties", "set", T, "compression_level=23", needle="to 22"),
    door(1, "properties", "set", T, "stream_codec=", needle="one of"),
    door(1, "properties", "set", T, "user.a\nb=1", needle="control characters"),
    door(1, "properties", "set", T, "user.\x00=1", "--json", needle="control characters"),
    # DDL edge cases
    door(1, "create", M, "--schema", "v void not null", needle="cannot be NOT NULL"),
    door(1, "create", M, "--schema", "`` int", needle="has no name"),
    door(1, "create", M, "--schema", "id int, `  ` int", needle="has no name"),
    door(1, "create", M, "--schema", "s struct<`` int>", needle="has no name"),
    door(1, "create", M, "--schema", "`a\tb` int", needle="control character"),
    door(1, "create", M, "--schema", "p decimal(39,0)", needle="out of range"),
    door(1, "create", M, "--schema", "p decimal(38,-1)", needle="'-'"),
    door(1, "create", M, "--schema", "p decimal(99999999999999999999,0)", needle="out of range"),
    door(1, "create", M, "--schema", "id int -- a comment", needle="'-'"),
    door(1, "create", M, "--schema", "id int /* a comment */", needle="'/'"),
    door(1, "create", M, "--schema", "x interval", needle="day-time"),
    door(1, "create", M, "--schema", "n array<string not null>", needle="'>'"),
    door(1, "create", M, "--schema", "x char(-1)", needle="'-'"),
    door(1, "create", M, "--schema", "é int", needle="'é'"),
    door(1, "create", M, "--schema", "x timestamp(3)", needle="'('"),
    door(1, "create", M, "--schema", "x struct<a int,>", needle="found '>'"),
    door(1, "create", M, "--schema", "id int garbage", "--json", needle="'garbage'"),
    door(1, "create", M, "--schema", DEEP.replace("array<", "array<array<", 1), needle="64 levels"),
    door(1, "create", M, "--schema", "a int", "--partition-by", "bucket(0, a)", needle="1.."),
    door(1, "create", M, "--schema", "a int", "--partition-by", "bucket(2, a", needle="unknown"),
    door(
        1,
        "create",
        M,
        "--schema",
        "a int",
        "--partition-by",
        "a",
        "--partition-by",
        "a",
        needle="duplicate",
    ),
    door(1, "create", M, "--schema", "a array<int>", "--primary-key", "a", needle="compared"),
    door(1, "create", M, "--schema", "v void", "--sort-by", "v", needle="no order"),
    door(
        1,
        "create",
        M,
        "--schema",
        "a int",
        "--property",
        "user.x=1",
        "--property",
        " user.x =2",
        needle="twice",
    ),
    # a table inside another one's directory, where its recover would delete the files
    door(1, "create", f"{T}/segments/inner", "--schema", "id int", needle="inside the table"),
    door(1, "create", f"{T}/other", "--schema", "id int", "--json", needle="inside the table"),
    # odd segment lists
    door(1, "compact", T, "--type", "custom", "--segments", "0,0", needle="more than once"),
    door(1, "compact", T, "--type", "custom", "--segments", "1, 1 ,2", needle="'1' is named"),
    door(1, "compact", T, "--type", "custom", "--segments", ",", needle="needs the ids"),
    door(1, "compact", T, "--type", "custom", "--segments", "99", needle="does not exist"),
    door(1, "compact", T, "--type", "custom", "--segments", "5", "--json", needle="STREAMING"),
    door(1, "compact", T, "--type", "custom", "--segments", "0\n1", needle="control character"),
    door(1, "compact", T, "--type", "MINOR", needle="--type"),
    # versions and limits click refuses
    door(2, "inspect", T, "--version", "0x10"),
    door(2, "files", T, "--version", "1e3"),
    door(2, "history", T, "--limit", "1e3"),
    door(1, "verify", T, "--version", "-2", "--json", needle="VersionNotFoundError"),
    # a usage error and an unknown one, with --json
    door(2, "properties", "show", T, "--json", "--bogus"),
    door(1, "clean", T, "--retention", "0s", "--json", needle=BAD),
]


def _fill(args: tuple[str, ...], places: Places) -> list[str]:
    named = {"{table}": places.table, "{dir}": places.dir, "{missing}": places.missing}
    out = []
    for arg in args:
        for mark, path in named.items():
            arg = arg.replace(mark, str(path))
        out.append(arg)
    return out


@pytest.mark.parametrize(("code", "args", "needle"), MORE)
def test_more_careless_invocations_are_refused_cleanly(
    places: Places, code: int, args: tuple[str, ...], needle: str
) -> None:
    before = cl.open_table(places.table)
    tree = sorted(p.relative_to(places.table) for p in places.table.rglob("*"))
    run = invoke(*_fill(args, places), columns=WIDTH)
    assert_short_error(run, code, needle)
    after = cl.open_table(places.table)
    assert (after.version, after.properties) == (before.version, before.properties)
    assert sorted(p.relative_to(places.table) for p in places.table.rglob("*")) == tree
    assert list(places.dir.iterdir()) == [], "a refused command left files behind"
    assert not places.missing.exists(), "a command on a missing table created it"


def test_there_are_sixty_more() -> None:
    assert len(MORE) >= 60


def test_a_long_segment_list_is_cut_short(places: Places) -> None:
    """5000 ids, most of them unknown: the error names the first ten and counts the rest,
    instead of printing 5000 ids and 5000 problems."""
    ids = ",".join(str(i) for i in range(5000))
    run = invoke("compact", places.table, "--type", "custom", "--segments", ids, columns=WIDTH)
    assert run.exit_code == 1 and run.stdout == "" and "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) <= 12, run.stderr[:2000]
    assert "(and 4990 more)" in lines[0] and lines[-1].strip() == "and 4985 more problems"


def test_edges_that_are_fine(tmp_path: Path) -> None:
    """The other side of the edges: what must keep working."""
    path = tmp_path / "t"
    make_table(path)
    assert len(invoke("history", path, "--limit", "9" * 30, "--json").json()) == 17
    assert invoke("inspect", path, "--version", "-0", "--json").json()["version"] == 0
    assert invoke("inspect", path, "--storage-options", "{}", "--json").exit_code == 0
    run = invoke("properties", "set", path, "blocklet_max_bytes=1 GB", "checkpoint_interval=+5")
    assert run.exit_code == 0, run.stderr
    assert cl.open_table(path).properties["blocklet_max_bytes"] == "1 GB"
    run = invoke("properties", "set", path, "blocklet_max_bytes=1.5k", "user.note=a=b")
    assert run.exit_code == 0, run.stderr
    run = invoke("create", tmp_path / "odd", "--schema", "`a.b` int, `c/d` string, select int")
    assert run.exit_code == 0, run.stderr
    assert cl.open_table(tmp_path / "odd").schema.names == ["a.b", "c/d", "select"]
    run = invoke("create", tmp_path / "wide", "--schema", "p decimal(38,38), " + DEEP)
    assert run.exit_code == 0, run.stderr


# --- damaged tables ---------------------------------------------------------------------------


def _damaged(tmp_path: Path, places: Places) -> Path:
    path = tmp_path / "t"
    shutil.copytree(places.table, path)
    return path


def _log(path: Path, version: int) -> Path:
    return path / "_carbonlite" / "log" / f"{version:020d}.json"


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        (lambda p: _log(p, 16).write_text("{garbage"), "does not parse"),
        (lambda p: _log(p, 16).write_bytes(b""), "no checksum seal"),
        (lambda p: _log(p, 14).unlink(), "missing version 14"),
    ],
    ids=["log-garbage", "log-empty", "log-gap"],
)
@pytest.mark.parametrize("command", ["inspect", "history", "verify", "recover", "segments"])
def test_a_damaged_log_is_one_line_with_json_too(
    tmp_path: Path, places: Places, damage: object, needle: str, command: str
) -> None:
    path = _damaged(tmp_path, places)
    damage(path)  # type: ignore[operator]
    files = sorted(path.rglob("*"))
    assert_short_error(invoke(command, path, "--json", columns=WIDTH), 1, needle)
    assert sorted(path.rglob("*")) == files, "a command on a damaged log changed the table"


def test_a_cut_data_file_is_a_problem_verify_reports(tmp_path: Path, places: Places) -> None:
    """``verify`` exits 1 with its report (JSON on stdout), ``recover`` does not touch a
    committed file, and reading the table names the file."""
    path = _damaged(tmp_path, places)
    data = next((path / "segments" / "2").glob("*.cblt"))
    os.truncate(data, 100)
    run = invoke("verify", path, "--json")
    assert run.exit_code == 1 and "Traceback" not in run.stderr
    report = run.json()
    assert not report["ok"] and any(data.name in p["file"] for p in report["problems"])
    assert invoke("recover", path, "--min-age", "0s", "--json").json()["truncated"] == []
    assert data.stat().st_size == 100


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: (p / "_carbonlite" / "_last_checkpoint").unlink(),
        lambda p: (p / "_carbonlite" / "_last_checkpoint").write_text("xx"),
        lambda p: (p / "_carbonlite" / "_last_checkpoint").write_text('{"version": 99}'),
    ],
    ids=["pointer-deleted", "pointer-garbage", "pointer-ahead"],
)
def test_a_lost_checkpoint_pointer_is_read_around(
    tmp_path: Path, places: Places, damage: object
) -> None:
    path = _damaged(tmp_path, places)
    damage(path)  # type: ignore[operator]
    run = invoke("verify", path, "--json")
    assert run.exit_code == 0 and run.json()["ok"], run.stderr
    assert invoke("inspect", path, "--json").json()["summary"]["rows"] == TOTAL_ROWS


# --- where the output goes: a closed pipe, a narrow terminal ------------------------------------


def _carbonlite(*args: object, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "carbonlite", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
        **kw,
    )


@pytest.mark.parametrize("args", [("inspect", "--blocklets"), ("history", "--json"), ("files",)])
def test_a_closed_stdout_is_no_traceback(places: Places, args: tuple[str, ...]) -> None:
    """``carbonlite ... | head -c 0``: the reader is gone before the first byte."""
    command = " ".join([sys.executable, "-m", "carbonlite", args[0], str(places.table), *args[1:]])
    done = subprocess.run(
        ["sh", "-c", f"{command} | head -c 0"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


@pytest.mark.parametrize("columns", [1, 10])
def test_a_terminal_narrower_than_forty_columns_gets_forty(places: Places, columns: int) -> None:
    run = invoke("inspect", places.table, "--blocklets", columns=columns)
    assert run.exit_code == 0, run.stderr
    assert max(len(line) for line in run.stdout.splitlines()) <= 40
    run = invoke("inspect", places.table, "--storage-options", "[]", columns=columns)
    assert_short_error(run, 1, "JSON object")


# --- SIGINT in the middle of a command -----------------------------------------------------------


@pytest.mark.parametrize(
    ("seam", "args"),
    [
        ("clean.after_plan", ("clean", "--retention", "0s", "--force")),
        ("compaction.after_execute", ("compact", "--type", "custom", "--segments", "0,1")),
    ],
)
def test_sigint_mid_command_is_a_clean_exit(
    tmp_path: Path, places: Places, seam: str, args: tuple[str, ...]
) -> None:
    """The command is held at a seam (tests/support/held_process.py), then gets SIGINT: it
    stops without a traceback, with a failing status, and commits nothing."""
    path = _damaged(tmp_path, places)
    version = cl.open_table(path).version
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.held_process",
            seam,
            "1",
            "--",
            args[0],
            str(path),
            *args[1:],
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == f"held {seam} 1\n"
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode in (1, 130), (proc.returncode, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert cl.open_table(path).version == version
    assert cl.open_table(path).count_rows() == TOTAL_ROWS
