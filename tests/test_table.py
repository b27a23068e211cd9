"""The public Table API: creating and opening, schema checks, schema evolution, time travel,
history and segments, overwrite; and a stateful model test of everything together."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import carbonlite as cl
from tests.support.tables import EVENTS, drop_memory, events, mem_uri, memory_uri, rows

__all__ = ["mem_uri"]


def log_files(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "_carbonlite" / "log").iterdir())


# --- create and open ---------------------------------------------------------------------------


def test_create_then_open(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = cl.create_table(
        path, EVENTS, sort_columns=["ts"], properties={"blocklet_max_rows": "10", "user.k": "v"}
    )
    assert (t.version, t.count_rows()) == (0, 0)
    assert t.to_arrow().schema.equals(EVENTS)
    assert t.to_arrow().num_rows == 0
    again = cl.open_table(path)
    assert again.schema.equals(EVENTS)
    assert not again.schema.field("id").nullable
    assert again.sort_columns == ("ts",)
    assert again.properties == {
        "columnar_format": "parquet",
        "blocklet_max_rows": "10",
        "user.k": "v",
    }
    assert again.table_id == t.table_id and len(t.table_id) == 32
    assert again.version == 0
    assert log_files(path) == [f"{0:020d}.json"]
    (record,) = again.history()
    assert (record.version, record.operation, record.data_change) == (0, "CREATE TABLE", False)
    assert record.parameters == {"sort_columns": "ts"}


def test_create_where_a_table_exists_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t"
    first = cl.create_table(path, EVENTS)
    first.append(events(0, 3))
    other = pa.schema([("x", pa.string())])
    with pytest.raises(cl.TableExistsError, match="already exists") as info:
        cl.create_table(path, other)
    assert str(path) in str(info.value)
    t = cl.open_table(path)  # the existing table is untouched
    assert t.schema.equals(EVENTS)
    assert t.version == 1
    assert rows(t.to_arrow()) == rows(events(0, 3))


def test_create_in_memory_where_a_table_exists_is_refused(mem_uri: str) -> None:
    first = cl.create_table(mem_uri, EVENTS)
    with pytest.raises(cl.TableExistsError, match=mem_uri):
        cl.create_table(mem_uri, pa.schema([("x", pa.int8())]))
    again = cl.open_table(mem_uri)
    assert (again.version, again.table_id) == (0, first.table_id)
    assert again.schema.equals(EVENTS)


def test_open_where_there_is_no_table(tmp_path: Path) -> None:
    for path in (tmp_path / "missing", tmp_path):  # absent, and an empty directory
        with pytest.raises(cl.TableNotFoundError, match="no CarbonLite table") as info:
            cl.open_table(path)
        assert str(path) in str(info.value)
    uri = memory_uri()
    with pytest.raises(cl.TableNotFoundError) as info:
        cl.open_table(uri)
    assert uri in str(info.value)


def test_errors_belong_to_the_one_tree() -> None:
    for name in cl.__all__:
        obj = getattr(cl, name)
        if isinstance(obj, type) and name.endswith("Error"):
            assert issubclass(obj, cl.CarbonLiteError), name


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        ({"blocklet_max_rows": "0"}, "blocklet_max_rows='0': must be at least 1"),
        ({"blocklet_max_rows": "many"}, "blocklet_max_rows='many'"),
        ({"checkpoint_interval": "-5"}, "checkpoint_interval='-5'"),
        ({"streaming_segment_max_bytes": "12 parsecs"}, "not a size"),
        ({"deleted_data_retention": "soon"}, "not a duration"),
        ({"auto_compaction": "maybe"}, "must be true or false"),
        ({"compression_level": "23"}, "0 (no compression) to 22"),
        ({"compaction_level_threshold": "4,1"}, "at least 2"),
        ({"blocklet_max_row": "5"}, "did you mean 'blocklet_max_rows'"),
        ({"colour": "blue"}, "'colour' is not a table property"),
        ({"blocklet_max_rows": 5}, "keys and values must be strings"),
    ],
)
def test_invalid_properties_are_refused(tmp_path: Path, properties, expected: str) -> None:
    path = tmp_path / "t"
    with pytest.raises(cl.InvalidOptionError) as info:
        cl.create_table(path, EVENTS, properties=properties)
    assert expected in str(info.value)
    with pytest.raises(cl.TableNotFoundError):  # nothing was created
        cl.open_table(path)


def test_every_problem_is_named_at_once(tmp_path: Path) -> None:
    with pytest.raises(cl.InvalidOptionError) as info:
        cl.create_table(
            tmp_path / "t", EVENTS, properties={"checkpoint_interval": "0", "nope": "1"}
        )
    assert "checkpoint_interval" in str(info.value) and "'nope'" in str(info.value)


@pytest.mark.parametrize(
    ("sort_columns", "expected"),
    [
        (["missing"], "sort column 'missing' is not in the schema"),
        (["id", "id"], "repeat a column"),
        (["tags"], "sort column 'tags' has type list<item: string>, which has no order"),
    ],
)
def test_invalid_sort_columns_are_refused(mem_uri: str, sort_columns, expected: str) -> None:
    schema = pa.schema([*EVENTS, pa.field("tags", pa.list_(pa.string()))])
    with pytest.raises(cl.InvalidOptionError, match="invalid sort columns") as info:
        cl.create_table(mem_uri, schema, sort_columns=sort_columns)
    assert expected in str(info.value)
    with pytest.raises(cl.TableNotFoundError):
        cl.open_table(mem_uri)


def test_a_single_sort_column_may_be_a_string(mem_uri: str) -> None:
    assert cl.create_table(mem_uri, EVENTS, sort_columns="ts").sort_columns == ("ts",)


def test_invalid_schemas_are_refused(mem_uri: str) -> None:
    with pytest.raises(cl.InvalidOptionError, match=r"pyarrow\.Schema"):
        cl.create_table(mem_uri, {"a": "int64"})  # type: ignore[arg-type]
    bad = pa.schema(
        [("a", pa.int64()), ("a", pa.string()), ("d", pa.dictionary(pa.int8(), pa.string()))]
    )
    with pytest.raises(cl.UnsupportedTypeError) as info:
        cl.create_table(mem_uri, bad)
    assert any("duplicate column names ['a']" in d for d in info.value.differences)
    assert any("'d'" in d and "dictionary" in d for d in info.value.differences)
    with pytest.raises(cl.TableNotFoundError):
        cl.open_table(mem_uri)


# --- appending: schema checks --------------------------------------------------------------------


def _assert_unchanged(t: cl.Table, version: int, expected: list[dict]) -> None:
    assert t.version == version
    fresh = cl.open_table(t.path)
    assert fresh.version == version
    assert rows(fresh.to_arrow()) == expected


@pytest.mark.parametrize(
    ("data", "differences"),
    [
        (
            pa.table({"id": [1], "name": [2], "score": ["x"], "ts": events(0, 1).column("ts")}),
            [
                "column 'name': expected type string, found int64 (no cast keeps every value; "
                "cast it explicitly if that is intended)",
                "column 'score': expected type double, found string (no cast keeps every value; "
                "cast it explicitly if that is intended)",
            ],
        ),
        (
            pa.table({"name": ["a"]}),  # nullable score and ts may be missing, id may not
            ["column 'id' (int64) is missing"],
        ),
        (
            events(0, 1).append_column("bogus", pa.array([1.0])).append_column("other", ["x"]),
            [
                "column 'bogus' (double) is not in the schema",
                "column 'other' (string) is not in the schema",
            ],
        ),
        (
            events(0, 2).set_column(0, "id", pa.array([1, None], pa.int64())),
            ["column 'id' is declared non-nullable but has 1 null(s)"],
        ),
    ],
)
def test_schema_mismatch_commits_nothing(mem_uri: str, data: pa.Table, differences) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    t.append(events(0, 4))
    before = rows(t.to_arrow())
    with pytest.raises(cl.SchemaMismatchError) as info:
        t.append(data)
    assert sorted(info.value.differences) == sorted(differences)
    for line in differences:
        assert line in str(info.value)
    assert mem_uri in str(info.value)
    _assert_unchanged(t, 1, before)
    t.append(events(4, 2))  # the table still takes good data
    assert rows(t.to_arrow()) == rows(events(0, 6))
    assert t.version == 2


def test_a_bad_batch_late_in_a_stream_commits_nothing(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS, properties={"blocklet_max_rows": "3"}, writer_id="w")
    t.append(events(0, 5))
    (segment,) = t.segments()
    good = events(100, 10).to_batches()
    bad = pa.record_batch({"id": [1], "name": [1]})
    with pytest.raises(cl.SchemaMismatchError, match="'name'"):
        t.append([*good, *good, bad, *good])
    _assert_unchanged(t, 1, rows(events(0, 5)))
    assert t.segments()[0].bytes == segment.bytes
    t.append(events(5, 5))
    assert rows(t.to_arrow()) == rows(events(0, 10))
    assert [s.files for s in t.segments()] == [1]


def test_missing_nullable_columns_are_null_and_a_missing_required_one_is_refused(
    mem_uri: str,
) -> None:
    """A nullable column the data lacks is written as nulls, in either schema mode, by append
    and overwrite alike; a non-nullable one is refused, naming it, and nothing is committed
    (docs/ENGINES.md, "Data in")."""
    t = cl.create_table(mem_uri, EVENTS)
    data = pa.table({"ts": events(0, 2).column("ts"), "id": [0, 1]})  # any column order
    with pytest.raises(cl.SchemaMismatchError, match=r"lacks the columns \['id'\] .*not nullable"):
        t.append(data.drop_columns(["id"]))
    with pytest.raises(cl.SchemaMismatchError, match=r"lacks the columns \['id'\]"):
        t.overwrite(data.drop_columns(["id"]), schema_mode="merge")
    assert t.refresh().version == 0
    assert t.append(data).version == 1
    assert t.append(data, schema_mode="merge").version == 2
    assert t.overwrite(data).version == 3
    got = t.to_arrow()
    assert got.schema.equals(EVENTS)
    assert got.column("id").to_pylist() == [0, 1]
    assert got.column("name").null_count == 2 and got.column("score").null_count == 2
    assert got.column("ts").to_pylist() == events(0, 2).column("ts").to_pylist()


def test_unicode_line_separators_in_data_keep_the_table_readable(mem_uri: str) -> None:
    """String statistics land in the JSON log; U+2028, U+2029 and U+0085 are text there."""
    t = cl.create_table(mem_uri, pa.schema([("s", pa.string())]))
    values = ["a\u2028b", "c\u2029d", "e\x85f", "plain"]
    t.append(pa.table({"s": values}), txn=("app\u2028id", 1))
    fresh = cl.open_table(mem_uri)
    assert fresh.version == 1
    assert fresh.to_arrow().column("s").to_pylist() == values
    assert fresh.transaction_version("app\u2028id") == 1
    assert fresh.to_arrow(filter=pc.field("s") == "e\x85f").column("s").to_pylist() == ["e\x85f"]


# --- schema evolution ----------------------------------------------------------------------------


def test_add_columns_reads_old_files_as_null(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS, properties={"blocklet_max_rows": "2"})
    t.append(events(0, 3))
    result = t.add_columns([pa.field("extra", pa.string()), pa.field("n", pa.int32())])
    assert (result.version, result.operation) == (2, "ADD COLUMNS")
    assert t.schema.names == [*EVENTS.names, "extra", "n"]
    t.append(
        events(3, 2)
        .append_column("extra", pa.array(["x", None]))
        .append_column("n", pa.array([7, 8], pa.int32()))
    )
    got = cl.open_table(mem_uri).to_arrow()
    assert got.column("extra").to_pylist() == [None, None, None, "x", None]
    assert got.column("n").to_pylist() == [None, None, None, 7, 8]
    assert got.column("id").to_pylist() == [0, 1, 2, 3, 4]
    # filters and projections on the new column see old files as nulls
    assert t.to_arrow(columns=["n"], filter=pc.field("n").is_null()).num_rows == 3
    assert t.to_arrow(columns=["id"], filter=pc.field("extra") == "x").column("id").to_pylist() == [
        3
    ]
    # versions before the change keep their schema
    assert t.to_arrow(version=1).schema.equals(EVENTS)
    assert rows(t.to_arrow(version=2)) == rows(
        events(0, 3)
        .append_column("extra", pa.nulls(3, pa.string()))
        .append_column("n", pa.nulls(3, pa.int32()))
    )
    record = t.history(limit=2)[1]
    assert (record.version, record.operation, record.data_change) == (2, "ADD COLUMNS", False)
    assert record.parameters == {"columns": "extra,n"}
    assert t.count_rows() == 5


def test_add_columns_refuses_existing_non_nullable_or_repeated(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    t.append(events(0, 2))
    cases = [
        (pa.field("name", pa.string()), "column 'name' already exists"),
        (pa.field("must", pa.int64(), nullable=False), "column 'must' must be nullable"),
        ([pa.field("x", pa.int8()), pa.field("x", pa.int8())], "column 'x' is given twice"),
        (pa.field("d", pa.dictionary(pa.int8(), pa.string())), "not supported"),
    ]
    for fields, expected in cases:
        with pytest.raises(cl.SchemaMismatchError) as info:
            t.add_columns(fields)
        assert expected in str(info.value)
        _assert_unchanged(t, 1, rows(events(0, 2)))
        assert cl.open_table(mem_uri).schema.equals(EVENTS)
    t.add_columns(pa.schema([("ok", pa.bool_())]))  # a Schema of new fields works too
    assert t.schema.names[-1] == "ok" and t.version == 2


def test_add_columns_then_same_writer_keeps_appending(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = cl.create_table(path, EVENTS, writer_id="w")
    t.append(events(0, 2))
    t.add_columns(pa.field("extra", pa.string()))
    t.append(events(2, 2).append_column("extra", pa.array(["a", "b"])))
    other = cl.open_table(path, writer_id="w")  # a new object of the same writer
    other.append(events(4, 1).append_column("extra", pa.array(["c"])))
    got = cl.open_table(path).to_arrow()
    assert got.column("id").to_pylist() == [0, 1, 2, 3, 4]
    assert got.column("extra").to_pylist() == [None, None, "a", "b", "c"]
    (segment,) = cl.open_table(path).segments()
    assert segment.files == 2  # one file per schema: the old one is not rewritten


# --- time travel, history, segments --------------------------------------------------------------


def test_time_travel_sees_each_version(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = cl.create_table(path, EVENTS, properties={"blocklet_max_rows": "4"})
    expected = {0: []}
    current: list[pa.Table] = []
    for v in range(1, 8):
        data = events(10 * v, v)
        if v == 5:
            t.overwrite(data)
            current = [data]
        else:
            t.append(data)
            current.append(data)
        expected[v] = rows(pa.concat_tables(current))
    fresh = cl.open_table(path)
    for version, want in expected.items():
        assert rows(fresh.to_arrow(version=version)) == want, version
        assert fresh.count_rows(version=version) == len(want)
        assert fresh.plan_splits(version=version).version == version
        assert fresh.snapshot(version).version == version
    assert [r["id"] for r in rows(fresh.to_arrow(version=3, columns=["id"]))] == [
        10,
        20,
        21,
        30,
        31,
        32,
    ]
    for bad in (8, 100, -1):
        with pytest.raises(cl.VersionNotFoundError):
            fresh.to_arrow(version=bad)
    with pytest.raises(cl.VersionNotFoundError, match="latest is 7"):
        fresh.count_rows(version=8)


def test_history_records_every_commit(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS, writer_id="hist")
    t.append(events(0, 3))
    t.append(events(3, 4), txn=("app", 7))
    t.add_columns(pa.field("extra", pa.string()))
    t.overwrite(events(10, 2), schema_mode="merge")  # without the column added: null
    t.append(events(0, 0))  # nothing to commit
    history = cl.open_table(mem_uri).history()
    assert [h.version for h in history] == [4, 3, 2, 1, 0]
    assert [h.operation for h in history] == [
        "OVERWRITE",
        "ADD COLUMNS",
        "APPEND",
        "APPEND",
        "CREATE TABLE",
    ]
    assert [h.data_change for h in history] == [True, False, True, True, False]
    assert [h.rows for h in history] == [2, 0, 4, 3, 0]
    assert [h.rows_removed for h in history] == [7, 0, 0, 0, 0]
    assert [h.read_version for h in history] == [3, 2, 1, 0, None]
    assert history[0].bytes_removed == sum(h.bytes for h in history[2:4]) > 0
    assert history[2].parameters == {
        "mode": "append",
        "writer_id": "hist",
        "app_id": "app",
        "batch_id": "7",
    }
    assert history[0].parameters["mode"] == "overwrite"
    times = [h.timestamp for h in reversed(history)]
    assert times == sorted(times)
    assert all(isinstance(ts, datetime.datetime) and ts.tzinfo is not None for ts in times)
    assert [h.version for h in t.history(limit=2)] == [4, 3]


def test_segments_and_count_rows(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS, properties={"blocklet_max_rows": "3"}, writer_id="w")
    t.append(events(0, 7))
    t.append(events(7, 2))
    (segment,) = t.segments()
    assert (segment.id, segment.status, segment.format) == ("0", "STREAMING", "STREAMING")
    assert (segment.rows, segment.files, segment.blocklets, segment.level) == (9, 1, 4, 0)
    assert segment.created_version == 1 and segment.merged_into is None
    assert segment.bytes == t.plan_splits().splits[0].committed_length > 0
    assert t.count_rows() == 9 == t.to_arrow().num_rows
    t.overwrite(events(100, 4))
    old, new = t.segments()
    assert (old.id, old.status, old.rows) == ("0", "MARKED_FOR_DELETE", 9)
    assert (new.id, new.status, new.rows, new.created_version) == ("1", "STREAMING", 4, 3)
    assert old.status_time >= old.created_time
    assert [s.status for s in t.segments(version=2)] == ["STREAMING"]
    assert t.count_rows() == 4 and t.count_rows(version=2) == 9


def test_overwrite_keeps_old_versions_readable(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = cl.create_table(path, EVENTS, writer_id="w")
    t.append(events(0, 3))
    t.append(events(3, 3))
    result = t.overwrite(events(50, 2))
    assert (result.version, result.operation, result.rows) == (3, "OVERWRITE", 2)
    assert rows(t.to_arrow()) == rows(events(50, 2))
    assert rows(t.to_arrow(version=2)) == rows(events(0, 6))
    assert (path / "segments" / "0" / "w-0.cblt").exists()  # nothing is deleted before clean
    t.append(events(60, 1))  # appends go to the overwrite's new segment
    assert [(s.id, s.status, s.rows) for s in t.segments()] == [
        ("0", "MARKED_FOR_DELETE", 6),
        ("1", "STREAMING", 3),
    ]
    assert rows(t.to_arrow()) == rows(pa.concat_tables([events(50, 2), events(60, 1)]))
    empty = t.overwrite(events(0, 0))  # overwrite with no rows empties the table
    assert empty.version == 5
    assert t.to_arrow().num_rows == 0 and t.count_rows() == 0
    assert [s.status for s in t.segments()] == ["MARKED_FOR_DELETE", "MARKED_FOR_DELETE"]
    assert rows(cl.open_table(path).to_arrow(version=4)) == rows(
        pa.concat_tables([events(50, 2), events(60, 1)])
    )
    t.append(events(70, 1))
    assert [s.id for s in t.segments()] == ["0", "1", "2"]
    assert rows(t.to_arrow()) == rows(events(70, 1))


def test_projection_and_bad_columns(mem_uri: str) -> None:
    t = cl.create_table(mem_uri, EVENTS)
    t.append(events(0, 4))
    got = t.to_arrow(columns=["score", "id"])
    assert got.schema.names == ["score", "id"]
    assert rows(got) == rows(events(0, 4).select(["score", "id"]))
    assert t.to_arrow(columns=[]).num_rows == 4
    with pytest.raises(cl.SchemaMismatchError, match="nope"):
        t.to_arrow(columns=["id", "nope"])
    with pytest.raises(cl.SchemaMismatchError, match="twice"):
        t.to_arrow(columns=["id", "id"])


def test_log_versions_are_ndjson_with_relative_paths(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = cl.create_table(path, EVENTS, writer_id="w")
    t.append(events(0, 2))
    lines = (path / "_carbonlite" / "log" / f"{1:020d}.json").read_text().split("\n")
    keys = [next(iter(json.loads(line))) for line in lines if line]
    assert keys == ["addSegment", "appendBlocklets", "commitInfo"]
    append = json.loads(lines[1])["appendBlocklets"]
    assert append["file"] == "segments/0/w-0.cblt" and str(tmp_path) not in lines[1]


# --- stateful model ------------------------------------------------------------------------------

MODEL_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("s", pa.string()),
        pa.field("f", pa.float64()),
        pa.field("ts", pa.timestamp("ms", tz="UTC")),
    ]
)
CHANGE_NAMES = ["_change_type", "_commit_version", "_commit_timestamp"]
EXTRA_TYPES = [pa.int32(), pa.string(), pa.float32(), pa.bool_(), pa.list_(pa.int16())]

_floats = st.sampled_from([0.0, -0.0, 1.5, -2.25, float("nan"), float("inf"), 1e300])
_strings = st.sampled_from(["", "a", "b", "é", "x" * 80])


def _value(t: pa.DataType) -> st.SearchStrategy:
    if pa.types.is_integer(t):
        return st.integers(-100, 100)
    if pa.types.is_floating(t):
        return _floats
    if pa.types.is_string(t):
        return _strings
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_list(t):
        return st.lists(st.integers(-5, 5) | st.none(), max_size=3)
    if pa.types.is_timestamp(t):
        return st.integers(0, 10**12).map(
            lambda ms: datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
        )
    raise AssertionError(t)


class TableModel(RuleBasedStateMachine):
    """Random appends, overwrites and schema changes against a list of expected tables, one per
    version; scans at the latest and at past versions must equal the model exactly, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.uri = memory_uri("model")
        self.next_id = 0

    @initialize(max_rows=st.integers(1, 7), segment_bytes=st.sampled_from(["1gb", "3kb"]))
    def create(self, max_rows: int, segment_bytes: str) -> None:
        self.table = cl.create_table(
            self.uri,
            MODEL_SCHEMA,
            properties={
                "blocklet_max_rows": str(max_rows),
                "streaming_segment_max_bytes": segment_bytes,
                "checkpoint_interval": "4",
            },
        )
        self.versions: list[pa.Table] = [MODEL_SCHEMA.empty_table()]
        self.operations = ["CREATE TABLE"]

    @property
    def schema(self) -> pa.Schema:
        return self.versions[-1].schema

    def _rows(self, data: st.DataObject) -> pa.Table:
        n = data.draw(st.integers(0, 12), label="rows")
        columns = {}
        for field in self.schema:
            if field.name == "id":
                columns["id"] = pa.array(range(self.next_id, self.next_id + n), pa.int64())
                continue
            values = data.draw(st.lists(_value(field.type) | st.none(), min_size=n, max_size=n))
            columns[field.name] = pa.array(values, field.type)
        self.next_id += n
        return pa.table(columns, schema=self.schema)

    def _commit(self, table: pa.Table, operation: str) -> None:
        assert self.table.version == len(self.versions)
        self.versions.append(table)
        self.operations.append(operation)

    @rule(data=st.data(), pieces=st.integers(1, 4), drop=st.booleans())
    def append(self, data: st.DataObject, pieces: int, drop: bool) -> None:
        new = self._rows(data)
        given = new
        nullable = [f.name for f in self.schema if f.nullable]
        if drop and nullable:  # leave out a nullable column: it reads as nulls
            name = data.draw(st.sampled_from(nullable))
            given = new.drop_columns([name])
            new = new.set_column(
                new.schema.get_field_index(name),
                self.schema.field(name),
                pa.nulls(new.num_rows, self.schema.field(name).type),
            )
        size = max(1, -(-given.num_rows // pieces))
        batches = given.to_batches(max_chunksize=size)
        mode = data.draw(st.sampled_from(["strict", "merge"]), label="schema_mode")
        result = self.table.append(batches, schema_mode=mode)
        if new.num_rows == 0:
            assert result.version is None and not result.skipped
            return
        assert result.rows == new.num_rows
        self._commit(pa.concat_tables([self.versions[-1], new]), "APPEND")

    @rule(data=st.data())
    def overwrite(self, data: st.DataObject) -> None:
        new = self._rows(data)
        result = self.table.overwrite(new)
        assert result.version == len(self.versions)
        self._commit(new, "OVERWRITE")

    @precondition(lambda self: len(self.schema) < 7)
    @rule(t=st.sampled_from(EXTRA_TYPES))
    def add_column(self, t: pa.DataType) -> None:
        field = pa.field(f"x{len(self.schema)}", t)
        self.table.add_columns(field)
        last = self.versions[-1]
        self._commit(last.append_column(field, pa.nulls(last.num_rows, t)), "ADD COLUMNS")

    @rule(data=st.data())
    def scan_past_version(self, data: st.DataObject) -> None:
        version = data.draw(st.integers(0, len(self.versions) - 1), label="version")
        reader = cl.open_table(self.uri) if data.draw(st.booleans()) else self.table
        got = reader.to_arrow(version=version)
        want = self.versions[version]
        assert got.schema.equals(want.schema)
        assert rows(got) == rows(want)
        assert reader.count_rows(version=version) == want.num_rows

    @rule(data=st.data())
    def scan_projected(self, data: st.DataObject) -> None:
        columns = data.draw(st.permutations(self.schema.names))[: data.draw(st.integers(0, 3))]
        got = self.table.to_arrow(columns=columns)
        assert got.num_rows == self.versions[-1].num_rows
        if columns:
            assert rows(got) == rows(self.versions[-1].select(columns))

    @precondition(lambda self: len(self.versions) > 1)
    @rule(data=st.data())
    def changes_of_one_version(self, data: st.DataObject) -> None:
        version = data.draw(st.integers(1, len(self.versions) - 1), label="changes of")
        changes = self.table.changes(version, version)
        before, after = self.versions[version - 1], self.versions[version]
        assert changes.schema.names == [*after.schema.names, *CHANGE_NAMES]
        assert set(changes.column("_commit_version").to_pylist()) <= {version}
        columns = after.schema.names
        inserted = changes.filter(pc.field("_change_type") == "insert").select(columns)
        deleted = changes.filter(pc.field("_change_type") == "delete").select(columns)
        operation = self.operations[version]
        if operation == "ADD COLUMNS":
            assert changes.num_rows == 0
        elif operation == "OVERWRITE":
            assert rows(deleted) == rows(before)
            assert rows(inserted) == rows(after)
        else:
            assert deleted.num_rows == 0
            assert rows(inserted) == rows(after.slice(before.num_rows))

    @invariant()
    def latest_matches(self) -> None:
        if not hasattr(self, "table"):
            return
        want = self.versions[-1]
        assert self.table.version == len(self.versions) - 1
        assert self.table.count_rows() == want.num_rows
        assert rows(self.table.to_arrow()) == rows(want)
        statuses = [s.status for s in self.table.segments()]
        assert statuses.count("STREAMING") <= 1
        assert set(statuses) <= {"STREAMING", "STREAMING_FINISH", "MARKED_FOR_DELETE"}

    def teardown(self) -> None:
        drop_memory(self.uri)


TableModel.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=16,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_table_model = TableModel.TestCase


def test_every_property_is_documented_with_its_default() -> None:
    """docs/PROPERTIES.md lists exactly the keys of PROPERTIES, with their defaults."""
    import re

    from carbonlite.properties import PROPERTIES

    page = (Path(__file__).resolve().parents[1] / "docs" / "PROPERTIES.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+)` \| `([^`]*)` \|", page, flags=re.MULTILINE)
    assert dict(rows) == {key: spec.default for key, spec in PROPERTIES.items()}
