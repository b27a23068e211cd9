"""Where a test's tables live: a local directory, or an S3 bucket on the session's moto server.

Tests that take the ``place`` fixture (tests/conftest.py) run once on each.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import carbonlite as cl
from carbonlite.writer.lease import LEASE_DIR, read_leases
from tests.support.tables import EVENTS


@dataclass
class Place:
    kind: str
    base: str
    storage_options: dict[str, Any] | None

    def uri(self, name: str) -> str:
        return f"{self.base}/{name}"

    def create(self, name: str, **kwargs: Any) -> cl.Table:
        return cl.create_table(
            self.uri(name), EVENTS, storage_options=self.storage_options, **kwargs
        )

    def open(self, name: str, **kwargs: Any) -> cl.Table:
        return cl.open_table(self.uri(name), storage_options=self.storage_options, **kwargs)


def expire_leases(table: cl.Table) -> int:
    """What the passing of a lease term does (writer/lease.py): every lease record of
    ``table`` now lies in the past. Returns how many there were."""
    leases, _ = read_leases(table.storage, table.root)
    for lease in leases:
        path = table.storage.join(table.root, LEASE_DIR, f"{lease.lease_id}.json")
        table.storage.put(path, replace(lease, expires_ms=lease.expires_ms - 10**9).to_json())
    return len(leases)
