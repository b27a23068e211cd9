"""The ``carbonlite`` command: look at tables and operate them.

Every command prints a human view (rich tables) or, with ``--json``, one JSON document.
Errors print one line to stderr and exit with status 1 (2 for usage errors, from click).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from carbonlite.cli.describe import (
    describe_blocklets,
    describe_history,
    describe_table,
    jsonable,
)
from carbonlite.errors import CarbonLiteError, InvalidOptionError
from carbonlite.table import Table, open_table

__all__ = ["app", "console", "emit", "fail_cleanly", "human_bytes", "open_for_cli"]

app = typer.Typer(
    name="carbonlite",
    help="CarbonLite: a streaming columnar table format. Inspect and operate tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


def _width() -> int | None:
    """Full tables when output is piped (rich would fold them to 80 columns)."""
    return None if sys.stdout.isatty() else 200


console = Console(width=_width())
err_console = Console(stderr=True, width=_width())

F = TypeVar("F", bound=Callable[..., Any])

JSON_OPTION = typer.Option(False, "--json", help="Print one JSON document instead of tables.")


def _print_error(kind: str, text: str) -> None:
    """``error: <kind>: <first line>`` on stderr; further lines (one per problem) indented."""
    lines = text.splitlines() or [kind]
    err_console.print(
        f"[bold red]error:[/bold red] {kind}: {escape(lines[0])}", highlight=False, soft_wrap=True
    )
    for line in lines[1:]:
        err_console.print(f"  {escape(line.strip())}", highlight=False, soft_wrap=True)


def fail_cleanly(fn: F) -> F:
    """Turn CarbonLite errors, and storage failures the storage layer did not name (an
    ``OSError``: network, permissions, disk), into one line on stderr and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CarbonLiteError as exc:
            _print_error(type(exc).__name__, str(exc))
            raise typer.Exit(1) from None
        except BrokenPipeError:  # the reader of our output went away (``| head``)
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


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


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


def _segments_table(rows: list[dict[str, Any]], title: str = "Segments") -> RichTable:
    t = RichTable(title=title, title_justify="left", highlight=False)
    for name, justify in (
        ("id", "left"),
        ("status", "left"),
        ("format", "left"),
        ("level", "right"),
        ("rows", "right"),
        ("size", "right"),
        ("files", "right"),
        ("blocklets", "right"),
        ("start time", "left"),
        ("end time", "left"),
        ("merged into", "left"),
    ):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for s in rows:
        t.add_row(
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
        )
    return t


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
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Show a table's schema, properties, summary and segments.

    With --blocklets, also every blocklet's rows and min/max per column.
    """
    table = open_for_cli(path, storage_options)
    snapshot = table.snapshot(version)
    info = describe_table(table, snapshot, table.segments(snapshot.version))
    if blocklets:
        info["blocklets"] = describe_blocklets(snapshot)
    if as_json:
        emit(info)
        return
    console.print(
        f"[bold]Table[/bold] {info['path']}  (id {info['table_id']}, version {info['version']}, "
        f"created {info['created'][:19]})"
    )
    schema = RichTable(title="Schema", title_justify="left")
    schema.add_column("column")
    schema.add_column("type")
    schema.add_column("nullable")
    for f in info["schema"]:
        mark = " (sort)" if f["name"] in info["sort_columns"] else ""
        schema.add_row(
            escape(f["name"] + mark), escape(f["type"]), "yes" if f["nullable"] else "no"
        )
    console.print(schema)
    if info["properties"]:
        props = RichTable(title="Properties", title_justify="left")
        props.add_column("key")
        props.add_column("value")
        for k, v in sorted(info["properties"].items()):
            props.add_row(escape(k), escape(v))
        console.print(props)
    s = info["summary"]
    console.print(
        f"[bold]Summary[/bold]: {s['live_segments']} live of {s['segments']} segments, {s['files']} files, "
        f"{s['blocklets']} blocklets, {s['rows']:,} rows, {human_bytes(s['bytes'])}"
    )
    console.print(_segments_table(info["segments"]))
    if blocklets:
        bt = RichTable(title="Blocklets", title_justify="left")
        for name in ("segment", "file", "#", "offset", "rows"):
            bt.add_column(name)
        columns = [f["name"] for f in info["schema"]]
        for c in columns:
            bt.add_column(f"{c} min..max")
        for b in info["blocklets"]:
            cells = []
            for c in columns:
                st = b["columns"].get(c)
                cells.append("" if st is None else escape(f"{st['min']} .. {st['max']}"))
            bt.add_row(
                b["segment"],
                b["file"].rsplit("/", 1)[-1],
                str(b["blocklet"]),
                str(b["offset"]),
                f"{b['rows']:,}",
                *cells,
            )
        console.print(bt)


@app.command()
@fail_cleanly
def segments(
    path: str = typer.Argument(..., help="Table path or URI."),
    version: int | None = typer.Option(
        None, "--version", "-v", help="Segments as of this version."
    ),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """List segments, like CarbonData's SHOW SEGMENTS."""
    table = open_for_cli(path, storage_options)
    from carbonlite.cli.describe import describe_segments

    rows = describe_segments(table.segments(version))
    if as_json:
        emit(rows)
    else:
        console.print(_segments_table(rows))


@app.command()
@fail_cleanly
def history(
    path: str = typer.Argument(..., help="Table path or URI."),
    limit: int | None = typer.Option(None, "--limit", "-n", help="Show at most this many commits."),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """The table's commits, newest first."""
    table = open_for_cli(path, storage_options)
    rows = describe_history(table.history(limit))
    if as_json:
        emit(rows)
        return
    t = RichTable(title="History", title_justify="left")
    for name in (
        "version",
        "timestamp",
        "operation",
        "data change",
        "rows +",
        "rows -",
        "bytes +",
        "parameters",
    ):
        t.add_column(name)
    for r in rows:
        params = escape(", ".join(f"{k}={v}" for k, v in r["parameters"].items()))
        t.add_row(
            str(r["version"]),
            r["timestamp"][:23],
            r["operation"],
            "yes" if r["data_change"] else "no",
            f"{r['rows_added']:,}",
            f"{r['rows_removed']:,}",
            human_bytes(r["bytes_added"]),
            params,
        )
    console.print(t)


def main() -> None:
    """Entry point of the console script."""
    from carbonlite.cli import demo_cmd, maintenance  # noqa: F401 - registers commands

    app()
