"""``carbonlite index``: bloom filters of a table's blocklets (docs/FILTERS.md).

``index build`` translates its words into ``Table.build_index``; ``index show`` reports, from
the log alone, which columns the table indexes and how many live blocklets have filters.
"""

from __future__ import annotations

import dataclasses

import typer

from carbonlite.cli.app import (
    JSON_OPTION,
    STORAGE_OPTION,
    app,
    emit,
    fail_cleanly,
    human_bytes,
    open_for_cli,
    say,
)
from carbonlite.properties import TableProperties

__all__ = ["index_app"]

index_app = typer.Typer(
    help="Bloom filters of blocklets, for == and is_in lookups (docs/FILTERS.md).",
    no_args_is_help=True,
)
app.add_typer(index_app, name="index")

PATH_ARGUMENT = typer.Argument(..., help="Table path or URI.")
COLUMNS_ARGUMENT = typer.Argument(
    None,
    metavar="[COLUMN]...",
    help="Columns to index, added to bloom_filter_columns (none: those it lists).",
)


@index_app.command("build")
@fail_cleanly
def build(
    path: str = PATH_ARGUMENT,
    columns: list[str] | None = COLUMNS_ARGUMENT,
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Give every live blocklet bloom filters of COLUMNs and of the table's
    bloom_filter_columns, in one commit (ingestion continues)."""
    table = open_for_cli(path, storage_options)
    result = table.build_index(columns or None)
    if as_json:
        emit(dataclasses.asdict(result))
    elif result.version is None:
        say(f"every live blocklet has filters of {', '.join(result.columns)}; nothing to do")
    else:
        say(
            f"indexed {', '.join(result.columns)}: {result.blocklets:,} blocklet(s) of "
            f"{result.files:,} file(s) given filters ({human_bytes(result.bytes_written)} "
            f"written, {result.rows_read:,} rows read) in version {result.version}"
        )


@index_app.command("show")
@fail_cleanly
def show(
    path: str = PATH_ARGUMENT,
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """The columns the table indexes, and how many live blocklets have filters."""
    table = open_for_cli(path, storage_options)
    snap = table.snapshot()
    props = TableProperties(snap.properties)
    total = with_filters = nbytes = 0
    for _, f in snap.iter_files():
        total += f.num_blocklets
        with_filters += len(f.blooms)
        nbytes += sum(f.bloom_files.values())
    out = {
        "columns": list(props.bloom_filter_columns),
        "fpp": props.bloom_filter_fpp,
        "blocklets": total,
        "blocklets_with_filters": with_filters,
        "bloom_bytes": nbytes,
    }
    if as_json:
        emit(out)
        return
    listed = ", ".join(props.bloom_filter_columns) or "(none)"
    say(
        f"bloom_filter_columns: {listed} (fpp {props.bloom_filter_fpp:g}); "
        f"{with_filters:,} of {total:,} live blocklet(s) have filters "
        f"({human_bytes(nbytes)} of bloom files)"
    )
