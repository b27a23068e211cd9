"""File ingesters under forced interleavings (tests/support/interleave.py): two ingesters of one
source paused at the file ingester's seams and the commit protocol's, run in every order.

Stress and kills never reach a window one read wide: here the window between reading the
record of ingested files (``files.after_list``) and moving its marker (``commit.before_put``)
is held open while the other ingester runs. Scenarios, each on fresh ``memory://`` tables and
source:

- two ingesters of a source of two files, one file a commit: after every order each file's
  rows are in the table once, in the version that recorded it, the record's generation is the
  number of commits that moved it, and the results add up (``check_ingested``);
- the same with a damaged file both find: it is kept in the bad-records table exactly once
  (made by whichever gets there first), then recorded by the table once;
- an ingester's batch and a rename of one of the file's columns: the rows are committed (and
  read under the new name), or the file is kept as bad, or the ingester stops with an error
  and records nothing; never a file recorded without its rows;
- a file replaced while two ingesters read it: each of its versions lands whole and at most
  once: the one read before it changed, the one after, or both, the first first (a file
  replaced after it was read is a new file, issue 38).

Mutation checks at the end (as ``tests/metadata/test_interleaving_mutations.py``) show the
exploration fails when the record's compare-and-set is dropped. Two tests pin a bug found
here and fixed: a batch all of whose files changed under their read was committed anyway,
empty.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import pytest

import carbonlite as cl
from carbonlite.errors import CarbonLiteError
from carbonlite.ingest import FileIngester, FileIngestResult
from carbonlite.ingest.file_record import FileRecord, FileVersion
from carbonlite.ingest.file_source import FileSource, SourceFile
from carbonlite.metadata import requirements
from carbonlite.writer.publish import read_state
from tests.support.file_ingest_source import (
    SCHEMA,
    Source,
    check_ingested,
    file_rows,
    record_files,
)
from tests.support.interleave import (
    Actor,
    Outcome,
    ScheduleError,
    explore_all,
    explore_random,
    run_schedule,
)

WINDOW_SEAMS = frozenset({"files.after_list", "commit.before_put"})
"""Where an ingester read the record, and where it is about to move its marker."""
FILE_SEAMS = frozenset({"files.after_list", "files.after_file", "commit.before_put"})
"""The window, with a file read in it."""
INGESTER_SEAMS = frozenset({"files.after_list", "files.after_commit"})
"""The ingester's own: a listing, and a commit that landed."""
BAD_SEAMS = frozenset({"files.after_list", "files.after_bad_commit", "commit.before_put"})
"""A bad file kept in the bad-records table, and the commits (to both tables)."""
RENAME_SEAMS = frozenset(
    {"files.after_list", "files.after_file", "append.after_data", "commit.before_put"}
)
EVERY_SEAM = frozenset(
    {
        "files.after_list",
        "files.after_file",
        "files.after_commit",
        "files.after_bad_commit",
        "append.after_data",
        "commit.before_put",
        "commit.after_put",
        "commit.before_checkpoint",
    }
)


@dataclass
class State:
    table: str
    source: Source
    bad: str
    ingesters: dict[str, FileIngester] = field(default_factory=dict)


def fresh(good: int = 2, bad: Collection[str] = ()) -> State:
    """A fresh table (a checkpoint every other version) and a source of ``good`` files of 3
    rows and damaged files of the kinds ``bad``, one per kind."""
    where = f"memory://files-interleave/{uuid.uuid4().hex}"
    cl.create_table(f"{where}/t", SCHEMA, properties={"checkpoint_interval": "2"})
    source = Source(f"{where}/src")
    for _ in range(good):
        source.add_good(3)
    for kind in bad:
        source.add_bad(kind)
    return State(f"{where}/t", source, f"{where}/bad")


def ingesting(state: State, name: str, **options: Any) -> Actor:
    """An ingester of the state's source to its end, one file a commit."""
    ingester = FileIngester(
        state.table,
        state.source.uri,
        bad_records=state.bad,
        writer_id=name,
        max_batch_rows=options.pop("max_batch_rows", 1),
        max_latency=0.01,
        **options,
    )
    state.ingesters[name] = ingester
    return Actor(name, lambda: ingester.run(stop_at_end=True))


def two_ingesters(
    good: int = 2, bad: Collection[str] = ()
) -> Callable[[], tuple[State, list[Actor]]]:
    def scenario() -> tuple[State, list[Actor]]:
        state = fresh(good, bad)
        return state, [ingesting(state, "a"), ingesting(state, "b")]

    return scenario


def check(state: State, outcomes: dict[str, Outcome], *, versions_read: int = 0) -> None:
    """Every file once, in the version that recorded it; the results add up
    (``versions_read``: versions of replaced files read besides one of each file)."""
    for name, outcome in outcomes.items():
        assert outcome.error is None, f"ingester {name} raised {outcome.error!r}"
    check_ingested(state.table, [state.source], state.bad)
    results: list[FileIngestResult] = [o.result for o in outcomes.values()]
    source = state.source
    assert sum(r.files for r in results) == len(source.good) + versions_read, results
    assert sum(r.replaced_files for r in results) == versions_read, results
    assert sum(r.bad_files for r in results) == len(source.bad), results
    generation = cl.open_table(state.table).snapshot().txns[source.record]
    assert sum(r.commits for r in results) == generation + 1, (
        f"{sum(r.commits for r in results)} commits reported, the record is at generation "
        f"{generation}: {results}"
    )


# (scenario, seams): every order of each, in the default tier (100-400 orders each)
EXHAUSTIVE = {
    "two files, the record window": (two_ingesters(2), WINDOW_SEAMS),
    "two files, listings and commits": (two_ingesters(2), INGESTER_SEAMS),
    "one file, read in the window": (two_ingesters(1), FILE_SEAMS),
    "the same bad file": (two_ingesters(0, ["garbage"]), BAD_SEAMS),
}


@pytest.mark.parametrize(
    "name",
    # one scenario in the default tier; the others take 5-19 s each: the slow tier
    [
        n if n == "one file, read in the window" else pytest.param(n, marks=pytest.mark.slow)
        for n in sorted(EXHAUSTIVE)
    ],
)
def test_two_ingesters_in_every_order(name: str) -> None:
    scenario, seams = EXHAUSTIVE[name]
    found = explore_all(scenario, check, limit=1_000, pause_at=seams)
    assert found.exhaustive, f"more than {found.schedules} orders"
    assert seams <= found.seams
    assert found.schedules >= 50


def test_the_bad_file_is_kept_by_the_first_and_recorded_by_the_other() -> None:
    """The order the bad-records path exists for: a keeps the bad file in the bad-records
    table and stops right there; b lists, finds the file kept, and commits the record; a
    goes on and finds its record moved: the file kept once, recorded once, a restarted."""
    order = [0, 0, 0] + [1] * 12  # a to its bad-records commit, then b to its end
    schedule = run_schedule(two_ingesters(0, ["garbage"]), check, choices=order, pause_at=BAD_SEAMS)
    trace = [f"{a}@{s}" for a, s in schedule.trace]
    assert "a@files.after_bad_commit" in trace, trace
    a, b = schedule.outcomes["a"].result, schedule.outcomes["b"].result
    assert (a.bad_files, b.bad_files) == (1, 0), (a, b)
    assert (a.commits, b.commits) == (0, 1) and a.restarts == 1, (a, b)
    # (a trace step names the seam an actor was resumed from: a ran on to after_bad_commit)
    assert trace[:4] == ["a@start", "a@files.after_list", "a@commit.before_put", "b@start"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["two files, the files read", "a good and a bad file", "two files, every seam"]
)
def test_two_ingesters_in_many_orders_slow(name: str) -> None:
    """More seams than the default tier's: the first 500 orders depth first (all of them
    when there are fewer); random orders of every seam follow."""
    scenario, seams = {
        "two files, the files read": (two_ingesters(2), FILE_SEAMS | INGESTER_SEAMS),
        "a good and a bad file": (two_ingesters(1, ["garbage"]), BAD_SEAMS | FILE_SEAMS),
        "two files, every seam": (two_ingesters(2), EVERY_SEAM),
    }[name]
    found = explore_all(scenario, check, limit=500, pause_at=seams)
    assert found.schedules >= 400


@pytest.mark.parametrize(
    "seeds", [range(30), pytest.param(range(30, 400), marks=pytest.mark.slow)], ids=str
)
def test_two_ingesters_in_random_orders_of_every_seam(seeds: range) -> None:
    found = explore_random(two_ingesters(2, ["truncated"]), check, seeds=seeds, pause_at=EVERY_SEAM)
    assert found.schedules == len(seeds)
    assert {"files.after_bad_commit", "commit.after_put", "append.after_data"} <= found.seams


@pytest.mark.slow
def test_three_ingesters_in_random_orders() -> None:
    def scenario() -> tuple[State, list[Actor]]:
        state = fresh(3, ["empty"])
        return state, [ingesting(state, n) for n in "abc"]

    found = explore_random(scenario, check, seeds=range(200), pause_at=EVERY_SEAM)
    assert found.schedules == 200


# --- a rename of a column racing an ingester's batch ------------------------------------------


def rename_during_batch() -> tuple[State, list[Actor]]:
    """An ingester of two files racing ``rename_column('payload', 'body')``."""
    state = fresh(2)

    def rename() -> int | None:
        return cl.open_table(state.table, writer_id="r").rename_column("payload", "body").version

    return state, [ingesting(state, "a"), Actor("r", rename)]


def check_rename(state: State, outcomes: dict[str, Outcome]) -> None:
    """Each file: its rows committed once, in the version that recorded it, and read under
    the names of the latest schema with their values; or kept as bad and recorded with no
    rows; or, when the ingester stopped with an error, not recorded and no rows."""
    renamed = outcomes["r"]
    assert renamed.error is None and renamed.result is not None, renamed.error
    ingester = outcomes["a"]
    if ingester.error is not None:
        assert isinstance(ingester.error, CarbonLiteError), repr(ingester.error)
        assert "payload" in str(ingester.error) or "body" in str(ingester.error), ingester.error
    table = cl.open_table(state.table)
    rows = table.to_arrow()
    assert rows.schema.names == ["id", "body", "_file_path", "_file_modified"]
    recorded = record_files(table, state.source.record)
    kept: set[str] = set()
    if state.source.bad or _exists(state.bad):
        bad = cl.open_table(state.bad).to_arrow()
        kept = set(bad.column("file").to_pylist())
        assert len(kept) == bad.num_rows, "a file kept twice"
    by_file: dict[str, list[dict[str, Any]]] = {}
    for row in rows.to_pylist():
        by_file.setdefault(row["_file_path"], []).append(row)
    for number, relative in enumerate(sorted(state.source.good), start=1):
        mine = by_file.pop(relative, [])
        if mine:
            want = file_rows(number, 3).to_pylist()
            got = sorted(({"id": r["id"], "payload": r["body"]} for r in mine), key=str)
            assert got == sorted(want, key=str), f"{relative}: {got}"
            assert relative in recorded and relative not in kept, relative
        elif relative in recorded:
            assert relative in kept, f"{relative} is recorded as ingested: no rows, not kept as bad"
        else:
            assert ingester.error is not None, f"{relative} was never ingested and nothing failed"
            assert relative not in kept
    assert not by_file, f"rows of no file: {by_file}"
    verified = table.verify()
    assert verified.ok, verified
    if ingester.error is None:
        check_ingested(state.table, [_as_found(state.source, kept)], state.bad)


def _exists(uri: str) -> bool:
    try:
        cl.open_table(uri)
    except CarbonLiteError:
        return False
    return True


def _as_found(source: Source, kept: set[str]) -> Source:
    """The source with the files the ingester kept as bad (their rows no longer fit) moved to
    its bad files."""
    found = Source(source.uri, dict(source.good), dict(source.bad), list(source.never))
    for relative in kept:
        found.good.pop(relative)
        found.bad[relative] = source.storage.read(source.storage.join(source.root, relative))
    return found


def test_a_rename_racing_a_batch_in_every_order() -> None:
    found = explore_all(
        rename_during_batch,
        check_rename,
        limit=2_000,
        pause_at=RENAME_SEAMS,
    )
    assert found.exhaustive, f"more than {found.schedules} orders"
    assert found.schedules >= 10


def test_a_rename_before_the_batch_is_read_keeps_the_files_as_bad() -> None:
    """The rename commits first: the files' ``payload`` is not a column of the table any more,
    so both are kept as bad (with their bytes) and recorded, none of their rows in the table."""
    schedule = run_schedule(rename_during_batch, check_rename, choices=[1] * 20)
    assert schedule.outcomes["a"].error is None
    result = schedule.outcomes["a"].result
    assert result.bad_files == 2 and result.files == 0, result


# --- a file rewritten while an ingester reads it --------------------------------------------


def rewrite_during_read() -> tuple[State, list[Actor]]:
    """Two ingesters of two files; a writer replaces the first file with a longer one (more
    rows: an engine that rewrote it before it was final, or a copy that was still going)."""
    state = fresh(2)
    first = sorted(state.source.good)[0]

    def rewrite() -> None:
        state.source.rewrite(first, 5)

    return state, [ingesting(state, "a"), ingesting(state, "b"), Actor("w", rewrite)]


def check_rewrite(state: State, outcomes: dict[str, Outcome]) -> None:
    """Each commit of the first file's rows holds one of its versions whole: the one read
    before it changed (read and checked before the rewrite), the one after, or the first and
    then the second (a file replaced after it was read is a new file); no version twice."""
    first = sorted(state.source.good)[0]
    table = cl.open_table(state.table)
    changes = table.changes(0)
    landed: dict[int, list[int]] = {}
    for path, version, i in zip(
        changes.column("_file_path").to_pylist(),
        changes.column("_commit_version").to_pylist(),
        changes.column("id").to_pylist(),
        strict=True,
    ):
        if path == first:
            landed.setdefault(version, []).append(i)
    long_ids = state.source.good[first]
    short, long = sorted(long_ids[:3]), sorted(long_ids)
    read = [sorted(landed[v]) for v in sorted(landed)]
    assert read in ([short], [long], [short, long]), f"{first}: rows by version {read}"
    seen = Source(state.source.uri, dict(state.source.good), {}, [], rewritten={first})
    seen.good[first] = [i for ids in read for i in ids]
    ingesters = {n: o for n, o in outcomes.items() if n != "w"}
    check(State(state.table, seen, state.bad), ingesters, versions_read=len(read) - 1)


@pytest.mark.parametrize(
    "seeds", [range(40), pytest.param(range(40, 1_000), marks=pytest.mark.slow)], ids=str
)
def test_a_file_rewritten_while_it_is_read_in_random_orders(seeds: range) -> None:
    """Whichever version each ingester read and checked, one of them lands, once (a file
    that changed under a read is left for the next listing)."""
    found = explore_random(rewrite_during_read, check_rewrite, seeds=seeds, pause_at=FILE_SEAMS)
    assert found.schedules == len(seeds)


def one_file_rewritten() -> tuple[State, list[Actor]]:
    """One ingester of one file, and a writer that replaces it with a longer one."""
    state = fresh(1)
    first = sorted(state.source.good)[0]
    return state, [ingesting(state, "a"), Actor("w", lambda: state.source.rewrite(first, 5))]


def test_a_batch_whose_only_file_changed_commits_nothing() -> None:
    """The ingester lists the file, the writer replaces it, the ingester reads it and finds
    it changed: the file is left for the next listing, and nothing is committed for it (a
    file that keeps changing, a log another program appends to, would otherwise make an
    empty version at every listing, for as long as it changes)."""
    schedule = run_schedule(
        one_file_rewritten, check_rewrite, choices=[0, 1], pause_at={"files.after_list"}
    )
    result = schedule.outcomes["a"].result
    assert result.not_ready == 1, result  # the order did put the change inside the read
    assert result.files == 1 and result.commits == 1, result


def test_a_file_still_changing_makes_no_empty_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The source's only file is found changed at its first three reads (a copy still
    going), then stays: one commit, of its rows, and no version before it."""
    state = fresh(1)
    real = FileSource.current
    changes = iter(range(3))

    def current(self: FileSource, file: SourceFile) -> FileVersion | None:
        found = real(self, file)
        if found is not None and found.size is not None and next(changes, None) is not None:
            return dataclasses.replace(found, size=found.size + 1)  # grew since it was listed
        return found

    monkeypatch.setattr(FileSource, "current", current)
    result = ingesting(state, "a").run()
    assert result.not_ready == 3 and result.files == 1, result
    table = cl.open_table(state.table)
    assert result.commits == 1 and table.version == 1, (
        f"{result.commits} commits, the table at version {table.version}, for one file"
    )


# --- the mutation ---------------------------------------------------------------------------


def _state_only_record(
    cls: type[FileRecord], kind: str, source: str, snapshot: Any, storage: Any, root: str
) -> FileRecord:
    """``FileRecord.of`` for a record kept in its state table alone (its generation read from
    the state's metadata): what the record is once the marker is dropped."""
    empty = cls.empty(kind, source)
    stored = snapshot.states.get(empty.name)
    if stored is None:
        return empty
    table = read_state(storage, root, stored)
    meta = table.schema.metadata or {}
    generation = meta.get(b"generation", b"None").decode()
    files = {
        f: FileVersion(ms, size, etag)
        for f, ms, size, etag in zip(
            *(table.column(c).to_pylist() for c in ("file", "modified_ms", "size", "etag")),
            strict=True,
        )
    }
    return cls(
        empty.name,
        source,
        None if generation == "None" else int(generation),
        int(meta.get(b"horizon_ms", b"0")),
        files,
    )


def check_rows(state: State, outcomes: dict[str, Outcome]) -> None:
    """What a reader of the table sees, alone (the record's own layout not checked): every
    row of every file exactly once."""
    for name, outcome in outcomes.items():
        assert outcome.error is None, f"ingester {name} raised {outcome.error!r}"
    ids = Counter(cl.open_table(state.table).to_arrow().column("id").to_pylist())
    repeated = sorted(i for i, n in ids.items() if n > 1)
    assert not repeated, f"rows ingested more than once: {repeated}"
    want = Counter(i for file_ids in state.source.good.values() for i in file_ids)
    assert ids == want, f"rows lost: {sorted((want - ids).elements())}"


def test_dropping_the_record_compare_and_set_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The record kept by its state table alone, with no marker moved by compare-and-set: the
    state write is unguarded (the last writer wins), and two ingesters that read the same
    record both commit its first file."""
    monkeypatch.setattr(FileRecord, "marker", lambda self: {})
    monkeypatch.setattr(FileRecord, "of", classmethod(_state_only_record))
    with pytest.raises(ScheduleError) as info:
        explore_all(two_ingesters(), check_rows, limit=1_000, pause_at=WINDOW_SEAMS)
    assert "rows ingested more than once" in str(info.value)
    assert "a@files.after_list" in str(info.value) and "b@files.after_list" in str(info.value)


def test_dropping_the_marker_alone_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commits that store the state and move no marker: the next read finds a record that is
    not whole (its state without its marker) and stops, in any order."""
    monkeypatch.setattr(FileRecord, "marker", lambda self: {})
    with pytest.raises(ScheduleError) as info:
        explore_all(two_ingesters(), check, limit=1_000, pause_at=WINDOW_SEAMS)
    assert "incomplete" in str(info.value)


def test_dropping_the_markers_requirement_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``MarkersContinue`` (the compare of the compare-and-set) the loser's commit
    moves the marker back: some order finds it (the replay refuses it, or a file twice)."""
    monkeypatch.setattr(requirements.MarkersContinue, "check", lambda self, s, r: None)
    with pytest.raises(ScheduleError) as info:
        explore_all(two_ingesters(), check, limit=1_000, pause_at=WINDOW_SEAMS)
    message = str(info.value)
    assert "already committed batch" in message or "more than once" in message
