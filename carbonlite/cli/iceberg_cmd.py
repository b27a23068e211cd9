"""``carbonlite iceberg``: the Iceberg view of a table (docs/ICEBERG.md).

``iceberg sync`` translates into ``Table.sync_iceberg``; ``iceberg show`` reports the last
Iceberg metadata written and how far it lags behind the table.
"""

from __future__ import annotations

import typer

from carbonlite.cli.app import (
    JSON_OPTION,
    STORAGE_OPTION,
    app,
    describe_iceberg,
    emit,
    fail_cleanly,
    iceberg_line,
    open_for_cli,
    say,
)

__all__ = ["iceberg_app"]

iceberg_app = typer.Typer(
    help="The Iceberg metadata a table publishes for other engines (docs/ICEBERG.md).",
    no_args_is_help=True,
)
app.add_typer(iceberg_app, name="iceberg")

PATH_ARGUMENT = typer.Argument(..., help="Table path or URI.")


@iceberg_app.command("sync")
@fail_cleanly
def sync(
    path: str = PATH_ARGUMENT,
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Write the Iceberg metadata of the table's latest version now (after a crash between a
    commit and its Iceberg metadata, or a failure the commit logged)."""
    table = open_for_cli(path, storage_options)
    state = table.sync_iceberg()
    if as_json:
        emit(None if state is None else state.__dict__)
    elif state is None:
        say(f"the Iceberg metadata is up to date with version {table.version}")
    else:
        say(
            f"wrote {state.path.rsplit('/', 1)[-1]}: the Iceberg view of version "
            f"{state.carbonlite_version} ({state.snapshots} snapshot(s) kept)"
        )


@iceberg_app.command("show")
@fail_cleanly
def show(
    path: str = PATH_ARGUMENT,
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """The last Iceberg metadata written: its file, the table version it shows, and how many
    versions the table has moved on since (commits that leave the columnar files alone, such
    as streaming appends, write none)."""
    table = open_for_cli(path, storage_options)
    state = describe_iceberg(table, table.snapshot())
    if as_json:
        emit(state)
    elif state is None:
        say("Iceberg: off (set the property iceberg=v2 to publish Iceberg metadata)")
    else:
        say(iceberg_line(state))
