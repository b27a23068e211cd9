"""``--help`` reads cleanly at 80 columns: no line of a paragraph ends early because the source
text had a hard line break there (issue 25), and no help text states a fact the code has
since changed (the log format ``upgrade`` raises a table to)."""

from __future__ import annotations

import itertools

import typer

from carbonlite.cli.help_text import FlowedGroup, flowed
from carbonlite.metadata import LOG_FORMAT_VERSION
from tests.cli.conftest import command_paths, invoke

WIDTH = 80
BORDER = "│"
SEPARATE_ITEMS = ("[default:", "[required]", "[env var:")
"""What typer prints after an option's help as an item of its own, on a line of its own when
the help takes more than one line: not a continuation of the help's paragraph."""


def _cell(line: str) -> tuple[str, int] | None:
    """A line of a panel (``│ ... │``): its inside and where text in it must end (one space of
    padding before the right border); None for any other line."""
    if len(line) > 1 and line[0] == BORDER and line[-1] == BORDER:
        inside = line[1:-1]
        return inside, len(inside) - 1
    return None


def _continues(above: str, below: str) -> bool:
    """``below`` continues the text ``above`` has in the same column: it is one run of words
    (a line that starts a row of a panel has its columns apart by two spaces or more), and
    starts where a text of ``above`` starts."""
    start = len(below) - len(below.lstrip(" "))
    text = below.strip()
    return (
        start > 0
        and bool(text)
        and "  " not in text
        and not text.startswith(SEPARATE_ITEMS)
        and above[start - 1 : start] == " "
        and above[start : start + 1] not in ("", " ")
    )


def _early_break(above: str, below: str, width: int) -> bool:
    """``below`` continues the paragraph of ``above``, and its first word would have fit at
    the end of ``above``: the break is a hard one from the source text, not the wrapping of a
    full line."""
    above_cell, below_cell = _cell(above), _cell(below)
    if above_cell is not None and below_cell is not None:
        (above, limit), (below, _) = above_cell, below_cell
    elif above_cell is None and below_cell is None:
        limit = width - 1  # text outside the panels has a column of padding either side
    else:
        return False
    if not _continues(above, below):
        return False
    return len(above.rstrip()) + 1 + len(below.split()[0]) <= limit


def ragged_lines(text: str, width: int = WIDTH) -> list[str]:
    """Each line that ends a line of a paragraph early, with the line after it."""
    lines = text.splitlines()
    return [
        f"{above.rstrip()}\n{below.rstrip()}"
        for above, below in itertools.pairwise(lines)
        if _early_break(above, below, width)
    ]


def render_help(*path: str) -> str:
    run = invoke(*path, "--help", columns=WIDTH)
    assert run.exit_code == 0, run.stderr
    return run.stdout


def test_every_help_reads_cleanly_at_80_columns() -> None:
    problems = {}
    for path in command_paths():
        text = render_help(*path)
        assert max(len(line) for line in text.splitlines()) <= WIDTH, text
        if ragged := ragged_lines(text):
            problems[" ".join(("carbonlite", *path))] = ragged
    assert not problems, "\n\n".join(
        f"{command} --help:\n" + "\n".join(lines) for command, lines in problems.items()
    )


def _app(cls: type[typer.core.TyperGroup] | None) -> typer.Typer:
    """A two-command app whose help texts break their lines where the source lines end."""
    demo = typer.Typer(cls=cls, add_completion=False)

    @demo.command()
    def first(
        path: str = typer.Argument(..., help="A path, whose help is broken\nat a short line."),
    ) -> None:
        """Do the first thing: a paragraph whose lines break where
        the source's do, as a docstring's do.

        A second paragraph, broken
        early too, and then a third line of it that is long enough to need wrapping anyway."""

    @demo.command()
    def second() -> None:
        """The second thing."""

    return demo


def test_the_check_finds_hard_breaks_and_flowing_removes_them() -> None:
    """The check is not vacuous: the same help texts are ragged as typer renders them, in the
    command's own help (second paragraph), in its argument's help and in the group's list of
    commands (first paragraph), and clean once :class:`FlowedGroup` flows them."""
    runner = typer.testing.CliRunner()
    env = {"COLUMNS": str(WIDTH)}
    ragged = _app(None)
    listing = runner.invoke(ragged, ["--help"], env=env).stdout
    assert any("source's do" in pair for pair in ragged_lines(listing)), listing
    own = runner.invoke(ragged, ["first", "--help"], env=env).stdout
    assert any("broken\n" in pair for pair in ragged_lines(own)), own
    flowing = _app(FlowedGroup)
    for args in (["--help"], ["first", "--help"], ["second", "--help"]):
        text = runner.invoke(flowing, args, env=env).stdout
        words = " ".join(text.replace(BORDER, " ").split())
        assert "source's do, as a docstring's do" in words or "second" in args
        assert ragged_lines(text) == [], text


def test_flowed_joins_the_lines_of_each_paragraph() -> None:
    text = """First line
        continues here.

        Second paragraph
        also.

        \b
        kept
        as written"""
    assert flowed(text) == (
        "First line continues here.\n\nSecond paragraph also.\n\n\b\nkept\nas written"
    )
    assert flowed(None) is None and flowed("") == ""


def test_upgrade_help_names_the_format_this_release_writes() -> None:
    """``upgrade --help`` said format 3 while tables were at format 5."""
    text = " ".join(render_help("upgrade").split())
    assert f"log format {LOG_FORMAT_VERSION}" in text
    for stale in range(1, LOG_FORMAT_VERSION):
        assert f"format {stale}" not in text


def test_create_help_names_every_writer_that_needs_a_table() -> None:
    """``create --help`` named only the Kafka ingester (issue 38); every ``ingest`` command
    opens an existing table (``carbonlite/ingest/targets.py``), and so does ``serve``."""
    ingesters = [p for p in command_paths() if len(p) == 2 and p[0] == "ingest"]
    assert len(ingesters) >= 2
    needing = [" ".join(("carbonlite", *p)) for p in (*ingesters, ("serve",))]
    for text in (render_help("create"), render_help()):  # its own help, and the list's line
        words = " ".join(text.replace(BORDER, " ").split())
        missing = [command for command in needing if command not in words]
        assert not missing, f"{missing} not named in:\n{text}"
