"""Partition specs: which partition each row belongs to, and what that tells about its rows.

``partition_by=["region", "day(ts)", "bucket(16, id)"]`` gives one *partition field* per spec
string (whitespace-tolerant, transform names case-insensitive); each data file holds rows of one
partition, whose *partition value* is a tuple of one plain Python value per field (None: null).

* ``col`` (identity; ``identity(col)`` too): the value as pyarrow's ``as_py`` gives it (int,
  bool, str, bytes, Decimal, date, datetime in the column's time zone). Types: integers, bool,
  string, binary, decimal, date, timestamp except ``timestamp[ns]`` (a Python datetime holds
  microseconds). On a date64 column the value is the row's date.
* ``year(col)`` an int (2026); ``month(col)`` a ``"YYYY-MM"`` string; ``day(col)`` a
  ``datetime.date``; ``hour(col)`` a ``"YYYY-MM-DDTHH"`` string. year/month/day take date32,
  date64 and timestamp columns, hour timestamps only. Timestamps with a time zone are
  transformed in UTC, naive ones as they are; units s, ms, us, ns all work. Values lie in years
  1..9999 (data outside is refused).
* ``bucket(n, col)``, 1 <= n <= 2**31-1: ``column_hashes(col) % n`` (``format/row_hash.py``;
  independent of chunking, integer width, string vs large_string), an int in 0..n-1. Types:
  integers, date, timestamp, string, binary, decimal.

Floats are refused for identity and bucket (NaN != NaN and -0.0 == 0.0 make exact float keys
unreliable, and float values rarely repeat), nested and dictionary types everywhere. A null
source value gives None, a partition of its own (the bucket of a null is None, not the hash of
null). Identity fields are named after their column, others ``<col>_<transform>`` (``ts_day``,
``id_bucket``); a repeated spec or name is refused. No specs: unpartitioned, falsy, one
partition ``()``. ``split`` keeps rows in order inside a group and sorts groups by value, None
first (strings/bytes in code point/byte order, timestamps by instant).

JSON (``value_to_json``/``value_from_json``, exact round trip): int, bool, str as they are,
Decimal as its string, bytes as lowercase hex, date ``"YYYY-MM-DD"``, datetime ``isoformat()``
(with its UTC offset when the column has a time zone), None as null. ``describe``:
``region=eu/ts_day=2026-11-24/id_bucket=3`` (null as ``null``, bytes as ``0x`` hex; strings
that are empty, ``null``, or hold ``/`` or ``=`` JSON-quoted).

``bounds(value)``: per source column the inclusive (min, max) all rows of the partition lie in,
comparable with the column's ``as_py`` values: ``day(ts)`` on timestamp[us] gives ``(2026-11-24
00:00:00, 2026-11-24 23:59:59.999999)`` (datetimes in the column's time zone; on timestamp[ns]
the max is widened to the next whole microsecond, a safe bound). Fields on one column are
intersected (an impossible combination gives min > max). bucket and None fields give no bound;
``null_columns(value)`` names the columns a None field shows to be null in every row.
``raw_bounds``: temporal columns as stored integers (date32 days, date64 ms, timestamp ticks).
"""

from __future__ import annotations

import calendar
import datetime as dt
import difflib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from carbonlite.errors import InvalidOptionError, SchemaMismatchError
from carbonlite.format.row_hash import column_hashes

__all__ = [
    "MAX_BUCKETS",
    "Grouping",
    "PartitionField",
    "PartitionSpec",
    "PartitionValue",
    "Transform",
]

PartitionValue = tuple[Any, ...]
Transform = Literal["identity", "year", "month", "day", "hour", "bucket"]
_TIME = ("year", "month", "day", "hour")
MAX_BUCKETS = 2**31 - 1
_ALLOWED = "a column name (identity), year(col), month(col), day(col), hour(col), bucket(n, col)"
_EPOCH = 719163  # date(1970, 1, 1).toordinal()
_DAYS = (1 - _EPOCH, dt.date(9999, 12, 31).toordinal() - _EPOCH)  # days of years 1..9999
_PER_SECOND = {"s": 1, "ms": 1000, "us": 10**6, "ns": 10**9}
_I64 = (-(2**63), 2**63 - 1)
_CALL = re.compile(r"\s*([A-Za-z_]\w*)\s*\((.*)\)\s*", re.S)
_MONTH = re.compile(r"(\d{4})-(\d{2})")
_HOUR = re.compile(r"(\d{4}-\d{2}-\d{2})T(\d{2})")
_FLOATS = "floats are refused (NaN != NaN and -0.0 == 0.0, and float values rarely repeat)"
Codes = tuple[np.ndarray, list[Any]]  # per row 0 (null) or 1..k; the k sorted distinct values


def _is_str(t: pa.DataType) -> bool:
    return bool(pat.is_string(t) or pat.is_large_string(t))


def _is_bytes(t: pa.DataType) -> bool:
    return bool(pat.is_binary(t) or pat.is_large_binary(t) or pat.is_fixed_size_binary(t))


def _per_day(t: pa.DataType) -> int:
    """Stored integer units per day of a date or timestamp type."""
    if pat.is_date(t):
        return 1 if pat.is_date32(t) else 86_400_000
    return 86_400 * _PER_SECOND[t.unit]


def _type_problem(transform: str, t: pa.DataType) -> str | None:
    """Why ``transform`` cannot take a column of type ``t`` (None when it can)."""
    if pat.is_nested(t) or pat.is_dictionary(t):
        return f"has the type {t}; partition columns must be flat and not dictionary-encoded"
    if transform == "hour" and not pat.is_timestamp(t):
        return f"is {t}, but hour() needs a timestamp column (a date has no hours)"
    if transform in _TIME:
        ok = pat.is_date(t) or pat.is_timestamp(t)
        return None if ok else f"is {t}, but {transform}() needs a date or timestamp column"
    if pat.is_floating(t):
        return f"is {t}: {_FLOATS}; round or cast it to an integer or decimal first"
    if transform == "identity" and pat.is_timestamp(t) and t.unit == "ns":
        return f"is {t}: a Python datetime holds microseconds; use day()/hour() or timestamp[us]"
    kinds = [pat.is_integer, _is_str, _is_bytes, pat.is_decimal, pat.is_date, pat.is_timestamp]
    if any(k(t) for k in kinds) or (transform == "identity" and pat.is_boolean(t)):
        return None
    bools = "bool, " if transform == "identity" else ""
    return f"is {t}; {transform} takes integer, {bools}string, binary, decimal, date, timestamp"


@dataclass(frozen=True, slots=True)
class PartitionField:
    """One partition field: a transform of one source column (of type ``source_type``)."""

    spec: str
    source: str
    transform: Transform
    buckets: int | None
    name: str
    source_type: pa.DataType

    def result_type(self, source_type: pa.DataType | None = None) -> pa.DataType:
        """The Arrow type of the field's values in :meth:`PartitionSpec.transform`."""
        if self.transform == "identity":
            return self.source_type if source_type is None else source_type
        if self.transform == "day":
            return pa.date32()
        return pa.string() if self.transform in ("month", "hour") else pa.int32()


def _parse_field(text: Any, schema: pa.Schema) -> PartitionField:
    if not isinstance(text, str):
        raise InvalidOptionError(f"a partition spec is a string ({_ALLOWED}); got {text!r}")
    transform, buckets, column = "identity", None, text
    m = None if text in schema.names else _CALL.fullmatch(text)
    if m is not None:
        transform, column = m.group(1).lower(), m.group(2).strip()
        if transform not in ("identity", "bucket", *_TIME):
            raise InvalidOptionError(
                f"unknown partition transform {m.group(1)!r} in {text!r}; allowed: {_ALLOWED}"
            )
        if transform == "bucket":
            n_text, comma, column = (s.strip() for s in column.partition(","))
            if not comma:
                raise InvalidOptionError(f"{text!r}: bucket takes two arguments, bucket(n, col)")
            buckets = int(n_text) if re.fullmatch(r"\+?\d{1,12}", n_text) else 0
            if not 1 <= buckets <= MAX_BUCKETS:
                raise InvalidOptionError(
                    f"{text!r}: the bucket count must be an integer in 1..{MAX_BUCKETS} "
                    f"(bucket(n, col) takes the count first); got {n_text!r}"
                )
    elif text not in schema.names:
        column = text.strip()
    if column not in schema.names:
        if not column:
            raise InvalidOptionError(f"empty partition spec {text!r}; allowed: {_ALLOWED}")
        if m is not None and "," in column and transform != "bucket":
            raise InvalidOptionError(f"{text!r}: {transform}() takes exactly one column")
        close = difflib.get_close_matches(column, schema.names, n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise InvalidOptionError(
            f"partition spec {text!r} names the unknown column {column!r} "
            f"(columns: {', '.join(schema.names)}){hint}"
        )
    t = schema.field(column).type
    problem = _type_problem(transform, t)
    if problem is not None:
        raise InvalidOptionError(f"partition spec {text!r}: column {column!r} {problem}")
    spec, name = f"{transform}({column})", f"{column}_{transform}"
    if transform == "identity":
        spec = name = column
    elif transform == "bucket":
        spec = f"bucket({buckets}, {column})"
    return PartitionField(spec, column, cast(Transform, transform), buckets, name, t)


def _dense_ints(keys: np.ndarray, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Codes of integer keys (0 for null, 1..k in key order) and the k sorted distinct keys."""
    if valid is not None:
        if not valid.any():
            return np.zeros(len(keys), np.int64), keys[:0]
        keys = np.where(valid, keys, keys[int(np.argmax(valid))])
    if len(keys) == 0:
        return np.zeros(0, np.int64), keys
    lo = int(keys.min())
    span = int(keys.max()) - lo + 1
    if span <= max(4 * len(keys), 1 << 16):  # a lookup table: linear, no hashing
        offsets = keys - lo
        present = np.zeros(span, np.bool_)
        present[offsets] = True
        codes = np.cumsum(present, dtype=np.int64)[offsets]
        uniques = np.flatnonzero(present).astype(np.int64) + lo
    else:  # sparse keys: sort
        uniques, inverse = np.unique(keys, return_inverse=True)
        codes = inverse.astype(np.int64) + 1
    if valid is not None:
        codes[~valid] = 0
    return codes, uniques


def _dense_arrow(col: pa.ChunkedArray) -> Codes:
    """Codes of any column by hashing, with its sorted distinct values as Python values."""
    enc = col.dictionary_encode()
    if enc.num_chunks == 0:
        return np.zeros(0, np.int64), []
    dictionary = enc.chunks[0].dictionary  # the chunks share the final dictionary
    order = pc.array_sort_indices(dictionary).to_numpy()
    rank = np.zeros(len(order) + 1, np.int64)  # the trailing 0 is read by null indices (-1)
    rank[order] = np.arange(1, len(order) + 1)
    codes = rank[np.concatenate([c.indices.fill_null(-1).to_numpy() for c in enc.chunks])]
    return codes, dictionary.take(pa.array(order)).to_pylist()


def _checked_ints(f: PartitionField, col: pa.ChunkedArray) -> np.ndarray:
    """The stored integers of a temporal column as int64 (0 under nulls), in years 1..9999."""
    width = pa.int32() if col.type.bit_width == 32 else pa.int64()
    parts = [c.view(width).fill_null(0).to_numpy().astype(np.int64, copy=False) for c in col.chunks]
    ticks = np.concatenate(parts) if parts else np.empty(0, np.int64)
    per_day = _per_day(f.source_type)
    lo, hi = (int(ticks.min()), int(ticks.max())) if len(ticks) else (0, 0)
    if lo < _DAYS[0] * per_day or hi >= (_DAYS[1] + 1) * per_day:
        raise InvalidOptionError(
            f"partition field {f.spec!r}: column {f.source!r} holds a value outside years "
            f"1..9999 (stored {f.source_type} integer {lo if lo < _DAYS[0] * per_day else hi})"
        )
    return ticks


def _field_codes(f: PartitionField, col: pa.ChunkedArray) -> Codes:
    """Per row 0 (null) or 1..k ordered like the field's k distinct values (returned)."""
    st, valid = f.source_type, None if col.null_count == 0 else col.is_valid().to_numpy()
    if f.transform == "bucket":
        codes, uniques = _dense_ints(
            (column_hashes(col) % np.uint64(cast(int, f.buckets))).view(np.int64), valid
        )
        return codes, uniques.tolist()
    if f.transform == "identity" and not pat.is_date64(st):
        if not (pat.is_date32(st) or pat.is_timestamp(st)):
            return _dense_arrow(col)
        codes, uniques = _dense_ints(_checked_ints(f, col), valid)
        width = np.int32 if st.bit_width == 32 else np.int64
        return codes, pa.array(uniques.astype(width)).view(st).to_pylist()
    ticks, per_day = _checked_ints(f, col), _per_day(st)
    if f.transform == "hour":
        codes, hours = _dense_ints(np.floor_divide(ticks, per_day // 24), valid)
        days_hours = [divmod(h, 24) for h in hours.tolist()]
        return codes, [f"{dt.date.fromordinal(d + _EPOCH)}T{h:02d}" for d, h in days_hours]
    codes, days = _dense_ints(np.floor_divide(ticks, per_day) if per_day > 1 else ticks, valid)
    dates = [dt.date.fromordinal(d + _EPOCH) for d in days.tolist()]
    if f.transform in ("day", "identity"):
        return codes, dates
    if f.transform == "year":
        keys: list[Any] = [d.year for d in dates]
    else:
        keys = [f"{d.year:04d}-{d.month:02d}" for d in dates]
    distinct = sorted(set(keys))  # a Python step per distinct day, not per row
    position = {k: i for i, k in enumerate(distinct, start=1)}
    return np.array([0, *(position[k] for k in keys)], np.int64)[codes], distinct


def _stable_order(codes: np.ndarray, groups: int) -> np.ndarray:
    """A stable argsort of codes in 0..groups-1: an LSD radix sort over 12-bit digits, each
    pass an Arrow sort of int16 values spanning < 4096 (which Arrow does by stable counting)."""
    order: np.ndarray | None = None
    shift = 0
    while order is None or (groups - 1) >> shift:
        digit = (codes >> shift) & 0xFFF if groups > 4096 else codes
        digit = digit if order is None else digit[order]
        o = pc.array_sort_indices(pa.array(digit.astype(np.int16))).to_numpy()
        order, shift = (o if order is None else order[o]), shift + 12
    return order


def _densify(comb: np.ndarray) -> tuple[np.ndarray, int]:
    """Renumber codes to 0..g-1 keeping their order; g is the number of distinct codes."""
    codes, uniques = _dense_ints(comb, None)
    return codes - 1, len(uniques)


@dataclass(frozen=True, slots=True)
class Grouping:
    """The rows of each partition of some data: partition ``values[g]`` holds the rows
    ``order[starts[g] : starts[g] + sizes[g]]``, in their original order."""

    values: list[PartitionValue]
    order: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray

    def rows(self, g: int) -> np.ndarray:
        """The row numbers of group ``g``."""
        start = int(self.starts[g])
        return self.order[start : start + int(self.sizes[g])]


@dataclass(frozen=True, slots=True)
class PartitionSpec:
    """The partition fields of a table, in order (none: unpartitioned, and falsy)."""

    fields: tuple[PartitionField, ...]

    @classmethod
    def parse(cls, specs: Sequence[str], schema: pa.Schema) -> PartitionSpec:
        """Parse spec strings against a schema; InvalidOptionError says what is wrong."""
        if isinstance(specs, (str, bytes)) or not isinstance(specs, Sequence):
            raise InvalidOptionError(
                f"partition_by takes a list of specs, e.g. ['region', 'day(ts)']; got {specs!r}"
            )
        fields = [_parse_field(text, schema) for text in specs]
        for i, f in enumerate(fields):
            for other in fields[:i]:
                if other.name == f.name:  # the same spec gives the same name
                    what = "a duplicate of" if other.spec == f.spec else f"named {f.name!r} like"
                    raise InvalidOptionError(f"partition field {f.spec!r} is {what} {other.spec!r}")
        return cls(tuple(fields))

    @classmethod
    def from_json(cls, obj: list[str], schema: pa.Schema) -> PartitionSpec:
        return cls.parse(obj, schema)

    def to_json(self) -> list[str]:
        return [f.spec for f in self.fields]

    def __len__(self) -> int:
        return len(self.fields)

    @property
    def is_partitioned(self) -> bool:
        return bool(self.fields)

    @property
    def source_columns(self) -> tuple[str, ...]:
        """The source columns, each once, in field order."""
        return tuple(dict.fromkeys(f.source for f in self.fields))

    def partition_schema(self) -> pa.Schema:
        """The schema of :meth:`transform`'s arrays (field names and result types)."""
        return pa.schema([pa.field(f.name, f.result_type()) for f in self.fields])

    def _column(self, table: pa.Table, f: PartitionField) -> pa.ChunkedArray:
        found = table.schema.field(f.source).type if f.source in table.column_names else None
        if found != f.source_type:
            raise SchemaMismatchError(
                f"partition field {f.spec!r} needs column {f.source!r} of type {f.source_type}; "
                f"the data has {'no such column' if found is None else found}"
            )
        return table.column(f.source)

    def transform(self, data: pa.Table | pa.RecordBatch) -> list[pa.Array]:
        """One array of partition values per field (types: :meth:`partition_schema`)."""
        table, out = pa.table(data), []
        for f in self.fields:
            if f.transform == "identity":
                out.append(self._column(table, f).combine_chunks())
            else:
                codes, values = _field_codes(f, self._column(table, f))
                out.append(pa.array([None, *values], f.result_type()).take(pa.array(codes)))
        return out

    def grouping(self, data: pa.Table | pa.RecordBatch) -> Grouping:
        """Which rows of ``data`` belong to which partition, without moving any (``split``
        moves them): groups sorted by value (None first), rows in order within each."""
        table = pa.table(data)
        n = table.num_rows
        if n == 0 or not self.fields:
            whole = np.arange(n)
            return Grouping(
                [()] if n else [],
                whole,
                np.zeros(1 if n else 0, np.int64),
                np.array([n] if n else [], np.int64),
            )
        per_field = [_field_codes(f, self._column(table, f)) for f in self.fields]
        comb, span = np.zeros(n, np.int64), 1  # mixed-radix code of all fields, in value order
        for codes, values in per_field:
            if span * (len(values) + 1) >= 2**62:
                comb, span = _densify(comb)
            comb, span = comb * (len(values) + 1) + codes, span * (len(values) + 1)
        comb, groups = _densify(comb) if span > n else (comb, span)
        counts = np.bincount(comb, minlength=groups)
        present = np.flatnonzero(counts)
        sizes = counts[present]
        starts = np.cumsum(sizes) - sizes
        order = np.arange(n) if len(present) == 1 else _stable_order(comb, groups)
        firsts = order[starts]
        keys = [(codes[firsts].tolist(), [None, *values]) for codes, values in per_field]
        found = [tuple(vals[k[g]] for k, vals in keys) for g in range(len(present))]
        return Grouping(found, order, starts, sizes)

    def split(self, data: pa.Table | pa.RecordBatch) -> list[tuple[PartitionValue, pa.Table]]:
        """The rows of each partition: groups sorted by value (None first), rows in order."""
        table = pa.table(data)
        n = table.num_rows
        if n == 0 or not self.fields:
            return [((), table)] if n else []
        grouped = self.grouping(table)
        found, order, starts, sizes = grouped.values, grouped.order, grouped.starts, grouped.sizes
        present = found
        firsts = order[starts]
        if len(present) == 1:
            return [(found[0], table)]
        # Identity columns are constant in a group: repeat their value rather than move them
        # (Arrow's take of a string column is the slowest step), unless groups are tiny.
        names = table.column_names
        const = {f.source for f in self.fields if f.transform == "identity"}
        const = {c for c in const if not pat.is_date64(table.schema.field(c).type)}
        if len(present) * 256 > n or len(set(names)) != len(names):
            const = set()
        taken = table.select([c for c in names if c not in const]).take(pa.array(order))
        result = []
        for g, value in enumerate(found):
            part = taken.slice(int(starts[g]), int(sizes[g]))
            if const:
                moved, i, k = iter(part.columns), int(firsts[g]), int(sizes[g])
                arrays = [pa.repeat(table[c][i], k) if c in const else next(moved) for c in names]
                part = pa.Table.from_arrays(arrays, schema=table.schema)
            result.append((value, part))
        return result

    def normalize(self, key: Any) -> PartitionValue:
        """A user-given key as the canonical partition value: for one field the bare value or a
        1-tuple, else a tuple or list. Values as in the module doc; also day a "YYYY-MM-DD"
        string or a midnight datetime (naive or UTC), identity an ISO string for dates and
        timestamps. Anything else raises InvalidOptionError naming the field and the value.
        """
        k = len(self.fields)
        if not isinstance(key, (tuple, list)) and k == 1:
            key = [key]
        if not isinstance(key, (tuple, list)) or len(key) != k:
            raise InvalidOptionError(
                f"partition key {key!r}: the partition spec {self.to_json()} takes "
                + ("a value or a 1-tuple" if k == 1 else f"a tuple of {k} values")
            )
        return tuple(_normalize(f, v) for f, v in zip(self.fields, key, strict=True))

    def value_to_json(self, value: PartitionValue) -> list[Any]:
        return [_to_json(v) for v in self.normalize(value)]

    def value_from_json(self, obj: list[Any]) -> PartitionValue:
        if not isinstance(obj, list) or len(obj) != len(self.fields):
            raise InvalidOptionError(f"stored partition value {obj!r}: not {len(self)} values")
        return self.normalize([_from_json(f, v) for f, v in zip(self.fields, obj, strict=True)])

    def describe(self, value: PartitionValue) -> str:
        """Human text: ``region=eu/ts_day=2026-11-24/id_bucket=3``."""
        pairs = zip(self.fields, self.normalize(value), strict=True)
        return "/".join(f"{f.name}={_text(v)}" for f, v in pairs) or "(unpartitioned)"

    def null_columns(self, value: PartitionValue) -> set[str]:
        """Source columns that are null in every row of the partition."""
        pairs = zip(self.fields, self.normalize(value), strict=True)
        return {f.source for f, v in pairs if v is None}

    def raw_bounds(self, value: PartitionValue) -> dict[str, tuple[Any, Any]]:
        """Like :meth:`bounds`, with temporal columns as their stored integers (exact)."""
        value = self.normalize(value)
        nulls = self.null_columns(value)
        out: dict[str, tuple[Any, Any]] = {}
        for f, v in zip(self.fields, value, strict=True):
            if v is None or f.transform == "bucket" or f.source in nulls:
                continue
            lo, hi = _raw_bounds(f, v)
            if f.source in out:
                lo, hi = max(lo, out[f.source][0]), min(hi, out[f.source][1])
            out[f.source] = (lo, hi)
        return out

    def bounds(self, value: PartitionValue) -> dict[str, tuple[Any, Any]]:
        """Per source column the inclusive (min, max) of the partition's rows (module doc)."""
        types = {f.source: f.source_type for f in self.fields}
        return {
            c: (_from_ticks(types[c], lo, False), _from_ticks(types[c], hi, True))
            for c, (lo, hi) in self.raw_bounds(value).items()
        }


def _normalize(f: PartitionField, v: Any) -> Any:
    def bad(why: str) -> InvalidOptionError:
        return InvalidOptionError(f"partition key of field {f.name!r} ({f.spec}): {why}; got {v!r}")

    t = f.transform
    if v is None:
        return None
    if t in ("year", "bucket"):
        lo, hi = (1, 9999) if t == "year" else (0, cast(int, f.buckets) - 1)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
            raise bad(f"{t} values are ints in {lo}..{hi}")
        return int(v)
    if t == "month":
        m = _MONTH.fullmatch(v) if isinstance(v, str) else None
        if m is None or int(m.group(1)) < 1 or not 1 <= int(m.group(2)) <= 12:
            raise bad('month values are "YYYY-MM" strings')
        return v
    if t == "day":
        if isinstance(v, dt.datetime):
            if v.time() != dt.time() or v.utcoffset() not in (None, dt.timedelta(0)):
                raise bad("a datetime names a (UTC) day only at midnight, naive or UTC")
            return v.date()
        if isinstance(v, dt.date) or (isinstance(v, str) and re.fullmatch(r"\d{4}-\d\d-\d\d", v)):
            return _parse(dt.date.fromisoformat, v, bad)
        raise bad('day values are datetime.date or "YYYY-MM-DD" strings')
    if t == "hour":
        m = _HOUR.fullmatch(v) if isinstance(v, str) else None
        if m is None or int(m.group(2)) > 23:
            raise bad('hour values are "YYYY-MM-DDTHH" strings')
        _parse(dt.date.fromisoformat, m.group(1), bad)
        return v
    st = f.source_type
    if pat.is_date(st) or pat.is_timestamp(st):
        date_only = pat.is_date(st)
        v = _parse(dt.date.fromisoformat if date_only else dt.datetime.fromisoformat, v, bad)
        if isinstance(v, dt.datetime) == date_only or not isinstance(v, dt.date):
            raise bad(f"column {f.source!r} is {st}: give a {'date' if date_only else 'datetime'}")
        if not date_only and (getattr(v, "tzinfo", None) is None) != (st.tz is None):
            raise bad(
                f"column {f.source!r} is {st}: give {'an aware' if st.tz else 'a naive'} datetime"
            )
    elif isinstance(v, (bytearray, memoryview)):
        v = bytes(v)
    for kind, types in _PY_TYPES:
        if kind(st) and (not isinstance(v, types) or (bool not in types and isinstance(v, bool))):
            raise bad(f"column {f.source!r} is {st}; give its Python value")
    try:
        out = pa.scalar(v, st).as_py()
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
        raise bad(f"not a value of {st} ({e})") from None
    if not _same_value(out, v):
        raise bad(f"{st} cannot hold it exactly (it would be {out!r})")
    return out


def _same_value(a: Any, b: Any) -> bool:
    """``a == b``, with aware datetimes compared as instants: Python's ``==`` across two zones
    is False for a time inside a DST fold (PEP 495), though both name the same instant."""
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime) and a.tzinfo and b.tzinfo:
        return a.astimezone(dt.timezone.utc) == b.astimezone(dt.timezone.utc)
    return bool(a == b)


_PY_TYPES: list[tuple[Callable[[pa.DataType], bool], tuple[type, ...]]] = [
    (pat.is_boolean, (bool,)),
    (pat.is_integer, (int, np.integer)),
    (_is_str, (str,)),
    (_is_bytes, (bytes,)),
    (pat.is_decimal, (Decimal, int)),
]


def _parse(parse: Callable[[str], Any], v: Any, bad: Callable[[str], Exception]) -> Any:
    """``parse(v)`` for strings (other values as they are); ValueError becomes ``bad``."""
    try:
        return parse(v) if isinstance(v, str) else v
    except ValueError:
        raise bad("not a valid ISO date/datetime") from None


def _to_json(v: Any) -> Any:
    if isinstance(v, (bytes, Decimal)):
        return v.hex() if isinstance(v, bytes) else str(v)
    return v.isoformat() if isinstance(v, dt.date) else v


def _from_json(f: PartitionField, v: Any) -> Any:
    st, ident = f.source_type, f.transform == "identity"
    want: type = bool if ident and pat.is_boolean(st) else str
    if f.transform in ("year", "bucket") or (ident and pat.is_integer(st)):
        want = int
    if v is None:
        return None
    coded = ident and (_is_bytes(st) or pat.is_decimal(st))
    try:
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            raise ValueError
        if coded:
            return bytes.fromhex(str(v)) if _is_bytes(st) else Decimal(str(v))
        return v
    except (ValueError, ArithmeticError):
        kind = ("hex" if _is_bytes(st) else "decimal") if coded else want.__name__
        raise InvalidOptionError(f"stored value {v!r} of field {f.spec!r}: not {kind}") from None


def _text(v: Any) -> str:
    if isinstance(v, str) and (v in ("", "null") or "/" in v or "=" in v):
        return json.dumps(v, ensure_ascii=False)
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    if isinstance(v, (bytes, dt.date)):
        return "0x" + v.hex() if isinstance(v, bytes) else v.isoformat()
    return str(v)


def _ticks_of(st: pa.DataType, v: Any) -> int:
    """The stored integer of a date or datetime value in a column of type ``st``."""
    if not isinstance(v, dt.datetime):
        return (v.toordinal() - _EPOCH) * _per_day(st)
    delta = v - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc if v.tzinfo else None)
    us = (delta.days * 86_400 + delta.seconds) * 10**6 + delta.microseconds
    return us * _PER_SECOND[st.unit] // 10**6


def _raw_bounds(f: PartitionField, v: Any) -> tuple[Any, Any]:
    st = f.source_type
    if f.transform == "identity":
        if not (pat.is_date(st) or pat.is_timestamp(st)):
            return v, v
        lo = _ticks_of(st, v)
        return lo, lo + (_per_day(st) - 1 if pat.is_date64(st) else 0)
    per_day = _per_day(st)
    if f.transform == "hour":
        m = cast(re.Match[str], _HOUR.fullmatch(v))
        per_hour = per_day // 24
        lo = _ticks_of(st, dt.date.fromisoformat(m.group(1))) + int(m.group(2)) * per_hour
        return max(lo, _I64[0]), min(lo + per_hour - 1, _I64[1])
    if f.transform == "day":
        first = last = v
    elif f.transform == "month":
        y, mo = int(v[:4]), int(v[5:])
        first, last = dt.date(y, mo, 1), dt.date(y, mo, calendar.monthrange(y, mo)[1])
    else:
        first, last = dt.date(v, 1, 1), dt.date(v, 12, 31)
    lo, hi = _ticks_of(st, first), _ticks_of(st, last) + per_day - 1
    return max(lo, _I64[0]), min(hi, _I64[1])


def _from_ticks(st: pa.DataType, ticks: Any, upper: bool) -> Any:
    """A bound as a Python value comparable with the column's values."""
    if pat.is_date(st):
        return dt.date.fromordinal(ticks // _per_day(st) + _EPOCH)
    if not pat.is_timestamp(st):
        return ticks
    k = _PER_SECOND[st.unit]  # ns are widened to whole microseconds:
    us = (-(-ticks // 1000) if upper else ticks // 1000) if k > 10**6 else ticks * (10**6 // k)
    try:
        return pa.scalar(us, pa.timestamp("us", st.tz)).as_py()
    except (pa.ArrowException, ValueError, OverflowError):
        edge = dt.datetime.max if upper else dt.datetime.min
        return edge.replace(tzinfo=dt.timezone.utc) if st.tz else edge
