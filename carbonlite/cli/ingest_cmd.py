"""``carbonlite ingest kafka``: the Kafka ingester (``carbonlite/ingest/kafka.py``) as a command."""

from __future__ import annotations

import sys
import time

import typer

from carbonlite.cli.app import JSON_OPTION, STORAGE_OPTION, app, emit, err_console, fail_cleanly
from carbonlite.cli.values import seconds_of, storage_options_of
from carbonlite.errors import InvalidOptionError

ingest_app = typer.Typer(help="Ingest into a table without Spark.", no_args_is_help=True)
app.add_typer(ingest_app, name="ingest")


def _partitions(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(p) for p in text.split(",")]
    except ValueError:
        raise InvalidOptionError(
            f"--partitions {text!r} is not a comma-separated list of numbers such as 0,1,2"
        ) from None


@ingest_app.command("kafka")
@fail_cleanly
def kafka(
    path: str = typer.Argument(..., help="Table path or URI (the table must exist)."),
    bootstrap_servers: str = typer.Option(..., "--bootstrap-servers", help="HOST:PORT[,...]"),
    topic: str = typer.Option(..., "--topic", help="The topic to ingest."),
    partitions: str | None = typer.Option(
        None, "--partitions", help="Comma-separated partitions (default: all of the topic's)."
    ),
    format: str = typer.Option("json", "--format", help="Message format: json."),
    max_batch_rows: int = typer.Option(
        100_000, "--max-batch-rows", help="Rows per commit, at most."
    ),
    max_latency: str = typer.Option("1s", "--max-latency", help="Commit at least this often."),
    stop_at_end: bool = typer.Option(
        False, "--stop-at-end", help="Exit 0 once every partition is ingested to its end at start."
    ),
    bad_records: str | None = typer.Option(
        None, "--bad-records", help="Table for messages that do not decode (created if missing)."
    ),
    client: str = typer.Option(
        "auto",
        "--client",
        help="Kafka client: confluent-kafka, kafka-python, or auto (the first when installed).",
    ),
    connect_timeout: str = typer.Option(
        "10s",
        "--connect-timeout",
        help="Give up (exit 1) when no broker answers within this long.",
    ),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Ingest a Kafka topic into a table exactly once: each commit holds the rows and, in the
    same version, one transaction marker per partition (kafka:TOPIC:PARTITION = last offset),
    so a restart resumes after the last commit. Runs until SIGTERM (which finishes and commits
    the current batch) or, with --stop-at-end, until the topic's end at start."""
    from carbonlite.ingest import IngestResult, KafkaIngester

    options = storage_options_of(storage_options)
    started = time.monotonic()
    live = sys.stderr.isatty() and not as_json

    def show(result: IngestResult) -> None:
        if live:
            rate = result.rows / max(time.monotonic() - started, 1e-9)
            lag = " ".join(f"{p}:{n:,}" for p, n in sorted(result.lag.items())) or "-"
            err_console.print(
                f"\r{result.rows:,} rows, {result.commits:,} commits, {rate:,.0f} rows/s, "
                f"lag {lag}",
                end="",
            )

    ingester = KafkaIngester(
        path,
        bootstrap_servers=bootstrap_servers,
        topic=topic,
        partitions=_partitions(partitions),
        format=format,
        max_batch_rows=max_batch_rows,
        max_latency=seconds_of(max_latency, "--max-latency"),
        stop_at_end=stop_at_end,
        bad_records=bad_records,
        storage_options=options,
        client=client,  # type: ignore[arg-type]  # checked by the ingester
        connect_timeout=seconds_of(connect_timeout, "--connect-timeout"),
        progress=show,
    )
    result = ingester.run(handle_sigterm=True)
    if live:
        err_console.print()
    summary = {
        "rows": result.rows,
        "bad_records": result.bad_records,
        "commits": result.commits,
        "offsets": {str(p): o for p, o in sorted(result.offsets.items())},
        "restarts": result.restarts,
        "seconds": round(time.monotonic() - started, 3),
    }
    if as_json:
        emit(summary)
    else:
        offsets = ", ".join(f"{p}:{o}" for p, o in sorted(result.offsets.items())) or "none"
        print(
            f"ingested {result.rows:,} rows ({result.bad_records:,} bad records) from "
            f"{topic!r} in {result.commits:,} commits; last offsets {offsets}"
        )
