"""Schema changes that move a column under a name a writer still holds (issue 38 §2): the
values acknowledged for ``a`` must never land in the column that has the name now."""

from __future__ import annotations

import pyarrow as pa

import carbonlite as cl


def drop_and_add_again(t: cl.Table) -> None:
    """``a`` dropped, then a new string column ``a`` added (another column id)."""
    t.drop_columns(["a"])
    t.add_columns(pa.field("a", pa.string()))


def swap_by_renames(t: cl.Table) -> None:
    """``a`` and ``b`` swap names (a -> tmp, b -> a, tmp -> b)."""
    t.rename_column("a", "tmp")
    t.rename_column("b", "a")
    t.rename_column("tmp", "b")
