"""Log actions and checkpoints survive JSON unchanged; damaged or newer logs are refused clearly."""

from __future__ import annotations

import dataclasses
import json
import math
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from carbonlite.errors import CorruptDataError, UnsupportedFormatError
from carbonlite.format.stats import ColumnStats
from carbonlite.metadata import (
    LOG_FORMAT_VERSION,
    BlockletEntry,
    BlockletsAppended,
    CommitInfo,
    DeletionRef,
    RowsDeleted,
    SegmentAdded,
    Snapshot,
    TableMetadata,
    TxnMarker,
)
from carbonlite.metadata.checkpoint import (
    decode_checkpoint,
    encode_checkpoint,
    encode_legacy_checkpoint,
)
from carbonlite.metadata.manifest import ManifestStore
from carbonlite.metadata.manifest_plan import plan_manifests
from carbonlite.metadata.seal import seal, unseal
from carbonlite.metadata.serde import decode_actions, encode_actions
from tests.metadata.strategies import (
    actions,
    commit_infos,
    log_histories,
    replay,
    snapshot_state,
    stat_schemas,
    table_metadata,
)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow],
)
WHERE = "memory://serde/_carbonlite/log/00000000000000000007.json"


def assert_same_schema(a: pa.Schema, b: pa.Schema) -> None:
    assert a.equals(b, check_metadata=True), f"{a}\n!=\n{b}"
    for fa, fb in zip(a, b, strict=True):
        assert fa.nullable == fb.nullable
        assert (fa.metadata or {}) == (fb.metadata or {})


@SETTINGS
@given(data=st.data())
def test_actions_round_trip(data: st.DataObject) -> None:
    schema = data.draw(stat_schemas())
    # A version that changes the schema starts with the new metadata; the statistics of
    # every action after it may use the new columns.
    new_schema = schema
    head = []
    if data.draw(st.booleans()):
        extra = data.draw(stat_schemas(max_columns=3))
        new_schema = pa.schema([*schema, *(f.with_name(f"added{i}") for i, f in enumerate(extra))])
        head = [data.draw(table_metadata(new_schema))]
    body = data.draw(st.lists(actions(new_schema), max_size=8))
    body = [a for a in body if not isinstance(a, TableMetadata) and not isinstance(a, CommitInfo)]
    written = [*head, *body, data.draw(commit_infos())]  # a version closes with its commitInfo

    encoded = encode_actions(written, schema)
    decoded = decode_actions(encoded, schema, where=WHERE)

    assert decoded == written
    for before, after in zip(written, decoded, strict=True):
        assert type(after) is type(before)
        if isinstance(before, TableMetadata):
            assert_same_schema(after.schema, before.schema)
    lines = encoded.decode("utf-8").split("\n")
    assert lines[-1] == ""  # NDJSON: every action ends with a newline
    if written:
        assert len(lines) == len(written) + 1
        assert all(len(json.loads(line)) == 1 for line in lines[:-1])  # one key per line
    assert encode_actions(decoded, schema) == encoded  # the encoding is canonical


def test_statistics_of_every_kind_round_trip() -> None:
    schema = pa.schema(
        [
            ("i", pa.int64()),
            ("u", pa.uint64()),
            ("f", pa.float64()),
            ("f32", pa.float32()),
            ("s", pa.string()),
            ("b", pa.binary()),
            ("d", pa.decimal128(38, 10)),
            ("d256", pa.decimal256(50, 3)),
            ("ts", pa.timestamp("ns", tz="UTC")),
            ("day", pa.date32()),
            ("flag", pa.bool_()),
            ("tags", pa.list_(pa.string())),
        ]
    )
    stats = {
        "i": ColumnStats(1, -(2**63), 2**63 - 1),
        "u": ColumnStats(0, 0, 2**64 - 1),
        "f": ColumnStats(2, -math.inf, math.inf, nan_count=3),
        "f32": ColumnStats(0, -0.0, 3.4028234663852886e38),
        "s": ColumnStats(0, "", "\U0010ffff" * 3 + "é\x00"),
        "b": ColumnStats(0, b"", b"\xff\x00\xfe"),
        "d": ColumnStats(0, Decimal("-9999999999999999999999999999.9999999999"), Decimal("0E-10")),
        "d256": ColumnStats(0, Decimal("-1.500"), Decimal("12345678901234567890123456789.123")),
        "ts": ColumnStats(0, -(2**63) + 1, 1_767_225_600_123_456_789),
        "day": ColumnStats(5, -719162, 2932896),
        "flag": ColumnStats(0, False, True),
        "tags": ColumnStats(7),
    }
    action = BlockletsAppended(
        "0", "segments/0/w-0.cblt", 16, 116, (BlockletEntry(16, 100, 9, stats),)
    )
    encoded = encode_actions([action, CommitInfo("APPEND", 1, True)], schema)
    assert b"NaN" not in encoded and b"Infinity" in encoded
    decoded, _ = decode_actions(encoded, schema, where=WHERE)
    got = decoded.blocklets[0].stats
    assert got == stats
    assert math.copysign(1.0, got["f32"].min) == -1.0  # -0.0 keeps its sign
    assert got["f"].min == -math.inf and got["f"].max == math.inf
    assert got["d"].max == Decimal(0) and isinstance(got["d"].max, Decimal)


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x1c", "\x0b", "\r"])
def test_strings_with_unicode_line_breaks_round_trip(separator: str) -> None:
    """NDJSON separates records by "\\n" only; other characters that ``str.splitlines``
    treats as line breaks are ordinary text inside a JSON string."""
    schema = pa.schema([("s", pa.string())])
    text = f"before{separator}after"
    written = [
        BlockletsAppended(
            "0", "f", 0, 10, (BlockletEntry(0, 10, 2, {"s": ColumnStats(0, text, text + "z")}),)
        ),
        TxnMarker(text, 1),
        CommitInfo("APPEND", 1, True, parameters={"note": text}),
    ]
    assert decode_actions(encode_actions(written, schema), schema, where=WHERE) == written


def test_schema_change_applies_to_the_whole_version() -> None:
    """``encode_actions`` encodes every action of a version with the schema the version ends
    with; decoding must read them with that same schema, wherever the metadata line sits."""
    old = pa.schema([("a", pa.int64())])
    new = pa.schema([("a", pa.int64()), ("b", pa.decimal128(9, 2))])
    stats = {"a": ColumnStats(0, 1, 5), "b": ColumnStats(0, Decimal("1.25"), Decimal("9.50"))}
    written = [
        BlockletsAppended("0", "segments/0/w-0.cblt", 16, 40, (BlockletEntry(16, 24, 3, stats),)),
        TableMetadata("t", new),
        CommitInfo("APPEND", 1, True),
    ]
    decoded = decode_actions(encode_actions(written, old), old, where=WHERE)
    assert decoded == written


def test_commit_metrics_are_optional_both_ways() -> None:
    """``files_added``, ``files_removed``, ``duration_ms`` and ``writer_id`` are written only
    when known: a commitInfo without them encodes exactly as before they existed, and one an
    older writer wrote reads with None for each."""
    schema = pa.schema([("a", pa.int64())])
    bare = CommitInfo("APPEND", 1, True, rows_added=3, engine="carbonlite/0.1.0")
    body = json.loads(unseal(encode_actions([bare], schema).rstrip(b"\n"), 2) or b"")
    assert list(body["commitInfo"]) == [
        "operation",
        "timestamp",
        "data_change",
        "read_version",
        "rows_added",
        "rows_removed",
        "bytes_added",
        "bytes_removed",
        "parameters",
        "engine",
    ]
    full = dataclasses.replace(
        bare, files_added=2, files_removed=0, duration_ms=1234, writer_id="w-1"
    )
    encoded = encode_actions([full], schema)
    body = json.loads(unseal(encoded.rstrip(b"\n"), 2) or b"")
    assert {k: body["commitInfo"][k] for k in ("files_added", "files_removed")} == {
        "files_added": 2,
        "files_removed": 0,  # zero is known, and written
    }
    assert (body["commitInfo"]["duration_ms"], body["commitInfo"]["writer_id"]) == (1234, "w-1")
    assert decode_actions(encoded, schema, where=WHERE) == [full]
    old = decode_actions(seal(INFO_LINE, 2) + b"\n", schema, where=WHERE)
    assert old == [CommitInfo("APPEND", 1, True)]
    assert (old[0].files_added, old[0].duration_ms, old[0].writer_id) == (None, None, None)


INDEX = "00000000000000000007.checkpoint.blocklets.arrow"


def store_of(files: dict[str, bytes]) -> ManifestStore:
    """A manifest store reading ``files`` (name -> bytes), as the log reads its directory."""
    return ManifestStore(lambda ref: files[ref.name], lambda ref: ref.name)


def checkpoint_round_trip(
    snapshot: Snapshot, files: dict[str, bytes] | None = None
) -> tuple[Snapshot, tuple[bytes, ...]]:
    """``snapshot`` through its checkpoint (new manifests, then the document) and back."""
    files = {} if files is None else files
    refs, written = plan_manifests(snapshot, store_of(files))
    for ref, data, _ in written:
        files[ref.name] = data
    document = encode_checkpoint(snapshot, refs)
    restored = decode_checkpoint(document, snapshot.table_path, where="ck", store=store_of(files))
    return restored, (document, *(files[r.name] for r in refs))


def legacy_round_trip(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` through a checkpoint of format 1/2 (document and blocklet index)."""
    document, index = encode_legacy_checkpoint(snapshot, INDEX)
    return decode_checkpoint(
        document, snapshot.table_path, where="ck", store=store_of({INDEX: index})
    )


@SETTINGS
@given(history=log_histories())
def test_checkpoint_round_trip_of_replayed_snapshots(history) -> None:
    versions, schemas = history
    snapshots = replay("memory://serde-table", versions)
    for snapshot, schema in zip(snapshots, schemas, strict=True):
        assert_same_schema(snapshot.schema, schema)
        files: dict[str, bytes] = {}
        restored, encoded = checkpoint_round_trip(snapshot, files)
        assert snapshot_state(restored) == snapshot_state(snapshot)
        assert_same_schema(restored.schema, snapshot.schema)
        assert restored.num_rows == snapshot.num_rows
        # a checkpoint of a restored state reuses its manifests and writes the same document
        assert checkpoint_round_trip(restored, files)[1] == encoded
        assert snapshot_state(legacy_round_trip(snapshot)) == snapshot_state(snapshot)


@SETTINGS
@given(history=log_histories(), cut=st.integers(0, 8))
def test_checkpoint_then_log_equals_full_replay(history, cut: int) -> None:
    """What opening does: a checkpoint, then the encoded versions after it, decoded."""
    versions, schemas = history
    cut = min(cut, len(versions) - 1)
    full = replay("memory://serde-table", versions)
    encoded = [
        encode_actions(v, schemas[n - 1] if n else schemas[0]) for n, v in enumerate(versions)
    ]
    snapshot, _ = checkpoint_round_trip(full[cut])
    for n in range(cut + 1, len(versions)):
        actions = decode_actions(encoded[n], snapshot.schema, where=f"v{n}")
        assert actions == versions[n]
        snapshot = snapshot.apply(n, actions)
    assert snapshot_state(snapshot) == snapshot_state(full[-1])
    # replaying the decoded log from version 0 gives the same state as well
    zero = decode_actions(encoded[0], None, where="v0")
    from_zero = Snapshot.from_actions("memory://serde-table", 0, zero)
    for n in range(1, len(versions)):
        from_zero = from_zero.apply(n, decode_actions(encoded[n], from_zero.schema, where=f"v{n}"))
    assert snapshot_state(from_zero) == snapshot_state(full[-1])


# --- damage ------------------------------------------------------------------------------------

SCHEMA = pa.schema([("a", pa.int64()), ("d", pa.decimal128(9, 2)), ("b", pa.binary())])
INFO_LINE = b'{"commitInfo":{"operation":"APPEND","timestamp":1,"data_change":true}}'
GOOD = encode_actions(
    [
        SegmentAdded("0", "STREAMING", "STREAMING"),
        BlockletsAppended(
            "0",
            "segments/0/w-0.cblt",
            0,
            120,
            (BlockletEntry(16, 104, 3, {"a": ColumnStats(0, 1, 3)}),),
        ),
        TxnMarker("app", 4),
        CommitInfo("APPEND", 1_700_000_000_000, True, read_version=6, rows_added=3),
    ],
    SCHEMA,
)


def _append_line(stats: str) -> bytes:
    return (
        '{"appendBlocklets":{"segment_id":"0","file":"f","start":0,"end":10,'
        f'"blocklets":[{{"offset":0,"length":10,"rows":1,"stats":{{{stats}}}}}]}}}}\n'
    ).encode()


DAMAGED = {
    "truncated mid-line": GOOD[: len(GOOD) // 2],
    "not utf-8": b"\xff\xfe\xfa{}\n",
    "not json": b"{this is not json}\n",
    "a list, not an object": b"[1, 2]\n",
    "two action keys on one line": b'{"txn":{"app_id":"a","batch_id":1},"commitInfo":{}}\n',
    "action body not an object": b'{"txn":5}\n',
    "missing field": b'{"txn":{"app_id":"a"}}\n',
    "null body": b'{"setSegmentStatus":null}\n',
    "bad base64 bound": _append_line('"b":{"nulls":0,"min":"!!not base64!!"}'),
    "bad decimal bound": _append_line('"d":{"nulls":0,"min":"twelve","max":"1.00"}'),
    "bad statistics entry": _append_line('"a":[1,2]'),
    "garbage after a good line": GOOD + b"\x00\x01garbage\n",
}


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_damaged_log_entry_names_the_file(damage: str) -> None:
    """Tables of format 1 carry no seal: each line is still parsed strictly."""
    with pytest.raises(CorruptDataError) as info:
        decode_actions(DAMAGED[damage], SCHEMA, where=WHERE, format_version=1)
    assert info.value.path == WHERE
    assert WHERE in str(info.value)
    assert "log entry" in str(info.value)


def test_damaged_checkpoint_names_the_file() -> None:
    snapshot = Snapshot.from_actions(
        "memory://x", 0, [TableMetadata("t", SCHEMA), CommitInfo("CREATE TABLE", 1, False)]
    )
    snapshot = snapshot.apply(
        1,
        [
            SegmentAdded("0", "STREAMING", "STREAMING"),
            BlockletsAppended(
                "0", "f", 0, 120, (BlockletEntry(16, 104, 3, {"a": ColumnStats(0, 1, 3)}),)
            ),
        ],
    )
    files: dict[str, bytes] = {}
    _, (document, manifest) = checkpoint_round_trip(snapshot, files)
    for bad in (document[:-5], b"\xff" + document, document.replace(b'"segments"', b'"segs"')):
        with pytest.raises(CorruptDataError) as info:
            decode_checkpoint(bad, "memory://x", where="memory://x/ck.json", store=store_of(files))
        assert info.value.path == "memory://x/ck.json"
    # manifests are read when entries are needed; damage there names the manifest
    (name,) = files
    for damaged in (manifest[: len(manifest) // 2], manifest[:-9] + b"\x00" * 9):
        restored = decode_checkpoint(
            document, "memory://x", where="ck", store=store_of({name: damaged})
        )
        assert restored.num_rows == 3
        with pytest.raises(CorruptDataError) as info:
            restored.segments["0"].files["f"].blocklets  # noqa: B018
        assert info.value.path == name
    good, _ = checkpoint_round_trip(snapshot)
    assert snapshot_state(good) == snapshot_state(snapshot)


def _sealed(lines: list[bytes]) -> bytes:
    return seal(b"\n".join(lines), 2) + b"\n"


def test_unknown_action_is_damage_in_a_table_of_this_format() -> None:
    data = _sealed([b'{"futureAction":{"segment_id":"0","predicate":"a > 1"}}', INFO_LINE])
    with pytest.raises(CorruptDataError, match="futureAction") as info:
        decode_actions(data, SCHEMA, where=WHERE, format_version=LOG_FORMAT_VERSION)
    assert not isinstance(info.value, UnsupportedFormatError)
    assert WHERE in str(info.value)


def test_delete_rows_is_damage_in_a_table_of_format_3() -> None:
    """Deletion vectors came with format 4: a format 3 table holding one is damaged."""
    line = (
        b'{"deleteRows":{"segment_id":"0","file":"segments/0/w-0.cblt","size":40,'
        b'"vectors":[[8,"segments/0/w-0.cblt.ab.dv",0,40,1]]}}'
    )
    with pytest.raises(CorruptDataError, match="deleteRows") as info:
        decode_actions(_sealed([line, INFO_LINE]), SCHEMA, where=WHERE, format_version=3)
    assert not isinstance(info.value, UnsupportedFormatError)
    actions = decode_actions(_sealed([line, INFO_LINE]), SCHEMA, where=WHERE, format_version=4)
    assert actions[0] == RowsDeleted(
        "0",
        "segments/0/w-0.cblt",
        (DeletionRef(8, "segments/0/w-0.cblt.ab.dv", 0, 40, 1),),
        40,
    )


def test_a_table_of_a_newer_format_is_unsupported_not_damaged() -> None:
    data = _sealed([b'{"futureAction":{"segment_id":"0","predicate":"a > 1"}}', INFO_LINE])
    with pytest.raises(UnsupportedFormatError, match="upgrade") as info:
        decode_actions(data, SCHEMA, where=WHERE, format_version=LOG_FORMAT_VERSION + 1)
    assert WHERE in str(info.value)


def test_newer_format_version_is_unsupported() -> None:
    newer_version = LOG_FORMAT_VERSION + 1
    encoded = encode_actions(
        [TableMetadata("t", SCHEMA), CommitInfo("CREATE TABLE", 1, False)], SCHEMA
    )
    first, info_line = (unseal(encoded.rstrip(b"\n"), 2) or b"").split(b"\n")
    newer = json.loads(first)
    newer["metaData"]["format_version"] = newer_version
    data = _sealed([json.dumps(newer).encode(), info_line])
    with pytest.raises(UnsupportedFormatError, match=f"format version {newer_version}"):
        decode_actions(data, None, where=WHERE)
    metadata = TableMetadata("t", SCHEMA, format_version=newer_version)
    with pytest.raises(UnsupportedFormatError, match=f"format version {newer_version}"):
        Snapshot.from_actions("memory://x", 0, [metadata])
    current = Snapshot.from_actions(
        "memory://x", 0, [TableMetadata("t", SCHEMA), CommitInfo("CREATE TABLE", 1, False)]
    )
    with pytest.raises(UnsupportedFormatError, match="upgrade"):
        current.apply(1, [metadata])
    assert current.metadata.format_version == LOG_FORMAT_VERSION


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_every_damage_is_caught_in_a_sealed_format(damage: str) -> None:
    with pytest.raises(CorruptDataError) as info:
        decode_actions(DAMAGED[damage], SCHEMA, where=WHERE, format_version=LOG_FORMAT_VERSION)
    assert info.value.path == WHERE


def test_a_version_cut_at_a_line_boundary_is_damage() -> None:
    """The review found a handoff version cut after its first lines read as a smaller, valid
    version (rows of no committed version). Every cut of a sealed version is caught."""
    lines = GOOD.split(b"\n")
    for keep in range(1, len(lines) - 1):
        cut = b"\n".join(lines[:keep]) + b"\n"
        with pytest.raises(CorruptDataError):
            decode_actions(cut, SCHEMA, where=WHERE)


def test_one_changed_digit_anywhere_is_damage() -> None:
    """A flipped digit in a statistic would make pruning skip rows: the seal catches it, at
    every position of every digit in the file."""
    checked = 0
    for at, byte in enumerate(GOOD):
        if chr(byte).isdigit():
            flipped = GOOD[:at] + str((int(chr(byte)) + 1) % 10).encode() + GOOD[at + 1 :]
            with pytest.raises(CorruptDataError):
                decode_actions(flipped, SCHEMA, where=WHERE)
            checked += 1
    assert checked > 20


def test_a_sealed_version_decodes_exactly() -> None:
    decoded = decode_actions(GOOD, SCHEMA, where=WHERE)
    assert isinstance(decoded[-1], CommitInfo) and decoded[-1].rows_added == 3
    assert GOOD.count(b'"crc32c":') == 1 and GOOD.endswith(b"}}\n")
