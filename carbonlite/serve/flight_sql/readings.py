"""What a query reads of each table: one committed version and, as the service's own reads
do, the rows acknowledged to producers that this version lacks (still in memory), so a put's
rows are in every query planned after its acknowledgement.

:func:`plan_readings` fixes them when a ticket is made: the buffer's mark first, then each
table's latest version and its markers of the producers with puts in memory (as
``FlightService._plan`` does), and each producer's last sequence in memory then: a put
acknowledged after the ticket was made is not in its result (one snapshot per query).
:func:`memory_rows` gets those rows again when the ticket is run; if some have left memory since (committed, then dropped after a while), the query is
refused and must be planned again (:class:`~carbonlite.serve.buffer.StaleReadError`). A
primary-key table's puts in memory are upserts: it is read committed only, as by DoGet.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import pyarrow as pa

from carbonlite.errors import CarbonLiteError
from carbonlite.serve.buffer import Buffer, Mark, StaleReadError, marker_of
from carbonlite.serve.catalog import Catalog
from carbonlite.serve.conform import held_rows
from carbonlite.table import Table

__all__ = ["Reading", "memory_rows", "plan_readings"]

log = logging.getLogger("carbonlite.serve")
_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class Reading:
    """One table as a query reads it."""

    version: int
    markers: dict[str, int | None] | None = None
    """The version's markers of the producers with puts in memory (None: committed rows
    only)."""
    through: dict[str, int] | None = None
    """Each producer's last sequence in memory when the reading was made."""


def _reading(buffer: Buffer | None, name: str, table: Table) -> Reading:
    snap = table.snapshot()
    if buffer is None or table.primary_key:
        return Reading(snap.version)
    markers = {p: snap.txns.get(marker_of(p)) for p in buffer.producers(name)}
    return Reading(snap.version, markers)


def plan_readings(
    catalog: Catalog, buffer: Buffer | None
) -> tuple[dict[str, tuple[Table, Reading]], Mark | None]:
    """Every table the service can open (a damaged one is left out, as ListFlights does), at
    its latest version, and the buffer's mark taken before those versions were read."""
    for attempt in range(_ATTEMPTS):
        mark = buffer.mark() if buffer is not None else None  # before the versions
        out: dict[str, tuple[Table, Reading]] = {}
        for name in catalog.names():
            try:
                table = catalog.table(name)
                out[name] = (table, _reading(buffer, name, table))
            except (CarbonLiteError, OSError, pa.ArrowException) as exc:
                log.debug("Flight SQL leaves out table %r: %s", name, exc)
        try:
            for name, (table, reading) in out.items():
                if buffer is not None and mark is not None and reading.markers is not None:
                    puts = buffer.puts_after(name, reading.markers, mark)
                    through: dict[str, int] = {}
                    for p in puts:
                        through[p.producer_id] = max(through.get(p.producer_id, -1), p.sequence)
                    out[name] = (table, replace(reading, through=through))
        except StaleReadError:
            if attempt + 1 == _ATTEMPTS:
                raise
            continue  # rows left memory while the versions were read: again
        return out, mark
    raise AssertionError("unreachable")


def memory_rows(
    buffer: Buffer | None, name: str, table: Table, reading: Reading, mark: Mark | None
) -> pa.Table | None:
    """The rows acknowledged for ``name`` that ``reading``'s version lacks, in that
    version's schema (by column name; a column the puts lack is null); None when none."""
    if buffer is None or mark is None or reading.markers is None or not reading.through:
        return None
    through = reading.through
    puts = [
        p
        for p in buffer.puts_after(name, reading.markers, mark)
        if p.sequence <= through.get(p.producer_id, -1)
    ]
    if not puts:
        return None
    latest = table.snapshot().metadata
    schema = table.snapshot(reading.version).schema
    parts = []
    for put in puts:
        where = f"put {put.sequence} of producer {put.producer_id!r} to table {name!r}"
        rows = held_rows(put.rows, put.column_ids, latest, where)
        columns = [
            rows.column(f.name).cast(f.type)
            if f.name in rows.schema.names
            else pa.nulls(rows.num_rows, f.type)
            for f in schema
        ]
        parts.append(pa.Table.from_arrays(columns, schema=schema))
    return pa.concat_tables(parts)
