"""Maintenance commands: compact, handoff, clean, recover, verify, upgrade."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from carbonlite.cli.app import (
    JSON_OPTION,
    STORAGE_OPTION,
    app,
    console,
    emit,
    fail_cleanly,
    human_bytes,
    open_for_cli,
)
from carbonlite.compaction import (
    CompactionResult,
    CompactionTask,
    TaskExecutor,
    TaskResult,
    run_tasks_locally,
)
from carbonlite.errors import InvalidOptionError


@contextmanager
def _progress(enabled: bool) -> Iterator[Progress | None]:
    if not enabled:
        yield None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        yield progress


def _executor(progress: Progress | None) -> TaskExecutor | None:
    """Run tasks locally, advancing a progress bar as each finishes."""
    if progress is None:
        return None

    def run(
        tasks: Sequence[CompactionTask],
        uri: str,
        schema: pa.Schema,
        storage_options: Mapping[str, Any],
    ) -> list[TaskResult]:
        bar = progress.add_task(f"merging into {len(tasks)} segment(s)", total=len(tasks))
        return run_tasks_locally(
            tasks, uri, schema, storage_options, on_done=lambda _: progress.advance(bar)
        )

    return run


def _show_compaction(result: CompactionResult, as_json: bool) -> None:
    if as_json:
        emit(dataclasses.asdict(result))
        return
    if not result.versions:
        console.print(f"{result.kind}: nothing to do")
        return
    console.print(
        f"{result.kind}: merged {len(result.segments_compacted)} segment(s) "
        f"[{escape(', '.join(result.segments_compacted))}] into {len(result.segments_created)} "
        f"[{escape(', '.join(result.segments_created))}]; {result.rows:,} rows, read "
        f"{human_bytes(result.bytes_read)}, wrote {human_bytes(result.bytes_written)} in "
        f"{result.seconds:.1f} s; committed version(s) {', '.join(map(str, result.versions))}"
    )


@app.command()
@fail_cleanly
def compact(
    path: str = typer.Argument(..., help="Table path or URI."),
    kind: str = typer.Option("minor", "--type", "-t", help="minor | major | custom | handoff"),
    segments: str | None = typer.Option(
        None, "--segments", help="Comma-separated segment ids (custom)."
    ),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Merge segments into larger sorted ones (one commit, ingestion continues)."""
    if kind not in ("minor", "major", "custom", "handoff"):
        raise InvalidOptionError(f"--type must be minor, major, custom or handoff, not {kind!r}")
    table = open_for_cli(path, storage_options)
    ids = [s.strip() for s in segments.split(",") if s.strip()] if segments else None
    with _progress(not as_json and console.is_terminal) as progress:
        result = table.compact(kind, segments=ids, executor=_executor(progress))  # type: ignore[arg-type]
    _show_compaction(result, as_json)


@app.command()
@fail_cleanly
def upgrade(
    path: str = typer.Argument(..., help="Table path or URI."),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Raise a table to the newest log format (format 3: checkpoints that reference manifests).

    Older CarbonLite releases refuse the upgraded table instead of misreading it."""
    table = open_for_cli(path, storage_options)
    before = table.snapshot().metadata.format_version
    result = table.upgrade()
    after = table.snapshot().metadata.format_version
    if as_json:
        emit({"version": result.version, "from_format": before, "to_format": after})
    elif result.version is None:
        console.print(f"{escape(path)} is already at log format {after}; nothing to do")
    else:
        console.print(
            f"upgraded {escape(path)} from log format {before} to {after} in version "
            f"{result.version} (checkpoint written)"
        )


@app.command()
@fail_cleanly
def handoff(
    path: str = typer.Argument(..., help="Table path or URI."),
    finish: bool = typer.Option(
        False, "--finish", help="First close the current STREAMING segment so it is handed off too."
    ),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Turn finished streaming segments into sorted columnar segments."""
    table = open_for_cli(path, storage_options)
    if finish:
        closed = table.finish_streaming()
        if closed is not None and not as_json:
            console.print(f"closed STREAMING segment {closed}")
    with _progress(not as_json and console.is_terminal) as progress:
        result = table.handoff(executor=_executor(progress))
    _show_compaction(result, as_json)


@app.command()
@fail_cleanly
def clean(
    path: str = typer.Argument(..., help="Table path or URI."),
    retention: str | None = typer.Option(
        None, "--retention", help="Keep what versions younger than this need (e.g. 7d, 12h)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only list what would be deleted."),
    force: bool = typer.Option(False, "--force", help="Allow a retention below 1 hour."),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Delete data and log files no version within the retention period needs."""
    table = open_for_cli(path, storage_options)
    result = table.clean(retention, dry_run=dry_run, force=force)
    if as_json:
        emit(dataclasses.asdict(result))
        return
    verb = "would delete" if dry_run else "deleted"
    console.print(
        f"{verb} {len(result.files)} data file(s) ({human_bytes(result.bytes)}) and "
        f"{len(result.log_files)} log file(s)"
        + (f"; recorded in version {result.version}" if result.version is not None else "")
    )
    for f in result.files:
        console.print(f"  {escape(f)}", highlight=False)


@app.command()
@fail_cleanly
def recover(
    path: str = typer.Argument(..., help="Table path or URI."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only list what would be done."),
    min_age: str = typer.Option(
        "1h",
        "--min-age",
        help="Leave alone files changed more recently (a live writer may own them).",
    ),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Truncate uncommitted tails and delete orphan files left by crashes."""
    table = open_for_cli(path, storage_options)
    result = table.recover(dry_run=dry_run, min_age=min_age)
    if as_json:
        emit(dataclasses.asdict(result))
        return
    verb = "would" if dry_run else "did"
    console.print(
        f"recover {verb}: truncate {len(result.truncated)} file(s), delete {len(result.orphans)} "
        f"orphan(s), free {human_bytes(result.bytes_freed)}; left {len(result.skipped_recent)} recent "
        "file(s) alone"
    )
    for file, before, after in result.truncated:
        console.print(f"  truncate {escape(file)}: {before:,} -> {after:,} bytes", highlight=False)
    for file in result.orphans:
        console.print(f"  delete   {escape(file)}", highlight=False)


@app.command()
@fail_cleanly
def verify(
    path: str = typer.Argument(..., help="Table path or URI."),
    version: int | None = typer.Option(None, "--version", "-v", help="Verify this version."),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Read every committed blocklet; check checksums and statistics. Exit 1 on problems."""
    table = open_for_cli(path, storage_options)
    result = table.verify(version=version)
    if as_json:
        emit({**dataclasses.asdict(result), "ok": result.ok})
    else:
        console.print(
            f"version {result.version}: checked {result.files_checked} file(s), "
            f"{result.blocklets_checked} blocklet(s), {result.rows_checked:,} rows: "
            + (
                "[green]OK[/green]"
                if result.ok
                else f"[red]{len(result.problems)} problem(s)[/red]"
            )
        )
        if result.problems:
            t = RichTable(title="Problems", title_justify="left")
            t.add_column("file")
            t.add_column("offset")
            t.add_column("problem")
            for p in result.problems:
                t.add_row(
                    escape(p.file), "" if p.offset is None else str(p.offset), escape(p.message)
                )
            console.print(t)
    if not result.ok:
        raise typer.Exit(1)
