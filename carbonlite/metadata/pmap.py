"""A persistent (immutable, structure-sharing) mapping that remembers insertion order.

Snapshots share everything a commit did not change: setting one key of a map of n keys costs
O(log n) (a hash array mapped trie, ``immutables.Map``), not a copy of the whole map, so
applying a commit costs in proportion to the commit. Iteration is in insertion order (a key
set again keeps its place); the order is computed once per map, on first iteration.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Generic, TypeVar

import immutables

__all__ = ["OrderedMap"]

K = TypeVar("K")
V = TypeVar("V")


class OrderedMap(Mapping[K, V], Generic[K, V]):
    __slots__ = ("_map", "_next", "_order")

    def __init__(self, items: Iterable[tuple[K, V]] = ()) -> None:
        entries: dict[K, tuple[int, V]] = {}
        n = 0
        for key, value in items:
            entries[key] = (entries[key][0] if key in entries else n, value)
            n += 1
        self._map: immutables.Map[K, tuple[int, V]] = immutables.Map(entries)
        self._next = n
        self._order: tuple[K, ...] | None = None

    @classmethod
    def _of(cls, m: immutables.Map[K, tuple[int, V]], n: int) -> OrderedMap[K, V]:
        out: OrderedMap[K, V] = cls.__new__(cls)
        out._map = m
        out._next = n
        out._order = None
        return out

    def set(self, key: K, value: V) -> OrderedMap[K, V]:
        old = self._map.get(key)
        if old is not None:
            return OrderedMap._of(self._map.set(key, (old[0], value)), self._next)
        return OrderedMap._of(self._map.set(key, (self._next, value)), self._next + 1)

    def delete(self, key: K) -> OrderedMap[K, V]:
        if key not in self._map:
            return self
        return OrderedMap._of(self._map.delete(key), self._next)

    def __getitem__(self, key: K) -> V:
        return self._map[key][1]

    def get(self, key: K, default: V | None = None) -> V | None:  # type: ignore[override]
        found = self._map.get(key)
        return default if found is None else found[1]

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[K]:
        if self._order is None:
            self._order = tuple(k for k, _ in sorted(self._map.items(), key=lambda kv: kv[1][0]))
        return iter(self._order)

    def __reversed__(self) -> Iterator[K]:
        iter(self)
        assert self._order is not None
        return reversed(self._order)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and all(
            k in other and other[k] == v for k, v in self.items()
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OrderedMap({dict(self.items())!r})"
