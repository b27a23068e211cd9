"""The ingest and query service: every table under a directory over Arrow Flight
(``carbonlite serve``; docs/SERVE.md).

- ``catalog.py``: table names under the root, checked so none escapes it.
- ``records.py``: the JSON clients send, the service's tickets, and its log records.
- ``wal.py``: the write-ahead log, with group commit.
- ``buffer.py``: acknowledged puts in memory until they are committed, readable at once.
- ``service.py``: the Flight server and its flusher.

``pyarrow.flight`` ships in the pyarrow wheel; importing :mod:`carbonlite` does not import it.
"""
