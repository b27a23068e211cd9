"""Offsets of the stream sources: positions in a table's log, as the JSON Spark checkpoints.

``{"version": 7, "index": 2, "blocklet": 3, "row": 500, "initial": false, "table_id":
"9f0c...", "start": {"version": 5, "initial": true}}``: everything before unit 2 of version 7
has been delivered, the first 3 blocklets of unit 2, and the first 500 rows of its blocklet 3
(``row`` is written only when it is not 0; with ``initial``, the units are the files of
the snapshot at that version, the stream's starting snapshot; otherwise the ranges that
version appended). ``table_id`` names the table the position is in, and ``start`` is where the
query started (its initial offset), carried by every later offset so that a batch planned
from one answer of ``initialOffset`` is never read from another (docs/SPARK.md, "The stream
source").

Offsets written by older versions lack ``row`` and ``blocklet`` (read as 0), ``table_id`` and
``start`` (read as unknown: not checked); they are accepted as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from carbonlite.errors import CarbonLiteError, InvalidOptionError, TableIdMismatchError

__all__ = ["Position", "StreamOffset", "batch_range", "read_offset"]


class Position(NamedTuple):
    """Everything before unit ``unit`` of version ``version`` (of its starting snapshot when
    ``initial``) has been delivered, the first ``blocklet`` blocklets of that unit, and the
    first ``row`` rows of the blocklet after them."""

    version: int
    unit: int
    blocklet: int
    initial: bool
    row: int = 0


@dataclass(frozen=True)
class StreamOffset:
    """A position, the table it is a position in, and where the query started."""

    position: Position
    table_id: str | None
    """The table's id; None in offsets written before offsets named their table."""
    start: Position | None
    """The query's initial offset (unit, blocklet and row 0); None in older offsets."""

    def at(self, position: Position) -> StreamOffset:
        """The same query's offset at ``position``."""
        return StreamOffset(position, self.table_id, self.start)

    def to_json(self) -> dict[str, Any]:
        version, unit, blocklet, initial, row = self.position
        out: dict[str, Any] = {
            "version": version,
            "index": unit,
            "blocklet": blocklet,
            "initial": initial,
        }
        if row:
            # only when set: an offset at a blocklet's start reads as older versions wrote it
            out["row"] = row
        if self.table_id is not None:
            out["table_id"] = self.table_id
        if self.start is not None:
            out["start"] = {"version": self.start.version, "initial": self.start.initial}
        return out


def read_offset(offset: dict[str, Any], table_id: str, where: str) -> StreamOffset:
    """``offset`` (as Spark hands it back) for the table ``table_id`` at ``where``; raises
    :class:`TableIdMismatchError` when it names another table."""
    try:
        position = Position(
            int(offset["version"]),
            int(offset["index"]),
            int(offset.get("blocklet", 0)),
            bool(offset.get("initial", False)),
            int(offset.get("row", 0)),
        )
        named = offset.get("table_id")
        start = offset.get("start")
        begin = (
            None if start is None else Position(int(start["version"]), 0, 0, bool(start["initial"]))
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        raise InvalidOptionError(f"not a CarbonLite stream offset: {offset!r}") from None
    if named is not None and named != table_id:
        raise TableIdMismatchError(
            f"the stream's checkpoint was made reading the table with id {named}, but {where} "
            f"now holds the table with id {table_id}: the table was deleted and re-created, or "
            "the query now reads another table, and the checkpoint's offsets mean nothing in "
            "it. Start the query with a new checkpointLocation (it starts over: the table's "
            "snapshot at that moment, or startingVersion/startingTimestamp), or read the table "
            f"with id {named} again",
            checkpoint_table_id=str(named),
            table_id=table_id,
        )
    return StreamOffset(position, None if named is None else str(named), begin)


def batch_range(start: StreamOffset, end: StreamOffset) -> tuple[Position, Position]:
    """The positions a batch reads between. Spark asks ``initialOffset`` again when it plans
    batch 0's partitions, and a restarted query replaying batch 0 asks a new reader: when that
    answer is another start than the one the batch's end was planned from, the batch starts
    where the end says."""
    if start.start is None or end.start is None or start.start == end.start:
        return start.position, end.position
    if start.position != start.start:
        raise CarbonLiteError(
            f"a stream batch from {start.to_json()} to {end.to_json()} mixes two queries' "
            "offsets (their starts differ); the checkpoint was changed by hand?"
        )
    return end.start, end.position
