"""Maintenance commands: compact, handoff, clean, recover, verify, upgrade."""

from __future__ import annotations

import dataclasses

import typer
from rich.markup import escape
from rich.text import Text

from carbonlite.cli.app import (
    JSON_OPTION,
    STORAGE_OPTION,
    app,
    console,
    emit,
    err_console,
    fail_cleanly,
    human_bytes,
    open_for_cli,
    say,
)
from carbonlite.cli.layout import Col, print_table, progress_bar
from carbonlite.compaction import CompactionResult
from carbonlite.errors import InvalidOptionError
from carbonlite.metadata import LOG_FORMAT_VERSION


def _bars(as_json: bool) -> bool:
    """Progress bars go to stderr, and only when it is a terminal (never with --json)."""
    return not as_json and err_console.is_terminal


def _show_compaction(result: CompactionResult, as_json: bool) -> None:
    if as_json:
        emit(dataclasses.asdict(result))
        return
    if not result.versions:
        say(f"{result.kind}: nothing to do")
        return
    inputs, outputs = result.inputs, result.outputs
    rounds = len(result.versions)
    say(
        f"{result.kind}: merged {len(inputs)} segment(s) [{', '.join(inputs)}] into "
        f"{len(outputs)} [{', '.join(outputs)}]"
        + (f" in {rounds} rounds" if rounds > 1 else "")
        + f"; {result.rows:,} rows compacted, read {human_bytes(result.bytes_read)}, wrote "
        f"{human_bytes(result.bytes_written)} in {result.seconds:.1f} s; committed version(s) "
        f"{', '.join(map(str, result.versions))}"
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
    with progress_bar(err_console, kind, enabled=_bars(as_json), unit="work") as progress:
        result = table.compact(kind, segments=ids, progress=progress)  # type: ignore[arg-type]
    _show_compaction(result, as_json)


UPGRADE_HELP = f"""Raise a table to log format {LOG_FORMAT_VERSION}, the newest this CarbonLite
writes, in one commit and then a checkpoint.

Older CarbonLite releases refuse the upgraded table instead of misreading it."""


@app.command(help=UPGRADE_HELP)
@fail_cleanly
def upgrade(
    path: str = typer.Argument(..., help="Table path or URI."),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
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
    with progress_bar(err_console, "handoff", enabled=_bars(as_json), unit="work") as progress:
        result = table.handoff(progress=progress)
    _show_compaction(result, as_json)


@app.command()
@fail_cleanly
def clean(
    path: str = typer.Argument(..., help="Table path or URI."),
    retention: str | None = typer.Option(
        None,
        "--retention",
        help="Keep what versions younger than this need (7d, 12h, or seconds: 3600).",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only list what would be deleted."),
    force: bool = typer.Option(False, "--force", help="Allow a retention below 1 hour."),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Delete data and log files no version within the retention period needs."""
    table = open_for_cli(path, storage_options)
    with progress_bar(err_console, "clean", enabled=_bars(as_json), unit="bytes") as progress:
        result = table.clean(retention, dry_run=dry_run, force=force, progress=progress)
    if as_json:
        emit(dataclasses.asdict(result))
        return
    verb = "would delete" if dry_run else "deleted"
    say(
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
    say(
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
    with progress_bar(err_console, "verify", enabled=_bars(as_json), unit="bytes") as progress:
        result = table.verify(version=version, progress=progress)
    if as_json:
        emit({**dataclasses.asdict(result), "ok": result.ok})
    else:
        console.print(
            Text.assemble(
                f"version {result.version}: checked {result.files_checked} file(s), "
                f"{result.blocklets_checked} blocklet(s), {result.rows_checked:,} rows: ",
                ("OK", "green") if result.ok else (f"{len(result.problems)} problem(s)", "red"),
            )
        )
        if result.problems:
            print_table(
                console,
                "Problems",
                (Col("file"), Col("offset", "right"), Col("problem", squeeze=30)),
                [
                    [p.file, "" if p.offset is None else str(p.offset), p.message]
                    for p in result.problems
                ],
            )
    if not result.ok:
        raise typer.Exit(1)
