"""The ``carbonlite`` command: look at tables and operate them.

Every command prints a human view (tables fitted to the output's width, see ``layout.py``)
or, with ``--json``, one JSON document. Errors print one line to stderr and exit with status
1 (2 for usage errors, from click). Progress bars go to stderr, only when it is a terminal.
A reader that goes away (``carbonlite ... | head -1``) ends nothing: the command does its
work, the rest of its output goes nowhere, and its exit status is its own (:func:`main`).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from carbonlite.cli.describe import (
    describe_blocklets,
    describe_files,
    describe_history,
    describe_partitions,
    describe_properties,
    describe_segments,
    describe_table,
    jsonable,
)
from carbonlite.cli.help_text import FlowedGroup
from carbonlite.cli.layout import Col, human_bytes, human_duration, output_width, print_table
from carbonlite.create import open_table
from carbonlite.errors import CarbonLiteError, InvalidOptionError
from carbonlite.iceberg import read_state
from carbonlite.metadata import LIVE_STATUSES
from carbonlite.table import Table

__all__ = [
    "app",
    "console",
    "emit",
    "err_console",
    "fail_cleanly",
    "human_bytes",
    "open_for_cli",
    "print_properties",
    "say",
]

app = typer.Typer(
    name="carbonlite",
    help="CarbonLite: a streaming columnar table format. Inspect and operate tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=FlowedGroup,
)


def _print_version(value: bool) -> None:
    if value:
        from carbonlite._version import __version__

        print(f"carbonlite {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """CarbonLite: a streaming columnar table format. Inspect and operate tables."""


console = Console(highlight=False)
"""Human output (stdout); :func:`fit_consoles` sizes it when a command starts."""
err_console = Console(stderr=True, highlight=False)
"""Errors and progress bars (stderr)."""

F = TypeVar("F", bound=Callable[..., Any])

JSON_OPTION = typer.Option(False, "--json", help="Print one JSON document instead of tables.")


def fit_consoles() -> None:
    """Size both consoles for where their output goes now: ``COLUMNS`` when set, else the
    terminal's width, else 200 columns for a pipe or a file (``layout.output_width``)."""
    console.width = output_width(sys.stdout)
    err_console.width = output_width(sys.stderr)


def _print_error(kind: str, text: str) -> None:
    """``error: <kind>: <first line>`` on stderr; further lines (one per problem) indented.
    A message that introduces a list of one problem (``...:`` and one line) is one line."""
    lines = text.splitlines() or [kind]
    if len(lines) == 2 and lines[0].rstrip().endswith(":"):
        lines = [f"{lines[0].rstrip()} {lines[1].strip()}"]
    err_console.print(
        f"[bold red]error:[/bold red] {kind}: {escape(lines[0])}", highlight=False, soft_wrap=True
    )
    for line in lines[1:]:
        err_console.print(f"  {escape(line.strip())}", highlight=False, soft_wrap=True)


def fail_cleanly(fn: F) -> F:
    """Size the consoles, then run the command, turning CarbonLite errors, and storage
    failures the storage layer did not name (an ``OSError``: network, permissions, disk),
    into one line on stderr and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        fit_consoles()
        try:
            return fn(*args, **kwargs)
        except CarbonLiteError as exc:
            _print_error(type(exc).__name__, str(exc))
            raise typer.Exit(1) from None
        except OSError as exc:
            where = kwargs.get("path") or kwargs.get("directory")
            detail = " ".join(str(exc).split()) or "no details"
            _print_error(
                type(exc).__name__,
                f"storage failed{f' for {where!r}' if where else ''}: {detail}; check that the "
                "path exists and is reachable, its permissions, and --storage-options",
            )
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def emit(data: Any) -> None:
    """Print ``data`` as JSON on stdout."""
    sys.stdout.write(json.dumps(jsonable(data), indent=2) + "\n")


def say(text: str) -> None:
    """Plain text (never markup) on stdout, wrapped between words to the output's width."""
    console.print(Text(text))


def open_for_cli(path: str, storage_options: str | None) -> Table:
    options = None
    if storage_options:
        try:
            options = json.loads(storage_options)
        except ValueError as exc:
            raise InvalidOptionError(f"--storage-options is not valid JSON: {exc}") from None
        if not isinstance(options, dict):
            raise InvalidOptionError(
                f"--storage-options must be a JSON object, not {storage_options!r}"
            )
    return open_table(path, storage_options=options)


STORAGE_OPTION = typer.Option(
    None,
    "--storage-options",
    help='JSON object for the filesystem, e.g. \'{"endpoint_url": "..."}\'',
)


# --- human tables ------------------------------------------------------------------------------

SEGMENT_COLUMNS = (
    Col("id"),
    Col("status"),
    Col("format", keep=30),
    Col("level", "right", keep=40),
    Col("rows", "right"),
    Col("size", "right"),
    Col("files", "right", keep=45),
    Col("blocklets", "right", keep=44),
    Col("start time", keep=21),
    Col("end time", keep=20),
    Col("merged into", keep=60),
)


def print_segments(rows: list[dict[str, Any]], *, hidden: int = 0) -> None:
    """The segments table; ``hidden``: how many compacted or deleted ones were left out.
    Rows deleted by deletion vectors get a column of their own when there are any."""
    deleted = any(s.get("deleted_rows") for s in rows)
    columns = list(SEGMENT_COLUMNS)
    if deleted:
        columns[5:5] = [Col("deleted", "right", keep=47), Col("dv size", "right", keep=46)]
    partitioned = any(s.get("partition") for s in rows)
    if partitioned:
        columns.insert(1, Col("partition", wrap=True, keep=48))
    body = []
    for s in rows:
        cells = [
            s["id"],
            s["status"],
            s["format"],
            str(s["level"]),
            f"{s['rows']:,}",
            human_bytes(s["bytes"]),
            str(s["files"]),
            str(s["blocklets"]),
            s["start_time"][:19],
            (s["end_time"] or "")[:19],
            s["merged_into"] or "",
        ]
        if deleted:
            cells[5:5] = [f"{s['deleted_rows']:,}", human_bytes(s["deletion_vector_bytes"])]
        if partitioned:
            cells.insert(1, s.get("partition") or "")
        body.append(cells)
    print_table(console, "Segments", tuple(columns), body)
    if hidden:
        say(f"({hidden} compacted or deleted segment(s) not listed; --all lists them)")


def print_schema(info: dict[str, Any]) -> None:
    """The schema of ``describe_table``'s ``info``: each column's id (tables of log format 6),
    name (and role), type,
    whether it takes nulls; its default and its physical name in data files when any column
    has one or one differs from its name; then the columns dropped, if any."""
    schema = info["schema"]
    ids = any(f["id"] is not None for f in schema)  # none: log format 5 or older
    defaults = any(f["has_default"] for f in schema)
    physical = any(f["physical"] != f["name"] for f in schema)
    cols = [Col("column"), Col("type", wrap=True), Col("nullable")]
    if ids:
        cols.insert(0, Col("id", "right"))
    if defaults:
        cols.append(Col("default", wrap=True, keep=70))
    if physical:
        cols.append(Col("physical name", keep=60))
    rows = []
    for f in schema:
        row = [
            f["name"]
            + (" (key)" if f["name"] in info["primary_key"] else "")
            + (" (sort)" if f["name"] in info["sort_columns"] else ""),
            f["type"],
            "yes" if f["nullable"] else "no",
        ]
        if ids:
            row.insert(0, str(f["id"]))
        if defaults:
            row.append(f["default_literal"] or "")
        if physical:
            row.append(f["physical"] if f["physical"] != f["name"] else "")
        rows.append(row)
    print_table(console, "Schema", cols, rows)
    dropped = info["dropped_columns"]
    if dropped:
        print_table(
            console,
            "Dropped columns",
            (Col("id", "right"), Col("column"), Col("physical name"), Col("dropped in", "right")),
            [[str(d["id"]), d["name"], d["physical"], _count(d["version"])] for d in dropped],
        )


def print_properties(properties: dict[str, str]) -> None:
    """Every property in force (``properties``: those set on the table) and where its value
    comes from: set on the table, the default, or the user's own ``user.`` key."""
    print_table(
        console,
        "Properties",
        (Col("property"), Col("value", wrap=True), Col("source", keep=50)),
        [[p["key"], p["value"], p["source"]] for p in describe_properties(properties)],
    )


def _live(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in rows if s["status"] in LIVE_STATUSES]


# --- commands ----------------------------------------------------------------------------------


@app.command()
@fail_cleanly
def inspect(
    path: str = typer.Argument(..., help="Table path or URI (local, memory://, s3://)."),
    version: int | None = typer.Option(
        None, "--version", "-v", help="Inspect this version (time travel)."
    ),
    blocklets: bool = typer.Option(
        False, "--blocklets", help="Also list every blocklet with min/max per column."
    ),
    every: bool = typer.Option(
        False, "--all", help="List compacted and deleted segments too (not yet cleaned)."
    ),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Show a table's schema, properties (defaults too), summary and segments.

    With --blocklets, also every blocklet's rows and min/max per column.
    """
    table = open_for_cli(path, storage_options)
    snapshot = table.snapshot(version)
    info = describe_table(table, snapshot, table.segments(snapshot.version))
    if blocklets:
        info["blocklets"] = describe_blocklets(snapshot)
    iceberg = describe_iceberg(table, snapshot)
    if iceberg is not None:
        info["iceberg"] = iceberg
    if as_json:
        emit(info)
        return
    say(f"Table {info['path']}")
    say(
        f"id {info['table_id']}, version {info['version']} (log format "
        f"{info['format_version']}), created {info['created'][:19]}"
    )
    print_schema(info)
    print_properties(info["properties"])
    s = info["summary"]
    say(
        f"Summary: {s['live_segments']} live of {s['segments']} segments, {s['files']} files, "
        f"{s['blocklets']} blocklets, {s['rows']:,} rows, {human_bytes(s['bytes'])}"
        + (
            f"; {s['deleted_rows']:,} rows deleted by deletion vectors "
            f"({human_bytes(s['deletion_vector_bytes'])})"
            if s["deleted_rows"]
            else ""
        )
    )
    if iceberg is not None:
        say(iceberg_line(iceberg))
    shown = info["segments"] if every else _live(info["segments"])
    print_segments(shown, hidden=len(info["segments"]) - len(shown))
    if blocklets:
        _print_blocklets(info)


def describe_iceberg(table: Table, snapshot: Any) -> dict[str, Any] | None:
    """The Iceberg state of a table publishing it (or that did): its property, the last
    metadata written, the version it shows and how far the table moved on since; None for a
    table that never published Iceberg metadata."""
    found = read_state(table.storage, table.root)
    setting = snapshot.properties.get("iceberg", "off")
    if found is None and setting == "off":
        return None
    state = None if found is None else found[0]
    return {
        "iceberg": setting,
        "metadata": None if state is None else table.storage.uri(state.path),
        "exported_version": None if state is None else state.carbonlite_version,
        "table_version": snapshot.version,
        "versions_behind": None if state is None else snapshot.version - state.carbonlite_version,
        "snapshots": None if state is None else state.snapshots,
    }


def iceberg_line(state: dict[str, Any]) -> str:
    """One line of :func:`describe_iceberg`'s state."""
    if state["metadata"] is None:
        return (
            f"Iceberg: {state['iceberg']}; no Iceberg metadata written yet (run `carbonlite "
            "iceberg sync`)"
        )
    return (
        f"Iceberg: {state['iceberg']}; {state['metadata']} shows version "
        f"{state['exported_version']} of {state['table_version']} ({state['versions_behind']} "
        f"version(s) since), {state['snapshots']} Iceberg snapshot(s) kept"
    )


def _print_blocklets(info: dict[str, Any]) -> None:
    names = [f["name"] for f in info["schema"]]
    cols = [
        Col("segment"),
        Col("file", keep=45),
        Col("#", "right"),
        Col("offset", "right", keep=50),
        Col("rows", "right"),
    ]
    deleted = any(b["deleted"] for b in info["blocklets"])
    if deleted:
        cols.append(Col("deleted", "right", keep=48))
    # the sort columns' bounds stay longest (what pruning mostly uses), then the first columns
    for n, c in enumerate(names):
        keep = (40 if c in info["sort_columns"] else 30) - min(n, 9)
        cols.append(Col(f"{c} min..max", keep=keep, squeeze=24))
    rows = []
    for b in info["blocklets"]:
        bounds = []
        for c in names:
            st = b["columns"].get(c)
            bounds.append("" if st is None else f"{st['min']} .. {st['max']}")
        rows.append(
            [
                b["segment"],
                b["file"].rsplit("/", 1)[-1],
                str(b["blocklet"]),
                str(b["offset"]),
                f"{b['rows']:,}",
                *([f"{b['deleted']:,}"] if deleted else []),
                *bounds,
            ]
        )
    print_table(console, "Blocklets", cols, rows)


PARTITION_COLUMNS = (
    Col("partition", wrap=True),
    Col("rows", "right"),
    Col("size", "right"),
    Col("files", "right", keep=45),
    Col("segments", "right", keep=44),
    Col("last modified", "right", keep=50),
    Col("content hash", keep=40),
)


@app.command()
@fail_cleanly
def partitions(
    path: str = typer.Argument(..., help="Table path or URI."),
    version: int | None = typer.Option(
        None, "--version", "-v", help="Partitions as of this version."
    ),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """List a partitioned table's partitions: rows, size, files, the newest version that
    wrote to each and its content hash (known for published partitions)."""
    table = open_for_cli(path, storage_options)
    if not table.partition_by:
        raise InvalidOptionError(
            f"{table.path!r} is not partitioned (create it with partition_by to have partitions)"
        )
    rows = describe_partitions(table.partitions(version))
    if as_json:
        emit(rows)
        return
    body = [
        [
            p["partition"],
            f"{p['rows']:,}",
            human_bytes(p["bytes"]),
            str(p["files"]),
            str(p["segments"]),
            str(p["last_modified_version"]),
            (p["content_hash"] or "-")[:16],
        ]
        for p in rows
    ]
    print_table(console, "Partitions", PARTITION_COLUMNS, body)
    say(f"{len(rows):,} partition(s) by {', '.join(table.partition_by)}")


@app.command()
@fail_cleanly
def segments(
    path: str = typer.Argument(..., help="Table path or URI."),
    version: int | None = typer.Option(
        None, "--version", "-v", help="Segments as of this version."
    ),
    every: bool = typer.Option(
        False, "--all", help="Also compacted and deleted segments (not yet cleaned)."
    ),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """List segments, like CarbonData's SHOW SEGMENTS: the live ones, or with --all every
    segment the log still lists."""
    table = open_for_cli(path, storage_options)
    rows = describe_segments(table.segments(version))
    shown = rows if every else _live(rows)
    if as_json:
        emit(shown)
    else:
        print_segments(shown, hidden=len(rows) - len(shown))


@app.command()
@fail_cleanly
def files(
    path: str = typer.Argument(..., help="Table path or URI."),
    version: int | None = typer.Option(None, "--version", "-v", help="Files as of this version."),
    every: bool = typer.Option(
        False, "--all", help="Also the files of compacted and deleted segments (not yet cleaned)."
    ),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """List data files: segment, file, committed size, rows and blocklets."""
    table = open_for_cli(path, storage_options)
    snapshot = table.snapshot(version)
    rows = describe_files(snapshot, every=every)
    if as_json:
        emit(rows)
        return
    say(
        f"{len(rows)} file(s) at version {snapshot.version}: "
        f"{human_bytes(sum(f['bytes'] for f in rows))}, {sum(f['rows'] for f in rows):,} rows, "
        f"{sum(f['blocklets'] for f in rows):,} blocklets; each file is in segments/<segment>/"
    )
    cols = [Col("segment"), Col("file"), Col("size", "right"), Col("rows", "right")]
    cols.append(Col("blocklets", "right", keep=90))
    if every:
        cols.append(Col("status", keep=80))
    print_table(
        console,
        "Files",
        cols,
        [
            [
                f["segment"],
                f["file"].rsplit("/", 1)[-1],
                human_bytes(f["bytes"]),
                f"{f['rows']:,}",
                f"{f['blocklets']:,}",
                *([f["status"]] if every else []),
            ]
            for f in rows
        ],
    )


HISTORY_COLUMNS = (
    Col("version", "right"),
    Col("time", wrap=True),
    Col("operation", squeeze=32),
    Col("rows +", "right", keep=90),
    Col("rows -", "right", keep=80),
    Col("duration", "right", keep=75),
    Col("writer", keep=70),
    Col("bytes +", "right", keep=60),
    Col("bytes -", "right", keep=55),
    Col("files +", "right", keep=50),
    Col("files -", "right", keep=45),
    Col("data change", keep=30, wrap=True),
    Col("parameters", keep=20, squeeze=30),
)


def _names(text: str) -> str:
    return ", ".join(n for n in text.split(",") if n)


SCHEMA_CHANGES: dict[str, Callable[[dict[str, str]], str]] = {
    "RENAME COLUMN": lambda p: f"{p.get('column')} -> {p.get('new_name')}",
    "DROP COLUMNS": lambda p: _names(p.get("columns", "")),
    "WIDEN COLUMN": lambda p: f"{p.get('column')}: {p.get('from')} -> {p.get('to')}",
    "ADD COLUMNS": lambda p: (
        _names(p.get("columns", ""))
        + (f" (defaults for {_names(p['defaults'])})" if p.get("defaults") else "")
    ),
}
"""What each schema change did, from its commit's parameters, for its line of ``history``."""


def _operation(r: dict[str, Any]) -> str:
    """The operation of a commit; a schema change with what it changed (``RENAME COLUMN a ->
    b``), as the parameters column may be left out to fit."""
    change = SCHEMA_CHANGES.get(r["operation"])
    return r["operation"] if change is None else f"{r['operation']} {change(r['parameters'])}"


def _count(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


@app.command()
@fail_cleanly
def history(
    path: str = typer.Argument(..., help="Table path or URI."),
    limit: int | None = typer.Option(None, "--limit", "-n", help="Show at most this many commits."),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """The table's commits, newest first: what each changed, how long it took, who wrote it."""
    table = open_for_cli(path, storage_options)
    rows = describe_history(table.history(limit))
    if as_json:
        emit(rows)
        return
    print_table(
        console,
        "History",
        HISTORY_COLUMNS,
        [
            [
                str(r["version"]),
                r["timestamp"][:19].replace("T", " "),
                _operation(r),
                f"{r['rows_added']:,}",
                f"{r['rows_removed']:,}",
                human_duration(r["duration_ms"]),
                r["writer_id"] or "",
                human_bytes(r["bytes_added"]),
                human_bytes(r["bytes_removed"]),
                _count(r["files_added"]),
                _count(r["files_removed"]),
                "yes" if r["data_change"] else "no",
                ""
                if r["operation"] in SCHEMA_CHANGES  # the operation's cell says it all
                else ", ".join(
                    f"{k}={v}"
                    for k, v in r["parameters"].items()
                    if not (k == "writer_id" and v == r["writer_id"])  # it is the writer column
                ),
            ]
            for r in rows
        ],
    )


class _ReaderMayLeave:
    """A text stream (stdout, stderr) whose reader may close the pipe before the command ends
    (``| head -1``). Once it has, what is written goes to ``os.devnull`` (the descriptor
    itself, so the interpreter's last flush finds it too) and the command carries on."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            self._to_nowhere()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_nowhere()

    def _to_nowhere(self) -> None:
        nowhere = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(nowhere, self._stream.fileno())
        finally:
            os.close(nowhere)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main() -> None:
    """Entry point of the console script (``carbonlite/cli/__init__.py`` registers every
    command with ``app``). A closed stdout or stderr is no error of the command's: every
    command writes through :class:`_ReaderMayLeave`."""
    sys.stdout = _ReaderMayLeave(sys.stdout)
    sys.stderr = _ReaderMayLeave(sys.stderr)
    app()
