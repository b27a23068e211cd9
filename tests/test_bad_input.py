"""Bad input from users and from storage: each case gives a CarbonLiteError subclass whose
message says what was expected, what was found and where, and leaves the table's committed
content (its rows and its version) exactly as it was.

One test per reported case: names that would become paths (writer ids, segment ids, paths in
a damaged or hostile log), a plain file where a table should be, non-integer versions,
NaN/inf/negative durations, history limits, empty schemas, and unknown log actions.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.metadata import (
    LOG_FORMAT_VERSION,
    BlockletEntry,
    BlockletsAppended,
    CommitInfo,
    FileState,
    SegmentAdded,
    Snapshot,
)
from carbonlite.metadata.checkpoint import decode_checkpoint
from carbonlite.metadata.seal import seal, unseal
from carbonlite.metadata.serde import encode_actions
from carbonlite.names import MAX_NAME_BYTES
from carbonlite.storage import open_storage
from carbonlite.writer.append import TableWriter
from tests.support.tables import EVENTS, events, rows

# --- helpers -----------------------------------------------------------------------------------


def make_table(path: Path) -> cl.Table:
    """Two appends into the STREAMING segment, one finished segment: versions 0..4, with no
    checkpoint (a test writes its own)."""
    t = cl.create_table(
        path, EVENTS, properties={"blocklet_max_rows": "10", "checkpoint_max_entries": "100000"}
    )
    t.append(events(0, 12))
    t.finish_streaming()
    t.append(events(12, 7))
    t.append(events(19, 5))
    return t


def committed(path: Path) -> tuple[int, list[dict[str, Any]]]:
    """The table's committed content as a fresh reader sees it: (version, rows by id)."""
    t = cl.open_table(path)
    return t.version, rows(t.to_arrow().sort_by("id"))


def files_under(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "events"
    make_table(path)
    return path


def write_version(path: Path, version: int, data: bytes) -> Path:
    target = path / "_carbonlite" / "log" / f"{version:020d}.json"
    target.write_bytes(data)
    return target


def info(operation: str = "APPEND") -> CommitInfo:
    return CommitInfo(operation, 1_767_225_600_000, True, read_version=0)


# --- 1. names that become paths ----------------------------------------------------------------

BAD_NAMES = [
    ("../../../notes", "contains '/'"),
    ("a/b", "contains '/'"),
    ("a\\b", "contains '\\\\'"),
    ("", "is empty"),
    (".", "relative directory"),
    ("..", "relative directory"),
    ("w\x00x", "control character '\\x00'"),
    ("w\nx", "control character '\\n'"),
    ("w" * (MAX_NAME_BYTES + 1), f"more than {MAX_NAME_BYTES}"),
    (7, "not a string"),
]


@pytest.mark.parametrize(("writer_id", "problem"), BAD_NAMES)
def test_writer_ids_that_are_not_one_plain_name_are_refused(
    tmp_path: Path, table: Path, writer_id: Any, problem: str
) -> None:
    """The reported case: ``writer_id="../../../notes"`` overwrote a user's file outside the
    table and recorded ``segments/0/../../../notes-0.cblt`` in the log."""
    notes = tmp_path / "notes-0.cblt"
    notes.write_bytes(b"the user's own notes")
    before, on_disk = committed(table), files_under(table)
    with pytest.raises(cl.InvalidOptionError) as caught:
        cl.open_table(table, writer_id=writer_id).append(events(100, 3))
    message = str(caught.value)
    assert "writer_id" in message and repr(writer_id) in message and problem in message
    assert "one path component" in message and "ingest-1" in message  # expected, and the fix
    fresh = tmp_path / "new-table"
    with pytest.raises(cl.InvalidOptionError, match="writer_id"):
        cl.create_table(fresh, EVENTS, writer_id=writer_id)
    assert not fresh.exists(), "a refused create must not leave a table behind"
    storage, root = open_storage(str(table))
    with pytest.raises(cl.InvalidOptionError, match="writer_id"):
        TableWriter(storage, root, writer_id=writer_id, storage_options=None)
    assert notes.read_bytes() == b"the user's own notes"
    assert committed(table) == before and files_under(table) == on_disk


def test_plain_writer_ids_still_name_the_stream_files(table: Path) -> None:
    t = cl.open_table(table, writer_id="ingest-1.a_b")
    version = t.append(events(100, 2)).version
    assert version == 5
    seg = t.snapshot().streaming_segment()
    assert seg is not None and "segments/1/ingest-1.a_b-0.cblt" in seg.files


@pytest.mark.parametrize(
    ("segments", "message"),
    [
        (["0", "../0"], "segment id '../0' contains '/'"),
        (["0/.."], "segment id '0/..' contains '/'"),
        ([".."], "segment id '..' is a relative directory"),
        (["0\x00"], "control character"),
        ([""], "segment id '' is empty"),
        ("0,1", "segments must be a list of segment ids"),
        ([0], "segment id 0 is of type int, not a string"),
    ],
)
def test_custom_compaction_refuses_segment_ids_that_are_not_names(
    table: Path, segments: Any, message: str
) -> None:
    before, on_disk = committed(table), files_under(table)
    t = cl.open_table(table)
    with pytest.raises(cl.InvalidOptionError) as caught:
        t.compact("custom", segments=segments)
    assert message in str(caught.value)
    assert committed(table) == before and files_under(table) == on_disk


def _hostile_append(file: str) -> bytes:
    entry = BlockletEntry(16, 100, 3)
    return encode_actions([BlockletsAppended("1", file, 0, 116, (entry,)), info()], EVENTS)


@pytest.mark.parametrize(
    ("file", "problem"),
    [
        ("segments/1/../../../outside.cblt", "component '..'"),
        ("/tmp/outside.cblt", "is absolute"),
        ("segments/1/a\\..\\..\\x.cblt", "component"),
        ("segments//x.cblt", "component ''"),
    ],
)
def test_a_log_naming_a_file_outside_the_table_is_refused(
    tmp_path: Path, table: Path, file: str, problem: str
) -> None:
    """A damaged or hostile log version: no reader, writer, ``clean`` or ``recover`` may open,
    cut or delete a file outside the table because the log names it."""
    outside = tmp_path / "outside.cblt"
    outside.write_bytes(b"not the table's")
    before, on_disk = committed(table), files_under(table)
    t = cl.open_table(table)  # loaded before the damage appears
    hostile = write_version(table, 5, _hostile_append(file))
    attempts = [
        lambda: cl.open_table(table),
        t.refresh,
        lambda: t.append(events(200, 2)),
        lambda: t.clean(0, force=True),
        lambda: t.recover(min_age=0),
        lambda: t.compact("major"),
    ]
    for attempt in attempts:
        with pytest.raises(cl.CorruptDataError) as caught:
            attempt()
        message = str(caught.value)
        assert f"version 5 of {str(table)!r}" in message, message  # where
        assert f"data file {file!r}" in message and problem in message  # what
        assert "outside the table" in message and "restore" in message  # why, and the fix
    assert outside.read_bytes() == b"not the table's"
    hostile.unlink()
    assert committed(table) == before and files_under(table) == on_disk


def test_a_log_adding_a_segment_whose_id_is_a_path_is_refused(tmp_path: Path, table: Path) -> None:
    before, on_disk = committed(table), files_under(table)
    data = encode_actions([SegmentAdded("../..", "STREAMING", "STREAMING"), info()], EVENTS)
    hostile = write_version(table, 5, data)
    with pytest.raises(cl.CorruptDataError, match=r"version 5 of .* segment id '\.\./\.\.'"):
        cl.open_table(table)
    hostile.unlink()
    assert committed(table) == before and files_under(table) == on_disk


def test_a_checkpoint_naming_a_file_outside_the_table_is_skipped(
    tmp_path: Path, table: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A hostile checkpoint is refused when decoded (naming the checkpoint file); opening falls
    back to replaying the log, so the table reads as committed and nothing outside is touched."""
    outside = tmp_path / "outside.cblt"
    outside.write_bytes(b"not the table's")
    before = committed(table)
    t = cl.open_table(table)
    real = t.snapshot()
    bad = "segments/0/../../../outside.cblt"
    seg = real.segments["0"]
    hostile = Snapshot(
        table_path=real.table_path,
        version=real.version,
        timestamp=real.timestamp,
        metadata=real.metadata,
        segments={
            **real.segments,
            "0": dataclasses.replace(seg, files={bad: FileState(bad, 116, (), 1, 1)}),
        },
        txns=real.txns,
    )
    t.log.write_checkpoint(hostile)
    document = t.log.checkpoint_path(real.version)
    with pytest.raises(cl.CorruptDataError) as caught:
        decode_checkpoint(t.storage.read(document), t.path, where=document, store=t.log.manifests)
    assert document in str(caught.value) and repr(bad) in str(caught.value)
    with caplog.at_level(logging.WARNING, logger="carbonlite.metadata.log"):
        assert committed(table) == before
        reopened = cl.open_table(table)
        reopened.clean(0, force=True)
        reopened.recover(min_age=0)
    assert "skipping damaged checkpoint" in caplog.text and "outside the table" in caplog.text
    assert outside.read_bytes() == b"not the table's"
    assert committed(table) == before


# --- 2. a plain file where a table should be ---------------------------------------------------


def test_a_plain_file_is_not_a_table(tmp_path: Path, table: Path) -> None:
    before, on_disk = committed(table), files_under(table)
    plain = tmp_path / "notes.txt"
    plain.write_text("not a table")
    for target in (plain, plain / "sub"):
        with pytest.raises(cl.TableNotFoundError) as caught:
            cl.open_table(target)
        assert f"no CarbonLite table at {str(target)!r}" in str(caught.value)
        assert f"{str(plain)!r} is a file, not a directory" in str(caught.value)
    for target in (plain, plain / "sub"):
        with pytest.raises(cl.InvalidOptionError) as refused:
            cl.create_table(target, EVENTS)
        message = str(refused.value)
        assert f"cannot create a table at {str(target)!r}" in message
        assert f"{str(plain)!r} is a file" in message and "does not exist yet" in message
    assert plain.read_text() == "not a table"
    assert committed(table) == before and files_under(table) == on_disk


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", "is empty"),
        ("/tmp/t\x00x", "control character '\\x00'"),
        (None, "must be a string or path-like"),
        (5, "must be a string or path-like"),
    ],
)
def test_table_paths_that_are_no_paths_are_refused(path: Any, message: str) -> None:
    with pytest.raises(cl.InvalidOptionError, match="table path") as caught:
        cl.open_table(path)
    assert message in str(caught.value)
    with pytest.raises(cl.InvalidOptionError, match="table path"):
        cl.create_table(path, EVENTS)


# --- 4. versions and numbers of the Table API --------------------------------------------------

NOT_VERSIONS = ["2", True, 1.0, float("nan")]


@pytest.mark.parametrize("version", NOT_VERSIONS, ids=repr)
def test_versions_must_be_integers(table: Path, version: Any) -> None:
    """The reported case: ``to_arrow(version="2")`` was a TypeError."""
    before, on_disk = committed(table), files_under(table)
    t = cl.open_table(table)
    calls = [
        lambda: t.to_arrow(version=version),
        lambda: t.scan(version=version),
        lambda: t.plan_splits(version=version),
        lambda: t.count_rows(version=version),
        lambda: t.segments(version=version),
        lambda: t.verify(version=version),
        lambda: t.snapshot(version),
        lambda: t.changes(version),
        lambda: t.changes(0, version),
    ]
    for call in calls:
        with pytest.raises(cl.InvalidOptionError) as caught:
            call()
        assert "must be an integer table version" in str(caught.value)
        assert repr(version) in str(caught.value)
    assert committed(table) == before and files_under(table) == on_disk


def test_integer_like_versions_still_work(table: Path) -> None:
    t = cl.open_table(table)
    assert t.count_rows(version=np.int64(2)) == 12
    assert t.to_arrow(version=np.int32(1)).num_rows == 12


@pytest.mark.parametrize(
    ("retention", "message"),
    [
        (float("nan"), "retention must be a finite number of seconds, got nan"),
        (float("inf"), "retention must be a finite number of seconds, got inf"),
        (-5, "retention must not be negative, got -5 s"),
        ("9" * 400 + "s", "longer than the longest duration"),
        (True, "retention must be a duration"),
    ],
)
def test_clean_refuses_durations_that_are_not_finite_and_non_negative(
    table: Path, retention: Any, message: str
) -> None:
    """The reported case: ``clean(retention=float("nan"), force=True)`` was a ValueError."""
    t = cl.open_table(table)
    t.compact("custom", segments=["0"])
    before, on_disk = committed(table), files_under(table)
    for dry_run in (False, True):
        with pytest.raises(cl.InvalidOptionError) as caught:
            t.clean(retention=retention, force=True, dry_run=dry_run)
        assert message in str(caught.value)
    assert committed(table) == before and files_under(table) == on_disk


def test_clean_and_recover_flags_must_be_booleans(table: Path) -> None:
    """``force="no"`` would count as yes and delete what the safety minimum protects."""
    t = cl.open_table(table)
    t.compact("custom", segments=["0"])
    before, on_disk = committed(table), files_under(table)
    with pytest.raises(cl.InvalidOptionError, match="force must be True or False, not str 'no'"):
        t.clean(0, force="no")  # type: ignore[arg-type]
    with pytest.raises(cl.InvalidOptionError, match="dry_run must be True or False"):
        t.clean("7d", dry_run="yes")  # type: ignore[arg-type]
    with pytest.raises(cl.InvalidOptionError, match="dry_run must be True or False"):
        t.recover(dry_run=1, min_age=0)  # type: ignore[arg-type]
    assert committed(table) == before and files_under(table) == on_disk


def test_txn_batch_ids_must_be_integers_not_booleans(table: Path) -> None:
    before, on_disk = committed(table), files_under(table)
    t = cl.open_table(table)
    with pytest.raises(
        cl.InvalidOptionError, match=r"batch_id integer >= 0\), got \('app', True\)"
    ):
        t.append(events(100, 1), txn=("app", True))  # type: ignore[arg-type]
    assert committed(table) == before and files_under(table) == on_disk


def test_add_columns_needs_fields(table: Path) -> None:
    before, on_disk = committed(table), files_under(table)
    t = cl.open_table(table)
    for bad in ([], ["extra"]):
        with pytest.raises(cl.InvalidOptionError, match=r"needs one or more pyarrow\.Field"):
            t.add_columns(bad)  # type: ignore[arg-type]
    assert committed(table) == before and files_under(table) == on_disk


def test_storage_options_must_be_a_mapping(table: Path) -> None:
    with pytest.raises(cl.InvalidOptionError, match="storage_options must be a mapping"):
        cl.open_table(table, storage_options="endpoint_url=x")  # type: ignore[arg-type]


# --- 5. one rule for durations; limits; empty schemas ------------------------------------------


@pytest.mark.parametrize(
    ("min_age", "message"),
    [
        (-10, "min_age must not be negative, got -10 s"),
        (float("nan"), "min_age must be a finite number of seconds, got nan"),
        (float("-inf"), "min_age must be a finite number of seconds, got -inf"),
        ("soon", "min_age: 'soon' is not a duration"),
    ],
)
def test_recover_refuses_min_ages_the_way_clean_refuses_retentions(
    table: Path, min_age: Any, message: str
) -> None:
    """The reported case: ``recover(min_age=-10)`` was accepted while ``clean(retention=-5)``
    was refused. Both now go through one check (and say which argument is wrong)."""
    stray = table / "segments" / "1" / "dead-writer-0.cblt"
    stray.write_bytes(b"an orphan recover would delete")
    before, on_disk = committed(table), files_under(table)
    t = cl.open_table(table)
    for dry_run in (True, False):
        with pytest.raises(cl.InvalidOptionError) as caught:
            t.recover(dry_run=dry_run, min_age=min_age)
        assert message in str(caught.value)
    if isinstance(min_age, (int, float)) and not math.isnan(min_age) and min_age < 0:
        with pytest.raises(cl.InvalidOptionError) as retention:
            t.clean(min_age, force=True)
        assert str(retention.value) == str(caught.value).replace("min_age", "retention")
    assert committed(table) == before and files_under(table) == on_disk


@pytest.mark.parametrize("limit", [-1, 0, True, 2.0, "2"], ids=repr)
def test_history_limit_must_be_a_positive_integer(table: Path, limit: Any) -> None:
    before = committed(table)
    t = cl.open_table(table)
    with pytest.raises(cl.InvalidOptionError) as caught:
        t.history(limit)
    assert "limit must be a whole number of commits, 1 or more" in str(caught.value)
    assert repr(limit) in str(caught.value)
    assert [r.version for r in t.history(2)] == [4, 3]
    assert len(t.history()) == 5
    assert committed(table) == before


def test_create_table_refuses_an_empty_schema(tmp_path: Path, table: Path) -> None:
    before = committed(table)
    fresh = tmp_path / "empty"
    with pytest.raises(cl.SchemaMismatchError) as caught:
        cl.create_table(fresh, pa.schema([]))
    message = str(caught.value)
    assert "empty schema" in message and str(fresh) in message and "at least one column" in message
    assert not fresh.exists()
    assert committed(table) == before


# --- 6. unknown log actions: damage, or a newer format -----------------------------------------


def _with_extra_lines(data: bytes, *lines: bytes) -> bytes:
    """A sealed version file with ``lines`` put before its closing commitInfo, sealed again."""
    body = unseal(data.rstrip(b"\n"), 2)
    assert body is not None
    *actions, closing = body.split(b"\n")
    return seal(b"\n".join([*actions, *lines, closing]), 2) + b"\n"


def test_an_unknown_action_in_a_table_of_this_format_is_damage(table: Path) -> None:
    """The reported case: an unknown action said "written by a newer CarbonLite; upgrade",
    naming no file. In a table whose format version this library reads it is damage."""
    before, on_disk = committed(table), files_under(table)
    data = _with_extra_lines(encode_actions([info()], EVENTS), b'{"futureAction":{"id":3}}')
    hostile = write_version(table, 5, data)
    with pytest.raises(cl.CorruptDataError) as caught:
        cl.open_table(table)
    assert not isinstance(caught.value, cl.UnsupportedFormatError)
    message = str(caught.value)
    assert str(hostile) in message and caught.value.path == str(hostile)  # file (and version)
    assert "'futureAction'" in message and f"format version {LOG_FORMAT_VERSION}" in message
    assert "damaged" in message
    hostile.unlink()
    assert committed(table) == before and files_under(table) == on_disk


def test_an_unknown_action_in_a_version_that_raises_the_format_asks_for_an_upgrade(
    table: Path,
) -> None:
    """Only a table of a newer format than this library's is "upgrade carbonlite", also when
    the version raising the format is the one holding the new action."""
    before, on_disk = committed(table), files_under(table)
    metadata = cl.open_table(table).snapshot().metadata
    newer = dataclasses.replace(metadata, format_version=LOG_FORMAT_VERSION + 1)
    data = _with_extra_lines(
        encode_actions([newer, info("UPGRADE")], EVENTS), b'{"futureAction":{"id":3}}'
    )
    hostile = write_version(table, 5, data)
    with pytest.raises(cl.UnsupportedFormatError) as caught:
        cl.open_table(table)
    message = str(caught.value)
    assert str(hostile) in message and f"format version {LOG_FORMAT_VERSION + 1}" in message
    assert "upgrade carbonlite" in message
    hostile.unlink()
    assert committed(table) == before and files_under(table) == on_disk
