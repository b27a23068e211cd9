"""Property values at the edges: the largest count, size and duration a property may hold are
accepted, anything past them (or not a number) is a ``ValueError`` saying so, never an
``OverflowError`` or a value that breaks a later handoff or clean (issue 25)."""

from __future__ import annotations

import pytest

from carbonlite.properties import (
    MAX_BLOCKLET_ROWS,
    MAX_COUNT,
    MAX_SECONDS,
    PROPERTIES,
    parse_duration,
    parse_size,
)


def test_the_largest_values_are_accepted_exactly() -> None:
    assert parse_size(str(MAX_COUNT)) == MAX_COUNT
    assert parse_size("1.5k") == 1536 and parse_size("64 MB") == 64 * 1024**2
    assert parse_duration(str(MAX_SECONDS)) == float(MAX_SECONDS)
    assert PROPERTIES["checkpoint_interval"].parse(str(MAX_COUNT)) == MAX_COUNT
    assert PROPERTIES["handoff_blocklet_rows"].parse(str(MAX_BLOCKLET_ROWS)) == MAX_BLOCKLET_ROWS


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (parse_size, str(MAX_COUNT + 1), "largest size"),
        (parse_size, "9" * 400, "largest size"),
        (parse_size, "8 EB", "not a size"),
        (parse_duration, "9" * 400, "longest duration"),
        (parse_duration, f"{MAX_SECONDS}w", "longest duration"),
        (PROPERTIES["checkpoint_interval"].parse, str(MAX_COUNT + 1), "at most"),
        (PROPERTIES["checkpoint_interval"].parse, "1e3", "whole number"),
        (PROPERTIES["checkpoint_interval"].parse, "١٢", "whole number"),
        (PROPERTIES["compression_level"].parse, "high", "whole number"),
        (PROPERTIES["blocklet_max_rows"].parse, str(MAX_BLOCKLET_ROWS + 1), "32 bits"),
        (PROPERTIES["compaction_level_threshold"].parse, "4,x", "at least 2"),
    ],
)
def test_values_past_the_edges_are_refused(parse, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        parse(text)
