"""Checkpoints: written every ``checkpoint_interval`` versions, used when opening, and never
needed for correctness (a missing or damaged pointer falls back)."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.metadata import LOG_FORMAT_VERSION, Snapshot
from carbonlite.metadata.seal import seal, unseal
from carbonlite.metadata.serde import decode_actions
from tests.metadata.strategies import snapshot_state
from tests.support.tables import EVENTS, events, rows

INTERVAL = 5
COMMITS = 12  # versions 1..12: checkpoints at 5 and 10


def log_dir(path: Path) -> Path:
    return path / "_carbonlite" / "log"


def pointer(path: Path) -> Path:
    return path / "_carbonlite" / "_last_checkpoint"


def version_file(path: Path, version: int) -> Path:
    return log_dir(path) / f"{version:020d}.json"


def checkpoint_file(path: Path, version: int) -> Path:
    return log_dir(path) / f"{version:020d}.checkpoint.json"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local table with versions 0..12: appends of 3 rows each, an add_columns at version 6
    and an overwrite at version 8 (so checkpoints hold more than one segment state)."""
    path = tmp_path_factory.mktemp("checkpoints") / "events"
    t = cl.create_table(
        path,
        EVENTS,
        properties={
            "checkpoint_interval": str(INTERVAL),
            "checkpoint_max_entries": "100000",  # by versions only (test_checkpoint_policy.py)
            "blocklet_max_rows": "2",
        },
        writer_id="w",
    )
    for v in range(1, COMMITS + 1):
        if v == 6:
            t.add_columns(pa.field("extra", pa.string()))
        elif v == 8:  # "extra" as nulls from version 6 on
            t.overwrite(events(100 * v, 3), schema_mode="merge")
        else:
            t.append(events(100 * v, 3), txn=("app", v), schema_mode="merge")
    assert t.version == COMMITS
    return path


@pytest.fixture
def table_path(template: Path, tmp_path: Path) -> Path:
    """A private copy of the template table, free to damage."""
    path = tmp_path / "events"
    shutil.copytree(template, path)
    return path


def expected_rows(version: int) -> list[dict]:
    """Rows at ``version`` of the fixture's table, in scan order."""
    parts = []
    for v in range(1, version + 1):
        if v == 6:
            continue
        if v == 8:
            parts = []
        parts.append(events(100 * v, 3))
    schema = EVENTS if version < 6 else pa.schema([*EVENTS, pa.field("extra", pa.string())])
    if not parts:
        return []
    table = pa.concat_tables(parts)
    if version >= 6:
        table = table.append_column("extra", pa.nulls(table.num_rows, pa.string()))
    return rows(table.cast(schema))


def replay_from_zero(path: Path, version: int) -> Snapshot:
    uri = str(path)
    snapshot = Snapshot.from_actions(
        uri, 0, decode_actions(version_file(path, 0).read_bytes(), None, where="v0")
    )
    for v in range(1, version + 1):
        data = version_file(path, v).read_bytes()
        snapshot = snapshot.apply(v, decode_actions(data, snapshot.schema, where=f"v{v}"))
    return snapshot


def test_checkpoints_are_written_every_interval(table_path: Path) -> None:
    names = sorted(p.name for p in log_dir(table_path).iterdir())
    checkpoints = [n for n in names if n.endswith(".checkpoint.json")]
    assert checkpoints == [f"{5:020d}.checkpoint.json", f"{10:020d}.checkpoint.json"]
    assert json.loads(pointer(table_path).read_text()) == {"version": 10, "floor": 0}
    assert [n for n in names if re.fullmatch(r"\d{20}\.json", n)] == [
        f"{v:020d}.json" for v in range(COMMITS + 1)
    ]
    log = cl.open_table(table_path).log
    for version in (5, 10):
        from_checkpoint = log.read_checkpoint(version)
        assert snapshot_state(from_checkpoint) == snapshot_state(
            replay_from_zero(table_path, version)
        )
    assert log.read_checkpoint(10).txns == {"app": 10}


def test_every_version_reads_back(table_path: Path) -> None:
    t = cl.open_table(table_path)
    assert t.version == COMMITS
    for version in range(COMMITS + 1):
        assert rows(t.to_arrow(version=version)) == expected_rows(version), version
        assert t.count_rows(version=version) == len(expected_rows(version))


@pytest.mark.parametrize("deleted_up_to", [4, 9])
def test_opening_starts_from_the_checkpoint(table_path: Path, deleted_up_to: int) -> None:
    """With the early log gone, only the checkpoint can tell what the table holds."""
    for v in range(deleted_up_to + 1):
        version_file(table_path, v).unlink()

    t = cl.open_table(table_path)
    assert t.version == COMMITS
    assert rows(t.to_arrow()) == expected_rows(COMMITS)
    assert t.transaction_version("app") == COMMITS
    assert t.schema.names == [*EVENTS.names, "extra"]
    # versions from the oldest checkpoint on still time travel ...
    for version in range(5 if deleted_up_to < 5 else 10, COMMITS + 1):
        assert rows(t.to_arrow(version=version)) == expected_rows(version), version
    # ... older ones are gone, with a clear error
    for version in range(deleted_up_to + 1):
        if version in (5,):
            continue
        with pytest.raises(cl.VersionNotFoundError, match=f"version {version}"):
            t.to_arrow(version=version)
    history = t.history()
    assert [h.version for h in history] == list(range(COMMITS, deleted_up_to, -1))
    # the table keeps working: the next commits land and the next checkpoint is written
    for n in range(3):
        t.append(events(5000 + n, 1), schema_mode="merge")
    assert t.version == 15
    assert checkpoint_file(table_path, 15).exists()
    assert json.loads(pointer(table_path).read_text()) == {"version": 15, "floor": 0}
    assert cl.open_table(table_path).count_rows() == len(expected_rows(COMMITS)) + 3


GARBAGE_POINTERS = {
    "empty": b"",
    "not json": b"garbage",
    "binary": b"\xff\xfe\x00\x01",
    "a list": b"[10]",
    "no version": b'{"checkpoint": 10}',
    "version not a number": b'{"version": "ten"}',
    "version null": b'{"version": null}',
    "version negative": b'{"version": -3}',
    "no such checkpoint": b'{"version": 7}',
    "far future": b'{"version": 99999}',
    "huge number": b'{"version": 1e999}',
}


@pytest.mark.parametrize("early_log", ["kept", "deleted"])
@pytest.mark.parametrize("content", ["missing", *sorted(GARBAGE_POINTERS)])
def test_missing_or_garbage_pointer_falls_back(
    table_path: Path, content: str, early_log: str
) -> None:
    if content == "missing":
        pointer(table_path).unlink()
    else:
        pointer(table_path).write_bytes(GARBAGE_POINTERS[content])
    if early_log == "deleted":
        for v in range(5):
            version_file(table_path, v).unlink()

    t = cl.open_table(table_path)
    assert t.version == COMMITS
    assert rows(t.to_arrow()) == expected_rows(COMMITS)
    assert rows(t.to_arrow(version=7)) == expected_rows(7)


def test_stale_pointer_still_reaches_the_latest_version(table_path: Path) -> None:
    pointer(table_path).write_text(json.dumps({"version": 5}))
    t = cl.open_table(table_path)
    assert t.version == COMMITS
    assert rows(t.to_arrow()) == expected_rows(COMMITS)


def test_without_checkpoint_and_version_zero_the_log_is_corrupt(table_path: Path) -> None:
    for version in (5, 10):
        for part in log_dir(table_path).glob(f"{version:020d}.checkpoint*"):
            part.unlink()
    pointer(table_path).unlink()
    version_file(table_path, 0).unlink()
    with pytest.raises(cl.CorruptDataError, match="starts at version 1") as info:
        cl.open_table(table_path)
    assert info.value.path is not None and info.value.path.endswith("_carbonlite/log")


def test_a_damaged_checkpoint_is_skipped(table_path: Path, caplog) -> None:
    """A checkpoint only saves work: when it does not parse, the log still has the answer."""
    path = checkpoint_file(table_path, 10)
    path.write_bytes(path.read_bytes()[:100])
    for v in range(5):
        version_file(table_path, v).unlink()  # the fallback is checkpoint 5, then the log
    with caplog.at_level(logging.WARNING):
        t = cl.open_table(table_path)
    assert t.version == COMMITS
    assert rows(t.to_arrow()) == rows(cl.open_table(table_path).to_arrow(version=COMMITS))
    assert rows(t.to_arrow()) == expected_rows(COMMITS)
    assert rows(t.to_arrow(version=10)) == expected_rows(10)
    assert any(path.name in r.getMessage() for r in caplog.records)


def test_with_nothing_readable_to_start_from_the_log_is_corrupt(table_path: Path) -> None:
    path = checkpoint_file(table_path, 10)
    path.write_bytes(b"{broken")
    for v in range(10):
        version_file(table_path, v).unlink()
    for damaged in log_dir(table_path).glob(f"{5:020d}.checkpoint*"):
        damaged.unlink()
    with pytest.raises(cl.CorruptDataError) as info:
        cl.open_table(table_path)
    assert info.value.path is not None and info.value.path.endswith("_carbonlite/log")


def test_checkpoint_of_a_newer_format_is_unsupported(table_path: Path) -> None:
    path = checkpoint_file(table_path, 10)
    doc = json.loads(path.read_bytes())
    doc["metadata"]["format_version"] = LOG_FORMAT_VERSION + 1
    path.write_text(json.dumps(doc))
    with pytest.raises(cl.UnsupportedFormatError, match=f"format version {LOG_FORMAT_VERSION + 1}"):
        cl.open_table(table_path)


# --- damaged and newer logs, through the table -------------------------------------------------


def test_a_damaged_log_version_names_its_file(table_path: Path) -> None:
    path = version_file(table_path, 11)
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(cl.CorruptDataError) as info:
        cl.open_table(table_path)
    assert info.value.path is not None and info.value.path.endswith(path.name)
    assert path.name in str(info.value)


def test_an_unknown_action_in_a_table_of_this_format_is_damage(table_path: Path) -> None:
    """A newer CarbonLite raises the table's format version before it writes a new action, so
    an unknown action in a table of this format (even under a valid seal) is damage."""
    path = version_file(table_path, 12)
    body = unseal(path.read_bytes().rstrip(b"\n"), 2)
    assert body is not None
    lines = body.split(b"\n")
    forged = b"\n".join([*lines[:-1], b'{"futureAction":{"segment_id":"1"}}', lines[-1]])
    path.write_bytes(seal(forged, 2) + b"\n")
    with pytest.raises(cl.CorruptDataError, match="futureAction") as info:
        cl.open_table(table_path)
    assert not isinstance(info.value, cl.UnsupportedFormatError)
    assert path.name in str(info.value)


def test_a_table_of_a_newer_format_version_is_unsupported(tmp_path: Path) -> None:
    path = tmp_path / "newer"
    cl.create_table(path, EVENTS).append(events(0, 2))
    zero = version_file(path, 0)
    lines = [json.loads(line) for line in zero.read_text().split("\n") if line]
    lines[0]["metaData"]["format_version"] = LOG_FORMAT_VERSION + 1
    zero.write_text("".join(json.dumps(line) + "\n" for line in lines))
    newer = f"format version {LOG_FORMAT_VERSION + 1}"
    with pytest.raises(cl.UnsupportedFormatError, match=newer) as info:
        cl.open_table(path)
    assert "upgrade" in str(info.value)
