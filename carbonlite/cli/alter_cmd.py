"""``carbonlite alter PATH ACTION ARGS...``: change a table's columns (schema evolution).

The command only translates: its words into one call of ``Table.rename_column``,
``drop_columns``, ``widen_column`` or ``add_columns`` (types and column definitions through
``carbonlite/ddl.py``). The table checks the change against its latest version (an unknown
column, a narrowing, a sort, partition or key column dropped) and commits nothing when it is
refused. What a change did is read back from the commit it made (its commitInfo parameters).
"""

from __future__ import annotations

import enum
from collections.abc import Callable

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
from carbonlite.cli.create_cmd import one_line
from carbonlite.cli.describe import default_literal
from carbonlite.ddl import ColumnDefinition, parse_columns, parse_type
from carbonlite.errors import InvalidOptionError
from carbonlite.records import CommitRecord
from carbonlite.table import Table
from carbonlite.writer.append import CommitResult

__all__ = ["Action", "alter"]


class Action(str, enum.Enum):
    """The actions of ``carbonlite alter`` (a public contract: the names stay)."""

    RENAME_COLUMN = "rename-column"
    DROP_COLUMNS = "drop-columns"
    WIDEN_COLUMN = "widen-column"
    ADD_COLUMN = "add-column"


USAGE = {
    Action.RENAME_COLUMN: "rename-column OLD NEW",
    Action.DROP_COLUMNS: "drop-columns A[,B...]",
    Action.WIDEN_COLUMN: "widen-column COLUMN TYPE",
    Action.ADD_COLUMN: 'add-column "c int default 0[, ...]"',
}

ALTER_HELP = """Change a table's columns: rename, drop, widen or add them, in one commit that
rewrites no data.

\b
rename-column OLD NEW    rename a column (sort, partition, key columns too)
drop-columns A,B         drop columns (not sort, partition or key columns)
widen-column COL TYPE    widen a column's type (int to bigint: see below)
add-column "DEFINITION"  add nullable columns: "c int default 0, s string"

Types and columns are written in Spark DDL, as for carbonlite create. A type widens from tinyint to smallint to int to bigint, from float to double, from decimal(p, s) to more digits at the same scale, and from date to timestamp.

A default is a literal of the column's type: a number, 'text', true, false, DATE '2024-01-01' or TIMESTAMP '2024-01-01 00:00:00' (UTC unless it has an offset). Rows written before the column existed read it, and writers fill it in for rows without the column.

Each change is checked against the table's latest version; a refused one commits nothing. Earlier versions keep their schema (time travel)."""


def _action(word: str) -> Action:
    try:
        return Action(word)
    except ValueError:
        raise InvalidOptionError(
            f"unknown action {word!r}; the actions are "
            f"{', '.join(a.value for a in Action)} (carbonlite alter --help)"
        ) from None


def _arity(action: Action, args: list[str]) -> None:
    """An error (one line, status 1) unless ``args`` are as many as ``action`` takes."""
    wanted = {Action.RENAME_COLUMN: 2, Action.WIDEN_COLUMN: 2, Action.ADD_COLUMN: 1}.get(action)
    if wanted is None:  # drop-columns: one list or more
        ok, said = bool(args), "one or more column names"
    else:
        ok, said = len(args) == wanted, f"{wanted} argument{'s' if wanted > 1 else ''}"
    if not ok:
        hint = " (quote the definition)" if action is Action.ADD_COLUMN and args else ""
        raise InvalidOptionError(
            f"{action.value} takes {said}, got {len(args)}{hint}: {USAGE[action]}"
        )


def _column_names(args: list[str]) -> list[str]:
    names = [n.strip() for arg in args for n in arg.split(",")]
    if not all(names):
        raise InvalidOptionError(
            f"drop-columns {' '.join(args)!r} has an empty column name; give A,B"
        )
    return names


def _added(definitions: list[ColumnDefinition]) -> str:
    return ", ".join(
        f"{d.field.name} ({d.field.type}"
        + (f", default {default_literal(d.default)}" if d.has_default else "")
        + ")"
        for d in definitions
    )


def _record(table: Table, version: int) -> CommitRecord | None:
    """The commit ``version`` made (newer ones may have landed since)."""
    newest = table.history(1)
    if not newest:
        return None
    back = newest[0].version - version + 1
    records = newest if back <= 1 else table.history(back)
    return next((r for r in records if r.version == version), None)


def _report(
    table: Table, result: CommitResult, as_json: bool, done: Callable[[dict[str, str]], str]
) -> None:
    """The commit: its version, operation and parameters (``--json``), or one line saying
    what it did (``done``, from its parameters) and in which version."""
    assert result.version is not None  # a schema change always commits
    record = _record(table, result.version)
    parameters = dict(record.parameters) if record is not None else {}
    if as_json:
        emit({"version": result.version, "operation": result.operation, "parameters": parameters})
    else:
        say(f"{done(parameters)} in version {result.version}")


ACTION_ARGUMENT = typer.Argument(
    ...,
    metavar="ACTION",
    help="rename-column, drop-columns, widen-column or add-column (the list above).",
)
ARGS_ARGUMENT = typer.Argument(
    None, metavar="ARGS...", help="The action's arguments (the list above)."
)


@app.command("alter", help=ALTER_HELP)
@fail_cleanly
@one_line
def alter(
    path: str = typer.Argument(..., help="Table path or URI."),
    word: str = ACTION_ARGUMENT,
    args: list[str] | None = ARGS_ARGUMENT,
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    words = list(args or [])
    action = _action(word)
    _arity(action, words)
    if action is Action.RENAME_COLUMN:
        old, new = words
        table = open_for_cli(path, storage_options)
        result = table.rename_column(old, new)
        _report(table, result, as_json, lambda _: f"renamed column {old} to {new}")
    elif action is Action.DROP_COLUMNS:
        names = _column_names(words)
        table = open_for_cli(path, storage_options)
        result = table.drop_columns(names)
        plural = "s" if len(names) > 1 else ""
        _report(table, result, as_json, lambda _: f"dropped column{plural} {', '.join(names)}")
    elif action is Action.WIDEN_COLUMN:
        name, type_text = words
        new_type = parse_type(type_text, column=name)
        table = open_for_cli(path, storage_options)
        result = table.widen_column(name, new_type)
        _report(
            table,
            result,
            as_json,
            lambda p: f"widened column {name} from {p.get('from', '?')} to {new_type}",
        )
    else:
        definitions = parse_columns(words[0])
        table = open_for_cli(path, storage_options)
        result = table.add_columns(
            [d.field for d in definitions],
            defaults={d.field.name: d.default for d in definitions if d.has_default},
        )
        plural = "s" if len(definitions) > 1 else ""
        _report(table, result, as_json, lambda _: f"added column{plural} {_added(definitions)}")
