"""Human output that fits the terminal: how wide to print, and tables that choose their
columns by width instead of cutting values short.

A table lists its columns with a priority (``keep``). When the table is wider than the
output, the columns with the lowest priority are left out, one at a time, until it fits with
every value on one line; a column of running text (``squeeze``) counts only that many
characters, its values wrap between words. Only when the columns that must stay do not fit
either do the ``wrap`` columns break between words (a timestamp into date and time). Every
value that is shown is shown whole, never cut short with an ellipsis; the columns left out
are named under the table, and ``--json`` always has every field.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, TextIO

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table as RichTable
from rich.text import Text

__all__ = [
    "PIPE_WIDTH",
    "Col",
    "fit_columns",
    "fitted_table",
    "human_bytes",
    "human_duration",
    "output_width",
    "print_table",
    "progress_bar",
]

PIPE_WIDTH = 200
"""Width of human output that goes to a file or a pipe, unless ``COLUMNS`` says otherwise."""
MIN_WIDTH = 40
GAP = 2
"""Spaces between two columns (the right padding of one, then the separator)."""


def output_width(stream: TextIO | None = None) -> int:
    """How wide to print on ``stream`` (stdout by default): ``COLUMNS`` when it is set, else
    the terminal's width, else :data:`PIPE_WIDTH`; never less than 40."""
    stream = sys.stdout if stream is None else stream
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return max(MIN_WIDTH, int(columns))
    try:
        if stream.isatty():
            return max(MIN_WIDTH, os.get_terminal_size(stream.fileno()).columns)
    except (AttributeError, OSError, ValueError):
        pass
    return PIPE_WIDTH


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def human_duration(ms: int | None) -> str:
    """``850 ms``, ``12.3 s``, ``4 min 05 s``; empty when not known."""
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, rest = divmod(round(ms / 1000), 60)
    return f"{minutes} min {rest:02d} s"


@dataclass(frozen=True)
class Col:
    """One column of a human table."""

    name: str
    justify: Literal["left", "right"] = "left"
    keep: int = 100
    """Priority: when the output is too narrow, lower ones are left out first; 100 or more
    is never left out."""
    wrap: bool = False
    """The values may break between words, when the columns that must stay need it."""
    squeeze: int | None = None
    """Running text: the column counts as this wide at most (its longest word at least) when
    columns are chosen, and its values wrap between words (implies ``wrap``)."""


def _widths(col: Col, cells: Sequence[str]) -> tuple[int, int]:
    """(the narrowest the column can be with every value whole, its width on one line)."""
    texts = [col.name, *cells]
    natural = max(cell_len(line) for t in texts for line in t.splitlines() or [""])
    if not (col.wrap or col.squeeze):
        return natural, natural
    longest_word = max(cell_len(word) for t in texts for word in t.split() or [""])
    if col.squeeze:
        return longest_word, max(longest_word, min(natural, col.squeeze))
    return longest_word, natural


def _width(
    cols: Sequence[Col], rows: Sequence[Sequence[str]], shown: Sequence[int], *, least: bool
) -> int:
    widths = (_widths(cols[i], [r[i] for r in rows]) for i in shown)
    return sum(w[0] if least else w[1] for w in widths) + GAP * (len(shown) - 1)


def fit_columns(cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """Indices of the columns to show so that the table fits ``width`` columns: the
    lowest-priority ones (the rightmost first among equals) are left out until every value
    fits on one line (running text counted at its ``squeeze``), or only the columns that must
    stay are left."""
    shown = list(range(len(cols)))
    while _width(cols, rows, shown, least=False) > width:
        droppable = [i for i in shown if cols[i].keep < 100]
        if not droppable:
            break
        shown.remove(min(droppable, key=lambda i: (cols[i].keep, -i)))
    return shown


def fitted_table(
    title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int
) -> tuple[RichTable, list[str]]:
    """A table of ``rows`` (plain text, never markup) at most ``width`` wide, and the names
    of the columns left out to fit."""
    shown = fit_columns(cols, rows, width)
    one_line = _width(cols, rows, shown, least=False) <= width
    # not even the columns that must stay fit with their values whole: fold them
    squeezed = _width(cols, rows, shown, least=True) > width
    table = RichTable(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        highlight=False,
    )
    for i in shown:
        col = cols[i]
        wraps = bool(col.squeeze) or (col.wrap and not one_line) or squeezed
        table.add_column(col.name, justify=col.justify, no_wrap=not wraps, overflow="fold")
    for row in rows:
        table.add_row(*(Text(row[i]) for i in shown))
    return table, [cols[i].name for i in range(len(cols)) if i not in shown]


def print_table(
    console: Console, title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[str]]
) -> None:
    """Print a fitted table on ``console`` and, under it, which columns did not fit."""
    table, hidden = fitted_table(title, cols, rows, console.width)
    console.print(table)
    if hidden:
        console.print(
            Text(
                f"({', '.join(hidden)}: left out to fit {console.width} columns; a wider "
                "terminal or --json shows them)",
                style="dim",
            )
        )


@contextmanager
def progress_bar(
    console: Console, description: str, *, enabled: bool, unit: Literal["bytes", "work"]
) -> Iterator[Callable[[int, int], None] | None]:
    """A transient progress bar on ``console`` fed by a ``progress(done, total)`` callback,
    or None when not ``enabled``. ``unit="bytes"`` shows bytes done of the total, ``"work"``
    a percentage."""
    if not enabled:
        yield None
        return
    amount: ProgressColumn = (
        DownloadColumn(binary_units=True) if unit == "bytes" else TaskProgressColumn()
    )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        amount,
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        yield update
