"""Deletion vectors round-trip through their bytes in both encodings, apply to a blocklet's
rows, and refuse damaged bytes (hypothesis against a plain Python set)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbonlite.format.deletion_vector import DeletionVector


@st.composite
def vectors(draw: st.DrawFn) -> tuple[int, set[int]]:
    n = draw(st.integers(0, 70_000))
    if n == 0:
        return 0, set()
    shape = draw(st.sampled_from(["few", "range", "dense", "all"]))
    if shape == "few":
        chosen = draw(st.sets(st.integers(0, n - 1), max_size=50))
    elif shape == "range":
        lo = draw(st.integers(0, n - 1))
        chosen = set(range(lo, draw(st.integers(lo, n))))
    elif shape == "dense":
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        chosen = set(np.flatnonzero(rng.random(n) < draw(st.floats(0.05, 0.95))).tolist())
    else:
        chosen = set(range(n))
    return n, chosen


@settings(max_examples=150, deadline=None)
@given(vectors())
def test_round_trip_and_apply(case: tuple[int, set[int]]) -> None:
    n, deleted = case
    dv = DeletionVector.of(sorted(deleted, reverse=True), n)
    assert dv.cardinality == len(deleted) and dv.deletes_all == (len(deleted) == n)
    back = DeletionVector.decode(dv.encode())
    assert back == dv and back.positions.tolist() == sorted(deleted)
    batch = pa.record_batch({"i": pa.array(range(n), pa.int64())})
    assert dv.apply(batch).column(0).to_pylist() == [i for i in range(n) if i not in deleted]


@settings(max_examples=60, deadline=None)
@given(vectors(), st.data())
def test_union_is_the_set_union(case: tuple[int, set[int]], data: st.DataObject) -> None:
    n, first = case
    second = data.draw(st.sets(st.integers(0, max(0, n - 1)), max_size=30)) if n else set()
    merged = DeletionVector.of(first, n).union(DeletionVector.of(second, n))
    assert merged.positions.tolist() == sorted(first | second)


def test_a_range_is_tiny_and_sparse_rows_use_positions() -> None:
    whole = DeletionVector.of(range(1000, 60_000), 65_536).encode()
    assert len(whole) < 200
    sparse = DeletionVector.of([3, 70, 9000], 65_536).encode()
    assert len(sparse) < 60


def test_bad_positions_are_refused() -> None:
    with pytest.raises(ValueError, match=r"0\.\.9"):
        DeletionVector.of([10], 10)
    with pytest.raises(ValueError, match=r"0\.\.9"):
        DeletionVector.of([-1], 10)
    with pytest.raises(ValueError, match="covers 10 rows"):
        DeletionVector.of([1], 10).apply(pa.record_batch({"i": [1, 2]}))
    with pytest.raises(ValueError, match="blocklets of 10 and 11"):
        DeletionVector.of([1], 10).union(DeletionVector.of([1], 11))


@pytest.mark.parametrize("positions", [[5, 6, 7], list(range(0, 1000, 2))])
def test_damage_is_refused(positions: list[int]) -> None:
    good = DeletionVector.of(positions, 1000).encode()
    for at in range(len(good)):
        damaged = bytearray(good)
        damaged[at] ^= 0x40
        with pytest.raises(ValueError):
            DeletionVector.decode(bytes(damaged))
    for cut in (0, 5, len(good) - 1):
        with pytest.raises(ValueError):
            DeletionVector.decode(good[:cut])
    with pytest.raises(ValueError):
        DeletionVector.decode(good + b"\0")
