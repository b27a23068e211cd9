"""Commits that change only the table's metadata: columns, properties, the log format.

Each builds the new :class:`TableMetadata` from the snapshot it read and commits it as a
:class:`MetadataCommit`, which conflicts with any concurrent metadata change (two writers
that both change properties never silently drop one another's change).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from carbonlite._version import ENGINE
from carbonlite.clock import elapsed_ms, now_ms
from carbonlite.errors import InvalidOptionError
from carbonlite.iceberg.schema import check_iceberg_table
from carbonlite.metadata import (
    Action,
    CommitInfo,
    MetadataUnchanged,
    Requirement,
    Snapshot,
    TableMetadata,
)
from carbonlite.metadata.actions import BLOOM_FORMAT_VERSION
from carbonlite.metadata.columns import COLUMN_ID_FORMAT_VERSION, stamped
from carbonlite.properties import PROPERTIES, TableProperties, validate_properties
from carbonlite.writer.bloom_files import check_bloom_columns

__all__ = ["MetadataCommit", "with_properties", "without_properties"]


@dataclass(frozen=True, slots=True)
class MetadataCommit:
    """A metadata change: conflicts with any concurrent metadata change."""

    base: TableMetadata
    metadata: TableMetadata
    operation: str
    parameters: Mapping[str, str]
    started_ms: int | None = None
    writer_id: str | None = None

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        return (MetadataUnchanged(self.base),)

    def actions(self, snapshot: Snapshot, read_version: int) -> list[Action]:
        now = now_ms()
        return [
            stamped(self.metadata, snapshot.version + 1),
            CommitInfo(
                operation=self.operation,
                timestamp=now,
                data_change=False,
                read_version=read_version,
                parameters=dict(self.parameters),
                engine=ENGINE,
                files_added=0,
                files_removed=0,
                duration_ms=elapsed_ms(self.started_ms, now),
                writer_id=self.writer_id,
            ),
        ]


def with_properties(snapshot: Snapshot, properties: Mapping[str, str]) -> MetadataCommit | None:
    """``properties`` set (validated as at ``create_table``); None when nothing changes."""
    if not isinstance(properties, Mapping) or not properties:
        raise InvalidOptionError(
            "set_properties needs a non-empty mapping of property names to string values, "
            f"such as {{'checkpoint_interval': '50'}}, not {properties!r}"
        )
    checked = validate_properties(properties)
    merged = {**snapshot.properties, **checked}
    if merged == dict(snapshot.properties):
        return None
    check_bloom_columns(merged, snapshot.schema, where=snapshot.table_path)
    after = dataclasses.replace(snapshot.metadata, properties=merged)
    check_iceberg_table(after, snapshot.table_path)
    props = TableProperties(merged)
    if props.bloom_filter_columns or props.secondary_index_columns:  # came with format 7
        if after.format_version < COLUMN_ID_FORMAT_VERSION:
            raise InvalidOptionError(
                f"{snapshot.table_path!r} is of log format {after.format_version}; bloom filters "
                f"and secondary indexes need format {BLOOM_FORMAT_VERSION} and are set on "
                "tables of format "
                f"{COLUMN_ID_FORMAT_VERSION} or later: run `carbonlite upgrade` (Table.upgrade) "
                "first"
            )
        after = dataclasses.replace(
            after, format_version=max(after.format_version, BLOOM_FORMAT_VERSION)
        )
    return MetadataCommit(
        snapshot.metadata,
        after,
        operation="SET PROPERTIES",
        parameters={k: checked[k] for k in sorted(checked)},
    )


def without_properties(
    snapshot: Snapshot, keys: Iterable[str], *, missing_ok: bool, where: str
) -> MetadataCommit | None:
    """``keys`` removed (so their defaults apply again); None when nothing changes."""
    if isinstance(keys, str):
        keys = [keys]
    keys = list(keys) if isinstance(keys, Iterable) and not isinstance(keys, Mapping) else []
    if not keys or not all(isinstance(k, str) for k in keys):
        raise InvalidOptionError(f"unset_properties needs a list of property names, not {keys!r}")
    unknown = sorted(k for k in keys if k not in PROPERTIES and not k.startswith("user."))
    if unknown:
        raise InvalidOptionError(
            f"{unknown} are not table properties (custom keys start with 'user.'); known ones: "
            f"{sorted(PROPERTIES)}"
        )
    absent = sorted(k for k in keys if k not in snapshot.properties)
    if absent and not missing_ok:
        raise InvalidOptionError(
            f"{absent} are not set on {where!r} (set: {sorted(snapshot.properties)}); pass "
            "missing_ok=True (CLI: --missing-ok) to let keys that are not set pass"
        )
    remaining = {k: v for k, v in snapshot.properties.items() if k not in keys}
    if remaining == dict(snapshot.properties):
        return None
    return MetadataCommit(
        snapshot.metadata,
        dataclasses.replace(snapshot.metadata, properties=remaining),
        operation="UNSET PROPERTIES",
        parameters={"keys": ",".join(sorted(set(keys) - set(absent)))},
    )
