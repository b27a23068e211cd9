"""``carbonlite demo``: run the project's main job end to end on this machine."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.markup import escape
from rich.progress import Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from carbonlite.cli.app import JSON_OPTION, app, console, emit, fail_cleanly, say
from carbonlite.errors import CarbonLiteError, InvalidOptionError

NEXT_COMMANDS = ("inspect", "history", "segments", "files", "verify")
"""What to try on the demo's table afterwards, in this order."""


def _next_commands(table: str) -> list[str]:
    return [f"carbonlite {command} {table}" for command in NEXT_COMMANDS]


@contextmanager
def _stream_progress(mode: str) -> Iterator[Callable[[int, int, int], None] | None]:
    """How the rows streaming in are shown, while they do: ``live``, one line on the terminal
    that keeps changing; ``lines``, a line per micro-batch seen committed (output to a file or
    a pipe), with the rows in the table and the seconds since the stream started."""
    if mode == "lines":
        started = time.monotonic()

        def line(rows_in: int, batches: int, expected: int) -> None:
            if batches:  # the table exists, nothing committed yet
                seconds = time.monotonic() - started
                say(
                    f"    micro-batch {batches} of {expected} committed: {rows_in:,} rows in "
                    f"the table after {seconds:.1f} s"
                )

        yield line
        return
    with Progress(
        TextColumn("    streaming: {task.fields[rows]:,} rows in the table,"),
        TextColumn("{task.fields[batches]} of {task.fields[expected]} micro-batches committed"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("stream", total=None, rows=0, batches=0, expected="?")

        def live(rows_in: int, batches: int, expected: int) -> None:
            bar.update(
                task,
                completed=batches,
                total=expected,
                rows=rows_in,
                batches=batches,
                expected=expected,
            )

        yield live


@app.command()
@fail_cleanly
def demo(
    directory: str | None = typer.Option(
        None, "--dir", help="Work directory (new or empty); a fresh temporary one by default."
    ),
    rows: int = typer.Option(1_000_000, "--rows", min=1, help="How many events to generate."),
    keep: bool = typer.Option(
        True,
        "--keep/--cleanup",
        help="Keep the tables to look at afterwards (the default), or delete the directory.",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Run the main job: stream events into a table with local Spark and back out.

    Generates event files, streams them into a table (availableNow, maxFilesPerTrigger),
    reads them back with a filter, streams them out again with readStream, and prints what
    it did with counts and timings, then the commands to look at the table it made.
    """
    if directory is None:
        directory = tempfile.mkdtemp(prefix="carbonlite-demo-")
    elif os.path.exists(directory) and not os.path.isdir(directory):
        raise InvalidOptionError(f"--dir {directory!r} is a file; give a new or empty directory")
    elif os.path.exists(directory) and os.listdir(directory):
        raise InvalidOptionError(f"--dir {directory!r} is not empty; give a new or empty directory")
    directory = os.path.abspath(directory)
    try:
        from carbonlite.spark.demo import run_demo
    except ImportError as exc:
        raise InvalidOptionError(
            f"the demo needs Spark: pip install 'carbonlite[spark]' ({exc})"
        ) from None

    def narrate(text: str) -> None:
        if not as_json:
            console.print(text, highlight=False)

    mode = "none" if as_json else "live" if console.is_terminal else "lines"
    narrate(f"CarbonLite demo in [bold]{escape(directory)}[/bold]")
    try:
        report = run_demo(
            directory,
            rows,
            say=narrate,
            progress=None if mode == "none" else lambda: _stream_progress(mode),
        )
    except CarbonLiteError:
        raise
    except Exception as exc:  # a Spark failure: one line, and where Spark's log is
        first = (str(exc).strip().splitlines() or [""])[0]
        raise CarbonLiteError(
            f"the demo failed: {type(exc).__name__}: {first}; Spark's log is "
            f"{os.path.join(directory, 'spark.log')}"
        ) from None
    total = sum(seconds for _, seconds in report.steps)
    facts = report.facts
    ok = facts.get("ingested_rows") == rows == facts.get("counted_rows")
    if not keep:
        shutil.rmtree(directory, ignore_errors=True)
    if as_json:
        document: dict[str, Any] = {
            "ok": ok,
            "rows": rows,
            "directory": directory,
            "table": report.table,
            "kept": keep,
            "spark_log": report.spark_log if keep else None,
            **facts,
            "steps": [{"step": title, "seconds": s} for title, s in report.steps],
            "seconds": total,
            "next": _next_commands(report.table) if keep else [],
        }
        emit(document)
    else:
        console.print(
            f"[bold]{'OK' if ok else 'MISMATCH'}[/bold]: {rows:,} events in, "
            f"{facts.get('ingested_rows', 0):,} in the table, "
            f"{facts.get('counted_rows', 0):,} streamed out; {total:.1f} s in all",
            highlight=False,
        )
        if keep:
            kept = f"The data is kept in {directory} (delete it when done, or run with --cleanup)."
            console.print(Text(kept), soft_wrap=True)  # a path stays whole, to copy and paste
            console.print(Text(f"The table: {report.table}"), soft_wrap=True)
            say("Next, try:")
            for command in _next_commands(report.table):  # whole lines, to copy and paste
                console.print(Text(f"  {command}"), soft_wrap=True)
        else:
            console.print(Text(f"Deleted {directory} (--cleanup)."), soft_wrap=True)
    if not ok:
        raise typer.Exit(1)
