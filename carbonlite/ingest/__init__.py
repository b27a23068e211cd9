"""Ingestion without Spark: a Kafka ingester committing offsets with the data, and a file
ingester committing the record of the files it read with their rows.

    from carbonlite.ingest import KafkaIngester
    KafkaIngester("/data/events", bootstrap_servers="127.0.0.1:9092", topic="events",
                  stop_at_end=True).run()

See ``carbonlite/ingest/kafka.py`` and docs/INGEST.md. Needs a Kafka client
(``pip install 'carbonlite[kafka]'``), imported only when an ingester is made.
"""

from __future__ import annotations

from carbonlite.ingest.files import FileIngester, FileIngestResult
from carbonlite.ingest.kafka import IngestError, IngestResult, KafkaIngester, app_id

__all__ = [
    "FileIngestResult",
    "FileIngester",
    "IngestError",
    "IngestResult",
    "KafkaIngester",
    "app_id",
]
