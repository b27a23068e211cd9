"""The ingest and query service: every table under a directory over Arrow Flight
(``carbonlite serve``; docs/SERVE.md).

- ``catalog.py``: table names under the root, and every access checked so none escapes it.
- ``wire.py``: the limits and schema checks of the JSON clients send.
- ``records.py``: the JSON clients send, the service's tickets, and its log records.
- ``conform.py``: a put's rows in the table's columns, by name when taken, by column id after.
- ``wal.py``: the write-ahead log, with group commit.
- ``buffer.py``: acknowledged puts in memory until they are committed, readable at once.
- ``flusher.py``: commits the buffered puts table by table, releases the log.
- ``health.py``: what the healthcheck action reports.
- ``answers.py``: every failure as a one-line Flight error.
- ``address.py``: where the service listens, checked before it starts.
- ``service.py``: the Flight server.

``pyarrow.flight`` ships in the pyarrow wheel; importing :mod:`carbonlite` does not import it.
"""
