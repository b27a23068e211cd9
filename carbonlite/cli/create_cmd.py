"""``carbonlite create``: make an empty table from a Spark DDL schema (``carbonlite/ddl.py``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import typer

from carbonlite.cli.app import JSON_OPTION, STORAGE_OPTION, app, console, emit, fail_cleanly, say
from carbonlite.cli.describe import describe_table
from carbonlite.cli.layout import Col, print_table
from carbonlite.cli.values import key_values, storage_options_of
from carbonlite.create import create_table
from carbonlite.ddl import parse_schema
from carbonlite.errors import CarbonLiteError, InvalidOptionError

F = TypeVar("F", bound=Callable[..., Any])


def split_list(values: Sequence[str]) -> list[str]:
    """Repeated options, each possibly a comma-separated list, as one list; commas inside
    parentheses stay (``bucket(16, id)``)."""
    out: list[str] = []
    for value in values:
        depth, start = 0, 0
        for i, char in enumerate(value):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if char == "," and depth == 0:
                out.append(value[start:i].strip())
                start = i + 1
        out.append(value[start:].strip())
    return out


def _names(values: Sequence[str], option: str) -> list[str]:
    names = split_list(values)
    if any(not n for n in names):
        raise InvalidOptionError(f"{option} {', '.join(values)!r} has an empty name")
    return names


def one_line(fn: F) -> F:
    """Errors that list their problems on several lines, as one line: ``create`` reports one
    line whatever the check that failed."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CarbonLiteError as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            if len(lines) <= 1:
                raise
            raise type(exc)(lines[0].rstrip(":") + ": " + "; ".join(lines[1:])) from None

    return wrapper  # type: ignore[return-value]


_PARTITION_BY = typer.Option(
    None, "--partition-by", help="Partition fields: col, day(ts), bucket(16, id) (repeatable)."
)
_PRIMARY_KEY = typer.Option(
    None, "--primary-key", help="Key columns: appends upsert by them (repeatable)."
)
_SORT_BY = typer.Option(None, "--sort-by", help="Sort columns within each blocklet (repeatable).")
_PROPERTIES = typer.Option(None, "--property", help="A table property KEY=VALUE (repeatable).")


@app.command("create")
@fail_cleanly
@one_line
def create(
    path: str = typer.Argument(..., help="Where the table goes (a new path or an empty one)."),
    schema: str = typer.Option(
        ...,
        "--schema",
        help='Columns as Spark DDL: "id bigint, ts timestamp, tags array<string>".',
    ),
    partition_by: list[str] | None = _PARTITION_BY,
    primary_key: list[str] | None = _PRIMARY_KEY,
    sort_by: list[str] | None = _SORT_BY,
    properties: list[str] | None = _PROPERTIES,
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Create an empty table: its columns from Spark DDL, with optional partitioning, primary
    key, sort columns and properties. The ingesters (carbonlite ingest files, carbonlite ingest
    kafka) and the Flight service (carbonlite serve) write only into a table that exists."""
    table = create_table(
        path,
        parse_schema(schema),
        partition_by=split_list(partition_by or []),
        primary_key=_names(primary_key or [], "--primary-key"),
        sort_columns=_names(sort_by or [], "--sort-by"),
        properties=key_values(properties or [], "--property"),
        storage_options=storage_options_of(storage_options),
    )
    info = describe_table(table, table.snapshot(), [])
    info["partition_by"] = list(table.partition_by)
    if as_json:
        emit(info)
        return
    say(f"Created table {info['path']} (version {info['version']}, id {info['table_id']})")
    print_table(
        console,
        "Schema",
        (Col("column"), Col("type", wrap=True), Col("nullable")),
        [[f["name"], f["type"], "yes" if f["nullable"] else "no"] for f in info["schema"]],
    )
    layout = [
        ("partitioned by", info["partition_by"]),
        ("primary key", info["primary_key"]),
        ("sorted by", info["sort_columns"]),
        ("properties", [f"{k}={v}" for k, v in info["properties"].items()]),
    ]
    for label, items in layout:
        if items:
            say(f"{label}: {', '.join(items)}")
