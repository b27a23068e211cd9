"""``carbonlite properties``: show, set and unset a table's properties (docs/PROPERTIES.md).

The commands only translate: ``key=value`` words into the mapping ``Table.set_properties``
takes, keys into the list ``Table.unset_properties`` takes. The table checks them (an unknown
key, a value of the wrong kind, a key that is not set) and commits nothing when one is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import typer

from carbonlite.cli.app import (
    JSON_OPTION,
    STORAGE_OPTION,
    app,
    emit,
    fail_cleanly,
    open_for_cli,
    print_properties,
    say,
)
from carbonlite.errors import InvalidOptionError
from carbonlite.table import Table
from carbonlite.writer.append import CommitResult

__all__ = ["parse_assignments", "properties_app"]

properties_app = typer.Typer(
    help="Show, set and unset a table's properties (docs/PROPERTIES.md lists them).",
    no_args_is_help=True,
)
app.add_typer(properties_app, name="properties")

PATH_ARGUMENT = typer.Argument(..., help="Table path or URI.")
ASSIGNMENTS_ARGUMENT = typer.Argument(
    ...,
    metavar="KEY=VALUE",
    help="A property and its value, such as checkpoint_interval=50 or user.team=data.",
)
KEYS_ARGUMENT = typer.Argument(..., metavar="KEY", help="A property set on the table.")


def parse_assignments(words: Sequence[str]) -> dict[str, str]:
    """``["checkpoint_interval=50", "user.team=data"]`` as a mapping: each word is
    ``key=value`` (the value may be empty, or hold ``=``), and names its key once."""
    changes: dict[str, str] = {}
    for word in words:
        key, equals, value = word.partition("=")
        if not equals:
            raise InvalidOptionError(
                f"{word!r} is not KEY=VALUE: give each property as key=value, such as "
                "checkpoint_interval=50 (`carbonlite properties unset` removes one)"
            )
        if key in changes:
            raise InvalidOptionError(
                f"property {key!r} is given twice ({key}={changes[key]!r} and {key}={value!r}); "
                "give each property once"
            )
        changes[key] = value
    return changes


def _state(table: Table) -> dict[str, Any]:
    return {
        "path": table.path,
        "version": table.version,
        "properties": table.properties,
        "effective_properties": table.effective_properties,
    }


def _report(table: Table, result: CommitResult, done: str, unchanged: str, as_json: bool) -> None:
    """What a set or unset did: ``done`` and the version it committed, or ``unchanged``
    when it committed nothing; with ``--json`` the commit's version (null: nothing changed)
    and the properties set on the table now."""
    if as_json:
        emit({"version": result.version, "properties": table.properties})
    elif result.version is None:
        say(f"{unchanged}; nothing to do")
    else:
        say(f"{done} on {table.path} in version {result.version}")


@properties_app.command("show")
@fail_cleanly
def show(
    path: str = PATH_ARGUMENT,
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Show every property in force: the ones set on the table, the others with their
    defaults, then the table's own user. keys."""
    table = open_for_cli(path, storage_options)
    if as_json:
        emit(_state(table))
    else:
        print_properties(table.properties)


@properties_app.command("set")
@fail_cleanly
def set_(
    path: str = PATH_ARGUMENT,
    assignments: list[str] = ASSIGNMENTS_ARGUMENT,
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Set properties, in one commit. Every key and value is checked first: an unknown key or
    a bad value is an error, and then nothing is committed."""
    changes = parse_assignments(assignments)
    table = open_for_cli(path, storage_options)
    result = table.set_properties(changes)
    given = ", ".join(f"{k}={v}" for k, v in changes.items())
    _report(table, result, f"set {given}", f"{table.path} has {given} already", as_json)


@properties_app.command("unset")
@fail_cleanly
def unset(
    path: str = PATH_ARGUMENT,
    keys: list[str] = KEYS_ARGUMENT,
    missing_ok: bool = typer.Option(
        False, "--missing-ok", help="Let keys that are not set pass, instead of failing."
    ),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Remove properties, in one commit, so their defaults apply again. A key that is not set
    is an error (nothing is committed) unless --missing-ok."""
    table = open_for_cli(path, storage_options)
    result = table.unset_properties(keys, missing_ok=missing_ok)
    given = ", ".join(keys)
    _report(table, result, f"unset {given}", f"{table.path} has none of {given} set", as_json)
