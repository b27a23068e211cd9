"""docs/CLI.md against the program: its synopsis names every command the app has and nothing
else, and what it says of the log format is this release's (issue 25: the synopsis lacked
``partitions``, ``ingest`` and ``serve``; ``upgrade`` said format 3 with tables at 5); and
every example on the page runs, in order, from nothing, printing what the page shows (issue
38: the outputs were stale, ``--help`` without ``index``, ``inspect`` and ``properties``
without the bloom and index properties, and the examples needed steps given only in prose).
The session is run by ``tests/cli/doc_examples.py``."""

from __future__ import annotations

import re

import pytest

from carbonlite.metadata import LOG_FORMAT_VERSION
from tests.cli.conftest import command_paths
from tests.cli.doc_examples import (
    WORK_DIR,
    Example,
    Outcome,
    examples,
    normalised,
    run_page,
)
from tests.support import REPO

CLI_PAGE = REPO / "docs" / "CLI.md"
LOG_PAGE = REPO / "docs" / "LOG.md"
COMING: set[tuple[str, ...]] = set()
"""Commands the synopsis lists before they are registered (a branch that adds one). Once one
is registered, the test below says to take it out of here."""
_WORD = re.compile(r"[a-z][a-z-]*")


def synopsis() -> list[tuple[str, ...]]:
    """The commands the page's synopsis (its first plain code block) names, each as the
    words before its arguments: ``("inspect",)``, ``("ingest", "kafka")``."""
    page = CLI_PAGE.read_text(encoding="utf-8")
    block = re.search(r"^```\n(.*?)^```", page, re.S | re.M)
    assert block is not None, "docs/CLI.md has no synopsis"
    listed = []
    for line in block.group(1).splitlines():
        words = line.split()
        assert words[0] == "carbonlite", line
        command = []
        for word in words[1:]:
            if not _WORD.fullmatch(word):
                break
            command.append(word)
        if command:  # not `carbonlite --version`
            listed.append(tuple(command))
    return listed


def leaf_commands() -> set[tuple[str, ...]]:
    """Every command of the app a user runs (the groups' commands, not the groups)."""
    paths = set(command_paths()[1:])
    return {p for p in paths if not any(q[: len(p)] == p and q != p for q in paths)}


def test_the_synopsis_names_every_command_and_nothing_else() -> None:
    listed, registered = synopsis(), leaf_commands()
    assert len(listed) == len(set(listed)), "a command is listed twice"
    missing = sorted(" ".join(c) for c in registered - set(listed))
    assert not missing, f"docs/CLI.md's synopsis lacks {missing}"
    unknown = sorted(" ".join(c) for c in set(listed) - registered - COMING)
    assert not unknown, f"docs/CLI.md's synopsis names commands the program lacks: {unknown}"
    landed = sorted(" ".join(c) for c in COMING & registered)
    assert not landed, f"{landed} is registered now: take it out of COMING"


def test_the_check_reads_the_synopsis() -> None:
    """The parse is not vacuous: it finds the commands of every kind of line."""
    listed = synopsis()
    assert ("inspect",) in listed and ("ingest", "kafka") in listed
    assert ("properties", "unset") in listed and ("demo",) in listed
    assert len(listed) >= len(leaf_commands())


def test_the_pages_name_this_releases_log_format() -> None:
    cli = CLI_PAGE.read_text(encoding="utf-8")
    stated = [
        *re.findall(r"\(log format (\d+)\)", cli),  # inspect's header line
        *re.findall(r'"format_version": (\d+)', cli),  # inspect --json
        *re.findall(r"writes: format (\d+)", cli),  # the upgrade section
        *re.findall(r"from log format \d+ to (\d+)", cli),  # upgrade's output
        *re.findall(r"already at log format (\d+)", cli),
    ]
    assert len(stated) >= 5
    assert set(stated) == {str(LOG_FORMAT_VERSION)}, stated
    title = LOG_PAGE.read_text(encoding="utf-8").splitlines()[0]
    assert title == f"# The transaction log (log format version {LOG_FORMAT_VERSION})"


NOT_RUN = {"carbonlite demo --dir /tmp/carbonlite-demo --rows 100000": "starts Spark"}
"""Commands the page shows outside its ``console`` blocks, which the session does not run
(tests/spark/test_drivers.py runs ``demo`` in the slow tier), and why."""


@pytest.mark.slow  # the whole session of the page, about 20 s: the slow tier
def test_every_example_prints_what_the_page_shows() -> None:
    """The page's session from its first command (``cd`` into a new directory) to its last;
    every output compared with the one shown, what varies from run to run aside."""
    outcomes = list(run_page(CLI_PAGE.read_text(encoding="utf-8"), REPO))
    assert len(outcomes) >= 80
    stale = [o.difference() for o in outcomes if not o.same]
    how = "after a change to what a command prints: python -m tests.cli.doc_examples --update"
    report = "\n\n".join(stale)
    assert not stale, (
        f"{len(stale)} of {len(outcomes)} outputs differ from the page ({how})\n\n{report}"
    )


def _table_named(words: list[str]) -> str | None:
    """The PATH a ``carbonlite`` command's words name (None: ``--help``, ``--version``)."""
    rest = words[1:]
    if rest and rest[0] in ("properties", "index", "ingest", "iceberg"):
        rest = rest[1:]  # a group's command
    rest = rest[1:]
    return rest[0] if rest and not rest[0].startswith("-") else None


def test_the_session_starts_from_nothing() -> None:
    """It starts in a new empty directory and makes every table it uses with a command it
    shows, before a command that succeeds names it."""
    session = examples(CLI_PAGE.read_text(encoding="utf-8"))
    assert session[0].command == 'cd "$(mktemp -d /tmp/clidoc-XXXXXXXX)"'
    made: set[str] = set()
    for example in session[1:]:
        words = [w for w in example.command.split() if not w.startswith("COLUMNS=")]
        if words[:2] == ["cp", "-r"]:
            made.add(words[-1])
        elif words[0] == "carbonlite" and example.status == 0:
            table = _table_named(words)
            if words[1] == "create":
                made.add(str(table))
            elif table is not None:
                assert table in made, f"docs/CLI.md:{example.line}: {table!r} before it is made"
    assert {"events", "orders", "people", "old-events"} <= made


def test_only_the_listed_commands_are_shown_without_running() -> None:
    page = CLI_PAGE.read_text(encoding="utf-8")
    run = {e.command for e in examples(page)}
    shown = {line[2:] for line in page.splitlines() if line.startswith("$ carbonlite")}
    assert shown - run == set(NOT_RUN)


def _example(page: str, command: str) -> Example:
    return next(e for e in examples(page) if e.command == command)


def test_an_output_that_went_stale_is_found() -> None:
    """The comparison is not vacuous: the page's output as shown passes; with one count, one
    size, a data value or the exit status changed it does not."""
    page = CLI_PAGE.read_text(encoding="utf-8")
    verify = _example(page, "carbonlite verify events")
    blocklets = _example(page, "carbonlite inspect events --version 1 --blocklets")
    assert Outcome(verify, list(verify.output), verify.status).same
    assert Outcome(blocklets, list(blocklets.output), 0).same
    first = verify.output[0]
    assert not Outcome(verify, [first.replace(" 40 rows", " 41 rows")], verify.status).same
    assert not Outcome(verify, list(verify.output), 1).same
    bounds = [line.replace("11:37:00+00:00", "11:38:00+00:00") for line in blocklets.output]
    assert bounds != list(blocklets.output)
    assert not Outcome(blocklets, bounds, 0).same
    sizes = [line.replace("2.0 KiB", "2.1 KiB") for line in blocklets.output]
    assert sizes != list(blocklets.output)
    assert not Outcome(blocklets, sizes, 0).same


def test_normalisation_replaces_what_varies_and_nothing_else() -> None:
    shown = [
        "Table /tmp/clidoc-Ab3dE5gH/events",
        "id fbce0e2b38974324a6dfedc8092b3eb4, version 5 (log format 7), created 2026-11-28T17:25:48",
        '  "start_time": "2026-11-28T17:25:50.995000+00:00",',
        "      5  2026-11-28 17:25:51  APPEND          6       0      4 ms  fa4f33ebea2d4d90  2.0 KiB",
        "segments/0.0/part-00a373df41ca-5e3429c6.cblt",
        "wrote 1.0 KiB in 0.0",
        "s; committed version(s) 17",
        '  "seconds": 0.020753503005835228',
        "0        fa4f33ebea2d4d90-0.cblt  0     328     4  1 .. 4       2026-01-01 01:04:00+00:00 ..",
    ]
    assert normalised(shown) == [
        "Table /tmp/clidoc-XXXXXXXX/events",
        "id <table id>, version 5 (log format 7), created <time>",
        '  "start_time": "<time>",',
        "      5  <time>  APPEND          6       0 <duration>  <writer id>  2.0 KiB",
        "segments/0.0/part-<file id>.cblt",
        "wrote 1.0 KiB in <duration>; committed version(s) 17",
        '  "seconds": <duration>',
        "0        <writer id>-0.cblt  0     328     4  1 .. 4       2026-01-01 01:04:00+00:00 ..",
    ]
    # a slower run: a longer duration moves the wrapped line's break, and pads no differently
    assert normalised(["wrote 1.0 KiB in", "12.3 s; committed version(s) 17"]) == [
        "wrote 1.0 KiB in <duration>; committed version(s) 17"
    ]
    assert normalised(["  APPEND    123 ms  x"]) == normalised(["  APPEND      4 ms  x"])
    assert WORK_DIR.fullmatch("/tmp/clidoc-Ab3dE5gH")


def test_the_page_is_parsed_into_commands_and_outputs() -> None:
    page = "\n".join(
        [
            "text",
            "```console",
            "$ cat > f.csv <<'EOF'",
            "a,b",
            "$ not a prompt inside the here-document",
            "EOF",
            "$ carbonlite inspect f",
            "error: TableNotFoundError: ...",
            "[exit status 1]",
            "```",
            "```text",
            "$ carbonlite demo",
            "```",
        ]
    )
    first, second = examples(page)
    assert first.command == "cat > f.csv <<'EOF'\na,b\n$ not a prompt inside the here-document\nEOF"
    assert (first.output, first.status, first.line) == ((), 0, 3)
    assert (second.command, second.output, second.status) == (
        "carbonlite inspect f",
        ("error: TableNotFoundError: ...",),
        1,
    )
