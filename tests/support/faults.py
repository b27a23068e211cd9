"""Deterministic storage faults, injected into the Storage instance a table uses.

A generated schedule (tests/support/scenarios.py) carries a :class:`FaultPlan`: which call of
which kind, on which class of path, by which actor, gets which fault. The plan is drawn from
the schedule's seed and printed with every failure, so a failure replays exactly: actors run
one at a time (tests/support/interleave.py), so the n-th call of a kind by an actor, or by all
actors together, is the same call in every run of the same schedule.

Faults (what real storage does to a protocol, docs/LOG.md "Uncertain outcomes"):

- ``landed_raise``: a put (``put_if_absent``, ``put``, ``swap``) that landed, then raised
  ``OSError`` (the response was lost);
- ``landed_false``: a ``put_if_absent`` that landed, then answered False ("exists"), what a
  client retry of a landed conditional PUT hears;
- ``fail_before``: a put that raised ``OSError`` before writing anything;
- ``list_fail``: a listing that raised ``OSError``;
- ``list_stale``: a listing answered as the same directory was listed at an earlier call (or
  as it stood when injection began): files created since are missing, files deleted since are
  still there.

Pointer writes (``_carbonlite/_last_checkpoint``) count as ``write`` calls whether they go
through ``Storage.put`` or ``Storage.swap`` (an atomic read-modify-write some storages have),
so a plan made for one protocol holds for the other. Only calls made on an actor's thread
(named ``actor-<name>`` by the harness) under the table's root count and fail; the library's
own threads and the set-up and check of a schedule are never touched.
"""

from __future__ import annotations

import random
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from carbonlite.storage import FileStatus, Storage

FaultKind = Literal["landed_raise", "landed_false", "fail_before", "list_fail", "list_stale"]
CallKind = Literal["create", "write", "list"]
"""``create``: ``put_if_absent``; ``write``: ``put`` or ``swap``; ``list``: ``list``."""

_VERSION = re.compile(r"^_carbonlite/log/\d{20}\.json$")

PUT_FAULTS: tuple[FaultKind, ...] = ("landed_raise", "fail_before")
CREATE_FAULTS: tuple[FaultKind, ...] = ("landed_raise", "landed_false", "fail_before")
LIST_FAULTS: tuple[FaultKind, ...] = ("list_fail", "list_stale")

STICKY = 1_000
"""``Fault.times`` for a fault that strikes every such call from its first on."""

TARGETS: tuple[tuple[CallKind, str, float], ...] = (
    ("create", "version", 3.0),
    ("create", "checkpoint", 2.0),
    ("create", "manifest", 1.0),
    ("write", "pointer", 5.0),
    ("create", "data", 1.0),
    ("write", "data", 0.5),
    ("write", "lease", 0.5),
    ("list", "log", 2.0),
    ("list", "segments", 1.0),
    ("list", "meta", 1.0),
    ("list", "manifests", 0.5),
    ("list", "leases", 0.5),
)
"""What a fault may hit, with the weight it is drawn with: the log's own files most."""


def path_class(rel: str) -> str:
    """The class of a file path relative to the table's root."""
    if _VERSION.match(rel):
        return "version"
    if rel.startswith("_carbonlite/log/") and ".checkpoint." in rel:
        return "checkpoint"
    if rel == "_carbonlite/_last_checkpoint":
        return "pointer"
    for prefix, name in (
        ("_carbonlite/manifests/", "manifest"),
        ("_carbonlite/leases/", "lease"),
        ("_carbonlite/locks/", "lock"),
        ("_carbonlite/state/", "state"),
        ("segments/", "data"),
    ):
        if rel.startswith(prefix):
            return name
    return "other"


def dir_class(rel: str) -> str:
    """The class of a directory (a listing) relative to the table's root."""
    rel = rel.strip("/")
    return {
        "_carbonlite/log": "log",
        "segments": "segments",
        "_carbonlite": "meta",
        "_carbonlite/manifests": "manifests",
        "_carbonlite/leases": "leases",
        "_carbonlite/state": "state",
    }.get(rel, "other")


@dataclass(frozen=True, slots=True)
class Fault:
    """The ``nth`` call of kind ``call`` on a path of class ``target``, made by ``actor`` (None:
    by any actor, counted together), and the ``times - 1`` such calls after it, get ``kind``
    (``times`` 1: a transient fault; large: the storage keeps failing there, as with a key
    throttled or denied). ``back``: for ``list_stale``, how many listings of the same
    directory back the answer comes from (the oldest there is, at most)."""

    actor: str | None
    call: CallKind
    target: str
    nth: int
    kind: FaultKind
    back: int = 1
    times: int = 1

    def describe(self) -> str:
        who = "any actor" if self.actor is None else f"actor {self.actor}"
        extra = f" (back {self.back})" if self.kind == "list_stale" else ""
        at = f"call {self.nth}" if self.times == 1 else f"calls {self.nth} and on"
        if 1 < self.times < STICKY:
            at = f"calls {self.nth} to {self.nth + self.times - 1}"
        return f"{self.kind}{extra} at {at} of {self.call} {self.target} by {who}"

    def strikes(self, count: int) -> bool:
        """Whether the call numbered ``count`` gets this fault."""
        return self.nth <= count < self.nth + self.times


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """The faults of one schedule."""

    faults: tuple[Fault, ...] = ()

    def describe(self) -> str:
        return "; ".join(f.describe() for f in self.faults) or "none"

    @staticmethod
    def draw(
        rng: random.Random,
        actors: Sequence[str],
        *,
        most: int = 3,
        emphasis: frozenset[str] = frozenset(),
    ) -> FaultPlan:
        """Up to ``most`` faults drawn with ``rng``: a class of path weighted by ``TARGETS``
        (three times as much for the classes in ``emphasis``), a fault fitting the call, an
        actor (or any actor), a call number of 1 to 3, once or a few times or from then on."""
        count = rng.choice([0, 1, 1, 2, 2, 3])
        weights = [w * (3 if t in emphasis else 1) for _, t, w in TARGETS]
        faults = []
        for _ in range(min(count, most)):
            call, target, _ = rng.choices(TARGETS, weights=weights)[0]
            kinds = {"create": CREATE_FAULTS, "write": PUT_FAULTS, "list": LIST_FAULTS}[call]
            faults.append(
                Fault(
                    actor=None if rng.random() < 0.4 else rng.choice(list(actors)),
                    call=call,
                    target=target,
                    nth=rng.choice([1, 1, 1, 2, 3]),
                    kind=rng.choice(kinds),
                    back=rng.choice([1, 2, 3]),
                    times=rng.choice([1, 1, 1, 2, STICKY]),
                )
            )
        return FaultPlan(tuple(faults))


def thread_actor() -> str | None:
    """The actor running on this thread (the harness names actor threads ``actor-<name>``)."""
    name = threading.current_thread().name
    return name[len("actor-") :] if name.startswith("actor-") else None


@dataclass
class Injector:
    """Injects ``plan`` into ``storage`` for paths under ``root`` while active.

    ``start`` patches the instance (``put_if_absent``, ``put``, ``swap`` where the storage has
    it, ``list``), ``stop`` restores it; use it as a context manager so it is always restored.
    ``fired`` names each fault that struck, with the path, and the actor it struck."""

    storage: Storage
    root: str
    plan: FaultPlan
    fired: list[tuple[str | None, Fault, str]] = field(default_factory=list)
    counts: Counter[tuple[str | None, CallKind, str]] = field(default_factory=Counter)
    active: bool = False
    _saved: dict[str, Any] = field(default_factory=dict)
    _listings: dict[tuple[str, bool], list[list[FileStatus]]] = field(default_factory=dict)
    _base: list[FileStatus] = field(default_factory=list)

    def __enter__(self) -> Injector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def struck(self) -> set[str]:
        """The actors a fault struck (None, for any actor, is never stored)."""
        return {a for a, _, _ in self.fired if a is not None}

    def describe(self) -> str:
        fired = "; ".join(f"{a}: {f.describe()}: {path}" for a, f, path in self.fired) or "none"
        return f"faults planned: {self.plan.describe()}\n  faults fired: {fired}"

    def start(self) -> Injector:
        """Patch the storage and begin counting (a no-op for an empty plan)."""
        if self._saved or not self.plan.faults:
            return self
        self._base = self.storage.list(self.root, recursive=True)
        wrappers: dict[str, Callable[..., Any]] = {
            "put_if_absent": self._put_if_absent,
            "put": self._put,
            "list": self._list,
        }
        if hasattr(type(self.storage), "swap"):
            wrappers["swap"] = self._swap
        for name, wrapper in wrappers.items():
            self._saved[name] = self.storage.__dict__.get(name, _ABSENT)
            real = getattr(self.storage, name)
            setattr(self.storage, name, _bound(wrapper, real))
        self.active = True
        return self

    def stop(self) -> None:
        """Stop injecting and restore the storage instance as it was."""
        self.active = False
        for name, saved in self._saved.items():
            if saved is _ABSENT:
                self.storage.__dict__.pop(name, None)
            else:
                setattr(self.storage, name, saved)
        self._saved.clear()

    # --- the decision ---------------------------------------------------------------------------

    def _rel(self, path: str) -> str | None:
        root = self.root.rstrip("/")
        if path == root:
            return ""
        return path[len(root) + 1 :] if path.startswith(root + "/") else None

    def _fault(self, call: CallKind, target: str) -> Fault | None:
        """Count this call (for its actor and for all actors) and return the fault it gets."""
        actor = thread_actor()
        if not self.active or actor is None:
            return None
        self.counts[(actor, call, target)] += 1
        self.counts[(None, call, target)] += 1
        for f in self.plan.faults:
            hit = f.call == call and f.target == target
            if hit and f.strikes(self.counts[(f.actor, call, target)]) and f.actor in (None, actor):
                return f
        return None

    def _strike(self, fault: Fault, path: str) -> None:
        self.fired.append((thread_actor(), fault, path))

    # --- the wrappers ---------------------------------------------------------------------------

    def _put_if_absent(self, real: Callable[[str, bytes], bool], path: str, data: bytes) -> bool:
        rel = self._rel(path)
        fault = None if rel is None else self._fault("create", path_class(rel))
        if fault is None:
            return real(path, data)
        self._strike(fault, path)
        if fault.kind == "fail_before":
            raise OSError(f"injected: put_if_absent of {path} failed before writing")
        created = real(path, data)
        if fault.kind == "landed_false" or not created:
            return False
        raise OSError(f"injected: put_if_absent of {path} landed, the response was lost")

    def _put(self, real: Callable[[str, bytes], None], path: str, data: bytes) -> None:
        self._written("put", real, path, data)

    def _swap(self, real: Callable[..., Any], path: str, *args: Any, **kwargs: Any) -> Any:
        return self._written("swap", real, path, *args, **kwargs)

    def _written(
        self, what: str, real: Callable[..., Any], path: str, *args: Any, **kw: Any
    ) -> Any:
        rel = self._rel(path)
        fault = None if rel is None else self._fault("write", path_class(rel))
        if fault is None:
            return real(path, *args, **kw)
        self._strike(fault, path)
        if fault.kind == "fail_before":
            raise OSError(f"injected: {what} of {path} failed before writing")
        real(path, *args, **kw)
        raise OSError(f"injected: {what} of {path} landed, the response was lost")

    def _list(
        self, real: Callable[..., list[FileStatus]], path: str, *, recursive: bool = False
    ) -> list[FileStatus]:
        rel = self._rel(path)
        fault = None if rel is None else self._fault("list", dir_class(rel))
        key = (path.rstrip("/"), recursive)
        if fault is None:
            listed = real(path, recursive=recursive)
            if rel is not None and self.active:
                self._listings.setdefault(key, []).append(listed)
            return listed
        self._strike(fault, path)
        if fault.kind == "list_fail":
            raise OSError(f"injected: listing {path} failed")
        earlier = [self._as_of_start(*key), *self._listings.get(key, [])]
        return list(earlier[max(0, len(earlier) - fault.back)])

    def _as_of_start(self, path: str, recursive: bool) -> list[FileStatus]:
        """The listing of ``path`` as it stood when injection began."""
        prefix = path + "/"
        return [
            s
            for s in self._base
            if s.path.startswith(prefix) and (recursive or "/" not in s.path[len(prefix) :])
        ]


_ABSENT = object()


def _bound(wrapper: Callable[..., Any], real: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return wrapper(real, *args, **kwargs)

    return call
