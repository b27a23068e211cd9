"""``carbonlite index``: bloom filters and secondary indexes of a table (docs/FILTERS.md).

``index build`` translates its words into ``Table.build_index``; ``index show`` reports, from
the log alone, which columns the table indexes and how much of it the indexes cover.
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
from carbonlite.errors import InvalidOptionError
from carbonlite.properties import TableProperties

__all__ = ["index_app"]

index_app = typer.Typer(
    help="Bloom filters and secondary indexes, for == and is_in lookups (docs/FILTERS.md).",
    no_args_is_help=True,
)
app.add_typer(index_app, name="index")

PATH_ARGUMENT = typer.Argument(..., help="Table path or URI.")
COLUMNS_ARGUMENT = typer.Argument(
    None,
    metavar="[COLUMN]...",
    help="Columns to index, added to bloom_filter_columns or secondary_index_columns "
    "(none: those it lists).",
)
KIND_OPTION = typer.Option(
    "bloom", "--kind", help="bloom (filters of every blocklet) | secondary (of columnar files)"
)


@index_app.command("build")
@fail_cleanly
def build(
    path: str = PATH_ARGUMENT,
    columns: list[str] | None = COLUMNS_ARGUMENT,
    kind: str = KIND_OPTION,
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Give every live blocklet bloom filters of COLUMNs and of the table's
    bloom_filter_columns (--kind secondary: every columnar file secondary indexes of them and
    of secondary_index_columns), in one commit (ingestion continues)."""
    if kind not in ("bloom", "secondary"):
        raise InvalidOptionError(f"--kind must be bloom or secondary, not {kind!r}")
    table = open_for_cli(path, storage_options)
    result = table.build_index(columns or None, kind=kind)  # type: ignore[arg-type]
    what = "filters" if kind == "bloom" else "secondary indexes"
    if as_json:
        emit(dataclasses.asdict(result))
    elif result.version is None:
        holder = "blocklet has filters" if kind == "bloom" else "columnar file has indexes"
        say(f"every live {holder} of {', '.join(result.columns)}; nothing to do")
    else:
        say(
            f"indexed {', '.join(result.columns)} ({kind}): {result.blocklets:,} blocklet(s) "
            f"given {what} in {result.files:,} file(s) ({human_bytes(result.bytes_written)} "
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
    total = with_filters = nbytes = indexed = index_bytes = 0
    for _, f in snap.iter_files():
        total += f.num_blocklets
        with_filters += len(f.blooms)
        nbytes += sum(f.bloom_files.values())
        indexed += f.num_blocklets if f.indexes else 0
        index_bytes += sum(f.index_files.values())
    out = {
        "columns": list(props.bloom_filter_columns),
        "fpp": props.bloom_filter_fpp,
        "blocklets": total,
        "blocklets_with_filters": with_filters,
        "bloom_bytes": nbytes,
        "secondary_index_columns": list(props.secondary_index_columns),
        "blocklets_with_secondary_index": indexed,
        "secondary_index_bytes": index_bytes,
    }
    if as_json:
        emit(out)
        return
    listed = ", ".join(props.bloom_filter_columns) or "(none)"
    secondary = ", ".join(props.secondary_index_columns) or "(none)"
    say(
        f"bloom_filter_columns: {listed} (fpp {props.bloom_filter_fpp:g}); "
        f"{with_filters:,} of {total:,} live blocklet(s) have filters "
        f"({human_bytes(nbytes)} of bloom files)"
    )
    say(
        f"secondary_index_columns: {secondary}; {indexed:,} of {total:,} live blocklet(s) "
        f"lie in files with a secondary index ({human_bytes(index_bytes)} of index files)"
    )
