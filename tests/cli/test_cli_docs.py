"""docs/CLI.md against the program: its synopsis names every command the app has and nothing
else, and what it says of the log format is this release's (issue 25: the synopsis lacked
``partitions``, ``ingest`` and ``serve``; ``upgrade`` said format 3 with tables at 5)."""

from __future__ import annotations

import re

from carbonlite.metadata import LOG_FORMAT_VERSION
from tests.cli.conftest import command_paths
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
