"""Every access to a table checks its directory again: a table directory swapped for a
symbolic link to a table outside the root (before a put, between a put and its flush, between
a flush's check and its commit, while producers put) never makes the service write outside
the root; a deleted table's puts are refused; hostile names are refused before they touch
the file system."""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from pathlib import Path

import pyarrow.flight as flight
import pytest

import carbonlite as cl
from carbonlite.seams import listening
from carbonlite.serve.catalog import Catalog, TableNameError, name_parts
from carbonlite.serve.records import PutRequest
from carbonlite.serve.service import FlightService
from tests.serve.test_service import SCHEMA, puts_in, rows
from tests.serve.test_service_seams import crash
from tests.support.flight_service import ServiceProcess, files_of, health, put, wait_for


@pytest.fixture
def root(tmp_path: Path) -> Path:
    where = tmp_path / "root"
    cl.create_table(where / "events", SCHEMA)
    cl.create_table(where / "sales" / "eu", SCHEMA)
    return where


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A table outside the root, holding rows."""
    table = cl.create_table(tmp_path / "outside" / "secret", SCHEMA)
    table.append(rows("owner", 0))
    return tmp_path / "outside" / "secret"


def swap_for_link(root: Path, name: str, target: Path) -> Path:
    """Move table ``name`` aside and put a symbolic link to ``target`` in its place; where the
    table went."""
    aside = root / f"{name}.aside"
    os.rename(root / name, aside)
    os.symlink(target, root / name)
    return aside


def copy_outside(root: Path, name: str, outside: Path) -> tuple[Path, dict[str, bytes]]:
    """A copy of table ``name`` outside the root (the same log, the same table id: a table
    the service cannot tell from its own by its contents), and its files. The table may be
    committing meanwhile: a copy that met a file going away is made again."""
    copy = outside.parent / "copy"
    for _ in range(20):
        try:
            shutil.copytree(root / name, copy, symlinks=True)
            return copy, files_of(copy)
        except shutil.Error:
            shutil.rmtree(copy)
    raise AssertionError(f"could not copy {root / name} while it was being written")


def restore(root: Path, name: str, aside: Path) -> None:
    os.unlink(root / name)
    os.rename(aside, root / name)


def test_a_swap_between_the_check_and_the_commit_commits_into_the_checked_directory(
    root: Path, outside: Path
) -> None:
    """The flusher checked ``events`` and is about to commit when the directory is swapped
    for a link to a copy of it out of the root: the commit goes into the directory that was
    checked (held open by the catalog), never through the link; the next access is refused."""
    service = FlightService(str(root), port=0, flush_interval=3600, flush_rows=10**9)
    try:
        table = service.catalog.table("events", refresh=False)
        service._put(PutRequest("events", "p", 0), rows("p", 0), table)
        aside: list[Path] = []
        copied: list[tuple[Path, dict[str, bytes]]] = []

        def swap(seam: str) -> None:
            if seam == "serve.before_flush_commit" and not aside:
                copied.append(copy_outside(root, "events", outside))
                aside.append(swap_for_link(root, "events", copied[0][0]))

        with listening(swap):
            service.flush_all()
        assert aside, "the flush never reached its commit"
        copy, before = copied[0]
        assert files_of(copy) == before
        assert puts_in(cl.open_table(aside[0]).to_arrow()) == {("p", 0): 3}
        with pytest.raises(TableNameError, match=r"'events' under .* is a symbolic link"):
            service.catalog.table("events")
        assert service.health()["status"] == "ok"  # the put was committed: nothing waits
    finally:
        crash(service)


def test_a_swap_between_a_put_and_its_flush_keeps_the_put_and_reports_it(
    root: Path, outside: Path
) -> None:
    """The put is acknowledged, then the directory becomes a link: the flush refuses it, the
    put stays in memory and in the log, the healthcheck says why; once the directory is back
    the put is committed, once."""
    with ServiceProcess(str(root), "--flush-interval", "3600", "--flush-rows", "10") as service:
        client = service.client()
        assert put(client, "events", "p", 0, rows("p", 0))["skipped"] is False
        copy, before = copy_outside(root, "events", outside)
        aside = swap_for_link(root, "events", copy)
        with pytest.raises(flight.FlightServerError, match="is a symbolic link"):
            put(client, "events", "p", 1, rows("p", 1))
        put(client, "sales/eu", "q", 0, rows("q", 0, 12))  # 15 rows buffered: flush now
        wait_for(lambda: cl.open_table(root / "sales" / "eu").count_rows() == 12, "sales/eu")
        report = health(client)
        assert report["status"] == "degraded"
        events = report["tables"]["events"]
        assert events["pending_puts"] == 1 and "is a symbolic link" in events["error"]
        assert report["wal"]["held_by"] == "events"
        assert files_of(copy) == before
        restore(root, "events", aside)
        put(client, "sales/eu", "q", 1, rows("q", 1, 12))  # flush again
        wait_for(lambda: health(client)["status"] == "ok", "events to flush")
        assert service.terminate() == 0
    assert puts_in(cl.open_table(root / "events").to_arrow()) == {("p", 0): 3}
    assert files_of(copy) == before
    assert any("flush of table 'events' failed" in line for line in service.stderr)


def test_a_table_swapped_for_a_symlink_while_producers_put(root: Path, outside: Path) -> None:
    """Producers put and the flusher runs every 50 ms while the directory is swapped for a
    link to a copy of it out of the root at a random moment. The copy is untouched, byte
    for byte; every
    acknowledged put is committed in the table's own directory or waits, reported by the
    healthcheck; every put after the swap is refused; once the directory is back, every
    acknowledged put is in the table exactly once."""
    rng = random.Random(25)
    acked: set[tuple[str, int]] = set()
    refused: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()

    def produce(service: ServiceProcess, name: str) -> None:
        client = service.client()
        for seq in range(10_000):
            if stop.is_set():
                return
            try:
                put(client, "events", name, seq, rows(name, seq))
            except flight.FlightServerError as exc:
                with lock:
                    refused.append(str(exc))
                return  # a refused producer stops (its put was not acknowledged)
            except BaseException as exc:  # reported below
                errors.append(exc)
                return
            with lock:
                acked.add((name, seq))

    with ServiceProcess(str(root), "--flush-interval", "0.05") as service:
        threads = [threading.Thread(target=produce, args=(service, f"p{i}")) for i in range(3)]
        for t in threads:
            t.start()
        wait_for(lambda: len(acked) >= 6, "puts to be acknowledged")
        time.sleep(rng.uniform(0.1, 0.6))
        copy, before = copy_outside(root, "events", outside)
        aside = swap_for_link(root, "events", copy)
        wait_for(lambda: len(refused) + len(errors) == 3, "every producer to be refused")
        stop.set()
        for t in threads:
            t.join(60)
        assert not errors, errors
        client = service.client()
        with pytest.raises(flight.FlightServerError, match="is a symbolic link"):
            put(client, "events", "late", 0, rows("late", 0))
        assert refused and acked, (refused, acked)
        assert all("is a symbolic link" in r or "no table 'events'" in r for r in refused)

        def settled() -> bool:  # a flush that began before the swap has ended
            waiting = health(client)["tables"].get("events")
            return waiting is None or waiting["error"] is not None

        wait_for(settled, "a flush after the swap")
        committed = puts_in(cl.open_table(aside).to_arrow())
        waiting = health(client)["tables"].get("events", {"pending_puts": 0})
        assert set(committed) <= acked and set(committed.values()) <= {3}
        assert len(acked) - len(committed) == waiting["pending_puts"]
        if waiting["pending_puts"]:
            assert "is a symbolic link" in waiting["error"]
        assert files_of(copy) == before
        restore(root, "events", aside)
        wait_for(lambda: health(client)["status"] == "ok", "the waiting puts to flush")
        assert service.terminate() == 0
    assert puts_in(cl.open_table(root / "events").to_arrow()) == dict.fromkeys(acked, 3)
    assert files_of(copy) == before


def test_a_put_to_a_deleted_table_is_refused(root: Path) -> None:
    """The table's directory is deleted while the service runs: the next put is refused
    (not acknowledged), as are reads of it; the table created again takes puts again."""
    with ServiceProcess(str(root), "--flush-interval", "0.05") as service:
        client = service.client()
        put(client, "events", "p", 0, rows("p", 0))
        wait_for(lambda: health(client)["buffered_rows"] == {}, "the put to flush")
        shutil.rmtree(root / "events")
        with pytest.raises(flight.FlightServerError, match="not found: no table 'events'"):
            put(client, "events", "p", 1, rows("p", 1))
        with pytest.raises(flight.FlightServerError, match="not found: no table 'events'"):
            client.get_flight_info(flight.FlightDescriptor.for_path("events"))
        names = ["/".join(p.decode() for p in i.descriptor.path) for i in client.list_flights()]
        assert names == ["sales/eu"]
        assert health(client)["status"] == "ok"  # refused, so nothing waits
        cl.create_table(root / "events", SCHEMA)
        assert put(client, "events", "p", 1, rows("p", 1))["skipped"] is False
        assert service.terminate() == 0
    assert puts_in(cl.open_table(root / "events").to_arrow()) == {("p", 1): 3}


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("..", "relative directory reference"),
        ("events/..", "relative directory reference"),
        ("../root/events", "relative directory reference"),
        ("./events", "relative directory reference"),
        ("/etc", "not relative"),
        ("", "not relative"),
        ("events/", "is empty"),
        ("sales//eu", "is empty"),
        ("ev\x00ents", "control character"),
        ("ev\nents", "control character"),
        ("sales\\eu", "contains '\\\\\\\\'"),
        ("..\\..\\etc", "contains '\\\\\\\\'"),
        ("e" * 201, "more than 200"),
        ("/".join(["a"] * 17), "more than 16 parts"),
        ("\uff0e\uff0e", "compatibility characters are folded"),
        ("events\u202e", "U\\+202E"),
        ("ev\u200bents", "U\\+200B"),
        ("e\u0301vents", "composed form"),
        ("\ud800", "surrogate"),
    ],
)
def test_hostile_names_are_refused_before_any_file_access(name: str, why: str) -> None:
    with pytest.raises(TableNameError, match=why):
        name_parts(name)


def test_names_are_checked_at_every_access(root: Path, outside: Path) -> None:
    """The catalog refuses a link to the outside table however it is reached (the table
    itself, a directory on the way, its _carbonlite or segments), and finds a table created
    again at a name (another directory) anew."""
    catalog = Catalog(str(root))
    try:
        assert catalog.table("sales/eu").count_rows() == 0
        opened = catalog.table("sales/eu").path  # through /proc/self/fd/N: named as it is
        assert catalog.shown(f"at {opened}/x") == f"at {root}/sales/eu/x"
        os.symlink(outside, root / "link")
        os.symlink(root / "sales", root / "region")
        for name in ("link", "region/eu"):
            with pytest.raises(TableNameError, match="is a symbolic link"):
                catalog.table(name)
        shutil.rmtree(root / "sales" / "eu")
        with pytest.raises(cl.TableNotFoundError, match="no table 'sales/eu'"):
            catalog.table("sales/eu")
        cl.create_table(root / "sales" / "eu", SCHEMA).append(rows("x", 0))
        assert catalog.table("sales/eu").count_rows() == 3
        meta = root / "events" / "_carbonlite"
        os.rename(meta, root / "meta.aside")
        os.symlink(outside / "_carbonlite", meta)
        with pytest.raises(TableNameError, match="'_carbonlite' is a symbolic link"):
            catalog.table("events")
    finally:
        catalog.close()
