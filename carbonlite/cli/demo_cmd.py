"""``carbonlite demo``: run the project's main job end to end on this machine."""

from __future__ import annotations

import os
import tempfile

import typer

from carbonlite.cli.app import app, console, fail_cleanly
from carbonlite.errors import InvalidOptionError


@app.command()
@fail_cleanly
def demo(
    directory: str | None = typer.Option(
        None, "--dir", help="Work directory (new or empty); a fresh temporary one by default."
    ),
    rows: int = typer.Option(1_000_000, "--rows", min=1, help="How many events to generate."),
) -> None:
    """Run the main job: stream events into a table with local Spark and back out.

    Generates event files, streams them into a table (availableNow, maxFilesPerTrigger),
    reads them back with a filter, streams them out again with readStream, and prints what
    it did with counts and timings.
    """
    if directory is None:
        directory = tempfile.mkdtemp(prefix="carbonlite-demo-")
    elif os.path.exists(directory) and not os.path.isdir(directory):
        raise InvalidOptionError(f"--dir {directory!r} is a file; give a new or empty directory")
    elif os.path.exists(directory) and os.listdir(directory):
        raise InvalidOptionError(f"--dir {directory!r} is not empty; give a new or empty directory")
    try:
        from carbonlite.spark.demo import run_demo
    except ImportError as exc:
        raise InvalidOptionError(
            f"the demo needs Spark: pip install 'carbonlite[spark]' ({exc})"
        ) from None
    console.print(f"CarbonLite demo in [bold]{directory}[/bold]")
    report = run_demo(directory, rows, say=console.print)
    total = sum(seconds for _, seconds in report.steps)
    ok = report.facts.get("ingested_rows") == rows == report.facts.get("counted_rows")
    console.print(
        f"[bold]{'OK' if ok else 'MISMATCH'}[/bold]: {rows:,} events in, "
        f"{report.facts.get('ingested_rows', 0):,} in the table, "
        f"{report.facts.get('counted_rows', 0):,} streamed out; {total:.1f} s in all"
    )
    if not ok:
        raise typer.Exit(1)
