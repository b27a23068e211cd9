"""A model-based test of schema evolution: the schema changes between appends, deletes,
updates, handoff and compaction, against a plain pyarrow model of the table.

Hypothesis runs random sequences of append (rows of the present schema, now and then leaving
out the columns that have defaults) / delete / update (filters over any present column,
renamed and widened ones included) / rename_column (to a fresh name, a name dropped before,
or a name another column had) / drop_columns / widen_column (every widening: integers,
float32, decimal precision, date to timestamp) / add_columns (with and without a default,
under fresh names and names dropped before) / finish_streaming and handoff / compact minor and
major / restore to an earlier version (its rows, names, types and defaults) / reopening
the table, on a table whose blocklets hold a few rows (pruning by
statistics matters), sorted by a column that is renamed and widened too, and checkpointed
every few versions. The model is one ``pyarrow.Table`` per version: a rename renames its
column, a drop drops it, a widening casts it, an added column is its default (or nulls).

After every step the latest version reads as the model and filtered scans over every numeric
column keep exactly the model's rows (pruning never drops a matching row). At the end every
version reads, by time travel, as the model's state at that version (names, types, rows; the
row order is ignored), on the handle and on a freshly opened table, ``verify`` is clean, and
``changes`` of each append and from the first version (read with the latest schema) hold the
model's rows.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import carbonlite as cl
from tests.support.tables import drop_memory

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("k", pa.int8()),
        pa.field("a", pa.int16()),
        pa.field("b", pa.float32()),
        pa.field("m", pa.decimal128(5, 2)),
        pa.field("s", pa.string()),
        pa.field("d", pa.date32()),
    ]
)
"""``id`` identifies rows (never updated, so rows can be matched); ``k`` is the sort column."""

NAMES = ["k", "a", "b", "m", "s", "d", "x", "y", "z"]
"""Names columns are renamed to and added under: the original ones come back after a rename
or a drop, so a new column meets pages of an old one of its name."""

WIDER = {
    pa.int8(): [pa.int16(), pa.int32(), pa.int64()],
    pa.int16(): [pa.int32(), pa.int64()],
    pa.int32(): [pa.int64()],
    pa.float32(): [pa.float64()],
    pa.decimal128(5, 2): [pa.decimal128(9, 2), pa.decimal128(20, 2)],
    pa.decimal128(9, 2): [pa.decimal128(20, 2)],
    pa.decimal128(7, 3): [pa.decimal128(12, 3)],
    pa.date32(): [pa.timestamp("us"), pa.timestamp("ms", tz="UTC")],
}

ADDED_TYPES = [
    pa.int8(),
    pa.int32(),
    pa.string(),
    pa.float32(),
    pa.date32(),
    pa.decimal128(7, 3),
    pa.timestamp("ms", tz="UTC"),
    pa.bool_(),
]

CHANGE_COLUMNS = ["_change_type", "_commit_version", "_commit_timestamp"]

_INT_RANGE = {8: 120, 16: 30_000, 32: 2_000_000_000, 64: 9_000_000_000_000_000_000}
_DAY0 = datetime.date(2024, 1, 1)


@st.composite
def values(draw: st.DrawFn, t: pa.DataType, n: int, *, nulls: bool = True) -> pa.Array:
    """``n`` values of type ``t``, nulls now and then; values near the type's edges too, so a
    widened column's statistics meet values its old type could not hold."""
    if pa.types.is_integer(t):
        top = _INT_RANGE[t.bit_width]
        element: st.SearchStrategy[Any] = st.one_of(
            st.integers(-5, 20), st.integers(-top, top), st.sampled_from([-top, top])
        )
    elif pa.types.is_floating(t):
        element = st.sampled_from([0.0, 0.5, -1.25, 3.0, 7.75, 1e30])
    elif pa.types.is_decimal(t):
        whole = 10 ** (t.precision - t.scale) - 1
        element = st.builds(
            lambda u, c: decimal.Decimal(u) + decimal.Decimal(c) / 100,
            st.sampled_from([0, 1, 7, -3, whole - 1, -whole + 1]),
            st.integers(0, 99),
        )
    elif pa.types.is_boolean(t):
        element = st.booleans()
    elif pa.types.is_string(t):
        element = st.sampled_from(["", "a", "b", "cc", "zz"])
    elif pa.types.is_date32(t):
        element = st.integers(-3, 40).map(lambda d: _DAY0 + datetime.timedelta(days=d))
    else:
        assert pa.types.is_timestamp(t), t
        element = st.integers(-3 * 86400, 40 * 86400).map(
            lambda s: datetime.datetime(2024, 1, 1) + datetime.timedelta(seconds=s)
        )
    item = st.one_of(st.none(), element, element) if nulls else element
    items = draw(st.lists(item, min_size=n, max_size=n))
    return pa.array(items, t)


def default_of(data: st.DataObject, t: pa.DataType) -> Any:
    """A value of type ``t`` (not null)."""
    return data.draw(values(t, 1, nulls=False))[0].as_py()


@dataclass
class Version:
    rows: pa.Table
    defaults: dict[str, Any]


def matched_ids(rows: pa.Table, id_name: str, filter: pc.Expression) -> set[int]:
    return set(rows.filter(filter).column(id_name).to_pylist())


def same(got: pa.Table, want: pa.Table, id_name: str, what: str) -> None:
    """Equal names, types and rows, the rows in any order (sorted by the id column)."""
    got_types = [(f.name, f.type) for f in got.schema]
    want_types = [(f.name, f.type) for f in want.schema]
    assert got_types == want_types, f"{what}: schema {got_types}, model {want_types}"
    g = got.sort_by(id_name).to_pylist()
    w = want.sort_by(id_name).to_pylist()
    if g != w:
        extra = [r for r in g if r not in w][:3]
        missing = [r for r in w if r not in g][:3]
        raise AssertionError(
            f"{what}: {len(g)} rows, model {len(w)}; not in the model {extra}, missing {missing}"
        )


class SchemaEvolution(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.uri = f"memory://schema-model-{uuid.uuid4().hex}"
        self.table: cl.Table | None = None
        self.versions: list[Version] = []
        self.next_id = 0
        self.updated: set[int] = set()
        self.restored = False
        """Ids of rows an update rewrote (their inserted values are no longer the latest)."""

    # --- set-up -----------------------------------------------------------------------------

    @initialize(
        blocklet_rows=st.sampled_from(["2", "3", "5"]),
        checkpoint=st.sampled_from(["2", "3"]),
    )
    def create(self, blocklet_rows: str, checkpoint: str) -> None:
        self.table = cl.create_table(
            self.uri,
            SCHEMA,
            sort_columns=["k"],
            properties={
                "blocklet_max_rows": blocklet_rows,
                "handoff_blocklet_rows": "4",
                "streaming_segment_max_bytes": "3KB",
                "checkpoint_interval": checkpoint,
                "compaction_level_threshold": "2,2",
            },
        )
        self.versions.append(Version(SCHEMA.empty_table(), {}))

    def teardown(self) -> None:
        try:
            if self.table is not None:
                self._every_version(self.t, "the handle")
                self._changes_in_the_latest_schema()
                self._every_version(cl.open_table(self.uri), "a reopened table")
                result = self.t.verify()
                assert result.ok, result.problems
        finally:
            drop_memory(self.uri)

    @property
    def t(self) -> cl.Table:
        assert self.table is not None
        return self.table

    @property
    def rows(self) -> pa.Table:
        return self.versions[-1].rows

    @property
    def id_name(self) -> str:
        """The id column: the first one (never dropped; a rename keeps a column's place)."""
        return self.rows.schema.names[0]

    @property
    def sort_name(self) -> str:
        """The sort column: the second one (never dropped either)."""
        return self.rows.schema.names[1]

    @property
    def defaults(self) -> dict[str, Any]:
        return self.versions[-1].defaults

    def _commit(self, version: int | None, rows: pa.Table, defaults: dict[str, Any]) -> None:
        assert version == len(self.versions), f"committed {version}, model at {len(self.versions)}"
        self.versions.append(Version(rows, defaults))

    def _maintained(self, versions: tuple[int, ...] | list[int]) -> None:
        assert list(versions) == list(range(len(self.versions), self.t.refresh().version + 1))
        self.versions.extend([self.versions[-1]] * len(versions))

    def _columns(self, *, numeric: bool = False, changeable: bool = False) -> list[str]:
        out = []
        for f in self.rows.schema:
            if changeable and f.name in (self.id_name, self.sort_name):
                continue
            if numeric and not (
                pa.types.is_integer(f.type)
                or pa.types.is_floating(f.type)
                or pa.types.is_decimal(f.type)
                or pa.types.is_temporal(f.type)
            ):
                continue
            out.append(f.name)
        return out

    # --- data rules -------------------------------------------------------------------------

    @rule(n=st.integers(1, 8), leave_out_defaults=st.booleans(), data=st.data())
    def append(self, n: int, leave_out_defaults: bool, data: st.DataObject) -> None:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        columns = {}
        for f in self.rows.schema:
            if f.name == self.id_name:
                columns[f.name] = pa.array(ids, f.type)
            else:
                columns[f.name] = data.draw(values(f.type, n))
        full = pa.table(columns, schema=self.rows.schema)
        given = full
        left_out = [c for c in self.defaults if leave_out_defaults]
        if left_out:
            given = full.drop_columns(left_out)
            for name in left_out:
                i = full.schema.get_field_index(name)
                filled = pa.array([self.defaults[name]] * n, full.schema.field(i).type)
                full = full.set_column(i, full.schema.field(i), filled)
            event("append leaving out columns with defaults")
        result = self.t.append(given)
        self._commit(result.version, pa.concat_tables([self.rows, full]), self.defaults)
        assert result.version is not None
        changes = self.t.changes(result.version, result.version)
        same(changes.drop_columns(CHANGE_COLUMNS), full, self.id_name, "changes() of an append")

    def _filter(self, data: st.DataObject) -> pc.Expression:
        name = data.draw(st.sampled_from(self._columns(numeric=True)))
        column = self.rows.column(name).drop_null()
        if len(column) == 0:
            return pc.field(name).is_null()
        pivot = data.draw(st.sampled_from(column.to_pylist()))
        op = data.draw(st.sampled_from(["<=", ">=", "=="]))
        event(f"filter on {'a changed' if name not in SCHEMA.names else 'an original'} column")
        field, value = pc.field(name), pa.scalar(pivot, column.type)
        return field <= value if op == "<=" else field >= value if op == ">=" else field == value

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        filter = self._filter(data)
        gone = matched_ids(self.rows, self.id_name, filter)
        result = self.t.delete(filter)
        assert result.rows == len(gone), f"delete {filter}: {result.rows}, model {len(gone)}"
        if gone:
            keep = pc.invert(pc.is_in(self.rows.column(self.id_name), pa.array(sorted(gone))))
            self._commit(result.version, self.rows.filter(keep), self.defaults)
        else:
            assert result.version is None

    @rule(data=st.data())
    def update(self, data: st.DataObject) -> None:
        """Any column but the id (the sort column too)."""
        filter = self._filter(data)
        name = data.draw(st.sampled_from(self.rows.schema.names[1:]))
        i = self.rows.schema.get_field_index(name)
        value = default_of(data, self.rows.schema.field(i).type)
        hit = matched_ids(self.rows, self.id_name, filter)
        result = self.t.update(filter, {name: value})
        assert result.rows == len(hit), f"update {filter}: {result.rows}, model {len(hit)}"
        if not hit:
            assert result.version is None
            return
        self.updated |= hit
        mask = pc.is_in(self.rows.column(self.id_name), pa.array(sorted(hit)))
        column = pc.if_else(mask, pa.scalar(value, self.rows.schema.field(i).type), self.rows[name])
        self._commit(
            result.version,
            self.rows.set_column(i, self.rows.schema.field(i), column),
            self.defaults,
        )

    # --- schema rules -----------------------------------------------------------------------

    @rule(data=st.data())
    def rename(self, data: st.DataObject) -> None:
        old = data.draw(st.sampled_from(self.rows.schema.names))
        free = [n for n in [*NAMES, "id", "id2"] if n not in self.rows.schema.names]
        if not free:
            return
        new = data.draw(st.sampled_from(free))
        event(
            f"rename {'the id' if old == self.id_name else 'the sort' if old == self.sort_name else 'a'} column"
        )
        result = self.t.rename_column(old, new)
        names = [new if n == old else n for n in self.rows.schema.names]
        defaults = {new if n == old else n: v for n, v in self.defaults.items()}
        self._commit(result.version, self.rows.rename_columns(names), defaults)

    @precondition(lambda self: self.table is not None and self._columns(changeable=True))
    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        candidates = self._columns(changeable=True)
        names = data.draw(
            st.lists(st.sampled_from(candidates), min_size=1, max_size=2, unique=True)
        )
        result = self.t.drop_columns(names)
        defaults = {n: v for n, v in self.defaults.items() if n not in names}
        self._commit(result.version, self.rows.drop_columns(names), defaults)

    @rule(data=st.data())
    def widen(self, data: st.DataObject) -> None:
        widenable = [f for f in self.rows.schema if f.type in WIDER and f.name != self.id_name]
        if not widenable:
            return
        f = data.draw(st.sampled_from(widenable))
        new_type = data.draw(st.sampled_from(WIDER[f.type]))
        event(f"widen {f.type} -> {new_type}")
        result = self.t.widen_column(f.name, new_type)
        i = self.rows.schema.get_field_index(f.name)
        rows = self.rows.set_column(i, f.with_type(new_type), self.rows[f.name].cast(new_type))
        defaults = dict(self.defaults)
        if f.name in defaults:
            defaults[f.name] = pa.scalar(defaults[f.name], f.type).cast(new_type).as_py()
        self._commit(result.version, rows, defaults)

    @rule(data=st.data(), with_default=st.booleans(), t=st.sampled_from(ADDED_TYPES))
    def add(self, data: st.DataObject, with_default: bool, t: pa.DataType) -> None:
        free = [n for n in NAMES if n not in self.rows.schema.names]
        if not free:
            return
        name = data.draw(st.sampled_from(free))
        default = default_of(data, t) if with_default else None
        event(f"add a column {'with' if with_default else 'without'} a default")
        result = self.t.add_columns(
            [pa.field(name, t)], defaults={name: default} if with_default else None
        )
        column = pa.array([default] * self.rows.num_rows, t)
        defaults = {**self.defaults, **({name: default} if with_default else {})}
        self._commit(result.version, self.rows.append_column(pa.field(name, t), column), defaults)

    @precondition(lambda self: len(self.versions) > 2)
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        """Back to an earlier version's rows and schema (its names, types and defaults)."""
        target = data.draw(st.integers(1, len(self.versions) - 2))
        state = self.versions[target]
        result = self.t.restore(target)
        self.restored = True
        event(f"restore: {'skipped' if result.version is None else 'committed'}")
        if result.version is None:
            same(self.rows, state.rows, self.id_name, f"restore({target}) changed nothing")
            return
        self._commit(result.version, state.rows, state.defaults)

    # --- maintenance rules ------------------------------------------------------------------

    @rule()
    def handoff(self) -> None:
        closed = self.t.finish_streaming()
        if closed is not None:
            self._maintained([self.t.version])
        result = self.t.handoff()
        event(f"handoff: {len(result.versions)} versions")
        self._maintained(result.versions)

    @rule(kind=st.sampled_from(["minor", "major"]))
    def compact(self, kind: str) -> None:
        result = self.t.compact(kind)
        event(f"compact {kind}: {len(result.versions)} versions")
        self._maintained(result.versions)

    @rule()
    def reopen(self) -> None:
        """A fresh handle: the latest version from checkpoints and manifests."""
        self.table = cl.open_table(self.uri)

    # --- checks -----------------------------------------------------------------------------

    @invariant()
    def latest_reads_as_the_model(self) -> None:
        if self.table is None:
            return
        assert self.t.refresh().version == len(self.versions) - 1
        same(self.t.to_arrow(), self.rows, self.id_name, "the latest version")
        assert self.t.count_rows() == self.rows.num_rows

    @invariant()
    def filters_keep_the_models_rows(self) -> None:
        """A filter on each numeric column (renamed and widened ones included), at a value the
        column holds: pruning by statistics never drops a row the filter keeps."""
        if self.table is None or self.rows.num_rows == 0:
            return
        for name in self._columns(numeric=True):
            column = self.rows.column(name).drop_null()
            if len(column) == 0:
                continue
            for pivot in (pc.min(column), pc.max(column)):
                for filter in (pc.field(name) == pivot, pc.field(name) < pivot):
                    want = self.rows.filter(filter)
                    got = self.t.to_arrow(filter=filter)
                    same(got, want, self.id_name, f"the scan with {filter}")

    def _changes_in_the_latest_schema(self) -> None:
        """``changes`` from the first version reads every version's files with the latest
        schema: a row inserted and neither updated nor deleted since holds its latest values
        (renamed, cast up, dropped columns gone, added ones their default). Not after a
        restore: one to a version before a widening makes changes() read values written in
        the wider type with the narrower one, and pyarrow's ArrowInvalid escapes (open)."""
        if self.restored or len(self.versions) < 2:
            return
        changes = self.t.changes(1)
        inserted = changes.filter(pc.field("_change_type") == "insert").drop_columns(CHANGE_COLUMNS)
        latest = self.rows
        assert inserted.schema.names == latest.schema.names, inserted.schema
        updated = pa.array(sorted(self.updated), pa.int64())
        want = latest.filter(pc.invert(pc.is_in(latest[self.id_name], updated)))
        got = inserted.filter(pc.is_in(inserted[self.id_name], want[self.id_name]))
        got_rows = {tuple(r.items()) for r in got.to_pylist()}
        want_rows = {tuple(r.items()) for r in want.to_pylist()}
        assert got_rows == want_rows, (
            f"changes(1) in the latest schema: not in the model {list(got_rows - want_rows)[:3]}, "
            f"missing {list(want_rows - got_rows)[:3]}"
        )

    def _every_version(self, table: cl.Table, what: str) -> None:
        assert table.version == len(self.versions) - 1
        for version, state in enumerate(self.versions):
            got = table.to_arrow(version=version)
            same(got, state.rows, _id_at(state.rows), f"{what}, version {version}")


def _id_at(rows: pa.Table) -> str:
    """The id column of a version (the first column: renames keep its place)."""
    return rows.schema.names[0]


SETTINGS = settings(
    max_examples=4,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestSchemaEvolution = SchemaEvolution.TestCase
TestSchemaEvolution.settings = SETTINGS


@pytest.mark.slow
class TestSchemaEvolutionMany(SchemaEvolution.TestCase):  # type: ignore[name-defined]
    settings = settings(SETTINGS, max_examples=25, stateful_step_count=40)


def test_a_widened_date_keeps_its_default_as_a_timestamp() -> None:
    """Found by the model: widening a date column with a default to a timestamp kept the
    default a ``datetime.date``, which the log could not write (an ArrowTypeError escaped)."""
    uri = f"memory://schema-default-{uuid.uuid4().hex}"
    try:
        t = cl.create_table(uri, pa.schema([pa.field("id", pa.int64())]))
        t.append(pa.table({"id": [1]}))
        t.add_columns([pa.field("d", pa.date32())], defaults={"d": _DAY0})
        t.widen_column("d", pa.timestamp("ms", tz="UTC"))
        t.append(pa.table({"id": [2]}))
        midnight = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
        want = [{"id": 1, "d": midnight}, {"id": 2, "d": midnight}]
        for table in (t, cl.open_table(uri)):
            assert table.schema.field("d").type == pa.timestamp("ms", tz="UTC")
            assert table.to_arrow().sort_by("id").to_pylist() == want
    finally:
        drop_memory(uri)


def test_a_column_added_after_a_widened_date_was_dropped_never_reads_its_pages() -> None:
    """Found by the model's slow tier: a date widened to a timestamp (its pages stay under
    the old physical name in older files), then dropped, then a column added under the same
    name took that old physical name, so rows written before read the dropped dates (cast to
    strings) instead of the default. A drop now keeps the older physical names too."""
    uri = f"memory://schema-dropped-{uuid.uuid4().hex}"
    try:
        t = cl.create_table(uri, pa.schema([("id", pa.int64()), ("d", pa.date32())]))
        t.append(pa.table({"id": [1], "d": [_DAY0]}))
        t.widen_column("d", pa.timestamp("us"))
        t.drop_columns(["d"])
        t.add_columns([pa.field("d", pa.string())], defaults={"d": "zz"})
        for table in (t, cl.open_table(uri)):
            assert table.to_arrow().to_pylist() == [{"id": 1, "d": "zz"}]
            assert table.to_arrow(filter=pc.field("d") == "zz").num_rows == 1
    finally:
        drop_memory(uri)


def test_a_column_added_after_a_restore_removed_one_of_its_name_is_a_new_column() -> None:
    """Found probing restore beside the model: a restore to a version before a column was
    added forgot its id and physical name, so a column added again under the name took both,
    and ``changes`` across the restore read the removed column's pages as the new column's
    (``'5'`` for the int 5). The restored metadata now counts such columns as dropped and
    keeps ``last_column_id``."""
    uri = f"memory://schema-restore-{uuid.uuid4().hex}"
    try:
        t = cl.create_table(uri, pa.schema([("id", pa.int64())]))
        t.add_columns([pa.field("x", pa.int32())])
        t.append(pa.table({"id": [1], "x": pa.array([5], pa.int32())}))
        t.restore(0)
        t.add_columns([pa.field("x", pa.string())], defaults={"x": "zz"})
        t.append(pa.table({"id": [2]}))
        changes = t.changes(1).select(["id", "x", "_change_type"]).to_pylist()
        assert changes == [
            {"id": 1, "x": "zz", "_change_type": "insert"},
            {"id": 1, "x": "zz", "_change_type": "delete"},
            {"id": 2, "x": "zz", "_change_type": "insert"},
        ]
        t.restore(2)  # the int column comes back, with its values
        for table in (t, cl.open_table(uri)):
            assert table.schema.field("x").type == pa.int32()
            assert table.to_arrow().to_pylist() == [{"id": 1, "x": 5}]
    finally:
        drop_memory(uri)


def test_changes_across_a_restore_of_a_segment_with_deleted_rows() -> None:
    """Found by the model once it restored: a restore copies a segment whose rows were partly
    deleted into a new segment with the deletion vector in the same version, and changes()
    of that version raised a bare KeyError (it looked for the new segment in the version
    before). The copy's deleted rows were never visible: neither inserted nor deleted."""
    uri = f"memory://schema-restore-dv-{uuid.uuid4().hex}"
    try:
        t = cl.create_table(uri, pa.schema([("id", pa.int64())]))
        t.append(pa.table({"id": [1, 2, 3]}))
        t.delete(pc.field("id") == 2)
        t.append(pa.table({"id": [4]}))
        version = t.restore(2).version
        assert version is not None
        got = t.changes(version).select(["id", "_change_type"]).to_pylist()
        assert sorted((r["_change_type"], r["id"]) for r in got) == [
            ("delete", 1),
            ("delete", 3),
            ("delete", 4),
            ("insert", 1),
            ("insert", 3),
        ]
    finally:
        drop_memory(uri)
