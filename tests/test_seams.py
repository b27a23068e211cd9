"""The seams registry (``carbonlite.seams``): every seam is placed, documented and named once."""

from __future__ import annotations

import re
import threading

import pytest

from carbonlite import seams
from tests.support import REPO

_REACH = re.compile(r"""reach\(\s*["']([a-z_.]+)["']\s*\)""")


def _placed() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted((REPO / "carbonlite").rglob("*.py")):
        for name in _REACH.findall(path.read_text()):
            found.setdefault(name, []).append(str(path.relative_to(REPO)))
    return found


def test_every_seam_is_placed_and_registered() -> None:
    placed = _placed()
    assert set(placed) == set(seams.SEAMS), (
        f"registered, never reached: {sorted(set(seams.SEAMS) - set(placed))}; "
        f"reached, not registered: {sorted(set(placed) - set(seams.SEAMS))}"
    )


def test_every_seam_is_documented_with_its_test() -> None:
    log_md = (REPO / "docs" / "LOG.md").read_text()
    section = log_md.split("### Seams", 1)[1].split("\n### ", 1)[0]
    missing = [name for name in seams.SEAMS if f"`{name}`" not in section]
    assert not missing, f"docs/LOG.md, Seams, does not list {missing}"
    assert "_TESTS" not in section, "a placeholder is left in docs/LOG.md's table of seams"


def test_a_seam_is_a_no_op_without_a_listener() -> None:
    seams.reach("commit.before_put")  # nothing listens: returns


def test_a_listener_hears_seams_and_unknown_names_are_refused() -> None:
    heard: list[tuple[str, str]] = []
    with seams.listening(lambda name: heard.append((name, threading.current_thread().name))):
        seams.reach("commit.after_put")
        with pytest.raises(KeyError, match="unknown seam"):
            seams.reach("commit.no_such_seam")
        with pytest.raises(RuntimeError, match="already installed"), seams.listening(print):
            pass
    seams.reach("commit.after_put")  # removed again
    assert heard == [("commit.after_put", threading.current_thread().name)]
