"""``carbonlite properties show|set|unset``: the table's properties API on the command line
(docs/PROPERTIES.md named the command before it existed, issue 25)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import carbonlite as cl
from carbonlite.cli.properties_cmd import parse_assignments
from carbonlite.errors import InvalidOptionError
from carbonlite.properties import PROPERTIES
from tests.cli.conftest import Run
from tests.cli.test_errors import assert_one_line_error


def state(path: Path) -> tuple[int, dict[str, str]]:
    t = cl.open_table(path)
    return t.version, t.properties


def test_show_lists_every_property_in_force(cli: Callable[..., Run], table: Path) -> None:
    cl.open_table(table).set_properties({"user.team": "data"})
    run = cli("properties", "show", table)
    assert run.exit_code == 0, run.stderr
    rows = {line.split()[0]: line.split()[1:] for line in run.stdout.splitlines()[3:]}
    assert rows["blocklet_max_rows"] == ["25", "set"]
    assert rows["checkpoint_interval"] == [PROPERTIES["checkpoint_interval"].default, "default"]
    assert rows["user.team"] == ["data", "user"]
    assert set(rows) == {*PROPERTIES, "user.team"}
    document = cli("properties", "show", table, "--json").json()
    t = cl.open_table(table)
    assert document == {
        "path": t.path,
        "version": t.version,
        "properties": t.properties,
        "effective_properties": t.effective_properties,
    }


def test_set_commits_every_property_at_once(cli: Callable[..., Run], table: Path) -> None:
    version, _ = state(table)
    run = cli("properties", "set", table, "checkpoint_interval=50", "user.note=a=b")
    assert run.exit_code == 0, run.stderr
    assert run.stdout.split() == (
        f"set checkpoint_interval=50, user.note=a=b on {table} in version {version + 1}".split()
    )
    t = cl.open_table(table)
    assert t.version == version + 1
    assert t.properties["checkpoint_interval"] == "50" and t.properties["user.note"] == "a=b"
    assert t.history(1)[0].operation == "SET PROPERTIES"
    again = cli("properties", "set", table, "checkpoint_interval=50", "--json")
    assert again.json() == {"version": None, "properties": t.properties}
    assert "nothing to do" in cli("properties", "set", table, "checkpoint_interval=50").stdout
    assert state(table) == (t.version, t.properties)


def test_unset_brings_the_default_back(cli: Callable[..., Run], table: Path) -> None:
    cli("properties", "set", table, "checkpoint_interval=50", "user.team=data")
    version, _ = state(table)
    run = cli("properties", "unset", table, "checkpoint_interval", "user.team", "--json")
    assert run.exit_code == 0, run.stderr
    t = cl.open_table(table)
    assert run.json() == {"version": version + 1, "properties": t.properties}
    assert "checkpoint_interval" not in t.properties and "user.team" not in t.properties
    default = PROPERTIES["checkpoint_interval"].default
    assert t.effective_properties["checkpoint_interval"] == default
    assert t.history(1)[0].operation == "UNSET PROPERTIES"
    missing_ok = cli("properties", "unset", table, "checkpoint_interval", "--missing-ok")
    assert missing_ok.exit_code == 0 and "nothing to do" in missing_ok.stdout
    assert state(table) == (t.version, t.properties)


@pytest.mark.parametrize(
    ("words", "needles"),
    [
        (["set", "checkpoint_interval"], ["'checkpoint_interval' is not KEY=VALUE"]),
        (["set", ""], ["'' is not KEY=VALUE"]),
        (["set", "colour=blue"], ["'colour' is not a table property", "user."]),
        (["set", "checkpoint_interval=abc"], ["checkpoint_interval='abc'", "whole number"]),
        (["set", "checkpoint_interval=1.5"], ["checkpoint_interval='1.5'", "whole number"]),
        (["set", "checkpoint_interval=-1"], ["checkpoint_interval='-1'", "at least 1"]),
        (["set", "compaction_preserve_segments=-1"], ["0 or more"]),
        (["set", "compaction_level_threshold=a,b"], ["counts of at least 2"]),
        (["set", "compression_level=99"], ["0 (no compression) to 22"]),
        (["set", "auto_compaction=maybe"], ["must be true or false"]),
        (["set", "major_compaction_size=lots"], ["not a size"]),
        (["set", "log_retention=soon"], ["not a duration"]),
        (["set", "stream_codec=gzip"], ["must be one of"]),
        (["set", "=5"], ["'' is not a table property"]),
        (["set", "user.=5"], ["'user.' needs a name"]),
        (["set", "checkpoint_interval=5", "checkpoint_interval=6"], ["given twice"]),
        (["set", "user.team=data", "checkpoint_intervall=5"], ["did you mean"]),
        (["unset", "checkpoint_interval"], ["not set on", "--missing-ok"]),
        (["unset", "colour"], ["not table properties"]),
        (["unset", "colour", "--missing-ok"], ["not table properties"]),
    ],
)
def test_a_bad_property_is_one_line_and_commits_nothing(
    cli: Callable[..., Run], table: Path, words: list[str], needles: list[str]
) -> None:
    before = state(table)
    run = cli("properties", words[0], table, *words[1:])
    assert run.exit_code == 1
    assert_one_line_error(run, "InvalidOptionError", *needles)
    assert state(table) == before


@pytest.mark.parametrize("words", [["set"], ["unset"], ["show", "--bogus"], ["nope"]])
def test_usage_errors_exit_2(cli: Callable[..., Run], table: Path, words: list[str]) -> None:
    before = state(table)
    run = cli("properties", words[0], table, *words[1:])
    assert run.exit_code == 2 and "Traceback" not in run.stderr
    assert state(table) == before


def test_assignments_keep_everything_after_the_first_equals_sign() -> None:
    assert parse_assignments(["a=1", "user.x=", "user.y=p=q"]) == {
        "a": "1",
        "user.x": "",
        "user.y": "p=q",
    }
    with pytest.raises(InvalidOptionError, match="not KEY=VALUE"):
        parse_assignments(["a"])
