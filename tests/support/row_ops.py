"""Operations of the row-change crash and concurrency tests, as JSON objects: made at random
(:class:`OpMaker`), run on a table (:func:`run_op`, in worker processes) and applied to the
pyarrow model (:func:`apply_op`, in the test).

    {"op": "append", "ids": [...], "v": [...], "s": [...]}
    {"op": "delete", "filter": F}
    {"op": "update", "filter": F, "set": {"v": ["add", 1, "v"], "s": ["const", "u", null]}}
    {"op": "merge", "keys": [...], "v": [...], "s": [...] or null, "when_matched": ...,
     "when_not_matched": ..., "when_not_matched_by_source": ...}
    {"op": "finish_streaming"} {"op": "handoff"} {"op": "compact", "kind": "minor" | "major"}

A filter F is null (every row), {"range": [column, lo, hi]} (the expression
``lo <= column < hi``), or {"dnf": [[column, op, value], ...]} (DNF tuples; a list of such
lists is OR-ed). Ids of rows are unique when an operation set makes them so: appends and
merge inserts take new ids from the maker's counter.
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import carbonlite
from tests.support.row_model import (
    SCHEMA,
    Assign,
    Change,
    apply_delete,
    apply_merge,
    apply_update,
    make_source,
)

__all__ = ["DATA_OPS", "OpMaker", "apply_op", "counts_of", "run_op", "to_filter"]

DATA_OPS = {"append", "delete", "update", "merge"}
"""Operations that change rows (``data_change`` true); the others only move them."""


def to_filter(spec: Any) -> Any:
    """The filter a table (and the model) is given for a JSON filter spec."""
    if spec is None:
        return None
    if "range" in spec:
        column, lo, hi = spec["range"]
        return (pc.field(column) >= lo) & (pc.field(column) < hi)

    def term(t: list[Any]) -> tuple[Any, ...]:
        return tuple(t)

    dnf = spec["dnf"]
    if dnf and isinstance(dnf[0][0], list):
        return [[term(t) for t in group] for group in dnf]
    return [term(t) for t in dnf]


def _assignments(spec: dict[str, list[Any]]) -> dict[str, Assign]:
    return {column: Assign(kind, value, source) for column, (kind, value, source) in spec.items()}


def _rows(op: dict[str, Any]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(op["ids"], pa.int64()),
            "v": pa.array(op["v"], pa.int64()),
            "s": pa.array(op["s"], pa.string()),
        },
        schema=SCHEMA,
    )


def _merge_options(op: dict[str, Any]) -> dict[str, str]:
    return {k: op[k] for k in ("when_matched", "when_not_matched", "when_not_matched_by_source")}


def run_op(table: carbonlite.Table, op: dict[str, Any]) -> dict[str, Any]:
    """Run ``op`` on ``table``: {"versions": [committed versions], "counts": [...]}."""
    kind = op["op"]
    if kind == "append":
        r = table.append(_rows(op))
        return {"versions": [r.version], "counts": [r.rows]}
    if kind == "delete":
        r = table.delete(to_filter(op["filter"]))
        return {"versions": [] if r.version is None else [r.version], "counts": [r.rows]}
    if kind == "update":
        assignments = {c: a.expression() for c, a in _assignments(op["set"]).items()}
        r = table.update(to_filter(op["filter"]), assignments)
        return {"versions": [] if r.version is None else [r.version], "counts": [r.rows]}
    if kind == "merge":
        source = make_source(op["keys"], op["v"], op["s"])
        m = table.merge(source, ["id"], **_merge_options(op))
        return {
            "versions": [] if m.version is None else [m.version],
            "counts": [m.rows_updated, m.rows_inserted, m.rows_deleted],
        }
    if kind == "finish_streaming":
        before = table.refresh().version
        closed = table.finish_streaming()
        # (with other writers at work the range may hold their versions too)
        versions = list(range(before + 1, table.version + 1)) if closed is not None else []
        return {"versions": versions, "closed": closed}
    if kind == "handoff":
        return {"versions": list(table.handoff().versions)}
    if kind == "compact":
        return {"versions": list(table.compact(op["kind"]).versions)}
    raise ValueError(f"unknown operation {kind!r}")


def apply_op(rows: pa.Table, op: dict[str, Any]) -> Change | None:
    """What ``op`` does to the model's ``rows``; None for an operation that moves rows only."""
    kind = op["op"]
    if kind == "append":
        new = _rows(op)
        return Change(pa.concat_tables([rows, new]), {"insert": new}, inserted=new.num_rows)
    if kind == "delete":
        return apply_delete(rows, to_filter(op["filter"]))
    if kind == "update":
        return apply_update(rows, to_filter(op["filter"]), _assignments(op["set"]))
    if kind == "merge":
        source = make_source(op["keys"], op["v"], op["s"])
        return apply_merge(rows, source, "id", **_merge_options(op))
    return None


def counts_of(change: Change, op: dict[str, Any]) -> list[int]:
    """The counts ``run_op`` reports for ``op``, as the model predicts them."""
    if op["op"] == "merge":
        return [change.updated, change.inserted, change.deleted]
    return [change.updated or change.inserted or change.deleted]


class OpMaker:
    """Random operations; new ids come from a counter, so a set of operations made by one
    maker never inserts the same new id twice."""

    def __init__(self, seed: int, next_id: int = 0) -> None:
        self.rng = random.Random(seed)
        self.next_id = next_id

    def _new_ids(self, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids

    def _v(self) -> int | None:
        return None if self.rng.random() < 0.1 else self.rng.randrange(0, 100)

    def _s(self) -> str | None:
        return self.rng.choice([None, "a", "b", "c"])

    def append(self, n: int | None = None) -> dict[str, Any]:
        ids = self._new_ids(n or self.rng.randint(4, 12))
        return {
            "op": "append",
            "ids": ids,
            "v": [self._v() for _ in ids],
            "s": [self._s() for _ in ids],
        }

    def filter(self, low: int = 0, *, key_only: bool = False) -> Any:
        """A filter keeping a few rows: a narrow id range (as an expression or DNF), a few
        ids, or a narrow band of v, now and then combined with s. ``key_only``: ids only
        (one or two ranges, or a few ids)."""
        rng = self.rng
        lo = rng.randrange(low, max(self.next_id, low + 1))
        hi = lo + rng.randint(1, 6)
        form = rng.choice([0, 1, 2, 5]) if key_only else rng.randrange(6)
        if key_only and form == 5:
            other = rng.randrange(low, max(self.next_id, low + 1))
            return {"dnf": [[["id", ">=", lo], ["id", "<", hi]], [["id", "==", other]]]}
        if form == 0:
            return {"range": ["id", lo, hi]}
        if form == 1:
            return {"dnf": [["id", ">=", lo], ["id", "<", hi]]}
        if form == 2:
            return {"dnf": [["id", "in", rng.sample(range(low, max(self.next_id, low + 8)), 4)]]}
        if form == 3:
            band = rng.randrange(0, 100)
            return {"dnf": [["v", ">=", band], ["v", "<", band + 3]]}
        if form == 4:
            return {"dnf": [[["id", ">=", lo], ["id", "<", hi]], [["v", "==", rng.randrange(100)]]]}
        return {"dnf": [["s", "==", rng.choice("abc")], ["id", ">=", lo], ["id", "<", hi + 6]]}

    def delete(self, low: int = 0, *, key_only: bool = False) -> dict[str, Any]:
        return {"op": "delete", "filter": self.filter(low, key_only=key_only)}

    def update(self, low: int = 0) -> dict[str, Any]:
        sets = [
            {"v": ["add", 1, "v"]},
            {"v": ["const", self.rng.randrange(100), None]},
            {"s": ["const", self.rng.choice(["u", None]), None]},
            {"v": ["mul", 2, "v"], "s": ["const", "w", None]},
        ]
        return {"op": "update", "filter": self.filter(low), "set": self.rng.choice(sets)}

    def merge(
        self,
        *,
        low: int = 0,
        when_matched: str | None = None,
        when_not_matched: str | None = None,
        by_source_delete: float = 0.0,
        nulls: bool = True,
        new_keys: bool = True,
    ) -> dict[str, Any]:
        """Keys the table may hold (from ``low`` up), new ones, and perhaps a null key."""
        rng = self.rng
        held = range(low, max(self.next_id, low))
        keys: list[int | None] = rng.sample(held, min(rng.randint(1, 6), len(held)))
        keys += self._new_ids(rng.randint(0 if keys else 1, 3) if new_keys else 0)
        if nulls and rng.random() < 0.2:
            keys.append(None)
        rng.shuffle(keys)
        return {
            "op": "merge",
            "keys": keys,
            "v": [self._v() for _ in keys],
            "s": [self._s() for _ in keys] if rng.random() < 0.5 else None,
            "when_matched": when_matched or rng.choice(["update", "update", "delete", "ignore"]),
            "when_not_matched": when_not_matched or rng.choice(["insert", "insert", "ignore"]),
            "when_not_matched_by_source": "delete" if rng.random() < by_source_delete else "ignore",
        }
