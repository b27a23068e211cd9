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
    emit,
    fail_cleanly,
    open_for_cli,
    say,
)
from carbonlite.iceberg import iceberg_format, read_state

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
    snapshot = table.snapshot()
    found = read_state(table.storage, table.root)
    out = {
        "iceberg": snapshot.properties.get("iceberg", "off"),
        "metadata": None if found is None else table.storage.uri(found[0].path),
        "exported_version": None if found is None else found[0].carbonlite_version,
        "table_version": snapshot.version,
        "versions_behind": None
        if found is None
        else snapshot.version - found[0].carbonlite_version,
        "snapshots": None if found is None else found[0].snapshots,
    }
    if as_json:
        emit(out)
    elif iceberg_format(snapshot.properties) is None and found is None:
        say("iceberg: off (set the property iceberg=v2 to publish Iceberg metadata)")
    elif found is None:
        say(
            f"iceberg: {out['iceberg']}; no Iceberg metadata written yet (run `carbonlite iceberg sync`)"
        )
    else:
        say(
            f"iceberg: {out['iceberg']}; {out['metadata']} shows version "
            f"{out['exported_version']} of {out['table_version']} ({out['versions_behind']} "
            f"version(s) since), {out['snapshots']} Iceberg snapshot(s) kept"
        )
