"""Helpers shared by the tests of lookups that bloom filters and secondary indexes prune
(tests/reader/test_bloom_*.py, tests/reader/test_secondary_index*.py).

Two kinds of tables:

- Differential tables of one typed column ``k`` (beside ``n``, unique, and ``other``): value
  pools of each column type, the tables' schema and batches, a strategy of lookups of present
  and absent values, and rows made comparable (NaN included) to check them against pyarrow's
  filter of every appended row.
- :class:`Interleaved` tables of ``n``, ``id`` and ``name`` whose ids are even and interleaved
  across tiny blocklets, so min/max cannot prune a lookup of an odd id and only the bloom
  filters or secondary indexes can: their rows, tables, the lookups checked against a model
  and the assertions that the filters or indexes prune.

Then the files of a table (data files, side files on disk, side files the log names) and the
per-process cache of side files, emptied before each test by :func:`fresh_side_file_cache`
(import it into a test module to use it there).
"""

from __future__ import annotations

import datetime
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import carbonlite as cl
from carbonlite.reader import bloom_prune
from carbonlite.reader.planner import ScanPlan

__all__ = [
    "BLOCKLET",
    "BLOOM_TABLES",
    "INDEXED_KINDS",
    "INDEX_TABLES",
    "SCHEMA",
    "SETTINGS",
    "VALUE_OF",
    "IndexKind",
    "Interleaved",
    "append_batches",
    "appended",
    "assert_bloom_prunes",
    "assert_index_prunes",
    "batch",
    "check_counts",
    "check_lookups",
    "comparable_rows",
    "damage",
    "data_files",
    "forget_side_files",
    "fresh_side_file_cache",
    "indexed_blocklets",
    "interleaved_ids",
    "kschema",
    "live_indexes",
    "lookups",
    "new_ktable",
    "plan_of",
    "pool",
    "referenced_side_files",
    "reopened_from_checkpoint",
    "side_files",
    "sorted_rows",
]

IndexKind = Literal["bloom", "secondary"]
"""Bloom filters (``bloom_filter_columns``, ``*.bloom`` files) or secondary indexes
(``secondary_index_columns``, ``*.sidx`` files)."""

_COLUMNS_PROPERTY: dict[IndexKind, str] = {
    "bloom": "bloom_filter_columns",
    "secondary": "secondary_index_columns",
}
_SUFFIX: dict[IndexKind, str] = {"bloom": ".bloom", "secondary": ".sidx"}


# --- the per-process cache of side files ------------------------------------------------------


@pytest.fixture(autouse=True)
def fresh_side_file_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bloom and index files are cached per process: start every test with an empty cache."""
    monkeypatch.setattr(bloom_prune, "SHARED_CACHE", bloom_prune.BloomFileCache())


def forget_side_files() -> None:
    """Make the next plan read bloom and index files again (after they were damaged on
    disk)."""
    bloom_prune.SHARED_CACHE = bloom_prune.BloomFileCache()


# --- differential tables of one typed column k -----------------------------------------------

_EPOCH = datetime.datetime(2026, 1, 1)
_DAY0 = datetime.date(2020, 1, 1)

# Per column type, value(i) is an injective map of integers to values: stored rows use a
# small pool of them, lookups of absent values use others.
VALUE_OF: dict[str, tuple[pa.DataType, Callable[[int], Any]]] = {
    "int32": (pa.int32(), lambda i: i * 3 - 50),
    "int64": (pa.int64(), lambda i: i * 1_000_003 - 2**40),
    "uint64": (pa.uint64(), lambda i: 2**63 - 30 + i * 5),  # crosses 2**63
    "string": (pa.string(), lambda i: f"user-{i}"),
    "binary": (pa.binary(), lambda i: f"key\x00{i}".encode()),
    "date32": (pa.date32(), lambda i: _DAY0 + datetime.timedelta(days=i)),
    "timestamp_us": (
        pa.timestamp("us"),
        lambda i: _EPOCH + datetime.timedelta(microseconds=i * 1_001),
    ),
    "timestamp_ns_utc": (pa.timestamp("ns", tz="UTC"), lambda i: 1_767_225_600 * 10**9 + i * 7),
    "decimal": (pa.decimal128(10, 2), lambda i: Decimal(i * 37 - 500).scaleb(-2)),
    "float64": (pa.float64(), lambda i: i * 0.5 - 3.0),
    # beyond the brief's list: more types filters are built for
    "float32": (pa.float32(), lambda i: i * 0.25 - 2.0),
    "fixed_binary": (pa.binary(4), lambda i: b"%04d" % i),
    "large_string": (pa.large_string(), lambda i: "é" * (i % 3) + str(i)),
    "time64": (pa.time64("us"), lambda i: datetime.time(0, i // 60 % 60, i % 60, i * 7 % 999_999)),
    "duration": (pa.duration("ms"), lambda i: datetime.timedelta(milliseconds=i * 1_001)),
    "timestamp_s_tz": (pa.timestamp("s", tz="Europe/Paris"), lambda i: 1_700_000_000 + i * 61),
}
INDEXED_KINDS = ("float64", "int64", "string")
"""The kinds of ``VALUE_OF`` the secondary index tests run on."""

FLOAT_SPECIALS = [-0.0, 0.0, math.nan]
POOL = range(0, 24, 2)  # stored values: value(i) for even i in here ...


def absent_pool(far: int) -> list[int]:
    """... never these: odd ones of the pool's range, and ``far`` ones far out."""
    return [*range(1, 24, 2), *range(1_000, 1_000 + far)]


def pool(kind: str) -> list[Any]:
    """The values rows of ``kind`` store (floats with -0.0, 0.0 and NaN too)."""
    value = VALUE_OF[kind][1]
    out = [value(i) for i in POOL]
    return out + FLOAT_SPECIALS if kind.startswith("float") else out


def kschema(kind: str) -> pa.Schema:
    return pa.schema(
        [
            pa.field("n", pa.int64(), nullable=False),
            pa.field("k", VALUE_OF[kind][0]),
            pa.field("other", pa.int64()),
        ]
    )


def batch(kind: str, values: list[Any], first: int) -> pa.Table:
    """Rows ``n = first..`` holding ``values`` in ``k``."""
    n = list(range(first, first + len(values)))
    return pa.table(
        {
            "n": n,
            "k": pa.array(values, VALUE_OF[kind][0]),
            "other": [(i * 7919) % 101 for i in n],
        },
        schema=kschema(kind),
    )


def appended(kind: str) -> st.SearchStrategy[list[list[Any]]]:
    """One to four batches of values of ``kind`` (or nulls)."""
    values = st.sampled_from(pool(kind)) | st.none()
    return st.lists(st.lists(values, min_size=1, max_size=40), min_size=1, max_size=4)


def new_ktable(
    root: Path, kind: str, properties: dict[str, str], sort_columns: Sequence[str] = ()
) -> cl.Table:
    """A fresh table of :func:`kschema` under ``root``."""
    return cl.create_table(
        str(root / f"t-{uuid.uuid4().hex[:12]}"),
        kschema(kind),
        sort_columns=sort_columns,
        properties=properties,
    )


def append_batches(
    t: cl.Table, kind: str, batches: list[list[Any]], *, handoff_each: bool = False
) -> list[pa.Table]:
    """Append each of ``batches`` (:func:`batch`, ``n`` counting on from 0), with
    ``handoff_each`` handing each off; the batches appended, in order."""
    parts: list[pa.Table] = []
    first = 0
    for values in batches:
        part = batch(kind, values, first)
        first += len(values)
        t.append(part)
        parts.append(part)
        if handoff_each:
            t.finish_streaming()
            t.handoff()
    return parts


def comparable_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows sorted by ``n`` (unique), NaN made comparable."""
    table = table.sort_by("n")
    columns = [table.column(c).to_pylist() for c in ("n", "k", "other")]
    return [
        tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)
        for row in zip(*columns, strict=True)
    ]


@st.composite
def lookups(
    draw: st.DrawFn,
    kind: str,
    stored: list[Any],
    *,
    absent_far: int,
    big_isin: int,
    shuffle: bool,
) -> pc.Expression:
    """A filter a bloom filter or index of ``k`` can serve (or a conjunct of one): absent
    values from :func:`absent_pool` of ``absent_far``, memberships of up to ``big_isin``
    values (with ``shuffle``, small ones in a drawn order)."""
    column_type, value = VALUE_OF[kind]
    present = [v for v in stored if v is not None] or pool(kind)
    absent = [value(i) for i in absent_pool(absent_far)]
    any_value = st.sampled_from(present) | st.sampled_from(absent)

    def eq(v: Any) -> pc.Expression:
        if draw(st.booleans()):
            return pc.field("k") == pa.scalar(v, column_type)
        return pc.scalar(pa.scalar(v, column_type)) == pc.field("k")  # literal first

    shape = draw(st.sampled_from(["present", "absent", "isin", "big_isin", "or", "and_range"]))
    if shape == "present":
        return eq(draw(st.sampled_from(present)))
    if shape == "absent":
        return eq(draw(st.sampled_from(absent)))
    if shape in ("isin", "big_isin"):
        size = (0, 6) if shape == "isin" else (50, big_isin)
        values = draw(st.lists(st.sampled_from(absent), min_size=size[0], max_size=size[1]))
        values += draw(st.lists(st.sampled_from(present), max_size=2))
        if shuffle:
            values = draw(st.permutations(values)) if len(values) < 20 else values
        if not values:
            values = [absent[0]]
        if draw(st.integers(0, 4)) == 0:
            values.append(None)  # matches null rows: the filters cannot refute it
        return pc.field("k").isin(pa.array(values, column_type))
    if shape == "or":
        return eq(draw(any_value)) | eq(draw(any_value))
    low = draw(st.integers(0, 100))
    return eq(draw(any_value)) & (pc.field("other") >= low) & (pc.field("n") < 10_000)


SETTINGS = settings(
    max_examples=4,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
"""The default tier's differential tests; the slow tier raises ``max_examples``."""


# --- plans -----------------------------------------------------------------------------------


def check_counts(plan: ScanPlan, *, deletes: bool = False) -> None:
    """partition + stats + index + bloom + selected == total; with deletes, blocklets whose
    rows are all deleted are skipped without a count of their own."""
    counted = (
        plan.blocklets_pruned_by_partition
        + plan.blocklets_pruned_by_stats
        + plan.blocklets_pruned_by_index
        + plan.blocklets_pruned_by_bloom
        + plan.blocklets_selected
    )
    if deletes:
        assert counted <= plan.blocklets_total, plan
    else:
        assert counted == plan.blocklets_total, plan
    assert plan.blocklets_selected + plan.blocklets_pruned == plan.blocklets_total
    assert min(plan.blocklets_pruned_by_index, plan.blocklets_pruned_by_bloom) >= 0


def plan_of(t: cl.Table, expression: Any, *, deletes: bool = False) -> ScanPlan:
    """The table's plan of ``expression``, its counts checked (:func:`check_counts`)."""
    plan = t.plan_splits(filter=expression)
    check_counts(plan, deletes=deletes)
    return plan


# --- tables of interleaved ids ----------------------------------------------------------------

BLOCKLET = 8
"""Rows per blocklet of :class:`Interleaved` tables."""

SCHEMA = pa.schema(
    [
        pa.field("n", pa.int64(), nullable=False),
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
    ]
)


def interleaved_ids(total: int, first: int = 0, count: int | None = None) -> list[int]:
    """Even numbers ``0 .. 2 * total - 2`` for rows ``first ..`` in an order that puts small
    and large ones in every blocklet."""
    count = total - first if count is None else count
    return [2 * ((i * 37) % total) for i in range(first, first + count)]


def reopened_from_checkpoint(t: cl.Table, root: Path) -> cl.Table:
    """Three commits (property changes) so that a table checkpointing every two versions has
    a checkpoint; then a new handle of the table at ``root``, loaded from it."""
    for k in range(3):
        t.set_properties({"user.note": str(k)})
    assert list((root / "_carbonlite" / "log").glob("*.checkpoint.json"))
    return cl.open_table(str(root))


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.sort_by("n").to_pylist()


def check_lookups(t: cl.Table, model: pa.Table, lookups: Sequence[Any]) -> None:
    """Every lookup returns exactly the rows ``model`` holds for it."""
    for expression in lookups:
        got = t.to_arrow(filter=expression)
        expected = model.filter(expression)
        assert sorted_rows(got) == sorted_rows(expected), f"filter {expression}"


@dataclass(frozen=True)
class Interleaved:
    """Tables of :data:`SCHEMA` with ``total`` rows, ids even and interleaved, blocklets of
    :data:`BLOCKLET` rows, ``id`` and ``name`` indexed by ``kind``."""

    kind: IndexKind
    total: int
    lookups: tuple[pc.Expression, ...]
    """What :meth:`check_lookups` checks unless told otherwise."""

    @property
    def absent(self) -> int:
        """Odd: never stored, inside every blocklet's bounds."""
        return self.total + 1

    def rows(
        self, first: int = 0, count: int | None = None, schema: pa.Schema = SCHEMA
    ) -> pa.Table:
        """Rows n = first.., ids even and interleaved so every blocklet spans nearly all of
        them."""
        count = self.total if count is None else count
        n = list(range(first, first + count))
        ids = interleaved_ids(self.total, first, count)
        data: dict[str, Any] = {"n": n, "id": ids, "name": [f"user-{i}" for i in ids]}
        return pa.table({f.name: data[f.name] for f in schema}, schema=schema)

    def new_table(self, tmp_path: Path, name: str = "t", **properties: str) -> cl.Table:
        """A fresh table under ``tmp_path / name``, ``id`` and ``name`` indexed, blocklets of
        :data:`BLOCKLET` rows when written and handed off."""
        props = {
            "blocklet_max_rows": str(BLOCKLET),
            "handoff_blocklet_rows": str(BLOCKLET),
            _COLUMNS_PROPERTY[self.kind]: "id,name",
            **properties,
        }
        return cl.create_table(str(tmp_path / name), SCHEMA, properties=props)

    def handed_off(self, tmp_path: Path, name: str = "t", **properties: str) -> cl.Table:
        """:meth:`new_table` holding every row, in two appends, handed off."""
        t = self.new_table(tmp_path, name, **properties)
        half = self.total // 2
        t.append(self.rows(0, half))
        t.append(self.rows(half, self.total - half))
        t.finish_streaming()
        t.handoff()
        return t

    def check_lookups(
        self, t: cl.Table, model: pa.Table, lookups: Sequence[Any] | None = None
    ) -> None:
        """Every lookup (by default :attr:`lookups`) returns exactly the rows ``model`` holds
        for it."""
        check_lookups(t, model, self.lookups if lookups is None else lookups)


BLOOM_TABLES = Interleaved(
    "bloom",
    240,
    (
        pc.field("id") == 241,
        pc.field("id") == 100,
        pc.field("id").isin([241, 3, 5, 100, 102]),
        (pc.field("id") == 7) | (pc.field("id") == 200),
        (pc.field("name") == "user-100") & (pc.field("n") >= 0),
        pc.field("name").isin(["user-1", "user-3"]),
    ),
)
"""The tables of tests/reader/test_bloom_lifecycle.py."""

INDEX_TABLES = Interleaved(
    "secondary",
    400,
    (
        pc.field("id") == 401,
        pc.field("id") == 100,
        pc.field("id").isin([401, 3, 5, 100, 102]),
        pc.field("id").isin(list(range(1, 801, 2))),  # 400 absent values
        (pc.field("id") == 7) | (pc.field("id") == 200),
        (pc.field("name") == "user-100") & (pc.field("n") >= 0),
        pc.field("name").isin(["user-1", "user-3", "user-798"]),
        (pc.field("id") == 100) | (pc.field("name") == "user-7"),
    ),
)
"""The tables of tests/reader/test_secondary_index*.py."""


def assert_bloom_prunes(
    t: cl.Table, column: str = "id", value: Any = BLOOM_TABLES.absent
) -> ScanPlan:
    """A lookup of an absent value inside every blocklet's bounds is pruned by bloom."""
    plan = plan_of(t, pc.field(column) == value)
    assert plan.blocklets_total > 0
    assert plan.blocklets_pruned_by_bloom > 0, plan
    assert plan.blocklets_pruned_by_bloom >= 0.8 * (
        plan.blocklets_total - plan.blocklets_pruned_by_stats - plan.blocklets_pruned_by_partition
    ), plan
    assert plan.blocklets_bloom_unreadable == 0
    return plan


def indexed_blocklets(t: cl.Table) -> int:
    """How many live blocklets are in files with a secondary index."""
    return sum(f.num_blocklets for _, f in t.snapshot().iter_files() if f.indexes)


def assert_index_prunes(
    t: cl.Table, column: str = "id", value: Any = INDEX_TABLES.absent
) -> ScanPlan:
    """An absent value inside every blocklet's bounds: every indexed blocklet is pruned by
    its index (a 32-bit key collision aside)."""
    plan = plan_of(t, pc.field(column) == value)
    indexed = indexed_blocklets(t)
    assert indexed > 0
    assert plan.blocklets_pruned_by_stats == 0, plan
    assert plan.blocklets_pruned_by_index == indexed, plan
    return plan


def live_indexes(t: cl.Table) -> dict[str, set[str]]:
    """Data file -> the columns (physical names) it has an index of."""
    return {f.path: set(f.indexes) for _, f in t.snapshot().iter_files()}


# --- files -----------------------------------------------------------------------------------


def data_files(root: Path) -> set[str]:
    """The data files on disk under ``root``, relative to it (blocklet and Parquet files)."""
    return {str(p.relative_to(root)) for e in ("*.cblt", "*.parquet") for p in root.rglob(e)}


def data_file_of(side_file: str) -> str:
    """The data file a bloom or index file belongs to (its name is the data file's, then a
    token and its kind)."""
    for suffix in (".cblt", ".parquet"):
        if suffix + "." in side_file:
            return side_file.split(suffix + ".")[0] + suffix
    raise AssertionError(f"{side_file!r} names no data file")


def side_files(root: Path, kind: IndexKind) -> set[str]:
    """The bloom or index files on disk under ``root``, relative to it."""
    return {str(p.relative_to(root)) for p in root.rglob(f"*{_SUFFIX[kind]}")}


def referenced_side_files(t: cl.Table, kind: IndexKind) -> set[str]:
    """Bloom or index files the latest version names, of live and retired segments alike."""
    return {
        path
        for seg in t.snapshot().segments.values()
        for f in seg.files.values()
        for path in (f.bloom_files if kind == "bloom" else f.index_files)
    }


def damage(path: Path, how: str, kind: IndexKind) -> None:
    """Damage a bloom or index file: ``flip`` a bit (bloom: inside the first record; index:
    inside the ordinals), ``truncate`` it, ``delete`` it; bloom files only: break the
    ``magic`` or the last record's ``crc``."""
    data = path.read_bytes()
    if how == "flip":
        i = 8 + 20 if kind == "bloom" else len(data) - 10
        path.write_bytes(data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1 :])
    elif how == "truncate":
        path.write_bytes(data[: len(data) - 7])
    elif how == "delete":
        path.unlink()
    elif how == "magic" and kind == "bloom":
        path.write_bytes(b"XXBLOOM1" + data[8:])
    elif how == "crc" and kind == "bloom":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # the last record's checksum
    else:
        raise AssertionError(how)
